//! Chains, their topologies, live budgets and rollback.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use budget_api::chains::{
    ChainList, LiveBudgets, RollbackRequest, RollbackResult, TopologyQuery, TopologyVersion,
};

use super::Json;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::http::extract::{JsonBody, Path, Query, RequestBody};
use crate::service;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/chains", get(list))
        .route(
            "/chains/{chain}/topology",
            get(get_topology).put(put_topology),
        )
        .route("/chains/{chain}/budgets", get(budgets))
        .route("/chains/{chain}/rollback", post(rollback))
}

async fn list(State(state): State<AppState>, _: Principal) -> ApiResult<Json<ChainList>> {
    let chains = service::chains::list(&state).await?;
    Ok(Json(ChainList { chains }))
}

async fn get_topology(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
    Query(query): Query<TopologyQuery>,
) -> ApiResult<Json<TopologyVersion>> {
    Ok(Json(
        service::chains::topology(&state, &chain, query.version).await?,
    ))
}

/// The body is checked against `schemas/topology.json` first, so its violations are answered
/// with their JSON pointers: it is read as it is, not as a typed request.
async fn put_topology(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    body: JsonBody,
) -> ApiResult<(StatusCode, Json<TopologyVersion>)> {
    let (stored, created) = service::put_topology(&state, &principal, &chain, body.value).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(stored)))
}

async fn budgets(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
) -> ApiResult<Json<LiveBudgets>> {
    Ok(Json(service::budgets(&state, &chain).await?))
}

impl RequestBody for RollbackRequest {}

async fn rollback(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    Json(request): Json<RollbackRequest>,
) -> ApiResult<Json<RollbackResult>> {
    let published = service::rollback(&state, &principal, &chain, &request.baseline_id).await?;
    Ok(Json(RollbackResult {
        chain,
        baseline_id: published.baseline.doc.id,
        revision: published.revision,
        superseded: published.superseded,
    }))
}
