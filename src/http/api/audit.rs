//! The audit log: who did what, newest first.

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use budget_api::audit::{AuditLog, AuditQuery};

use super::page::DEFAULT_LIMIT;
use super::Json;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::http::extract::Query;
use crate::service;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/audit", get(list))
}

async fn list(
    State(state): State<AppState>,
    _: Principal,
    Query(query): Query<AuditQuery>,
) -> ApiResult<Json<AuditLog>> {
    let chain = query.chain.as_deref().filter(|c| !c.is_empty());
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    let entries = service::audit::log(&state, chain, limit, query.before).await?;
    Ok(Json(AuditLog { entries }))
}
