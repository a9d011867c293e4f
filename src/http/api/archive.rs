//! Archive status of a baseline, and verification of the archive against the store.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::archive::verify;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::archive_key;

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
) -> ApiResult<Json<Value>> {
    let baseline = state.store.get_baseline(&id).await?;
    let items = state.store.archive_items(&id).await?;
    let key = archive_key(
        &state.archive_prefix,
        &baseline.doc.created_at,
        &format!("{id}.json"),
    );
    let latest = items
        .iter()
        .rev()
        .find(|i| i.key == key && i.state != "superseded");
    let archive_state = match latest {
        Some(i) if i.state == "done" && i.sha256 == baseline.sha256 => "archived",
        Some(i) if i.state == "pending" && i.attempts > 0 => "retrying",
        Some(i) if i.state == "pending" => "pending",
        _ => "unknown",
    };
    Ok(Json(json!({
        "baseline_id": id,
        "archive": state.archiver.archive().describe(),
        "key": key,
        "sha256": baseline.sha256,
        "state": archive_state,
        "attempts": latest.map(|i| i.attempts),
        "last_error": latest.and_then(|i| i.last_error.clone()),
        "archived_at": latest.and_then(|i| i.archived_at.clone()),
        "uploads": items,
    })))
}

/// Every baseline (of `?date=YYYY-MM-DD`) whose object is missing or differs.
async fn check(
    State(state): State<AppState>,
    _: Principal,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let date = query
        .get("date")
        .map(String::as_str)
        .filter(|d| !d.is_empty());
    if let Some(d) = date {
        if !verify::valid_date(d) {
            return Err(ApiError::bad_request(format!(
                "date {d:?} must be YYYY-MM-DD"
            )));
        }
    }
    let report = verify::verify(
        &*state.store,
        &**state.archiver.archive(),
        &state.archive_prefix,
        date,
    )
    .await?;
    Ok(Json(json!(report)))
}
