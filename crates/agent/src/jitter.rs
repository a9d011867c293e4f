//! The one source of randomness for jitter. The pure rules ([`crate::policy`] for R-retry,
//! [`crate::backoff`] for reconnects) take a `pick(max)` argument; the running agent passes
//! [`random_pick`], tests pass fixed picks.

/// Uniform random pick in `0..=max`: the jitter source of the real agent.
pub(crate) fn random_pick(max: u64) -> u64 {
    use rand::Rng;
    rand::thread_rng().gen_range(0..=max)
}
