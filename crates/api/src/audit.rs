//! The audit log: `GET /audit`, newest first.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One change, by whom (OpenAPI `AuditEntry`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditEntry {
    pub id: i64,
    pub at: String,
    pub actor: String,
    /// `topology.put`, `run.upload`, `baseline.approve`, …
    pub action: String,
    pub chain: Option<String>,
    pub subject: Option<String>,
    /// What the action recorded; its shape depends on the action.
    pub detail: Value,
}

/// `GET /audit`: at most `?limit=` entries older than `?before=` (an id).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditLog {
    pub entries: Vec<AuditEntry>,
}

/// `GET /audit`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuditQuery {
    /// Only entries of this chain; empty or absent: all.
    pub chain: Option<String>,
    /// At most this many entries (1 to 1000, default 100).
    pub limit: Option<i64>,
    /// Only entries with an id below this (paging).
    pub before: Option<i64>,
}
