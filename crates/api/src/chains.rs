//! Chains: the list (`GET /chains`), a topology version (`GET|PUT /chains/{chain}/topology`),
//! the live config (`GET /chains/{chain}/budgets`, [`LiveChain`]) and rollback.

use budget_core::Topology;
use serde::{Deserialize, Serialize};

/// The live config agents enforce, as `GET /chains/{chain}/budgets` answers it.
pub use budget_core::live::LiveChain;

/// One chain of the list (OpenAPI `ChainSummary`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChainSummary {
    pub name: String,
    pub topology_version: Option<i64>,
    pub current_baseline: Option<String>,
    pub revision: Option<i64>,
    pub drafts: i64,
    pub runs: i64,
    pub updated_at: String,
}

/// `GET /chains`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChainList {
    pub chains: Vec<ChainSummary>,
}

/// One stored version of a chain's topology (OpenAPI `TopologyVersion`); the request of
/// `PUT /chains/{chain}/topology` is a [`Topology`] (`schemas/topology.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologyVersion {
    pub chain: String,
    pub version: i64,
    pub sha256: String,
    pub created_at: String,
    pub created_by: String,
    pub topology: Topology,
}

/// `GET /chains/{chain}/topology`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TopologyQuery {
    /// The version wanted (1 or more); the latest when absent.
    pub version: Option<i64>,
}

/// `POST /chains/{chain}/rollback` (OpenAPI `RollbackRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollbackRequest {
    pub baseline_id: String,
}

/// What a rollback answers (OpenAPI `RollbackResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RollbackResult {
    pub chain: String,
    /// The baseline the chain serves now.
    pub baseline_id: String,
    pub revision: i64,
    pub superseded: Option<String>,
}

/// `GET /chains/{chain}/budgets` (OpenAPI `LiveBudgets`): the live config every agent receives
/// and, while a canary bakes (SPEC §9), the config its agents receive instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveBudgets {
    #[serde(flatten)]
    pub live: LiveChain,
    /// `null` unless a canary is baking on the chain.
    #[serde(default)]
    pub canary: Option<LiveCanary>,
}

/// The config a baking canary's agents receive (OpenAPI `LiveCanary`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveCanary {
    /// Which agents: `{"percent": N}` or `{"labels": {…}}`.
    pub selector: budget_core::canary::Selector,
    pub bake_ends_at: String,
    pub budgets: LiveChain,
}
