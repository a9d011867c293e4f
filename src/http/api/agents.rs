//! Fleet status: every agent seen within the retention period (paginated), and how far a
//! baseline has rolled out.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::page::{PageRequest, MAX_LIMIT};
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::state::AppState;
use crate::store::AgentStatus;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/agents", get(list))
        .route("/baselines/{id}/rollout", get(rollout))
}

/// A page of agents, by service and id: `?limit=` (default 100, at most 1000) and `?cursor=`
/// (the previous page's `next_cursor`).
async fn list(
    State(state): State<AppState>,
    _: Principal,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let page = PageRequest::from_query(&query)?;
    // This replica's news first, so what it just saw is in the answer.
    state.fleet.flush().await;
    let agents = state
        .store
        .list_agents(&state.fleet.seen_since(), page.after.as_ref(), page.fetch())
        .await?;
    let (agents, next_cursor) = page.split(agents, |a| (&a.service, &a.agent_id));
    Ok(Json(
        json!({ "agents": agents, "next_cursor": next_cursor }),
    ))
}

/// The agents seen within the retention period that `keep` selects, read page by page.
async fn agents_where(
    state: &AppState,
    keep: impl Fn(&AgentStatus) -> bool,
) -> ApiResult<Vec<AgentStatus>> {
    let since = state.fleet.seen_since();
    let mut kept = Vec::new();
    let mut after = None;
    loop {
        let page = state
            .store
            .list_agents(&since, after.as_ref(), MAX_LIMIT)
            .await?;
        let done = page.len() < usize::try_from(MAX_LIMIT).unwrap_or(usize::MAX);
        after = page.last().map(|a| (a.service.clone(), a.agent_id.clone()));
        kept.extend(page.into_iter().filter(|a| keep(a)));
        if done {
            return Ok(kept);
        }
    }
}

/// How many agents receiving the baseline's chain have ACKed (or NACKed) its publication.
async fn rollout(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let baseline = state.store.get_baseline(&id).await?;
    let chain = baseline.doc.chain;
    let publication = state.store.baseline_publication(&id).await?;
    state.fleet.flush().await;
    let agents = agents_where(&state, |a| a.chains.contains(&chain)).await?;
    let of_chain: Vec<_> = agents.iter().collect();
    let revision = publication.as_ref().map(|p| p.revision);
    let count =
        |f: &dyn Fn(&&&crate::store::AgentStatus) -> bool| of_chain.iter().filter(f).count();
    let (acked, nacked, connected) = match revision {
        Some(rev) => (
            count(&|a| a.acked >= rev),
            count(&|a| a.nack_revision.is_some_and(|n| n >= rev)),
            count(&|a| a.connected),
        ),
        None => (0, 0, count(&|a| a.connected)),
    };
    Ok(Json(json!({
        "baseline_id": id,
        "chain": chain,
        "state": baseline.doc.state,
        "revision": revision,
        "agents": of_chain.len(),
        "connected": connected,
        "acked": acked,
        "nacked": nacked,
    })))
}
