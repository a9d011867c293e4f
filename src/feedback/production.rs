//! What production did over a window: rollups of every writer added up per segment, and the
//! figures of SPEC §8 compared with the live baseline.

use std::collections::BTreeMap;

use budget_api::feedback::{Production, ProductionSegment};
use budget_core::baseline::BaselineSegment;
use budget_core::feedback::{production_drift, Counts, Latency, ProductionDrift};
use budget_core::us_to_ms;
use hdrhistogram::Histogram;

use super::hdr;
use crate::store::feedback::Rollup;

/// The production windows of SPEC §8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    Minute,
    FiveMinutes,
    Hour,
}

impl Span {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "1m" => Some(Self::Minute),
            "5m" => Some(Self::FiveMinutes),
            "1h" => Some(Self::Hour),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minute => "1m",
            Self::FiveMinutes => "5m",
            Self::Hour => "1h",
        }
    }

    /// How many rollups the window spans.
    pub fn rollups(self) -> i64 {
        match self {
            Self::Minute => 1,
            Self::FiveMinutes => 5,
            Self::Hour => 60,
        }
    }

    /// `[from, to)`: the last complete window of this length before `now_ms`.
    pub fn bounds(self, now_ms: i64, rollup_ms: i64) -> (i64, i64) {
        let to = now_ms.div_euclid(rollup_ms) * rollup_ms;
        (to - self.rollups() * rollup_ms, to)
    }
}

/// One segment's rollups added up.
#[derive(Debug, Clone)]
pub struct Sum {
    pub counts: Counts,
    pub latency: Histogram<u64>,
    /// Distinct agents (exact while each rollup names all of its agents, up to 64; beyond,
    /// the largest number of one rollup, writers added up).
    pub agents: u64,
    /// Agent ids seen (at most 64 per rollup row).
    pub agent_ids: std::collections::BTreeSet<String>,
}

/// Adds up `rows` per segment.
pub fn sum_by_segment(rows: &[Rollup]) -> BTreeMap<String, Sum> {
    let mut out: BTreeMap<String, Sum> = BTreeMap::new();
    let mut agents_per_rollup: BTreeMap<(&str, i64), u64> = BTreeMap::new();
    // Segments with a rollup that could not name all its agents.
    let mut unnamed: std::collections::BTreeSet<&str> = Default::default();
    for row in rows {
        if row.agent_count > row.agents.len() as u64 {
            unnamed.insert(row.segment.as_str());
        }
        let sum = out.entry(row.segment.clone()).or_insert_with(|| Sum {
            counts: Counts::default(),
            latency: hdr::empty(),
            agents: 0,
            agent_ids: Default::default(),
        });
        sum.counts.add(&row.counts);
        match hdr::decode(&row.latency_hdr) {
            Ok(h) => hdr::add(&mut sum.latency, &h),
            Err(e) => {
                tracing::warn!(chain = %row.chain, segment = %row.segment, error = %e, "skipping a rollup histogram that does not decode");
            }
        }
        sum.agent_ids.extend(row.agents.iter().cloned());
        *agents_per_rollup
            .entry((row.segment.as_str(), row.minute))
            .or_default() += row.agent_count;
    }
    for ((segment, _), n) in agents_per_rollup {
        if let Some(sum) = out.get_mut(segment) {
            sum.agents = sum.agents.max(n);
        }
    }
    // Where every agent is named, the distinct names are the exact count.
    for (segment, sum) in &mut out {
        if !unnamed.contains(segment.as_str()) {
            sum.agents = sum.agent_ids.len() as u64;
        }
    }
    out
}

/// `[ms, share at or below]` points of `h`: one per distinct bucket on a log scale, at most
/// about 120, for drawing a CDF.
pub fn distribution(h: &Histogram<u64>) -> Vec<[f64; 2]> {
    if h.is_empty() {
        return Vec::new();
    }
    let total = h.len() as f64;
    let mut out: Vec<[f64; 2]> = Vec::new();
    let mut seen = 0u64;
    for v in h.iter_log(h.low().max(10), 1.122) {
        seen += v.count_since_last_iteration();
        if v.count_since_last_iteration() == 0 && out.last().is_some_and(|p| p[1] >= 1.0) {
            break;
        }
        let point = [us_to_ms(v.value_iterated_to()), seen as f64 / total];
        if out.last() != Some(&point) {
            out.push(point);
        }
        if seen >= h.len() {
            break;
        }
    }
    out
}

fn rate(v: Option<f64>) -> Option<f64> {
    v.map(|x| (x * 1e6).round() / 1e6)
}

/// One segment's figures, compared with its live baseline segment if any.
pub fn segment_figures(
    segment: &str,
    sum: &Sum,
    baseline: Option<&BaselineSegment>,
) -> (ProductionSegment, Option<ProductionDrift>, Latency) {
    let c = &sum.counts;
    let latency = hdr::latency(&sum.latency);
    let drift = baseline.and_then(|b| production_drift(b, &latency));
    let ms = |us: u64| (latency.samples > 0).then(|| us_to_ms(us));
    let figures = ProductionSegment {
        segment: segment.to_owned(),
        calls: c.calls,
        attempts: c.attempts,
        retries: [
            ("deadline".to_owned(), c.retries_deadline),
            ("unavailable".to_owned(), c.retries_unavailable),
        ]
        .into(),
        outcomes: [
            ("ok", c.ok),
            ("deadline_exceeded", c.deadline_exceeded),
            ("unavailable", c.unavailable),
            ("business_error", c.business_error),
            ("budget_exhausted", c.budget_exhausted),
            ("retry_refused_no_key", c.retry_refused_no_key),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
        amplification: rate(c.amplification()),
        kill_rate: rate(c.kill_rate()),
        key_coverage: rate(c.key_coverage()),
        samples: latency.samples,
        p50_ms: ms(latency.p50_us),
        p99_ms: ms(latency.p99_us),
        p999_ms: ms(latency.p999_us),
        baseline_p99_ms: baseline.and_then(|b| b.p99_ms),
        baseline_p999_ms: baseline.and_then(|b| b.p999_ms),
        timeout_ms: baseline.map(|b| b.timeout_ms),
        drift: drift.as_ref().is_some_and(|d| d.drift),
        drift_pct: drift.as_ref().and_then(|d| d.drift_pct),
        agents: sum.agents,
        distribution: distribution(&sum.latency),
    };
    (figures, drift, latency)
}

/// The production view of `chain` from its rollups over `[from, to)`: the live baseline's
/// segments in its order, then any other segment reported.
pub fn view(
    chain: &str,
    span: Span,
    (from, to): (i64, i64),
    rows: &[Rollup],
    baseline: Option<(&str, &[BaselineSegment])>,
) -> Production {
    let mut sums = sum_by_segment(rows);
    let mut segments = Vec::new();
    if let Some((_, live)) = baseline {
        for b in live {
            if let Some(sum) = sums.remove(&b.id) {
                segments.push(segment_figures(&b.id, &sum, Some(b)).0);
            }
        }
    }
    for (id, sum) in &sums {
        segments.push(segment_figures(id, sum, None).0);
    }
    Production {
        chain: chain.to_owned(),
        window: span.as_str().to_owned(),
        from: crate::clock::rfc3339_ms(from),
        to: crate::clock::rfc3339_ms(to),
        baseline_id: baseline.map(|(id, _)| id.to_owned()),
        segments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(segment: &str, minute: i64, writer: &str, calls: u64, values: &[u64]) -> Rollup {
        let mut h = hdr::empty();
        for v in values {
            h.record(*v).unwrap();
        }
        Rollup {
            chain: "checkout".into(),
            segment: segment.into(),
            minute,
            writer: writer.into(),
            counts: Counts {
                calls,
                attempts: calls * 2,
                retries_deadline: calls,
                ok: calls,
                ..Counts::default()
            },
            latency_hdr: hdr::encode(&h),
            agent_count: 2,
            agents: vec!["a".into(), "b".into()],
            updated_at: String::new(),
        }
    }

    #[test]
    fn writers_and_minutes_add_up() {
        let rows = [
            row("order->inventory", 0, "w1", 10, &[1000, 2000]),
            row("order->inventory", 0, "w2", 5, &[3000]),
            row("order->inventory", 60_000, "w1", 1, &[4000]),
        ];
        let sums = sum_by_segment(&rows);
        let s = &sums["order->inventory"];
        assert_eq!(s.counts.calls, 16);
        assert_eq!(s.counts.attempts, 32);
        assert_eq!(s.latency.len(), 4);
        assert_eq!(s.agents, 2, "the same two agents everywhere");
        let mut many = row("order->user", 0, "w1", 1, &[1]);
        many.agent_count = 100;
        let mut other = row("order->user", 0, "w2", 1, &[1]);
        other.agent_count = 70;
        let sums = sum_by_segment(&[many, other]);
        assert_eq!(
            sums["order->user"].agents, 170,
            "beyond the names: the rollup's sum"
        );
        let (fig, _, _) = segment_figures("order->inventory", s, None);
        assert_eq!(fig.amplification, Some(2.0));
        assert_eq!(fig.kill_rate, Some(0.5));
        let d = &fig.distribution;
        assert_eq!(d.last().unwrap()[1], 1.0);
        assert!(d
            .windows(2)
            .all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1]));
    }

    #[test]
    fn windows_are_the_last_complete_ones() {
        assert_eq!(Span::Minute.bounds(125_000, 60_000), (60_000, 120_000));
        assert_eq!(Span::FiveMinutes.bounds(300_000, 60_000), (0, 300_000));
        assert_eq!(Span::parse("1h"), Some(Span::Hour));
        assert_eq!(Span::parse("2m"), None);
    }
}
