//! Runtime feedback (SPEC §8): agents report what their calls did; budgetd merges the
//! reports into per-minute rollups, derives production figures, evaluates alert rules and
//! tells webhooks.
//!
//! - [`rollup`]: Report windows merged in memory and written as rollups by one group commit
//!   at a time (an agent is answered once its windows are durable);
//! - [`hdr`]: the agents' HdrHistograms, decoded within fixed bounds;
//! - [`production`]: a window's rollups added up per segment and compared with the live
//!   baseline;
//! - [`turns`]: the few Reports decoding their histograms at once, turns shared among agent
//!   tokens by the time they take;
//! - [`alerts`]: the rules, evaluated on any replica, each alert firing and resolving once;
//! - [`webhooks`]: the events, their HMAC signature and the delivery worker.

pub mod alerts;
pub mod hdr;
pub mod production;
mod repeaters;
pub mod rollup;
pub mod turns;
pub mod webhooks;

/// What the Report call needs on this server process.
pub struct Reports {
    pub rollups: rollup::Rollups,
    pub bindings: crate::service::feedback::Bindings,
    /// Turns at decoding and merging a Report's histograms ([`DECODING_PER_CORE`] per core),
    /// shared among agent tokens by the time they take: the others wait their turn holding
    /// their request only, not its decoded histograms (16 bytes per bucket, about 80 KB for a
    /// busy window).
    pub turns: turns::Turns,
}

/// Reports decoded at once per core: two, so one may wait on the store (a canary's labels)
/// while the other decodes.
pub const DECODING_PER_CORE: usize = 2;

impl Reports {
    pub fn new(rollups: rollup::Rollups) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            rollups,
            bindings: Default::default(),
            turns: turns::Turns::new(cores * DECODING_PER_CORE),
        }
    }
}
