//! Releases citing a baseline.

use async_trait::async_trait;
use serde::Serialize;

use super::{Audit, StoreResult};

/// A release citing a baseline.
#[derive(Debug, Clone, Serialize, serde::Deserialize, sqlx::FromRow)]
pub struct Release {
    pub id: i64,
    pub service: String,
    pub version: String,
    pub baseline_id: String,
    pub baseline_sha256: String,
    pub ticket: String,
    pub created_by: String,
    pub created_at: String,
}

#[derive(Debug, Clone)]
pub struct NewRelease {
    pub service: String,
    pub version: String,
    pub baseline_id: String,
    pub ticket: String,
}

/// Releases, recorded with the hash of the baseline they cite.
#[async_trait]
pub trait Releases: Send + Sync {
    async fn create_release(
        &self,
        release: NewRelease,
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
