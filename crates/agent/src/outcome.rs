//! How a call ended, as SPEC §8 counts it: [`Outcome`] and its rule are budget-core's
//! ([`budget_core::outcome`]), re-exported here; this module adds the agent's order of the
//! retry counters.

pub use budget_core::outcome::Outcome;

use crate::policy::Cause;

/// The retry causes in the order of the agent's arrays of counters (a call's retries in
/// `cell::Record`, a window's retries): deadline 0, unavailable 1.
pub(crate) const CAUSES: [Cause; 2] = [Cause::Deadline, Cause::Unavailable];
