//! Releases citing baselines: `POST /releases`, `GET /releases`, `GET /baselines/{id}/releases`.

use serde::{Deserialize, Serialize};

/// `POST /releases` (OpenAPI `ReleaseRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseRequest {
    pub service: String,
    pub version: String,
    pub baseline_id: String,
    pub ticket: String,
}

/// A recorded release (OpenAPI `Release`), with the hash of the baseline it cites.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Release {
    pub id: i64,
    pub service: String,
    pub version: String,
    pub baseline_id: String,
    pub baseline_sha256: String,
    pub ticket: String,
    pub created_by: String,
    pub created_at: String,
}

/// `GET /releases` and `GET /baselines/{id}/releases` (OpenAPI `ReleaseList`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReleaseList {
    pub releases: Vec<Release>,
}

/// `budgetctl release check`'s verdict when the baseline may be cited (its `--json` output;
/// decided by the client from `GET /baselines/{id}`, not a route of the server).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReleaseCheck {
    pub baseline_id: String,
    pub chain: String,
    pub state: String,
    pub current_baseline_id: Option<String>,
    pub ok: bool,
    pub message: String,
}

/// `GET /releases`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReleaseListQuery {
    /// Only releases citing this baseline; empty or absent: all.
    pub baseline_id: Option<String>,
    /// Only releases of this service; empty or absent: all.
    pub service: Option<String>,
    /// At most this many releases (1 to 1000, default 100).
    pub limit: Option<i64>,
}
