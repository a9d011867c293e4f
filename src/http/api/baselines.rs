//! Baselines: recompute, read, list, diff, the call tree's numbers, approve, reject.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use budget_core::baseline::BaselineState;
use serde_json::{json, Value};

use super::page::PageRequest;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::http::extract::{string_field, JsonBody, OptionalJsonBody};
use crate::service;
use crate::state::AppState;
use crate::store::StoredBaseline;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/chains/{chain}/baselines", post(recompute).get(list))
        .route("/baselines/{id}", get(show))
        .route("/baselines/{id}/diff", get(diff))
        .route("/baselines/{id}/tree", get(tree))
        .route("/baselines/{id}/approve", post(approve))
        .route("/baselines/{id}/reject", post(reject))
}

/// The baseline document exactly as stored (and archived).
fn document(status: StatusCode, stored: &StoredBaseline) -> Response {
    (
        status,
        [(CONTENT_TYPE, "application/json")],
        stored.bytes.clone(),
    )
        .into_response()
}

async fn recompute(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let body = Some(body.value);
    let run_id = string_field(&body, "run_id")?.ok_or_else(|| {
        ApiError::validation(
            "run_id is required",
            json!({"violations": [{"pointer": "/run_id", "message": "required"}]}),
        )
    })?;
    let version = match body.as_ref().and_then(|b| b.get("topology_version")) {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().filter(|v| *v >= 1).ok_or_else(|| {
            ApiError::validation(
                "topology_version must be a positive integer",
                json!({"violations": [{"pointer": "/topology_version", "message": "expected a positive integer"}]}),
            )
        })?),
    };
    let stored = service::recompute(&state, &principal, &chain, &run_id, version).await?;
    Ok(document(StatusCode::CREATED, &stored))
}

async fn show(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(document(
        StatusCode::OK,
        &service::baselines::get(&state, &id).await?,
    ))
}

/// A page of a chain's baselines, newest first: `?state=`, `?limit=` (default 100, at most
/// 1000) and `?cursor=` (the previous page's `next_cursor`).
async fn list(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let filter = match query.get("state").map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(BaselineState::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown state {s:?}: use draft, approved, superseded or rejected"
            ))
        })?),
    };
    let page = PageRequest::from_query(&query)?;
    let baselines =
        service::baselines::list(&state, &chain, filter, page.after.as_ref(), page.fetch()).await?;
    let (baselines, next_cursor) = page.split(baselines, |b| (&b.created_at, &b.id));
    Ok(Json(
        json!({ "baselines": baselines, "next_cursor": next_cursor }),
    ))
}

async fn diff(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let against = query.get("against").map_or("current", String::as_str);
    Ok(Json(json!(service::diff(&state, &id, against).await?)))
}

/// Every parent's need against its time, and how each budget is made: what the console's
/// call tree draws.
async fn tree(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(service::baselines::tree(&state, &id).await?)))
}

async fn approve(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<Json<Value>> {
    let comment = string_field(&body, "comment")?;
    let (stored, published) = service::approve(&state, &principal, &id, comment).await?;
    let doc: Value =
        serde_json::from_str(&stored.bytes).map_err(|e| ApiError::internal(e.into()))?;
    Ok(Json(json!({
        "baseline": doc,
        "revision": published.as_ref().map(|p| p.revision),
        "superseded": published.and_then(|p| p.superseded),
    })))
}

async fn reject(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<Json<Value>> {
    let comment = string_field(&body, "comment")?;
    let stored = service::reject(&state, &principal, &id, comment).await?;
    let doc: Value =
        serde_json::from_str(&stored.bytes).map_err(|e| ApiError::internal(e.into()))?;
    Ok(Json(json!({ "baseline": doc })))
}
