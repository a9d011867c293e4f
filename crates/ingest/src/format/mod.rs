//! One module per load tool, each a push parser ([`crate::Ingest`]) with a `sniff` (does the
//! start of an input look like this tool's output?) and a `parser` constructor; [`unsupported`]
//! names the files budgetd does not read.

pub mod artillery;
pub mod autocannon;
pub mod hlog;
pub mod jmeter;
pub mod k6;
pub mod locust;
pub mod locust_json;
pub mod oha;
pub mod unsupported;
pub mod wrk2;

use budget_core::distribution::{Distribution, Point, MAX_POINTS};

/// Percentile points a summary file holds, as a stored distribution (used by every summary
/// format: Locust, k6, autocannon, Artillery, wrk2, oha). `points` are `(percentile 0–100, µs)`
/// in any order; a percentile outside 0–100 (or not a number) is dropped. The points come out
/// sorted by percentile; a latency below the one before it (a tool's rounding: Locust's whole-ms
/// p50 under its exact minimum, a DDSketch p50 under Artillery's min) is raised to it rather than
/// refused; a percentile given twice is kept once, with the larger latency; more than
/// [`MAX_POINTS`] are thinned to evenly spaced ones plus the last. `None` without any point.
/// What comes out passes [`budget_core::distribution::check_points`].
pub(crate) fn percentile_points(
    points: impl IntoIterator<Item = (f64, u64)>,
) -> Option<Distribution> {
    let mut points: Vec<Point> = points
        .into_iter()
        .filter(|(percentile, _)| percentile.is_finite() && (0.0..=100.0).contains(percentile))
        // `+ 0.0` turns -0 into 0.
        .map(|(percentile, us)| Point {
            percentile: percentile + 0.0,
            us,
        })
        .collect();
    points.sort_by(|a, b| a.percentile.total_cmp(&b.percentile));
    let mut top = 0;
    for p in &mut points {
        top = top.max(p.us);
        p.us = top;
    }
    // Latencies are non-decreasing now: the later of two equal percentiles has the larger one.
    points.dedup_by(|later, kept| {
        let same = later.percentile == kept.percentile;
        if same {
            kept.us = later.us;
        }
        same
    });
    if points.len() > MAX_POINTS {
        let last = points.len() - 1;
        let step = last.div_ceil(MAX_POINTS - 1);
        points = points
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| i % step == 0 || i == last)
            .map(|(_, p)| p)
            .collect();
    }
    debug_assert!(points.is_empty() || budget_core::distribution::check_points(&points).is_ok());
    (!points.is_empty()).then_some(Distribution::Percentiles { points })
}
