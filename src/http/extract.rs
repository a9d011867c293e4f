//! Request extractors that answer bad input with precise errors in our format: path, query
//! string and JSON bodies — typed ones (`budget_api`'s request types, read by [`super::fields`])
//! and, for the bodies checked against a JSON Schema, the parsed value as it is.

use std::collections::HashMap;
use std::ops::RangeInclusive;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::api::page::MAX_LIMIT;
use super::bodies::{Bodies, Charged, Held};
use super::fields::{self, FieldError, Param, MAX_TEXT};
use crate::auth::{Principal, Role};
use crate::error::{ApiError, ApiResult, Code};
use crate::service::violation;
use crate::state::AppState;

/// Path parameters whose rejection (e.g. invalid UTF-8 once percent-decoded) answers in our
/// error format instead of axum's plain text.
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
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

/// A query string read as `T` (one of `budget_api`'s query types). Integer parameters are
/// checked against `int_range`; a bad one answers `400` naming the parameter, its value and
/// the range. A repeated parameter counts once, with its last value.
pub struct Query<T>(pub T);

/// The integers the API's query parameters take: `limit` is a page (1 to [`MAX_LIMIT`]);
/// `timeout_ms` a what-if's timeout (1 ms to an hour); `before` and `version` are an id or a
/// version (1 or more).
fn int_range(name: &str) -> RangeInclusive<i64> {
    match name {
        "limit" => 1..=MAX_LIMIT,
        "timeout_ms" => 1..=crate::service::distributions::MAX_WHATIF_TIMEOUT_MS,
        _ => 1..=i64::MAX,
    }
}

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> ApiResult<Self> {
        let axum::extract::Query(params) =
            axum::extract::Query::<HashMap<String, String>>::from_request_parts(parts, state)
                .await
                .map_err(|e| invalid_query(e.body_text()))?;
        let params = params
            .into_iter()
            .map(|(name, raw)| {
                let ints = int_range(&name);
                (name, Param { raw, ints })
            })
            .collect();
        fields::read(params).map(Self).map_err(|e| match e {
            FieldError::Invalid { why, .. } => ApiError::bad_request(why),
            other => invalid_query(other.to_string()),
        })
    }
}

fn invalid_query(why: String) -> ApiError {
    ApiError::bad_request(format!("invalid query string: {why}"))
}

/// A request body of one of `budget_api`'s request types, and the API's words for one that is
/// not: serde reads the fields (see [`fields`]), this says what is wrong with the first field
/// that fails.
pub trait RequestBody: DeserializeOwned + Send {
    /// The `422` for a required `field` that is absent or null; by default `required`.
    fn missing(field: &str) -> ApiError {
        required(field)
    }

    /// The `422` for a `field` not of its type (a string: of at most [`MAX_TEXT`] bytes); by
    /// default [`not_text`].
    fn invalid(field: &str) -> ApiError {
        not_text(field)
    }

    /// What an empty body stands for; `None`: an empty body is refused like any non-JSON one.
    fn empty() -> Option<Self> {
        None
    }
}

/// `{field} is required`.
pub(crate) fn required(field: &str) -> ApiError {
    violation(
        &format!("/{field}"),
        format!("{field} is required"),
        "required",
    )
}

/// `{field} must be a string of at most 4096 characters`.
pub fn not_text(field: &str) -> ApiError {
    violation(
        &format!("/{field}"),
        format!("{field} must be a string of at most {MAX_TEXT} characters"),
        "expected a string",
    )
}

/// A typed JSON body or answer. As an extractor, `T` is a [`RequestBody`]: content type
/// checked (415), size limited (413), parsed (400 `malformed_json`), a JSON object (422), then
/// read field by field (422 naming the field). As an answer, one of `budget_api`'s types,
/// written with its object keys sorted (as `serde_json::Value` writes them), so the bytes on
/// the wire do not depend on field order.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T: RequestBody> FromRequest<AppState> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> ApiResult<Self> {
        let content_type = content_type(&req);
        let limit = state.settings.max_body_bytes;
        // The body's charge is held until it has been read into `T`.
        let read = match T::empty() {
            // A body that may be empty is read before its content type counts.
            Some(empty) => {
                let read = read_body(req, limit, &state.bodies).await?;
                if read.raw.iter().all(u8::is_ascii_whitespace) {
                    return Ok(Self(empty));
                }
                require_json(content_type.as_deref())?;
                read
            }
            None => {
                require_json(content_type.as_deref())?;
                read_body(req, limit, &state.bodies).await?
            }
        };
        let (value, _, _held) = read.parse(&state.bodies)?;
        let Value::Object(object) = value else {
            return Err(violation(
                "",
                "the body must be a JSON object",
                "expected an object",
            ));
        };
        fields::read(object.into_iter().collect())
            .map(Self)
            .map_err(|e| match e {
                FieldError::Missing(field) => T::missing(&field),
                FieldError::Invalid { field, .. } => T::invalid(&field),
                FieldError::Other(why) => violation("", why.clone(), why),
            })
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        match super::sorted::to_vec(&self.0) {
            Ok(bytes) => {
                // Every answer the tests see is checked against the way through a `Value`.
                #[cfg(debug_assertions)]
                if let Ok(value) = serde_json::to_value(&self.0) {
                    debug_assert_eq!(
                        String::from_utf8_lossy(&bytes),
                        value.to_string(),
                        "sorted JSON differs from the Value's"
                    );
                }
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        axum::http::HeaderValue::from_static("application/json"),
                    )],
                    bytes,
                )
                    .into_response()
            }
            Err(e) => ApiError::internal(e.into()).into_response(),
        }
    }
}

/// A JSON body as it is, for the bodies checked against a JSON Schema (topologies, native
/// runs): content type checked, size limited, parsed; keeps the raw bytes too.
pub struct JsonBody {
    pub value: Value,
    pub raw: Bytes,
    /// Its charge to [`Bodies`], until the handler is done with it.
    _held: Held,
}

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> ApiResult<Self> {
        require_json(content_type(&req).as_deref())?;
        let read = read_body(req, state.settings.max_body_bytes, &state.bodies).await?;
        let (value, raw, held) = read.parse(&state.bodies)?;
        Ok(Self {
            value,
            raw,
            _held: held,
        })
    }
}

/// A body read whole, its charge, and the token of the caller sending it, if known.
struct Read {
    raw: Bytes,
    held: Held,
    token: Option<String>,
}

async fn read_body(req: Request, limit: usize, bodies: &Bodies) -> ApiResult<Read> {
    let charged = req.extensions().get::<Charged>().is_some();
    let known = content_length(req.headers());
    let token = req
        .extensions()
        .get::<Principal>()
        .map(|p| p.token_id.clone());
    let (raw, held) = bodies
        .read(req.into_body(), known, limit, charged, token.as_deref())
        .await?;
    Ok(Read { raw, held, token })
}

impl Read {
    /// Parses the body into JSON, charging what that takes first ([`Bodies::parsing`]).
    fn parse(mut self, bodies: &Bodies) -> ApiResult<(Value, Bytes, Held)> {
        bodies.parsing(&self.raw, self.token.as_deref(), &mut self.held)?;
        let value = parse(&self.raw)?;
        Ok((value, self.raw, self.held))
    }
}

/// The `Content-Length` a request's headers give, if they give one.
pub fn content_length(headers: &axum::http::HeaderMap) -> Option<usize> {
    headers
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn content_type(req: &Request) -> Option<String> {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Whether a `Content-Type` is JSON: `application/json` or `application/*+json`.
pub fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|ct| ct.split(';').next())
        .map(|m| {
            let m = m.trim().to_ascii_lowercase();
            m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
        })
        .unwrap_or(false)
}

fn require_json(content_type: Option<&str>) -> ApiResult<()> {
    if is_json(content_type) {
        Ok(())
    } else {
        Err(ApiError::new(
            Code::UnsupportedMediaType,
            format!(
                "expected Content-Type: application/json, got {}",
                content_type.unwrap_or("none")
            ),
        ))
    }
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
