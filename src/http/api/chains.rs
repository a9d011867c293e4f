//! Chains, their topologies, live budgets and rollback.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use budget_api::chains::{
    ChainList, ChainSummary, LiveChain, RollbackRequest, RollbackResult, TopologyVersion,
};
use serde_json::json;

use super::{query_int, Json};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::http::extract::{string_field, JsonBody};
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

/// A topology version on the wire.
fn version(v: crate::store::TopologyVersion) -> TopologyVersion {
    TopologyVersion {
        chain: v.chain,
        version: v.version,
        sha256: v.sha256,
        created_at: v.created_at,
        created_by: v.created_by,
        topology: v.topology,
    }
}

async fn list(State(state): State<AppState>, _: Principal) -> ApiResult<Json<ChainList>> {
    let chains = service::chains::list(&state).await?;
    let chains = chains
        .into_iter()
        .map(|c| ChainSummary {
            name: c.name,
            topology_version: c.topology_version,
            current_baseline: c.current_baseline,
            revision: c.revision,
            drafts: c.drafts,
            runs: c.runs,
            updated_at: c.updated_at,
        })
        .collect();
    Ok(Json(ChainList { chains }))
}

async fn get_topology(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<TopologyVersion>> {
    let wanted = query_int(&query, "version", 1..=i64::MAX)?;
    Ok(Json(version(
        service::chains::topology(&state, &chain, wanted).await?,
    )))
}

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
    Ok((status, Json(version(stored))))
}

async fn budgets(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
) -> ApiResult<Json<LiveChain>> {
    Ok(Json(service::budgets(&state, &chain).await?))
}

async fn rollback(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<RollbackResult>> {
    let request = RollbackRequest {
        baseline_id: string_field(&Some(body.value), "baseline_id")?.ok_or_else(|| {
            ApiError::validation(
                "baseline_id is required",
                json!({"violations": [{"pointer": "/baseline_id", "message": "required"}]}),
            )
        })?,
    };
    let published = service::rollback(&state, &principal, &chain, &request.baseline_id).await?;
    Ok(Json(RollbackResult {
        chain,
        baseline_id: published.baseline.doc.id,
        revision: published.revision,
        superseded: published.superseded,
    }))
}
