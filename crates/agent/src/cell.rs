//! One segment's counts for the window in progress ([`Cell`]), and its Prometheus series.
//!
//! The hot path: [`Cell::record`] adds one finished call. The counts are striped: a cell has
//! one shard per core (at most 4: a shard is held for some 30 ns per call, so even a busy
//! segment rarely has two threads meet on one, and each shard's histogram costs memory —
//! about 45 KiB for latencies up to 1 s, 94 KiB at the one-hour clamp), and a thread always
//! writes to the same shard. A shard is a `Mutex` over plain counters and a latency histogram: one
//! uncontended lock per call (two atomic operations, fewer than bumping four shared atomic
//! counters), and every count of a call lands in the same window, so a window always has
//! `calls` = Σ `outcomes` and `attempts` = `calls` − `budget_exhausted` + Σ `retries`.
//! [`Cell::take`] drains every shard into a [`Window`] once per window.
//!
//! The metric handles (`metrics` facade) are registered once, when the cell is made, so a call
//! does no registry lookup.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::outcome::{Outcome, CAUSES};
use crate::window::{latency_us, new_histogram, Window};

/// What one finished call did, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) attempts: u32,
    /// Retries made, by cause (order of `outcome::CAUSES`).
    pub(crate) retries: [u32; 2],
    pub(crate) outcome: Outcome,
    /// The successful attempt's duration, when one succeeded.
    pub(crate) latency: Option<Duration>,
}

impl Record {
    /// A call that ended in `outcome` at its first attempt, without retries; `latency` is the
    /// attempt's duration when it succeeded.
    pub(crate) fn first_attempt(outcome: Outcome, latency: Option<Duration>) -> Self {
        Self {
            attempts: 1,
            retries: [0, 0],
            outcome,
            latency,
        }
    }
}

/// The counts of one shard since the last take.
struct Tally {
    calls: u64,
    attempts: u64,
    retries: [u64; 2],
    outcomes: [u64; 6],
    /// Latencies of successful attempts, microseconds. `u32` counts halve the memory; a
    /// bucket would need 4 billion samples in one window to saturate (it then stops counting
    /// rather than wrap).
    latency: Histogram<u32>,
}

/// A shard on its own cache lines, so two threads writing neighbouring shards do not slow
/// each other down (false sharing).
#[repr(align(128))]
struct Shard(Mutex<Tally>);

/// The segment's Prometheus series: `budget_agent_calls_total{segment,outcome}`,
/// `budget_agent_retries_total{segment,cause}`, `budget_agent_attempt_duration_seconds{segment}`.
struct Handles {
    calls: [metrics::Counter; 6],
    retries: [metrics::Counter; 2],
    duration: metrics::Histogram,
}

/// One segment (of one chain): its counts for the window in progress.
pub(crate) struct Cell {
    pub(crate) chain: String,
    pub(crate) segment: String,
    shards: Box<[Shard]>,
    metrics: Handles,
}

impl Cell {
    /// An empty cell; registers its series with the `metrics` recorder in force now.
    pub(crate) fn new(chain: &str, segment: &str) -> Self {
        let shards = (0..shard_count())
            .map(|_| {
                Shard(Mutex::new(Tally {
                    calls: 0,
                    attempts: 0,
                    retries: [0; 2],
                    outcomes: [0; 6],
                    latency: new_histogram(),
                }))
            })
            .collect();
        let label = segment.to_owned();
        let metrics = Handles {
            calls: Outcome::ALL.map(
                |o| metrics::counter!(CALLS, "segment" => label.clone(), "outcome" => o.as_str()),
            ),
            retries: CAUSES.map(
                |c| metrics::counter!(RETRIES, "segment" => label.clone(), "cause" => c.as_str()),
            ),
            duration: metrics::histogram!(DURATION, "segment" => label),
        };
        Self {
            chain: chain.to_owned(),
            segment: segment.to_owned(),
            shards,
            metrics,
        }
    }

    /// Adds one finished call. Never blocks on anything but this thread's shard.
    pub(crate) fn record(&self, call: &Record) {
        let shard = &self.shards[shard_index() % self.shards.len()];
        {
            let mut t = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
            t.calls += 1;
            t.attempts += u64::from(call.attempts);
            for (slot, n) in t.retries.iter_mut().zip(call.retries) {
                *slot += u64::from(n);
            }
            t.outcomes[call.outcome.index()] += 1;
            if let Some(latency) = call.latency {
                let us = latency_us(latency);
                // Grows the histogram up to the one-hour clamp; cannot fail below it.
                if t.latency.record(us).is_err() {
                    t.latency.saturating_record(us);
                }
            }
        }
        self.metrics.calls[call.outcome.index()].increment(1);
        for (counter, n) in self.metrics.retries.iter().zip(call.retries) {
            if n > 0 {
                counter.increment(u64::from(n));
            }
        }
        if let Some(latency) = call.latency {
            self.metrics.duration.record(latency.as_secs_f64());
        }
    }

    /// Drains every shard into a window spanning `[start_ms, end_ms]`; `None` when no call
    /// was recorded since the last take.
    pub(crate) fn take(&self, start_ms: i64, end_ms: i64) -> Option<Window> {
        let mut w = Window {
            chain: self.chain.clone(),
            segment: self.segment.clone(),
            start_ms,
            end_ms,
            calls: 0,
            attempts: 0,
            retries: [0; 2],
            outcomes: [0; 6],
            latency: new_histogram(),
        };
        for shard in self.shards.iter() {
            let mut t = shard.0.lock().unwrap_or_else(PoisonError::into_inner);
            if t.calls == 0 {
                continue;
            }
            w.calls += std::mem::take(&mut t.calls);
            w.attempts += std::mem::take(&mut t.attempts);
            for (sum, n) in w.retries.iter_mut().zip(std::mem::take(&mut t.retries)) {
                *sum += n;
            }
            for (sum, n) in w.outcomes.iter_mut().zip(std::mem::take(&mut t.outcomes)) {
                *sum += n;
            }
            for v in t.latency.iter_recorded() {
                // Same precision, so the value lands in the same bucket; cannot fail.
                let _ = w
                    .latency
                    .record_n(v.value_iterated_to(), u64::from(v.count_at_value()));
            }
            // Keeps the allocation: the next window records without growing again.
            t.latency.reset();
        }
        (w.calls > 0).then_some(w)
    }

    /// Bytes this cell holds (shards, histograms, names), for memory figures.
    pub(crate) fn memory_bytes(&self) -> usize {
        let histograms: usize = self
            .shards
            .iter()
            .map(|s| {
                let t = s.0.lock().unwrap_or_else(PoisonError::into_inner);
                t.latency.distinct_values() * std::mem::size_of::<u32>()
            })
            .sum();
        std::mem::size_of::<Self>()
            + self.shards.len() * std::mem::size_of::<Shard>()
            + histograms
            + self.chain.capacity()
            + self.segment.capacity()
    }
}

const CALLS: &str = "budget_agent_calls_total";
const RETRIES: &str = "budget_agent_retries_total";
const DURATION: &str = "budget_agent_attempt_duration_seconds";

/// Describes the agent's series to the `metrics` recorder in force (help text and units).
pub(crate) fn describe_metrics() {
    metrics::describe_counter!(
        CALLS,
        "Calls made through budget-agent, by segment and outcome"
    );
    metrics::describe_counter!(
        RETRIES,
        "Retries made by budget-agent under R-retry, by segment and cause"
    );
    metrics::describe_histogram!(
        DURATION,
        metrics::Unit::Seconds,
        "Duration of successful attempts, by segment"
    );
}

/// Shards per cell: the number of cores, at most 4.
fn shard_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
            .clamp(1, 4)
    })
}

/// This thread's shard number (before the modulo): threads are numbered in the order they
/// first record, so the threads of a runtime spread evenly over the shards.
fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static INDEX: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    INDEX.with(|i| *i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(latency_ms: u64) -> Record {
        Record::first_attempt(Outcome::Ok, Some(Duration::from_millis(latency_ms)))
    }

    #[test]
    fn take_drains_the_window_and_starts_a_new_one() {
        let cell = Cell::new("checkout", "order->inventory");
        assert!(cell.take(0, 10).is_none(), "an empty window is not taken");
        cell.record(&ok(5));
        cell.record(&ok(7));
        cell.record(&Record {
            attempts: 3,
            retries: [1, 1],
            outcome: Outcome::Unavailable,
            latency: None,
        });
        let w = cell.take(0, 10_000).unwrap();
        assert_eq!(
            (w.chain.as_str(), w.segment.as_str()),
            ("checkout", "order->inventory")
        );
        assert_eq!((w.start_ms, w.end_ms), (0, 10_000));
        assert_eq!((w.calls, w.attempts, w.retries), (3, 5, [1, 1]));
        assert_eq!(w.outcomes, [2, 0, 1, 0, 0, 0]);
        assert_eq!(w.latency.len(), 2);
        assert_eq!(w.latency.max(), w.latency.highest_equivalent(7000));
        assert!(
            cell.take(10_000, 20_000).is_none(),
            "taking resets the counts"
        );
        cell.record(&ok(1));
        assert_eq!(cell.take(20_000, 30_000).unwrap().calls, 1);
    }

    #[test]
    fn latencies_are_clamped_and_memory_stays_bounded() {
        let cell = Cell::new("c", "a->b");
        cell.record(&ok(10));
        let small = cell.memory_bytes();
        cell.record(&Record {
            latency: Some(Duration::from_secs(100 * 3600)),
            ..ok(0)
        });
        let w = cell.take(0, 1).unwrap();
        assert_eq!(
            w.latency.max(),
            w.latency.highest_equivalent(crate::window::MAX_LATENCY_US)
        );
        let big = cell.memory_bytes();
        assert!(big > small, "{small} → {big}");
        // One shard's histogram up to an hour at 3 digits: 23 buckets × 1024 × 4 bytes.
        assert!(big <= small + 24 * 1024 * 4, "{small} → {big}");
    }
}
