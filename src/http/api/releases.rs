//! Releases citing baseline ids.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use budget_api::releases::{Release, ReleaseList};

use super::{query_int, Json};
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

/// A release on the wire.
fn wire(r: crate::store::Release) -> Release {
    Release {
        id: r.id,
        service: r.service,
        version: r.version,
        baseline_id: r.baseline_id,
        baseline_sha256: r.baseline_sha256,
        ticket: r.ticket,
        created_by: r.created_by,
        created_at: r.created_at,
    }
}

fn list_of(releases: Vec<crate::store::Release>) -> ReleaseList {
    ReleaseList {
        releases: releases.into_iter().map(wire).collect(),
    }
}

async fn record(
    State(state): State<AppState>,
    principal: Principal,
    body: JsonBody,
) -> ApiResult<(StatusCode, Json<Release>)> {
    let release = service::record_release(&state, &principal, body.value).await?;
    Ok((StatusCode::CREATED, Json(wire(release))))
}

async fn list(
    State(state): State<AppState>,
    _: Principal,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<ReleaseList>> {
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
    Ok(Json(list_of(releases)))
}

async fn of_baseline(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<ReleaseList>> {
    let releases = service::releases::of_baseline(&state, &id).await?;
    Ok(Json(list_of(releases)))
}
