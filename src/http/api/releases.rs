//! Releases citing baseline ids.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use budget_api::releases::{Release, ReleaseList, ReleaseListQuery, ReleaseRequest};

use super::page::DEFAULT_LIMIT;
use super::Json;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::http::extract::{Path, Query, RequestBody};
use crate::service;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/releases", get(list).post(record))
        .route("/baselines/{id}/releases", get(of_baseline))
}

/// A field missing or not a string is refused like a blank or over-long one.
impl RequestBody for ReleaseRequest {
    fn missing(field: &str) -> ApiError {
        service::releases::refused(field)
    }

    fn invalid(field: &str) -> ApiError {
        service::releases::refused(field)
    }
}

async fn record(
    State(state): State<AppState>,
    principal: Principal,
    Json(request): Json<ReleaseRequest>,
) -> ApiResult<(StatusCode, Json<Release>)> {
    let release = service::record_release(&state, &principal, request).await?;
    Ok((StatusCode::CREATED, Json(release)))
}

async fn list(
    State(state): State<AppState>,
    _: Principal,
    Query(query): Query<ReleaseListQuery>,
) -> ApiResult<Json<ReleaseList>> {
    let baseline = query.baseline_id.as_deref().filter(|s| !s.is_empty());
    let svc = query.service.as_deref().filter(|s| !s.is_empty());
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let releases = service::releases::list(&state, baseline, svc, limit).await?;
    Ok(Json(ReleaseList { releases }))
}

async fn of_baseline(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<ReleaseList>> {
    let releases = service::releases::of_baseline(&state, &id).await?;
    Ok(Json(ReleaseList { releases }))
}
