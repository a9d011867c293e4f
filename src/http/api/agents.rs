//! Fleet status: every agent seen within the retention period (paginated), and how far a
//! baseline has rolled out.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::page::PageRequest;
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
) -> ApiResult<Json<Value>> {
    let page = PageRequest::from_query(&query)?;
    let agents = service::agents::list(&state, page.after.as_ref(), page.fetch()).await?;
    let (agents, next_cursor) = page.split(agents, |a| (&a.service, &a.agent_id));
    Ok(Json(
        json!({ "agents": agents, "next_cursor": next_cursor }),
    ))
}

/// How many agents receiving the baseline's chain have ACKed (or NACKed) its publication.
async fn rollout(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(service::agents::rollout(&state, &id).await?)))
}
