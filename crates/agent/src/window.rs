//! One segment's counts over one reporting window, and its wire form (`v1::SegmentWindow`):
//! conversion, the HdrHistogram V2 deflate encoding, merging two windows, and the wall-clock
//! alignment of windows. Pure: callers pass the times.
//!
//! Windows are aligned to wall-clock multiples of their length, and the length divides a minute,
//! so a window never straddles a minute: the control plane's per-minute rollups, and the
//! per-minute merge of pending windows (`pending`), never split one.

use std::time::Duration;

use budget_proto::v1;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use crate::outcome::{Outcome, CAUSES};

/// Latencies are recorded in microseconds, with 3 significant digits (SPEC §8).
pub(crate) const SIGNIFICANT_DIGITS: u8 = 3;

/// The largest latency recorded: one hour, in microseconds. Slower attempts are recorded as
/// one hour, which bounds every histogram's size.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;

/// One segment's counts over `[start_ms, end_ms]` (Unix milliseconds, wall clock).
#[derive(Debug, Clone)]
pub(crate) struct Window {
    pub(crate) chain: String,
    pub(crate) segment: String,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) calls: u64,
    pub(crate) attempts: u64,
    /// Retries by cause, in the order of `outcome::CAUSES`.
    pub(crate) retries: [u64; 2],
    /// Calls by outcome, in the order of [`Outcome::ALL`].
    pub(crate) outcomes: [u64; 6],
    /// Latencies of successful attempts, microseconds.
    pub(crate) latency: Histogram<u64>,
}

/// An empty histogram for latencies: grows as values arrive, up to [`MAX_LATENCY_US`].
pub(crate) fn new_histogram<T: hdrhistogram::Counter>() -> Histogram<T> {
    Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is a valid histogram")
}

/// A latency in whole microseconds, clamped to [`MAX_LATENCY_US`].
pub(crate) fn latency_us(latency: Duration) -> u64 {
    u64::try_from(latency.as_micros())
        .unwrap_or(u64::MAX)
        .min(MAX_LATENCY_US)
}

/// The standard compressed V2 encoding of `histogram`. Never fails on a histogram this crate
/// built; if it ever did, the latencies are lost (logged), not the counts.
pub(crate) fn encode(histogram: &Histogram<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Err(e) = V2DeflateSerializer::new().serialize(histogram, &mut out) {
        tracing::warn!(error = %e, "failed to encode a latency histogram; sending none");
        out.clear();
    }
    out
}

/// Decodes a V2 (deflate or not) histogram; empty bytes are an empty histogram.
pub(crate) fn decode(bytes: &[u8]) -> Result<Histogram<u64>, String> {
    if bytes.is_empty() {
        return Ok(new_histogram());
    }
    let mut h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| format!("{e:?}"))?;
    h.auto(true);
    Ok(h)
}

impl Window {
    /// The wire form: counters as maps by name (zero counts left out), latencies encoded.
    pub(crate) fn to_proto(&self) -> v1::SegmentWindow {
        let retries = CAUSES
            .iter()
            .zip(self.retries)
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| (c.as_str().to_owned(), n))
            .collect();
        let outcomes = Outcome::ALL
            .iter()
            .zip(self.outcomes)
            .filter(|(_, n)| *n > 0)
            .map(|(o, n)| (o.as_str().to_owned(), n))
            .collect();
        v1::SegmentWindow {
            chain: self.chain.clone(),
            segment: self.segment.clone(),
            start_unix_ms: self.start_ms,
            end_unix_ms: self.end_ms,
            calls: self.calls,
            attempts: self.attempts,
            retries,
            outcomes,
            latency_hdr: encode(&self.latency),
        }
    }
}

/// Folds `from` into `into` (same chain and segment): counts summed, histograms merged, the
/// span widened to cover both. A histogram that does not decode (never one of ours) is logged
/// and its latencies dropped; the counts are kept.
pub(crate) fn merge(into: &mut v1::SegmentWindow, from: v1::SegmentWindow) {
    into.start_unix_ms = into.start_unix_ms.min(from.start_unix_ms);
    into.end_unix_ms = into.end_unix_ms.max(from.end_unix_ms);
    into.calls = into.calls.saturating_add(from.calls);
    into.attempts = into.attempts.saturating_add(from.attempts);
    for (cause, n) in from.retries {
        let slot = into.retries.entry(cause).or_default();
        *slot = slot.saturating_add(n);
    }
    for (outcome, n) in from.outcomes {
        let slot = into.outcomes.entry(outcome).or_default();
        *slot = slot.saturating_add(n);
    }
    if from.latency_hdr.is_empty() {
        return;
    }
    if into.latency_hdr.is_empty() {
        into.latency_hdr = from.latency_hdr;
        return;
    }
    let merged = decode(&into.latency_hdr).and_then(|mut h| {
        let other = decode(&from.latency_hdr)?;
        h.add(&other).map_err(|e| format!("{e:?}"))?;
        Ok(h)
    });
    match merged {
        Ok(h) => into.latency_hdr = encode(&h),
        Err(e) => tracing::warn!(
            segment = %into.segment,
            error = %e,
            "failed to merge latency histograms; keeping the first"
        ),
    }
}

/// The minute (Unix minutes) a window belongs to: the one its start falls in.
pub(crate) fn minute_of(window: &v1::SegmentWindow) -> i64 {
    window.start_unix_ms.div_euclid(60_000)
}

/// The start of the aligned window of length `window_ms` that holds `t_ms`.
pub(crate) fn window_floor(t_ms: i64, window_ms: i64) -> i64 {
    t_ms - t_ms.rem_euclid(window_ms)
}

/// Whether `window` is a usable reporting window: at least 100 ms (below 1 s only makes sense
/// in tests), at most a minute, and dividing a minute so windows never straddle one.
pub(crate) fn check_length(window: Duration) -> Result<i64, String> {
    let ms = window.as_millis();
    if window.subsec_nanos() % 1_000_000 != 0 || !(100..=60_000).contains(&ms) || 60_000 % ms != 0 {
        return Err(format!(
            "report_window must be whole milliseconds between 100 ms and 60 s that divide a \
             minute (e.g. 10 s), not {window:?}"
        ));
    }
    Ok(ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start_ms: i64, latencies: &[u64]) -> Window {
        let mut latency = new_histogram();
        for &l in latencies {
            latency.record(l).unwrap();
        }
        Window {
            chain: "checkout".into(),
            segment: "order->inventory".into(),
            start_ms,
            end_ms: start_ms + 10_000,
            calls: latencies.len() as u64 + 1,
            attempts: latencies.len() as u64 + 3,
            retries: [2, 0],
            outcomes: [latencies.len() as u64, 1, 0, 0, 0, 0],
            latency,
        }
    }

    #[test]
    fn the_wire_form_names_counts_and_encodes_latencies() {
        let w = window(60_000, &[1000, 2000, 3000]).to_proto();
        assert_eq!((w.start_unix_ms, w.end_unix_ms), (60_000, 70_000));
        assert_eq!((w.calls, w.attempts), (4, 6));
        assert_eq!(w.retries.len(), 1, "zero counts are left out");
        assert_eq!(w.retries["deadline"], 2);
        assert_eq!(w.outcomes["ok"], 3);
        assert_eq!(w.outcomes["deadline_exceeded"], 1);
        // The standard V2 deflate cookie, so any HdrHistogram implementation reads it.
        assert_eq!(&w.latency_hdr[..4], &[0x1c, 0x84, 0x93, 0x14]);
        let h = decode(&w.latency_hdr).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h.value_at_quantile(0.5), 2000);
    }

    #[test]
    fn merging_sums_counts_merges_histograms_and_widens_the_span() {
        let mut a = window(60_000, &[1000, 2000]).to_proto();
        let b = window(70_000, &[3000]).to_proto();
        merge(&mut a, b);
        assert_eq!((a.start_unix_ms, a.end_unix_ms), (60_000, 80_000));
        assert_eq!((a.calls, a.attempts), (3 + 2, 5 + 4));
        assert_eq!(a.retries["deadline"], 4);
        assert_eq!(a.outcomes["ok"], 3);
        assert_eq!(a.outcomes["deadline_exceeded"], 2);
        let h = decode(&a.latency_hdr).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h.max(), h.highest_equivalent(3000));

        // A window without samples keeps the other's histogram as is.
        let mut empty = window(60_000, &[]).to_proto();
        let before = a.latency_hdr.clone();
        merge(&mut a, empty.clone());
        assert_eq!(a.latency_hdr, before);
        merge(&mut empty, a.clone());
        assert_eq!(decode(&empty.latency_hdr).unwrap().len(), 3);
    }

    #[test]
    fn latencies_are_clamped_to_an_hour() {
        assert_eq!(latency_us(Duration::from_micros(1500)), 1500);
        assert_eq!(latency_us(Duration::from_secs(7200)), MAX_LATENCY_US);
        assert_eq!(latency_us(Duration::MAX), MAX_LATENCY_US);
    }

    #[test]
    fn windows_align_to_the_wall_clock_and_divide_a_minute() {
        assert_eq!(window_floor(123_456, 10_000), 120_000);
        assert_eq!(window_floor(120_000, 10_000), 120_000);
        assert_eq!(minute_of(&window(125_000, &[]).to_proto()), 2);
        assert_eq!(check_length(Duration::from_secs(10)), Ok(10_000));
        assert_eq!(check_length(Duration::from_millis(200)), Ok(200));
        assert_eq!(check_length(Duration::from_secs(60)), Ok(60_000));
        for bad in [
            Duration::from_secs(7),
            Duration::from_secs(120),
            Duration::from_millis(50),
            Duration::from_micros(10_000_500),
            Duration::ZERO,
        ] {
            assert!(check_length(bad).is_err(), "{bad:?}");
        }
    }
}
