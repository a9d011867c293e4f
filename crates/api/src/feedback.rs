//! Runtime feedback (SPEC §8): `GET /chains/{chain}/production`, `GET /alerts`, webhooks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `GET /chains/{chain}/production?window=1m|5m|1h` (OpenAPI `Production`): what the agents
/// reported over the last complete window of that length, per segment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Production {
    pub chain: String,
    /// `1m`, `5m` or `1h`.
    pub window: String,
    /// The window: `from` inclusive, `to` exclusive (RFC 3339).
    pub from: String,
    pub to: String,
    /// The live baseline production is compared with, if the chain has one.
    pub baseline_id: Option<String>,
    pub segments: Vec<ProductionSegment>,
}

/// One segment's production figures (OpenAPI `ProductionSegment`). Ratios are `null` when
/// nothing was counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProductionSegment {
    pub segment: String,
    pub calls: u64,
    pub attempts: u64,
    /// Retries by cause (`deadline`, `unavailable`).
    pub retries: BTreeMap<String, u64>,
    /// How calls ended (`ok`, `deadline_exceeded`, …).
    pub outcomes: BTreeMap<String, u64>,
    /// attempts / calls.
    pub amplification: Option<f64>,
    /// Deadline-exceeded attempts / attempts.
    pub kill_rate: Option<f64>,
    /// 1 − retries refused for lack of an idempotency key / retryable failures.
    pub key_coverage: Option<f64>,
    /// Successful attempts in the latency histogram, and its nearest-rank percentiles.
    pub samples: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    /// The live baseline's figures for the segment.
    pub baseline_p99_ms: Option<f64>,
    pub baseline_p999_ms: Option<f64>,
    pub timeout_ms: Option<u64>,
    /// R-drift against the live baseline (> 20 % either way), and the largest change.
    pub drift: bool,
    pub drift_pct: Option<f64>,
    /// Agents that reported (exact up to 64 per rollup, an upper bound beyond).
    pub agents: u64,
    /// The latency distribution: `[ms, share of samples at or below]` points, ascending.
    pub distribution: Vec<[f64; 2]>,
}

/// One alert (OpenAPI `Alert`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Alert {
    pub id: i64,
    /// `amplification`, `drift`, `kill_rate`, `nack` or `archive_backlog`.
    pub rule: String,
    pub chain: String,
    pub segment: String,
    /// `firing` or `resolved`.
    pub state: String,
    /// The measured value that tripped the rule, and its threshold.
    pub value: f64,
    pub threshold: f64,
    /// The figures behind the value (window, counts).
    pub detail: serde_json::Value,
    pub since: String,
    pub resolved_at: Option<String>,
}

/// `GET /alerts` (OpenAPI `AlertList`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AlertList {
    pub alerts: Vec<Alert>,
}

/// What a webhook may subscribe to (`WebhookRequest.events`): `*` (every event), then each
/// event name.
pub const WEBHOOK_EVENTS: [&str; 9] = [
    "*",
    "alert.firing",
    "alert.resolved",
    "baseline.approved",
    "baseline.rejected",
    "baseline.rolled_back",
    "rollout.promoted",
    "rollout.aborted",
    "agent.nack",
];

/// `POST /webhooks` (OpenAPI `WebhookRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookRequest {
    /// `http://` or `https://` URL the events are posted to.
    pub url: String,
    /// Key of the `X-Budgetd-Signature: sha256=<hex HMAC-SHA256 of the body>` header.
    pub secret: String,
    /// Of [`WEBHOOK_EVENTS`]: event names (`alert.firing`, `alert.resolved`,
    /// `baseline.approved`, `baseline.rejected`, `baseline.rolled_back`, `rollout.promoted`,
    /// `rollout.aborted`, `agent.nack`) or `*`;
    /// default `*`.
    #[serde(default)]
    pub events: Vec<String>,
}

/// A registered webhook (OpenAPI `Webhook`); the secret is never shown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub created_at: String,
    pub created_by: String,
}

/// `GET /webhooks` (OpenAPI `WebhookList`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WebhookList {
    pub webhooks: Vec<Webhook>,
}

/// One delivery of an event (OpenAPI `Delivery`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Delivery {
    pub id: i64,
    pub webhook_id: String,
    pub event: String,
    /// `pending`, `delivered` or `failed` (given up after the configured attempts).
    pub state: String,
    pub attempts: i64,
    /// The receiver's last HTTP status, or the error when there was none.
    pub last_status: Option<i64>,
    pub last_error: Option<String>,
    pub next_attempt_at: String,
    pub created_at: String,
    pub delivered_at: Option<String>,
}

/// `GET /webhooks/{id}/deliveries` (OpenAPI `DeliveryList`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeliveryList {
    pub deliveries: Vec<Delivery>,
}

/// `GET /chains/{chain}/production` query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProductionQuery {
    /// `1m`, `5m` (default) or `1h`.
    pub window: Option<String>,
}

/// `GET /alerts` query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AlertQuery {
    /// `firing` for the firing ones only; absent for all.
    pub state: Option<String>,
}
