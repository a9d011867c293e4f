//! Fleet status: every agent seen, and how far a baseline has rolled out.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::auth::Principal;
use crate::error::ApiResult;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/agents", get(list))
        .route("/baselines/{id}/rollout", get(rollout))
}

async fn list(State(state): State<AppState>, _: Principal) -> ApiResult<Json<Value>> {
    // This replica's news first, so what it just saw is in the answer.
    state.fleet.flush().await;
    Ok(Json(json!({ "agents": state.store.list_agents().await? })))
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
    let agents = state.store.list_agents().await?;
    let of_chain: Vec<_> = agents
        .iter()
        .filter(|a| a.chains.contains(&chain))
        .collect();
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
