//! Chains and their topology versions.

use async_trait::async_trait;
use budget_core::Topology;
use serde::Serialize;

use super::{Audit, StoreResult};

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TopologyVersion {
    pub chain: String,
    pub version: i64,
    pub sha256: String,
    pub created_at: String,
    pub created_by: String,
    pub topology: Topology,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ChainSummary {
    pub name: String,
    pub topology_version: Option<i64>,
    pub current_baseline: Option<String>,
    pub revision: Option<i64>,
    pub drafts: i64,
    pub runs: i64,
    pub updated_at: String,
}

/// Chains and the versions of their topology.
#[async_trait]
pub trait Chains: Send + Sync {
    /// Stores a topology version; same content as the latest → the latest, `false`.
    async fn put_topology(
        &self,
        chain: &str,
        topology: &Topology,
        audit: Audit,
    ) -> StoreResult<(TopologyVersion, bool)>;
    async fn get_topology(&self, chain: &str, version: Option<i64>)
        -> StoreResult<TopologyVersion>;
    async fn list_chains(&self) -> StoreResult<Vec<ChainSummary>>;
}
