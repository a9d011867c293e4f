//! Fleet status: every agent seen within the retention period (paginated), and how far a
//! baseline has rolled out.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use budget_api::agents::{Agent, AgentList};
use budget_api::baselines::Rollout;

use super::page::PageRequest;
use super::Json;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::service;
use crate::state::AppState;

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
) -> ApiResult<Json<AgentList>> {
    let page = PageRequest::from_query(&query)?;
    let agents = service::agents::list(&state, page.after.as_ref(), page.fetch()).await?;
    let (agents, next_cursor) = page.split(agents, |a| (&a.service, &a.agent_id));
    let agents = agents
        .into_iter()
        .map(|a| Agent {
            agent_id: a.agent_id,
            service: a.service,
            labels: a.labels,
            chains: a.chains,
            replica: a.replica,
            connected: a.connected,
            delivered: a.delivered,
            acked: a.acked,
            nack_revision: a.nack_revision,
            nack_error: a.nack_error,
            first_seen: a.first_seen,
            last_seen: a.last_seen,
            token: a.token,
        })
        .collect();
    Ok(Json(AgentList {
        agents,
        next_cursor,
    }))
}

/// How many agents receiving the baseline's chain have ACKed (or NACKed) its publication.
async fn rollout(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Rollout>> {
    Ok(Json(service::agents::rollout(&state, &id).await?))
}
