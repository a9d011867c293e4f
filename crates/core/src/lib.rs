//! budget-core: the pure domain of budgetd.
//!
//! Everything here is synchronous and deterministic: callers pass the topology, the run and
//! (where it matters) the time; nothing here performs I/O. The server and the agent both call
//! these functions, so every rule of the budget discipline has exactly one implementation.
//!
//! - [`topology`]: the call tree of a chain and its structural validation;
//! - [`run`]: one load test's percentiles per segment;
//! - [`distribution`]: a run's latency distribution per segment and what a timeout kills;
//! - [`rules`]: R-margin, R-retry and R-budget, as a baseline derives them;
//! - [`retry`]: R-retry and R-budget as an agent applies them to a call (decisions, jitter,
//!   attempt timeout, deadline), and [`outcome`]: how the call ended (SPEC §8);
//! - [`checks`]: the findings (`inversion`, `breaker_window`, `idempotency_ttl`, `entry_headroom`),
//!   and [`quality`]: the run's data-quality warnings (`sample_size`, `failure_rate`,
//!   `implausible_latency`); `timeout_kill_rate` is [`distribution`]'s;
//! - [`baseline`]: computing a baseline document from a topology and a run;
//! - [`drift`]: R-drift, comparing a run with an approved baseline;
//! - [`intake`]: whether a run opens a draft (first run, no approved baseline, drift), and the draft;
//! - [`lifecycle`]: approve / reject / rollback eligibility, four eyes by owner;
//! - [`capacity`]: every parent's need against its time, and how each budget is made;
//! - [`diff`]: comparing two baselines segment by segment;
//! - [`feedback`]: production figures from agents' reports (SPEC §8) and the alert rules;
//! - [`canary`]: which agents a canary rollout selects and when it is promoted or aborted (SPEC §9);
//! - [`conformance`]: the vectors every client library runs (SPEC §10), computed by the above.
#![forbid(unsafe_code)]

pub mod baseline;
pub mod canary;
pub mod capacity;
pub mod checks;
pub mod conformance;
pub mod diff;
pub mod distribution;
pub mod drift;
pub mod duration;
pub mod example;
pub mod feedback;
pub mod intake;
pub mod lifecycle;
pub mod live;
pub mod outcome;
pub mod quality;
pub mod retry;
pub mod rules;
pub mod run;
pub mod topology;

#[cfg(test)]
mod proptests;

pub use baseline::{compute, BaselineSegment, Computation, ComputeError};
pub use checks::{Finding, FindingKind, Severity};
pub use distribution::{Cdf, Cdfs, Distribution};
pub use duration::HumanDuration;
pub use run::{RunData, SegmentStats};
pub use topology::{Segment, SegmentClass, Topology, TopologyError};

/// Integer ceiling division for non-negative numbers.
pub(crate) fn ceil_div(n: u64, d: u64) -> u64 {
    n.div_ceil(d)
}

/// Milliseconds (as measured, possibly fractional) to whole microseconds, rounded to nearest.
///
/// Callers validate that `ms` is finite and non-negative first.
pub fn ms_to_us(ms: f64) -> u64 {
    (ms * 1000.0).round() as u64
}

/// Microseconds back to milliseconds for display (exact for every value `ms_to_us` produced).
pub fn us_to_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}
