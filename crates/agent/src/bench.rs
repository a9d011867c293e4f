//! A handle on the counting hot path for `examples/record_bench.rs`. Not a stable API: hidden
//! from the docs, it may change with the counting code.

use std::time::Duration;

use crate::cell::Record;
use crate::counts::Counts;
use crate::outcome::Outcome;
use crate::snapshot::Snapshot;

/// The counting state of an agent with `segments` segments, recorded into exactly as
/// [`crate::Agent::call`] does when a call ends.
#[doc(hidden)]
pub struct CountingBench {
    counts: Counts,
    ids: Vec<String>,
}

#[doc(hidden)]
impl CountingBench {
    /// Cells for segments `bench->s0` … of chain `bench`, each with one call recorded.
    pub fn new(segments: usize) -> Self {
        let counts = Counts::new(&Snapshot::default());
        let ids: Vec<String> = (0..segments).map(|i| format!("bench->s{i}")).collect();
        let bench = Self { counts, ids };
        for i in 0..segments {
            bench.record_ok(i, Duration::from_micros(500));
        }
        bench
    }

    /// Records a call of segment `i` that succeeded at its first attempt after `latency`.
    pub fn record_ok(&self, i: usize, latency: Duration) {
        let call = Record::first_attempt(Outcome::Ok, Some(latency));
        self.counts
            .record("bench", &self.ids[i % self.ids.len()], &call);
    }

    /// Records a call of segment `i` that ended `deadline_exceeded` after one retry.
    pub fn record_timeout(&self, i: usize) {
        let call = Record {
            attempts: 2,
            retries: [1, 0],
            outcome: Outcome::DeadlineExceeded,
            latency: None,
        };
        self.counts
            .record("bench", &self.ids[i % self.ids.len()], &call);
    }

    /// Cells and the bytes the counting state holds.
    pub fn footprint(&self) -> (usize, usize) {
        self.counts.footprint()
    }
}
