//! What a service and its agent counted: the `/stats` answer and the in-memory `metrics`
//! recorder reading the agent's counters.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::services::{lock, Own, Role};

/// `GET /stats` of a service.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    pub role: Role,
    /// The agent's live revision.
    pub revision: i64,
    pub report: Report,
    /// Per segment, as the service saw its calls.
    pub own: BTreeMap<String, Own>,
    /// Per segment, as its agent counted them (`budget_agent_*` metrics).
    pub agent: BTreeMap<String, AgentCounts>,
    pub served: u64,
    pub cancelled: u64,
    pub in_flight: usize,
    pub max_in_flight: usize,
    pub pool: usize,
}

/// The agent's `report_stats`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub pending_windows: u64,
    pub sent_windows: u64,
    pub dropped_windows: u64,
    pub failed_reports: u64,
}

/// One segment's `budget_agent_calls_total` by outcome and `budget_agent_retries_total` by
/// cause.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentCounts {
    pub outcomes: BTreeMap<String, u64>,
    pub retries: BTreeMap<String, u64>,
}

type Series = (String, Vec<(String, String)>);

/// A `metrics` recorder keeping every counter in memory (gauges and histograms are dropped):
/// the agent's own counts, read back by `/stats`.
#[derive(Default)]
pub(crate) struct Recorder {
    counters: Mutex<BTreeMap<Series, Arc<AtomicU64>>>,
}

impl Recorder {
    pub(crate) fn install() -> Arc<Self> {
        let recorder = Arc::new(Self::default());
        if metrics::set_global_recorder(recorder.clone()).is_err() {
            eprintln!("a metrics recorder was already installed; agent counts will read 0");
        }
        recorder
    }

    pub(crate) fn by_segment(&self) -> BTreeMap<String, AgentCounts> {
        let mut out: BTreeMap<String, AgentCounts> = BTreeMap::new();
        for ((name, labels), value) in lock(&self.counters).iter() {
            let label = |k: &str| {
                labels
                    .iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let n = value.load(Ordering::Relaxed);
            let entry = out.entry(label("segment")).or_default();
            match name.as_str() {
                "budget_agent_calls_total" => {
                    entry.outcomes.insert(label("outcome"), n);
                }
                "budget_agent_retries_total" => {
                    entry.retries.insert(label("cause"), n);
                }
                _ => {}
            }
        }
        out
    }
}

impl metrics::Recorder for Recorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        let counter = lock(&self.counters)
            .entry((key.name().to_owned(), labels))
            .or_default()
            .clone();
        metrics::Counter::from_arc(counter)
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}
