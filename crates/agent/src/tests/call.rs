//! `Agent::call` against a scripted fake downstream, on tokio's paused clock: every duration
//! below is exact, not a sleep-and-hope.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::test_support::{example_a, roomy};
use crate::{Agent, CallError, Cause, Classify, Failure, Snapshot};

const INV: &str = "order->inventory";
const PAY: &str = "order->payment";
const USER: &str = "order->user";
const KEY: Option<&str> = Some("order-42");

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What the fake downstream does on one attempt.
#[derive(Debug, Clone, Copy)]
enum Step {
    Ok,
    Fail(Failure),
    /// Never answers (the attempt times out).
    Hang,
    /// Answers with the failure after the delay.
    SlowFail(u64, Failure),
}
use Step::{Fail, Hang, SlowFail};

const UNAV: Step = Fail(Failure::Unavailable);

/// One attempt seen by the downstream: when it started (since the call) and its timeout.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Seen {
    at: Duration,
    timeout: Duration,
}

fn agent(chain: budget_core::live::LiveChain) -> Agent {
    logs::init();
    Agent::from_snapshot(Snapshot::from_chains([chain])).unwrap()
}

/// Runs one call with `script` (attempts past its end succeed); returns the result, what the
/// downstream saw and how long the call took.
async fn run(
    agent: &Agent,
    segment: &str,
    key: Option<&str>,
    inherited: Option<Duration>,
    script: &[Step],
) -> (Result<u32, CallError<Failure>>, Vec<Seen>, Duration) {
    let start = Instant::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let script = script.to_vec();
    let result = agent
        .call_within(segment, key, inherited.map(|d| start + d), move |attempt| {
            log.lock().unwrap().push(Seen {
                at: start.elapsed(),
                timeout: attempt.timeout,
            });
            assert_eq!(attempt.deadline, Instant::now() + attempt.timeout);
            let step = script
                .get(attempt.number as usize - 1)
                .copied()
                .unwrap_or(Step::Ok);
            async move {
                match step {
                    Step::Ok => Ok(attempt.number),
                    Fail(f) => Err(f),
                    Hang => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok(attempt.number)
                    }
                    SlowFail(delay, f) => {
                        tokio::time::sleep(ms(delay)).await;
                        Err(f)
                    }
                }
            }
        })
        .await;
    let seen = seen.lock().unwrap().clone();
    (result, seen, start.elapsed())
}

/// Log capture for the `retrying` line. One global subscriber, installed before any test
/// can reach the agent's log callsites (every test here builds its agent with [`agent`]), so
/// no callsite interest is cached without it; it writes only on threads that asked to capture.
mod logs {
    use std::cell::RefCell;
    use std::sync::Once;

    thread_local! {
        static CAPTURE: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
    }

    struct ThreadWriter;

    impl std::io::Write for ThreadWriter {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            CAPTURE.with(|c| {
                if let Some(buf) = c.borrow_mut().as_mut() {
                    buf.extend_from_slice(b);
                }
            });
            Ok(b.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    pub(super) fn init() {
        static INIT: Once = Once::new();
        INIT.call_once(|| {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(|| ThreadWriter)
                .with_ansi(false)
                .finish();
            let _ = tracing::subscriber::set_global_default(subscriber);
        });
    }

    /// Starts capturing this thread's log lines (a current-thread runtime keeps the test's
    /// futures on it).
    pub(super) fn capture() {
        init();
        CAPTURE.with(|c| *c.borrow_mut() = Some(Vec::new()));
    }

    pub(super) fn captured() -> String {
        let bytes = CAPTURE.with(|c| c.borrow().clone().unwrap_or_default());
        String::from_utf8(bytes).unwrap()
    }
}

fn within(d: Duration, lo: u64, hi: u64) -> bool {
    d >= ms(lo) && d <= ms(hi)
}

#[tokio::test(start_paused = true)]
async fn deadline_on_an_idempotent_call_retries_once_after_100ms() {
    let a = agent(example_a());
    let (result, seen, _) = run(&a, INV, KEY, None, &[Hang, Step::Ok]).await;
    assert_eq!(result.unwrap(), 2);
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0],
        Seen {
            at: ms(0),
            timeout: ms(44)
        }
    );
    // attempt 1 times out at 44 ms, then 100 ms stretched by 0..=20 %.
    let gap = seen[1].at - ms(44);
    assert!(within(gap, 100, 120), "backoff {gap:?}");
    assert_eq!(seen[1].timeout, ms(44));
    assert_eq!(a.retry_count(INV, Cause::Deadline), 1);

    // Two timeouts: exactly one retry, then the deadline error — inside the 208 ms budget.
    let (result, seen, took) = run(&a, INV, KEY, None, &[Hang, Hang, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::DeadlineExceeded { attempts: 2 })),
        "{result:?}"
    );
    assert_eq!(seen.len(), 2);
    assert!(took <= ms(208), "{took:?}");
    assert!(within(took, 44 + 100 + 44, 44 + 120 + 44), "{took:?}");
    assert_eq!(a.retry_count(INV, Cause::Deadline), 2);
    assert_eq!(a.retry_count(INV, Cause::Unavailable), 0);
}

#[tokio::test(start_paused = true)]
async fn unavailable_on_an_idempotent_call_retries_twice_after_100_then_300ms() {
    let a = agent(roomy());
    let (result, seen, _) = run(&a, INV, KEY, None, &[UNAV, UNAV, UNAV, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::Failed(Failure::Unavailable))),
        "{result:?}"
    );
    assert_eq!(seen.len(), 3, "at most 2 retries: {seen:?}");
    let gaps = [seen[1].at - seen[0].at, seen[2].at - seen[1].at];
    assert!(within(gaps[0], 100, 120), "{gaps:?}");
    assert!(within(gaps[1], 300, 360), "{gaps:?}");
    assert_eq!(a.retry_count(INV, Cause::Unavailable), 2);

    let (result, seen, _) = run(&a, INV, KEY, None, &[UNAV, UNAV, Step::Ok]).await;
    assert_eq!(result.unwrap(), 3);
    assert_eq!(seen.len(), 3);
    assert_eq!(a.retry_count(INV, Cause::Unavailable), 4);
}

#[tokio::test(start_paused = true)]
async fn business_and_other_errors_never_retry() {
    let a = agent(example_a());
    for failure in [Failure::Business, Failure::Other] {
        let (result, seen, took) = run(&a, INV, KEY, None, &[Fail(failure), Step::Ok]).await;
        match result {
            Err(CallError::Failed(f)) => assert_eq!(f, failure),
            other => panic!("{failure:?}: {other:?}"),
        }
        assert_eq!(seen.len(), 1);
        assert_eq!(took, Duration::ZERO);
    }
    assert!(a.retry_counts().is_empty());
}

#[tokio::test(start_paused = true)]
async fn non_idempotent_calls_never_retry() {
    let a = agent(example_a());
    // An idempotent segment, but the caller gave no key.
    let (result, seen, took) = run(&a, INV, None, None, &[Hang, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::DeadlineExceeded { attempts: 1 })),
        "{result:?}"
    );
    assert_eq!((seen.len(), took), (1, ms(44)));
    let (result, seen, _) = run(&a, INV, None, None, &[UNAV, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::Failed(Failure::Unavailable))),
        "{result:?}"
    );
    assert_eq!(seen.len(), 1);
    // A segment without idempotency, even with a key.
    let (result, seen, took) = run(&a, USER, KEY, None, &[Hang, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::DeadlineExceeded { attempts: 1 })),
        "{result:?}"
    );
    assert_eq!((seen.len(), took), (1, ms(9)));
    let (result, seen, _) = run(&a, USER, KEY, None, &[UNAV, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::Failed(Failure::Unavailable))),
        "{result:?}"
    );
    assert_eq!(seen.len(), 1);
    assert!(a.retry_counts().is_empty());
}

#[tokio::test(start_paused = true)]
async fn on_deadline_false_retries_on_unavailable_only() {
    // order->payment: idempotent (pay_no), retry.on_deadline=false; timeout = budget = 390.
    let a = agent(example_a());
    let (result, seen, took) = run(&a, PAY, KEY, None, &[Hang, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::DeadlineExceeded { attempts: 1 })),
        "{result:?}"
    );
    assert_eq!((seen.len(), took), (1, ms(390)));
    assert_eq!(a.retry_count(PAY, Cause::Deadline), 0);

    let (result, seen, _) = run(&a, PAY, KEY, None, &[UNAV, Step::Ok]).await;
    assert_eq!(result.unwrap(), 2);
    assert!(within(seen[1].at, 100, 120), "{seen:?}");
    // The retried attempt gets what is left of the 390 ms budget, not a fresh 390.
    assert_eq!(seen[1].timeout, ms(390) - seen[1].at);
    assert_eq!(a.retry_count(PAY, Cause::Unavailable), 1);
}

#[tokio::test(start_paused = true)]
async fn never_backs_off_past_the_segment_budget() {
    let a = agent(example_a());
    // inventory's budget is 208 ms: after the 100 ms retry, the 300 ms backoff does not fit,
    // so the call stops with the last error instead of sleeping.
    let (result, seen, took) = run(&a, INV, KEY, None, &[UNAV, UNAV, UNAV]).await;
    assert!(
        matches!(result, Err(CallError::Failed(Failure::Unavailable))),
        "{result:?}"
    );
    assert_eq!(seen.len(), 2);
    assert_eq!(took, seen[1].at, "no sleep after the last attempt");
    assert_eq!(a.retry_count(INV, Cause::Unavailable), 1);

    // Slow failures eat the budget: 290 ms each within roomy's 720 ms leaves no room for the
    // second retry (at ~700 ms only ~20 ms remain).
    let r = agent(roomy());
    let slow = SlowFail(290, Failure::Unavailable);
    let (result, seen, took) = run(&r, INV, KEY, None, &[slow, slow, slow]).await;
    assert!(
        matches!(result, Err(CallError::Failed(Failure::Unavailable))),
        "{result:?}"
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(took <= ms(720), "{took:?}");
    assert!(within(took, 290 + 100 + 290, 290 + 120 + 290), "{took:?}");

    // A retried attempt is cut to the budget's end. With inventory's budget set to 150 ms
    // (below 2 × 44 + 120), a downstream deadline error after 20 ms is retried at 120..=140 ms
    // with only 30..=10 ms left: the attempt gets that, not 44 ms.
    let mut tight = example_a();
    let inv = tight.segments.iter_mut().find(|s| s.id == INV).unwrap();
    inv.budget_ms = 150;
    let t = agent(tight);
    let early = SlowFail(20, Failure::Deadline);
    let (result, seen, took) = run(&t, INV, KEY, None, &[early, Hang]).await;
    assert!(
        matches!(result, Err(CallError::DeadlineExceeded { attempts: 2 })),
        "{result:?}"
    );
    assert_eq!(seen[1].timeout, ms(150) - seen[1].at);
    assert!(seen[1].timeout < ms(44), "{seen:?}");
    assert_eq!(took, ms(150));
}

#[tokio::test(start_paused = true)]
async fn never_runs_past_the_inherited_deadline() {
    let a = agent(example_a());
    // 30 ms inherited: the first attempt's timeout is cut from 44 to 30.
    let (result, seen, took) = run(&a, INV, KEY, Some(ms(30)), &[Hang, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::DeadlineExceeded { attempts: 1 })),
        "{result:?}"
    );
    assert_eq!(
        seen,
        [Seen {
            at: ms(0),
            timeout: ms(30)
        }]
    );
    assert_eq!(took, ms(30));

    // 120 ms inherited: after the 44 ms timeout only 76 ms remain, less than the 100 ms
    // backoff — stop at once instead of sleeping.
    let (result, seen, took) = run(&a, INV, KEY, Some(ms(120)), &[Hang, Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::DeadlineExceeded { attempts: 1 })),
        "{result:?}"
    );
    assert_eq!((seen.len(), took), (1, ms(44)));

    // 170 ms inherited: after the timeout at 44 ms, 126 ms remain — the ≤ 120 ms backoff fits,
    // but the retry (at 144..=164 ms) is cut to end exactly at the inherited deadline.
    let (result, seen, took) = run(&a, INV, KEY, Some(ms(170)), &[Hang, Hang]).await;
    assert!(
        matches!(result, Err(CallError::DeadlineExceeded { attempts: 2 })),
        "{result:?}"
    );
    assert_eq!(seen[1].timeout, ms(170) - seen[1].at);
    assert!(seen[1].timeout < ms(44), "{seen:?}");
    assert_eq!(took, ms(170));

    // An inherited deadline already past: not even one attempt.
    let (result, seen, _) = run(&a, INV, KEY, Some(Duration::ZERO), &[Step::Ok]).await;
    assert!(
        matches!(result, Err(CallError::BudgetExhausted)),
        "{result:?}"
    );
    assert!(seen.is_empty());
}

#[tokio::test(start_paused = true)]
async fn unknown_segments_are_errors() {
    let a = agent(example_a());
    let (result, seen, _) = run(&a, "order->nowhere", KEY, None, &[Step::Ok]).await;
    assert!(matches!(result, Err(CallError::UnknownSegment(ref s)) if s == "order->nowhere"));
    assert!(seen.is_empty());
}

#[tokio::test(start_paused = true)]
async fn retries_are_logged_with_their_number_and_cause() {
    logs::capture();
    let a = agent(roomy());
    let (result, _, _) = run(&a, INV, KEY, None, &[Hang, UNAV, Step::Ok]).await;
    assert_eq!(result.unwrap(), 3);
    let out = logs::captured();
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("retrying")).collect();
    assert_eq!(lines.len(), 2, "{out}");
    for (line, n, cause) in [(lines[0], 1, "deadline"), (lines[1], 2, "unavailable")] {
        assert!(line.contains(&format!("retry={n}")), "{line}");
        assert!(line.contains(&format!("cause=\"{cause}\"")), "{line}");
        assert!(line.contains("segment=order->inventory"), "{line}");
    }
    assert_eq!(a.retry_count(INV, Cause::Deadline), 1);
    assert_eq!(a.retry_count(INV, Cause::Unavailable), 1);
    assert_eq!(
        a.retry_counts(),
        [
            ((INV.to_owned(), Cause::Deadline), 1),
            ((INV.to_owned(), Cause::Unavailable), 1)
        ]
        .into_iter()
        .collect()
    );
}

#[tokio::test(start_paused = true)]
async fn deadline_is_the_earlier_of_own_budget_and_inherited() {
    let a = agent(example_a());
    let now = Instant::now();
    assert_eq!(a.budget(INV), Some(ms(208)));
    assert_eq!(a.deadline(INV, None), Some(now + ms(208)));
    assert_eq!(a.deadline(INV, Some(now + ms(100))), Some(now + ms(100)));
    assert_eq!(a.deadline(INV, Some(now + ms(500))), Some(now + ms(208)));
    assert_eq!(a.deadline(PAY, Some(now + ms(500))), Some(now + ms(390)));
    assert_eq!(a.deadline(USER, None), Some(now + ms(9)));
    assert_eq!(a.deadline("order->nowhere", None), None);
    tokio::time::advance(ms(50)).await;
    assert_eq!(a.deadline(INV, None), Some(now + ms(258)));
}

#[test]
fn grpc_status_codes_classify() {
    use tonic::{Code, Status};
    let check = |code: Code, expect: Failure| {
        assert_eq!(Status::new(code, "x").classify(), expect, "{code:?}");
    };
    check(Code::DeadlineExceeded, Failure::Deadline);
    check(Code::Unavailable, Failure::Unavailable);
    for code in [
        Code::InvalidArgument,
        Code::NotFound,
        Code::AlreadyExists,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
    ] {
        check(code, Failure::Business);
    }
    for code in [
        Code::Cancelled,
        Code::Unknown,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::Unimplemented,
        Code::Internal,
        Code::DataLoss,
        Code::Unauthenticated,
    ] {
        check(code, Failure::Other);
    }
    // A nested call's error classifies like its cause.
    assert_eq!(
        CallError::<Status>::DeadlineExceeded { attempts: 1 }.classify(),
        Failure::Deadline
    );
    assert_eq!(
        CallError::Failed(Status::unavailable("down")).classify(),
        Failure::Unavailable
    );
}

#[test]
fn a_static_agent_refuses_an_inverted_snapshot() {
    let err = Agent::from_snapshot(Snapshot::from_chains([crate::test_support::example_b()]))
        .unwrap_err();
    assert!(
        matches!(err, crate::AgentError::Refused { ref segment, .. } if segment == "gateway->order"),
        "{err}"
    );
}
