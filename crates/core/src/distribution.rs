//! A run's latency distribution per segment, and what a timeout kills (SPEC §3
//! `timeout_kill_rate`; seed: a 100 ms timeout on a P99-180 ms read "误杀 25% 正常调用").
//!
//! A run keeps, per segment, the distribution its percentiles came from: an HdrHistogram (V2
//! compressed, base64) for formats with raw samples or histograms, or the percentile points a
//! summary-only file holds. The encoded histogram is opaque here (this crate does no
//! decompression): the caller decodes it into a [`Cdf`] of buckets, and everything else —
//! the share of samples slower than a timeout, attempts per call, the finding — is computed
//! here from that.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::baseline::BaselineSegment;
use crate::checks::{Finding, FindingKind, Severity};
use crate::topology::Topology;

/// Most percentile points kept per segment (a wrk2 spectrum has about a hundred).
pub const MAX_POINTS: usize = 1_000;

/// Default kill-rate thresholds: warning above 1 %, error above 10 % (SPEC §3).
pub const DEFAULT_KILL_RATE: KillRateThresholds = KillRateThresholds {
    warning: 0.01,
    error: 0.10,
};

/// The distribution a run holds for one segment, as stored with the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Distribution {
    /// Every sample, as an HdrHistogram V2 compressed (base64), values in microseconds.
    Histogram { hdr: String },
    /// Only the percentile points the file holds (summary formats): kill rates are bounds.
    Percentiles { points: Vec<Point> },
}

impl Distribution {
    pub fn kind(&self) -> Source {
        match self {
            Self::Histogram { .. } => Source::Histogram,
            Self::Percentiles { .. } => Source::Percentiles,
        }
    }

    /// Bytes it takes in the stored run: the base64 histogram, or the points as JSON.
    pub fn stored_bytes(&self) -> u64 {
        match self {
            Self::Histogram { hdr } => hdr.len() as u64,
            Self::Percentiles { points } => {
                serde_json::to_string(points).map_or(0, |s| s.len()) as u64
            }
        }
    }
}

/// One percentile point: `percentile` % of the samples took at most `us` (0 is the fastest
/// sample, 100 the slowest).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub percentile: f64,
    pub us: u64,
}

/// Where a kill rate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Every sample: the share is exact (to the histogram's 3 significant digits).
    Histogram,
    /// Percentile points only: the share is known between two bounds.
    Percentiles,
}

/// One non-empty histogram bucket: `count` samples whose latency is equivalent to
/// `lowest_us` at the histogram's precision (3 significant digits: within 0.1 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub lowest_us: u64,
    pub count: u64,
}

/// A decoded distribution, ready to answer "how many samples are slower than T".
#[derive(Debug, Clone, PartialEq)]
pub enum Cdf {
    /// Non-empty buckets in ascending order.
    Buckets(Vec<Bucket>),
    /// Percentile points in ascending order of percentile (and of latency).
    Points(Vec<Point>),
}

/// What [`crate::compute`] reads kill rates from: a run's distributions, asked one segment at a
/// time (the server decodes each stored histogram when asked and drops it after, so a draft of
/// 1,000 segments never holds 1,000 decoded histograms).
pub trait Tails {
    /// What `timeout_us` kills of `segment`'s distribution; `None` without one.
    fn kill(&self, segment: &str, timeout_us: u64) -> Option<Kill>;
}

/// Decoded distributions by segment id (tests, and callers that hold them anyway).
pub type Cdfs = BTreeMap<String, Cdf>;

impl Tails for Cdfs {
    fn kill(&self, segment: &str, timeout_us: u64) -> Option<Kill> {
        self.get(segment).map(|c| c.kill(timeout_us))
    }
}

/// A run without distributions (or a caller that wants no kill rates): every segment `None`.
pub struct NoDistributions;

impl Tails for NoDistributions {
    fn kill(&self, _segment: &str, _timeout_us: u64) -> Option<Kill> {
        None
    }
}

/// A run's stored distributions, decoded on demand: percentile points as they are, histograms
/// through `decode` (the caller's bounded HdrHistogram decoder), one at a time. A histogram that
/// does not decode gives no kill rate (uploads are checked before they are stored).
pub struct RunTails<'a, F> {
    run: &'a crate::RunData,
    decode: F,
}

impl<'a, F: Fn(&str) -> Result<Vec<Bucket>, String>> RunTails<'a, F> {
    pub fn new(run: &'a crate::RunData, decode: F) -> Self {
        Self { run, decode }
    }
}

impl<F: Fn(&str) -> Result<Vec<Bucket>, String>> Tails for RunTails<'_, F> {
    fn kill(&self, segment: &str, timeout_us: u64) -> Option<Kill> {
        match self.run.distributions.get(segment)? {
            Distribution::Histogram { hdr } => {
                let buckets = (self.decode)(hdr).ok()?;
                Some(kill_buckets(&buckets, timeout_us))
            }
            Distribution::Percentiles { points } => Some(kill_points(points, timeout_us)),
        }
    }
}

/// [`Cdf::kill`] of buckets.
pub fn kill_buckets(buckets: &[Bucket], timeout_us: u64) -> Kill {
    let total = buckets.iter().fold(0u64, |n, b| n.saturating_add(b.count));
    let killed = buckets
        .iter()
        .filter(|b| b.lowest_us > timeout_us)
        .fold(0u64, |n, b| n.saturating_add(b.count));
    let share = if total == 0 {
        0.0
    } else {
        round6(killed as f64 / total as f64)
    };
    Kill {
        source: Source::Histogram,
        killed: Some(killed),
        samples: Some(total),
        at_least: share,
        at_most: share,
    }
}

/// [`Cdf::kill`] of percentile points.
pub fn kill_points(points: &[Point], timeout_us: u64) -> Kill {
    let below = points
        .iter()
        .filter(|p| p.us <= timeout_us)
        .map(|p| p.percentile)
        .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.max(p))));
    let above = points
        .iter()
        .filter(|p| p.us > timeout_us)
        .map(|p| p.percentile)
        .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.min(p))));
    let at_most = below.map_or(1.0, |p| (100.0 - p) / 100.0);
    let at_least = above.map_or(0.0, |p| (100.0 - p) / 100.0);
    Kill {
        source: Source::Percentiles,
        killed: None,
        samples: None,
        at_least: round6(at_least.clamp(0.0, 1.0)),
        at_most: round6(at_most.clamp(0.0, 1.0)),
    }
}

/// What a timeout kills of a run's samples: the share slower than it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Kill {
    pub source: Source,
    /// Samples slower than the timeout (histograms only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<u64>,
    /// Samples in the distribution (histograms only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// The share killed, rounded to 6 decimals: exact for histograms; for percentile points
    /// the bounds the points imply, `at_least == at_most` only when they pin it.
    pub at_least: f64,
    pub at_most: f64,
}

impl Kill {
    /// The exact share, for a histogram.
    pub fn rate(&self) -> Option<f64> {
        (self.source == Source::Histogram).then_some(self.at_most)
    }
}

/// Expected attempts per call when every killed call is retried once on deadline (seed: 25 %
/// killed → 1.25 attempts per call), rounded to 6 decimals.
pub fn attempts_per_call(kill_rate: f64) -> f64 {
    round6(1.0 + kill_rate)
}

pub(crate) fn round6(v: f64) -> f64 {
    (v * 1_000_000.0).round() / 1_000_000.0
}

impl Cdf {
    /// The samples the distribution holds (histograms), or `None` for points.
    pub fn samples(&self) -> Option<u64> {
        match self {
            Self::Buckets(b) => Some(b.iter().fold(0u64, |n, b| n.saturating_add(b.count))),
            Self::Points(_) => None,
        }
    }

    /// The share of samples slower than `timeout_us`.
    ///
    /// Histograms: a bucket counts when its lowest equivalent value is above the timeout, so
    /// a sample within the histogram's precision (0.1 %) of the timeout is not counted; whole-ms
    /// latencies below about 1 s sit in buckets narrower than a millisecond, so a whole-ms
    /// timeout splits them exactly.
    ///
    /// Points: with `p` % of samples at most `v`, a timeout at or above `v` kills at most
    /// `100 − p` %; one below `v` kills at least `100 − p` %. Between the two nearest points
    /// the share is not known.
    pub fn kill(&self, timeout_us: u64) -> Kill {
        match self {
            Self::Buckets(buckets) => kill_buckets(buckets, timeout_us),
            Self::Points(points) => kill_points(points, timeout_us),
        }
    }

    /// The cumulative distribution for drawing: `(latency µs, share of samples at most it)`,
    /// one pair per bucket or point, at most `max` pairs (buckets merged evenly when there are
    /// more; the last pair is always kept).
    pub fn curve(&self, max: usize) -> Vec<(u64, f64)> {
        let max = max.max(2);
        match self {
            Self::Points(points) => points
                .iter()
                .map(|p| (p.us, round6(p.percentile / 100.0)))
                .collect(),
            Self::Buckets(buckets) => {
                let total = self.samples().unwrap_or(0).max(1) as f64;
                let step = buckets.len().div_ceil(max).max(1);
                let mut out = Vec::with_capacity(buckets.len() / step + 1);
                let mut seen = 0u64;
                for (i, b) in buckets.iter().enumerate() {
                    seen = seen.saturating_add(b.count);
                    if (i + 1) % step == 0 || i + 1 == buckets.len() {
                        out.push((b.lowest_us, round6(seen as f64 / total)));
                    }
                }
                out
            }
        }
    }
}

/// Checks percentile points as uploaded: each percentile in 0–100, both percentiles and
/// latencies non-decreasing, at most [`MAX_POINTS`]. The message says which point is wrong.
pub fn check_points(points: &[Point]) -> Result<(), (usize, String)> {
    if points.is_empty() {
        return Err((0, "at least one percentile point is needed".into()));
    }
    if points.len() > MAX_POINTS {
        return Err((
            MAX_POINTS,
            format!("{} points, more than {MAX_POINTS}", points.len()),
        ));
    }
    for (i, p) in points.iter().enumerate() {
        if !(p.percentile.is_finite() && (0.0..=100.0).contains(&p.percentile)) {
            return Err((
                i,
                format!("percentile {} is not between 0 and 100", p.percentile),
            ));
        }
        if let Some(prev) = i.checked_sub(1).map(|j| points[j]) {
            if p.percentile < prev.percentile || p.us < prev.us {
                return Err((
                    i,
                    format!(
                        "p{} = {} µs does not follow p{} = {} µs: points go up in both percentile \
                         and latency",
                        p.percentile, p.us, prev.percentile, prev.us
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A chain's kill-rate thresholds (shares, 0–1): a `timeout_kill_rate` warning above
/// `warning`, an error above `error`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillRateThresholds {
    pub warning: f64,
    pub error: f64,
}

impl Default for KillRateThresholds {
    fn default() -> Self {
        DEFAULT_KILL_RATE
    }
}

impl KillRateThresholds {
    /// Both in 0–1 and `warning ≤ error`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for (field, v) in [("warning", self.warning), ("error", self.error)] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err((
                    field,
                    format!("{v} is not a share between 0 and 1 (0.01 is 1 %)"),
                ));
            }
        }
        if self.warning > self.error {
            return Err((
                "warning",
                format!(
                    "the warning threshold {} is above the error threshold {}",
                    self.warning, self.error
                ),
            ));
        }
        Ok(())
    }
}

/// `timeout_kill_rate` (SPEC §3): for each segment whose run holds a histogram, a warning when its
/// timeout kills more than the chain's warning share of the samples, an error above the error
/// share. Percentile points give none (their bounds are on the segment). In topology order.
pub fn kill_findings(
    topology: &Topology,
    segments: &[BaselineSegment],
    kills: &[Option<Kill>],
) -> Vec<Finding> {
    let thresholds = topology.kill_rate_thresholds();
    segments
        .iter()
        .zip(kills)
        .filter_map(|(seg, kill)| {
            let kill = (*kill)?;
            let rate = kill.rate()?;
            let (severity, threshold) = if rate > thresholds.error {
                (Severity::Error, thresholds.error)
            } else if rate > thresholds.warning {
                (Severity::Warning, thresholds.warning)
            } else {
                return None;
            };
            let killed = kill.killed.unwrap_or(0);
            let samples = kill.samples.unwrap_or(0);
            let percent = |v: f64| format!("{}", (v * 10_000.0).round() / 100.0);
            let tail = match (seg.p99_ms, seg.p999_ms) {
                (Some(p99), Some(p999)) => format!("; p99 {p99} ms, p999 {p999} ms"),
                _ => String::new(),
            };
            let retry = match seg.attempts_per_call {
                Some(a) => format!(
                    ", and each killed call is retried: {a} attempts per call, the callee's \
                     traffic × {a}"
                ),
                None => String::new(),
            };
            Some(Finding {
                message: format!(
                    "{}: the {} ms timeout ({}) kills {} % of the load test's calls ({killed} of \
                     {samples} samples were slower{tail}), above {} %{retry}",
                    seg.id,
                    seg.timeout_ms,
                    seg.rule.describe(),
                    percent(rate),
                    percent(threshold),
                ),
                kind: FindingKind::TimeoutKillRate {
                    timeout_ms: seg.timeout_ms,
                    kill_rate: rate,
                    killed,
                    samples,
                    attempts_per_call: seg.attempts_per_call,
                    threshold,
                },
                segment: seg.id.clone(),
                severity,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(values: &[(u64, u64)]) -> Cdf {
        Cdf::Buckets(
            values
                .iter()
                .map(|&(lowest_us, count)| Bucket { lowest_us, count })
                .collect(),
        )
    }

    fn points(values: &[(f64, u64)]) -> Cdf {
        Cdf::Points(
            values
                .iter()
                .map(|&(percentile, us)| Point { percentile, us })
                .collect(),
        )
    }

    #[test]
    fn histogram_kill_is_the_share_strictly_slower() {
        // 75 calls at 50 ms, 24 at 180 ms, 1 at 420 ms.
        let c = buckets(&[(50_000, 75), (179_968, 24), (419_840, 1)]);
        let k = c.kill(100_000);
        assert_eq!((k.killed, k.samples), (Some(25), Some(100)));
        assert_eq!(k.rate(), Some(0.25));
        assert_eq!(attempts_per_call(k.rate().unwrap()), 1.25);
        // A sample in the timeout's own bucket is not killed.
        assert_eq!(c.kill(180_000).killed, Some(1));
        assert_eq!(c.kill(179_967).killed, Some(25));
        assert_eq!(c.kill(420_000).rate(), Some(0.0));
        assert_eq!(c.kill(0).rate(), Some(1.0));
        assert_eq!(buckets(&[]).kill(1).rate(), Some(0.0));
    }

    #[test]
    fn points_bound_the_share() {
        let c = points(&[
            (0.0, 1_000),
            (50.0, 20_000),
            (99.0, 180_000),
            (99.9, 420_000),
        ]);
        // Between p50 and p99: at least 1 %, at most 50 %.
        let k = c.kill(100_000);
        assert_eq!((k.at_least, k.at_most, k.rate()), (0.01, 0.5, None));
        // At p99 exactly: at most 1 %, at least 0.1 % (p99.9 is slower).
        let k = c.kill(180_000);
        assert_eq!((k.at_least, k.at_most), (0.001, 0.01));
        // Past the slowest point known (no p100): at most 0.1 %, at least 0.
        let k = c.kill(500_000);
        assert_eq!((k.at_least, k.at_most), (0.0, 0.001));
        // Below the fastest sample: everything.
        let k = c.kill(999);
        assert_eq!((k.at_least, k.at_most), (1.0, 1.0));
        // With the maximum known, a timeout past it kills nothing.
        let c = points(&[(50.0, 20_000), (100.0, 400_000)]);
        assert_eq!(c.kill(400_000).at_most, 0.0);
    }

    #[test]
    fn curve_ends_at_one_and_is_capped() {
        let many: Vec<(u64, u64)> = (1..=1000).map(|i| (i * 1000, 1)).collect();
        let c = buckets(&many);
        let curve = c.curve(100);
        assert_eq!(curve.len(), 100);
        assert_eq!(curve.last(), Some(&(1_000_000, 1.0)));
        assert!(curve
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(
            points(&[(99.0, 5)]).curve(10),
            vec![(5, 0.99)],
            "points are drawn as they are"
        );
    }

    #[test]
    fn points_are_checked() {
        let p = |percentile, us| Point { percentile, us };
        assert!(check_points(&[p(50.0, 1), p(99.0, 2)]).is_ok());
        assert_eq!(check_points(&[]).unwrap_err().0, 0);
        assert!(check_points(&[p(101.0, 1)])
            .unwrap_err()
            .1
            .contains("between 0 and 100"));
        assert!(check_points(&[p(f64::NAN, 1)]).is_err());
        let (i, why) = check_points(&[p(50.0, 10), p(99.0, 9)]).unwrap_err();
        assert_eq!(i, 1);
        assert!(why.contains("go up"), "{why}");
        assert_eq!(check_points(&[p(99.0, 1), p(50.0, 2)]).unwrap_err().0, 1);
        let too_many: Vec<Point> = (0..=MAX_POINTS).map(|i| p(0.0, i as u64)).collect();
        assert!(check_points(&too_many).is_err());
    }

    #[test]
    fn thresholds_are_checked() {
        assert!(DEFAULT_KILL_RATE.check().is_ok());
        let t = |warning, error| KillRateThresholds { warning, error };
        assert_eq!(t(0.2, 0.1).check().unwrap_err().0, "warning");
        assert_eq!(t(0.0, 1.5).check().unwrap_err().0, "error");
        assert!(t(0.0, 0.0).check().is_ok());
    }

    /// The seed's story through `compute`: inventory pinned at 100 ms over P99 180 / P999 420
    /// kills 25 %, an error with 1.25 attempts per call; unpinned, P99 × 1.1 kills 1 %: nothing.
    #[test]
    fn compute_reports_what_a_pinned_timeout_kills() {
        use crate::example::{parse_run, parse_topology, CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
        let inventory = buckets(&[
            (49_984, 7_500),
            (149_888, 2_300),
            (179_968, 100),
            (299_776, 89),
            (419_840, 11),
        ]);
        let cdfs: Cdfs = [("order->inventory".to_owned(), inventory)].into();
        let mut t: serde_json::Value = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
        t["segments"][1]["pinned_timeout_ms"] = 100.into();
        let pinned = parse_topology(&t.to_string()).unwrap();
        let run = parse_run(&pinned, CHECKOUT_RUN_A).unwrap();
        let c = crate::compute(&pinned, &run, &cdfs).unwrap();
        let inv = &c.segments[1];
        assert_eq!(
            (inv.kill_rate, inv.attempts_per_call),
            (Some(0.25), Some(1.25))
        );
        let kills: Vec<&Finding> = c
            .findings
            .iter()
            .filter(|f| f.kind.check_name() == "timeout_kill_rate")
            .collect();
        assert_eq!(kills.len(), 1);
        assert_eq!(kills[0].severity, Severity::Error);
        assert!(c.has_errors());
        // Segments without a distribution get no kill fields.
        assert_eq!(c.segments[2].kill_rate, None);
        assert_eq!(c.segments[2].kill_rate_bounds, None);

        // Run A unpinned: inventory's P99 40 ms gives 44 ms; a distribution with 1 % of its
        // samples above that is no finding at the default thresholds.
        let a = parse_topology(CHECKOUT_TOPOLOGY).unwrap();
        let tight = buckets(&[(30_000, 9_900), (50_000, 100)]);
        let cdfs: Cdfs = [("order->inventory".to_owned(), tight)].into();
        let c = crate::compute(&a, &parse_run(&a, CHECKOUT_RUN_A).unwrap(), &cdfs).unwrap();
        assert_eq!(c.segments[1].timeout_ms, 44);
        assert_eq!(c.segments[1].kill_rate, Some(0.01));
        assert!(!c
            .findings
            .iter()
            .any(|f| f.kind.check_name() == "timeout_kill_rate"));
        // With a chain's own lower warning threshold, the same 1 % is a warning.
        let mut t: serde_json::Value = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
        t["kill_rate"] = serde_json::json!({"warning": 0.005, "error": 0.5});
        let strict = parse_topology(&t.to_string()).unwrap();
        let c =
            crate::compute(&strict, &parse_run(&strict, CHECKOUT_RUN_A).unwrap(), &cdfs).unwrap();
        let f = c
            .findings
            .iter()
            .find(|f| f.kind.check_name() == "timeout_kill_rate")
            .unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.message.contains("kills 1 %") && f.message.contains("above 0.5 %"),
            "{}",
            f.message
        );
    }
}
