//! The server's one error type. Each code maps to an HTTP status and a gRPC status code
//! here, in one place; both transports answer every error through it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use budget_api::errors::{ErrorBody, ErrorInfo};
use serde_json::Value;

use crate::store::StoreError;

/// Stable error codes; clients match on these, never on messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    BadRequest,
    MalformedJson,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    Conflict,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationFailed,
    /// The client stopped sending its request body.
    RequestTimeout,
    /// The caller holds as many of a limited resource as it may (e.g. Watch streams).
    TooManyRequests,
    /// The request is valid but the state it needs is not there (e.g. an Ack without a
    /// Watch stream on this replica).
    FailedPrecondition,
    Internal,
    Unavailable,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::MalformedJson => "malformed_json",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Conflict => "conflict",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::ValidationFailed => "validation_failed",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
            Self::RequestTimeout => "request_timeout",
            Self::TooManyRequests => "too_many_requests",
            Self::FailedPrecondition => "failed_precondition",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Self::BadRequest | Self::MalformedJson => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict => StatusCode::CONFLICT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::ValidationFailed => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            Self::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        }
    }
}

/// An error answered as `{"error":{"code","message","details"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub code: Code,
    pub message: String,
    pub details: Value,
    /// The cause of a 5xx, logged once and never sent.
    pub source: Option<anyhow::Error>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Value::Null,
            source: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Code::BadRequest, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(Code::Conflict, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Code::Forbidden, message)
    }

    pub fn validation(message: impl Into<String>, details: Value) -> Self {
        Self::new(Code::ValidationFailed, message).with_details(details)
    }

    pub fn internal(source: anyhow::Error) -> Self {
        Self {
            code: Code::Internal,
            message: "internal error".into(),
            details: Value::Null,
            source: Some(source),
        }
    }

    /// This error outside a request (start-up, `budgetd` commands): the cause of a 5xx, or
    /// the message alone (no code prefix).
    pub fn into_anyhow(self) -> anyhow::Error {
        match self.source {
            Some(source) => source,
            None => anyhow::anyhow!(self.message),
        }
    }

    /// The JSON body of this error.
    pub fn body(&self) -> Value {
        let body = ErrorBody {
            error: ErrorInfo {
                code: self.code.as_str().into(),
                message: self.message.clone(),
                details: self.details.clone(),
            },
        };
        // Keys sorted, as every answer (`http::api::Json`).
        serde_json::to_value(body).unwrap_or_default()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl Code {
    /// The gRPC status code of each error code (the other half of the one mapping).
    pub fn tonic(self) -> tonic::Code {
        match self {
            Self::BadRequest
            | Self::MalformedJson
            | Self::ValidationFailed
            | Self::UnsupportedMediaType => tonic::Code::InvalidArgument,
            Self::Unauthorized => tonic::Code::Unauthenticated,
            Self::Forbidden => tonic::Code::PermissionDenied,
            Self::NotFound => tonic::Code::NotFound,
            Self::MethodNotAllowed => tonic::Code::Unimplemented,
            Self::Conflict => tonic::Code::AlreadyExists,
            Self::PayloadTooLarge => tonic::Code::ResourceExhausted,
            Self::Internal => tonic::Code::Internal,
            Self::Unavailable => tonic::Code::Unavailable,
            Self::RequestTimeout => tonic::Code::DeadlineExceeded,
            Self::TooManyRequests => tonic::Code::ResourceExhausted,
            Self::FailedPrecondition => tonic::Code::FailedPrecondition,
        }
    }
}

impl From<ApiError> for tonic::Status {
    fn from(e: ApiError) -> Self {
        if let Some(source) = &e.source {
            tracing::error!(error = ?source, "grpc request failed");
        }
        tonic::Status::new(e.code.tonic(), e.message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => Self::not_found(format!("{what} not found")),
            StoreError::Conflict(msg) => Self::conflict(msg),
            // The batch of the report was dropped: sent again, it is counted once.
            e @ StoreError::ReportStored { .. } => Self::new(Code::Unavailable, e.to_string()),
            StoreError::Invalid(msg) => Self::bad_request(msg),
            // Overload, not a fault: 503, as a timed-out request is.
            StoreError::Busy(msg) => Self::new(Code::Unavailable, msg),
            StoreError::Internal(source) => Self::internal(source),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Some(source) = &self.source {
            tracing::error!(error = ?source, "request failed");
        }
        let mut response = (self.code.status(), axum::Json(self.body())).into_response();
        // Every 503 is the server busy or a dependency away for a moment.
        if self.code == Code::Unavailable {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by attacking the server: a flood that took every database connection answered
    /// 500 ("internal") where it is overload, as a timed-out request is: 503, to be retried.
    #[test]
    fn a_database_with_no_free_connection_is_unavailable() {
        let e = ApiError::from(StoreError::from(sqlx::Error::PoolTimedOut));
        assert_eq!(e.code.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.code.tonic(), tonic::Code::Unavailable);
        assert!(e.message.contains("busy"), "{}", e.message);
        let other = ApiError::from(StoreError::from(sqlx::Error::PoolClosed));
        assert_eq!(other.code.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
