//! Canary rollouts (SPEC §9): a baseline approved for a subset of agents first, then promoted
//! to every agent or aborted; and what canary agents reported meanwhile.

use async_trait::async_trait;
use budget_core::canary::{CanaryState, Rollout, Selector};
use budget_core::feedback::Counts;

use super::{Audit, Published, StoreResult, StoredBaseline};
use crate::store::Publication;

/// A rollout as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredRollout {
    pub baseline_id: String,
    pub chain: String,
    /// The canary publication.
    pub revision: i64,
    /// What every other agent keeps during the bake.
    pub previous_baseline_id: String,
    pub previous_revision: i64,
    pub selector: Selector,
    pub bake_s: u64,
    pub auto: bool,
    pub state: CanaryState,
    pub started_at: String,
    pub started_by: String,
    pub bake_ends_at: String,
    pub ended_at: Option<String>,
    pub ended_by: Option<String>,
    pub reason: Option<String>,
    /// The publication (`promote` or `abort`) that ended it.
    pub end_revision: Option<i64>,
    /// What decided, frozen when it ended (as the service wrote it); `None` while baking and
    /// for a canary a rollback ended.
    pub figures: Option<serde_json::Value>,
}

/// The `minute` of a [`CanaryHealthRow`] holding the whole bake so far.
pub const WHOLE_BAKE: i64 = -1;

/// What canary agents reported of one segment since the canary was published, as one server
/// process (`writer`) received it: its running totals for one rollup (`minute`, its start in
/// Unix milliseconds) or for the whole bake ([`WHOLE_BAKE`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryHealthRow {
    pub baseline_id: String,
    pub segment: String,
    pub writer: String,
    pub minute: i64,
    pub counts: Counts,
    /// Successful attempts' latencies (µs), HdrHistogram V2 compressed.
    pub latency_hdr: Vec<u8>,
    pub updated_at: String,
}

/// How a canary ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanaryEnd {
    /// Every agent gets the canary's baseline.
    Promote,
    /// Every agent gets the previous baseline again; the canary's is superseded by it.
    Abort,
}

#[async_trait]
pub trait Rollouts: Send + Sync {
    /// Approves the draft `id` like [`Baselines::decide`](super::Baselines::decide), but
    /// publishes it (kind `canary`) for the agents `rollout` selects only, recording the
    /// rollout as `baking` until `bake_ends_at`. Conflict when the chain has no approved
    /// baseline for the other agents to keep, or a canary already baking.
    async fn approve_canary(
        &self,
        id: &str,
        comment: Option<String>,
        rollout: &Rollout,
        bake_ends_at: &str,
        audit: Audit,
    ) -> StoreResult<(StoredBaseline, Published)>;

    /// The rollout of a baseline, if it was approved with one.
    async fn get_rollout(&self, baseline_id: &str) -> StoreResult<Option<StoredRollout>>;

    /// Every rollout still baking.
    async fn baking_rollouts(&self) -> StoreResult<Vec<StoredRollout>>;

    /// Ends a baking rollout: publishes, for every agent, the canary's baseline (`Promote`)
    /// or the previous one (`Abort`: that one approved again, the canary's superseded by it),
    /// records `reason` and `figures`, audits and queues the webhook event, in one transaction.
    /// Conflict when it is not baking (any more).
    async fn end_rollout(
        &self,
        baseline_id: &str,
        end: CanaryEnd,
        reason: &str,
        figures: &serde_json::Value,
        audit: Audit,
    ) -> StoreResult<(StoredRollout, Published)>;

    /// Records that canary agent `agent_id` refused the canary of `baseline_id` (its first
    /// refusal is kept).
    async fn record_canary_nack(
        &self,
        baseline_id: &str,
        agent_id: &str,
        error: &str,
        at: &str,
    ) -> StoreResult<()>;

    /// The agents that refused the canary of `baseline_id`, with their error, oldest first.
    async fn canary_nacks(&self, baseline_id: &str) -> StoreResult<Vec<(String, String)>>;

    /// The rows `writer` wrote of the canary of `baseline_id`: its whole-bake rows and those of
    /// rollups starting at or after `from`.
    async fn writer_canary_health(
        &self,
        baseline_id: &str,
        writer: &str,
        from: i64,
    ) -> StoreResult<Vec<CanaryHealthRow>>;

    // Rows are written with the rollups of the same reports: `Feedback::write_rollups`.

    /// Every writer's rows of the canary of `baseline_id`: the whole-bake rows and those of
    /// rollups starting at or after `from`, by segment.
    async fn canary_health(
        &self,
        baseline_id: &str,
        from: i64,
    ) -> StoreResult<Vec<CanaryHealthRow>>;

    /// Deletes canary rollup rows (not whole-bake ones) of rollups before `before`; how many.
    async fn expire_canary_health(&self, before: i64) -> StoreResult<u64>;

    /// The chain's newest publication before revision `before` that is not a canary: what
    /// agents outside the canary published at `before` keep, with its baseline.
    async fn stable_publication(
        &self,
        chain: &str,
        before: i64,
    ) -> StoreResult<Option<(Publication, StoredBaseline)>>;
}
