//! `budgetctl bench watch`: fan-out latency and memory of Watch streams against a running
//! budgetd (loopback only: every stream is a real gRPC stream to the server at --grpc).

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
use budget_proto::v1::budget_control_client::BudgetControlClient;
use budget_proto::v1::WatchRequest;
use serde_json::{json, Value};
use tokio::sync::{Mutex, Notify};
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::cli::WatchArgs;
use crate::output::print;
use crate::{Client, CtlError};

/// TLS for an `https://` --grpc: the --ca-cert file's CAs, or the system's roots.
fn grpc_tls(endpoint: Endpoint, admin: &Client) -> Result<Endpoint, CtlError> {
    if endpoint.uri().scheme_str() != Some("https") {
        return Ok(endpoint);
    }
    let tls = match admin.ca_cert() {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| {
                CtlError::Input(format!("cannot read --ca-cert {}: {e}", path.display()))
            })?;
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
        }
        None => ClientTlsConfig::new().with_native_roots(),
    };
    endpoint
        .tls_config(tls)
        .map_err(|e| CtlError::Input(format!("TLS for --grpc: {e}")))
}

/// Watch streams opened with one agent token (below budgetd's default per-token limit).
const STREAMS_PER_TOKEN: u32 = 1000;

fn internal(what: &str, e: impl std::fmt::Display) -> CtlError {
    CtlError::Internal(format!("{what}: {e}"))
}

/// One round: the revision every stream must reach, how many have, and when the last did.
/// Arrivals cost one atomic add, so the client does not slow down what it measures.
#[derive(Default)]
struct Arrivals {
    target: AtomicI64,
    count: AtomicU32,
    last: Mutex<Option<Instant>>,
    notify: Notify,
}

/// A sample of the server's `/metrics`, e.g. `process_resident_memory_bytes`.
async fn metric(client: &Client, name: &str) -> Option<f64> {
    let text = client.get_text("metrics").await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

async fn rss(client: &Client) -> Option<u64> {
    metric(client, "process_resident_memory_bytes")
        .await
        .map(|b| b as u64)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(super) async fn watch(args: WatchArgs, admin: &Client, json_out: bool) -> Result<(), CtlError> {
    let n = args.subscribers;
    let connections = args.connections.unwrap_or(n.div_ceil(1000)).min(n);
    let tag = format!("{:08x}", rand::random::<u32>());
    let chain = format!("bench-{tag}");

    let token = |role: &'static str, name: String| {
        let admin = admin.clone();
        async move {
            let v = admin
                .post(
                    admin.url(&["tokens"]),
                    Some(json!({"role": role, "name": name}).to_string().into_bytes()),
                )
                .await?;
            Ok::<String, CtlError>(v["token"].as_str().unwrap_or_default().to_owned())
        }
    };
    let uploader = admin.with_token(&token("uploader", format!("bench-uploader-{tag}")).await?);
    let approver = admin.with_token(&token("approver", format!("bench-approver-{tag}")).await?);
    // budgetd limits the Watch streams of one token (agents.max_streams_per_token, default
    // 1024): one agent token per STREAMS_PER_TOKEN streams.
    let mut agent_auth = Vec::new();
    for k in 0..n.div_ceil(STREAMS_PER_TOKEN) {
        let secret = token("agent", format!("bench-agent-{tag}-{k}")).await?;
        agent_auth.push(
            MetadataValue::try_from(format!("Bearer {secret}"))
                .map_err(|e| internal("token", e))?,
        );
    }

    uploader
        .put(
            uploader.url(&["chains", &chain, "topology"]),
            CHECKOUT_TOPOLOGY.as_bytes().to_vec(),
        )
        .await?;
    let run_a: Value =
        serde_json::from_str(CHECKOUT_RUN_A).map_err(|e| internal("example run", e))?;
    let publish = |p999: u32| {
        let (uploader, approver, chain, mut run) = (
            uploader.clone(),
            approver.clone(),
            chain.clone(),
            run_a.clone(),
        );
        async move {
            run["segments"][2]["p999_ms"] = json!(p999);
            let up = uploader
                .post(
                    uploader.url(&["chains", &chain, "runs"]),
                    Some(run.to_string().into_bytes()),
                )
                .await?;
            let id = up["baseline_id"]
                .as_str()
                .ok_or_else(|| internal("upload", "the run opened no draft"))?
                .to_owned();
            let sent = Instant::now();
            let v = approver
                .post(approver.url(&["baselines", &id, "approve"]), None)
                .await?;
            let done = Instant::now();
            let revision = v["revision"]
                .as_i64()
                .ok_or_else(|| internal("approve", "no revision"))?;
            Ok::<(i64, Instant, Instant), CtlError>((revision, sent, done))
        }
    };
    let (first_revision, _, _) = publish(300).await?;
    let arrivals = Arc::new(Arrivals::default());
    arrivals.target.store(first_revision, Ordering::Release);

    let rss_before = rss(admin).await;
    eprintln!(
        "opening {n} Watch streams over {connections} connection(s) to {} …",
        args.grpc
    );
    let endpoint = Endpoint::from_shared(args.grpc.clone())
        .map_err(|e| CtlError::Input(format!("bad --grpc {}: {e}", args.grpc)))?
        .initial_connection_window_size(Some(32 * 1024 * 1024))
        .initial_stream_window_size(Some(256 * 1024))
        .tcp_nodelay(true);
    let endpoint = grpc_tls(endpoint, admin)?;
    let mut channels = Vec::new();
    for _ in 0..connections {
        let ch: Channel = endpoint
            .connect()
            .await
            .map_err(|e| CtlError::Unreachable {
                url: args.grpc.clone(),
                reason: e.to_string(),
            })?;
        channels.push(ch);
    }
    let opened = Instant::now();
    for i in 0..n {
        let mut client = BudgetControlClient::new(channels[(i % connections) as usize].clone());
        let mut req = tonic::Request::new(WatchRequest {
            agent_id: format!("bench-{tag}-{i}"),
            service: "bench".into(),
            chains: vec![chain.clone()],
            known_revision: 0,
            labels: Default::default(),
            client: concat!("budgetctl-bench/", env!("CARGO_PKG_VERSION")).into(),
            known_chains: Vec::new(),
        });
        req.metadata_mut().insert(
            "authorization",
            agent_auth[(i / STREAMS_PER_TOKEN) as usize].clone(),
        );
        let arrivals = arrivals.clone();
        tokio::spawn(async move {
            let Ok(resp) = client.watch(req).await else {
                return;
            };
            let mut stream = resp.into_inner();
            let mut counted = 0;
            while let Ok(Some(update)) = stream.message().await {
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
                    Err(internal(
                        "timeout",
                        format!(
                            "only {got} of {n} streams got revision {revision} within {limit:?}"
                        ),
                    ))
                }
            }
        }
    };
    wait_all(Duration::from_secs(120)).await?;
    let open_time = opened.elapsed();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rss_after = rss(admin).await;
    let per_stream = match (rss_before, rss_after) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b) as f64 / n as f64),
        _ => None,
    };
    eprintln!(
        "all {n} streams hold the snapshot after {open_time:?}; timing {} publications …",
        args.rounds
    );

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
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
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
        "approve_ms": {"p50": approve_ms(50.0), "p99": approve_ms(99.0)},
        "time_to_all_ms": {"p50": ms(p50), "p99": ms(p99), "max": ms(max)},
        "after_response_ms": {"p50": r50, "p99": r99},
        "server_cpu_per_delivery_us": cpu_per_delivery_us,
        "server_rss_bytes": {"before": rss_before, "after": rss_after},
        "server_rss_per_stream_bytes": per_stream,
        "chain": chain,
    });
    if json_out {
        print(&serde_json::to_string_pretty(&result).unwrap_or_default());
    } else {
        print(&format!(
            "streams: {n} over {connections} connection(s); rounds: {}\n\
             approve call (request sent to response, durable commit included): p50 {:.1} ms, p99 {:.1} ms\n\
             time from approve request sent to all streams: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n\
             time from approve response to all streams: p50 {r50:.1} ms, p99 {r99:.1} ms\n\
             server CPU per delivery (uploads and approvals included): {}\n\
             server memory per idle stream: {}",
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
    }
    Ok(())
}
