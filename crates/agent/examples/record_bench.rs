//! What counting a call costs (SPEC §8), and what the counting state weighs.
//!
//! ```text
//! cargo run --release -p budget-agent --example record_bench
//! ```
//!
//! - Recording cost: the work `Agent::call` adds when a call ends (find the segment's cell,
//!   count calls / attempts / retries / outcome, record the latency in the histogram, bump the
//!   metric handles), measured over batches of calls; p50 and p99 of the per-call cost of a
//!   batch, with 1 and 2 threads, all threads on one segment (they share its cell) or spread
//!   over 20; without a `metrics` recorder, then with a simple atomic one installed.
//! - For scale: a whole `Agent::call` of an operation that is ready at once.
//! - Memory: the counting state for N segments, with latencies up to 1 s in every shard, then
//!   with the one-hour clamp reached in every shard (the bound).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use budget_agent::bench::CountingBench;
use budget_agent::{Agent, Failure, Snapshot};
use budget_core::example::{checkout_live, CHECKOUT_TOPOLOGY};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};

const BATCH: usize = 100;
const BATCHES: usize = 20_000;

fn main() {
    println!("recording cost per call (ns), batches of {BATCH}, {BATCHES} batches per thread");
    println!(
        "{:<14} {:>8} {:>9} {:>7} {:>7}",
        "recorder", "threads", "segments", "p50", "p99"
    );
    run_all("none");
    metrics::set_global_recorder(AtomicRecorder::default()).expect("first recorder");
    run_all("atomic");

    whole_call();

    println!();
    println!(
        "counting state memory (shards per cell: {} on this machine)",
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 4)
    );
    println!(
        "{:>9} {:>16} {:>16}",
        "segments", "latencies ≤1 s", "clamp reached"
    );
    for n in [1, 10, 100, 1000] {
        let bench = CountingBench::new(n);
        fill(&bench, n, Duration::from_millis(999));
        let typical = bench.footprint().1;
        fill(&bench, n, Duration::from_secs(7200));
        let bound = bench.footprint().1;
        println!("{n:>9} {:>16} {:>16}", kib(typical), kib(bound));
    }
}

/// Records a `latency` attempt on every segment from enough threads to reach every shard.
fn fill(bench: &CountingBench, segments: usize, latency: Duration) {
    let threads = std::thread::available_parallelism().map_or(1, usize::from) * 2;
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for i in 0..segments {
                    bench.record_ok(i, latency);
                }
            });
        }
    });
}

fn kib(bytes: usize) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

fn run_all(recorder: &str) {
    for threads in [1, 2] {
        for segments in [1, 20] {
            let (p50, p99) = recording_cost(threads, segments);
            println!("{recorder:<14} {threads:>8} {segments:>9} {p50:>7.1} {p99:>7.1}");
        }
    }
}

/// p50 and p99 over batches of the per-call cost, every thread recording `BATCHES` batches.
fn recording_cost(threads: usize, segments: usize) -> (f64, f64) {
    let bench = CountingBench::new(segments);
    let mut per_call: Vec<f64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let bench = &bench;
                s.spawn(move || {
                    let mut out = Vec::with_capacity(BATCHES);
                    // Latencies spread over 0.1..=200 ms, as a real segment's would be.
                    let mut x = 0x9e37_79b9_u64 + t as u64;
                    for _ in 0..BATCHES {
                        let start = Instant::now();
                        for i in 0..BATCH {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let latency = Duration::from_micros(100 + x % 200_000);
                            if i % 16 == 0 {
                                bench.record_timeout(black_box(t + i));
                            } else {
                                bench.record_ok(black_box(t + i), latency);
                            }
                        }
                        out.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    per_call.sort_by(f64::total_cmp);
    let at = |q: f64| per_call[((per_call.len() as f64 * q) as usize).min(per_call.len() - 1)];
    (at(0.50), at(0.99))
}

/// A whole `Agent::call` of a ready operation (snapshot, deadline, timer, recording).
fn whole_call() {
    let chain = checkout_live(CHECKOUT_TOPOLOGY, 7).expect("the SPEC example computes");
    let agent = Agent::from_snapshot(Snapshot::from_chains([chain])).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut per_call: Vec<f64> = rt.block_on(async {
        let mut out = Vec::with_capacity(BATCHES / 4);
        for _ in 0..BATCHES / 4 {
            let start = Instant::now();
            for _ in 0..BATCH {
                let r = agent
                    .call("order->inventory", Some("k"), |a| async move {
                        Ok::<_, Failure>(a.number)
                    })
                    .await;
                black_box(r.ok());
            }
            out.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
        }
        out
    });
    per_call.sort_by(f64::total_cmp);
    let n = per_call.len();
    println!(
        "whole Agent::call of a ready op, 1 thread: p50 {:.1} ns, p99 {:.1} ns",
        per_call[n / 2],
        per_call[n * 99 / 100]
    );
}

/// A recorder as light as an exporter can be: one shared atomic per counter series, and a
/// count + sum per histogram series.
#[derive(Default)]
struct AtomicRecorder {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<SumHistogram>>>,
}

#[derive(Default)]
struct SumHistogram {
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl metrics::HistogramFn for SumHistogram {
    fn record(&self, value: f64) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add((value * 1e9) as u64, Ordering::Relaxed);
    }
}

impl metrics::Recorder for AtomicRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(format!("{key:?}")).or_default().clone())
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(format!("{key:?}")).or_default().clone())
    }
}
