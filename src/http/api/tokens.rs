//! API tokens (admin only). The secret is shown once, when created.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::auth::{generate_token, hash_token, valid_token_name, Principal, Role};
use crate::error::{ApiError, ApiResult};
use crate::http::extract::{string_field, JsonBody};
use crate::service::now;
use crate::state::AppState;
use crate::store::Audit;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tokens", get(list).post(create))
        .route("/tokens/{name}", delete(revoke))
        .route("/whoami", get(whoami))
}

/// The caller's token name and role, and what the role may do (for clients such as the console
/// to offer only what is allowed; the server enforces it regardless).
async fn whoami(principal: Principal) -> Json<Value> {
    Json(json!({
        "name": principal.name,
        "role": principal.role,
        "may": {
            "read": true,
            "upload": principal.has_any(&[Role::Uploader]),
            "approve": principal.has_any(&[Role::Approver]),
            "admin": principal.role == Role::Admin,
        },
    }))
}

async fn list(State(state): State<AppState>, principal: Principal) -> ApiResult<Json<Value>> {
    principal.require(&[Role::Admin])?;
    Ok(Json(json!({ "tokens": state.store.list_tokens().await? })))
}

async fn create(
    State(state): State<AppState>,
    principal: Principal,
    body: JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    principal.require(&[Role::Admin])?;
    let body = Some(body.value);
    let violation = |pointer: &str, message: String| {
        ApiError::validation(
            message.clone(),
            json!({"violations": [{"pointer": pointer, "message": message}]}),
        )
    };
    let name = string_field(&body, "name")?
        .ok_or_else(|| violation("/name", "name is required".into()))?;
    if !valid_token_name(&name) {
        return Err(violation(
            "/name",
            format!("invalid token name {name:?}: 1-64 letters, digits, '-', '_', '.', '@'"),
        ));
    }
    let role_name = string_field(&body, "role")?
        .ok_or_else(|| violation("/role", "role is required".into()))?;
    let role = Role::parse(&role_name).ok_or_else(|| {
        violation(
            "/role",
            format!("unknown role {role_name:?}: use reader, uploader, approver, agent or admin"),
        )
    })?;
    let token = generate_token();
    let audit = Audit {
        actor: principal.name.clone(),
        action: "token.create",
        chain: None,
        subject: Some(name.clone()),
        detail: json!({"role": role}),
        at: now(),
    };
    let record = state
        .store
        .create_token(&name, role, &hash_token(&token), audit)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"name": record.name, "role": record.role, "created_at": record.created_at, "token": token}),
        ),
    ))
}

async fn revoke(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    principal.require(&[Role::Admin])?;
    let audit = Audit {
        actor: principal.name.clone(),
        action: "token.revoke",
        chain: None,
        subject: Some(name.clone()),
        detail: json!({}),
        at: now(),
    };
    state.store.revoke_token(&name, audit).await?;
    Ok(StatusCode::NO_CONTENT)
}
