//! Runtime feedback (SPEC §8): per-minute rollups of agents' reports, alerts, webhooks and
//! their delivery outbox.

use std::collections::HashMap;

use async_trait::async_trait;
use budget_core::feedback::Counts;

use super::rollouts::CanaryHealthRow;
use super::StoreResult;

/// One writer's running total of one chain segment's minute.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollup {
    pub chain: String,
    pub segment: String,
    /// Start of the minute, ms since the Unix epoch.
    pub minute: i64,
    /// The server process that merged it (each writes only its own rows).
    pub writer: String,
    pub counts: Counts,
    /// Successful attempts' latencies (µs), HdrHistogram V2 compressed.
    pub latency_hdr: Vec<u8>,
    /// How many distinct agents reported (as counted by this writer).
    pub agent_count: u64,
    /// Up to [`ROLLUP_AGENT_NAMES`] of their ids.
    pub agents: Vec<String>,
    pub updated_at: String,
}

/// How many agent ids a rollup row names (the count goes on beyond).
pub const ROLLUP_AGENT_NAMES: usize = 64;

pub use budget_api::feedback::{Alert, Delivery};

/// What an evaluation found firing.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAlert {
    pub rule: String,
    pub chain: String,
    pub segment: String,
    pub value: f64,
    pub threshold: f64,
    pub detail: serde_json::Value,
}

/// An agent that refused a revision and has not accepted a later one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nacking {
    pub agent_id: String,
    pub chains: Vec<String>,
    pub revision: i64,
    pub error: String,
}

/// A webhook endpoint as stored: what the API shows, and the secret it never shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    pub hook: budget_api::feedback::Webhook,
    pub secret: String,
}

/// A claimed delivery, with what sending it needs.
#[derive(Debug, Clone)]
pub struct DeliveryJob {
    pub id: i64,
    pub webhook_id: String,
    pub url: String,
    pub secret: String,
    pub event: String,
    pub body: String,
    pub attempts: i64,
}

/// An event for webhooks: its name and the JSON body sent.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookEvent {
    pub event: String,
    pub body: String,
}

impl WebhookEvent {
    /// `{"event": name, "text": text, "at": now, …extra}`: `text` renders in chat tools that
    /// take a plain JSON `text` field.
    pub fn new(name: &str, text: String, extra: serde_json::Value) -> Self {
        let mut body = serde_json::json!({"event": name, "text": text, "at": crate::clock::now()});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        Self {
            event: name.to_owned(),
            body: body.to_string(),
        }
    }

    /// The event of an audited decision (`baseline.approved`, `baseline.rejected`,
    /// `baseline.rolled_back`, `rollout.promoted`, `rollout.aborted`), queued in the decision's transaction; `None` for other actions.
    pub fn of_audit(a: &super::Audit) -> Option<Self> {
        let (name, verb) = match a.action {
            "baseline.approve" => ("baseline.approved", "approved"),
            "baseline.reject" => ("baseline.rejected", "rejected"),
            "chain.rollback" => ("baseline.rolled_back", "rolled back to"),
            "rollout.promote" => ("rollout.promoted", "promoted the canary of"),
            "rollout.abort" => ("rollout.aborted", "aborted the canary of"),
            _ => return None,
        };
        let id = a.subject.as_deref().unwrap_or("");
        let chain = a.chain.as_deref().unwrap_or("");
        Some(Self::new(
            name,
            format!("[budgetd] {} {verb} {id} on {chain}", a.actor),
            serde_json::json!({"baseline": {"id": id, "chain": chain, "actor": a.actor, "detail": a.detail}}),
        ))
    }
}

/// The last report stored of an agent, written with the rollups that counted it, so that the
/// same report sent again is not counted twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastReport {
    pub agent_id: String,
    /// The report's id, in lowercase hex.
    pub report_id: String,
    /// When it was stored (Unix ms).
    pub stored_ms: i64,
    /// Counted as a resend, its id found nowhere. Resent or not, if the agent's stored id is
    /// this one when it is written (another replica stored it meanwhile), nothing is written.
    pub resent: bool,
}

/// The webhook events of an alert transition, made from the alert as stored.
pub type EventsOf = dyn for<'a> Fn(&'a Alert) -> Vec<WebhookEvent> + Send + Sync;

#[async_trait]
pub trait Feedback: Send + Sync {
    /// Writes rollup rows and canary health rows (each replacing the same key's row), and the
    /// last report of each agent they counted, in one transaction of multi-row statements:
    /// never a statement per agent, and no kind without the others. `ReportStored`, and
    /// nothing written, when a report is its agent's stored last one already.
    async fn write_rollups(
        &self,
        rows: &[Rollup],
        health: &[CanaryHealthRow],
        reports: &[LastReport],
    ) -> StoreResult<()>;
    /// The id of the last report stored of each of `agents` that has one (by agent id).
    async fn last_reports(&self, agents: &[String]) -> StoreResult<HashMap<String, String>>;
    /// The rows `writer` wrote for minutes at or after `from`.
    async fn writer_rollups(&self, writer: &str, from: i64) -> StoreResult<Vec<Rollup>>;
    /// The rollups of `chain` (every segment, every writer) with `from <= minute < to`.
    async fn read_rollups(&self, chain: &str, from: i64, to: i64) -> StoreResult<Vec<Rollup>>;
    /// Chains with rollups at or after `from`.
    async fn reporting_chains(&self, from: i64) -> StoreResult<Vec<String>>;
    /// Deletes rollups of minutes before `before`, and the last reports of agents stored
    /// before it; returns how many rollup rows.
    async fn expire_rollups(&self, before: i64) -> StoreResult<u64>;

    /// Records `alert` as firing since `at`, with its events for webhooks, unless
    /// the same rule already fires for that chain and segment: then `None`, nothing written.
    async fn fire_alert(
        &self,
        alert: &NewAlert,
        at: &str,
        events: &EventsOf,
    ) -> StoreResult<Option<Alert>>;
    /// Resolves the firing alert of `rule` on `chain`/`segment` at `at` (with its
    /// events); `None` when none fires.
    async fn resolve_alert(
        &self,
        rule: &str,
        chain: &str,
        segment: &str,
        at: &str,
        events: &EventsOf,
    ) -> StoreResult<Option<Alert>>;
    /// Agents whose last word on a revision was a NACK: (agent id, its chains, the refused
    /// revision, the reason), at most `limit`.
    async fn nacking_agents(&self, limit: i64) -> StoreResult<Vec<Nacking>>;
    /// Alerts, newest first: only firing ones with `firing_only`; at most `limit`.
    async fn list_alerts(&self, firing_only: bool, limit: i64) -> StoreResult<Vec<Alert>>;

    /// Registers `hook` (audited); under an `Idempotency-Key` already used, the webhook that
    /// key created.
    async fn create_webhook(
        &self,
        hook: &Webhook,
        audit: super::Audit,
    ) -> StoreResult<budget_api::feedback::Webhook>;
    async fn list_webhooks(&self) -> StoreResult<Vec<Webhook>>;
    /// Deletes a webhook and its deliveries; false when there was none.
    async fn delete_webhook(&self, id: &str, audit: super::Audit) -> StoreResult<bool>;
    /// Queues `event` for every webhook that takes it; returns how many deliveries.
    async fn enqueue_event(&self, event: &WebhookEvent, at: &str) -> StoreResult<u64>;
    /// Claims up to `limit` deliveries due at `now` (pending, not leased) until `lease_until`.
    async fn claim_deliveries(
        &self,
        now: &str,
        lease_until: &str,
        limit: i64,
    ) -> StoreResult<Vec<DeliveryJob>>;
    /// A delivery was answered 2xx.
    async fn delivered(&self, id: i64, status: i64, at: &str) -> StoreResult<()>;
    /// A delivery failed; tried again at `retry_at`, or given up (`failed`) when `None`.
    async fn delivery_failed(
        &self,
        id: i64,
        status: Option<i64>,
        error: &str,
        retry_at: Option<&str>,
    ) -> StoreResult<()>;
    /// A webhook's deliveries, newest first, at most `limit`.
    async fn list_deliveries(&self, webhook_id: &str, limit: i64) -> StoreResult<Vec<Delivery>>;
}
