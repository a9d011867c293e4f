//! Percentiles of raw samples through an HDR histogram: 3 significant digits, memory bounded
//! whatever the number of samples.

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
