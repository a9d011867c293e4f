//! API tokens (admin only). The secret is shown once, when created.
//!
//! Every token belongs to an owner — a person or a pipeline, `owner` at creation, its name by
//! default — and rotating a token (a new token, with a new name and secret, for the same
//! role and owner) keeps it: four eyes compares owners (SPEC §7).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use axum::routing::{delete, get, post};
use axum::Router;
use budget_api::tokens::{
    May, Token, TokenCreateRequest, TokenCreated, TokenList, TokenRotateRequest, WhoAmI,
};

use super::Json;
use crate::auth::{Principal, Role};
use crate::error::{ApiError, ApiResult};
use crate::http::extract::{Path, RequestBody};
use crate::http::middleware::NotReplayable;
use crate::service::{self, tokens::Issued, violation};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/tokens", get(list).post(create))
        .route("/tokens/{name}", delete(revoke))
        .route("/tokens/{name}/rotate", post(rotate))
        .route("/whoami", get(whoami))
}

/// The caller's token name and role, and what the role may do (for clients such as the console
/// to offer only what is allowed; the server enforces it regardless).
async fn whoami(principal: Principal) -> Json<WhoAmI> {
    Json(WhoAmI {
        may: May {
            read: true,
            upload: principal.has_any(&[Role::Uploader]),
            approve: principal.has_any(&[Role::Approver]),
            admin: principal.role == Role::Admin,
        },
        role: principal.role.as_str().into(),
        name: principal.name,
        owner: principal.owner,
    })
}

async fn list(State(state): State<AppState>) -> ApiResult<Json<TokenList>> {
    let tokens = service::tokens::list(&state).await?;
    let tokens = tokens
        .into_iter()
        .map(|t| Token {
            name: t.name,
            role: t.role.as_str().into(),
            owner: t.owner,
            created_at: t.created_at,
            created_by: t.created_by,
        })
        .collect();
    Ok(Json(TokenList { tokens }))
}

impl RequestBody for TokenCreateRequest {
    /// `name is required`, `role is required`, in the violation too.
    fn missing(field: &str) -> ApiError {
        let message = format!("{field} is required");
        violation(&format!("/{field}"), message.clone(), message)
    }
}

async fn create(
    State(state): State<AppState>,
    principal: Principal,
    Json(request): Json<TokenCreateRequest>,
) -> ApiResult<Response> {
    let issued = service::tokens::create(&state, &principal, request).await?;
    Ok(created(issued))
}

impl RequestBody for TokenRotateRequest {
    fn missing(_name: &str) -> ApiError {
        violation("/name", "name (of the new token) is required", "required")
    }
}

/// A new token with the role and owner of `{name}` and a new secret, named by the body's
/// `name`. The old token keeps working until it is revoked, so clients can switch first.
async fn rotate(
    State(state): State<AppState>,
    principal: Principal,
    Path(old): Path<String>,
    Json(request): Json<TokenRotateRequest>,
) -> ApiResult<Response> {
    let issued = service::tokens::rotate(&state, &principal, &old, &request.name).await?;
    Ok(created(issued))
}

/// `201` with the new token's secret (never kept for an `Idempotency-Key` repeat), or `200`
/// without it for a repeat of a creation that committed under its `Idempotency-Key`.
fn created(issued: Issued) -> Response {
    let record = issued.record;
    let mut created = TokenCreated {
        name: record.name,
        role: record.role.as_str().into(),
        owner: record.owner,
        created_at: record.created_at,
        token: None,
        message: None,
    };
    let Some(token) = issued.secret else {
        // The secret was answered once and is kept nowhere.
        created.message = Some(
            "this Idempotency-Key already created the token; its secret is shown only once \
             (revoke the token and create another if it was lost)"
                .into(),
        );
        return (StatusCode::OK, Json(created)).into_response();
    };
    created.token = Some(token);
    let mut response = (StatusCode::CREATED, Json(created)).into_response();
    // Never kept for repeats: it carries the secret.
    response.extensions_mut().insert(NotReplayable);
    response
}

async fn revoke(
    State(state): State<AppState>,
    principal: Principal,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    service::tokens::revoke(&state, &principal, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
