//! Chains, their topologies, live budgets and rollback.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::query_int;
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

async fn list(State(state): State<AppState>, _: Principal) -> ApiResult<Json<Value>> {
    Ok(Json(
        json!({ "chains": service::chains::list(&state).await? }),
    ))
}

async fn get_topology(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let version = query_int(&query, "version", 1..=i64::MAX)?;
    Ok(Json(json!(
        service::chains::topology(&state, &chain, version).await?
    )))
}

async fn put_topology(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    body: JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let (version, created) = service::put_topology(&state, &principal, &chain, body.value).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!(version))))
}

async fn budgets(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(service::budgets(&state, &chain).await?)))
}

async fn rollback(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    body: JsonBody,
) -> ApiResult<Json<Value>> {
    let id = string_field(&Some(body.value), "baseline_id")?.ok_or_else(|| {
        ApiError::validation(
            "baseline_id is required",
            json!({"violations": [{"pointer": "/baseline_id", "message": "required"}]}),
        )
    })?;
    let published = service::rollback(&state, &principal, &chain, &id).await?;
    Ok(Json(json!({
        "chain": chain,
        "baseline_id": published.baseline.doc.id,
        "revision": published.revision,
        "superseded": published.superseded,
    })))
}
