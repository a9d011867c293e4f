//! SPEC §8, runtime feedback: what agents count, the figures derived from it, and the alert
//! rules with the seed's defaults ("放大系数 … 超过 2 倍自动告警", "某项漂移超验收线 20% 自动告警").
//!
//! Pure: callers pass the counts (already summed over a window) and the percentiles of the
//! merged latency histogram; the server keeps the histograms and the time.

use serde::{Deserialize, Serialize};

use crate::baseline::BaselineSegment;
use crate::drift::{self, DriftEntry};
use crate::run::SegmentStats;

/// Most windows in one Report (an agent with 100 segments and 11 minutes kept is 1,100).
pub const MAX_REPORT_WINDOWS: usize = 4096;

/// Retry causes an agent counts (`SegmentWindow.retries` keys).
pub const RETRY_CAUSES: [&str; 2] = ["deadline", "unavailable"];

/// How a call ended (`SegmentWindow.outcomes` keys; one per call).
pub const OUTCOMES: [&str; 6] = [
    "ok",
    "deadline_exceeded",
    "unavailable",
    "business_error",
    "budget_exhausted",
    "retry_refused_no_key",
];

/// One segment's counts over a window (or a sum of windows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub calls: u64,
    pub attempts: u64,
    pub retries_deadline: u64,
    pub retries_unavailable: u64,
    pub ok: u64,
    pub deadline_exceeded: u64,
    pub unavailable: u64,
    pub business_error: u64,
    pub budget_exhausted: u64,
    pub retry_refused_no_key: u64,
}

impl Counts {
    /// The counter behind a retry cause, `None` for an unknown cause.
    pub fn retry_mut(&mut self, cause: &str) -> Option<&mut u64> {
        Some(match cause {
            "deadline" => &mut self.retries_deadline,
            "unavailable" => &mut self.retries_unavailable,
            _ => return None,
        })
    }

    /// The counter behind an outcome, `None` for an unknown outcome.
    pub fn outcome_mut(&mut self, outcome: &str) -> Option<&mut u64> {
        Some(match outcome {
            "ok" => &mut self.ok,
            "deadline_exceeded" => &mut self.deadline_exceeded,
            "unavailable" => &mut self.unavailable,
            "business_error" => &mut self.business_error,
            "budget_exhausted" => &mut self.budget_exhausted,
            "retry_refused_no_key" => &mut self.retry_refused_no_key,
            _ => return None,
        })
    }

    /// Adds `other` (saturating: a hostile report cannot wrap a total around).
    pub fn add(&mut self, other: &Self) {
        let pairs = [
            (&mut self.calls, other.calls),
            (&mut self.attempts, other.attempts),
            (&mut self.retries_deadline, other.retries_deadline),
            (&mut self.retries_unavailable, other.retries_unavailable),
            (&mut self.ok, other.ok),
            (&mut self.deadline_exceeded, other.deadline_exceeded),
            (&mut self.unavailable, other.unavailable),
            (&mut self.business_error, other.business_error),
            (&mut self.budget_exhausted, other.budget_exhausted),
            (&mut self.retry_refused_no_key, other.retry_refused_no_key),
        ];
        for (total, add) in pairs {
            *total = total.saturating_add(add);
        }
    }

    pub fn retries(&self) -> u64 {
        self.retries_deadline
            .saturating_add(self.retries_unavailable)
    }

    /// Attempts that ran out of time: every retry on deadline, and every call whose last
    /// attempt timed out with no retry left.
    pub fn deadline_attempts(&self) -> u64 {
        self.retries_deadline.saturating_add(self.deadline_exceeded)
    }

    /// Retry amplification = attempts / calls (seed: alert above 2×).
    pub fn amplification(&self) -> Option<f64> {
        ratio(self.attempts, self.calls)
    }

    /// Timeout kill rate = deadline-exceeded attempts / attempts.
    pub fn kill_rate(&self) -> Option<f64> {
        ratio(self.deadline_attempts(), self.attempts)
    }

    /// Idempotency-key coverage = 1 − refused for lack of a key / retryable failures.
    pub fn key_coverage(&self) -> Option<f64> {
        let retryable = self.retries().saturating_add(self.retry_refused_no_key);
        ratio(self.retry_refused_no_key, retryable).map(|refused| 1.0 - refused)
    }
}

fn ratio(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// Percentiles of a window's merged latency histogram (µs), and how many samples it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    pub samples: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
}

/// Production compared with the live baseline by R-drift: the entries, and the largest change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProductionDrift {
    pub entries: Vec<DriftEntry>,
    /// The change of largest size among the entries (signed, percent), if any compares.
    pub drift_pct: Option<f64>,
    pub drift: bool,
}

/// R-drift between production's percentiles and the live baseline's for one of its segments;
/// `None` without samples. Only percentiles the baseline puts at or below the segment's
/// timeout are compared: the agents' histograms hold successful attempts, which end before it.
pub fn production_drift(baseline: &BaselineSegment, latency: &Latency) -> Option<ProductionDrift> {
    if latency.samples == 0 {
        return None;
    }
    let stats = SegmentStats {
        failures: None,
        p50_us: Some(latency.p50_us),
        p99_us: latency.p99_us,
        p999_us: latency.p999_us,
        samples: latency.samples,
    };
    let mut entries = drift::compare_segment(
        &baseline.id,
        baseline.parent.is_none(),
        baseline.class,
        baseline.p99_ms,
        baseline.p999_ms,
        &stats,
    );
    // Agents measure successful attempts only, so production cannot see past the timeout: a
    // percentile the baseline puts above the timeout (a stable segment's p999) is not compared.
    let timeout_ms = baseline.timeout_ms as f64;
    entries.retain(|e| e.baseline_ms.is_none_or(|b| b <= timeout_ms));
    let drift_pct = entries
        .iter()
        .filter_map(|e| e.change_pct)
        .max_by(|a, b| a.abs().total_cmp(&b.abs()));
    Some(ProductionDrift {
        drift: drift::drifted(&entries),
        drift_pct,
        entries,
    })
}

/// The alert rules of SPEC §8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// attempts / calls above 2 over the last complete minute.
    Amplification,
    /// Production p999 (or a stable segment's p99) more than 20 % from the live baseline over
    /// the last 5 complete minutes, with at least 1 000 samples.
    Drift,
    /// Deadline-exceeded attempts above 1 % of attempts over the last 5 complete minutes.
    KillRate,
    /// An agent refused a published config.
    Nack,
    /// An archive upload pending for more than 10 minutes.
    ArchiveBacklog,
}

impl Rule {
    pub const ALL: [Self; 5] = [
        Self::Amplification,
        Self::Drift,
        Self::KillRate,
        Self::Nack,
        Self::ArchiveBacklog,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Amplification => "amplification",
            Self::Drift => "drift",
            Self::KillRate => "kill_rate",
            Self::Nack => "nack",
            Self::ArchiveBacklog => "archive_backlog",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// The thresholds of the alert rules; [`Default`] is the seed's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertThresholds {
    /// Fires above this amplification (attempts / calls) over 1 minute.
    pub amplification: f64,
    /// Fires above this kill rate (a fraction) over 5 minutes.
    pub kill_rate: f64,
    /// Production drift needs at least this many samples over 5 minutes.
    pub drift_min_samples: u64,
    /// An archive upload pending longer than this fires `archive_backlog`.
    pub archive_backlog_secs: u64,
}

impl Default for AlertThresholds {
    fn default() -> Self {
        Self {
            amplification: 2.0,
            kill_rate: 0.01,
            drift_min_samples: 1_000,
            archive_backlog_secs: 600,
        }
    }
}

/// A rule's verdict on one segment's window: the value measured, against the threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub rule: Rule,
    pub value: f64,
    pub threshold: f64,
    pub firing: bool,
}

impl Verdict {
    /// `rule` measured `value`: firing when above `threshold`.
    fn above(rule: Rule, value: f64, threshold: f64) -> Self {
        Self {
            rule,
            value,
            threshold,
            firing: value > threshold,
        }
    }
}

/// The segment rules (amplification over `last_minute`; kill rate and drift over
/// `last_5m`). A rule with nothing to measure (no calls, too few samples) gives no verdict,
/// which leaves a firing alert firing until a window says otherwise.
pub fn evaluate_segment(
    thresholds: &AlertThresholds,
    last_minute: &Counts,
    last_5m: &Counts,
    drift_5m: Option<(&ProductionDrift, &Latency)>,
) -> Vec<Verdict> {
    let mut out = Vec::new();
    if let Some(value) = last_minute.amplification() {
        out.push(Verdict::above(
            Rule::Amplification,
            value,
            thresholds.amplification,
        ));
    }
    if let Some(value) = last_5m.kill_rate() {
        out.push(Verdict::above(Rule::KillRate, value, thresholds.kill_rate));
    }
    if let Some((drift, latency)) = drift_5m {
        if latency.samples >= thresholds.drift_min_samples {
            if let Some(pct) = drift.drift_pct {
                out.push(Verdict {
                    rule: Rule::Drift,
                    value: pct,
                    threshold: drift::DRIFT_THRESHOLD_PCT as f64,
                    firing: drift.drift,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    fn counts(calls: u64, attempts: u64, retries_deadline: u64, deadline_exceeded: u64) -> Counts {
        Counts {
            calls,
            attempts,
            retries_deadline,
            deadline_exceeded,
            ok: calls - deadline_exceeded,
            ..Counts::default()
        }
    }

    #[test]
    fn figures_follow_the_spec_formulas() {
        // The seed's inventory story: 25 % of first attempts killed and retried once.
        let c = counts(1000, 1300, 300, 0);
        assert_eq!(c.amplification(), Some(1.3));
        assert_eq!(c.kill_rate(), Some(300.0 / 1300.0));
        let idle = Counts::default();
        assert_eq!(idle.amplification(), None);
        assert_eq!(idle.kill_rate(), None);
        assert_eq!(idle.key_coverage(), None);
        let refused = Counts {
            calls: 10,
            attempts: 12,
            retries_unavailable: 2,
            retry_refused_no_key: 2,
            ..Counts::default()
        };
        assert_eq!(refused.key_coverage(), Some(0.5));
    }

    #[test]
    fn unknown_causes_and_outcomes_have_no_counter() {
        let mut c = Counts::default();
        for o in OUTCOMES {
            *c.outcome_mut(o).unwrap() += 1;
        }
        for r in RETRY_CAUSES {
            *c.retry_mut(r).unwrap() += 1;
        }
        assert_eq!(c.ok + c.retry_refused_no_key + c.retries(), 4);
        assert!(c.outcome_mut("timeout").is_none());
        assert!(c.retry_mut("business").is_none());
    }

    #[test]
    fn adding_saturates() {
        let mut a = Counts {
            calls: u64::MAX - 1,
            ..Counts::default()
        };
        a.add(&Counts {
            calls: 5,
            ..Counts::default()
        });
        assert_eq!(a.calls, u64::MAX);
    }

    #[test]
    fn amplification_fires_only_above_two() {
        let t = AlertThresholds::default();
        let at_two = counts(100, 200, 100, 0);
        let above = counts(100, 201, 101, 0);
        let v = |c: &Counts| {
            evaluate_segment(&t, c, &Counts::default(), None)
                .into_iter()
                .find(|v| v.rule == Rule::Amplification)
                .unwrap()
        };
        assert!(!v(&at_two).firing);
        assert!(v(&above).firing);
        assert_eq!(v(&above).value, 2.01);
        assert!(evaluate_segment(&t, &Counts::default(), &Counts::default(), None).is_empty());
    }

    #[test]
    fn kill_rate_fires_above_one_percent_over_five_minutes() {
        let t = AlertThresholds::default();
        let one_pct = counts(1000, 1000, 0, 10);
        let more = counts(1000, 1000, 0, 11);
        let fires = |c: &Counts| {
            evaluate_segment(&t, &Counts::default(), c, None)
                .iter()
                .any(|v| v.rule == Rule::KillRate && v.firing)
        };
        assert!(!fires(&one_pct));
        assert!(fires(&more));
    }

    #[test]
    fn production_drift_needs_samples_and_compares_like_r_drift() {
        use crate::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
        let topology: Topology = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
        let run = serde_json::from_str::<crate::run::RunUpload>(CHECKOUT_RUN_A)
            .unwrap()
            .into_run(&topology)
            .unwrap();
        let computed =
            crate::compute(&topology, &run, &crate::distribution::NoDistributions).unwrap();
        let seg = topology
            .segments
            .iter()
            .find(|s| s.class == crate::SegmentClass::Stable && !s.is_root())
            .unwrap();
        let baseline = computed.segments.iter().find(|b| b.id == seg.id).unwrap();
        let (p99, p999) = (
            crate::ms_to_us(baseline.p99_ms.unwrap()),
            crate::ms_to_us(baseline.p999_ms.unwrap()),
        );
        let latency = Latency {
            samples: 5000,
            p50_us: p99 / 2,
            p99_us: p99 * 5 / 4,
            p999_us: p999,
        };
        let d = production_drift(baseline, &latency).unwrap();
        assert!(d.drift, "p99 +25 % on a stable segment drifts");
        assert_eq!(d.drift_pct, Some(25.0));
        let t = AlertThresholds::default();
        let few = Latency {
            samples: 999,
            ..latency
        };
        let verdicts = |l: &Latency| {
            evaluate_segment(&t, &Counts::default(), &Counts::default(), Some((&d, l)))
        };
        assert!(verdicts(&few).is_empty(), "below 1 000 samples no verdict");
        assert!(verdicts(&latency)[0].firing);
        assert!(production_drift(baseline, &Latency::default()).is_none());
        // A p999 above the timeout (inventory: p999 150 ms, timeout 44 ms) is not compared:
        // production's successful attempts never reach it.
        let inventory = computed
            .segments
            .iter()
            .find(|b| b.id == "order->inventory")
            .unwrap();
        assert!(inventory.p999_ms.unwrap() > inventory.timeout_ms as f64);
        let capped = Latency {
            samples: 5000,
            p50_us: 20_000,
            p99_us: 40_000,
            p999_us: 44_000,
        };
        let d = production_drift(inventory, &capped).unwrap();
        assert_eq!(d.entries.len(), 1, "{d:?}");
        assert_eq!(d.entries[0].metric, crate::drift::Metric::P99);
        assert!(!d.drift);
    }
}
