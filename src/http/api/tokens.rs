//! API tokens (admin only). The secret is shown once, when created.
//!
//! Every token belongs to an owner — a person or a pipeline, `owner` at creation, its name by
//! default — and rotating a token (a new token, with a new name and secret, for the same
//! role and owner) keeps it: four eyes compares owners (SPEC §7).

use crate::http::extract::Path;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::auth::{generate_token, hash_token, valid_token_name, Principal, Role};
use crate::error::{ApiError, ApiResult};
use crate::http::extract::{string_field, JsonBody};
use crate::http::middleware::NotReplayable;
use crate::service::now;
use crate::state::AppState;
use crate::store::{Audit, NewToken, TokenRecord};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tokens", get(list).post(create))
        .route("/tokens/{name}", delete(revoke))
        .route("/tokens/{name}/rotate", post(rotate))
        .route("/whoami", get(whoami))
}

/// The caller's token name and role, and what the role may do (for clients such as the console
/// to offer only what is allowed; the server enforces it regardless).
async fn whoami(principal: Principal) -> Json<Value> {
    Json(json!({
        "name": principal.name,
        "role": principal.role,
        "owner": principal.owner,
        "may": {
            "read": true,
            "upload": principal.has_any(&[Role::Uploader]),
            "approve": principal.has_any(&[Role::Approver]),
            "admin": principal.role == Role::Admin,
        },
    }))
}

async fn list(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    Ok(Json(json!({ "tokens": state.store.list_tokens().await? })))
}

async fn create(
    State(state): State<AppState>,
    principal: Principal,
    body: JsonBody,
) -> ApiResult<Response> {
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
    let owner = string_field(&body, "owner")?.unwrap_or_else(|| name.clone());
    if !valid_token_name(&owner) {
        return Err(violation(
            "/owner",
            format!("invalid owner {owner:?}: 1-64 letters, digits, '-', '_', '.', '@'"),
        ));
    }
    let token = generate_token();
    let audit = Audit {
        actor: principal.name.clone(),
        action: "token.create",
        chain: None,
        subject: Some(name.clone()),
        detail: json!({"role": role, "owner": owner, "by_owner": principal.owner}),
        at: now(),
    };
    let new = NewToken {
        name,
        role,
        owner,
        hash: hash_token(&token),
    };
    let record = state.store.create_token(&new, audit).await?;
    created(&state, record, &token, &new.hash).await
}

/// A new token with the role and owner of `{name}` and a new secret, named by the body's
/// `name`. The old token keeps working until it is revoked, so clients can switch first.
async fn rotate(
    State(state): State<AppState>,
    principal: Principal,
    Path(old): Path<String>,
    body: JsonBody,
) -> ApiResult<Response> {
    let body = Some(body.value);
    let name = string_field(&body, "name")?.ok_or_else(|| {
        ApiError::validation(
            "name (of the new token) is required",
            json!({"violations": [{"pointer": "/name", "message": "required"}]}),
        )
    })?;
    if !valid_token_name(&name) {
        return Err(ApiError::validation(
            format!("invalid token name {name:?}: 1-64 letters, digits, '-', '_', '.', '@'"),
            json!({"violations": [{"pointer": "/name", "message": "1-64 letters, digits, '-', '_', '.', '@'"}]}),
        ));
    }
    let token = generate_token();
    let hash = hash_token(&token);
    let audit = Audit {
        actor: principal.name.clone(),
        action: "token.rotate",
        chain: None,
        subject: Some(name.clone()),
        detail: json!({"rotated": old, "by_owner": principal.owner}),
        at: now(),
    };
    let record = state.store.rotate_token(&old, &name, &hash, audit).await?;
    created(&state, record, &token, &hash).await
}

/// `201` with the new token's secret (never kept for an `Idempotency-Key` repeat).
async fn created(
    state: &AppState,
    record: TokenRecord,
    token: &str,
    hash: &str,
) -> ApiResult<Response> {
    let created = json!({"name": record.name, "role": record.role, "owner": record.owner, "created_at": record.created_at});
    if state.store.find_token(hash).await?.is_none() {
        // A repeat of a creation that committed under its Idempotency-Key: the secret was
        // answered once and is kept nowhere.
        let mut created = created;
        created["token"] = Value::Null;
        created["message"] = json!(
            "this Idempotency-Key already created the token; its secret is shown only once \
             (revoke the token and create another if it was lost)"
        );
        return Ok((StatusCode::OK, Json(created)).into_response());
    }
    let mut created = created;
    created["token"] = json!(token);
    let mut response = (StatusCode::CREATED, Json(created)).into_response();
    // Never kept for repeats: it carries the secret.
    response.extensions_mut().insert(NotReplayable);
    Ok(response)
}

async fn revoke(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
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
