//! Baselines: a chain's list (`GET /chains/{chain}/baselines`), one document
//! (`GET /baselines/{id}`, the stored bytes: [`BaselineDocument`]), recompute, approve,
//! reject, diff, whether the caller may approve (`GET /baselines/{id}/approval`), and a
//! publication's rollout (`GET /baselines/{id}/rollout`).

use budget_core::baseline::{BaselineDocument, BaselineState};
use budget_core::capacity::Capacity;
use serde::{Deserialize, Serialize};

/// `GET /baselines/{id}/diff` (OpenAPI `BaselineDiff`) and its parts: what the server computes.
pub use budget_core::diff::{BaselineDiff, Change, SegmentDiff};

/// One baseline of a list (OpenAPI `BaselineSummary`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineSummary {
    pub id: String,
    pub chain: String,
    pub state: BaselineState,
    pub reason: String,
    pub run_id: String,
    pub topology_version: i64,
    pub has_errors: bool,
    pub created_at: String,
    pub created_by: String,
    pub updated_at: String,
    /// While `superseded`: the baseline that replaced it (a newer draft, or the baseline
    /// approved after it); `null` otherwise, and for baselines superseded before it was kept.
    #[serde(default)]
    pub superseded_by: Option<String>,
    /// When it was approved (`null` if it never was: a superseded draft never was).
    #[serde(default)]
    pub approved_at: Option<String>,
}

/// A page of a chain's baselines, newest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BaselineList {
    pub baselines: Vec<BaselineSummary>,
    /// Pass as `?cursor=` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `GET /chains/{chain}/baselines`'s query: a page, of one state or all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BaselineListQuery {
    /// `draft`, `approved`, `superseded` or `rejected`; empty or absent: all.
    pub state: Option<String>,
    /// At most this many baselines (1 to 1000, default 100).
    pub limit: Option<i64>,
    /// The previous page's `next_cursor`, unchanged.
    pub cursor: Option<String>,
}

/// `POST /chains/{chain}/baselines` (OpenAPI `RecomputeRequest`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecomputeRequest {
    /// The run to compute from; required unless `from` is `production`.
    #[serde(default)]
    pub run_id: String,
    /// The topology version to compute against; the run's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_version: Option<u64>,
    /// `production`: a draft from what the agents reported over `window` instead of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// With `from: production`: `1m`, `5m` or `1h` (default `1h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// The body of approve and reject (OpenAPI `Comment`); approve's is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// The body of approve (OpenAPI `ApproveRequest`): a comment and, optionally, a canary
/// rollout (SPEC §9); without one the baseline goes to every agent at once. Strict: an unknown
/// member (a misspelt `rollout`) or a `null` rollout is refused rather than read as "to every
/// agent".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub rollout: Option<budget_core::canary::Rollout>,
}

/// A member that, when present, must hold a value: `null` is an error, not `None`.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// The body of promote and abort (OpenAPI `Comment`): why, optionally.
pub type CanaryDecision = Comment;

/// `POST /baselines/{id}/approve` (OpenAPI `ApproveResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApproveResult {
    /// The approved document.
    pub baseline: BaselineDocument,
    /// The publication's revision; `null` when nothing was published.
    #[serde(default)]
    pub revision: Option<i64>,
    /// The baseline this one replaced as the approved one.
    #[serde(default)]
    pub superseded: Option<String>,
}

/// `GET /baselines/{id}/approval` (OpenAPI `ApprovalCheck`): whether the caller may approve
/// the baseline now, and every reason they may not (the server's rules, for a console or a
/// script to show before trying). The caller's role is not among the reasons: `GET /whoami`
/// says what the role may do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApprovalCheck {
    pub baseline_id: String,
    pub chain: String,
    /// True when `blockers` is empty.
    pub may_approve: bool,
    /// Every reason, in the order the server checks them.
    pub blockers: Vec<ApprovalBlocker>,
    /// The chain's newest baseline (the only one an approval can be of).
    pub newest_baseline: Option<String>,
}

/// One reason the caller may not approve (OpenAPI `ApprovalBlocker`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApprovalBlocker {
    /// `not_draft`, `superseded`, `not_newest`, `error_findings`, `four_eyes` or
    /// `canary_baking`.
    pub code: String,
    /// What the approval would be refused with.
    pub message: String,
}

/// `POST /baselines/{id}/reject` (OpenAPI `RejectResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectResult {
    /// The rejected document.
    pub baseline: BaselineDocument,
}

/// `GET /baselines/{id}/diff`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiffQuery {
    /// `current` (the chain's approved baseline, the default) or a baseline id.
    pub against: Option<String>,
}

/// `GET /baselines/{id}/rollout` (OpenAPI `Rollout`): how many agents receiving the chain
/// have ACKed (or NACKed) the baseline's publication.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    pub baseline_id: String,
    pub chain: String,
    pub state: BaselineState,
    /// The baseline's latest publication, or `null` if it was never published.
    #[serde(default)]
    pub revision: Option<i64>,
    /// How the latest publication came about: `approve` or `rollback` (`null`: never
    /// published).
    #[serde(default)]
    pub kind: Option<String>,
    /// When it was published, and by whom (the token name).
    #[serde(default)]
    pub published_at: Option<String>,
    #[serde(default)]
    pub published_by: Option<String>,
    /// Agents receiving the chain.
    pub agents: u64,
    pub connected: u64,
    /// Of those, how many ACKed (or NACKed) the publication or a later revision.
    pub acked: u64,
    pub nacked: u64,
    /// The baseline's canary rollout (SPEC §9); `null` when it went to every agent at once.
    #[serde(default)]
    pub canary: Option<Canary>,
}

/// A canary rollout (OpenAPI `Canary`): who is in, what they did, and what decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Canary {
    pub state: budget_core::canary::CanaryState,
    /// Which agents are in: `{"percent": N}` or `{"labels": {…}}`.
    pub selector: budget_core::canary::Selector,
    pub bake_s: u64,
    pub auto: bool,
    /// The revision canary agents received.
    pub revision: i64,
    /// The baseline every other agent keeps during the bake (and canary agents get back on
    /// abort).
    pub previous_baseline_id: String,
    pub started_at: String,
    pub started_by: String,
    pub bake_ends_at: String,
    /// The agent ids selected (connected or not), and how many of them ACKed or NACKed the
    /// canary revision.
    pub members: Vec<String>,
    pub acked: u64,
    pub nacked: u64,
    /// The canary agents' counts since the bake began, per segment: what decides.
    pub health: Vec<CanaryHealth>,
    /// Why it was promoted or aborted (`null` while baking), by whom, when, and the revision
    /// that ended it.
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub ended_at: Option<String>,
    #[serde(default)]
    pub ended_by: Option<String>,
    #[serde(default)]
    pub end_revision: Option<i64>,
}

/// One segment's figures on canary agents (OpenAPI `CanaryHealth`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryHealth {
    pub segment: String,
    pub calls: u64,
    pub attempts: u64,
    /// attempts / calls (`null` without calls) and deadline-exceeded attempts / attempts.
    #[serde(default)]
    pub amplification: Option<f64>,
    #[serde(default)]
    pub kill_rate: Option<f64>,
    /// Successful attempts in the merged latency histogram, its nearest-rank p99 and p999
    /// (`null` without samples), and R-drift's largest change from the canary's baseline.
    pub samples: u64,
    #[serde(default)]
    pub p99_ms: Option<f64>,
    #[serde(default)]
    pub p999_ms: Option<f64>,
    #[serde(default)]
    pub drift_pct: Option<f64>,
}

/// `GET /baselines/{id}/tree` (OpenAPI `BaselineTree`): the call tree of a baseline in
/// numbers — every parent's need against its time, and how each budget is made (what the
/// console draws).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineTree {
    pub baseline_id: String,
    #[serde(flatten)]
    pub capacity: Capacity,
}

/// `GET /baselines/{id}/whatif`'s query: a segment of the baseline and a timeout to try.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WhatIfQuery {
    /// A segment id of the baseline, e.g. `order->inventory` (required).
    pub segment: Option<String>,
    /// The timeout to try, in whole milliseconds (required; 1 to 3 600 000).
    pub timeout_ms: Option<i64>,
}

/// `GET /baselines/{id}/whatif` (OpenAPI `WhatIf`): what a timeout would kill of the
/// baseline's run, from the distribution stored with the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    pub baseline_id: String,
    pub run_id: String,
    pub segment: String,
    /// The timeout tried.
    pub timeout_ms: u64,
    /// The segment's timeout in the baseline, for comparison.
    pub baseline_timeout_ms: u64,
    /// `histogram` (every sample: the share is exact) or `percentiles` (bounds only).
    pub source: Source,
    /// The share of the run's samples slower than `timeout_ms` (histograms).
    pub kill_rate: Option<f64>,
    /// `[at least, at most]` of that share (percentile points).
    pub kill_rate_bounds: Option<[f64; 2]>,
    /// Samples slower than the timeout, and in all (histograms).
    pub killed: Option<u64>,
    pub samples: Option<u64>,
    /// Whether the segment retries on deadline (idempotent, `retry.on_deadline` not false).
    pub retries_on_deadline: bool,
    /// Attempts per call: `1 + kill_rate` when the segment retries on deadline, else 1
    /// (histograms).
    pub attempts_per_call: Option<f64>,
}

/// `GET /baselines/{id}/distribution`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DistributionQuery {
    /// A segment id of the baseline (required).
    pub segment: Option<String>,
}

/// `GET /baselines/{id}/distribution` (OpenAPI `SegmentDistribution`): one segment's latency
/// distribution in the baseline's run, as a cumulative curve, with the lines the console
/// draws over it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentDistribution {
    pub baseline_id: String,
    pub run_id: String,
    pub segment: String,
    pub source: Source,
    /// Samples in the histogram (histograms).
    pub samples: Option<u64>,
    pub timeout_ms: u64,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    pub kill_rate: Option<f64>,
    pub kill_rate_bounds: Option<[f64; 2]>,
    /// `[latency ms, share of samples at most it]`, ascending in both; at most
    /// [`MAX_CURVE_POINTS`] pairs.
    pub cdf: Vec<[f64; 2]>,
}

/// Most pairs in a [`SegmentDistribution`]'s curve.
pub const MAX_CURVE_POINTS: usize = 400;

pub use budget_core::distribution::Source;
