//! Runs: the measurements uploaded for a chain.

use async_trait::async_trait;
use budget_api::runs::{LabelMapping, RunSource};
use budget_core::baseline::BaselineDocument;
use budget_core::RunData;
use serde::Serialize;

use super::{Audit, StoreResult, StoredBaseline};

/// A run to insert; the store assigns its id (`run-YYYYMMDD-NNN`).
#[derive(Debug, Clone)]
pub struct NewRun {
    /// Every file the run was read from.
    pub sources: Vec<RunSource>,
    /// How tool labels were mapped to segments (load-tool formats).
    pub mapping: Option<LabelMapping>,
    pub chain: String,
    pub topology_version: i64,
    pub format: String,
    pub tool: Option<String>,
    pub note: Option<String>,
    pub source_sha256: String,
    pub source_size: i64,
    pub data: RunData,
    pub uploaded_by: String,
    /// The owner of the uploading token (four eyes compares owners).
    pub uploaded_by_owner: String,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StoredRun {
    pub id: String,
    pub chain: String,
    pub topology_version: i64,
    pub format: String,
    pub tool: Option<String>,
    pub note: Option<String>,
    pub source_sha256: String,
    pub source_size: i64,
    pub uploaded_by: String,
    /// The owner of the uploading token.
    #[serde(default)]
    pub uploaded_by_owner: String,
    pub created_at: String,
    pub sources: Vec<RunSource>,
    pub mapping: Option<LabelMapping>,
    /// The draft the upload opened (reason first run, no approved baseline or drift) and its
    /// state now; recomputes from the run are not it.
    #[serde(default)]
    pub opened_draft: Option<(String, String)>,
    #[serde(skip_serializing, default)]
    pub data: RunData,
}

/// Runs, inserted with the draft computed from them.
#[async_trait]
pub trait Runs: Send + Sync {
    /// Inserts a run and, when given, a draft computed from it, in one transaction.
    /// `expect_current` is the approved baseline the caller compared against; if another is
    /// current now, nothing is written and `Conflict` is returned so the caller can recompute.
    async fn insert_run(
        &self,
        run: NewRun,
        draft: Option<BaselineDocument>,
        expect_current: Option<String>,
        audit: Audit,
    ) -> StoreResult<(StoredRun, Option<StoredBaseline>)>;
    async fn get_run(&self, chain: &str, id: &str) -> StoreResult<StoredRun>;
    /// A chain's newest runs, without their distributions (`data.distributions` is empty: a
    /// histogram is kilobytes per segment; [`Runs::get_run`] reads them).
    async fn list_runs(&self, chain: &str, limit: i64) -> StoreResult<Vec<StoredRun>>;
    /// Whether the chain has any run yet.
    async fn run_count(&self, chain: &str) -> StoreResult<i64>;
}
