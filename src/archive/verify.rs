//! Checking the archive against the store, and re-queuing what is missing.

use serde::Serialize;
use sha2::Digest;

use super::Archive;
use crate::store::{archive_key, Store, StoreResult};

/// A baseline whose archived document is not what the store holds.
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub baseline_id: String,
    pub key: String,
    /// `missing`, `differs` or `unreadable`.
    pub problem: &'static str,
    pub expected_sha256: String,
    pub actual_sha256: Option<String>,
    /// An upload of this key is still queued (the worker has not caught up yet).
    pub pending: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub date: Option<String>,
    pub checked: usize,
    pub problems: Vec<Problem>,
}

/// Compares every baseline created on `date` (or all) with its object at
/// `{prefix}/{date}/{id}.json`, by SHA-256 of the bytes.
pub async fn verify(
    store: &dyn Store,
    archive: &dyn Archive,
    prefix: &str,
    date: Option<&str>,
) -> StoreResult<Report> {
    let baselines = store.baselines_created_on(date).await?;
    let mut problems = Vec::new();
    for b in &baselines {
        let key = archive_key(prefix, &b.doc.created_at, &format!("{}.json", b.doc.id));
        let pending = store
            .archive_items(&b.doc.id)
            .await?
            .iter()
            .any(|i| i.key == key && i.state == "pending");
        let (problem, actual, error) = match archive.get(&key).await {
            Ok(None) => ("missing", None, None),
            Ok(Some(bytes)) => {
                let actual = hex::encode(sha2::Sha256::digest(&bytes));
                if actual == b.sha256 {
                    continue;
                }
                ("differs", Some(actual), None)
            }
            Err(e) => ("unreadable", None, Some(format!("{e:#}"))),
        };
        problems.push(Problem {
            baseline_id: b.doc.id.clone(),
            key,
            problem,
            expected_sha256: b.sha256.clone(),
            actual_sha256: actual,
            pending,
            error,
        });
    }
    Ok(Report {
        date: date.map(str::to_owned),
        checked: baselines.len(),
        problems,
    })
}

/// Queues a fresh upload of every problem's current document; returns how many.
pub async fn backfill(store: &dyn Store, report: &Report, now: &str) -> StoreResult<usize> {
    let mut queued = 0;
    for p in report.problems.iter().filter(|p| !p.pending) {
        let stored = store.get_baseline(&p.baseline_id).await?;
        store
            .archive_enqueue(&p.baseline_id, &p.key, &stored.bytes, now)
            .await?;
        queued += 1;
    }
    Ok(queued)
}

/// `YYYY-MM-DD`, as archive keys use.
pub fn valid_date(date: &str) -> bool {
    chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_ok() && date.len() == 10
}
