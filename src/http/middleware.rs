//! Authentication and `Idempotency-Key` handling, applied to every `/api/v1` route.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::Digest;

use crate::auth::{hash_token, Principal};
use crate::error::{ApiError, Code};
use crate::service::now;
use crate::state::AppState;
use crate::store::{IdemBegin, IdemResponse};

/// Resolves the bearer token to a [`Principal`]; `401` when missing or unknown.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let unauthorized = |message: &str| {
        let mut resp = ApiError::new(Code::Unauthorized, message).into_response();
        resp.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"budgetd\""),
        );
        resp
    };
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return unauthorized("missing bearer token: send Authorization: Bearer <token>");
    };
    match state.store.find_token(&hash_token(token)).await {
        Ok(Some(record)) => {
            req.extensions_mut().insert(Principal {
                name: record.name,
                role: record.role,
            });
            next.run(req).await
        }
        Ok(None) => unauthorized("invalid or revoked token"),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// How long a request waits for another with the same key still in flight.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(30);

/// Same key and body → the first response again, byte for byte; same key, other body → 409.
/// Keys are scoped to the token. Responses with status ≥ 500 are not kept, so a retry runs again.
pub async fn idempotency(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let writes = matches!(
        *req.method(),
        Method::POST | Method::PUT | Method::DELETE | Method::PATCH
    );
    let Some(key) = req.headers().get("idempotency-key").cloned() else {
        return next.run(req).await;
    };
    if !writes {
        return next.run(req).await;
    }
    let key = match key.to_str() {
        Ok(k) if (1..=255).contains(&k.len()) && k.chars().all(|c| c.is_ascii_graphic()) => {
            k.to_owned()
        }
        _ => {
            return ApiError::bad_request(
                "Idempotency-Key must be 1-255 printable ASCII characters",
            )
            .into_response()
        }
    };
    let Some(principal) = req.extensions().get::<Principal>().cloned() else {
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    let limit = state.settings.max_body_bytes;
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return ApiError::new(
            Code::PayloadTooLarge,
            format!(
                "a request with an Idempotency-Key is kept whole to compare repeats, so its body may be \
                 at most {limit} bytes (max_body_bytes); send larger uploads without the key"
            ),
        )
        .into_response();
    };
    let mut hasher = sha2::Sha256::new();
    hasher.update(parts.method.as_str());
    hasher.update(b"\n");
    hasher.update(parts.uri.to_string());
    hasher.update(b"\n");
    hasher.update(&bytes);
    let request_hash = hex::encode(hasher.finalize());

    let started = Instant::now();
    loop {
        match state
            .store
            .idem_begin(&principal.name, &key, &request_hash, &now())
            .await
        {
            Err(e) => return ApiError::from(e).into_response(),
            Ok(IdemBegin::Mismatch) => {
                return ApiError::conflict(format!(
                    "Idempotency-Key {key:?} was already used with a different request"
                ))
                .into_response()
            }
            Ok(IdemBegin::Done(stored)) => return replay(stored),
            Ok(IdemBegin::InFlight) if started.elapsed() < IN_FLIGHT_WAIT => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(IdemBegin::InFlight) => {
                return ApiError::conflict(format!(
                    "a request with Idempotency-Key {key:?} is still in progress"
                ))
                .into_response()
            }
            Ok(IdemBegin::Started) => break,
        }
    }

    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    if response.status().is_server_error() {
        if let Err(e) = state.store.idem_abort(&principal.name, &key).await {
            tracing::warn!(error = %e, "failed to release an idempotency key");
        }
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            let _ = state.store.idem_abort(&principal.name, &key).await;
            return ApiError::internal(anyhow::anyhow!("failed to buffer response: {e}"))
                .into_response();
        }
    };
    let stored = IdemResponse {
        status: parts.status.as_u16(),
        content_type: parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_owned(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    if let Err(e) = state
        .store
        .idem_finish(&principal.name, &key, &stored)
        .await
    {
        tracing::warn!(error = %e, "failed to store an idempotent response");
    }
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}

fn replay(stored: IdemResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    let mut resp = (status, stored.body).into_response();
    if let Ok(ct) = HeaderValue::from_str(&stored.content_type) {
        resp.headers_mut().insert(CONTENT_TYPE, ct);
    }
    resp.headers_mut()
        .insert("idempotent-replayed", HeaderValue::from_static("true"));
    resp
}
