//! The archive of baseline documents: `GET /baselines/{id}/archive` (where one is archived,
//! how its uploads went) and `GET /archive/verify` (the archive against the store).

use serde::{Deserialize, Serialize};

/// One upload in the archive outbox (OpenAPI `ArchiveUpload`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArchiveUpload {
    pub id: i64,
    pub baseline_id: String,
    pub key: String,
    pub sha256: String,
    /// `pending`, `done` or `superseded` (a newer upload of the same key replaced it).
    pub state: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub next_attempt_at: String,
    pub created_at: String,
    pub archived_at: Option<String>,
}

/// A baseline's archive (OpenAPI `ArchiveStatus`): its key, state and upload attempts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArchiveStatus {
    pub baseline_id: String,
    /// The archive, described (`file://…`, `s3://…`).
    pub archive: String,
    pub key: String,
    pub sha256: String,
    /// `archived`, `retrying`, `pending` or `unknown`.
    pub state: String,
    pub attempts: Option<i64>,
    pub last_error: Option<String>,
    pub archived_at: Option<String>,
    pub uploads: Vec<ArchiveUpload>,
}

/// A baseline whose archived object is missing, differs or cannot be read
/// (OpenAPI `ArchiveProblem`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArchiveProblem {
    pub baseline_id: String,
    pub key: String,
    /// `missing`, `differs` or `unreadable`.
    pub problem: String,
    pub expected_sha256: String,
    pub actual_sha256: Option<String>,
    /// An upload of this key is still queued (the worker has not caught up yet).
    pub pending: bool,
    /// Why reading failed (`unreadable` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `GET /archive/verify` (OpenAPI `ArchiveReport`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArchiveReport {
    /// The day checked (`YYYY-MM-DD`); `null`: every baseline.
    pub date: Option<String>,
    /// Baselines checked.
    pub checked: u64,
    /// Empty when the archive matches the store.
    pub problems: Vec<ArchiveProblem>,
}

/// `GET /archive/verify`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct VerifyQuery {
    /// Only baselines created on this UTC day (`YYYY-MM-DD`); empty or absent: all.
    pub date: Option<String>,
}
