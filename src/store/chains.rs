//! Chains and their topology versions.

use async_trait::async_trait;
use budget_api::chains::{ChainSummary, TopologyVersion};
use budget_core::Topology;

use super::{Audit, StoreResult};

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
