//! Counting what the drill compares: a segment's calls, attempts, retries by cause and
//! outcomes ([`Tally`]) from each source — budgetd's production view, the agents' metrics,
//! the services' own view — and everything counted at one moment ([`Checkpoint`]). A step's
//! figures are the difference of two checkpoints.

use std::collections::{BTreeMap, BTreeSet};

use budget_api::feedback::{Production, ProductionSegment};

use crate::counters::{AgentCounts, Stats};
use crate::services::Own;

/// A segment's counts, from any of the three sources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub attempts: u64,
    pub retries: BTreeMap<String, u64>,
    pub outcomes: BTreeMap<String, u64>,
}

fn nonzero(m: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    m.iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

fn minus_map(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let out = keys
        .into_iter()
        .map(|k| {
            let x = a.get(k).copied().unwrap_or(0);
            let y = b.get(k).copied().unwrap_or(0);
            (k.clone(), x.saturating_sub(y))
        })
        .collect();
    nonzero(&out)
}

impl Tally {
    pub fn from_server(s: &ProductionSegment) -> Self {
        Self {
            calls: s.calls,
            attempts: s.attempts,
            retries: nonzero(&s.retries),
            outcomes: nonzero(&s.outcomes),
        }
    }

    /// The agent's metrics: `calls` = Σ outcomes, `attempts` = calls − budget_exhausted +
    /// Σ retries (the agent's own invariant, crate docs of `Outcome`).
    pub fn from_agent(a: &AgentCounts) -> Self {
        let calls: u64 = a.outcomes.values().sum();
        let exhausted = a.outcomes.get("budget_exhausted").copied().unwrap_or(0);
        let retries: u64 = a.retries.values().sum();
        Self {
            calls,
            attempts: calls - exhausted + retries,
            retries: nonzero(&a.retries),
            outcomes: nonzero(&a.outcomes),
        }
    }

    /// What the service saw (no outcomes: those are the agent's verdicts).
    pub fn from_own(o: &Own) -> Self {
        Self {
            calls: o.calls,
            attempts: o.attempts,
            retries: nonzero(&o.retries),
            outcomes: BTreeMap::new(),
        }
    }

    pub fn plus(&self, other: &Self) -> Self {
        let mut retries = self.retries.clone();
        for (k, v) in &other.retries {
            *retries.entry(k.clone()).or_default() += v;
        }
        let mut outcomes = self.outcomes.clone();
        for (k, v) in &other.outcomes {
            *outcomes.entry(k.clone()).or_default() += v;
        }
        Self {
            calls: self.calls + other.calls,
            attempts: self.attempts + other.attempts,
            retries: nonzero(&retries),
            outcomes: nonzero(&outcomes),
        }
    }

    pub fn minus(&self, before: &Self) -> Self {
        Self {
            calls: self.calls - before.calls,
            attempts: self.attempts - before.attempts,
            retries: minus_map(&self.retries, &before.retries),
            outcomes: minus_map(&self.outcomes, &before.outcomes),
        }
    }

    pub fn retries(&self, cause: &str) -> u64 {
        self.retries.get(cause).copied().unwrap_or(0)
    }

    pub fn outcome(&self, o: &str) -> u64 {
        self.outcomes.get(o).copied().unwrap_or(0)
    }

    /// attempts / calls.
    pub fn amplification(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.attempts as f64 / self.calls as f64)
    }

    /// (deadline retries + deadline_exceeded calls) / attempts, as the server defines it.
    pub fn kill_rate(&self) -> Option<f64> {
        (self.attempts > 0).then(|| {
            (self.retries("deadline") + self.outcome("deadline_exceeded")) as f64
                / self.attempts as f64
        })
    }
}

/// Everything counted up to one moment, per segment.
#[derive(Debug, Clone, Default)]
pub struct Checkpoint {
    pub server: BTreeMap<String, Tally>,
    pub agent: BTreeMap<String, Tally>,
    pub own: BTreeMap<String, Tally>,
    pub production: Production,
    pub stats: BTreeMap<String, Stats>,
}

impl Checkpoint {
    pub fn delta(&self, before: &Self, segment: &str) -> Tally {
        let z = Tally::default();
        let now = self.server.get(segment).unwrap_or(&z);
        now.minus(before.server.get(segment).unwrap_or(&z))
    }

    /// What the services saw of `segment` since `before`.
    pub fn own_delta(&self, before: &Self, segment: &str) -> Tally {
        let z = Tally::default();
        let now = self.own.get(segment).unwrap_or(&z);
        now.minus(before.own.get(segment).unwrap_or(&z))
    }

    /// The samples `pick` gives of the services' own view of `segment` that are new since
    /// `before` (the lists only grow).
    pub fn new_samples(
        &self,
        before: &Self,
        segment: &str,
        pick: impl Fn(&Own) -> &Vec<f64>,
    ) -> Vec<f64> {
        let all = |c: &Self| -> Vec<f64> {
            c.stats
                .values()
                .filter_map(|s| s.own.get(segment))
                .flat_map(|o| pick(o).clone())
                .collect()
        };
        let (now, then) = (all(self), all(before));
        now[then.len().min(now.len())..].to_vec()
    }
}

/// No samples.
pub static NO_SAMPLES: Vec<f64> = Vec::new();

/// `0.0123` → `1.23 %`.
pub fn pct(x: f64) -> String {
    format!("{:.2} %", x * 100.0)
}

/// A figure with 3 decimals, `-` when there is none.
pub fn opt(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.3}"))
}

/// Nearest-rank quantile of ascending values (NaN for none), as budgetd computes its own.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `v` in ascending order.
pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}
