//! How a call ended, as SPEC §8 counts it: one [`Outcome`] per call (not per attempt), and
//! the pure rule deciding it ([`Outcome::after_failure`]).

use crate::live::LiveSegment;
use crate::retry::{self, Cause, Failure};

/// How one call an agent runs under R-retry ended: one outcome per call, decided when it
/// returns.
///
/// | outcome                | when                                                           |
/// |------------------------|----------------------------------------------------------------|
/// | `ok`                   | an attempt succeeded (after any number of retries)             |
/// | `business_error`       | the last attempt failed with [`Failure::Business`] or [`Failure::Other`]: never retryable |
/// | `retry_refused_no_key` | the last attempt failed retryably (deadline or unavailable), the segment is idempotent (`retry.idempotent` and an idempotency rule) and has a retry rule allowing at least one retry for that cause, but the caller gave no idempotency key — the seed's "没带的一律拒绝重试并打点" |
/// | `deadline_exceeded`    | otherwise, the last attempt timed out or failed with [`Failure::Deadline`]: retries used up, no rule for the cause, a non-idempotent segment, or the retry did not fit the budget |
/// | `unavailable`          | otherwise, the last attempt failed with [`Failure::Unavailable`], for the same reasons |
/// | `budget_exhausted`     | no attempt could be started at all: no time was left (e.g. the inherited deadline had passed) |
///
/// A call on a segment the live config does not know is not counted (there is no segment to
/// count it on), nor is a call whose future is dropped before it ends (cancelled by its
/// caller): every count of a call is recorded together when it ends, in the window in
/// progress then. So in every window `calls` = Σ `outcomes` and
/// `attempts` = `calls` − `budget_exhausted` + Σ `retries`.
///
/// From these counts the control plane derives, per segment and window (SPEC §8):
/// kill rate = (`retries["deadline"]` + `outcomes["deadline_exceeded"]`) / `attempts`, and
/// key coverage = 1 − `retry_refused_no_key` / (Σ `retries` + `retry_refused_no_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    Ok,
    DeadlineExceeded,
    Unavailable,
    BusinessError,
    BudgetExhausted,
    RetryRefusedNoKey,
}

impl Outcome {
    /// Every outcome, in the order of the counters of a window.
    pub const ALL: [Outcome; 6] = [
        Self::Ok,
        Self::DeadlineExceeded,
        Self::Unavailable,
        Self::BusinessError,
        Self::BudgetExhausted,
        Self::RetryRefusedNoKey,
    ];

    /// The name on the wire (`SegmentWindow.outcomes`) and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::Unavailable => "unavailable",
            Self::BusinessError => "business_error",
            Self::BudgetExhausted => "budget_exhausted",
            Self::RetryRefusedNoKey => "retry_refused_no_key",
        }
    }

    /// Position in [`Outcome::ALL`], for arrays of counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The outcome of a call whose last attempt failed with `failure` and that made no further
    /// attempt, for whatever reason (see the table above).
    pub fn after_failure(segment: &LiveSegment, key_given: bool, failure: Failure) -> Outcome {
        let Some(cause) = failure.cause() else {
            return Self::BusinessError;
        };
        if !key_given && would_retry_with_a_key(segment, cause) {
            return Self::RetryRefusedNoKey;
        }
        match cause {
            Cause::Deadline => Self::DeadlineExceeded,
            Cause::Unavailable => Self::Unavailable,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `segment` is idempotent and allows at least one retry for `cause`: only a missing
/// key stops such a retry.
fn would_retry_with_a_key(segment: &LiveSegment, cause: Cause) -> bool {
    retry::may_retry(segment, true)
        && retry::rule_for(segment, cause).is_some_and(|rule| rule.max_retries > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::{checkout_live, CHECKOUT_TOPOLOGY};
    use crate::live::LiveChain;
    use Failure::{Business, Deadline, Other, Unavailable};
    use Outcome as O;

    fn example_a() -> LiveChain {
        checkout_live(CHECKOUT_TOPOLOGY, 7).unwrap()
    }

    fn check(segment: &str, key: bool, failure: Failure, expect: Outcome) {
        let chain = example_a();
        let s = chain.segment(segment).unwrap();
        assert_eq!(
            Outcome::after_failure(s, key, failure),
            expect,
            "{segment}, key {key}, {failure:?}"
        );
    }

    #[test]
    fn outcome_after_a_failure() {
        // inventory: idempotent, rules for both causes.
        check("order->inventory", true, Deadline, O::DeadlineExceeded);
        check("order->inventory", true, Unavailable, O::Unavailable);
        check("order->inventory", false, Deadline, O::RetryRefusedNoKey);
        check("order->inventory", false, Unavailable, O::RetryRefusedNoKey);
        check("order->inventory", false, Business, O::BusinessError);
        check("order->inventory", true, Other, O::BusinessError);
        // user: not idempotent — a missing key refuses nothing.
        check("order->user", false, Deadline, O::DeadlineExceeded);
        check("order->user", false, Unavailable, O::Unavailable);
        // payment: idempotent, no deadline rule — only unavailable is refused for the key.
        check("order->payment", false, Deadline, O::DeadlineExceeded);
        check("order->payment", false, Unavailable, O::RetryRefusedNoKey);
    }

    #[test]
    fn a_rule_allowing_no_retry_refuses_nothing() {
        let mut chain = example_a();
        let inv = chain
            .segments
            .iter_mut()
            .find(|s| s.id == "order->inventory")
            .unwrap();
        inv.retry.on_unavailable.as_mut().unwrap().max_retries = 0;
        let s = chain.segment("order->inventory").unwrap();
        assert_eq!(
            Outcome::after_failure(s, false, Unavailable),
            O::Unavailable
        );
        assert_eq!(
            Outcome::after_failure(s, false, Deadline),
            O::RetryRefusedNoKey
        );
    }

    #[test]
    fn names_and_indexes() {
        let names: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(
            names,
            [
                "ok",
                "deadline_exceeded",
                "unavailable",
                "business_error",
                "budget_exhausted",
                "retry_refused_no_key"
            ]
        );
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(o.index(), i);
        }
        // The server counts what the agents report under these names.
        assert_eq!(names, crate::feedback::OUTCOMES);
    }
}
