//! Process-wide counters and histograms behind `/metrics` (rendered by `http::metrics` in the
//! Prometheus text format). Recording is a few relaxed atomic adds (a short lock for the
//! per-route HTTP histograms), so it can sit on the delivery path of every Watch stream.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime};

/// Upper bounds (seconds) of every histogram's buckets; `+Inf` is implied.
pub const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// A histogram of seconds over [`BUCKETS`], lock-free.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Observations per bucket (not cumulative); the last one is `+Inf`.
    counts: [AtomicU64; BUCKETS.len() + 1],
    /// Sum of observations in nanoseconds.
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        self.observe_n(d, 1);
    }

    /// `n` observations of `d`.
    pub fn observe_n(&self, d: Duration, n: u64) {
        let secs = d.as_secs_f64();
        let at = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[at].fetch_add(n, Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos.saturating_mul(n), Relaxed);
    }

    /// The `_bucket`, `_sum` and `_count` lines of `name`; `labels` is `k="v",…` or empty.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Relaxed);
            let le = BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_owned(), |b| b.to_string());
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

static DELIVERY: LazyLock<Histogram> = LazyLock::new(Histogram::default);
static ACKS: AtomicU64 = AtomicU64::new(0);
static NACKS: AtomicU64 = AtomicU64::new(0);
static DRIFT_EVENTS: AtomicU64 = AtomicU64::new(0);
/// `(method, route)` → request durations.
type HttpHistograms = BTreeMap<(String, String), std::sync::Arc<Histogram>>;
static HTTP: LazyLock<Mutex<HttpHistograms>> = LazyLock::new(Default::default);

/// `streams` Watch streams were handed a chain published at `published` (wall clock, so a
/// publication made on another replica counts from when it was made), timed now.
pub fn delivered(published: SystemTime, streams: u64) {
    let d = SystemTime::now()
        .duration_since(published)
        .unwrap_or_default();
    DELIVERY.observe_n(d, streams);
}

/// An agent's ACK (`accepted`) or NACK was recorded.
pub fn acked(accepted: bool) {
    let counter = if accepted { &ACKS } else { &NACKS };
    counter.fetch_add(1, Relaxed);
}

static AGENT_CLAIMS: AtomicU64 = AtomicU64::new(0);
static AGENT_CLAIM_BATCHES: AtomicU64 = AtomicU64::new(0);

/// One batch of `claims` agent-id claims went to the store.
pub fn agent_claims(claims: usize) {
    AGENT_CLAIMS.fetch_add(claims as u64, Relaxed);
    AGENT_CLAIM_BATCHES.fetch_add(1, Relaxed);
}

/// A run upload drifted and opened a draft.
pub fn drift_event() {
    DRIFT_EVENTS.fetch_add(1, Relaxed);
}

/// Alerts firing now, by rule (set after each evaluation from the store, so every replica
/// shows the same).
static FIRING: LazyLock<Mutex<BTreeMap<String, u64>>> = LazyLock::new(Default::default);
/// Alert transitions made by this replica: (rule, `firing` | `resolved`) → count.
static TRANSITIONS: LazyLock<Mutex<BTreeMap<(String, &'static str), u64>>> =
    LazyLock::new(Default::default);
static REPORT_WINDOWS: AtomicU64 = AtomicU64::new(0);
static REPORT_WINDOWS_REFUSED: AtomicU64 = AtomicU64::new(0);
static REPORT_RESENDS_STORED_BEFORE: AtomicU64 = AtomicU64::new(0);
static REPORT_RESENDS_COUNTED: AtomicU64 = AtomicU64::new(0);

/// The alerts firing now, by rule.
pub fn alerts_firing(by_rule: BTreeMap<String, u64>) {
    if let Ok(mut m) = FIRING.lock() {
        *m = by_rule;
    }
}

/// This replica fired (`firing`) or resolved an alert of `rule`.
pub fn alert_transition(rule: &str, firing: bool) {
    let state = if firing { "firing" } else { "resolved" };
    if let Ok(mut m) = TRANSITIONS.lock() {
        *m.entry((rule.to_owned(), state)).or_default() += 1;
    }
}

/// A Report's windows: `accepted` merged, `refused` skipped (unknown segment, too late, …).
pub fn report_windows(accepted: u64, refused: u64) {
    REPORT_WINDOWS.fetch_add(accepted, Relaxed);
    REPORT_WINDOWS_REFUSED.fetch_add(refused, Relaxed);
}

/// Reports sent again by their agents at a commit: stored before (not counted again), or
/// counted now.
pub fn report_resends(stored_before: u64, counted: u64) {
    REPORT_RESENDS_STORED_BEFORE.fetch_add(stored_before, Relaxed);
    REPORT_RESENDS_COUNTED.fetch_add(counted, Relaxed);
}

/// An HTTP request on `route` (the route template) took `d`.
pub fn http_request(method: &str, route: &str, d: Duration) {
    let histogram = {
        let Ok(mut map) = HTTP.lock() else { return };
        map.entry((method.to_owned(), route.to_owned()))
            .or_default()
            .clone()
    };
    histogram.observe(d);
}

/// Parses a stored RFC 3339 time (a publication's `created_at`); the epoch when unreadable.
pub fn parse_time(rfc3339: &str) -> SystemTime {
    chrono::DateTime::parse_from_rfc3339(rfc3339).map_or(SystemTime::UNIX_EPOCH, |t| t.into())
}

/// Every metric of this module in the text exposition format.
pub fn render(out: &mut String) {
    out.push_str("# HELP budgetd_publish_delivery_seconds Time from a publication until it is handed to the connection of a Watch stream that already held the chain.\n# TYPE budgetd_publish_delivery_seconds histogram\n");
    DELIVERY.render(out, "budgetd_publish_delivery_seconds", "");
    out.push_str("# HELP budgetd_acks_total Agents' ACKs (config accepted).\n# TYPE budgetd_acks_total counter\n");
    let _ = writeln!(out, "budgetd_acks_total {}", ACKS.load(Relaxed));
    out.push_str("# HELP budgetd_nacks_total Agents' NACKs (config refused).\n# TYPE budgetd_nacks_total counter\n");
    let _ = writeln!(out, "budgetd_nacks_total {}", NACKS.load(Relaxed));
    out.push_str("# HELP budgetd_agent_claims_total Agent ids claimed for their tokens when a Watch opened (reconnects included).\n# TYPE budgetd_agent_claims_total counter\n");
    let _ = writeln!(
        out,
        "budgetd_agent_claims_total {}",
        AGENT_CLAIMS.load(Relaxed)
    );
    out.push_str("# HELP budgetd_agent_claim_batches_total Store round trips those claims took (claims are batched).\n# TYPE budgetd_agent_claim_batches_total counter\n");
    let _ = writeln!(
        out,
        "budgetd_agent_claim_batches_total {}",
        AGENT_CLAIM_BATCHES.load(Relaxed)
    );
    out.push_str("# HELP budgetd_drift_events_total Run uploads that drifted and opened a draft.\n# TYPE budgetd_drift_events_total counter\n");
    let _ = writeln!(
        out,
        "budgetd_drift_events_total {}",
        DRIFT_EVENTS.load(Relaxed)
    );
    out.push_str("# HELP budgetd_alerts_firing Alerts firing now, by rule.\n# TYPE budgetd_alerts_firing gauge\n");
    let firing = FIRING.lock().map(|m| m.clone()).unwrap_or_default();
    for rule in budget_core::feedback::Rule::ALL {
        let n = firing.get(rule.as_str()).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "budgetd_alerts_firing{{rule=\"{}\"}} {n}",
            rule.as_str()
        );
    }
    out.push_str("# HELP budgetd_alert_transitions_total Alerts this replica fired or resolved.\n# TYPE budgetd_alert_transitions_total counter\n");
    let transitions = TRANSITIONS.lock().map(|m| m.clone()).unwrap_or_default();
    for ((rule, state), n) in transitions {
        let _ = writeln!(
            out,
            "budgetd_alert_transitions_total{{rule=\"{rule}\",state=\"{state}\"}} {n}"
        );
    }
    out.push_str("# HELP budgetd_report_windows_total Agents' report windows merged into rollups (accepted) or skipped (refused).\n# TYPE budgetd_report_windows_total counter\n");
    let _ = writeln!(
        out,
        "budgetd_report_windows_total{{result=\"accepted\"}} {}",
        REPORT_WINDOWS.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "budgetd_report_windows_total{{result=\"refused\"}} {}",
        REPORT_WINDOWS_REFUSED.load(Relaxed)
    );
    out.push_str("# HELP budgetd_report_resends_total Reports their agents sent again after a lost answer, and the reports of agents that sent a stored report as new (looked for alike): stored before (not counted again) or counted at this commit.\n# TYPE budgetd_report_resends_total counter\n");
    let _ = writeln!(
        out,
        "budgetd_report_resends_total{{result=\"stored_before\"}} {}",
        REPORT_RESENDS_STORED_BEFORE.load(Relaxed)
    );
    let _ = writeln!(
        out,
        "budgetd_report_resends_total{{result=\"counted\"}} {}",
        REPORT_RESENDS_COUNTED.load(Relaxed)
    );
    out.push_str("# HELP budgetd_http_request_duration_seconds HTTP request duration by route.\n# TYPE budgetd_http_request_duration_seconds histogram\n");
    let routes: Vec<_> = HTTP
        .lock()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    for ((method, route), histogram) in routes {
        histogram.render(
            out,
            "budgetd_http_request_duration_seconds",
            &format!("method=\"{method}\",route=\"{route}\""),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_with_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(20));
        h.observe(Duration::from_secs(60));
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.001\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.025\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"10\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 3\n"), "{out}");
        assert!(out.contains("x_sum{a=\"b\"} 60.0205\n"), "{out}");
    }

    /// A pass over a connection's streams records its deliveries of one publication at once.
    #[test]
    fn observations_recorded_together_count_each() {
        let h = Histogram::default();
        h.observe_n(Duration::from_millis(3), 100);
        h.observe(Duration::from_millis(30));
        let mut out = String::new();
        h.render(&mut out, "x", "");
        assert!(out.contains("x_bucket{le=\"0.0025\"} 0\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.005\"} 100\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.05\"} 101\n"), "{out}");
        assert!(out.contains("x_count 101\n"), "{out}");
        assert!(out.contains("x_sum 0.33\n"), "{out}");
    }
}
