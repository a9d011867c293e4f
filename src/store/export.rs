//! Export and import of a whole store (`budgetd export`, `budgetd import`).

use async_trait::async_trait;
use serde::Serialize;

use super::StoreResult;

/// How a column is read and written by export/import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    Text,
    Int,
}

/// One exported table: its name and columns, in the order they are written.
#[derive(Debug, Clone, Copy)]
pub struct ExportTable {
    pub name: &'static str,
    pub columns: &'static [(&'static str, ColumnKind)],
    /// An identity / AUTOINCREMENT `id` column whose sequence must follow the imported ids.
    pub identity: bool,
}

/// `format` of an export document.
pub const EXPORT_FORMAT: &str = "budgetd-export/1";

/// Every table `budgetd export` writes, in an order that satisfies the foreign keys
/// (idempotency keys are not exported: they are short-lived and tied to live clients).
pub const EXPORT_TABLES: &[ExportTable] = {
    use ColumnKind::{Int as I, Text as T};
    &[
        ExportTable {
            name: "chains",
            columns: &[("name", T), ("created_at", T), ("updated_at", T)],
            identity: false,
        },
        ExportTable {
            name: "topology_versions",
            columns: &[
                ("chain", T),
                ("version", I),
                ("document", T),
                ("sha256", T),
                ("created_at", T),
                ("created_by", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "runs",
            columns: &[
                ("id", T),
                ("chain", T),
                ("topology_version", I),
                ("format", T),
                ("tool", T),
                ("note", T),
                ("source_sha256", T),
                ("source_size", I),
                ("data", T),
                ("uploaded_by", T),
                ("created_at", T),
                ("sources", T),
                ("mapping", T),
                ("uploaded_by_owner", T),
                ("distributions", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "baselines",
            columns: &[
                ("id", T),
                ("chain", T),
                ("run_id", T),
                ("topology_version", I),
                ("state", T),
                ("reason", T),
                ("has_errors", I),
                ("sha256", T),
                ("created_at", T),
                ("created_by", T),
                ("updated_at", T),
                ("superseded_by", T),
                ("chain_seq", I),
                ("document_behind", I),
            ],
            identity: false,
        },
        ExportTable {
            name: "baseline_documents",
            columns: &[("baseline_id", T), ("document", T)],
            identity: false,
        },
        ExportTable {
            name: "publications",
            columns: &[
                ("revision", I),
                ("chain", T),
                ("baseline_id", T),
                ("kind", T),
                ("created_by", T),
                ("created_at", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "approvals",
            columns: &[
                ("id", I),
                ("baseline_id", T),
                ("decision", T),
                ("actor", T),
                ("comment", T),
                ("created_at", T),
            ],
            identity: true,
        },
        ExportTable {
            name: "audit_log",
            columns: &[
                ("id", I),
                ("at", T),
                ("actor", T),
                ("action", T),
                ("chain", T),
                ("subject", T),
                ("detail", T),
            ],
            identity: true,
        },
        ExportTable {
            name: "api_tokens",
            columns: &[
                ("name", T),
                ("role", T),
                ("token_hash", T),
                ("created_at", T),
                ("created_by", T),
                ("owner", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "counters",
            columns: &[("scope", T), ("n", I)],
            identity: false,
        },
        ExportTable {
            name: "archive_outbox",
            columns: &[
                ("id", I),
                ("baseline_id", T),
                ("object_key", T),
                ("body", T),
                ("sha256", T),
                ("state", T),
                ("attempts", I),
                ("last_error", T),
                ("next_attempt_at", T),
                ("locked_until", T),
                ("created_at", T),
                ("archived_at", T),
            ],
            identity: true,
        },
        ExportTable {
            name: "releases",
            columns: &[
                ("id", I),
                ("service", T),
                ("version", T),
                ("baseline_id", T),
                ("baseline_sha256", T),
                ("ticket", T),
                ("created_by", T),
                ("created_at", T),
            ],
            identity: true,
        },
        ExportTable {
            name: "agents",
            columns: &[
                ("agent_id", T),
                ("service", T),
                ("labels", T),
                ("chains", T),
                ("replica", T),
                ("connected", I),
                ("delivered", I),
                ("acked", I),
                ("nack_revision", I),
                ("nack_error", T),
                ("first_seen", T),
                ("last_seen", T),
                ("token_hash", T),
                ("process", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "rollouts",
            columns: &[
                ("baseline_id", T),
                ("chain", T),
                ("revision", I),
                ("previous_baseline_id", T),
                ("previous_revision", I),
                ("selector", T),
                ("bake_s", I),
                ("auto", I),
                ("state", T),
                ("started_at", T),
                ("started_by", T),
                ("bake_ends_at", T),
                ("ended_at", T),
                ("ended_by", T),
                ("reason", T),
                ("end_revision", I),
                ("figures", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "canary_nacks",
            columns: &[("baseline_id", T), ("agent_id", T), ("error", T), ("at", T)],
            identity: false,
        },
    ]
};

/// Tables added after the first export format, with the schema version that added them: an
/// export from an older schema lacks them, and imports none of their rows. (Canary health,
/// like report rollups, is runtime data and not exported.)
pub const ADDED_TABLES: &[(&str, i64)] = &[("rollouts", 11), ("canary_nacks", 11)];

/// The schema version from which a baseline's document has a table of its own
/// (`baseline_documents`); an export from before holds it in the `document` column of
/// `baselines`, from which an import takes it.
pub const DOCUMENTS_TABLE_VERSION: i64 = 13;

/// Columns added after the first export format, with the schema version that added them: an
/// export from an older schema lacks them and imports them as null (which the store reads as
/// the old meaning: a token's owner is its name, a run's uploader owner the token name, an
/// agent unbound or shown as written, a superseded baseline without its link, a stored document
/// current).
pub const ADDED_COLUMNS: &[(&str, &str, i64)] = &[
    ("runs", "uploaded_by_owner", 5),
    ("api_tokens", "owner", 5),
    ("agents", "token_hash", 5),
    ("baselines", "superseded_by", 9),
    ("baselines", "chain_seq", 9),
    ("runs", "distributions", 12),
    ("baselines", "document_behind", 13),
    ("agents", "process", 15),
];

/// A whole-store export as read back: what `export_all` writes.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Export {
    /// [`EXPORT_FORMAT`].
    pub format: String,
    /// The newest migration applied to the exported store.
    pub schema_version: i64,
    pub exported_at: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    pub tables: std::collections::BTreeMap<String, ExportedTable>,
}

/// One table of an [`Export`]: column names and rows (one JSON value per column: a string,
/// an integer or null).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ExportedTable {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
}

/// Rows per table, as exported or imported.
pub type TableCounts = Vec<(&'static str, u64)>;

/// Called with a table name and how many of its rows are done so far (progress reports).
pub type Progress<'a> = &'a (dyn Fn(&str, u64) + Send + Sync);

/// A whole store as one JSON document, out and back in.
#[async_trait]
pub trait ExportImport: Send + Sync {
    /// Writes every table of [`EXPORT_TABLES`] to `out` as one [`Export`] JSON document, from
    /// one consistent snapshot, row by row (never the whole store in memory).
    async fn export_all(
        &self,
        out: &mut (dyn std::io::Write + Send),
        progress: Progress<'_>,
    ) -> StoreResult<TableCounts>;

    /// Loads an [`Export`] into this store in one transaction, keeping ids, revisions and
    /// counters; identity sequences continue after the imported ids. `Conflict` when the
    /// store is not empty.
    async fn import_all(&self, export: &Export, progress: Progress<'_>)
        -> StoreResult<TableCounts>;
}
