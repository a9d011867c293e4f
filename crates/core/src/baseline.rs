//! Computing a baseline from one topology version and one run, and the baseline document.

use serde::{Deserialize, Serialize};

use crate::checks::{self, Finding};
use crate::distribution::{attempts_per_call, Kill, Tails};
use crate::drift::DriftEntry;
use crate::duration::HumanDuration;
use crate::rules::{self, RetryPlan, TimeoutRule};
use crate::run::RunData;
use crate::topology::{Idempotency, SegmentClass, Topology};
use crate::us_to_ms;

mod restate;
pub use restate::{restate, Restate};

/// One segment of a baseline: what was measured, the rule applied, and the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineSegment {
    pub id: String,
    pub caller: String,
    pub callee: String,
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<u32>,
    pub class: SegmentClass,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// Failed requests of the run; absent when the run does not say (unknown, not 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p999_ms: Option<f64>,
    pub rule: TimeoutRule,
    pub timeout_ms: u64,
    pub budget_ms: u64,
    #[serde(default)]
    pub reserve_ms: u64,
    pub retry: RetryPlan,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<Idempotency>,
    /// The share of the run's samples slower than `timeout_ms`, when the run holds a histogram
    /// of the segment (exact to its 3 significant digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_rate: Option<f64>,
    /// `[at least, at most]` of that share, when the run holds only percentile points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_rate_bounds: Option<[f64; 2]>,
    /// `1 + kill_rate`: attempts per call when every killed call is retried once (segments that
    /// retry on deadline, with a histogram).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts_per_call: Option<f64>,
}

impl BaselineSegment {
    /// Fills the kill-rate fields from what `timeout_ms` kills of `cdf`.
    pub fn set_kill(&mut self, kill: Option<Kill>) {
        self.kill_rate = kill.and_then(|k| k.rate());
        self.kill_rate_bounds = kill
            .filter(|k| k.rate().is_none())
            .map(|k| [k.at_least, k.at_most]);
        self.attempts_per_call = self
            .kill_rate
            .filter(|_| self.retry.on_deadline.is_some())
            .map(attempts_per_call);
    }
}

/// The result of [`compute`]: segments in topology order and the findings of every check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Computation {
    pub segments: Vec<BaselineSegment>,
    pub findings: Vec<Finding>,
}

impl Computation {
    pub fn has_errors(&self) -> bool {
        checks::has_errors(&self.findings)
    }
}

/// Why a baseline could not be computed at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("segment {segment:?}: {message}")]
pub struct ComputeError {
    pub segment: String,
    pub message: String,
}

/// Applies R-margin, R-retry and R-budget to every segment, says what each timeout kills of the
/// run's distributions (`tails`: asked one segment at a time), then runs every check. The topology must be valid ([`Topology::validate`]).
pub fn compute(
    topology: &Topology,
    run: &RunData,
    tails: &dyn Tails,
) -> Result<Computation, Vec<ComputeError>> {
    let mut errors = Vec::new();
    let mut segments = Vec::with_capacity(topology.segments.len());
    let mut kills = Vec::with_capacity(topology.segments.len());
    for seg in &topology.segments {
        let stats = run.segments.get(&seg.id);
        let Some((timeout_ms, rule)) = rules::timeout_ms(topology, seg, stats) else {
            errors.push(ComputeError {
                segment: seg.id.clone(),
                message: "the run has no percentiles for this segment".into(),
            });
            continue;
        };
        let retry = RetryPlan::for_segment(seg);
        let mut computed = BaselineSegment {
            id: seg.id.clone(),
            caller: seg.caller.clone(),
            callee: seg.callee.clone(),
            parent: seg.parent.clone(),
            stage: seg.stage,
            class: seg.class,
            samples: stats.map(|s| s.samples),
            failures: stats.and_then(|s| s.failures),
            p99_ms: stats.map(|s| us_to_ms(s.p99_us)),
            p999_ms: stats.map(|s| us_to_ms(s.p999_us)),
            rule,
            budget_ms: rules::budget_ms(timeout_ms, &retry),
            timeout_ms,
            reserve_ms: seg.reserve_ms,
            retry,
            idempotency: seg.idempotency.clone(),
            kill_rate: None,
            kill_rate_bounds: None,
            attempts_per_call: None,
        };
        let kill = tails.kill(&seg.id, timeout_ms.saturating_mul(1000));
        computed.set_kill(kill);
        kills.push(kill);
        segments.push(computed);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut findings = checks::run_checks(topology, &segments, run);
    findings.extend(crate::distribution::kill_findings(
        topology, &segments, &kills,
    ));
    Ok(Computation { segments, findings })
}

/// Lifecycle of a baseline: `draft` → `approved` → `superseded`, `draft` → `rejected`, or
/// `draft` → `superseded` when a newer draft of the chain replaces it before any decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaselineState {
    Draft,
    Approved,
    Superseded,
    Rejected,
}

impl BaselineState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Draft => "draft",
            Self::Approved => "approved",
            Self::Superseded => "superseded",
            Self::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "draft" => Self::Draft,
            "approved" => Self::Approved,
            "superseded" => Self::Superseded,
            "rejected" => Self::Rejected,
            _ => return None,
        })
    }
}

/// Why a baseline was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaselineReason {
    /// The chain's first run.
    FirstRun,
    /// A run uploaded while the chain had no approved baseline.
    NoApprovedBaseline,
    /// A run drifted more than 20 % from the approved baseline (R-drift).
    Drift,
    /// Someone asked for a recompute explicitly.
    Recompute,
}

/// A human decision on a draft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub by: String,
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// The baseline document: served by `GET /baselines/{id}` and archived byte for byte.
///
/// Everything but `state`, `decision` and `superseded_by` is fixed at creation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineDocument {
    pub id: String,
    pub chain: String,
    pub state: BaselineState,
    pub reason: BaselineReason,
    pub run_id: String,
    pub topology_version: i64,
    pub created_at: String,
    pub created_by: String,
    pub entry_budget_ms: u64,
    pub breaker_window_ms: u64,
    pub max_recovery: HumanDuration,
    pub segments: Vec<BaselineSegment>,
    pub findings: Vec<Finding>,
    /// The drift that triggered this baseline (reason `drift`), against `drift_baseline_id`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<DriftEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_baseline_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// While `superseded`: the baseline that replaced this one — the newer draft of the chain
    /// (a draft replaced before any decision), or the baseline approved or rolled back to after
    /// it (an approved baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
}

impl BaselineDocument {
    pub fn has_errors(&self) -> bool {
        checks::has_errors(&self.findings)
    }

    /// Whether this baseline was approved at some point: approved now, or superseded after
    /// its approval (a draft replaced by a newer draft was never approved).
    pub fn was_approved(&self) -> bool {
        match self.state {
            BaselineState::Approved => true,
            BaselineState::Superseded => self.decision.is_some(),
            BaselineState::Draft | BaselineState::Rejected => false,
        }
    }

    pub fn segment(&self, id: &str) -> Option<&BaselineSegment> {
        self.segments.iter().find(|s| s.id == id)
    }

    /// Applies a state change: the new state, the decision when one is given, and
    /// `superseded_by` while superseded (cleared in every other state). [`restate`] does the
    /// same to the canonical bytes.
    pub fn apply(&mut self, change: Restate<'_>) {
        self.state = change.state;
        if let Some(decision) = change.decision {
            self.decision = Some(decision.clone());
        }
        self.superseded_by = match change.state {
            BaselineState::Superseded => change.superseded_by.map(str::to_owned),
            _ => None,
        };
    }

    /// The canonical bytes: pretty JSON with a trailing newline. Served and archived as is.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out =
            serde_json::to_vec_pretty(self).expect("a baseline document always serializes");
        out.push(b'\n');
        out
    }
}
