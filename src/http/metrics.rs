//! Request logging and Prometheus metrics (`/metrics`, text exposition format).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use tracing::Instrument as _;

use crate::state::AppState;

/// `(method, route, status)`.
type RequestKey = (String, String, u16);
/// Request key → (count, total seconds).
static REQUESTS: LazyLock<Mutex<BTreeMap<RequestKey, (u64, f64)>>> =
    LazyLock::new(Default::default);

/// The `method` label: a standard method's name, or `other`, so a client cannot add label
/// values (and memory) with made-up methods.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// Logs every request once and counts it by route template and status.
pub async fn track(req: Request, next: Next) -> Response {
    let method = method_label(req.method()).to_owned();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let path = req.uri().path().to_owned();
    let start = Instant::now();
    // The span links this request's logs with the service and store work it causes.
    let span = tracing::info_span!("http", %method, route = %route);
    let response = next.run(req).instrument(span.clone()).await;
    let took = start.elapsed();
    let elapsed = took.as_secs_f64();
    let status = response.status().as_u16();
    crate::observe::http_request(&method, &route, took);
    span.in_scope(
        || tracing::info!(%method, %path, status, ms = (elapsed * 1000.0).round(), "request"),
    );
    if let Ok(mut map) = REQUESTS.lock() {
        let e = map.entry((method, route, status)).or_insert((0, 0.0));
        e.0 += 1;
        e.1 += elapsed;
    }
    response
}

/// A gauge `name` with one line per `state` label value.
fn gauge_by_state(out: &mut String, name: &str, help: &str, states: &[(&str, usize)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (state, value) in states {
        let _ = writeln!(out, "{name}{{state=\"{state}\"}} {value}");
    }
}

pub async fn render(State(state): State<AppState>) -> Response {
    let mut out = String::new();
    out.push_str("# HELP budgetd_http_requests_total HTTP requests by route and status.\n");
    out.push_str("# TYPE budgetd_http_requests_total counter\n");
    let snapshot = REQUESTS.lock().map(|m| m.clone()).unwrap_or_default();
    for ((method, route, status), (count, _)) in &snapshot {
        let _ = writeln!(out, "budgetd_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {count}");
    }
    out.push_str("# HELP budgetd_http_request_seconds_total Time spent answering requests.\n");
    out.push_str("# TYPE budgetd_http_request_seconds_total counter\n");
    for ((method, route, status), (_, secs)) in &snapshot {
        let _ = writeln!(out, "budgetd_http_request_seconds_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {secs}");
    }
    out.push_str("# HELP budgetd_watch_streams Open Watch streams on this replica.\n# TYPE budgetd_watch_streams gauge\n");
    let _ = writeln!(out, "budgetd_watch_streams {}", state.fleet.open_streams());
    let reports = state.reports.turns.load();
    gauge_by_state(
        &mut out,
        "budgetd_reports_decoding",
        "Agents' Reports on this replica decoding their histograms (running) or waiting for a turn (waiting).",
        &[("running", reports.running), ("waiting", reports.waiting)],
    );
    crate::observe::render(&mut out);
    let gauges = crate::service::admin::gauges(&state).await;
    let pool = gauges.pool;
    gauge_by_state(
        &mut out,
        "budgetd_db_pool_connections",
        "Database pool connections by state.",
        &[
            ("idle", pool.idle as usize),
            ("in_use", pool.size.saturating_sub(pool.idle) as usize),
        ],
    );
    if let Some(rss) = resident_memory_bytes() {
        out.push_str("# HELP process_resident_memory_bytes Resident memory of this process.\n# TYPE process_resident_memory_bytes gauge\n");
        let _ = writeln!(out, "process_resident_memory_bytes {rss}");
    }
    if let Some(cpu) = cpu_seconds() {
        out.push_str("# HELP process_cpu_seconds_total User and system CPU time of this process.\n# TYPE process_cpu_seconds_total counter\n");
        let _ = writeln!(out, "process_cpu_seconds_total {cpu}");
    }
    if let Some((pending, oldest)) = gauges.archive_backlog {
        out.push_str("# HELP budgetd_archive_pending Archive uploads waiting in the outbox.\n# TYPE budgetd_archive_pending gauge\n");
        let _ = writeln!(out, "budgetd_archive_pending {pending}");
        let age = oldest
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
            .map_or(0.0, |t| {
                (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                    .num_milliseconds()
                    .max(0) as f64
                    / 1000.0
            });
        out.push_str("# HELP budgetd_archive_oldest_pending_seconds Age of the oldest waiting archive upload.\n# TYPE budgetd_archive_oldest_pending_seconds gauge\n");
        let _ = writeln!(out, "budgetd_archive_oldest_pending_seconds {age}");
    }
    if let Some(chains) = gauges.chains {
        out.push_str("# HELP budgetd_chains Chains known to this control plane.\n# TYPE budgetd_chains gauge\n");
        let _ = writeln!(out, "budgetd_chains {}", chains.len());
        out.push_str("# HELP budgetd_drafts Draft baselines waiting for a decision.\n# TYPE budgetd_drafts gauge\n");
        for c in &chains {
            let _ = writeln!(out, "budgetd_drafts{{chain=\"{}\"}} {}", c.name, c.drafts);
        }
        out.push_str("# HELP budgetd_revision Latest publication revision per chain.\n# TYPE budgetd_revision gauge\n");
        for c in chains.iter().filter(|c| c.revision.is_some()) {
            let _ = writeln!(
                out,
                "budgetd_revision{{chain=\"{}\"}} {}",
                c.name,
                c.revision.unwrap_or_default()
            );
        }
    }
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

/// utime + stime from /proc (Linux), in seconds; `None` elsewhere. /proc counts in clock ticks
/// of USER_HZ, which Linux fixes at 100 for this interface.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// VmRSS from /proc (Linux); `None` elsewhere.
fn resident_memory_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
