//! Load-test runs.

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use budget_core::us_to_ms;
use serde_json::{json, Value};

use super::query_int;
use crate::auth::{Principal, Role};
use crate::error::{ApiError, ApiResult};
use crate::http::extract::JsonBody;
use crate::service;
use crate::state::AppState;
use crate::store::StoredRun;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/chains/{chain}/runs", post(upload).get(list))
        .route("/chains/{chain}/runs/{run_id}", get(show))
}

async fn upload(
    State(state): State<AppState>,
    principal: Principal,
    Path(chain): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    principal.require(&[Role::Uploader])?;
    if let Some(format) = query.get("format").filter(|f| f.as_str() != "native") {
        return Err(ApiError::bad_request(format!(
            "unsupported run format {format:?}; this server accepts the native JSON format (schema /schemas/run.json)"
        )));
    }
    let outcome = service::upload_run(&state, &principal, &chain, body.value, &body.raw).await?;
    Ok((StatusCode::CREATED, Json(json!(outcome))))
}

fn view(run: &StoredRun) -> Value {
    let segments: Vec<Value> = run
        .data
        .segments
        .iter()
        .map(|(id, s)| {
            json!({
                "id": id,
                "samples": s.samples,
                "failures": s.failures,
                "p50_ms": s.p50_us.map(us_to_ms),
                "p99_ms": us_to_ms(s.p99_us),
                "p999_ms": us_to_ms(s.p999_us),
            })
        })
        .collect();
    let mut v = json!(run);
    v["segments"] = Value::Array(segments);
    v
}

async fn show(
    State(state): State<AppState>,
    _: Principal,
    Path((chain, run_id)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    service::check_chain_name(&chain)?;
    Ok(Json(view(&state.store.get_run(&chain, &run_id).await?)))
}

async fn list(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    service::check_chain_name(&chain)?;
    state.store.get_topology(&chain, None).await?;
    let limit = query_int(&query, "limit", 1..=1000)?.unwrap_or(100);
    let runs = state.store.list_runs(&chain, limit).await?;
    Ok(Json(
        json!({ "runs": runs.iter().map(view).collect::<Vec<_>>() }),
    ))
}
