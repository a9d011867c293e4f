//! Windows not yet accepted by the control plane: merged per (chain, segment, minute) and
//! bounded, so an outage costs a fixed amount of memory and the next report after it carries
//! everything still worth sending. Pure: callers pass the time.
//!
//! - Merge: windows of one segment in one minute become one (counts summed, histograms merged,
//!   the span widened within that minute); the control plane rolls up per minute anyway.
//! - Bound: at most [`MAX_MINUTES`] minutes per segment; older ones are dropped.
//! - Age: the control plane refuses windows that ended more than 10 minutes ago, so windows
//!   older than [`MAX_AGE_MS`] are dropped before sending (a refused request would otherwise
//!   fail forever).
//!
//! Every window dropped is counted ([`Pending::dropped`]) and logged (the reporter warns once
//! per report with the number dropped; the windows themselves at debug level).

use std::collections::BTreeMap;

use budget_proto::v1;
use tracing::debug;

use crate::window::{merge, minute_of};

/// Minutes of windows kept per segment while reports fail.
pub(crate) const MAX_MINUTES: usize = 11;

/// The oldest a window may have ended to be sent: 10 minutes (the control plane's limit) less
/// 10 s for clock skew and transit.
pub(crate) const MAX_AGE_MS: i64 = 10 * 60_000 - 10_000;

/// (chain, segment, Unix minute).
type Key = (String, String, i64);

/// Windows waiting to be sent, and how many were given up.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    windows: BTreeMap<Key, v1::SegmentWindow>,
    dropped: u64,
}

impl Pending {
    /// Adds `window`, merged into the one of its segment and minute if any; then drops the
    /// segment's oldest minutes beyond [`MAX_MINUTES`].
    pub(crate) fn add(&mut self, window: v1::SegmentWindow) {
        let key = (
            window.chain.clone(),
            window.segment.clone(),
            minute_of(&window),
        );
        let (chain, segment) = (key.0.clone(), key.1.clone());
        match self.windows.get_mut(&key) {
            Some(held) => merge(held, window),
            None => {
                self.windows.insert(key, window);
            }
        }
        let first = (chain.clone(), segment.clone(), i64::MIN);
        let last = (chain, segment, i64::MAX);
        let held: Vec<Key> = self
            .windows
            .range(first..=last)
            .map(|(k, _)| k.clone())
            .collect();
        for key in held.iter().take(held.len().saturating_sub(MAX_MINUTES)) {
            self.give_up(key, "more minutes pending than kept");
        }
    }

    /// Drops the windows that ended before `now_ms - MAX_AGE_MS`: the control plane would
    /// refuse them.
    pub(crate) fn drop_stale(&mut self, now_ms: i64) {
        let limit = now_ms.saturating_sub(MAX_AGE_MS);
        let stale: Vec<Key> = self
            .windows
            .iter()
            .filter(|(_, w)| w.end_unix_ms < limit)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &stale {
            self.give_up(key, "too old for the control plane");
        }
    }

    /// Every pending window, oldest minute first per segment; none left pending.
    pub(crate) fn take_all(&mut self) -> Vec<v1::SegmentWindow> {
        std::mem::take(&mut self.windows).into_values().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.windows.len()
    }

    /// Windows given up since the agent started: one per segment and minute.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Counts as dropped a window the control plane refused outright (INVALID_ARGUMENT).
    pub(crate) fn count_refused(&mut self, windows: u64) {
        self.dropped = self.dropped.saturating_add(windows);
    }

    fn give_up(&mut self, key: &Key, why: &str) {
        if let Some(w) = self.windows.remove(key) {
            self.dropped += 1;
            debug!(
                chain = %w.chain,
                segment = %w.segment,
                start_unix_ms = w.start_unix_ms,
                calls = w.calls,
                dropped_windows = self.dropped,
                "dropped a report window: {why}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::{decode, encode, new_histogram};

    const MIN: i64 = 60_000;

    fn window(segment: &str, start_ms: i64, calls: u64, latency_us: u64) -> v1::SegmentWindow {
        let mut h = new_histogram();
        h.record(latency_us).unwrap();
        v1::SegmentWindow {
            chain: "checkout".into(),
            segment: segment.into(),
            start_unix_ms: start_ms,
            end_unix_ms: start_ms + 10_000,
            calls,
            attempts: calls,
            retries: [("deadline".to_owned(), 1)].into(),
            outcomes: [("ok".to_owned(), calls)].into(),
            latency_hdr: encode(&h),
        }
    }

    #[test]
    fn windows_of_a_segment_merge_per_minute() {
        let mut p = Pending::default();
        p.add(window("a->b", 10 * MIN, 3, 100));
        p.add(window("a->b", 10 * MIN + 20_000, 4, 200));
        p.add(window("a->b", 11 * MIN, 5, 300));
        p.add(window("a->c", 10 * MIN + 10_000, 6, 400));
        assert_eq!(p.len(), 3);
        let all = p.take_all();
        assert_eq!(p.len(), 0);
        let first = &all[0];
        assert_eq!(
            (first.segment.as_str(), first.calls, first.attempts),
            ("a->b", 7, 7)
        );
        assert_eq!(
            (first.start_unix_ms, first.end_unix_ms),
            (10 * MIN, 10 * MIN + 30_000)
        );
        assert_eq!(first.retries["deadline"], 2);
        assert_eq!(first.outcomes["ok"], 7);
        let h = decode(&first.latency_hdr).unwrap();
        assert_eq!((h.len(), h.min(), h.max()), (2, 100, 200));
        assert_eq!((all[1].segment.as_str(), all[1].calls), ("a->b", 5));
        assert_eq!((all[2].segment.as_str(), all[2].calls), ("a->c", 6));
        assert_eq!(p.dropped(), 0);
    }

    #[test]
    fn at_most_eleven_minutes_per_segment_are_kept() {
        let mut p = Pending::default();
        for minute in 0..15 {
            p.add(window("a->b", minute * MIN, 1, 100));
            p.add(window("a->c", minute * MIN, 1, 100));
        }
        assert_eq!(p.len(), 2 * MAX_MINUTES);
        assert_eq!(p.dropped(), 2 * 4);
        let kept = p.take_all();
        let first = kept.iter().map(|w| w.start_unix_ms / MIN).min();
        assert_eq!(first, Some(4), "the oldest minutes went first");
    }

    #[test]
    fn windows_too_old_for_the_control_plane_are_dropped() {
        let mut p = Pending::default();
        p.add(window("a->b", 0, 1, 100)); // ends at 10 s
        p.add(window("a->b", MIN, 1, 100)); // ends at 70 s
        p.drop_stale(10_000 + MAX_AGE_MS);
        assert_eq!(
            (p.len(), p.dropped()),
            (2, 0),
            "exactly at the limit is kept"
        );
        p.drop_stale(10_001 + MAX_AGE_MS);
        assert_eq!((p.len(), p.dropped()), (1, 1));
        p.count_refused(3);
        assert_eq!(p.dropped(), 4);
    }
}
