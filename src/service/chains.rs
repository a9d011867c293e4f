//! Chains: names, topologies and the live budgets.

use budget_api::chains::{ChainSummary, TopologyVersion};
use budget_core::live::LiveChain;
use budget_core::Topology;
use serde_json::{json, Value};

use super::{audit, parse_with_schema, violations_of};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::schemas::Schema;
use crate::state::AppState;

/// Chain names: lowercase letters, digits, `-`, `_`, `.`; 1–64 characters.
pub fn check_chain_name(chain: &str) -> ApiResult<()> {
    if chain.len() > 64 {
        // Not echoed: it may be huge.
        return Err(ApiError::bad_request(
            "invalid chain name: longer than 64 characters",
        ));
    }
    let ok = (1..=64).contains(&chain.len())
        && chain
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chain
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "invalid chain name {chain:?}: use 1-64 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit"
        )))
    }
}

/// Every chain with its live baseline, drafts and runs.
pub async fn list(state: &AppState) -> ApiResult<Vec<ChainSummary>> {
    Ok(state.store.list_chains().await?)
}

/// A chain's topology: the newest version, or `version`.
#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn topology(
    state: &AppState,
    chain: &str,
    version: Option<i64>,
) -> ApiResult<TopologyVersion> {
    check_chain_name(chain)?;
    Ok(state.store.get_topology(chain, version).await?)
}

/// `404` unless the chain exists (has a topology); for uploads, before their body is read.
pub async fn require(state: &AppState, chain: &str) -> ApiResult<()> {
    topology(state, chain, None).await.map(drop)
}

/// Validates a topology (schema, then call tree) and stores it as the chain's next version;
/// `true` when it is new (an identical one is kept as it is).
#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn put_topology(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    body: Value,
) -> ApiResult<(TopologyVersion, bool)> {
    check_chain_name(chain)?;
    let topology: Topology = parse_with_schema(Schema::Topology, body)?;
    topology.validate().map_err(|errs| {
        violations_of(
            format!("the topology of {chain:?} is not a valid call tree"),
            errs,
        )
    })?;
    let audit = audit(principal, "topology.put", Some(chain), json!({}));
    Ok(state.store.put_topology(chain, &topology, audit).await?)
}

/// The live config of a chain: its latest publication.
#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn budgets(state: &AppState, chain: &str) -> ApiResult<LiveChain> {
    check_chain_name(chain)?;
    let publication = state
        .store
        .latest_publication(chain)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "chain {chain:?} has no published budgets yet: approve a baseline first"
            ))
        })?;
    let baseline = state.store.get_baseline(&publication.baseline_id).await?;
    Ok(LiveChain::from_baseline(
        &baseline.doc,
        publication.revision,
        &publication.created_at,
    ))
}
