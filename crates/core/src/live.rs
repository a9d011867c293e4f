//! The live configuration of a chain: what agents enforce, derived from an approved baseline.

use serde::{Deserialize, Serialize};

use crate::baseline::{BaselineDocument, BaselineSegment};
use crate::checks::{self, Finding};
use crate::duration::HumanDuration;
use crate::rules::RetryPlan;
use crate::rules::TimeoutRule;
use crate::topology::{Idempotency, SegmentClass};
use crate::topology::{RetryFlags, Segment, Topology, TopologyError, MAX_SEGMENTS};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveSegment {
    pub id: String,
    pub caller: String,
    pub callee: String,
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<u32>,
    pub class: SegmentClass,
    pub timeout_ms: u64,
    pub budget_ms: u64,
    #[serde(default)]
    pub reserve_ms: u64,
    pub retry: RetryPlan,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<Idempotency>,
}

/// One chain's published budgets at one revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveChain {
    pub chain: String,
    pub revision: i64,
    pub baseline_id: String,
    pub published_at: String,
    pub entry_budget_ms: u64,
    pub breaker_window_ms: u64,
    pub max_recovery: HumanDuration,
    pub segments: Vec<LiveSegment>,
}

impl LiveChain {
    pub fn from_baseline(doc: &BaselineDocument, revision: i64, published_at: &str) -> Self {
        Self {
            chain: doc.chain.clone(),
            revision,
            baseline_id: doc.id.clone(),
            published_at: published_at.to_owned(),
            entry_budget_ms: doc.entry_budget_ms,
            breaker_window_ms: doc.breaker_window_ms,
            max_recovery: doc.max_recovery,
            segments: doc
                .segments
                .iter()
                .map(|s| LiveSegment {
                    id: s.id.clone(),
                    caller: s.caller.clone(),
                    callee: s.callee.clone(),
                    parent: s.parent.clone(),
                    stage: s.stage,
                    class: s.class,
                    timeout_ms: s.timeout_ms,
                    budget_ms: s.budget_ms,
                    reserve_ms: s.reserve_ms,
                    retry: s.retry.clone(),
                    idempotency: s.idempotency.clone(),
                })
                .collect(),
        }
    }
}

/// The longest time, in milliseconds, a received config may give (about 31.7 years): longer is
/// no timeout budget, and the arithmetic on deadlines (now + budget) and on the checks' sums
/// stays exact below it in every client.
pub const MAX_CONFIG_MS: u64 = 1_000_000_000_000;

/// The most retries a received retry rule may allow for one cause (R-retry allows 1 and 2): a
/// larger number is no plan budgetd derives, and could turn a fast failure into a retry storm.
pub const MAX_RULE_RETRIES: u32 = 10;

impl LiveChain {
    /// What no server derives but a received config may carry, as structure errors: a timeout
    /// of 0, a budget below its timeout, a rule allowing more than [`MAX_RULE_RETRIES`], then
    /// every duration above [`MAX_CONFIG_MS`].
    fn received_faults(&self) -> Vec<TopologyError> {
        let mut errors = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let at = |field: &str| format!("/segments/{i}/{field}");
            if s.timeout_ms == 0 {
                errors.push(TopologyError {
                    pointer: at("timeout_ms"),
                    message: "must be greater than 0".into(),
                });
            }
            if s.budget_ms < s.timeout_ms {
                errors.push(TopologyError {
                    pointer: at("budget_ms"),
                    message: format!("{} is below the timeout {}", s.budget_ms, s.timeout_ms),
                });
            }
            let rules = [
                ("on_deadline", &s.retry.on_deadline),
                ("on_unavailable", &s.retry.on_unavailable),
            ];
            for (cause, rule) in rules {
                if rule
                    .as_ref()
                    .is_some_and(|r| r.max_retries > MAX_RULE_RETRIES)
                {
                    errors.push(TopologyError {
                        pointer: at(&format!("retry/{cause}/max_retries")),
                        message: format!("must be at most {MAX_RULE_RETRIES}"),
                    });
                }
            }
        }
        errors.extend(self.out_of_range());
        errors
    }

    /// The durations of this config above [`MAX_CONFIG_MS`], as structure errors.
    fn out_of_range(&self) -> Vec<TopologyError> {
        let chain = [
            ("/entry_budget_ms".to_owned(), self.entry_budget_ms),
            ("/breaker_window_ms".to_owned(), self.breaker_window_ms),
        ];
        let segments = self.segments.iter().enumerate().flat_map(|(i, s)| {
            [
                ("timeout_ms", s.timeout_ms),
                ("budget_ms", s.budget_ms),
                ("reserve_ms", s.reserve_ms),
            ]
            .map(|(field, ms)| (format!("/segments/{i}/{field}"), ms))
        });
        chain
            .into_iter()
            .chain(segments)
            .filter(|(_, ms)| *ms > MAX_CONFIG_MS)
            .map(|(pointer, _)| TopologyError {
                pointer,
                message: format!("must be at most {MAX_CONFIG_MS} ms"),
            })
            .collect()
    }

    /// The call tree this config describes, for validation.
    pub fn topology(&self) -> Topology {
        Topology {
            entry_budget_ms: self.entry_budget_ms,
            breaker_window_ms: self.breaker_window_ms,
            max_recovery: self.max_recovery,
            kill_rate: None,
            segments: self
                .segments
                .iter()
                .map(|s| Segment {
                    id: s.id.clone(),
                    caller: s.caller.clone(),
                    callee: s.callee.clone(),
                    parent: s.parent.clone(),
                    class: s.class,
                    idempotency: s.idempotency.clone(),
                    retry: Some(RetryFlags {
                        on_deadline: Some(s.retry.on_deadline.is_some()),
                        on_unavailable: Some(s.retry.on_unavailable.is_some()),
                    }),
                    pinned_timeout_ms: None,
                    reserve_ms: s.reserve_ms,
                    stage: s.stage,
                    labels: Vec::new(),
                })
                .collect(),
        }
    }

    pub fn segment(&self, id: &str) -> Option<&LiveSegment> {
        self.segments.iter().find(|s| s.id == id)
    }

    /// Everything wrong with this config: structural problems (as findings on the segment
    /// named by the pointer) and the budget checks. A config with an `error` finding must be
    /// refused, exactly as a service refuses to start with an inverted config.
    pub fn findings(&self) -> Vec<Finding> {
        let topology = self.topology();
        let mut errors = topology.validate().err().unwrap_or_default();
        if self.segments.len() <= MAX_SEGMENTS {
            errors.extend(self.received_faults());
        }
        if !errors.is_empty() {
            return errors
                .into_iter()
                .map(|e| Finding {
                    kind: checks::FindingKind::Structure {
                        pointer: e.pointer.clone(),
                    },
                    segment: String::new(),
                    severity: checks::Severity::Error,
                    message: format!("{}: {}", e.pointer, e.message),
                })
                .collect();
        }
        let segments: Vec<BaselineSegment> = self
            .segments
            .iter()
            .map(|s| BaselineSegment {
                id: s.id.clone(),
                caller: s.caller.clone(),
                callee: s.callee.clone(),
                parent: s.parent.clone(),
                stage: s.stage,
                class: s.class,
                samples: None,
                failures: None,
                p99_ms: None,
                p999_ms: None,
                rule: TimeoutRule::Pinned,
                timeout_ms: s.timeout_ms,
                budget_ms: s.budget_ms,
                reserve_ms: s.reserve_ms,
                retry: s.retry.clone(),
                idempotency: s.idempotency.clone(),
                kill_rate: None,
                kill_rate_bounds: None,
                attempts_per_call: None,
            })
            .collect();
        checks::check_budgets(&topology, &segments)
    }
}
