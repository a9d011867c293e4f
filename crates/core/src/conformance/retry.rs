//! `retry.json`: failure sequences of one call → R-retry decisions and the call's outcome.
//!
//! The agents apply these rules, not the server, so the expectations are written here from
//! SPEC §3 (R-retry, R-budget) and §8 (outcomes) in their plainest form; each client's tests
//! prove its own code agrees with every step.

use serde::Serialize;

use super::{failed, CorpusError};
use crate::live::LiveSegment;
use crate::rules::RetryRule;

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
    failure: Failure,
    remaining_us: u64,
    pick_us: u64,
    expect: Expect,
}

#[derive(Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
enum Failure {
    Deadline,
    Unavailable,
    Business,
    Other,
}

#[derive(Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
enum Cause {
    Deadline,
    Unavailable,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Reason {
    Business,
    Other,
    NotIdempotent,
    NoRule,
    MaxRetries,
    OutOfBudget,
}

#[derive(Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
enum Expect {
    Retry {
        cause: Cause,
        retry: u32,
        backoff_us: u64,
    },
    Stop {
        reason: Reason,
        #[serde(skip_serializing_if = "Option::is_none")]
        cause: Option<Cause>,
        #[serde(skip_serializing_if = "Option::is_none")]
        backoff_us: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        remaining_us: Option<u64>,
    },
}

impl Expect {
    fn stop(reason: Reason, cause: Option<Cause>) -> Self {
        Self::Stop {
            reason,
            cause,
            backoff_us: None,
            remaining_us: None,
        }
    }
}

#[derive(Serialize)]
struct AttemptTimeout {
    name: &'static str,
    description: &'static str,
    timeout_ms: u64,
    remaining_us: u64,
    expect_us: Option<u64>,
}

/// One call of `segment` as R-retry runs it: the retries made so far, per cause.
struct Call<'a> {
    segment: &'a LiveSegment,
    key_given: bool,
    retries: [u32; 2],
}

impl Call<'_> {
    fn rule(&self, cause: Cause) -> Option<&RetryRule> {
        match cause {
            Cause::Deadline => self.segment.retry.on_deadline.as_ref(),
            Cause::Unavailable => self.segment.retry.on_unavailable.as_ref(),
        }
    }

    /// Only idempotent segments retry, and only with the caller's key (a retry without it
    /// could run the operation twice).
    fn idempotent(&self) -> bool {
        self.segment.retry.idempotent && self.segment.idempotency.is_some()
    }

    /// R-retry on one failed attempt, `remaining_us` before the call's deadline.
    fn decide(&mut self, failure: Failure, remaining_us: u64, pick_us: u64) -> Expect {
        let cause = match failure {
            Failure::Business => return Expect::stop(Reason::Business, None),
            Failure::Other => return Expect::stop(Reason::Other, None),
            Failure::Deadline => Cause::Deadline,
            Failure::Unavailable => Cause::Unavailable,
        };
        if !(self.key_given && self.idempotent()) {
            return Expect::stop(Reason::NotIdempotent, None);
        }
        let Some(rule) = self.rule(cause) else {
            return Expect::stop(Reason::NoRule, Some(cause));
        };
        let used = self.retries[cause as usize];
        if used >= rule.max_retries {
            return Expect::stop(Reason::MaxRetries, Some(cause));
        }
        // A rule listing fewer backoffs than retries repeats its last one.
        let base_ms = rule
            .backoffs_ms
            .get(used as usize)
            .or(rule.backoffs_ms.last());
        let base_us = base_ms.copied().unwrap_or(0) * 1000;
        let backoff_us = base_us + pick_us.min(base_us * rule.jitter_pct / 100);
        // Better a fallback than an overrun: the backoff must end before the deadline.
        if backoff_us >= remaining_us {
            return Expect::Stop {
                reason: Reason::OutOfBudget,
                cause: None,
                backoff_us: Some(backoff_us),
                remaining_us: Some(remaining_us),
            };
        }
        self.retries[cause as usize] += 1;
        Expect::Retry {
            cause,
            retry: self.retries.iter().sum(),
            backoff_us,
        }
    }

    /// SPEC §8's outcome of a call whose last attempt failed with `failure`: a retryable
    /// failure the segment would have retried with a key is `retry_refused_no_key`.
    fn outcome(&self, failure: Failure) -> &'static str {
        let cause = match failure {
            Failure::Business | Failure::Other => return "business_error",
            Failure::Deadline => Cause::Deadline,
            Failure::Unavailable => Cause::Unavailable,
        };
        let allows_a_retry = self.rule(cause).is_some_and(|r| r.max_retries > 0);
        if !self.key_given && self.idempotent() && allows_a_retry {
            return "retry_refused_no_key";
        }
        match cause {
            Cause::Deadline => "deadline_exceeded",
            Cause::Unavailable => "unavailable",
        }
    }
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
    let mut call = Call {
        segment: &case.segment,
        key_given: case.key_given,
        retries: [0; 2],
    };
    let mut steps = Vec::new();
    let mut outcome = None;
    for (failure, remaining_us, pick_us) in case.attempts {
        if outcome.is_some() {
            return Err(failed(format!("{}: a step after a stop", case.name)));
        }
        let expect = call.decide(failure, remaining_us, pick_us);
        if matches!(expect, Expect::Stop { .. }) {
            outcome = Some(call.outcome(failure));
        }
        steps.push(Step {
            failure,
            remaining_us,
            pick_us,
            expect,
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

/// The timeout of the next attempt: the segment's, capped by the time remaining; none when no
/// time remains (never start an attempt past the deadline).
fn attempt_timeouts() -> Vec<AttemptTimeout> {
    cases::ATTEMPT_TIMEOUTS
        .into_iter()
        .map(
            |(name, description, timeout_ms, remaining_us)| AttemptTimeout {
                name,
                description,
                timeout_ms,
                remaining_us,
                expect_us: (remaining_us > 0).then(|| remaining_us.min(timeout_ms * 1000)),
            },
        )
        .collect()
}
