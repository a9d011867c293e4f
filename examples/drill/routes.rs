//! The services' HTTP handlers: the gateway's entry, order's calls, the leaves' latency
//! tables, `/stats` and `/flush`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use budget_agent::CallError;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::counters::{Report, Stats};
use crate::services::{
    inherited, key_of, lock, status_for, unix_us, CallInfo, Downstream, Role, Service,
    GATEWAY_POOL, ORDER_CALLS, SENT_HEADER,
};

/// Releases the gateway's pool slot count when a request ends (or is dropped).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The entry: `POST /checkout` (optionally with an `idempotency-key`, the order id).
pub(crate) async fn checkout(State(svc): State<Arc<Service>>, headers: HeaderMap) -> Response {
    let Ok(_permit) = svc.pool.clone().try_acquire_owned() else {
        let body = json!({"status": "error", "error": "gateway pool full"});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    };
    let now = svc.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    let _in_flight = InFlight(&svc.in_flight);
    svc.max_in_flight.fetch_max(now, Ordering::Relaxed);
    // The root segment is not idempotent: the agent gets no key; the order id goes on to
    // order, which uses it as the key of its idempotent calls.
    let url = match key_of(&headers) {
        Some(id) => svc.url("order", &format!("/order?order_id={id}")),
        None => svc.url("order", "/order"),
    };
    let (result, info) = svc.call("gateway->order", None, None, &url).await;
    let (status, body) = match result {
        Ok(order) => (
            StatusCode::OK,
            json!({"status": "ok", "held_ms": info.ms, "order": order}),
        ),
        Err(CallError::Failed(Downstream::Status(_, order)))
            if order["failed"]["segment"] == "order->payment" =>
        {
            // 兜底: the order is taken, payment is settled later under its pay_no.
            (
                StatusCode::OK,
                json!({"status": "fallback", "held_ms": info.ms, "order": order}),
            )
        }
        Err(e) => {
            let status = match &e {
                CallError::DeadlineExceeded { .. } | CallError::BudgetExhausted => {
                    StatusCode::GATEWAY_TIMEOUT
                }
                _ => StatusCode::BAD_GATEWAY,
            };
            let order = match e {
                CallError::Failed(Downstream::Status(_, order)) => order,
                _ => Value::Null,
            };
            (
                status,
                json!({"status": "error", "held_ms": info.ms, "call": info, "order": order}),
            )
        }
    };
    (status, Json(body)).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct OrderQuery {
    order_id: Option<String>,
}

/// `POST /order?order_id=…`: inventory, payment and user, by the live config's stages.
pub(crate) async fn order(
    State(svc): State<Arc<Service>>,
    Query(q): Query<OrderQuery>,
    headers: HeaderMap,
) -> Response {
    let within = inherited(&headers);
    let order_id = q.order_id.filter(|k| !k.is_empty());
    let snapshot = svc.agent.snapshot();
    // Stage groups: numbered stages in order (same number → parallel), then each call
    // without a stage on its own, in the topology's order.
    let mut groups: BTreeMap<(u64, usize), Vec<usize>> = BTreeMap::new();
    for (i, (segment, _)) in ORDER_CALLS.iter().enumerate() {
        let key = match snapshot.segment(segment).and_then(|s| s.stage) {
            Some(stage) => (u64::from(stage), 0),
            None => (u64::MAX, i),
        };
        groups.entry(key).or_default().push(i);
    }
    let mut calls: Vec<CallInfo> = Vec::new();
    let mut failed: Option<CallInfo> = None;
    for group in groups.values() {
        let runs = group.iter().map(|&i| {
            let (segment, callee) = ORDER_CALLS[i];
            let key = match callee {
                "inventory" => order_id.clone(),
                "payment" => order_id.as_ref().map(|k| format!("pay-{k}")),
                _ => None,
            };
            let url = svc.url(callee, "/call");
            let svc = svc.clone();
            async move { svc.call(segment, key.as_deref(), within, &url).await.1 }
        });
        for info in futures_util::future::join_all(runs).await {
            // user is a cache read: order goes on without it (degraded).
            if !info.ok && info.segment != "order->user" && failed.is_none() {
                failed = Some(info.clone());
            }
            calls.push(info);
        }
        if failed.is_some() {
            break;
        }
    }
    match failed {
        None => (StatusCode::OK, Json(json!({"ok": true, "calls": calls}))).into_response(),
        Some(f) => (
            status_for(f.cause.as_deref()),
            Json(json!({"ok": false, "failed": f, "calls": calls})),
        )
            .into_response(),
    }
}

/// Per-role latency table (ms, as the caller sees it), nearest-rank p99 / p999 equal to run
/// A's: 98 % of the ranks spread over a body, then a plateau at p99 and a tail at p999. The
/// plateau is wide enough to hold the p99 of successful attempts too (killed attempts are
/// not in that histogram; inventory's are retried and draw again). Inventory's and user's
/// tails are past their timeouts (150 > 44, 20 > 9 ms: run A's own numbers), so every call
/// there is killed: 0.2 % of the ranks, the least that keeps the table's p999; payment's
/// (300 < 390 ms) is measured, 0.5 %. user (a cache read) answers in 1–3 ms, its plateau
/// 2 ms under run A's 8 ms: its 9 ms timeout (p99 × 1.1) leaves no room for the way back
/// on a busy host otherwise.
pub(crate) fn latency_ms(role: Role, n: u64) -> u64 {
    let (lo, hi, p99, p999, tail) = match role {
        Role::Inventory => (5, 30, 40, 150, 998),
        Role::Payment => (20, 180, 210, 300, 995),
        _ => (1, 3, 6, 20, 998),
    };
    // A stride through the 1000 ranks: any stretch of calls spreads over the whole table.
    let rank = (n * 379) % 1000;
    if rank < 980 {
        lo + (hi - lo) * rank / 979
    } else if rank < tail {
        p99
    } else {
        p999
    }
}

/// A leaf (`inventory`, `payment`, `user`): answers after its table's latency, or gives up at
/// the caller's deadline.
pub(crate) async fn leaf(State(svc): State<Arc<Service>>, headers: HeaderMap) -> Response {
    let n = svc.drawn.fetch_add(1, Ordering::Relaxed);
    // Answer at sent + latency, less 1 ms for the way back (timer rounding included).
    let target_ms = latency_ms(svc.role, n);
    let target_us = target_ms * 1000;
    let sent_us: Option<u64> = headers
        .get(SENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let spent_us = sent_us.map_or(0, |sent| unix_us().saturating_sub(sent));
    let wait_us = target_us.saturating_sub(spent_us + 1000);
    let work = tokio::time::sleep(Duration::from_micros(wait_us));
    let gave_up = async {
        match inherited(&headers) {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = work => {
            svc.served.fetch_add(1, Ordering::Relaxed);
            (StatusCode::OK, Json(json!({"ok": true, "target_ms": target_ms}))).into_response()
        }
        () = gave_up => {
            svc.cancelled.fetch_add(1, Ordering::Relaxed);
            (StatusCode::GATEWAY_TIMEOUT, Json(json!({"ok": false, "error": "caller's deadline passed"}))).into_response()
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct StatsQuery {
    /// Reset the gateway's in-flight high-water mark after reading it.
    #[serde(default)]
    reset: bool,
}

/// What this service and its agent counted (see [`Stats`]).
pub(crate) async fn stats(
    State(svc): State<Arc<Service>>,
    Query(q): Query<StatsQuery>,
) -> Json<Stats> {
    let report = svc.agent.report_stats();
    let max_in_flight = if q.reset {
        svc.max_in_flight
            .swap(svc.in_flight.load(Ordering::Relaxed), Ordering::Relaxed)
    } else {
        svc.max_in_flight.load(Ordering::Relaxed)
    };
    Json(Stats {
        role: svc.role,
        revision: svc.agent.revision(),
        report: Report {
            pending_windows: report.pending_windows as u64,
            sent_windows: report.sent_windows,
            dropped_windows: report.dropped_windows,
            failed_reports: report.failed_reports,
        },
        own: lock(&svc.own).clone(),
        agent: svc.recorder.by_segment(),
        served: svc.served.load(Ordering::Relaxed),
        cancelled: svc.cancelled.load(Ordering::Relaxed),
        in_flight: svc.in_flight.load(Ordering::Relaxed),
        max_in_flight,
        pool: GATEWAY_POOL,
    })
}

/// `POST /flush`: the agent sends the window in progress now and waits for the answer.
pub(crate) async fn flush(State(svc): State<Arc<Service>>) -> Response {
    match svc.agent.flush_report().await {
        Ok(windows) => (StatusCode::OK, Json(json!({"windows": windows}))).into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": e.to_string()})),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables' nearest-rank p99 / p999 over one stride period are run A's.
    #[test]
    fn latency_tables_have_run_a_percentiles() {
        for (role, p99, p999) in [
            (Role::Inventory, 40, 150),
            (Role::Payment, 210, 300),
            (Role::User, 6, 20),
        ] {
            let mut v: Vec<u64> = (0..1000).map(|n| latency_ms(role, n)).collect();
            v.sort_unstable();
            assert_eq!((v[989], v[998]), (p99, p999), "{role:?}");
        }
    }
}
