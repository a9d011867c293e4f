//! Fleet status: every agent seen within the retention period (paginated), and how far a
//! baseline has rolled out.

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use budget_api::agents::{Agent, AgentList, AgentListQuery};
use budget_api::baselines::Rollout;

use super::page::PageRequest;
use super::Json;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::http::extract::{Path, Query};
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
    Query(query): Query<AgentListQuery>,
) -> ApiResult<Json<AgentList>> {
    let page = PageRequest::new(query.limit, query.cursor.as_deref())?;
    let agents = service::agents::list(&state, page.after.as_ref(), page.fetch()).await?;
    let (agents, next_cursor) = page.split(agents, |a| (&a.service, &a.agent_id));
    Ok(Json(AgentList {
        agents: agents.into_iter().map(Agent::from).collect(),
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
