//! Releases citing a baseline.

use async_trait::async_trait;
use budget_api::releases::{Release, ReleaseRequest};

use super::{Audit, StoreResult};

/// Releases, recorded with the hash of the baseline they cite.
#[async_trait]
pub trait Releases: Send + Sync {
    /// Records `release` (checked, its fields trimmed) citing a baseline whose document has
    /// the SHA-256 `sha256`.
    async fn create_release(
        &self,
        release: ReleaseRequest,
        sha256: &str,
        audit: Audit,
    ) -> StoreResult<Release>;
    async fn list_releases(
        &self,
        baseline_id: Option<&str>,
        service: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<Release>>;
}
