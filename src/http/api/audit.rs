//! The audit log: who did what, newest first.

use std::collections::HashMap;

use crate::http::extract::Query;
use axum::extract::State;
use axum::routing::get;
use axum::Router;
use budget_api::audit::{AuditEntry, AuditLog};

use super::{query_int, Json};
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::service;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/audit", get(list))
}

async fn list(
    State(state): State<AppState>,
    _: Principal,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<AuditLog>> {
    let chain = query
        .get("chain")
        .map(String::as_str)
        .filter(|c| !c.is_empty());
    let limit = query_int(&query, "limit", 1..=1000)?.unwrap_or(100);
    let before = query_int(&query, "before", 1..=i64::MAX)?;
    let entries = service::audit::log(&state, chain, limit, before).await?;
    let entries = entries
        .into_iter()
        .map(|e| AuditEntry {
            id: e.id,
            at: e.at,
            actor: e.actor,
            action: e.action,
            chain: e.chain,
            subject: e.subject,
            detail: e.detail,
        })
        .collect();
    Ok(Json(AuditLog { entries }))
}
