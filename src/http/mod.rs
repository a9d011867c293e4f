//! HTTP transport: `/api/v1` (authenticated), schemas, health and metrics.

pub mod api;
pub mod bodies;
pub mod console;
pub mod extract;
pub mod fields;
pub mod json_cost;
pub mod metrics;
pub mod middleware;
pub mod read_timeout;
pub mod serve;
mod sorted;

use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS};
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{middleware as mw, Json, Router};
use extract::Path;
use serde_json::json;

use crate::error::{ApiError, Code};
use crate::schemas;
use crate::state::AppState;

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    // Order of work on a request: authenticate (headers only), route, authorize the role for
    // the matched route, and only then read the body (idempotency, handler).
    let api = api::router()
        .route_layer(mw::from_fn_with_state(
            state.clone(),
            middleware::idempotency,
        ))
        .route_layer(mw::from_fn(middleware::authorize))
        .layer(mw::from_fn_with_state(
            state.clone(),
            middleware::authenticate,
        ));
    Router::new()
        .nest("/api/v1", api)
        .merge(console::router())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::render))
        .route("/schemas/{name}", get(schema))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(mw::from_fn(metrics::track))
        .layer(mw::map_response(security_headers))
        .with_state(state)
}

/// Every response: no MIME sniffing, no referrer leaking API paths (tokens never travel in
/// URLs, but chain and baseline names do).
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(state): State<AppState>) -> Response {
    match crate::service::admin::ready(&state).await {
        Ok(backend) => Json(json!({"status": "ready", "store": backend})).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            ApiError::new(Code::Unavailable, "the database does not answer").into_response()
        }
    }
}

async fn schema(Path(name): Path<String>) -> Response {
    match name.strip_suffix(".json").and_then(schemas::text) {
        Some(text) => (
            StatusCode::OK,
            [(CONTENT_TYPE, "application/schema+json")],
            text,
        )
            .into_response(),
        None => ApiError::not_found(format!(
            "no schema {name:?}; available: topology.json, run.json, baseline.json"
        ))
        .into_response(),
    }
}

async fn openapi() -> Response {
    (
        StatusCode::OK,
        [(CONTENT_TYPE, "application/json")],
        schemas::OPENAPI,
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; the API lives under /api/v1")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(Code::MethodNotAllowed, "method not allowed on this route")
}
