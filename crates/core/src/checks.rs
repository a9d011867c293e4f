//! The checks of SPEC §3. Each problem becomes a [`Finding`] carrying its numbers; any
//! `error` finding blocks approval, and an agent refuses a config that has one.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::baseline::BaselineSegment;
use crate::run::RunData;
use crate::topology::{Segment, Topology};
use crate::us_to_ms;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// One finding: which check, on which segment, how bad, with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    #[serde(flatten)]
    pub kind: FindingKind,
    pub segment: String,
    pub severity: Severity,
    /// The finding in plain words, numbers included.
    pub message: String,
}

/// The numbers of each check, tagged by the check's name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum FindingKind {
    /// Children need more than their parent has available (seed: 500 + 400 = 900 > 800).
    Inversion {
        need_ms: u64,
        available_ms: i64,
        excess_ms: i64,
        stages: Vec<StageNeed>,
    },
    /// The breaker window is too short against the retry backoffs.
    BreakerWindow {
        breaker_window_ms: u64,
        worst_case_backoff_ms: u64,
        /// window ÷ worst-case backoff, rounded down to two decimals.
        ratio: f64,
    },
    /// The idempotency TTL does not cover the longest downstream recovery.
    IdempotencyTtl {
        key: String,
        ttl_ms: u64,
        max_recovery_ms: u64,
    },
    /// The root's measured p999 exceeds the entry budget.
    EntryHeadroom { p999_ms: f64, entry_budget_ms: u64 },
    /// A received config is not a valid call tree (agents only).
    Structure { pointer: String },
    /// The timeout's percentile comes from too few samples (`quality`).
    SampleSize {
        samples: u64,
        min_samples: u64,
        /// `p999` (volatile) or `p99` (stable): the percentile the timeout comes from.
        percentile: String,
    },
    /// Too many of the segment's requests failed for its percentiles to be trusted (`quality`).
    FailureRate {
        failures: u64,
        samples: u64,
        /// failures ÷ samples, rounded to 6 decimals.
        rate: f64,
        threshold: f64,
    },
    /// A p999 no real call has: over the entry budget × 10, a unit mix-up (`quality`).
    ImplausibleLatency {
        p999_ms: f64,
        limit_ms: u64,
        entry_budget_ms: u64,
    },
    /// The timeout kills more of the run's healthy calls than the chain allows (seed: a 100 ms
    /// timeout on a P99-180 ms read killed 25 %). Only runs holding a histogram get it.
    TimeoutKillRate {
        timeout_ms: u64,
        /// The share of the run's samples slower than the timeout (6 decimals).
        kill_rate: f64,
        killed: u64,
        samples: u64,
        /// `1 + kill_rate` when the segment retries on deadline; absent when it does not retry.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempts_per_call: Option<f64>,
        /// The threshold crossed (the chain's warning or error share).
        threshold: f64,
    },
}

impl FindingKind {
    pub fn check_name(&self) -> &'static str {
        match self {
            Self::Inversion { .. } => "inversion",
            Self::BreakerWindow { .. } => "breaker_window",
            Self::IdempotencyTtl { .. } => "idempotency_ttl",
            Self::EntryHeadroom { .. } => "entry_headroom",
            Self::Structure { .. } => "structure",
            Self::SampleSize { .. } => "sample_size",
            Self::FailureRate { .. } => "failure_rate",
            Self::ImplausibleLatency { .. } => "implausible_latency",
            Self::TimeoutKillRate { .. } => "timeout_kill_rate",
        }
    }
}

/// One stage of a parent's children: they run in parallel, so the stage needs its largest budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageNeed {
    /// The stage number given in the topology, or `None` for a child that is its own stage.
    pub stage: Option<u32>,
    pub segments: Vec<String>,
    pub max_budget_ms: u64,
}

/// Groups the children of `parent` by stage (in order of first appearance) with each stage's need.
pub fn stages_of(
    topology: &Topology,
    segments: &[BaselineSegment],
    parent: &str,
) -> Vec<StageNeed> {
    let budgets = budgets_by_id(segments);
    group_stages(topology.children(parent), &budgets)
}

/// Each segment's `budget_ms` by id (the first segment of an id wins, as a scan would find).
fn budgets_by_id(segments: &[BaselineSegment]) -> HashMap<&str, u64> {
    let mut budgets = HashMap::with_capacity(segments.len());
    for s in segments {
        budgets.entry(s.id.as_str()).or_insert(s.budget_ms);
    }
    budgets
}

/// Groups `children` (in document order) by stage with each stage's need; a child without a
/// budget in `budgets` needs 0.
fn group_stages<'a>(
    children: impl Iterator<Item = &'a Segment>,
    budgets: &HashMap<&str, u64>,
) -> Vec<StageNeed> {
    let mut stages: Vec<StageNeed> = Vec::new();
    let mut numbered: HashMap<u32, usize> = HashMap::new();
    for child in children {
        let b = budgets.get(child.id.as_str()).copied().unwrap_or(0);
        match child.stage.and_then(|n| numbered.get(&n).copied()) {
            Some(at) => {
                let stage = &mut stages[at];
                stage.segments.push(child.id.clone());
                stage.max_budget_ms = stage.max_budget_ms.max(b);
            }
            None => {
                if let Some(n) = child.stage {
                    numbered.insert(n, stages.len());
                }
                stages.push(StageNeed {
                    stage: child.stage,
                    segments: vec![child.id.clone()],
                    max_budget_ms: b,
                });
            }
        }
    }
    stages
}

/// What the children of one parent need against what the parent has: the numbers of the
/// `inversion` check, for every parent (inverted or not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentNeed {
    /// The parent segment.
    pub segment: String,
    /// Σ over stages of the stage's largest budget.
    pub need_ms: u64,
    /// The parent's timeout minus its reserve.
    pub available_ms: i64,
    /// `need_ms − available_ms`: over zero is an inversion.
    pub excess_ms: i64,
    pub stages: Vec<StageNeed>,
}

/// [`ParentNeed`] of every segment with children, in topology order.
/// Children and budgets are indexed once, so this is linear in the chain (a 1 000-segment
/// chain scanned per parent took milliseconds).
pub fn parent_needs(topology: &Topology, segments: &[BaselineSegment]) -> Vec<ParentNeed> {
    let budgets = budgets_by_id(segments);
    let mut children: HashMap<&str, Vec<&Segment>> = HashMap::new();
    for s in &topology.segments {
        if let Some(parent) = s.parent.as_deref() {
            children.entry(parent).or_default().push(s);
        }
    }
    segments
        .iter()
        .filter_map(|parent| {
            let kids = children
                .get(parent.id.as_str())
                .map_or(&[][..], Vec::as_slice);
            let stages = group_stages(kids.iter().copied(), &budgets);
            if stages.is_empty() {
                return None;
            }
            let need_ms: u64 = stages.iter().map(|s| s.max_budget_ms).sum();
            let available_ms = parent.timeout_ms as i64 - parent.reserve_ms as i64;
            Some(ParentNeed {
                segment: parent.id.clone(),
                need_ms,
                available_ms,
                excess_ms: need_ms as i64 - available_ms,
                stages,
            })
        })
        .collect()
}

/// Runs every check over computed segments. Findings come in topology order, check by check.
/// The checks that need only budgets, not measurements: what an agent re-runs on a config it
/// receives (`inversion`, `breaker_window`, `idempotency_ttl`).
pub fn check_budgets(topology: &Topology, segments: &[BaselineSegment]) -> Vec<Finding> {
    let mut findings = Vec::new();
    findings.extend(inversion(topology, segments));
    findings.extend(breaker_window(topology, segments));
    findings.extend(idempotency_ttl(topology));
    findings
}

/// Every check of a draft: [`check_budgets`], `entry_headroom`, and the data-quality checks of
/// the run ([`crate::quality`]: sample size, failure rate, implausible latency).
pub fn run_checks(
    topology: &Topology,
    segments: &[BaselineSegment],
    run: &RunData,
) -> Vec<Finding> {
    let mut findings = check_budgets(topology, segments);
    findings.extend(entry_headroom(topology, run));
    findings.extend(crate::quality::quality_checks(topology, segments, run));
    findings
}

fn inversion<'a>(
    topology: &'a Topology,
    segments: &'a [BaselineSegment],
) -> impl Iterator<Item = Finding> + 'a {
    parent_needs(topology, segments).into_iter().filter_map(|p| {
        (p.excess_ms > 0).then(|| {
            let parts: Vec<String> = p.stages.iter().map(|s| s.max_budget_ms.to_string()).collect();
            Finding {
                message: format!(
                    "children of {} need {} ms ({}), only {} ms available — {} ms over: budget inversion",
                    p.segment,
                    p.need_ms,
                    parts.join(" + "),
                    p.available_ms,
                    p.excess_ms,
                ),
                kind: FindingKind::Inversion {
                    need_ms: p.need_ms,
                    available_ms: p.available_ms,
                    excess_ms: p.excess_ms,
                    stages: p.stages,
                },
                segment: p.segment,
                severity: Severity::Error,
            }
        })
    })
}

fn breaker_window<'a>(
    topology: &'a Topology,
    segments: &'a [BaselineSegment],
) -> impl Iterator<Item = Finding> + 'a {
    let window = topology.breaker_window_ms;
    segments.iter().filter_map(move |s| {
        // Waits of zero cannot outlast any window; a received config may carry any value, so
        // the arithmetic is widened rather than trusted not to overflow.
        let worst = s.retry.worst_case_backoff_ms().filter(|&w| w > 0)?;
        let ratio = (u128::from(window) * 100 / u128::from(worst)) as f64 / 100.0;
        let (severity, verdict) = if window <= worst {
            (Severity::Error, "the breaker opens before the retries finish")
        } else if u128::from(window) < u128::from(worst) * 10 {
            (Severity::Warning, "under 10×: probing and retries interfere")
        } else {
            return None;
        };
        Some(Finding {
            message: format!(
                "{}: breaker window {window} ms is {ratio}× the worst-case retry backoff {worst} ms — {verdict}",
                s.id
            ),
            kind: FindingKind::BreakerWindow { breaker_window_ms: window, worst_case_backoff_ms: worst, ratio },
            segment: s.id.clone(),
            severity,
        })
    })
}

fn idempotency_ttl(topology: &Topology) -> impl Iterator<Item = Finding> + '_ {
    let recovery = topology.max_recovery;
    topology.segments.iter().filter_map(move |s| {
        let idem = s.idempotency.as_ref()?;
        (idem.ttl < recovery).then(|| Finding {
            message: format!(
                "{}: idempotency key {} lives {} but the longest recovery is {}; a retry after recovery could run twice",
                s.id, idem.key, idem.ttl, recovery
            ),
            kind: FindingKind::IdempotencyTtl {
                key: idem.key.clone(),
                ttl_ms: idem.ttl.as_ms(),
                max_recovery_ms: recovery.as_ms(),
            },
            segment: s.id.clone(),
            severity: Severity::Error,
        })
    })
}

fn entry_headroom(topology: &Topology, run: &RunData) -> Option<Finding> {
    let root = topology.root()?;
    let stats = run.segments.get(&root.id)?;
    let entry = topology.entry_budget_ms;
    (stats.p999_us > entry * 1000).then(|| {
        let p999 = us_to_ms(stats.p999_us);
        Finding {
            message: format!(
                "{}: measured p999 {p999} ms exceeds the entry budget {entry} ms; some requests time out at the entry",
                root.id
            ),
            kind: FindingKind::EntryHeadroom { p999_ms: p999, entry_budget_ms: entry },
            segment: root.id.clone(),
            severity: Severity::Warning,
        }
    })
}

/// Counts of findings by severity.
pub fn summarize(findings: &[Finding]) -> BTreeMap<Severity, usize> {
    let mut counts = BTreeMap::new();
    for f in findings {
        *counts.entry(f.severity).or_insert(0) += 1;
    }
    counts
}

pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

#[cfg(test)]
mod tests;
