//! [`ExportImport`] over SQL: the whole store as one JSON document, streamed out row by row
//! from one snapshot, and loaded back in one transaction.

use async_trait::async_trait;
use budget_core::baseline::BaselineDocument;
use sqlx::Row;

use super::rows::{document_from_row, export_row};
use super::{internal, SqlStore, Tx};
use crate::store::{
    Backend, ColumnKind, Export, ExportImport, Progress, StoreError, StoreResult, TableCounts,
    ADDED_COLUMNS, ADDED_TABLES, DOCUMENTS_TABLE_VERSION, EXPORT_FORMAT, EXPORT_TABLES,
};

#[async_trait]
impl ExportImport for SqlStore {
    async fn export_all(
        &self,
        out: &mut (dyn std::io::Write + Send),
        progress: Progress<'_>,
    ) -> StoreResult<TableCounts> {
        use futures_util::TryStreamExt as _;
        let mut tx = self.begin_read().await?;
        if self.backend == Backend::Postgres {
            // One snapshot for every table.
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await?;
        }
        // On SQLite the read transaction's snapshot starts here.
        let schema_version = schema_version(&mut tx).await?;
        let head = serde_json::json!({
            "format": EXPORT_FORMAT,
            "schema_version": schema_version,
            "exported_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "backend": self.backend.as_str(),
        })
        .to_string();
        // `{"format":…,"backend":"…"}` → `{"format":…,"backend":"…","tables":{`
        let head = head.strip_suffix('}').unwrap_or(&head);
        write_out(out, format!("{head},\"tables\":{{").as_bytes())?;
        let mut counts = TableCounts::new();
        for (i, table) in EXPORT_TABLES.iter().enumerate() {
            let names: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
            write_out(
                out,
                format!(
                    "{}\n{}:{{\"columns\":{},\"rows\":[",
                    if i == 0 { "" } else { "," },
                    serde_json::Value::from(table.name),
                    serde_json::Value::from(names.clone())
                )
                .as_bytes(),
            )?;
            let order = if table.name == "topology_versions" {
                "chain, version"
            } else {
                names[0]
            };
            let sql = if table.name == "agents" {
                // An agent's revisions are its cohort's when it follows one (cohorts are
                // runtime data, not exported: an imported agent follows none).
                let columns: Vec<String> = names
                    .iter()
                    .map(|c| match *c {
                        "delivered" | "acked" => format!("COALESCE(c.{c}, agents.{c}) AS {c}"),
                        c => format!("agents.{c}"),
                    })
                    .collect();
                format!(
                    "SELECT {} FROM agents LEFT JOIN agent_cohorts c ON c.id = agents.cohort \
                     ORDER BY agents.{order}",
                    columns.join(", ")
                )
            } else {
                format!(
                    "SELECT {} FROM {} ORDER BY {order}",
                    names.join(", "),
                    table.name
                )
            };
            let mut rows = sqlx::query(&sql).fetch(&mut *tx);
            let mut n = 0u64;
            while let Some(row) = rows.try_next().await? {
                let values = export_row(&row, table)?;
                write_out(out, if n == 0 { b"\n" } else { b",\n" })?;
                serde_json::to_writer(&mut *out, &values).map_err(internal)?;
                n += 1;
                if n % 10_000 == 0 {
                    progress(table.name, n);
                }
            }
            drop(rows);
            write_out(out, b"]}")?;
            progress(table.name, n);
            counts.push((table.name, n));
        }
        write_out(out, b"\n}}\n")?;
        out.flush().map_err(internal)?;
        tx.rollback().await?;
        Ok(counts)
    }

    async fn import_all(
        &self,
        export: &Export,
        progress: Progress<'_>,
    ) -> StoreResult<TableCounts> {
        let invalid = |msg: String| StoreError::Conflict(format!("invalid export: {msg}"));
        if export.format != EXPORT_FORMAT {
            return Err(invalid(format!(
                "format is {:?}, expected {EXPORT_FORMAT:?}",
                export.format
            )));
        }
        if let Some(unknown) = export
            .tables
            .keys()
            .find(|k| !EXPORT_TABLES.iter().any(|t| t.name == k.as_str()))
        {
            return Err(invalid(format!("unknown table {unknown:?}")));
        }
        let mut tx = self.begin().await?;
        let local_version = schema_version(&mut tx).await?;
        if export.schema_version > local_version {
            return Err(invalid(format!(
                "it was written by a newer budgetd (schema version {}, this one has {local_version}); upgrade budgetd first",
                export.schema_version
            )));
        }
        // Only into an empty store: ids, revisions and counters are kept as they are.
        let every = EXPORT_TABLES
            .iter()
            .map(|t| t.name)
            .chain(["idempotency_keys"]);
        for name in every {
            let n: i64 = sqlx::query(&format!("SELECT COUNT(*) FROM {name}"))
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?;
            if n > 0 {
                return Err(StoreError::Conflict(format!(
                    "the target store is not empty (table {name} has {n} row(s)); import only into a new, empty database, before any server has started on it"
                )));
            }
        }
        let mut counts = TableCounts::new();
        for table in EXPORT_TABLES {
            let added_later = ADDED_TABLES
                .iter()
                .any(|(t, version)| *t == table.name && export.schema_version < *version);
            // Before the documents' own table, each was the `document` of its baseline's row.
            let documents_in_baselines = export.schema_version < DOCUMENTS_TABLE_VERSION;
            let from_baselines = documents_in_baselines && table.name == "baseline_documents";
            let data = match export.tables.get(table.name) {
                Some(data) if !from_baselines => data,
                _ if from_baselines => export
                    .tables
                    .get("baselines")
                    .ok_or_else(|| invalid("table \"baselines\" is missing".to_owned()))?,
                // A table added after the export's schema version: nothing to import.
                None if added_later => {
                    counts.push((table.name, 0));
                    continue;
                }
                _ => return Err(invalid(format!("table {:?} is missing", table.name))),
            };
            // Where each of our columns is in the export's rows; none for a column added after
            // the export's schema version (imported as null).
            let mut positions = Vec::with_capacity(table.columns.len());
            for (column, _) in table.columns {
                let source = match *column {
                    "baseline_id" if from_baselines => "id",
                    column => column,
                };
                let at = data.columns.iter().position(|c| c == source);
                let added_later = ADDED_COLUMNS.iter().any(|(t, c, version)| {
                    *t == table.name && c == column && export.schema_version < *version
                });
                if at.is_none() && !added_later {
                    let name = if from_baselines {
                        "baselines"
                    } else {
                        table.name
                    };
                    return Err(invalid(format!("table {name:?} lacks column {source:?}")));
                }
                positions.push(at);
            }
            let moved =
                |c: &str| documents_in_baselines && table.name == "baselines" && c == "document";
            if let Some(extra) = data.columns.iter().find(|c| {
                !from_baselines && !moved(c) && !table.columns.iter().any(|(k, _)| k == *c)
            }) {
                return Err(invalid(format!(
                    "table {:?} has an unknown column {extra:?}",
                    table.name
                )));
            }
            if table.name == "baseline_documents" && !from_baselines {
                documents_have_baselines(export, data, positions[0]).map_err(invalid)?;
            }
            let names: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
            let overriding = if self.backend == Backend::Postgres && table.identity {
                " OVERRIDING SYSTEM VALUE"
            } else {
                ""
            };
            let width = table.columns.len();
            let per_statement = (900 / width).max(1);
            let mut n = 0u64;
            for chunk in data.rows.chunks(per_statement) {
                let tuples: Vec<String> = (0..chunk.len())
                    .map(|r| {
                        let params: Vec<String> =
                            (1..=width).map(|c| format!("${}", r * width + c)).collect();
                        format!("({})", params.join(", "))
                    })
                    .collect();
                let sql = format!(
                    "INSERT INTO {} ({}){overriding} VALUES {}",
                    table.name,
                    names.join(", "),
                    tuples.join(", ")
                );
                let mut query = sqlx::query(&sql);
                for (r, row) in chunk.iter().enumerate() {
                    if row.len() != data.columns.len() {
                        return Err(invalid(format!(
                            "row {} of table {:?} has {} values for {} columns",
                            n + r as u64 + 1,
                            table.name,
                            row.len(),
                            data.columns.len()
                        )));
                    }
                    for ((column, kind), at) in table.columns.iter().zip(&positions) {
                        let value = at.map_or(&serde_json::Value::Null, |at| &row[at]);
                        let bad = || {
                            invalid(format!(
                                "row {} of table {:?}: column {column:?} holds {value}",
                                n + r as u64 + 1,
                                table.name
                            ))
                        };
                        query = match (kind, value) {
                            (ColumnKind::Text, serde_json::Value::Null) => {
                                query.bind(None::<String>)
                            }
                            (ColumnKind::Text, serde_json::Value::String(s)) => {
                                query.bind(Some(s.clone()))
                            }
                            (ColumnKind::Int, serde_json::Value::Null) => query.bind(None::<i64>),
                            (ColumnKind::Int, serde_json::Value::Number(x)) => {
                                query.bind(Some(x.as_i64().ok_or_else(bad)?))
                            }
                            _ => return Err(bad()),
                        };
                    }
                }
                query.execute(&mut *tx).await?;
                n += chunk.len() as u64;
                if n % 10_000 < chunk.len() as u64 {
                    progress(table.name, n);
                }
            }
            if overriding.is_empty() {
                // SQLite: inserting explicit ids moves sqlite_sequence to the largest one.
            } else {
                // PostgreSQL: the identity sequence continues after the largest imported id.
                sqlx::query(&format!(
                    "SELECT setval(pg_get_serial_sequence('{0}', 'id'), \
                     (SELECT COALESCE(MAX(id), 0) + 1 FROM {0}), false)",
                    table.name
                ))
                .execute(&mut *tx)
                .await?;
            }
            progress(table.name, n);
            counts.push((table.name, n));
        }
        // Every baseline has its document (a table of its own since schema version 13).
        let bare: Option<String> = sqlx::query_scalar(
            "SELECT b.id FROM baselines b WHERE NOT EXISTS (SELECT 1 FROM baseline_documents d \
             WHERE d.baseline_id = b.id AND d.document <> '') ORDER BY b.id LIMIT 1",
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(id) = bare {
            return Err(invalid(format!("baseline {id:?} has no document")));
        }
        // And each document, rendered as the store serves it, is a baseline document of its
        // own id (not a 500 on every read later) whose SHA-256 is the baseline's: releases and
        // the archive cite that digest, so an edited document is refused, not served under it.
        {
            use futures_util::TryStreamExt as _;
            let mut rows = sqlx::query(
                "SELECT b.id, b.sha256, d.document, b.state, b.superseded_by, b.document_behind \
                 FROM baselines b JOIN baseline_documents d ON d.baseline_id = b.id ORDER BY b.id",
            )
            .fetch(&mut *tx);
            while let Some(row) = rows.try_next().await? {
                let id: String = row.try_get("id")?;
                let bad = |why: String| invalid(format!("the document of baseline {id:?} {why}"));
                let bytes =
                    document_from_row(&row).map_err(|e| bad(format!("cannot be read: {e}")))?;
                let doc: BaselineDocument = serde_json::from_str(&bytes)
                    .map_err(|e| bad(format!("is not a baseline document: {e}")))?;
                if doc.id != id {
                    return Err(bad(format!("holds the id {:?}", doc.id)));
                }
                let recorded: String = row.try_get("sha256")?;
                let digest = super::sha256_hex(bytes.as_bytes());
                if digest != recorded {
                    return Err(bad(format!(
                        "does not match the baseline's SHA-256: it hashes to {digest}, the baseline records {recorded} (edited after the export?)"
                    )));
                }
            }
        }
        tx.commit().await?;
        Ok(counts)
    }
}

/// Every row of an export's `baseline_documents` (its `baseline_id` at `at`) belongs to one of
/// its baselines.
fn documents_have_baselines(
    export: &Export,
    documents: &crate::store::ExportedTable,
    at: Option<usize>,
) -> Result<(), String> {
    let baselines = export
        .tables
        .get("baselines")
        .ok_or("table \"baselines\" is missing")?;
    let id_at = baselines.columns.iter().position(|c| c == "id");
    let ids: std::collections::HashSet<&str> = baselines
        .rows
        .iter()
        .filter_map(|row| row.get(id_at?)?.as_str())
        .collect();
    for (n, row) in documents.rows.iter().enumerate() {
        let id = at.and_then(|at| row.get(at));
        if !id
            .and_then(|id| id.as_str())
            .is_some_and(|id| ids.contains(id))
        {
            return Err(format!(
                "row {} of table \"baseline_documents\": baseline_id {} is not a baseline of the export",
                n + 1,
                id.unwrap_or(&serde_json::Value::Null)
            ));
        }
    }
    Ok(())
}

/// The newest migration applied to the store.
async fn schema_version(tx: &mut Tx) -> StoreResult<i64> {
    Ok(
        sqlx::query("SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations")
            .fetch_one(&mut **tx)
            .await?
            .try_get(0)?,
    )
}

fn write_out(out: &mut (dyn std::io::Write + Send), bytes: &[u8]) -> StoreResult<()> {
    out.write_all(bytes)
        .map_err(|e| internal(anyhow::Error::new(e).context("failed to write the export")))
}
