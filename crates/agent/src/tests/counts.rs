//! The counts of SPEC §8 from real `Agent::call` runs on tokio's paused clock: every outcome,
//! exact totals under concurrency, the latency histogram, and the `metrics` facade.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};

use crate::test_support::{example_a, roomy};
use crate::window::{decode, Window};
use crate::{Agent, CallError, Failure, Outcome, Snapshot};

const INV: &str = "order->inventory";
const PAY: &str = "order->payment";
const USER: &str = "order->user";
const KEY: Option<&str> = Some("order-42");

/// What the fake downstream does on one attempt.
#[derive(Debug, Clone, Copy)]
enum Step {
    Ok,
    /// Answers after so many milliseconds.
    SlowOk(u64),
    Fail(Failure),
    /// Never answers (the attempt times out).
    Hang,
}
use Step::{Fail, Hang, SlowOk};

const UNAV: Step = Fail(Failure::Unavailable);

/// One call of `segment` following `script` (attempts past its end succeed).
async fn call(
    agent: &Agent,
    segment: &str,
    key: Option<&str>,
    inherited: Option<Duration>,
    script: &[Step],
) -> Result<u32, CallError<Failure>> {
    let inherited = inherited.map(|d| tokio::time::Instant::now() + d);
    agent
        .call_within(segment, key, inherited, |attempt| {
            let step = script
                .get(attempt.number as usize - 1)
                .copied()
                .unwrap_or(Step::Ok);
            async move {
                match step {
                    Step::Ok => Ok(attempt.number),
                    SlowOk(ms) => {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok(attempt.number)
                    }
                    Fail(f) => Err(f),
                    Hang => {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok(attempt.number)
                    }
                }
            }
        })
        .await
}

/// Every window taken, by segment.
fn by_segment(windows: Vec<Window>) -> BTreeMap<String, Window> {
    windows
        .into_iter()
        .map(|w| (w.segment.clone(), w))
        .collect()
}

/// Outcome counts in [`Outcome::ALL`] order from (outcome, count) pairs.
fn outcomes(pairs: &[(Outcome, u64)]) -> [u64; 6] {
    let mut out = [0; 6];
    for (o, n) in pairs {
        out[o.index()] += n;
    }
    out
}

/// The per-window identities a control plane may rely on.
fn check_consistent(w: &Window) {
    let exhausted = w.outcomes[Outcome::BudgetExhausted.index()];
    assert_eq!(w.calls, w.outcomes.iter().sum::<u64>(), "{w:?}");
    assert_eq!(
        w.attempts,
        w.calls - exhausted + w.retries.iter().sum::<u64>(),
        "{w:?}"
    );
    assert_eq!(w.latency.len(), w.outcomes[Outcome::Ok.index()], "{w:?}");
}

#[tokio::test(start_paused = true)]
async fn every_outcome_is_counted_from_real_calls() {
    use Outcome as O;
    let a = Agent::from_snapshot(Snapshot::from_chains([example_a()])).unwrap();
    // inventory: idempotent, 44 ms timeout, 208 ms budget, both retry rules.
    assert!(call(&a, INV, KEY, None, &[Hang, SlowOk(30)]).await.is_ok());
    assert!(call(&a, INV, KEY, None, &[SlowOk(12)]).await.is_ok());
    for f in [Failure::Business, Failure::Other] {
        assert!(call(&a, INV, KEY, None, &[Fail(f)]).await.is_err());
    }
    // No key on an idempotent segment with a rule: the retry is refused.
    assert!(call(&a, INV, None, None, &[Hang]).await.is_err());
    assert!(call(&a, INV, None, None, &[UNAV]).await.is_err());
    // Retries used up, or the next backoff (300 ms) does not fit the 208 ms budget.
    assert!(call(&a, INV, KEY, None, &[Hang, Hang]).await.is_err());
    assert!(call(&a, INV, KEY, None, &[UNAV, UNAV, UNAV]).await.is_err());
    // The inherited deadline has passed: no attempt at all.
    let r = call(&a, INV, KEY, Some(Duration::ZERO), &[Step::Ok]).await;
    assert!(matches!(r, Err(CallError::BudgetExhausted)), "{r:?}");
    // user is not idempotent: a missing key refuses nothing.
    assert!(call(&a, USER, None, None, &[Hang]).await.is_err());
    assert!(call(&a, USER, KEY, None, &[UNAV]).await.is_err());
    // payment has no deadline rule: a timeout without a key is a plain deadline_exceeded.
    assert!(call(&a, PAY, None, None, &[Hang]).await.is_err());
    assert!(call(&a, PAY, None, None, &[UNAV]).await.is_err());
    // Unknown segments are not counted.
    assert!(call(&a, "order->nowhere", KEY, None, &[]).await.is_err());

    let windows = by_segment(a.take_windows());
    assert_eq!(
        windows.keys().collect::<Vec<_>>(),
        [INV, PAY, USER],
        "only segments with calls"
    );
    let inv = &windows[INV];
    assert_eq!(inv.chain, "checkout");
    assert_eq!(
        (inv.calls, inv.attempts),
        (9, 2 + 1 + 1 + 1 + 1 + 1 + 2 + 2)
    );
    assert_eq!(inv.retries, [2, 1], "deadline, unavailable");
    assert_eq!(
        inv.outcomes,
        outcomes(&[
            (O::Ok, 2),
            (O::BusinessError, 2),
            (O::RetryRefusedNoKey, 2),
            (O::DeadlineExceeded, 1),
            (O::Unavailable, 1),
            (O::BudgetExhausted, 1),
        ])
    );
    // Only successful attempts, timed exactly on the paused clock.
    assert_eq!(inv.latency.len(), 2);
    assert_eq!(inv.latency.min(), 12_000);
    assert!(inv.latency.equivalent(inv.latency.max(), 30_000));

    let user = &windows[USER];
    assert_eq!((user.calls, user.attempts, user.retries), (2, 2, [0, 0]));
    assert_eq!(
        user.outcomes,
        outcomes(&[(O::DeadlineExceeded, 1), (O::Unavailable, 1)])
    );
    let pay = &windows[PAY];
    assert_eq!((pay.calls, pay.attempts), (2, 2));
    assert_eq!(
        pay.outcomes,
        outcomes(&[(O::DeadlineExceeded, 1), (O::RetryRefusedNoKey, 1)])
    );
    for w in windows.values() {
        check_consistent(w);
    }

    // The control plane's kill rate and key coverage for inventory, from these counts.
    let kill =
        (inv.retries[0] + inv.outcomes[O::DeadlineExceeded.index()]) as f64 / inv.attempts as f64;
    assert!((kill - 3.0 / 11.0).abs() < 1e-9, "{kill}");
    let refused = inv.outcomes[O::RetryRefusedNoKey.index()] as f64;
    let coverage = 1.0 - refused / (inv.retries.iter().sum::<u64>() as f64 + refused);
    assert!((coverage - 0.6).abs() < 1e-9, "{coverage}");

    assert!(a.take_windows().is_empty(), "a take starts a new window");
}

#[tokio::test(start_paused = true)]
async fn the_latency_histogram_decodes_with_its_count_and_percentiles() {
    let a = Agent::from_snapshot(Snapshot::from_chains([roomy()])).unwrap();
    // 1..=100 ms, ten calls each.
    for ms in 1..=100 {
        for _ in 0..10 {
            assert!(call(&a, INV, KEY, None, &[SlowOk(ms)]).await.is_ok());
        }
    }
    let wire = by_segment(a.take_windows())[INV].to_proto();
    let h = decode(&wire.latency_hdr).unwrap();
    assert_eq!(h.len(), 1000);
    for (q, ms) in [(0.5, 50), (0.9, 90), (0.99, 99), (1.0, 100)] {
        let got = h.value_at_quantile(q);
        assert!(h.equivalent(got, ms * 1000), "p{q}: {got} µs, not {ms} ms");
    }
    assert_eq!(h.min(), 1000);
}

#[test]
fn counts_are_exact_under_concurrency() {
    const THREADS: u64 = 4;
    const TASKS: u64 = 25;
    const CALLS: u64 = 40;
    let agent = Agent::from_snapshot(Snapshot::from_chains([roomy()])).unwrap();
    let done = Arc::new(AtomicBool::new(false));

    // A reporter taking windows all along: nothing may be lost or counted twice.
    let taker = {
        let (agent, done) = (agent.clone(), done.clone());
        std::thread::spawn(move || {
            let mut taken = Vec::new();
            while !done.load(Ordering::SeqCst) {
                taken.extend(agent.take_windows());
                std::thread::sleep(Duration::from_micros(200));
            }
            taken
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let agent = agent.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .start_paused(true)
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let tasks: Vec<_> = (0..TASKS)
                        .map(|_| {
                            let agent = agent.clone();
                            tokio::spawn(async move {
                                for i in 0..CALLS {
                                    let _ = match i % 4 {
                                        0 => call(&agent, INV, KEY, None, &[SlowOk(5)]).await,
                                        1 => call(&agent, INV, KEY, None, &[Hang]).await,
                                        2 => call(&agent, INV, None, None, &[UNAV]).await,
                                        _ => {
                                            let f = Fail(Failure::Business);
                                            call(&agent, USER, KEY, None, &[f]).await
                                        }
                                    };
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                });
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let mut taken = taker.join().unwrap();
    taken.extend(agent.take_windows());

    // Per segment: calls, attempts, retries, outcomes, latency samples.
    type Totals = (u64, u64, [u64; 2], [u64; 6], u64);
    let mut totals: BTreeMap<String, Totals> = BTreeMap::new();
    for w in &taken {
        check_consistent(w);
        let t = totals.entry(w.segment.clone()).or_default();
        t.0 += w.calls;
        t.1 += w.attempts;
        for i in 0..2 {
            t.2[i] += w.retries[i];
        }
        for i in 0..6 {
            t.3[i] += w.outcomes[i];
        }
        t.4 += w.latency.len();
    }
    let quarter = THREADS * TASKS * CALLS / 4;
    assert_eq!(
        totals[INV],
        (
            3 * quarter,
            4 * quarter,
            [quarter, 0],
            outcomes(&[
                (Outcome::Ok, 2 * quarter),
                (Outcome::RetryRefusedNoKey, quarter)
            ]),
            2 * quarter,
        )
    );
    assert_eq!(
        totals[USER],
        (
            quarter,
            quarter,
            [0, 0],
            outcomes(&[(Outcome::BusinessError, quarter)]),
            0
        )
    );
}

/// A `metrics` recorder keeping every series in memory, by `name{label=value,…}`.
#[derive(Default)]
struct Recorded {
    counters: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<BTreeMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

fn series(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl metrics::Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(series(key)).or_default().clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(series(key)).or_default().clone())
    }
}

impl Recorded {
    fn counter(&self, series: &str) -> u64 {
        self.counters.lock().unwrap()[series].load(Ordering::SeqCst)
    }

    fn samples(&self, series: &str) -> Vec<f64> {
        self.histograms.lock().unwrap()[series]
            .0
            .lock()
            .unwrap()
            .clone()
    }
}

#[tokio::test(start_paused = true)]
async fn the_metrics_facade_sees_the_counters() {
    let recorder = Recorded::default();
    // Series are registered when the agent makes its cells, with the recorder in force then.
    let a = metrics::with_local_recorder(&recorder, || {
        Agent::from_snapshot(Snapshot::from_chains([example_a()])).unwrap()
    });
    assert!(call(&a, INV, KEY, None, &[Hang, SlowOk(30)]).await.is_ok());
    assert!(call(&a, INV, KEY, None, &[UNAV, SlowOk(20)]).await.is_ok());
    assert!(call(&a, INV, None, None, &[Hang]).await.is_err());
    assert!(call(&a, USER, KEY, None, &[Fail(Failure::Business)])
        .await
        .is_err());

    let calls = |segment: &str, outcome: &str| {
        recorder.counter(&format!(
            "budget_agent_calls_total{{outcome={outcome},segment={segment}}}"
        ))
    };
    assert_eq!(calls(INV, "ok"), 2);
    assert_eq!(calls(INV, "retry_refused_no_key"), 1);
    assert_eq!(calls(INV, "deadline_exceeded"), 0);
    assert_eq!(calls(USER, "business_error"), 1);
    for (cause, n) in [("deadline", 1), ("unavailable", 1)] {
        let retries = recorder.counter(&format!(
            "budget_agent_retries_total{{cause={cause},segment={INV}}}"
        ));
        assert_eq!(retries, n, "{cause}");
    }
    let durations = recorder.samples(&format!(
        "budget_agent_attempt_duration_seconds{{segment={INV}}}"
    ));
    assert_eq!(durations, [0.030, 0.020]);
    // Every segment of the config has its series from the start (0 until its first call).
    assert_eq!(calls(PAY, "ok"), 0);
}

/// A retry counts when its attempt starts: when the backoff wakes after the call's budget
/// ended (here the thread is blocked across it), no retry was made and none is counted.
#[tokio::test(flavor = "current_thread")]
async fn a_retry_whose_backoff_ends_past_the_budget_is_not_counted() {
    let a = Agent::from_snapshot(Snapshot::from_chains([example_a()])).unwrap();
    // inventory: 44 ms timeout, 208 ms budget; the thread is blocked from 60 to 260 ms, so
    // the backoff decided at 44 ms wakes after the budget ended.
    tokio::spawn(async {
        tokio::time::sleep(Duration::from_millis(60)).await;
        std::thread::sleep(Duration::from_millis(200));
    });
    let r = call(&a, INV, KEY, None, &[Hang, Hang, Hang]).await;
    assert!(r.is_err());
    let w = by_segment(a.take_windows()).remove(INV).unwrap();
    assert_eq!(w.attempts, 1, "{w:?}");
    assert_eq!(w.retries.iter().sum::<u64>(), 0, "{w:?}");
    check_consistent(&w);
    assert_eq!(a.retry_count(INV, crate::Cause::Deadline), 0);
}
