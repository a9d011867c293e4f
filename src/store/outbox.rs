//! The archive outbox: uploads queued in the transaction that produced their bytes.

use async_trait::async_trait;
use budget_api::archive::ArchiveUpload;

use super::StoreResult;

/// An upload the archive worker has claimed: what to put where, and how often it failed.
/// (How an upload went, as listed, is a [`ArchiveUpload`].)
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OutboxItem {
    pub id: i64,
    #[sqlx(rename = "object_key")]
    pub key: String,
    pub body: String,
    pub sha256: String,
    pub attempts: i64,
}

/// The archive key layout: `{prefix}/{YYYY-MM-DD}/{name}`, the date being the baseline's UTC
/// creation date.
pub fn archive_key(prefix: &str, created_at: &str, name: &str) -> String {
    let date = created_at.get(..10).unwrap_or("unknown-date");
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        format!("{date}/{name}")
    } else {
        format!("{prefix}/{date}/{name}")
    }
}

/// The default archive prefix (the seed's `gov/bench/{date}/budget.json`).
pub const DEFAULT_ARCHIVE_PREFIX: &str = "gov/bench";

/// The outbox the archive worker drains.
#[async_trait]
pub trait Outbox: Send + Sync {
    /// Claims up to `limit` due outbox items for this worker until `lease_until`. Items whose
    /// key has another upload in flight are skipped, so the newest bytes always land last and
    /// no two workers upload the same item at once.
    async fn archive_claim(
        &self,
        now: &str,
        lease_until: &str,
        limit: i64,
    ) -> StoreResult<Vec<OutboxItem>>;
    async fn archive_done(&self, id: i64, now: &str) -> StoreResult<()>;
    async fn archive_failed(&self, id: i64, error: &str, next_attempt_at: &str) -> StoreResult<()>;
    /// Queues an upload of `body` at `key` (backfill); older pending items for the key are
    /// superseded.
    async fn archive_enqueue(
        &self,
        baseline_id: &str,
        key: &str,
        body: &str,
        now: &str,
    ) -> StoreResult<()>;
    /// Every upload of a baseline, oldest first.
    async fn archive_items(&self, baseline_id: &str) -> StoreResult<Vec<ArchiveUpload>>;
    /// Pending items and the creation time of the oldest one.
    async fn archive_backlog(&self) -> StoreResult<(i64, Option<String>)>;
}
