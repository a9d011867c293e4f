//! The archive of baseline documents: where a baseline is archived and how its uploads went,
//! verifying the archive against the store, and re-queuing what is missing or differs
//! (`budgetd archive backfill`).

use crate::archive::{self, verify};
use crate::config::Settings;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::{self, archive_key};

/// A baseline's archive: its key, state and upload attempts.
pub use budget_api::archive::ArchiveStatus;
use budget_api::archive::{ArchiveProblem, ArchiveReport};

/// A verification report on the wire.
pub fn report(r: verify::Report) -> ArchiveReport {
    ArchiveReport {
        date: r.date,
        checked: r.checked as u64,
        problems: r
            .problems
            .into_iter()
            .map(|p| ArchiveProblem {
                baseline_id: p.baseline_id,
                key: p.key,
                problem: p.problem.into(),
                expected_sha256: p.expected_sha256,
                actual_sha256: p.actual_sha256,
                pending: p.pending,
                error: p.error,
            })
            .collect(),
    }
}

/// Where baseline `id` is archived, and how its uploads went.
pub async fn status(state: &AppState, id: &str) -> ApiResult<ArchiveStatus> {
    let baseline = state.store.get_baseline(id).await?;
    let items = state.store.archive_items(id).await?;
    let key = archive_key(
        &state.archive_prefix,
        &baseline.doc.created_at,
        &format!("{id}.json"),
    );
    let latest = items
        .iter()
        .rev()
        .find(|i| i.key == key && i.state != "superseded");
    let archive_state = match latest {
        Some(i) if i.state == "done" && i.sha256 == baseline.sha256 => "archived",
        Some(i) if i.state == "pending" && i.attempts > 0 => "retrying",
        Some(i) if i.state == "pending" => "pending",
        _ => "unknown",
    };
    Ok(ArchiveStatus {
        baseline_id: id.to_owned(),
        archive: state.archiver.archive().describe(),
        key,
        sha256: baseline.sha256,
        state: archive_state.into(),
        attempts: latest.map(|i| i.attempts),
        last_error: latest.and_then(|i| i.last_error.clone()),
        archived_at: latest.and_then(|i| i.archived_at.clone()),
        uploads: items,
    })
}

fn check_date(date: Option<&str>) -> ApiResult<()> {
    match date {
        Some(d) if !verify::valid_date(d) => Err(ApiError::bad_request(format!(
            "date {d:?} must be YYYY-MM-DD"
        ))),
        _ => Ok(()),
    }
}

/// Every baseline (created on `date`, `YYYY-MM-DD`, or all) whose object is missing or
/// differs.
pub async fn verify(state: &AppState, date: Option<&str>) -> ApiResult<verify::Report> {
    check_date(date)?;
    Ok(verify::verify(
        &*state.store,
        &**state.archiver.archive(),
        &state.archive_prefix,
        date,
    )
    .await?)
}

/// What `budgetd archive backfill` found and did.
#[derive(Debug)]
pub struct Backfill {
    pub report: verify::Report,
    /// Uploads queued (problems whose upload was already queued are left alone).
    pub queued: usize,
    /// The archive checked, described.
    pub archive: String,
}

/// Verifies the archive configured in `settings` against its store and queues a fresh upload
/// of every baseline whose object is missing or differs; the running servers' workers upload
/// them.
pub async fn backfill(settings: &Settings, date: Option<&str>) -> anyhow::Result<Backfill> {
    if let Some(d) = date {
        anyhow::ensure!(verify::valid_date(d), "--date {d:?} must be YYYY-MM-DD");
    }
    let (archive, url_prefix) = archive::open(&settings.archive_url()).await?;
    archive.check().await?;
    let prefix = url_prefix.unwrap_or_else(|| settings.archive_prefix.trim_matches('/').to_owned());
    let store = store::connect_with(&settings.database_url(), &prefix).await?;
    let report = verify::verify(&*store, &*archive, &prefix, date)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let queued = verify::backfill(&*store, &report, &super::now())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Backfill {
        report,
        queued,
        archive: archive.describe(),
    })
}
