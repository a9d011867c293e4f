//! Baselines: drafts, decisions on them and rollbacks.

use async_trait::async_trait;
use budget_api::baselines::BaselineSummary;
use budget_core::baseline::{BaselineDocument, BaselineState};
use serde::Serialize;

use super::{Audit, StoreResult};

/// A baseline as stored: the parsed document and its canonical bytes.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StoredBaseline {
    pub doc: BaselineDocument,
    pub bytes: String,
    pub sha256: String,
    /// Which token uploaded the run it was computed from.
    pub run_uploaded_by: String,
    /// The owner of that token (four eyes).
    #[serde(default)]
    pub run_uploaded_by_owner: String,
}

/// Where a page of a chain's baselines starts: after (older than) this `(created_at, id)`.
pub type BaselineCursor = (String, String);

/// How a decision changes a draft (the rule lives in core).
pub use budget_core::lifecycle::Verdict;

/// Result of a publication (approve or rollback).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Published {
    pub baseline: StoredBaseline,
    pub revision: i64,
    pub superseded: Option<String>,
}

/// Baselines and their lifecycle: insert a draft, approve or reject it, roll back.
#[async_trait]
pub trait Baselines: Send + Sync {
    /// Inserts a draft; the store assigns its id (`bl-YYYYMMDD-NNN`, date of `created_at`).
    async fn insert_baseline(
        &self,
        draft: BaselineDocument,
        audit: Audit,
    ) -> StoreResult<StoredBaseline>;
    async fn get_baseline(&self, id: &str) -> StoreResult<StoredBaseline>;
    /// A page of a chain's baselines, newest first: at most `limit`, older than `before`.
    async fn list_baselines(
        &self,
        chain: &str,
        state: Option<BaselineState>,
        before: Option<&BaselineCursor>,
        limit: i64,
    ) -> StoreResult<Vec<BaselineSummary>>;
    /// The id of the chain's newest baseline, in the order the chain's baselines were
    /// committed (the one an approval must be of).
    async fn newest_baseline(&self, chain: &str) -> StoreResult<Option<String>>;
    /// The chain's approved baseline, if any.
    async fn current_baseline(&self, chain: &str) -> StoreResult<Option<StoredBaseline>>;
    /// The id and SHA-256 of the chain's approved baseline, if any, without its document.
    async fn current_baseline_ref(&self, chain: &str) -> StoreResult<Option<(String, String)>>;

    /// Approves or rejects a draft. `Conflict` when it is no longer a draft.
    async fn decide(
        &self,
        id: &str,
        verdict: Verdict,
        comment: Option<String>,
        audit: Audit,
    ) -> StoreResult<(StoredBaseline, Option<Published>)>;
    /// Makes a superseded baseline of `chain` approved again and publishes it.
    async fn rollback(&self, chain: &str, id: &str, audit: Audit) -> StoreResult<Published>;

    /// Baselines created on `date` (`YYYY-MM-DD`), or all, oldest first.
    async fn baselines_created_on(&self, date: Option<&str>) -> StoreResult<Vec<StoredBaseline>>;
}
