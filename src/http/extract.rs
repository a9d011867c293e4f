//! Request extractors that answer bad input with precise errors in our format.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde_json::{json, Value};

use crate::auth::{Principal, Role};
use crate::error::{ApiError, ApiResult, Code};
use crate::state::AppState;

/// Path parameters whose rejection (e.g. invalid UTF-8 once percent-decoded) answers in our
/// error format instead of axum's plain text.
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(v)| Self(v))
            .map_err(|e| ApiError::bad_request(format!("invalid path: {}", e.body_text())))
    }
}

/// A query string, rejected in our error format like [`Path`].
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(v)| Self(v))
            .map_err(|e| ApiError::bad_request(format!("invalid query string: {}", e.body_text())))
    }
}

/// A JSON body: content type checked, size limited, parsed; keeps the raw bytes too.
pub struct JsonBody {
    pub value: Value,
    pub raw: Bytes,
}

/// A JSON body that may be empty (e.g. approve without a comment).
pub struct OptionalJsonBody(pub Option<Value>);

async fn read_body(req: Request, limit: usize) -> ApiResult<Bytes> {
    let body: Body = req.into_body();
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| body_error(e, limit, "max_body_bytes"))
}

/// Why a request body could not be read: over `limit` (413), stalled past the body-read
/// timeout (408), or cut off by the client (400).
pub fn body_error(e: axum::Error, limit: usize, setting: &str) -> ApiError {
    let source = e.into_inner();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
    while let Some(err) = cause {
        if err.is::<http_body_util::LengthLimitError>() {
            return ApiError::new(
                Code::PayloadTooLarge,
                format!("request body exceeds the limit of {limit} bytes ({setting})"),
            )
            .with_details(json!({"limit_bytes": limit}));
        }
        if err.is::<tower_http::timeout::TimeoutError>() {
            return ApiError::new(
                Code::RequestTimeout,
                "the request body stopped arriving (body_read_timeout_secs)",
            );
        }
        cause = err.source();
    }
    ApiError::bad_request(format!("failed to read the request body: {source}"))
}

fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.split(';').next())
        .map(|m| {
            let m = m.trim().to_ascii_lowercase();
            m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
        })
        .unwrap_or(false)
}

fn parse(raw: &[u8]) -> ApiResult<Value> {
    serde_json::from_slice(raw).map_err(|e| {
        ApiError::new(
            Code::MalformedJson,
            format!("request body is not valid JSON: {e}"),
        )
        .with_details(json!({"line": e.line(), "column": e.column()}))
    })
}

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> ApiResult<Self> {
        let ct = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if !is_json(ct.as_deref()) {
            return Err(ApiError::new(
                Code::UnsupportedMediaType,
                format!(
                    "expected Content-Type: application/json, got {}",
                    ct.as_deref().unwrap_or("none")
                ),
            ));
        }
        let raw = read_body(req, state.settings.max_body_bytes).await?;
        let value = parse(&raw)?;
        Ok(Self { value, raw })
    }
}

impl FromRequest<AppState> for OptionalJsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> ApiResult<Self> {
        let ct = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let raw = read_body(req, state.settings.max_body_bytes).await?;
        if raw.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(None));
        }
        if !is_json(ct.as_deref()) {
            return Err(ApiError::new(
                Code::UnsupportedMediaType,
                format!(
                    "expected Content-Type: application/json, got {}",
                    ct.as_deref().unwrap_or("none")
                ),
            ));
        }
        Ok(Self(Some(parse(&raw)?)))
    }
}

/// An optional string field of an optional JSON object body, e.g. `{"comment": "…"}`.
pub fn string_field(body: &Option<Value>, field: &str) -> ApiResult<Option<String>> {
    let Some(body) = body else { return Ok(None) };
    let Some(obj) = body.as_object() else {
        return Err(ApiError::validation(
            "the body must be a JSON object",
            json!({"violations": [{"pointer": "", "message": "expected an object"}]}),
        ));
    };
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= 4096 => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::validation(
            format!("{field} must be a string of at most 4096 characters"),
            json!({"violations": [{"pointer": format!("/{field}"), "message": "expected a string"}]}),
        )),
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &AppState) -> ApiResult<Self> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| ApiError::new(Code::Unauthorized, "missing bearer token"))
    }
}

impl Principal {
    /// `403` unless the caller has one of `roles` (or is admin).
    pub fn require(&self, roles: &[Role]) -> ApiResult<()> {
        if self.has_any(roles) {
            Ok(())
        } else {
            let mut names: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
            if !roles.contains(&Role::Admin) {
                names.push("admin");
            }
            Err(ApiError::forbidden(format!(
                "token {:?} has role {}; this needs {}",
                self.name,
                self.role,
                names.join(" or ")
            )))
        }
    }
}
