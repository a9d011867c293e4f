//! Every error answer (OpenAPI `Error`): `{"error": {"code", "message", "details"}}`.

use std::collections::BTreeMap;

use budget_core::checks::Finding;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An error answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorInfo,
}

/// What failed: a stable `code` (clients match on it), a message for humans, and details.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// Absent only in answers that are not budgetd's (read as empty).
    #[serde(default)]
    pub code: String,
    pub message: String,
    /// `null`, or an object read as [`ErrorDetails`].
    #[serde(default)]
    pub details: Value,
}

/// The known keys of an error's `details`: `violations` (validation_failed), `findings`
/// (approval or rollback blocked by error findings), `schema`, `line`/`column`
/// (malformed_json), `limit_bytes` (payload_too_large), `chain`/`nearest` (not_found: a chain
/// that does not exist, and the known chain names nearest to it); any other key is kept in
/// `other`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorDetails {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<Finding>,
    /// The JSON Schema the body was checked against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// One reason a request was refused (OpenAPI `Violation`): where (a JSON pointer into the
/// body, or a segment) and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Violation {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segment: Option<String>,
    pub message: String,
}
