//! Reconnect backoff of the watch stream (linkerd2-proxy's shape): exponential with full
//! jitter, reset after a healthy stream. Apart from [`crate::policy`] on purpose: R-retry
//! backs off a downstream call inside its budget; this backs off reconnecting to the control
//! plane, forever, with no budget. Pure: the jitter source is passed in.
//!
//! A replica tells its agents how long to spread their reconnects over
//! (`budget-reconnect-spread-ms`, in a Watch stream's headers and in the trailers of a stream it
//! ends because it stops): [`ReconnectBackoff::spread`] makes that the base of the ceilings,
//! so a fleet whose replica restarts comes back at the rate the replica asked for instead of
//! together.

use std::time::Duration;

/// Reconnect backoff of the watch stream: exponential (base doubling up to a cap) with full
/// jitter, i.e. each delay is uniform in `0..=min(cap, base × 2^n)`; a spread the replica
/// asked for takes the place of `base` when longer, and of `cap` when longer.
#[derive(Debug, Clone)]
pub struct ReconnectBackoff {
    base: Duration,
    cap: Duration,
    failures: u32,
    /// The spread asked for ([`Self::spread`]); zero when none.
    spread: Duration,
}

/// The response metadata in which a replica asks for a reconnect spread.
pub const SPREAD_KEY: &str = "budget-reconnect-spread-ms";

/// The longest spread taken from a replica: a larger value counts as this.
pub const MAX_SPREAD: Duration = Duration::from_secs(60);

/// The spread a `budget-reconnect-spread-ms` value asks for; `None` when it is not a whole
/// number of milliseconds.
pub fn parse_spread(value: &str) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms: u64 = value.parse().ok()?;
    Some(Duration::from_millis(ms).min(MAX_SPREAD))
}

impl ReconnectBackoff {
    /// 100 ms doubling to a 10 s cap.
    pub const BASE: Duration = Duration::from_millis(100);
    pub const CAP: Duration = Duration::from_secs(10);

    pub fn new(base: Duration, cap: Duration) -> Self {
        Self {
            base,
            cap,
            failures: 0,
            spread: Duration::ZERO,
        }
    }

    /// The ceiling of the next delay, before jitter: `min(cap, base × 2^n)`; with a spread
    /// asked for, the spread is the base and the cap is at least the spread.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        let spread = self.spread.min(MAX_SPREAD);
        self.base
            .max(spread)
            .saturating_mul(factor)
            .min(self.cap.max(spread))
    }

    /// The replica asked its agents to spread their reconnects over `over`: until the next
    /// healthy stream, the ceilings start from it and double. (Not held at `over`: agents
    /// retrying every `0..=over` while the replica is down would come back twice as fast as
    /// asked the moment it is up, as the time to each one's next try is most often short.)
    /// A longer spread than the one in force starts the doubling again; zero, or the same
    /// spread again, leaves the backoff as it is.
    pub fn spread(&mut self, over: Duration) {
        let over = over.min(MAX_SPREAD);
        if over > self.spread {
            self.spread = over;
            self.failures = 0;
        }
    }

    /// The next delay; `pick(max)` returns a value in `0..=max` (microseconds).
    pub fn next_delay(&mut self, pick: impl FnOnce(u64) -> u64) -> Duration {
        let max_us = u64::try_from(self.ceiling().as_micros()).unwrap_or(u64::MAX);
        self.failures = self.failures.saturating_add(1);
        Duration::from_micros(pick(max_us).min(max_us))
    }

    /// After a healthy stream: start again from the base, with no spread.
    pub fn reset(&mut self) {
        self.failures = 0;
        self.spread = Duration::ZERO;
    }
}

impl Default for ReconnectBackoff {
    fn default() -> Self {
        Self::new(Self::BASE, Self::CAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jitter::random_pick;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const NONE: fn(u64) -> u64 = |_| 0;
    const MAX: fn(u64) -> u64 = |m| m;

    #[test]
    fn reconnect_backoff_doubles_to_the_cap_with_full_jitter() {
        let mut b = ReconnectBackoff::default();
        let ceilings: Vec<u64> = (0..10)
            .map(|_| b.next_delay(MAX).as_millis() as u64)
            .collect();
        assert_eq!(
            ceilings,
            [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
        );
        assert_eq!(b.next_delay(NONE), Duration::ZERO);
        for _ in 0..100 {
            assert!(b.next_delay(random_pick) <= ReconnectBackoff::CAP);
        }
        b.reset();
        assert_eq!(b.ceiling(), MS(100));
        // no overflow after very many failures
        let mut b = ReconnectBackoff::default();
        for _ in 0..100 {
            b.next_delay(NONE);
        }
        assert_eq!(b.ceiling(), ReconnectBackoff::CAP);
    }

    #[test]
    fn a_spread_asked_for_is_the_base_of_the_ceilings_until_a_healthy_stream() {
        let mut b = ReconnectBackoff::default();
        // Failures before the ask (a stream resumed without an update, a failed attempt) do
        // not double the first ceiling.
        b.next_delay(NONE);
        b.next_delay(NONE);
        b.spread(MS(1500));
        let ceilings: Vec<u64> = (0..7)
            .map(|_| b.next_delay(MAX).as_millis() as u64)
            .collect();
        assert_eq!(ceilings, [1500, 3000, 6000, 10_000, 10_000, 10_000, 10_000]);
        // Asked again for the same spread (after each failed attempt): the doubling goes on.
        b.spread(MS(1500));
        assert_eq!(b.ceiling(), ReconnectBackoff::CAP);
        for _ in 0..200 {
            assert!(b.next_delay(random_pick) <= ReconnectBackoff::CAP);
        }
        // A spread above the cap is every ceiling; above a minute it counts as a minute.
        b.spread(Duration::from_secs(30));
        assert_eq!(b.next_delay(MAX), Duration::from_secs(30));
        assert_eq!(b.next_delay(MAX), Duration::from_secs(30));
        b.spread(Duration::from_secs(3600));
        assert_eq!(b.ceiling(), MAX_SPREAD);
        b.reset();
        assert_eq!(b.ceiling(), MS(100));
    }

    #[test]
    fn spread_values_are_whole_milliseconds() {
        assert_eq!(parse_spread("2500"), Some(MS(2500)));
        assert_eq!(parse_spread("0"), Some(Duration::ZERO));
        assert_eq!(parse_spread("99999999999"), Some(MAX_SPREAD));
        for bad in ["", "-1", "+5", "1.5", "1e3", "ten", "18446744073709551616"] {
            assert_eq!(parse_spread(bad), None, "{bad:?}");
        }
    }
}
