//! Publications: each approval or rollback, numbered by one revision counter.

use async_trait::async_trait;
use serde::Serialize;

use super::{StoreResult, StoredBaseline};

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Publication {
    pub revision: i64,
    pub chain: String,
    pub baseline_id: String,
    pub kind: String,
    pub created_by: String,
    pub created_at: String,
}

/// What was published, by chain, by baseline and since a revision.
#[async_trait]
pub trait Publications: Send + Sync {
    /// The latest publication of a chain.
    async fn latest_publication(&self, chain: &str) -> StoreResult<Option<Publication>>;

    /// Each chain's latest publication with a revision above `after`, with its baseline.
    async fn latest_publications(
        &self,
        after: i64,
    ) -> StoreResult<Vec<(Publication, StoredBaseline)>>;

    /// The latest publication of a baseline (approve or rollback), if it was ever published.
    async fn baseline_publication(&self, baseline_id: &str) -> StoreResult<Option<Publication>>;
}
