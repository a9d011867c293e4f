//! The retry policy of SPEC §3 R-retry / R-budget, as the agent applies it to one call.
//!
//! The rules are budget-core's ([`budget_core::retry`]), re-exported here unchanged: pure and
//! deterministic, callers pass the remaining time and the jitter draw. This module adds what
//! only the agent needs, [`Classify`]: how the error of a downstream call maps to a
//! [`Failure`]. [`crate::Agent::call`] is the async loop on top of [`decide`] and
//! [`attempt_timeout`], with `jitter`'s random pick.

pub use budget_core::retry::{
    attempt_timeout, base_backoff_ms, decide, earliest, jittered, may_retry, rule_for, Cause,
    Decision, Failure, RetryState, Stop,
};

/// Classifies an error of a downstream call for R-retry.
pub trait Classify {
    fn classify(&self) -> Failure;
}

impl Classify for Failure {
    fn classify(&self) -> Failure {
        *self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jitter::random_pick;
    use std::time::Duration;

    #[test]
    fn the_random_pick_stretches_a_backoff_by_at_most_the_rule_percentage() {
        let (lo, hi) = (Duration::from_millis(100), Duration::from_millis(120));
        for _ in 0..1000 {
            let b = jittered(100, 20, random_pick);
            assert!(b >= lo && b <= hi, "{b:?}");
        }
    }
}
