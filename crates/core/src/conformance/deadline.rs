//! `deadline.json`: the deadline of a call, the earlier of now + budget and the inherited one
//! (SPEC §5: "dial 时自动继承 ctx 剩余时间"), computed by [`crate::retry::earliest`].

use std::time::Duration;

use serde::Serialize;

use super::File;
use crate::retry::earliest;

#[derive(Serialize)]
pub(super) struct DeadlineVector {
    name: &'static str,
    description: &'static str,
    now_us: u64,
    budget_ms: u64,
    inherited_us: Option<u64>,
    expect_us: u64,
}

const COMMENT: &str = "The effective deadline of a call: the earlier of now + the segment's \
    budget and the caller's inherited deadline (null: none). Times in microseconds on any \
    common clock.";

/// The rule on microseconds of a common clock, as the corpus writes them.
fn deadline_us(now_us: u64, budget_ms: u64, inherited_us: Option<u64>) -> u64 {
    let at = |us| Duration::from_micros(us);
    let deadline = earliest(
        at(now_us),
        Duration::from_millis(budget_ms),
        inherited_us.map(at),
    );
    u64::try_from(deadline.as_micros()).unwrap_or(u64::MAX)
}

pub(super) fn file() -> File<DeadlineVector> {
    const NOW: u64 = 1_000_000;
    let cases: [(&str, &str, u64, Option<u64>); 6] = [
        (
            "no-inherited-deadline",
            "the caller has no deadline: now + inventory's budget 208 ms",
            208,
            None,
        ),
        (
            "inherited-earlier",
            "the caller must answer in 100 ms, before inventory's own 208 ms run out: the \
             inherited deadline wins",
            208,
            Some(NOW + 100_000),
        ),
        (
            "inherited-later",
            "the caller has 500 ms left, more than the budget: the budget wins",
            208,
            Some(NOW + 500_000),
        ),
        (
            "inherited-equal",
            "the inherited deadline is exactly now + budget",
            208,
            Some(NOW + 208_000),
        ),
        (
            "inherited-already-past",
            "the inherited deadline passed 100 ms ago: the call's deadline is in the past (no \
             attempt can start)",
            208,
            Some(NOW - 100_000),
        ),
        (
            "inherited-now",
            "the inherited deadline is now: nothing left",
            390,
            Some(NOW),
        ),
    ];
    File {
        comment: COMMENT,
        vectors: cases
            .into_iter()
            .map(
                |(name, description, budget_ms, inherited_us)| DeadlineVector {
                    name,
                    description,
                    now_us: NOW,
                    budget_ms,
                    inherited_us,
                    expect_us: deadline_us(NOW, budget_ms, inherited_us),
                },
            )
            .collect(),
    }
}
