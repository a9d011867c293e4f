//! Rows to store types: the columns each mapper reads, and the mapper, apart from the queries
//! that select them.

use budget_api::archive::ArchiveUpload;
use budget_api::audit::AuditEntry;
use budget_api::baselines::BaselineSummary;
use budget_api::chains::{ChainSummary, TopologyVersion};
use budget_api::releases::Release;
use budget_core::baseline::{BaselineDocument, BaselineState, Restate};
use budget_core::RunData;
use sqlx::any::AnyRow;
use sqlx::{FromRow, Row};

use super::internal;
use crate::auth::Role;
use crate::store::{
    AgentStatus, ColumnKind, ExportTable, OutboxItem, Publication, StoreResult, StoredBaseline,
    StoredRun, TokenRecord,
};

/// The columns of a [`StoredBaseline`], read by name by [`baseline_from_row`] (`b`: the
/// baseline, `r`: its run, `d`: its document; [`BASELINE_JOINS`] after `FROM baselines b`).
pub(super) const BASELINE_COLUMNS: &str =
    "d.document, b.state, b.superseded_by, b.document_behind, b.sha256, r.uploaded_by, \
     COALESCE(r.uploaded_by_owner, r.uploaded_by) AS uploaded_by_owner";

/// The tables [`BASELINE_COLUMNS`] come from besides the baseline `b`.
pub(super) const BASELINE_JOINS: &str =
    "JOIN runs r ON r.id = b.run_id JOIN baseline_documents d ON d.baseline_id = b.id";

pub(super) fn baseline_from_row(row: &AnyRow) -> StoreResult<StoredBaseline> {
    let bytes = document_from_row(row)?;
    let doc: BaselineDocument = serde_json::from_str(&bytes).map_err(|e| {
        internal(anyhow::Error::new(e).context("stored baseline document is not valid"))
    })?;
    Ok(StoredBaseline {
        doc,
        bytes,
        sha256: row.try_get("sha256")?,
        run_uploaded_by: row.try_get("uploaded_by")?,
        run_uploaded_by_owner: row.try_get("uploaded_by_owner")?,
    })
}

/// A baseline's document as it is now, from the columns `document`, `state`, `superseded_by`
/// and `document_behind`: on SQLite a state change without a decision updates the baseline's
/// row and leaves the stored document behind it (migration 0013), so its state fields are
/// rendered from the row's.
pub(super) fn document_from_row(row: &AnyRow) -> StoreResult<String> {
    let stored: String = row.try_get("document")?;
    if row
        .try_get::<Option<i64>, _>("document_behind")?
        .unwrap_or(0)
        == 0
    {
        return Ok(stored);
    }
    let state: String = row.try_get("state")?;
    let state = BaselineState::parse(&state)
        .ok_or_else(|| internal(anyhow::anyhow!("bad state {state:?}")))?;
    let superseded_by: Option<String> = row.try_get("superseded_by")?;
    let change = Restate {
        state,
        decision: None,
        superseded_by: superseded_by.as_deref(),
    };
    restated_document(&stored, change).map(|(bytes, _)| bytes)
}

/// `stored` (a baseline's document) with `change` applied, as `to_bytes` renders it: its state
/// fields rewritten in place, or, for bytes not in the canonical layout (never written so, but
/// a document is not trusted to be), parsed and rendered whole; and whether they were in it.
pub(super) fn restated_document(stored: &str, change: Restate<'_>) -> StoreResult<(String, bool)> {
    if let Some(bytes) = budget_core::baseline::restate(stored, change) {
        return Ok((bytes, true));
    }
    let mut doc: BaselineDocument = serde_json::from_str(stored).map_err(internal)?;
    doc.apply(change);
    Ok((String::from_utf8(doc.to_bytes()).map_err(internal)?, false))
}

pub(super) fn baseline_summary_from_row(r: &AnyRow) -> StoreResult<BaselineSummary> {
    let state: String = r.try_get("state")?;
    Ok(BaselineSummary {
        id: r.try_get("id")?,
        chain: r.try_get("chain")?,
        state: BaselineState::parse(&state)
            .ok_or_else(|| internal(anyhow::anyhow!("bad state {state:?}")))?,
        reason: r.try_get("reason")?,
        run_id: r.try_get("run_id")?,
        topology_version: r.try_get("topology_version")?,
        has_errors: r.try_get::<i64, _>("has_errors")? != 0,
        created_at: r.try_get("created_at")?,
        created_by: r.try_get("created_by")?,
        updated_at: r.try_get("updated_at")?,
        superseded_by: r.try_get("superseded_by")?,
        approved_at: r.try_get("approved_at")?,
    })
}

/// A chain with its live baseline and counts (the columns of `list_chains`, by name).
pub(super) fn chain_summary_from_row(r: &AnyRow) -> StoreResult<ChainSummary> {
    Ok(ChainSummary {
        name: r.try_get("name")?,
        topology_version: r.try_get("topology_version")?,
        current_baseline: r.try_get("current_baseline")?,
        revision: r.try_get("revision")?,
        drafts: r.try_get("drafts")?,
        runs: r.try_get("runs")?,
        updated_at: r.try_get("updated_at")?,
    })
}

pub(super) fn topology_from_row(row: &AnyRow) -> StoreResult<TopologyVersion> {
    let document: String = row.try_get("document")?;
    Ok(TopologyVersion {
        chain: row.try_get("chain")?,
        version: row.try_get("version")?,
        sha256: row.try_get("sha256")?,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        topology: serde_json::from_str(&document).map_err(internal)?,
    })
}

pub(super) const RUN_COLUMNS: &str =
    "id, chain, topology_version, format, tool, note, source_sha256, source_size, data, uploaded_by, created_at, sources, mapping, uploaded_by_owner, distributions";

/// [`RUN_COLUMNS`] of `runs`, and the draft the upload opened with its state (a draft of the run
/// that is no recompute: the one the upload's transaction inserted).
pub(super) const RUN_READ_COLUMNS: &str =
    "id, chain, topology_version, format, tool, note, source_sha256, source_size, data, uploaded_by, created_at, sources, mapping, uploaded_by_owner, distributions, \
     (SELECT b.id FROM baselines b WHERE b.run_id = runs.id AND b.reason <> 'recompute' ORDER BY b.created_at, b.id LIMIT 1) AS opened_draft, \
     (SELECT b.state FROM baselines b WHERE b.run_id = runs.id AND b.reason <> 'recompute' ORDER BY b.created_at, b.id LIMIT 1) AS opened_draft_state";

/// [`RUN_READ_COLUMNS`] without the distributions: what a list of runs reads (a histogram is
/// kilobytes per segment, and a list shows percentiles only).
pub(super) const RUN_LIST_COLUMNS: &str =
    "id, chain, topology_version, format, tool, note, source_sha256, source_size, data, uploaded_by, created_at, sources, mapping, uploaded_by_owner, \
     (SELECT b.id FROM baselines b WHERE b.run_id = runs.id AND b.reason <> 'recompute' ORDER BY b.created_at, b.id LIMIT 1) AS opened_draft, \
     (SELECT b.state FROM baselines b WHERE b.run_id = runs.id AND b.reason <> 'recompute' ORDER BY b.created_at, b.id LIMIT 1) AS opened_draft_state";

pub(super) fn run_from_row(row: &AnyRow) -> StoreResult<StoredRun> {
    let data: String = row.try_get("data")?;
    let mut data = serde_json::from_str::<RunData>(&data).map_err(internal)?;
    // Absent from a list's columns; null for a run without any.
    match row.try_get::<Option<String>, _>("distributions") {
        Ok(Some(d)) => data.distributions = serde_json::from_str(&d).map_err(internal)?,
        Ok(None) | Err(sqlx::Error::ColumnNotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let uploaded_by: String = row.try_get("uploaded_by")?;
    Ok(StoredRun {
        id: row.try_get("id")?,
        chain: row.try_get("chain")?,
        topology_version: row.try_get("topology_version")?,
        format: row.try_get("format")?,
        tool: row.try_get("tool")?,
        note: row.try_get("note")?,
        source_sha256: row.try_get("source_sha256")?,
        source_size: row.try_get("source_size")?,
        // Null only in a store imported from an export older than owners: the token name.
        uploaded_by_owner: row
            .try_get::<Option<String>, _>("uploaded_by_owner")?
            .unwrap_or_else(|| uploaded_by.clone()),
        uploaded_by,
        created_at: row.try_get("created_at")?,
        sources: serde_json::from_str(&row.try_get::<String, _>("sources")?).map_err(internal)?,
        mapping: row
            .try_get::<Option<String>, _>("mapping")?
            .map(|m| serde_json::from_str(&m))
            .transpose()
            .map_err(internal)?,
        opened_draft: opened_draft(row)?,
        data,
    })
}

/// The draft a run's upload opened, when the row was read with [`RUN_READ_COLUMNS`].
fn opened_draft(row: &AnyRow) -> StoreResult<Option<(String, String)>> {
    let column = |name: &str| match row.try_get::<Option<String>, _>(name) {
        Err(sqlx::Error::ColumnNotFound(_)) => Ok(None),
        other => other,
    };
    Ok(column("opened_draft")?.zip(column("opened_draft_state")?))
}

pub(super) fn publication_from_row(r: &AnyRow) -> StoreResult<Publication> {
    Ok(Publication::from_row(r)?)
}

/// A publication with its baseline ([`BASELINE_COLUMNS`] by name, after the publication's).
pub(super) fn publication_with_baseline_from_row(
    r: &AnyRow,
) -> StoreResult<(Publication, StoredBaseline)> {
    let publication = publication_from_row(r)?;
    let baseline = baseline_from_row(r)?;
    Ok((publication, baseline))
}

/// The columns of an [`OutboxItem`] (a claimed upload), read by name.
pub(super) const OUTBOX_ITEM_COLUMNS: &str = "id, object_key, body, sha256, attempts";

pub(super) fn outbox_item_from_row(r: &AnyRow) -> StoreResult<OutboxItem> {
    Ok(OutboxItem::from_row(r)?)
}

pub(super) const ARCHIVE_UPLOAD_COLUMNS: &str =
    "id, baseline_id, object_key, sha256, state, attempts, last_error, next_attempt_at, created_at, archived_at";

pub(super) fn archive_upload_from_row(r: &AnyRow) -> StoreResult<ArchiveUpload> {
    Ok(ArchiveUpload {
        id: r.try_get("id")?,
        baseline_id: r.try_get("baseline_id")?,
        key: r.try_get("object_key")?,
        sha256: r.try_get("sha256")?,
        state: r.try_get("state")?,
        attempts: r.try_get("attempts")?,
        last_error: r.try_get("last_error")?,
        next_attempt_at: r.try_get("next_attempt_at")?,
        created_at: r.try_get("created_at")?,
        archived_at: r.try_get("archived_at")?,
    })
}

pub(super) const RELEASE_COLUMNS: &str =
    "id, service, version, baseline_id, baseline_sha256, ticket, created_by, created_at";

pub(super) fn release_from_row(r: &AnyRow) -> StoreResult<Release> {
    Ok(Release {
        id: r.try_get("id")?,
        service: r.try_get("service")?,
        version: r.try_get("version")?,
        baseline_id: r.try_get("baseline_id")?,
        baseline_sha256: r.try_get("baseline_sha256")?,
        ticket: r.try_get("ticket")?,
        created_by: r.try_get("created_by")?,
        created_at: r.try_get("created_at")?,
    })
}

/// `owner` is null only in a store imported from an export older than owners: the name.
pub(super) const TOKEN_COLUMNS: &str =
    "name, role, COALESCE(owner, name) AS owner, created_at, created_by, token_hash";

pub(super) fn token_from_row(row: &AnyRow) -> StoreResult<TokenRecord> {
    let role: String = row.try_get("role")?;
    Ok(TokenRecord {
        name: row.try_get("name")?,
        role: Role::parse(&role)
            .ok_or_else(|| internal(anyhow::anyhow!("unknown role {role:?} in store")))?,
        owner: row.try_get("owner")?,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        token_id: row.try_get("token_hash")?,
    })
}

/// An agent's entry with the name of the token it is bound to (if that token still exists),
/// and its revisions those of its cohort if it follows one.
pub(super) const AGENT_SELECT: &str =
    "SELECT a.agent_id, a.service, a.client, a.labels, a.chains, a.replica, a.process, a.connected, \
       COALESCE(c.delivered, a.delivered) AS delivered, COALESCE(c.acked, a.acked) AS acked, \
       a.nack_revision, a.nack_error, a.first_seen, a.last_seen, a.token_hash, t.name AS token \
     FROM agents a LEFT JOIN api_tokens t ON t.token_hash = a.token_hash \
     LEFT JOIN agent_cohorts c ON c.id = a.cohort";

pub(super) fn agent_from_row(r: &AnyRow) -> StoreResult<AgentStatus> {
    let labels: String = r.try_get("labels")?;
    let chains: String = r.try_get("chains")?;
    Ok(AgentStatus {
        agent_id: r.try_get("agent_id")?,
        service: r.try_get("service")?,
        client: r.try_get("client")?,
        labels: serde_json::from_str(&labels).unwrap_or_default(),
        chains: chains
            .split(',')
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect(),
        replica: r.try_get("replica")?,
        connected: r.try_get::<i64, _>("connected")? != 0,
        delivered: r.try_get("delivered")?,
        acked: r.try_get("acked")?,
        nack_revision: r.try_get("nack_revision")?,
        nack_error: r.try_get("nack_error")?,
        first_seen: r.try_get("first_seen")?,
        last_seen: r.try_get("last_seen")?,
        token: r.try_get("token")?,
        token_id: r
            .try_get::<Option<String>, _>("token_hash")?
            .unwrap_or_default(),
        process: r
            .try_get::<Option<String>, _>("process")?
            .unwrap_or_default(),
    })
}

pub(super) fn audit_entry_from_row(r: &AnyRow) -> StoreResult<AuditEntry> {
    let detail: String = r.try_get("detail")?;
    Ok(AuditEntry {
        id: r.try_get("id")?,
        at: r.try_get("at")?,
        actor: r.try_get("actor")?,
        action: r.try_get("action")?,
        chain: r.try_get("chain")?,
        subject: r.try_get("subject")?,
        detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::String(detail)),
    })
}

/// One row of an exported table: a string, an integer or null per column.
pub(super) fn export_row(row: &AnyRow, table: &ExportTable) -> StoreResult<Vec<serde_json::Value>> {
    table
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| {
            Ok(match kind {
                ColumnKind::Text => row
                    .try_get::<Option<String>, _>(i)?
                    .map_or(serde_json::Value::Null, serde_json::Value::String),
                ColumnKind::Int => row
                    .try_get::<Option<i64>, _>(i)?
                    .map_or(serde_json::Value::Null, serde_json::Value::from),
            })
        })
        .collect()
}
