//! Baselines: recompute, read, list, diff, the call tree's numbers, approve, reject.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use budget_api::baselines::{
    ApproveResult, BaselineDiff, BaselineList, BaselineSummary, BaselineTree, Comment,
    RecomputeRequest, RejectResult,
};
use budget_core::baseline::{BaselineDocument, BaselineState};
use serde_json::{json, Value};

use super::page::PageRequest;
use super::Json;
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

/// The document as stored, read back from its bytes (what `GET /baselines/{id}` serves).
fn parse_document(stored: &StoredBaseline) -> ApiResult<BaselineDocument> {
    serde_json::from_str(&stored.bytes).map_err(|e| ApiError::internal(e.into()))
}

/// A list entry on the wire.
fn summary(b: crate::store::BaselineSummary) -> BaselineSummary {
    BaselineSummary {
        id: b.id,
        chain: b.chain,
        state: b.state,
        reason: b.reason,
        run_id: b.run_id,
        topology_version: b.topology_version,
        has_errors: b.has_errors,
        created_at: b.created_at,
        created_by: b.created_by,
        updated_at: b.updated_at,
    }
}

async fn recompute(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let request = recompute_request(Some(body.value))?;
    let version = request.topology_version.and_then(|v| i64::try_from(v).ok());
    let stored = service::recompute(&state, &principal, &chain, &request.run_id, version).await?;
    Ok(document(StatusCode::CREATED, &stored))
}

/// The body of a recompute, with a violation for each field that is missing or of the wrong
/// type.
fn recompute_request(body: Option<Value>) -> ApiResult<RecomputeRequest> {
    let run_id = string_field(&body, "run_id")?.ok_or_else(|| {
        ApiError::validation(
            "run_id is required",
            json!({"violations": [{"pointer": "/run_id", "message": "required"}]}),
        )
    })?;
    let version = match body.as_ref().and_then(|b| b.get("topology_version")) {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .filter(|v| *v >= 1)
                .map(i64::unsigned_abs)
                .ok_or_else(|| {
                    ApiError::validation(
                        "topology_version must be a positive integer",
                        json!({"violations": [{"pointer": "/topology_version", "message": "expected a positive integer"}]}),
                    )
                })?,
        ),
    };
    Ok(RecomputeRequest {
        run_id,
        topology_version: version,
    })
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
) -> ApiResult<Json<BaselineList>> {
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
    let baselines = baselines.into_iter().map(summary).collect();
    Ok(Json(BaselineList {
        baselines,
        next_cursor,
    }))
}

async fn diff(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<BaselineDiff>> {
    let against = query.get("against").map_or("current", String::as_str);
    Ok(Json(service::diff(&state, &id, against).await?.into()))
}

/// Every parent's need against its time, and how each budget is made: what the console's
/// call tree draws.
async fn tree(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<BaselineTree>> {
    Ok(Json(service::baselines::tree(&state, &id).await?))
}

async fn approve(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<Json<ApproveResult>> {
    let request = Comment {
        comment: string_field(&body, "comment")?,
    };
    let (stored, published) = service::approve(&state, &principal, &id, request.comment).await?;
    Ok(Json(ApproveResult {
        baseline: parse_document(&stored)?,
        revision: published.as_ref().map(|p| p.revision),
        superseded: published.and_then(|p| p.superseded),
    }))
}

async fn reject(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<Json<RejectResult>> {
    let request = Comment {
        comment: string_field(&body, "comment")?,
    };
    let stored = service::reject(&state, &principal, &id, request.comment).await?;
    Ok(Json(RejectResult {
        baseline: parse_document(&stored)?,
    }))
}
