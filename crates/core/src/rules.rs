//! R-margin, R-retry and R-budget (SPEC §3). All arithmetic is on integer microseconds.

use serde::{Deserialize, Serialize};

use crate::ceil_div;
use crate::run::SegmentStats;
use crate::topology::{Segment, SegmentClass, Topology};

/// Jitter stretches each backoff by a uniform 0–20 %.
pub const JITTER_PCT: u64 = 20;
/// DEADLINE_EXCEEDED: at most one retry after 100 ms.
pub const DEADLINE_BACKOFFS_MS: [u64; 1] = [100];
/// UNAVAILABLE: at most two retries after 100 ms then 300 ms.
pub const UNAVAILABLE_BACKOFFS_MS: [u64; 2] = [100, 300];

/// Which rule produced a timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutRule {
    /// The root: `entry_budget_ms`, fixed by policy.
    Entry,
    /// `pinned_timeout_ms`, fixed by hand.
    Pinned,
    /// `ceil(p999 × 1.30)` for volatile segments.
    P999Plus30,
    /// `ceil(p99 × 1.10)` for stable segments.
    P99Plus10,
}

impl TimeoutRule {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Entry => "entry budget",
            Self::Pinned => "pinned",
            Self::P999Plus30 => "p999 × 1.30",
            Self::P99Plus10 => "p99 × 1.10",
        }
    }
}

/// R-margin for a non-root, unpinned segment: whole milliseconds, at least 1.
pub fn margin_timeout_ms(class: SegmentClass, stats: &SegmentStats) -> u64 {
    let ms = match class {
        SegmentClass::Volatile => ceil_div(stats.p999_us.saturating_mul(13), 10 * 1000),
        SegmentClass::Stable => ceil_div(stats.p99_us.saturating_mul(11), 10 * 1000),
    };
    ms.max(1)
}

/// The timeout of `segment`, and the rule that gave it. `stats` may be `None` only for the root
/// or a pinned segment.
pub fn timeout_ms(
    topology: &Topology,
    segment: &Segment,
    stats: Option<&SegmentStats>,
) -> Option<(u64, TimeoutRule)> {
    if segment.is_root() {
        return Some((topology.entry_budget_ms, TimeoutRule::Entry));
    }
    if let Some(pinned) = segment.pinned_timeout_ms {
        return Some((pinned, TimeoutRule::Pinned));
    }
    let stats = stats?;
    let rule = match segment.class {
        SegmentClass::Volatile => TimeoutRule::P999Plus30,
        SegmentClass::Stable => TimeoutRule::P99Plus10,
    };
    Some((margin_timeout_ms(segment.class, stats), rule))
}

/// How one kind of failure is retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryRule {
    pub max_retries: u32,
    pub backoffs_ms: Vec<u64>,
    pub jitter_pct: u64,
    /// Σ backoffs × (1 + jitter), the longest the waits can take.
    pub worst_case_backoff_ms: u64,
}

impl RetryRule {
    fn from_backoffs(backoffs: &[u64]) -> Self {
        let total: u64 = backoffs.iter().sum();
        Self {
            max_retries: backoffs.len() as u32,
            backoffs_ms: backoffs.to_vec(),
            jitter_pct: JITTER_PCT,
            worst_case_backoff_ms: ceil_div(total * (100 + JITTER_PCT), 100),
        }
    }
}

/// R-retry for one segment. Business errors and non-idempotent calls never retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPlan {
    pub idempotent: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_deadline: Option<RetryRule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_unavailable: Option<RetryRule>,
}

impl RetryPlan {
    pub fn for_segment(segment: &Segment) -> Self {
        Self {
            idempotent: segment.is_idempotent(),
            on_deadline: segment
                .retries_on_deadline()
                .then(|| RetryRule::from_backoffs(&DEADLINE_BACKOFFS_MS)),
            on_unavailable: segment
                .retries_on_unavailable()
                .then(|| RetryRule::from_backoffs(&UNAVAILABLE_BACKOFFS_MS)),
        }
    }

    /// The longest total backoff of any one cause, or `None` when the segment never retries.
    pub fn worst_case_backoff_ms(&self) -> Option<u64> {
        [&self.on_deadline, &self.on_unavailable]
            .into_iter()
            .flatten()
            .map(|r| r.worst_case_backoff_ms)
            .max()
    }
}

/// R-budget: the time a caller reserves for a segment, retries included.
///
/// `timeout` when the segment cannot retry on deadline; otherwise every deadline retry may take
/// a full timeout after its worst-case backoff: `2 × timeout + 120` for the one retry of R-retry.
/// UNAVAILABLE retries are fast failures and run inside the same budget.
pub fn budget_ms(timeout_ms: u64, plan: &RetryPlan) -> u64 {
    match &plan.on_deadline {
        None => timeout_ms,
        Some(rule) => timeout_ms
            .saturating_mul(1 + u64::from(rule.max_retries))
            .saturating_add(rule.worst_case_backoff_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(p99_ms: u64, p999_ms: u64) -> SegmentStats {
        SegmentStats {
            samples: 1,
            failures: None,
            p50_us: None,
            p99_us: p99_ms * 1000,
            p999_us: p999_ms * 1000,
        }
    }

    #[test]
    fn margins_match_spec_example_a() {
        let check = |class, p99, p999, expect| {
            assert_eq!(margin_timeout_ms(class, &stats(p99, p999)), expect)
        };
        check(SegmentClass::Stable, 40, 150, 44);
        check(SegmentClass::Volatile, 210, 300, 390);
        check(SegmentClass::Stable, 8, 20, 9);
        check(SegmentClass::Volatile, 210, 390, 507);
    }

    #[test]
    fn margins_ceil_on_microseconds() {
        // 40.001 ms × 1.1 = 44.0011 → 45
        let s = SegmentStats {
            samples: 1,
            failures: None,
            p50_us: None,
            p99_us: 40_001,
            p999_us: 40_001,
        };
        assert_eq!(margin_timeout_ms(SegmentClass::Stable, &s), 45);
        // never zero
        assert_eq!(margin_timeout_ms(SegmentClass::Stable, &stats(0, 0)), 1);
    }

    #[test]
    fn retry_rules_and_budget() {
        let d = RetryRule::from_backoffs(&DEADLINE_BACKOFFS_MS);
        assert_eq!((d.max_retries, d.worst_case_backoff_ms), (1, 120));
        let u = RetryRule::from_backoffs(&UNAVAILABLE_BACKOFFS_MS);
        assert_eq!((u.max_retries, u.worst_case_backoff_ms), (2, 480));
        let plan = RetryPlan {
            idempotent: true,
            on_deadline: Some(d),
            on_unavailable: Some(u),
        };
        assert_eq!(budget_ms(44, &plan), 208);
        assert_eq!(plan.worst_case_backoff_ms(), Some(480));
        let none = RetryPlan {
            idempotent: false,
            on_deadline: None,
            on_unavailable: None,
        };
        assert_eq!(budget_ms(9, &none), 9);
        assert_eq!(none.worst_case_backoff_ms(), None);
    }
}
