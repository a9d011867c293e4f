//! Runtime feedback (SPEC §8): agents report what their calls did; budgetd merges the
//! reports into per-minute rollups, derives production figures, evaluates alert rules and
//! tells webhooks.
//!
//! - [`rollup`]: Report windows merged in memory and written as rollups by one group commit
//!   at a time (an agent is answered once its windows are durable);
//! - [`hdr`]: the agents' HdrHistograms, decoded within fixed bounds;
//! - [`production`]: a window's rollups added up per segment and compared with the live
//!   baseline;
//! - [`alerts`]: the rules, evaluated on any replica, each alert firing and resolving once;
//! - [`webhooks`]: the events, their HMAC signature and the delivery worker.

pub mod alerts;
pub mod hdr;
pub mod production;
pub mod rollup;
pub mod webhooks;

/// What the Report call needs on this server process.
pub struct Reports {
    pub rollups: rollup::Rollups,
    pub bindings: crate::service::feedback::Bindings,
    /// Serialises this process's rewrites of its canary health rows.
    pub canary: tokio::sync::Mutex<()>,
}
