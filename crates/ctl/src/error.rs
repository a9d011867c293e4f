//! Why a command failed, and the process exit code each failure ends with.

use budget_api::errors::ErrorBody;
use serde::Deserialize as _;
use serde_json::Value;

/// The process exit codes of `budgetctl`; `--help` documents them (see [`crate::LONG_ABOUT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// The command did what it was asked.
    Ok = 0,
    /// Anything unexpected: a server error (5xx), an unreadable answer, a bug.
    Internal = 1,
    /// Bad flags or arguments (clap's own code), or an input file that cannot be read.
    Usage = 2,
    /// The server answered 404: no such chain, run, baseline, token or route.
    NotFound = 3,
    /// The server rejected the input: 400, 413, 415 or 422 (schema violations, error findings).
    Invalid = 4,
    /// The server answered 409: wrong state, duplicate name, reused Idempotency-Key.
    Conflict = 5,
    /// The server answered 401 or 403: missing, unknown or revoked token, wrong role, four eyes.
    Denied = 6,
    /// The server could not be reached: connection refused, DNS failure, timeout.
    Unreachable = 7,
}

impl Exit {
    /// The exit code for an HTTP status that is not a success.
    pub fn from_status(status: u16) -> Self {
        match status {
            200..=299 => Self::Ok,
            400 | 413 | 415 | 422 => Self::Invalid,
            401 | 403 => Self::Denied,
            404 => Self::NotFound,
            409 => Self::Conflict,
            _ => Self::Internal,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit as u8)
    }
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The server answered with an error (`{"error":{"code","message","details"}}`).
    #[error("{message}")]
    Api {
        status: u16,
        code: String,
        message: String,
        details: Value,
        /// The error body as the server sent it, for `--json`.
        body: Value,
    },
    /// The server could not be reached at `url`, which `setting` names.
    #[error("cannot connect to {url}: {reason}")]
    Unreachable {
        url: String,
        reason: String,
        setting: &'static str,
    },
    /// A local input is unusable (e.g. a file that cannot be read).
    #[error("{0}")]
    Input(String),
    /// Anything else: an answer that is not JSON, a request that could not be built.
    #[error("{0}")]
    Internal(String),
    /// The requests succeeded but what they found fails the command's check (e.g. `release
    /// check` of a superseded baseline, `archive verify` finding a missing object). `code` and
    /// `details` follow the server's error format, for `--json`.
    #[error("{message}")]
    Refused {
        exit: Exit,
        code: String,
        message: String,
        details: Value,
    },
}

impl CtlError {
    /// The process exit code for this error.
    pub fn exit(&self) -> Exit {
        match self {
            Self::Api { status, .. } => Exit::from_status(*status),
            Self::Unreachable { .. } => Exit::Unreachable,
            Self::Input(_) => Exit::Usage,
            Self::Internal(_) => Exit::Internal,
            Self::Refused { exit, .. } => *exit,
        }
    }

    /// A failed check (see [`CtlError::Refused`]) ending with exit 5 (conflict).
    pub fn conflict(code: &str, message: impl Into<String>, details: Value) -> Self {
        Self::Refused {
            exit: Exit::Conflict,
            code: code.to_owned(),
            message: message.into(),
            details,
        }
    }

    /// Builds the error for a non-success answer from its status and body text.
    pub fn from_response(status: u16, text: &str) -> Self {
        let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        match ErrorBody::deserialize(&body) {
            Ok(ErrorBody { error }) => Self::Api {
                status,
                code: if error.code.is_empty() {
                    "unknown".to_owned()
                } else {
                    error.code
                },
                message: error.message,
                details: error.details,
                body,
            },
            // Not our error format (a proxy in between, or not budgetd at all).
            Err(_) => {
                let reason = reqwest::StatusCode::from_u16(status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("error");
                // One line, short: enough to recognise an HTML error page or a proxy's message.
                let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
                let snippet: String = flat.chars().take(160).collect();
                let message = if snippet.is_empty() {
                    format!("the server answered {status} {reason}")
                } else {
                    format!("the server answered {status} {reason}: {snippet}")
                };
                Self::Api {
                    status,
                    code: format!("http_{status}"),
                    message,
                    details: Value::Null,
                    body: Value::String(text.to_owned()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exit_codes_follow_the_status() {
        let cases = [
            (200, Exit::Ok),
            (201, Exit::Ok),
            (204, Exit::Ok),
            (400, Exit::Invalid),
            (401, Exit::Denied),
            (403, Exit::Denied),
            (404, Exit::NotFound),
            (405, Exit::Internal),
            (409, Exit::Conflict),
            (413, Exit::Invalid),
            (415, Exit::Invalid),
            (422, Exit::Invalid),
            (429, Exit::Internal),
            (500, Exit::Internal),
            (502, Exit::Internal),
            (503, Exit::Internal),
        ];
        for (status, expect) in cases {
            assert_eq!(Exit::from_status(status), expect, "status {status}");
        }
        assert_eq!(
            [
                Exit::Ok,
                Exit::Internal,
                Exit::Usage,
                Exit::NotFound,
                Exit::Invalid,
                Exit::Conflict,
                Exit::Denied,
                Exit::Unreachable
            ]
            .map(|e| e as u8),
            [0, 1, 2, 3, 4, 5, 6, 7]
        );
    }

    #[test]
    fn errors_carry_the_server_fields() {
        let body = json!({"error": {"code": "validation_failed", "message": "bad", "details": {"violations": []}}});
        let err = CtlError::from_response(422, &body.to_string());
        match &err {
            CtlError::Api {
                status,
                code,
                message,
                details,
                ..
            } => {
                assert_eq!(
                    (*status, code.as_str(), message.as_str()),
                    (422, "validation_failed", "bad")
                );
                assert_eq!(details, &json!({"violations": []}));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(err.exit(), Exit::Invalid);
    }

    #[test]
    fn a_foreign_error_body_keeps_the_status() {
        let err = CtlError::from_response(502, "<html>bad gateway</html>");
        assert_eq!(err.exit(), Exit::Internal);
        assert_eq!(
            err.to_string(),
            "the server answered 502 Bad Gateway: <html>bad gateway</html>"
        );
        assert_eq!(
            CtlError::from_response(404, "").to_string(),
            "the server answered 404 Not Found"
        );
        assert_eq!(CtlError::from_response(404, "").exit(), Exit::NotFound);
    }

    #[test]
    fn a_failed_check_is_a_conflict() {
        let err = CtlError::conflict(
            "superseded",
            "bl-1 is superseded by bl-2",
            json!({"current": "bl-2"}),
        );
        assert_eq!(err.exit(), Exit::Conflict);
        assert_eq!(err.to_string(), "bl-1 is superseded by bl-2");
    }
}
