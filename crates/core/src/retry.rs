//! R-retry and R-budget (SPEC §3) as an agent applies them to one call: which failed attempt
//! is retried, after which backoff, with which timeout, until which deadline.
//!
//! [`crate::rules`] derives a segment's retry plan and budget from a baseline; this module runs
//! that plan, failure by failure. Synchronous and deterministic: callers pass the remaining time
//! and the jitter draw (`pick`), so the Rust agent and the conformance corpus that every other
//! client runs ([`crate::conformance`]) share this one implementation, and it is tested without
//! a clock or a source of randomness.

use std::time::Duration;

use crate::live::LiveSegment;
use crate::rules::RetryRule;

/// What kind of failure an attempt ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    /// DEADLINE_EXCEEDED: the attempt ran out of time (or the downstream said so).
    Deadline,
    /// UNAVAILABLE: a fast failure, e.g. no healthy instance or connection refused.
    Unavailable,
    /// A business error (err_code ≠ 0): the downstream answered "no". Never retried.
    Business,
    /// Anything else (cancelled, internal, unknown …). Never retried.
    Other,
}

impl Failure {
    /// The retry cause this failure may be retried under, if any.
    pub fn cause(self) -> Option<Cause> {
        match self {
            Self::Deadline => Some(Cause::Deadline),
            Self::Unavailable => Some(Cause::Unavailable),
            Self::Business | Self::Other => None,
        }
    }
}

/// A bare [`Failure`] is a usable error for simple operations and tests.
impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Deadline => "deadline exceeded",
            Self::Unavailable => "unavailable",
            Self::Business => "business error",
            Self::Other => "failed",
        })
    }
}

impl std::error::Error for Failure {}

/// The two causes R-retry retries on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    Deadline,
    Unavailable,
}

impl Cause {
    /// The name used in logs and metrics: `deadline` or `unavailable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deadline => "deadline",
            Self::Unavailable => "unavailable",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Retries made so far in one call, per cause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryState {
    deadline: u32,
    unavailable: u32,
}

impl RetryState {
    pub fn retries(&self, cause: Cause) -> u32 {
        match cause {
            Cause::Deadline => self.deadline,
            Cause::Unavailable => self.unavailable,
        }
    }

    /// Retries of every cause: the `n` of the last `retry=n` logged.
    pub fn total(&self) -> u32 {
        self.deadline + self.unavailable
    }

    fn record(&mut self, cause: Cause) {
        match cause {
            Cause::Deadline => self.deadline += 1,
            Cause::Unavailable => self.unavailable += 1,
        }
    }
}

/// Why a failed attempt is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Business errors never retry.
    Business,
    /// Failures other than deadline / unavailable never retry.
    Other,
    /// The segment is not idempotent, or the caller gave no idempotency key.
    NotIdempotent,
    /// The segment's retry plan has no rule for this cause (e.g. `retry.on_deadline=false`).
    NoRule(Cause),
    /// The rule's `max_retries` for this cause are used up.
    MaxRetries(Cause),
    /// The backoff would end at or past the call's deadline (segment budget or inherited
    /// deadline): better a fallback than an overrun (宁兜底不超预算).
    OutOfBudget {
        backoff: Duration,
        remaining: Duration,
    },
}

/// The verdict on one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Sleep `backoff`, then make retry number `retry` (1-based, counting every cause).
    Retry {
        cause: Cause,
        retry: u32,
        backoff: Duration,
    },
    Stop(Stop),
}

/// The rule of `segment`'s retry plan for `cause`, when the call may retry at all.
pub fn rule_for(segment: &LiveSegment, cause: Cause) -> Option<&RetryRule> {
    match cause {
        Cause::Deadline => segment.retry.on_deadline.as_ref(),
        Cause::Unavailable => segment.retry.on_unavailable.as_ref(),
    }
}

/// Whether a call of `segment` may retry at all: the segment is idempotent and the caller
/// passed the idempotency key (without it, a retry could run the operation twice).
pub fn may_retry(segment: &LiveSegment, key_given: bool) -> bool {
    key_given && segment.retry.idempotent && segment.idempotency.is_some()
}

/// `base_ms` stretched by a uniform random 0..=`jitter_pct` %. `pick(max)` returns a value in
/// `0..=max` (microseconds); values above `max` are clamped.
pub fn jittered(base_ms: u64, jitter_pct: u64, pick: impl FnOnce(u64) -> u64) -> Duration {
    let base_us = base_ms.saturating_mul(1000);
    let max_extra_us = base_us.saturating_mul(jitter_pct) / 100;
    let extra_us = pick(max_extra_us).min(max_extra_us);
    Duration::from_micros(base_us.saturating_add(extra_us))
}

/// The backoff before retry number `index` (0-based, per cause) of `rule`, without jitter.
/// A plan with fewer backoffs than `max_retries` repeats its last one.
pub fn base_backoff_ms(rule: &RetryRule, index: u32) -> u64 {
    let i = index as usize;
    rule.backoffs_ms
        .get(i)
        .or(rule.backoffs_ms.last())
        .copied()
        .unwrap_or(0)
}

/// Decides what to do after an attempt of `segment` failed with `failure`.
///
/// `remaining` is the time left until the call's deadline (the earlier of call start +
/// `budget_ms` and the inherited deadline). A retry is granted only when its backoff ends
/// strictly before that deadline; the retried attempt's timeout is then capped by
/// [`attempt_timeout`]. On `Retry`, `state` records the retry.
pub fn decide(
    segment: &LiveSegment,
    failure: Failure,
    key_given: bool,
    state: &mut RetryState,
    remaining: Duration,
    pick: impl FnOnce(u64) -> u64,
) -> Decision {
    let cause = match failure {
        Failure::Business => return Decision::Stop(Stop::Business),
        Failure::Other => return Decision::Stop(Stop::Other),
        Failure::Deadline => Cause::Deadline,
        Failure::Unavailable => Cause::Unavailable,
    };
    if !may_retry(segment, key_given) {
        return Decision::Stop(Stop::NotIdempotent);
    }
    let Some(rule) = rule_for(segment, cause) else {
        return Decision::Stop(Stop::NoRule(cause));
    };
    let used = state.retries(cause);
    if used >= rule.max_retries {
        return Decision::Stop(Stop::MaxRetries(cause));
    }
    let backoff = jittered(base_backoff_ms(rule, used), rule.jitter_pct, pick);
    if backoff >= remaining {
        return Decision::Stop(Stop::OutOfBudget { backoff, remaining });
    }
    state.record(cause);
    Decision::Retry {
        cause,
        retry: state.total(),
        backoff,
    }
}

/// The timeout of the next attempt: the segment's `timeout_ms`, capped by the time remaining;
/// `None` when no time remains (never start an attempt past the deadline).
pub fn attempt_timeout(timeout_ms: u64, remaining: Duration) -> Option<Duration> {
    (!remaining.is_zero()).then(|| Duration::from_millis(timeout_ms).min(remaining))
}

/// The earlier of `now + budget` and `inherited` (seed: "dial 时自动继承 ctx 剩余时间").
pub fn earliest<I: Ord + Copy + std::ops::Add<Duration, Output = I>>(
    now: I,
    budget: Duration,
    inherited: Option<I>,
) -> I {
    let own = now + budget;
    inherited.map_or(own, |i| i.min(own))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::{checkout_live, CHECKOUT_TOPOLOGY};

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const NONE: fn(u64) -> u64 = |_| 0;
    const MAX: fn(u64) -> u64 = |m| m;

    fn seg(id: &str) -> LiveSegment {
        let a = checkout_live(CHECKOUT_TOPOLOGY, 7).unwrap();
        a.segment(id).unwrap().clone()
    }

    /// Runs `decide` over `failures` with plenty of time and no jitter; returns the decisions.
    fn check(segment: &str, key: bool, failures: &[Failure], expect: &[Decision]) {
        let s = seg(segment);
        let mut state = RetryState::default();
        let got: Vec<Decision> = failures
            .iter()
            .map(|&f| decide(&s, f, key, &mut state, MS(10_000), NONE))
            .collect();
        assert_eq!(got, expect, "{segment}, key {key}, {failures:?}");
    }

    fn retry(cause: Cause, retry: u32, backoff_ms: u64) -> Decision {
        Decision::Retry {
            cause,
            retry,
            backoff: MS(backoff_ms),
        }
    }

    use Cause::{Deadline as D, Unavailable as U};
    use Failure::{Business, Deadline, Other, Unavailable};

    #[test]
    fn r_retry_table() {
        // Idempotent, both rules: 1 deadline retry after 100; 2 unavailable after 100, 300.
        check(
            "order->inventory",
            true,
            &[Deadline, Deadline],
            &[retry(D, 1, 100), Decision::Stop(Stop::MaxRetries(D))],
        );
        check(
            "order->inventory",
            true,
            &[Unavailable, Unavailable, Unavailable],
            &[
                retry(U, 1, 100),
                retry(U, 2, 300),
                Decision::Stop(Stop::MaxRetries(U)),
            ],
        );
        // Limits are per cause; `retry=n` counts every retry of the call.
        check(
            "order->inventory",
            true,
            &[Deadline, Unavailable, Unavailable, Deadline],
            &[
                retry(D, 1, 100),
                retry(U, 2, 100),
                retry(U, 3, 300),
                Decision::Stop(Stop::MaxRetries(D)),
            ],
        );
        // Business and other errors never retry.
        check(
            "order->inventory",
            true,
            &[Business],
            &[Decision::Stop(Stop::Business)],
        );
        check(
            "order->inventory",
            true,
            &[Other],
            &[Decision::Stop(Stop::Other)],
        );
        // No idempotency key given: never retries.
        check(
            "order->inventory",
            false,
            &[Deadline, Unavailable],
            &[
                Decision::Stop(Stop::NotIdempotent),
                Decision::Stop(Stop::NotIdempotent),
            ],
        );
        // A non-idempotent segment never retries, key or not.
        check(
            "order->user",
            true,
            &[Deadline, Unavailable],
            &[
                Decision::Stop(Stop::NotIdempotent),
                Decision::Stop(Stop::NotIdempotent),
            ],
        );
        // retry.on_deadline=false: no deadline retry, unavailable retries as usual.
        check(
            "order->payment",
            true,
            &[Deadline, Unavailable, Unavailable, Unavailable],
            &[
                Decision::Stop(Stop::NoRule(D)),
                retry(U, 1, 100),
                retry(U, 2, 300),
                Decision::Stop(Stop::MaxRetries(U)),
            ],
        );
    }

    #[test]
    fn jitter_stretches_by_at_most_the_rule_percentage() {
        assert_eq!(jittered(100, 20, NONE), MS(100));
        assert_eq!(jittered(100, 20, MAX), MS(120));
        assert_eq!(jittered(300, 20, MAX), MS(360));
        assert_eq!(jittered(300, 20, |m| m / 2), MS(330));
        // a pick out of range is clamped
        assert_eq!(jittered(100, 20, |_| u64::MAX), MS(120));
        assert_eq!(jittered(100, 0, MAX), MS(100));
        let s = seg("order->inventory");
        let mut state = RetryState::default();
        assert_eq!(
            decide(&s, Unavailable, true, &mut state, MS(10_000), MAX),
            retry(U, 1, 120)
        );
        assert_eq!(
            decide(&s, Unavailable, true, &mut state, MS(10_000), MAX),
            retry(U, 2, 360)
        );
    }

    #[test]
    fn never_backs_off_past_the_deadline() {
        let s = seg("order->inventory");
        let check = |remaining: u64, pick: fn(u64) -> u64, expect: Decision| {
            let mut state = RetryState::default();
            let got = decide(&s, Unavailable, true, &mut state, MS(remaining), pick);
            assert_eq!(got, expect, "remaining {remaining}");
            let recorded = matches!(expect, Decision::Retry { .. }) as u32;
            assert_eq!(state.total(), recorded, "only granted retries are recorded");
        };
        check(101, NONE, retry(U, 1, 100));
        check(
            100,
            NONE,
            Decision::Stop(Stop::OutOfBudget {
                backoff: MS(100),
                remaining: MS(100),
            }),
        );
        check(
            110,
            MAX,
            Decision::Stop(Stop::OutOfBudget {
                backoff: MS(120),
                remaining: MS(110),
            }),
        );
        check(
            0,
            NONE,
            Decision::Stop(Stop::OutOfBudget {
                backoff: MS(100),
                remaining: MS(0),
            }),
        );
    }

    #[test]
    fn attempt_timeout_is_capped_by_the_remaining_time() {
        assert_eq!(attempt_timeout(44, MS(208)), Some(MS(44)));
        assert_eq!(attempt_timeout(44, MS(30)), Some(MS(30)));
        assert_eq!(attempt_timeout(44, MS(44)), Some(MS(44)));
        assert_eq!(attempt_timeout(44, Duration::ZERO), None);
    }

    #[test]
    fn earliest_of_own_budget_and_inherited() {
        let now = std::time::Instant::now();
        assert_eq!(earliest(now, MS(208), None), now + MS(208));
        assert_eq!(earliest(now, MS(208), Some(now + MS(100))), now + MS(100));
        assert_eq!(earliest(now, MS(208), Some(now + MS(500))), now + MS(208));
        assert_eq!(earliest(now, MS(208), Some(now)), now);
    }

    #[test]
    fn cause_names_are_the_ones_the_server_counts() {
        let names = [Cause::Deadline, Cause::Unavailable].map(Cause::as_str);
        assert_eq!(names, crate::feedback::RETRY_CAUSES);
    }

    #[test]
    fn backoffs_shorter_than_max_retries_repeat_the_last() {
        let rule = RetryRule {
            max_retries: 3,
            backoffs_ms: vec![100, 300],
            jitter_pct: 20,
            worst_case_backoff_ms: 0,
        };
        let got: Vec<u64> = (0..4).map(|i| base_backoff_ms(&rule, i)).collect();
        assert_eq!(got, [100, 300, 300, 300]);
        let empty = RetryRule {
            backoffs_ms: vec![],
            ..rule
        };
        assert_eq!(base_backoff_ms(&empty, 0), 0);
    }
}
