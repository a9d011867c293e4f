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

    /// A listener told of every publication any process sharing the database commits
    /// (PostgreSQL LISTEN/NOTIFY); `None` where the backend cannot tell (SQLite, one process:
    /// readers rely on their own refreshes).
    async fn publication_listener(&self) -> StoreResult<Option<Box<dyn PublicationListener>>>;
}

/// Notifications of committed publications, from [`Publications::publication_listener`].
#[async_trait]
pub trait PublicationListener: Send {
    /// Waits for the next publication; its revision as announced.
    async fn next(&mut self) -> StoreResult<String>;
}
