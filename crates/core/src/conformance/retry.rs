//! `retry.json`: failure sequences of one call → R-retry decisions and the call's outcome.
//!
//! Every expectation is computed by [`crate::retry`] and [`crate::outcome`], the rules the Rust
//! agent runs; this file only writes their answers in the corpus's words.

use std::time::Duration;

use serde::Serialize;

use super::{failed, CorpusError};
use crate::live::LiveSegment;
use crate::outcome::Outcome;
use crate::retry::{self, Cause, Decision, Failure, RetryState, Stop};

mod cases;

#[derive(Serialize)]
pub(super) struct RetryFile {
    comment: &'static str,
    vectors: Vec<RetryVector>,
    attempt_timeouts: Vec<AttemptTimeout>,
}

#[derive(Serialize)]
struct RetryVector {
    name: &'static str,
    description: &'static str,
    segment: LiveSegment,
    key_given: bool,
    steps: Vec<Step>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<&'static str>,
}

#[derive(Serialize)]
struct Step {
    failure: &'static str,
    remaining_us: u64,
    pick_us: u64,
    expect: Expect,
}

/// A [`Decision`] in the corpus's words.
#[derive(Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
enum Expect {
    Retry {
        cause: &'static str,
        retry: u32,
        backoff_us: u64,
    },
    Stop {
        reason: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cause: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        backoff_us: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        remaining_us: Option<u64>,
    },
}

impl From<Decision> for Expect {
    fn from(decision: Decision) -> Self {
        let stop = |reason, cause: Option<Cause>| Self::Stop {
            reason,
            cause: cause.map(Cause::as_str),
            backoff_us: None,
            remaining_us: None,
        };
        match decision {
            Decision::Retry {
                cause,
                retry,
                backoff,
            } => Self::Retry {
                cause: cause.as_str(),
                retry,
                backoff_us: micros(backoff),
            },
            Decision::Stop(Stop::Business) => stop("business", None),
            Decision::Stop(Stop::Other) => stop("other", None),
            Decision::Stop(Stop::NotIdempotent) => stop("not_idempotent", None),
            Decision::Stop(Stop::NoRule(cause)) => stop("no_rule", Some(cause)),
            Decision::Stop(Stop::MaxRetries(cause)) => stop("max_retries", Some(cause)),
            Decision::Stop(Stop::OutOfBudget { backoff, remaining }) => Self::Stop {
                reason: "out_of_budget",
                cause: None,
                backoff_us: Some(micros(backoff)),
                remaining_us: Some(micros(remaining)),
            },
        }
    }
}

/// The corpus's name of a failure.
fn failure_name(failure: Failure) -> &'static str {
    match failure {
        Failure::Deadline => "deadline",
        Failure::Unavailable => "unavailable",
        Failure::Business => "business",
        Failure::Other => "other",
    }
}

/// Every duration here was made from whole microseconds in a `u64`, so it fits one.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[derive(Serialize)]
struct AttemptTimeout {
    name: &'static str,
    description: &'static str,
    timeout_ms: u64,
    remaining_us: u64,
    expect_us: Option<u64>,
}

/// A failure sequence: each failed attempt with the time left and the jitter draw.
struct Case {
    name: &'static str,
    description: &'static str,
    segment: LiveSegment,
    key_given: bool,
    attempts: Vec<(Failure, u64, u64)>,
}

fn run(case: Case) -> Result<RetryVector, CorpusError> {
    let mut state = RetryState::default();
    let mut steps = Vec::new();
    let mut outcome = None;
    for (failure, remaining_us, pick_us) in case.attempts {
        if outcome.is_some() {
            return Err(failed(format!("{}: a step after a stop", case.name)));
        }
        let remaining = Duration::from_micros(remaining_us);
        let decision = retry::decide(
            &case.segment,
            failure,
            case.key_given,
            &mut state,
            remaining,
            |_| pick_us,
        );
        if let Decision::Stop(_) = decision {
            outcome = Some(Outcome::after_failure(&case.segment, case.key_given, failure).as_str());
        }
        steps.push(Step {
            failure: failure_name(failure),
            remaining_us,
            pick_us,
            expect: decision.into(),
        });
    }
    Ok(RetryVector {
        name: case.name,
        description: case.description,
        key_given: case.key_given,
        segment: case.segment,
        steps,
        outcome,
    })
}

const COMMENT: &str = "The failed attempts of one call, in order, and R-retry's decision on \
    each; outcome is how the call ended (SPEC §8) when its last step is a stop. \
    attempt_timeouts: the timeout of the next attempt, the segment's timeout capped by the time \
    remaining (null: no attempt starts).";

pub(super) fn file() -> Result<RetryFile, CorpusError> {
    let vectors = cases::cases()?
        .into_iter()
        .map(run)
        .collect::<Result<_, _>>()?;
    Ok(RetryFile {
        comment: COMMENT,
        vectors,
        attempt_timeouts: attempt_timeouts(),
    })
}

/// The timeout of the next attempt for each of [`cases::ATTEMPT_TIMEOUTS`].
fn attempt_timeouts() -> Vec<AttemptTimeout> {
    cases::ATTEMPT_TIMEOUTS
        .into_iter()
        .map(
            |(name, description, timeout_ms, remaining_us)| AttemptTimeout {
                name,
                description,
                timeout_ms,
                remaining_us,
                expect_us: retry::attempt_timeout(timeout_ms, Duration::from_micros(remaining_us))
                    .map(micros),
            },
        )
        .collect()
}
