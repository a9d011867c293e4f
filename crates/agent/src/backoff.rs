//! Reconnect backoff of the watch stream (linkerd2-proxy's shape): exponential with full
//! jitter, reset after a healthy stream. Apart from [`crate::policy`] on purpose: R-retry
//! backs off a downstream call inside its budget; this backs off reconnecting to the control
//! plane, forever, with no budget. Pure: the jitter source is passed in.

use std::time::Duration;

/// Reconnect backoff of the watch stream: exponential (base doubling up to a cap) with full
/// jitter, i.e. each delay is uniform in `0..=min(cap, base × 2^n)`.
#[derive(Debug, Clone)]
pub struct ReconnectBackoff {
    base: Duration,
    cap: Duration,
    failures: u32,
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
        }
    }

    /// The ceiling of the next delay, before jitter.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32.checked_shl(self.failures.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The next delay; `pick(max)` returns a value in `0..=max` (microseconds).
    pub fn next_delay(&mut self, pick: impl FnOnce(u64) -> u64) -> Duration {
        let max_us = u64::try_from(self.ceiling().as_micros()).unwrap_or(u64::MAX);
        self.failures = self.failures.saturating_add(1);
        Duration::from_micros(pick(max_us).min(max_us))
    }

    /// After a healthy stream: start again from the base.
    pub fn reset(&mut self) {
        self.failures = 0;
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
}
