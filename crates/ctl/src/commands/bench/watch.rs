//! `budgetctl bench watch`: fan-out latency and memory of Watch streams against a running
//! budgetd (loopback only: every stream is a real gRPC stream to the server at --grpc).

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use budget_agent::backoff::ReconnectBackoff;
use budget_core::example::CHECKOUT_RUN_A;
use budget_proto::v1::budget_control_client::BudgetControlClient;
use serde_json::{json, Value};
use tokio::sync::{Mutex, Notify};

use super::{connect, internal, metric, ms, percentile, rss, watch_request, Bench};
use crate::cli::WatchArgs;
use crate::output::print;
use crate::{Client, CtlError};

/// One round: the revision every stream must reach, how many have, and when the last did.
/// Arrivals cost one atomic add, so the client does not slow down what it measures.
#[derive(Default)]
struct Arrivals {
    target: AtomicI64,
    count: AtomicU32,
    last: Mutex<Option<Instant>>,
    notify: Notify,
    /// Watch calls that failed or whose stream ended, and the first one's status.
    ended: AtomicU32,
    first_end: std::sync::Mutex<Option<String>>,
    /// Watch calls refused `RESOURCE_EXHAUSTED` (the server's budget of calls not yet
    /// authenticated was full) and sent again.
    retried: AtomicU32,
}

impl Arrivals {
    fn ended(&self, why: String) {
        self.ended.fetch_add(1, Ordering::AcqRel);
        let mut first = self.first_end.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(why);
    }
}

/// How many times a Watch call refused by the server's budget of calls not yet authenticated
/// is sent again (the backoff's ceilings add up to about 35 s).
const REOPENS: u32 = 8;

pub(in crate::commands) async fn watch(
    args: WatchArgs,
    admin: &Client,
    json_out: bool,
) -> Result<(), CtlError> {
    let n = args.subscribers;
    let connections = args.connections.unwrap_or(n.div_ceil(1000)).min(n);
    let bench = Bench::new(admin, n).await?;
    let (tag, chain) = (&bench.tag, &bench.chain);
    let run_a: Value =
        serde_json::from_str(CHECKOUT_RUN_A).map_err(|e| internal("example run", e))?;
    let publish = |p999: u32| {
        let mut run = run_a.clone();
        run["segments"][2]["p999_ms"] = json!(p999);
        let bench = &bench;
        async move { bench.publish(&run).await }
    };
    let (first_revision, _, _) = publish(300).await?;
    let arrivals = Arc::new(Arrivals::default());
    arrivals.target.store(first_revision, Ordering::Release);

    let rss_before = rss(admin).await;
    eprintln!(
        "opening {n} Watch streams over {connections} connection(s) to {} …",
        args.grpc
    );
    let channels = connect(&args.grpc, admin, connections).await?;
    let opened = Instant::now();
    for i in 0..n {
        let mut client = BudgetControlClient::new(channels[(i % connections) as usize].clone());
        let (request, auth) = (watch_request(tag, i, chain), bench.agent_auth(i));
        let arrivals = arrivals.clone();
        tokio::spawn(async move {
            // A call refused because the server holds too many calls not yet authenticated (an
            // opening storm) is sent again after a jittered backoff, as agents do, up to
            // REOPENS times; other refusals (a token's stream limit) are reported.
            let (mut refusals, mut backoff) = (0u32, ReconnectBackoff::default());
            let resp = loop {
                let mut req = tonic::Request::new(request.clone());
                req.metadata_mut().insert("authorization", auth.clone());
                match client.watch(req).await {
                    Ok(resp) => break resp,
                    Err(status)
                        if status.code() == tonic::Code::ResourceExhausted
                            && status.message().contains("not yet authenticated")
                            && refusals < REOPENS =>
                    {
                        arrivals.retried.fetch_add(1, Ordering::AcqRel);
                        let wait = backoff.next_delay(|max| rand::random::<u64>() % (max + 1));
                        tokio::time::sleep(wait).await;
                        refusals += 1;
                    }
                    Err(status) => return arrivals.ended(format!("a Watch call failed: {status}")),
                }
            };
            let mut stream = resp.into_inner();
            let mut counted = 0;
            loop {
                let update = match stream.message().await {
                    Ok(Some(update)) => update,
                    Ok(None) => return arrivals.ended("a Watch stream ended".into()),
                    Err(status) => {
                        return arrivals.ended(format!("a Watch stream failed: {status}"))
                    }
                };
                let target = arrivals.target.load(Ordering::Acquire);
                if update.revision >= target && counted < target {
                    counted = target;
                    if arrivals.count.fetch_add(1, Ordering::AcqRel) + 1 == n {
                        *arrivals.last.lock().await = Some(Instant::now());
                        arrivals.notify.notify_one();
                    }
                }
            }
        });
    }
    let wait_all = |limit: Duration| {
        let arrivals = arrivals.clone();
        async move {
            let revision = arrivals.target.load(Ordering::Acquire);
            match tokio::time::timeout(limit, arrivals.notify.notified()).await {
                Ok(()) => Ok(arrivals
                    .last
                    .lock()
                    .await
                    .take()
                    .unwrap_or_else(Instant::now)),
                Err(_) => {
                    let got = arrivals.count.load(Ordering::Acquire);
                    let ended = arrivals.ended.load(Ordering::Acquire);
                    let why = match arrivals
                        .first_end
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .as_deref()
                    {
                        Some(first) => {
                            format!(" ({ended} calls failed or ended; the first: {first})")
                        }
                        None => String::new(),
                    };
                    Err(internal(
                        "timeout",
                        format!(
                            "only {got} of {n} streams got revision {revision} within {limit:?}{why}"
                        ),
                    ))
                }
            }
        }
    };
    wait_all(Duration::from_secs(120)).await?;
    let open_time = opened.elapsed();
    let retried = arrivals.retried.load(Ordering::Acquire);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rss_after = rss(admin).await;
    let per_stream_at = |rss: Option<u64>| match (rss_before, rss) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b) as f64 / n as f64),
        _ => None,
    };
    let per_stream = per_stream_at(rss_after);
    eprintln!(
        "all {n} streams hold the snapshot after {open_time:?}; timing {} publications …",
        args.rounds
    );
    // What the opening storm freed stays resident until the allocator gives it back (seconds).
    let rss_settled = if args.settle > 0 {
        tokio::time::sleep(Duration::from_secs(args.settle.into())).await;
        rss(admin).await
    } else {
        None
    };
    let per_stream_settled = per_stream_at(rss_settled);

    // From before the approve request (commit and first deliveries included), and from its
    // response (what the server does after answering).
    let mut times = Vec::new();
    let mut after_response = Vec::new();
    let mut approvals = Vec::new();
    let cpu_before = metric(admin, "process_cpu_seconds_total").await;
    for round in 0..args.rounds {
        // Alternate payment p999 between 390 and 300 ms: ±30 %, drift every time.
        let p999 = if round % 2 == 0 { 390 } else { 300 };
        // The next revision is the last one + 1 on a quiet server; arm the round before publishing.
        arrivals.count.store(0, Ordering::Release);
        arrivals.target.fetch_add(1, Ordering::AcqRel);
        let (revision, sent, answered) = publish(p999).await?;
        approvals.push(answered - sent);
        if revision != arrivals.target.load(Ordering::Acquire) {
            return Err(internal("bench", format!("another publication interleaved (got revision {revision}); run the benchmark on a quiet server")));
        }
        let last = wait_all(Duration::from_secs(60)).await?;
        times.push(last.saturating_duration_since(sent));
        after_response.push(last.saturating_duration_since(answered));
    }
    // Each round's upload and approve are in it too: an upper bound of the server's CPU per
    // delivery, settled 1.5 s after the last round so the fleet flush is counted.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cpu_after = metric(admin, "process_cpu_seconds_total").await;
    let deliveries = f64::from(args.rounds) * n as f64;
    let cpu_per_delivery_us = match (cpu_before, cpu_after) {
        (Some(b), Some(a)) if deliveries > 0.0 => Some((a - b).max(0.0) * 1e6 / deliveries),
        _ => None,
    };
    times.sort();
    after_response.sort();
    approvals.sort();
    let (r50, r99) = (
        ms(percentile(&after_response, 50.0)),
        ms(percentile(&after_response, 99.0)),
    );
    let approve_ms = |p: f64| percentile(&approvals, p).as_secs_f64() * 1000.0;
    let (p50, p99, max) = (
        percentile(&times, 50.0),
        percentile(&times, 99.0),
        times.last().copied().unwrap_or_default(),
    );
    let result = json!({
        "subscribers": n,
        "connections": connections,
        "rounds": args.rounds,
        "open_all_ms": open_time.as_secs_f64() * 1000.0,
        "watch_calls_retried": retried,
        "approve_ms": {"p50": approve_ms(50.0), "p99": approve_ms(99.0)},
        "time_to_all_ms": {"p50": ms(p50), "p99": ms(p99), "max": ms(max)},
        "after_response_ms": {"p50": r50, "p99": r99},
        "server_cpu_per_delivery_us": cpu_per_delivery_us,
        "server_rss_bytes": {"before": rss_before, "after": rss_after, "settled": rss_settled},
        "server_rss_per_stream_bytes": per_stream,
        "settle_s": args.settle,
        "server_rss_per_stream_settled_bytes": per_stream_settled,
        "chain": chain,
    });
    if json_out {
        print(&serde_json::to_string_pretty(&result).unwrap_or_default());
    } else {
        print(&format!(
            "streams: {n} over {connections} connection(s), opened in {:.1} s \
             ({retried} Watch calls refused RESOURCE_EXHAUSTED and sent again); rounds: {}\n\
             approve call (request sent to response, durable commit included): p50 {:.1} ms, p99 {:.1} ms\n\
             time from approve request sent to all streams: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n\
             time from approve response to all streams: p50 {r50:.1} ms, p99 {r99:.1} ms\n\
             server CPU per delivery (uploads and approvals included): {}\n\
             server memory per idle stream: {}",
            open_time.as_secs_f64(),
            args.rounds,
            approve_ms(50.0),
            approve_ms(99.0),
            ms(p50),
            ms(p99),
            ms(max),
            cpu_per_delivery_us.map_or(
                "unknown (no process_cpu_seconds_total in /metrics)".into(),
                |us| format!("{us:.1} µs")
            ),
            per_stream.map_or(
                "unknown (no process_resident_memory_bytes in /metrics)".into(),
                |b| format!("{:.1} KiB", b / 1024.0)
            ),
        ));
        if args.settle > 0 {
            print(&format!(
                "server memory per idle stream {} s later: {}",
                args.settle,
                per_stream_settled.map_or(
                    "unknown (no process_resident_memory_bytes in /metrics)".into(),
                    |b| format!("{:.1} KiB", b / 1024.0)
                ),
            ));
        }
    }
    Ok(())
}
