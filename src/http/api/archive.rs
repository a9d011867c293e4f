//! Archive status of a baseline, and verification of the archive against the store.

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use budget_api::archive::{ArchiveReport, ArchiveStatus, VerifyQuery};

use super::Json;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::http::extract::{Path, Query};
use crate::service;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/baselines/{id}/archive", get(status))
        .route("/archive/verify", get(check))
}

/// Where a baseline's document is archived, and how its uploads went.
async fn status(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<ArchiveStatus>> {
    Ok(Json(service::archive::status(&state, &id).await?))
}

/// Every baseline (of `?date=YYYY-MM-DD`) whose object is missing or differs.
async fn check(
    State(state): State<AppState>,
    _: Principal,
    Query(query): Query<VerifyQuery>,
) -> ApiResult<Json<ArchiveReport>> {
    let date = query.date.as_deref().filter(|d| !d.is_empty());
    let report = service::archive::verify(&state, date).await?;
    Ok(Json(service::archive::report(report)))
}
