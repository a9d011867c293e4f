//! Runtime feedback (SPEC §8): a chain's production figures, alerts, webhooks.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use budget_api::feedback::{
    AlertList, AlertQuery, DeliveryList, Production, ProductionQuery, Webhook, WebhookList,
    WebhookRequest,
};

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::http::extract::{Json, JsonBody, Path, Query};
use crate::service;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/chains/{chain}/production", get(production))
        .route("/alerts", get(alerts))
        .route("/webhooks", get(webhooks).post(create_webhook))
        .route("/webhooks/{id}", axum::routing::delete(delete_webhook))
        .route("/webhooks/{id}/deliveries", get(deliveries))
}

async fn production(
    State(state): State<AppState>,
    _: Principal,
    Path(chain): Path<String>,
    Query(q): Query<ProductionQuery>,
) -> ApiResult<Json<Production>> {
    let window = q.window.as_deref().unwrap_or("5m");
    Ok(Json(
        service::feedback::production(&state, &chain, window).await?,
    ))
}

async fn alerts(
    State(state): State<AppState>,
    _: Principal,
    Query(q): Query<AlertQuery>,
) -> ApiResult<Json<AlertList>> {
    Ok(Json(
        service::feedback::alerts(&state, q.state.as_deref()).await?,
    ))
}

async fn create_webhook(
    State(state): State<AppState>,
    principal: Principal,
    body: JsonBody,
) -> ApiResult<(StatusCode, Json<Webhook>)> {
    let req: WebhookRequest = serde_json::from_value(body.value).map_err(|e| {
        ApiError::bad_request(format!(
            "a webhook is {{\"url\": \"https://…\", \"secret\": \"…\", \"events\": [\"alert.firing\", …]}}: {e}"
        ))
    })?;
    let hook = service::feedback::create_webhook(&state, &principal, req).await?;
    Ok((StatusCode::CREATED, Json(hook)))
}

async fn webhooks(State(state): State<AppState>, _: Principal) -> ApiResult<Json<WebhookList>> {
    Ok(Json(service::feedback::webhooks(&state).await?))
}

async fn delete_webhook(
    State(state): State<AppState>,
    principal: Principal,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    service::feedback::delete_webhook(&state, &principal, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn deliveries(
    State(state): State<AppState>,
    _: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<DeliveryList>> {
    Ok(Json(service::feedback::deliveries(&state, &id).await?))
}
