//! Baselines: recompute, read, list, diff, the call tree's numbers, whether the caller may
//! approve, approve, reject.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use budget_api::baselines::{
    ApprovalCheck, ApproveRequest, ApproveResult, BaselineDiff, BaselineList, BaselineListQuery,
    BaselineTree, Canary, Comment, DiffQuery, DistributionQuery, RecomputeRequest, RejectResult,
    SegmentDistribution, WhatIf, WhatIfQuery,
};
use budget_core::baseline::{BaselineDocument, BaselineState};

use super::page::PageRequest;
use super::Json;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::http::extract::{not_text, required, Path, Query, RequestBody};
use crate::service::{self, violation};
use crate::state::AppState;
use crate::store::StoredBaseline;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/chains/{chain}/baselines", post(recompute).get(list))
        .route("/baselines/{id}", get(show))
        .route("/baselines/{id}/diff", get(diff))
        .route("/baselines/{id}/tree", get(tree))
        .route("/baselines/{id}/whatif", get(whatif))
        .route("/baselines/{id}/distribution", get(distribution))
        .route("/baselines/{id}/approval", get(approval))
        .route("/baselines/{id}/approve", post(approve))
        .route("/baselines/{id}/reject", post(reject))
        .route("/baselines/{id}/promote", post(promote))
        .route("/baselines/{id}/abort", post(abort))
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

impl RequestBody for RecomputeRequest {
    fn invalid(field: &str) -> ApiError {
        if field == "topology_version" {
            violation(
                "/topology_version",
                "topology_version must be a positive integer",
                "expected a positive integer",
            )
        } else {
            not_text(field)
        }
    }
}

async fn recompute(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    Json(request): Json<RecomputeRequest>,
) -> ApiResult<Response> {
    match request.from.as_deref() {
        None => {}
        Some("production") => {
            let window = request.window.as_deref().unwrap_or("1h");
            let stored =
                service::feedback::production_draft(&state, &principal, &chain, window).await?;
            return Ok(document(StatusCode::CREATED, &stored));
        }
        Some(other) => {
            return Err(violation(
                "/from",
                format!("from={other:?}: only \"production\" (or a run_id without from)"),
                "expected \"production\"",
            ))
        }
    }
    if request.run_id.is_empty() {
        return Err(required("run_id"));
    }
    let version = match request.topology_version {
        None => None,
        Some(v) => Some(
            i64::try_from(v)
                .ok()
                .filter(|v| *v >= 1)
                .ok_or_else(|| RecomputeRequest::invalid("topology_version"))?,
        ),
    };
    let stored = service::recompute(&state, &principal, &chain, &request.run_id, version).await?;
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
    Query(query): Query<BaselineListQuery>,
) -> ApiResult<Json<BaselineList>> {
    let filter = match query.state.as_deref() {
        None | Some("") => None,
        Some(s) => Some(BaselineState::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown state {s:?}: use draft, approved, superseded or rejected"
            ))
        })?),
    };
    let page = PageRequest::new(query.limit, query.cursor.as_deref())?;
    let baselines =
        service::baselines::list(&state, &chain, filter, page.after.as_ref(), page.fetch()).await?;
    let (baselines, next_cursor) = page.split(baselines, |b| (&b.created_at, &b.id));
    Ok(Json(BaselineList {
        baselines,
        next_cursor,
    }))
}

async fn diff(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
    Query(query): Query<DiffQuery>,
) -> ApiResult<Json<BaselineDiff>> {
    let against = query.against.as_deref().unwrap_or("current");
    Ok(Json(service::diff(&state, &id, against).await?))
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

/// What a timeout would kill of a segment's load-test samples (`?segment=…&timeout_ms=…`).
async fn whatif(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
    Query(query): Query<WhatIfQuery>,
) -> ApiResult<Json<WhatIf>> {
    let answer =
        service::distributions::whatif(&state, &id, query.segment.as_deref(), query.timeout_ms)
            .await?;
    Ok(Json(answer))
}

/// A segment's latency distribution in the baseline's run, as the console draws it.
async fn distribution(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
    Query(query): Query<DistributionQuery>,
) -> ApiResult<Json<SegmentDistribution>> {
    let answer =
        service::distributions::distribution(&state, &id, query.segment.as_deref()).await?;
    Ok(Json(answer))
}

/// Approve's body may be empty; reject's comment is required by the rule, not the body.
impl RequestBody for Comment {
    fn empty() -> Option<Self> {
        Some(Self::default())
    }
}

/// Approve's body may be empty; a bad `rollout` is named with the shape it must have.
impl RequestBody for ApproveRequest {
    fn empty() -> Option<Self> {
        Some(Self::default())
    }

    fn missing(field: &str) -> ApiError {
        // Only a `null` rollout gets here (the member is optional): refused, since reading it
        // as "no rollout" would publish to every agent.
        Self::invalid(field)
    }

    fn invalid(field: &str) -> ApiError {
        if field == "rollout" {
            violation(
                "/rollout",
                "rollout must be {\"canary\": {\"percent\": 1-99} or {\"canary\": {\"labels\": {\"key\": \"value\"}}}, \"bake_s\": seconds, \"auto\": true|false} (leave it out to publish to every agent)",
                "expected a canary rollout",
            )
        } else {
            not_text(field)
        }
    }
}

/// Whether the caller may approve the baseline now, and every reason they may not.
async fn approval(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<ApprovalCheck>> {
    Ok(Json(
        service::baselines::approval(&state, &principal, &id).await?,
    ))
}

async fn approve(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Json(request): Json<ApproveRequest>,
) -> ApiResult<Json<ApproveResult>> {
    let (stored, published) = service::approve(
        &state,
        &principal,
        &id,
        request.comment,
        request.rollout.as_ref(),
    )
    .await?;
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
    Json(request): Json<Comment>,
) -> ApiResult<Json<RejectResult>> {
    let stored = service::reject(&state, &principal, &id, request.comment).await?;
    Ok(Json(RejectResult {
        baseline: parse_document(&stored)?,
    }))
}

/// Promotes a baking canary: every agent gets its baseline.
async fn promote(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Json(request): Json<Comment>,
) -> ApiResult<Json<Canary>> {
    let end = service::rollouts::CanaryEnd::Promote;
    Ok(Json(
        service::rollouts::decide(&state, &principal, &id, end, request.comment).await?,
    ))
}

/// Aborts a baking canary: its agents get the previous baseline back, as a new revision.
async fn abort(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
    Json(request): Json<Comment>,
) -> ApiResult<Json<Canary>> {
    let end = service::rollouts::CanaryEnd::Abort;
    Ok(Json(
        service::rollouts::decide(&state, &principal, &id, end, request.comment).await?,
    ))
}
