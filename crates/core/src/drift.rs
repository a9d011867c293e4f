//! R-drift: a run whose p999 (and, for stable segments, p99) moved more than 20 % either way
//! from the approved baseline calls for a recompute (seed: "P999 变化超 20% 触发重算").

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::baseline::BaselineSegment;
use crate::run::{RunData, SegmentStats};
use crate::topology::{SegmentClass, Topology};
use crate::{ms_to_us, us_to_ms};

/// A change of more than this many percent either way is drift.
pub const DRIFT_THRESHOLD_PCT: u64 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    P99,
    P999,
}

/// One compared percentile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftEntry {
    pub segment: String,
    pub metric: Metric,
    /// The baseline's value; `None` when the baseline has no data for the segment.
    pub baseline_ms: Option<f64>,
    pub run_ms: f64,
    /// Change in percent, one decimal; `None` when there is nothing to compare with.
    pub change_pct: Option<f64>,
    pub drift: bool,
}

/// `new_when_missing`: whether a value the baseline lacks counts as drift — yes for a segment
/// the baseline does not know (the topology changed), no for the root, whose measurement is
/// optional and never changes a timeout.
fn entry(
    segment: &str,
    metric: Metric,
    old_ms: Option<f64>,
    new_us: u64,
    new_when_missing: bool,
) -> DriftEntry {
    let old_us = old_ms.map(ms_to_us);
    let (change_pct, drift) = match old_us {
        None => (None, new_when_missing),
        Some(0) => (None, new_us > 0),
        Some(old) => {
            let delta = new_us.abs_diff(old);
            let pct = (delta as f64 * 1000.0 / old as f64).round() / 10.0;
            let signed = if new_us < old { -pct } else { pct };
            (Some(signed), delta * 100 > DRIFT_THRESHOLD_PCT * old)
        }
    };
    DriftEntry {
        segment: segment.to_owned(),
        metric,
        baseline_ms: old_ms,
        run_ms: us_to_ms(new_us),
        change_pct,
        drift,
    }
}

/// Compares every measured segment of `run` with the approved baseline's segments.
/// Entries come in topology order: p999 first, then p99 for stable segments.
pub fn compare(
    topology: &Topology,
    baseline: &[BaselineSegment],
    run: &RunData,
) -> Vec<DriftEntry> {
    let mut out = Vec::new();
    let mut by_id: HashMap<&str, &BaselineSegment> = HashMap::with_capacity(baseline.len());
    for b in baseline {
        by_id.entry(b.id.as_str()).or_insert(b);
    }
    for seg in &topology.segments {
        let Some(stats) = run.segments.get(&seg.id) else {
            continue;
        };
        let old = by_id.get(seg.id.as_str());
        out.extend(compare_segment(
            &seg.id,
            seg.is_root(),
            seg.class,
            old.and_then(|b| b.p99_ms),
            old.and_then(|b| b.p999_ms),
            stats,
        ));
    }
    out
}

/// One segment's entries: p999, then p99 for a stable segment, against the baseline's values
/// (`None` where the baseline has none).
pub fn compare_segment(
    id: &str,
    is_root: bool,
    class: SegmentClass,
    old_p99_ms: Option<f64>,
    old_p999_ms: Option<f64>,
    stats: &SegmentStats,
) -> Vec<DriftEntry> {
    let missing_is_drift = !is_root;
    let mut out = vec![entry(
        id,
        Metric::P999,
        old_p999_ms,
        stats.p999_us,
        missing_is_drift,
    )];
    if class == SegmentClass::Stable {
        out.push(entry(
            id,
            Metric::P99,
            old_p99_ms,
            stats.p99_us,
            missing_is_drift,
        ));
    }
    out
}

/// Whether any compared entry drifted.
pub fn drifted(entries: &[DriftEntry]) -> bool {
    entries.iter().any(|e| e.drift)
}
