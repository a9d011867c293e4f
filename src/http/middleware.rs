//! Authentication and `Idempotency-Key` handling, applied to every `/api/v1` route.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::Digest;

use crate::auth::{self, Principal, Via};
use crate::error::{ApiError, Code};
use crate::http::bodies::Charged;
use crate::service::idempotency::{self, with_idempotency, IdemClaim, IdemLookup, IdemResponse};
use crate::state::AppState;

/// Resolves the bearer token to a [`Principal`] ([`auth::authenticate`]); `401` when missing
/// or unknown.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    // A value of bytes that are not visible ASCII holds no token either: said so, not
    // "missing".
    let authorization = req
        .headers()
        .get(AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    match auth::authenticate(&state, authorization, Via::Header).await {
        Ok(principal) => {
            req.extensions_mut().insert(principal);
            next.run(req).await
        }
        Err(e) if e.code == Code::Unauthorized => {
            let mut resp = e.into_response();
            resp.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"budgetd\""),
            );
            resp
        }
        Err(e) => e.into_response(),
    }
}

/// Refuses a caller whose role may not call the matched route (`403`), before the handler
/// or the idempotency layer reads a byte of the body. Runs after routing, as a route layer.
pub async fn authorize(req: Request, next: Next) -> Response {
    let Some(principal) = req.extensions().get::<Principal>() else {
        return ApiError::new(Code::Unauthorized, "missing bearer token").into_response();
    };
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str())
        .unwrap_or_default();
    let route = route.strip_prefix("/api/v1").unwrap_or(route);
    let roles = crate::http::api::roles_for(req.method(), route);
    if let Err(e) = principal.require(roles) {
        return e.into_response();
    }
    next.run(req).await
}

/// Responses of this request must not be kept for repeats (they carry a secret, e.g. a new
/// token): a repeat runs again and answers without it.
#[derive(Debug, Clone, Copy)]
pub struct NotReplayable;

/// Requests with the same key on this replica run one at a time, so a repeat waits for the
/// first and answers its response. (Across replicas the store decides: the key's record is
/// written with the effect, and a second commit under the key fails.)
static IN_FLIGHT: LazyLock<Mutex<HashMap<KeySlot, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Default::default);

/// `(token identity, Idempotency-Key)`.
type KeySlot = (String, String);

/// Same key and request → the first response again, byte for byte; same key, other request →
/// 409. Keys are scoped to the token's identity. The key's record is written by the store in
/// the transaction of the request's effect (see [`IdemClaim`]): a request that
/// died before committing leaves nothing (a repeat runs afresh), one that died after its
/// commit leaves the committed result (a repeat answers it). Responses with status ≥ 500 are
/// not kept.
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
    // Keys belong to the token's identity, not its name (a re-issued name starts afresh).
    let Some(scope) = req
        .extensions()
        .get::<Principal>()
        .map(|p| p.token_id.clone())
    else {
        return next.run(req).await;
    };
    let limit = state.settings.max_body_bytes;
    let (mut parts, body) = req.into_parts();
    // The body's charge is held until the request is done; the handler's reader is told so
    // and does not charge its bytes again.
    let known = crate::http::extract::content_length(&parts.headers);
    let (bytes, _held) = match state
        .bodies
        .read(body, known, limit, false, Some(&scope))
        .await
    {
        Ok(read) => read,
        Err(mut error) => {
            if error.code == Code::PayloadTooLarge {
                error.message = format!(
                    "a request with an Idempotency-Key is kept whole to compare repeats, so its body \
                     may be at most {limit} bytes (max_body_bytes); send larger uploads without the key"
                );
            }
            return error.into_response();
        }
    };
    let mut hasher = sha2::Sha256::new();
    for part in [
        parts.method.as_str().as_bytes(),
        parts.uri.to_string().as_bytes(),
        parts
            .headers
            .get(CONTENT_TYPE)
            .map_or(&b""[..], HeaderValue::as_bytes),
    ] {
        hasher.update(part);
        hasher.update(b"\n");
    }
    hasher.update(&bytes);
    let request_hash = hex::encode(hasher.finalize());
    parts.extensions.insert(Charged);

    let slot = (scope.clone(), key.clone());
    let lock = {
        let mut map = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(slot.clone()).or_default().clone()
    };
    let response = {
        let _turn = lock.lock().await;
        run_once(&state, &scope, &key, request_hash, parts, bytes, next).await
    };
    drop(lock);
    let mut map = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    if map.get(&slot).is_some_and(|l| Arc::strong_count(l) == 1) {
        map.remove(&slot);
    }
    response
}

async fn run_once(
    state: &AppState,
    scope: &str,
    key: &str,
    request_hash: String,
    parts: axum::http::request::Parts,
    bytes: axum::body::Bytes,
    next: Next,
) -> Response {
    match idempotency::lookup(state, scope, key, &request_hash).await {
        Err(e) => return e.into_response(),
        Ok(IdemLookup::Mismatch) => {
            return ApiError::conflict(format!(
                "Idempotency-Key {key:?} was already used with a different request"
            ))
            .into_response()
        }
        Ok(IdemLookup::Done(stored)) => return replay(stored),
        Ok(IdemLookup::Absent | IdemLookup::Committed) => {}
    }
    let claim = IdemClaim::new(scope.to_owned(), key.to_owned(), request_hash);
    let response = with_idempotency(
        claim,
        next.run(Request::from_parts(parts, Body::from(bytes))),
    )
    .await;
    if response.status().is_server_error() || response.extensions().get::<NotReplayable>().is_some()
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
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
    // Kept only where the request committed a write under the key (the store's record).
    if let Err(e) = idempotency::finish(state, scope, key, &stored).await {
        tracing::warn!(error = %e, "failed to keep an idempotent response; a repeat answers the committed result");
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
