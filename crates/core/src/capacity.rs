//! How a baseline's time is spent, for people to see: for every parent, its children's stages
//! and what they need against what the parent has (the `inversion` check's numbers, inverted
//! or not), and how each segment's budget is made (R-budget: attempts × timeout + backoff).
//!
//! The console draws this as the call tree to scale; it computes none of it.

use serde::{Deserialize, Serialize};

use crate::baseline::BaselineSegment;
use crate::checks::{self, ParentNeed};
use crate::topology::Topology;

/// One segment's budget, taken apart: `budget_ms = attempts × timeout_ms + backoff_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetParts {
    pub segment: String,
    pub timeout_ms: u64,
    /// 1, or 1 + the deadline retries when the segment retries on DEADLINE_EXCEEDED.
    pub attempts: u32,
    /// The worst-case backoff (with jitter) of the deadline retries; 0 without them.
    pub backoff_ms: u64,
    pub budget_ms: u64,
}

/// The call tree's numbers: parents (topology order) and every segment's budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capacity {
    pub parents: Vec<ParentNeed>,
    pub segments: Vec<BudgetParts>,
}

/// The capacity of a computed baseline (`segments`) on the topology it was computed with.
pub fn capacity(topology: &Topology, segments: &[BaselineSegment]) -> Capacity {
    Capacity {
        parents: checks::parent_needs(topology, segments),
        segments: segments
            .iter()
            .map(|s| {
                let deadline = s.retry.on_deadline.as_ref();
                BudgetParts {
                    segment: s.id.clone(),
                    timeout_ms: s.timeout_ms,
                    attempts: 1 + deadline.map_or(0, |r| r.max_retries),
                    backoff_ms: deadline.map_or(0, |r| r.worst_case_backoff_ms),
                    budget_ms: s.budget_ms,
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY, CHECKOUT_TOPOLOGY_B};
    use crate::run::RunUpload;

    fn of(topology: &str) -> Capacity {
        let t: Topology = serde_json::from_str(topology).unwrap();
        t.validate().unwrap();
        let run = serde_json::from_str::<RunUpload>(CHECKOUT_RUN_A)
            .unwrap()
            .into_run(&t)
            .unwrap();
        capacity(
            &t,
            &crate::compute(&t, &run, &crate::distribution::NoDistributions)
                .unwrap()
                .segments,
        )
    }

    /// `topology` → per parent `(segment, need, available, excess, stage needs)` and per
    /// segment `(segment, attempts, timeout, backoff, budget)`.
    #[allow(clippy::type_complexity)]
    fn check(
        topology: &str,
        expect: (
            &[(&str, u64, i64, i64, &[u64])],
            &[(&str, u32, u64, u64, u64)],
        ),
    ) {
        let c = of(topology);
        let parents: Vec<_> = c
            .parents
            .iter()
            .map(|p| {
                let stages: Vec<u64> = p.stages.iter().map(|s| s.max_budget_ms).collect();
                (
                    p.segment.as_str(),
                    p.need_ms,
                    p.available_ms,
                    p.excess_ms,
                    stages,
                )
            })
            .collect();
        let want: Vec<_> = expect
            .0
            .iter()
            .map(|(s, n, a, e, st)| (*s, *n, *a, *e, st.to_vec()))
            .collect();
        assert_eq!(parents, want);
        let budgets: Vec<_> = c
            .segments
            .iter()
            .map(|b| {
                (
                    b.segment.as_str(),
                    b.attempts,
                    b.timeout_ms,
                    b.backoff_ms,
                    b.budget_ms,
                )
            })
            .collect();
        assert_eq!(budgets, expect.1);
        // the parts add up to the budget the rules computed
        for b in &c.segments {
            assert_eq!(
                u64::from(b.attempts) * b.timeout_ms + b.backoff_ms,
                b.budget_ms,
                "{b:?}"
            );
        }
    }

    #[test]
    fn the_examples_of_the_spec() {
        // A: 208 + 390 + 9 = 607 of 800, no inversion; inventory 2 × 44 + 120
        check(
            CHECKOUT_TOPOLOGY,
            (
                &[("gateway->order", 607, 800, -193, &[208, 390, 9])],
                &[
                    ("gateway->order", 1, 800, 0, 800),
                    ("order->inventory", 2, 44, 120, 208),
                    ("order->payment", 1, 390, 0, 390),
                    ("order->user", 1, 9, 0, 9),
                ],
            ),
        );
        // B: 500 + 400 + 9 = 909 of 800, 109 over
        check(
            CHECKOUT_TOPOLOGY_B,
            (
                &[("gateway->order", 909, 800, 109, &[500, 400, 9])],
                &[
                    ("gateway->order", 1, 800, 0, 800),
                    ("order->inventory", 1, 500, 0, 500),
                    ("order->payment", 1, 400, 0, 400),
                    ("order->user", 1, 9, 0, 9),
                ],
            ),
        );
    }
}
