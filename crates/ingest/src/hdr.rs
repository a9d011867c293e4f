//! Percentiles of raw samples through an HDR histogram: 3 significant digits, memory bounded
//! whatever the number of samples.

use base64::Engine as _;
use budget_core::distribution::Distribution;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

/// Records latencies in microseconds; values up to one hour at 3 significant digits.
#[derive(Debug, Clone)]
pub struct Recorder {
    hist: Histogram<u64>,
    failures: u64,
}

/// Largest latency recorded (1 h in µs); longer ones are clamped to it.
pub const MAX_US: u64 = 3_600_000_000;

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            hist: Histogram::new_with_bounds(1, MAX_US, 3).expect("valid HDR bounds"),
            failures: 0,
        }
    }

    /// Records one latency in microseconds (clamped to 1 µs ..= 1 h).
    pub fn record_us(&mut self, us: u64) {
        self.hist.saturating_record(us.clamp(1, MAX_US));
    }

    /// Records `count` latencies of `us` microseconds (clamped as [`Self::record_us`]).
    pub fn record_n_us(&mut self, us: u64, count: u64) {
        self.hist.saturating_record_n(us.clamp(1, MAX_US), count);
    }

    pub fn record_failure(&mut self) {
        self.failures += 1;
    }

    /// Adds another histogram (values in µs).
    pub fn add(&mut self, other: &Histogram<u64>) -> Result<(), String> {
        self.hist.add(other).map_err(|e| format!("{e:?}"))
    }

    pub fn samples(&self) -> u64 {
        self.hist.len()
    }

    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// The value at `quantile` (0.99 for p99), in µs; highest-equivalent value, as HdrHistogram
    /// reports percentiles.
    pub fn quantile_us(&self, quantile: f64) -> u64 {
        self.hist.value_at_quantile(quantile)
    }

    /// The samples as a stored distribution: the histogram, V2 compressed, base64.
    pub fn distribution(&self) -> Distribution {
        histogram(&self.hist)
    }

    /// `LabelStats` for `label`, or `None` without samples.
    pub fn stats(&self, label: &str) -> Option<crate::LabelStats> {
        (self.samples() > 0).then(|| crate::LabelStats {
            label: label.to_owned(),
            samples: self.samples(),
            failures: Some(self.failures),
            p50_us: Some(self.quantile_us(0.50)),
            p99_us: self.quantile_us(0.99),
            p999_us: self.quantile_us(0.999),
        })
    }
}

/// `h` (values in µs) as a stored distribution: V2 compressed, base64.
pub fn histogram(h: &Histogram<u64>) -> Distribution {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut bytes)
        .expect("a histogram serializes into memory");
    Distribution::Histogram {
        hdr: base64::engine::general_purpose::STANDARD.encode(bytes),
    }
}

/// `h`, whose values are in `unit`, as a histogram in µs at 3 significant digits: each bucket's
/// count recorded at its lowest value converted (clamped to 1 µs ..= 1 h).
pub fn to_us(h: &Histogram<u64>, unit: crate::TimeUnit) -> Histogram<u64> {
    let mut out = Histogram::new_with_bounds(1, MAX_US, 3).expect("valid HDR bounds");
    for v in h.iter_recorded() {
        let lowest = h.lowest_equivalent(v.value_iterated_to());
        let us = (unit.to_us(lowest as f64).round() as u64).clamp(1, MAX_US);
        out.saturating_record_n(us, v.count_at_value());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within HDR precision of an exact sort-based percentile (nearest rank).
    #[test]
    fn matches_sorted_percentiles_within_precision() {
        let mut values: Vec<u64> = (0..100_000u64).map(|i| (i * 7919) % 250_000 + 1).collect();
        let mut r = Recorder::new();
        for v in &values {
            r.record_us(*v);
        }
        values.sort_unstable();
        for q in [0.5, 0.99, 0.999] {
            let exact = values[((q * values.len() as f64).ceil() as usize).max(1) - 1];
            let got = r.quantile_us(q);
            let err = got.abs_diff(exact) as f64 / exact as f64;
            assert!(err <= 0.001, "q {q}: exact {exact}, hdr {got}");
        }
        assert_eq!(r.samples(), 100_000);
    }
}
