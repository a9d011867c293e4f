//! The failure sequences of `retry.json`: inputs only; [`super::run`] computes every
//! expectation.

use super::{failed, Case, CorpusError};
use crate::example::{checkout_live, CHECKOUT_TOPOLOGY};
use crate::live::LiveSegment;
use crate::retry::Failure;
use crate::rules::RetryRule;

const PLENTY_US: u64 = 10_000_000;

/// Attempts with plenty of time left and no jitter.
fn plenty(failures: &[Failure]) -> Vec<(Failure, u64, u64)> {
    failures.iter().map(|&f| (f, PLENTY_US, 0)).collect()
}

/// A rule with `backoffs_ms` (the last repeating up to `max_retries`) and its worst case.
fn rule(max_retries: u32, backoffs_ms: &[u64], jitter_pct: u64) -> RetryRule {
    let last = backoffs_ms.last().copied().unwrap_or(0);
    let total: u64 = (0..max_retries as usize)
        .map(|i| backoffs_ms.get(i).copied().unwrap_or(last))
        .sum();
    RetryRule {
        max_retries,
        backoffs_ms: backoffs_ms.to_vec(),
        jitter_pct,
        worst_case_backoff_ms: (total * (100 + jitter_pct)).div_ceil(100),
    }
}

pub(super) fn cases() -> Result<Vec<Case>, CorpusError> {
    use Failure::{Business as B, Deadline as D, Other as O, Unavailable as U};
    let a = checkout_live(CHECKOUT_TOPOLOGY, 7).map_err(failed)?;
    let segment = |id: &str| {
        a.segment(id)
            .cloned()
            .ok_or_else(|| failed(format!("the checkout example has no segment {id}")))
    };
    let inventory = segment("order->inventory")?;
    let payment = segment("order->payment")?;
    let user = segment("order->user")?;
    let with_unavailable = |rule: RetryRule| {
        let mut s = inventory.clone();
        s.retry.on_unavailable = Some(rule);
        s
    };
    let case = |name, description, segment: &LiveSegment, key_given, attempts| Case {
        name,
        description,
        segment: segment.clone(),
        key_given,
        attempts,
    };
    Ok(vec![
        // The R-retry table, with plenty of time and no jitter.
        case(
            "deadline-one-retry",
            "inventory: one DEADLINE_EXCEEDED retry after 100 ms, then no more",
            &inventory,
            true,
            plenty(&[D, D]),
        ),
        case(
            "unavailable-two-retries",
            "inventory: two UNAVAILABLE retries after 100 ms then 300 ms, then no more",
            &inventory,
            true,
            plenty(&[U, U, U]),
        ),
        case(
            "limits-per-cause-deadline-first",
            "the limits are per cause, while retry counts every retry of the call: deadline \
             1, unavailable 2 and 3, then the deadline rule is used up",
            &inventory,
            true,
            plenty(&[D, U, U, D]),
        ),
        case(
            "limits-per-cause-unavailable-first",
            "unavailable 1, deadline 2, unavailable 3 (its second backoff, 300 ms), then the \
             unavailable rule is used up",
            &inventory,
            true,
            plenty(&[U, D, U, U]),
        ),
        case(
            "business-error-never-retries",
            "a business error (err_code ≠ 0) is never retried",
            &inventory,
            true,
            plenty(&[B]),
        ),
        case(
            "other-failure-never-retries",
            "a failure that is neither DEADLINE_EXCEEDED nor UNAVAILABLE is never retried; \
             the call counts as business_error",
            &inventory,
            true,
            plenty(&[O]),
        ),
        case(
            "business-error-after-a-retry",
            "a retry, then a business error ends the call",
            &inventory,
            true,
            plenty(&[U, B]),
        ),
        case(
            "no-key-deadline",
            "inventory is idempotent but the caller gave no key: no retry, counted \
             retry_refused_no_key",
            &inventory,
            false,
            plenty(&[D]),
        ),
        case(
            "no-key-unavailable",
            "no key on UNAVAILABLE: refused the same way",
            &inventory,
            false,
            plenty(&[U]),
        ),
        case(
            "no-key-business-error",
            "no key, but a business error is never retried anyway: business_error",
            &inventory,
            false,
            plenty(&[B]),
        ),
        case(
            "not-idempotent-with-key",
            "user is not idempotent: never retried, key or not; the outcome is the failure's",
            &user,
            true,
            plenty(&[D]),
        ),
        case(
            "not-idempotent-without-key",
            "user without a key: nothing is refused for the key, since user would never retry",
            &user,
            false,
            plenty(&[U]),
        ),
        case(
            "no-deadline-rule",
            "payment has retry.on_deadline=false: no rule for the deadline cause",
            &payment,
            true,
            plenty(&[D]),
        ),
        case(
            "no-deadline-rule-unavailable-retries",
            "payment still retries UNAVAILABLE twice",
            &payment,
            true,
            plenty(&[U, U, U]),
        ),
        case(
            "no-deadline-rule-no-key",
            "payment without a key on a deadline: no rule would have retried it, so \
             deadline_exceeded, not retry_refused_no_key",
            &payment,
            false,
            plenty(&[D]),
        ),
        case(
            "no-deadline-rule-no-key-unavailable",
            "payment without a key on UNAVAILABLE: its rule would have retried: \
             retry_refused_no_key",
            &payment,
            false,
            plenty(&[U]),
        ),
        // Jitter: backoff = base + min(pick, base × 20 %).
        case(
            "jitter-pick-zero",
            "pick 0: the bare backoff, 100 ms",
            &inventory,
            true,
            vec![(U, PLENTY_US, 0)],
        ),
        case(
            "jitter-pick-max",
            "the largest picks, 20 ms and 60 ms: 120 ms then 360 ms, the worst case",
            &inventory,
            true,
            vec![(U, PLENTY_US, 20_000), (U, PLENTY_US, 60_000)],
        ),
        case(
            "jitter-pick-mid",
            "picks 10 ms and 30 ms: 110 ms then 330 ms",
            &inventory,
            true,
            vec![(U, PLENTY_US, 10_000), (U, PLENTY_US, 30_000)],
        ),
        case(
            "jitter-pick-out-of-range",
            "a pick over 20 % of the backoff is clamped: 100 ms + 20 ms",
            &inventory,
            true,
            vec![(U, PLENTY_US, 1_000_000)],
        ),
        case(
            "jitter-on-the-deadline-rule",
            "the deadline rule jitters too: 100 ms + 15 ms",
            &inventory,
            true,
            vec![(D, PLENTY_US, 15_000)],
        ),
        // Never back off past the deadline.
        case(
            "out-of-budget-101ms-left",
            "101 ms left, backoff 100 ms: it ends before the deadline, retried",
            &inventory,
            true,
            vec![(U, 101_000, 0)],
        ),
        case(
            "out-of-budget-100ms-left",
            "100 ms left, backoff 100 ms: it would end at the deadline, stop",
            &inventory,
            true,
            vec![(U, 100_000, 0)],
        ),
        case(
            "out-of-budget-by-jitter",
            "110 ms left, backoff 100 ms stretched to 120 ms by the jitter: stop",
            &inventory,
            true,
            vec![(U, 110_000, 20_000)],
        ),
        case(
            "out-of-budget-nothing-left",
            "no time left at all: stop",
            &inventory,
            true,
            vec![(U, 0, 0)],
        ),
        case(
            "out-of-budget-second-retry",
            "the first retry fits, the second (300 ms with 250 ms left) does not",
            &inventory,
            true,
            vec![(U, 500_000, 0), (U, 250_000, 0)],
        ),
        case(
            "out-of-budget-deadline",
            "a deadline retry that does not fit: the outcome is deadline_exceeded",
            &inventory,
            true,
            vec![(D, 50_000, 0)],
        ),
        // Rules other than the SPEC's defaults, as a config may carry them.
        case(
            "custom-rule-last-backoff-repeats",
            "a rule of 3 retries with backoffs 100, 300: the last backoff repeats",
            &with_unavailable(rule(3, &[100, 300], 20)),
            true,
            plenty(&[U, U, U, U]),
        ),
        case(
            "custom-rule-no-jitter",
            "jitter_pct 0: every pick is clamped to 0",
            &with_unavailable(rule(2, &[100, 300], 0)),
            true,
            vec![(U, PLENTY_US, 5_000)],
        ),
        case(
            "custom-rule-no-retries",
            "a rule allowing 0 retries: used up at once",
            &with_unavailable(rule(0, &[], 20)),
            true,
            plenty(&[U]),
        ),
        case(
            "custom-rule-no-retries-no-key",
            "a rule allowing 0 retries refuses nothing for a missing key: unavailable, not \
             retry_refused_no_key",
            &with_unavailable(rule(0, &[], 20)),
            false,
            plenty(&[U]),
        ),
    ])
}

/// `(name, description, timeout_ms, remaining_us)` of each attempt-timeout vector.
pub(super) const ATTEMPT_TIMEOUTS: [(&str, &str, u64, u64); 6] = [
    (
        "plenty-left",
        "208 ms left: inventory's full 44 ms timeout",
        44,
        208_000,
    ),
    (
        "capped",
        "30 ms left: the attempt gets 30 ms, not 44",
        44,
        30_000,
    ),
    ("equal", "exactly 44 ms left: 44 ms", 44, 44_000),
    ("one-microsecond", "1 µs left is still an attempt", 390, 1),
    ("nothing-left", "no time left: no attempt starts", 44, 0),
    (
        "long-timeout",
        "payment's 390 ms with 10 s left",
        390,
        10_000_000,
    ),
];
