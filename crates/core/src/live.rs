//! The live configuration of a chain: what agents enforce, derived from an approved baseline.

use serde::{Deserialize, Serialize};

use crate::baseline::BaselineDocument;
use crate::duration::HumanDuration;
use crate::rules::RetryPlan;
use crate::topology::{Idempotency, SegmentClass};

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
