//! Releases citing baseline ids.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use super::query_int;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::http::extract::JsonBody;
use crate::service;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/releases", get(list).post(record))
        .route("/baselines/{id}/releases", get(of_baseline))
}

async fn record(
    State(state): State<AppState>,
    principal: Principal,
    body: JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let release = service::record_release(&state, &principal, body.value).await?;
    Ok((StatusCode::CREATED, Json(json!(release))))
}

async fn list(
    State(state): State<AppState>,
    _: Principal,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let baseline = query
        .get("baseline_id")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    let svc = query
        .get("service")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    let limit = query_int(&query, "limit", 1..=1000)?.unwrap_or(100);
    let releases = service::releases::list(&state, baseline, svc, limit).await?;
    Ok(Json(json!({ "releases": releases })))
}

async fn of_baseline(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let releases = service::releases::of_baseline(&state, &id).await?;
    Ok(Json(json!({ "releases": releases })))
}
