//! Load-test runs.

use std::time::Duration;

use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use budget_api::runs::{Run, RunList, RunListQuery, RunUploadResult, UploadQuery};
use budget_ingest::Format;

use super::page::DEFAULT_LIMIT;
use super::upload::{self, UploadOptions};
use super::Json;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::http::extract::{JsonBody, Path, Query};
use crate::service;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/chains/{chain}/runs",
            // Uploads enforce `max_upload_bytes` (files) and `max_body_bytes` (JSON) themselves.
            post(upload).layer(DefaultBodyLimit::disable()).get(list),
        )
        .route("/chains/{chain}/runs/{run_id}", get(show))
}

/// A native JSON run, or load-tool files (`?format=`, detected, or multipart).
async fn upload(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    Query(query): Query<UploadQuery>,
    req: Request,
) -> ApiResult<(StatusCode, Json<RunUploadResult>)> {
    service::check_chain_name(&chain)?;
    // A dry run stores nothing: 200, not 201.
    let dry_run = query.dry_run.unwrap_or(false);
    let q = UploadOptions::parse(query)?;
    let mut req = req;
    let mut native = matches!(q.format, Some(Format::Native));
    if q.format.is_none() && upload::is_json(&req) {
        // A JSON body is native unless its content is a load tool's (k6, oha, … sent as JSON).
        let (whole, tool) = upload::peek_tool(req).await?;
        req = whole;
        native = !tool;
    }
    let outcome = if upload::is_multipart(&req) {
        // An unknown chain is refused before its files are read.
        service::chains::require(&state, &chain).await?;
        let turn = upload_turn(&state, &principal, req.version()).await?;
        let req = turn.pace(req);
        let (files, sources, map) = upload::read_multipart(&state, req, &q).await?;
        service::upload_tool_run(&state, &principal, &chain, files, sources, &map, dry_run).await?
    } else if native {
        let body = JsonBody::from_request(req, &state).await?;
        service::upload_run(&state, &principal, &chain, body.value, &body.raw, dry_run).await?
    } else {
        service::chains::require(&state, &chain).await?;
        let turn = upload_turn(&state, &principal, req.version()).await?;
        let req = turn.pace(req);
        let (files, sources) = upload::read_raw(&state, req, &q).await?;
        service::upload_tool_run(&state, &principal, &chain, files, sources, &q.map, dry_run)
            .await?
    };
    let status = if dry_run {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(outcome)))
}

/// A load-tool upload's turn, waited for at most `request_timeout_secs` (which does not
/// apply to uploads otherwise); not waited for over HTTP/2, where a stream whose data is not
/// read holds part of its connection's flow-control window.
async fn upload_turn(
    state: &AppState,
    principal: &Principal,
    version: axum::http::Version,
) -> ApiResult<upload::Turn> {
    let wait = (version < axum::http::Version::HTTP_2)
        .then(|| Duration::from_secs(state.settings.http_limits.request_timeout_secs));
    state.uploads.turn(&principal.token_id, wait).await
}

async fn show(
    State(state): State<AppState>,
    _: Principal,
    Path((chain, run_id)): Path<(String, String)>,
) -> ApiResult<Json<Run>> {
    Ok(Json(service::runs::get(&state, &chain, &run_id).await?))
}

async fn list(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
    Query(query): Query<RunListQuery>,
) -> ApiResult<Json<RunList>> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let runs = service::runs::list(&state, &chain, limit).await?;
    Ok(Json(RunList { runs }))
}
