//! Chains: names, topologies and the live budgets.

use budget_api::chains::{ChainSummary, LiveBudgets, LiveCanary, TopologyVersion};
use budget_core::live::LiveChain;
use budget_core::Topology;
use serde_json::{json, Value};

use super::{audit, parse_with_schema, violations_of};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::publish::{resolve_canary, Canary};
use crate::schemas::Schema;
use crate::state::AppState;
use crate::store::StoreError;

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

/// How many known chain names an unknown chain's 404 lists, nearest first.
const NEAREST: usize = 3;

/// The known `names` nearest to `chain`, nearest first (at most [`NEAREST`]): those within a
/// few edits of it (a third of its length, at least one), or holding it or held by it.
fn nearest<'a>(chain: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let most = (chain.chars().count() / 3).max(1);
    let mut close: Vec<(usize, &str)> = names
        .into_iter()
        .filter_map(|name| {
            let d = strsim::damerau_levenshtein(chain, name);
            let related = name.contains(chain) || chain.contains(name);
            (d <= most || related).then_some((d, name))
        })
        .collect();
    close.sort();
    close
        .into_iter()
        .take(NEAREST)
        .map(|(_, n)| n.to_owned())
        .collect()
}

/// The 404 of a chain that does not exist, with the nearest known names in its details
/// (`{"chain", "nearest": [...]}`): what a typo needs.
pub async fn unknown(state: &AppState, chain: &str) -> ApiError {
    let names = match state.store.list_chains().await {
        Ok(chains) => chains.into_iter().map(|c| c.name).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "listing chains for a 404 failed");
            Vec::new()
        }
    };
    let nearest = nearest(chain, names.iter().map(String::as_str));
    let message = format!("chain {chain:?} does not exist");
    ApiError::not_found(message).with_details(json!({"chain": chain, "nearest": nearest}))
}

/// A chain that must exist (have a topology): its newest topology version, or the 404 of
/// [`unknown`].
pub async fn known(state: &AppState, chain: &str) -> ApiResult<TopologyVersion> {
    check_chain_name(chain)?;
    match state.store.get_topology(chain, None).await {
        Ok(topology) => Ok(topology),
        Err(StoreError::NotFound(_)) => Err(unknown(state, chain).await),
        Err(e) => Err(e.into()),
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
    let latest = known(state, chain).await?;
    match version {
        Some(v) if v != latest.version => Ok(state.store.get_topology(chain, Some(v)).await?),
        _ => Ok(latest),
    }
}

/// `404` unless the chain exists (has a topology); for uploads, before their body is read.
pub async fn require(state: &AppState, chain: &str) -> ApiResult<()> {
    known(state, chain).await.map(drop)
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
pub async fn budgets(state: &AppState, chain: &str) -> ApiResult<LiveBudgets> {
    check_chain_name(chain)?;
    let Some(publication) = state.store.latest_publication(chain).await? else {
        known(state, chain).await?;
        return Err(ApiError::not_found(format!(
            "chain {chain:?} has no published budgets yet: approve a baseline first"
        )));
    };
    let baseline = state.store.get_baseline(&publication.baseline_id).await?;
    let latest =
        LiveChain::from_baseline(&baseline.doc, publication.revision, &publication.created_at);
    if publication.kind != "canary" {
        return Ok(LiveBudgets {
            live: latest,
            canary: None,
        });
    }
    let live = |p: &crate::store::Publication, b: &crate::store::StoredBaseline| {
        LiveChain::from_baseline(&b.doc, p.revision, &p.created_at)
    };
    let resolved = resolve_canary(
        &*state.store,
        chain,
        &publication.baseline_id,
        publication.revision,
    )
    .await?;
    Ok(match resolved {
        Canary::Overlay {
            selector,
            bake_ends_at,
            stable: (p, b),
        } => LiveBudgets {
            live: live(&p, &b),
            canary: Some(LiveCanary {
                selector,
                bake_ends_at,
                budgets: latest,
            }),
        },
        Canary::Nobody(p, b) => LiveBudgets {
            live: live(&p, &b),
            canary: None,
        },
        Canary::Everyone => LiveBudgets {
            live: latest,
            canary: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::nearest;

    #[test]
    fn the_nearest_names_of_a_typo() {
        let known = ["checkout", "checkout-eu", "search", "payments", "cart"];
        let check = |typo: &str, expect: &[&str]| {
            assert_eq!(nearest(typo, known), expect, "{typo}");
        };
        check("chekout", &["checkout"]);
        check("checkuot", &["checkout"]);
        check("checkout-us", &["checkout-eu", "checkout"]);
        check("check", &["checkout", "checkout-eu"]);
        check("serach", &["search"]);
        check("carts", &["cart"]);
        check("inventory", &[]);
        assert!(nearest("x", std::iter::empty()).is_empty());
        // at most three, nearest first
        let many = ["ab1", "ab2", "ab3", "ab4", "abc"];
        assert_eq!(nearest("ab", many), ["ab1", "ab2", "ab3"]);
    }
}
