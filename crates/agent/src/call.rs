//! Running one downstream call under R-retry: per-attempt timeout, backoff with jitter, never
//! past the segment budget or the inherited deadline; and what the call did ([`Ended`]), for
//! the counts of SPEC §8.

use std::future::Future;
use std::time::Duration;

use budget_core::live::LiveSegment;
use tokio::time::Instant;

use crate::jitter::random_pick;
use crate::outcome::Outcome;
use crate::policy::{self, Cause, Classify, Decision, Failure, RetryState};

/// One attempt of a call, handed to the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first attempt, 2 for the first retry, …
    pub number: u32,
    /// This attempt's timeout: the segment's `timeout_ms`, capped by the time remaining.
    pub timeout: Duration,
    /// When this attempt times out; pass it on downstream (e.g. as the gRPC deadline).
    pub deadline: Instant,
}

/// How a call under budget failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError<E> {
    /// The last attempt failed with this error (a business error, a non-retryable failure, or a
    /// retryable one when retries were used up or did not fit in the budget).
    #[error("{0}")]
    Failed(E),
    /// The last attempt hit its timeout.
    #[error("deadline exceeded after {attempts} attempt(s)")]
    DeadlineExceeded { attempts: u32 },
    /// The live config has no segment of that id.
    #[error("unknown segment {0:?}")]
    UnknownSegment(String),
    /// No time was left to start even one attempt (the inherited deadline had passed).
    #[error("no time left in the budget to start the call")]
    BudgetExhausted,
}

impl<E> CallError<E> {
    /// The downstream's error, when the last attempt returned one.
    pub fn into_inner(self) -> Option<E> {
        match self {
            Self::Failed(e) => Some(e),
            _ => None,
        }
    }
}

/// A failed call classifies like its cause, so a caller's own caller retries it correctly.
impl<E: Classify> Classify for CallError<E> {
    fn classify(&self) -> Failure {
        match self {
            Self::Failed(e) => e.classify(),
            Self::DeadlineExceeded { .. } | Self::BudgetExhausted => Failure::Deadline,
            Self::UnknownSegment(_) => Failure::Other,
        }
    }
}

/// gRPC status codes: DEADLINE_EXCEEDED and UNAVAILABLE are the retryable causes; codes an
/// application answers with are business errors; the rest (cancelled, internal, auth, …) are
/// other failures. Neither of the last two ever retries.
impl Classify for tonic::Status {
    fn classify(&self) -> Failure {
        use tonic::Code;
        match self.code() {
            Code::DeadlineExceeded => Failure::Deadline,
            Code::Unavailable => Failure::Unavailable,
            Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::FailedPrecondition
            | Code::Aborted
            | Code::OutOfRange => Failure::Business,
            Code::Ok
            | Code::Cancelled
            | Code::Unknown
            | Code::PermissionDenied
            | Code::ResourceExhausted
            | Code::Unimplemented
            | Code::Internal
            | Code::DataLoss
            | Code::Unauthenticated => Failure::Other,
        }
    }
}

/// What a finished call did: its attempts, the retries made, how it ended, and how long its
/// successful attempt took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended {
    pub(crate) attempts: u32,
    pub(crate) retries: RetryState,
    pub(crate) outcome: Outcome,
    /// The duration of the attempt that succeeded; `None` when none did.
    pub(crate) latency: Option<Duration>,
}

/// Runs `op` for `segment` under R-retry; `on_retry` is told the cause of every retry made.
/// Returns the call's result and what it did.
pub(crate) async fn run<T, E, F, Fut>(
    segment: &LiveSegment,
    key_given: bool,
    inherited: Option<Instant>,
    mut op: F,
    mut on_retry: impl FnMut(Cause),
) -> (Result<T, CallError<E>>, Ended)
where
    F: FnMut(Attempt) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Classify,
{
    let start = Instant::now();
    let end = policy::earliest(start, Duration::from_millis(segment.budget_ms), inherited);
    let mut state = RetryState::default();
    let mut last: Option<(CallError<E>, Failure)> = None;
    let mut attempts = 0u32;
    // A retry decided but not yet made (its cause, and the retry counts before it): it counts
    // only once its attempt starts, so a backoff that ends past the deadline counts nothing.
    let mut pending: Option<(Cause, RetryState)> = None;
    // The call's result once it stops after a failure (or before any attempt).
    let give_up = |last: Option<(CallError<E>, Failure)>, attempts: u32, state: RetryState| {
        let (error, outcome) = match last {
            Some((error, failure)) => (error, Outcome::after_failure(segment, key_given, failure)),
            None => (CallError::BudgetExhausted, Outcome::BudgetExhausted),
        };
        let ended = Ended {
            attempts,
            retries: state,
            outcome,
            latency: None,
        };
        (Err(error), ended)
    };
    loop {
        let now = if attempts == 0 { start } else { Instant::now() };
        let remaining = end.saturating_duration_since(now);
        let Some(timeout) = policy::attempt_timeout(segment.timeout_ms, remaining) else {
            if let Some((_, before)) = pending.take() {
                state = before;
            }
            return give_up(last, attempts, state);
        };
        if let Some((cause, _)) = pending.take() {
            on_retry(cause);
        }
        attempts += 1;
        let attempt = Attempt {
            number: attempts,
            timeout,
            deadline: now + timeout,
        };
        let failure = match tokio::time::timeout_at(attempt.deadline, op(attempt)).await {
            Ok(Ok(value)) => {
                let ended = Ended {
                    attempts,
                    retries: state,
                    outcome: Outcome::Ok,
                    latency: Some(now.elapsed()),
                };
                return (Ok(value), ended);
            }
            Ok(Err(e)) => {
                let failure = e.classify();
                last = Some((CallError::Failed(e), failure));
                failure
            }
            Err(_elapsed) => {
                last = Some((CallError::DeadlineExceeded { attempts }, Failure::Deadline));
                Failure::Deadline
            }
        };
        let remaining = end.saturating_duration_since(Instant::now());
        let before = state;
        match policy::decide(
            segment,
            failure,
            key_given,
            &mut state,
            remaining,
            random_pick,
        ) {
            Decision::Retry {
                cause,
                retry,
                backoff,
            } => {
                tracing::info!(
                    segment = %segment.id,
                    retry,
                    cause = cause.as_str(),
                    backoff_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                    "retrying"
                );
                pending = Some((cause, before));
                tokio::time::sleep(backoff).await;
            }
            Decision::Stop(stop) => {
                tracing::debug!(segment = %segment.id, attempts, ?stop, "not retrying");
                return give_up(last, attempts, state);
            }
        }
    }
}
