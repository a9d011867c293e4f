//! Report ingestion benchmark (issue 12): how many `BudgetControl/Report` calls a running
//! budgetd stores per second, and the server CPU each costs.
//!
//! ```sh
//! cargo build --release --bins --example report_bench
//! TOK=$(openssl rand -hex 32)
//! BUDGETD_ADMIN_TOKEN=$TOK target/release/budgetd serve --data-dir "$(mktemp -d)" \
//!   --http 127.0.0.1:18080 --grpc 127.0.0.1:15051 &
//! target/release/examples/report_bench --url http://127.0.0.1:18080 \
//!   --grpc http://127.0.0.1:15051 --token $TOK --pid $! --agents 2000 --seconds 20
//! ```
//!
//! It registers a chain of 10 segments (`bench-report`), approves a baseline, then runs
//! `--agents` agents on `--connections` HTTP/2 connections; each sends Reports of one window
//! per segment (calls, retries, outcomes and a V2 compressed histogram of 50 latencies) one
//! after another, as fast as the server answers. The clock starts before the first Report is
//! sent; a Report counts when its answer (after the group commit) arrives. Server CPU is read
//! from `/proc/<pid>/stat` before and after; RSS from `/proc/<pid>/status`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use budget_proto::v1::budget_control_client::BudgetControlClient;
use budget_proto::v1::{ReportRequest, SegmentWindow};
use clap::Parser;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde_json::json;
use tonic::metadata::MetadataValue;

#[path = "common/http.rs"]
mod http;
use http::call;

#[derive(Parser)]
struct Args {
    /// budgetd's HTTP address.
    #[arg(long)]
    url: String,
    /// budgetd's gRPC address.
    #[arg(long)]
    grpc: String,
    /// An admin token.
    #[arg(long)]
    token: String,
    /// The server's process id, for its CPU time and memory.
    #[arg(long)]
    pid: Option<u32>,
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    #[arg(long, default_value_t = 8)]
    connections: usize,
    #[arg(long, default_value_t = 15)]
    seconds: u64,
}

const CHAIN: &str = "bench-report";
const CHILDREN: usize = 9;

fn segment_ids() -> Vec<String> {
    let mut ids = vec!["edge->svc".to_owned()];
    ids.extend((0..CHILDREN).map(|i| format!("svc->dep{i}")));
    ids
}

/// Topology, run and approval of the bench chain; returns an agent token.
async fn setup(args: &Args) -> String {
    let http = reqwest::Client::new();
    let api = |p: &str| format!("{}/api/v1{p}", args.url);
    let mut tokens = Vec::new();
    for (role, name) in [
        ("uploader", "bench-up"),
        ("approver", "bench-ok"),
        ("agent", "bench-agent"),
    ] {
        let suffix = rand_suffix();
        let t = call(
            &http,
            reqwest::Method::POST,
            api("/tokens"),
            &args.token,
            json!({"role": role, "name": format!("{name}-{suffix}")}),
        )
        .await;
        tokens.push(t["token"].as_str().unwrap().to_owned());
    }
    let mut segments = vec![
        json!({"id": "edge->svc", "caller": "edge", "callee": "svc", "parent": null, "class": "volatile"}),
    ];
    let mut run =
        vec![json!({"id": "edge->svc", "samples": 100000, "p99_ms": 300, "p999_ms": 400})];
    for i in 0..CHILDREN {
        segments.push(json!({"id": format!("svc->dep{i}"), "caller": "svc", "callee": format!("dep{i}"), "parent": "edge->svc", "class": "stable", "stage": 1}));
        run.push(
            json!({"id": format!("svc->dep{i}"), "samples": 100000, "p99_ms": 5, "p999_ms": 10}),
        );
    }
    let topology = json!({"entry_budget_ms": 5000, "breaker_window_ms": 60000, "max_recovery": "18h", "segments": segments});
    call(
        &http,
        reqwest::Method::PUT,
        api(&format!("/chains/{CHAIN}/topology")),
        &tokens[0],
        topology,
    )
    .await;
    let up = call(
        &http,
        reqwest::Method::POST,
        api(&format!("/chains/{CHAIN}/runs")),
        &tokens[0],
        json!({"tool": "bench", "segments": run}),
    )
    .await;
    if let Some(id) = up["baseline_id"].as_str() {
        call(
            &http,
            reqwest::Method::POST,
            api(&format!("/baselines/{id}/approve")),
            &tokens[1],
            json!({"comment": "bench"}),
        )
        .await;
    }
    tokens.pop().unwrap()
}

fn rand_suffix() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            & 0xffff_ffff
    )
}

fn windows(hdr: &[u8]) -> Vec<SegmentWindow> {
    let now = chrono::Utc::now().timestamp_millis();
    let start = now - now.rem_euclid(10_000);
    segment_ids()
        .into_iter()
        .map(|segment| SegmentWindow {
            chain: CHAIN.into(),
            segment,
            start_unix_ms: start,
            end_unix_ms: start + 10_000,
            calls: 50,
            attempts: 52,
            retries: [("deadline".to_owned(), 2)].into(),
            outcomes: [("ok".to_owned(), 49), ("deadline_exceeded".to_owned(), 1)].into(),
            latency_hdr: hdr.to_vec(),
        })
        .collect()
}

fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let agent_token = setup(&args).await;
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    for i in 0..50u64 {
        h.record(2_000 + i * 97).unwrap();
    }
    let mut hdr = Vec::new();
    V2DeflateSerializer::new().serialize(&h, &mut hdr).unwrap();
    let hdr = Arc::new(hdr);

    let mut clients = Vec::new();
    for _ in 0..args.connections {
        let channel = tonic::transport::Endpoint::from_shared(args.grpc.clone())
            .unwrap()
            .connect()
            .await
            .expect("gRPC connects");
        clients.push(BudgetControlClient::new(channel));
    }
    let auth: MetadataValue<_> = format!("Bearer {agent_token}").parse().unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(std::sync::Mutex::new(Histogram::<u64>::new(3).unwrap()));
    let (ticks0, rss0) = match args.pid {
        Some(p) => (cpu_ticks(p), rss_kib(p)),
        None => (None, None),
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for a in 0..args.agents {
        let mut client = clients[a % clients.len()].clone();
        let (auth, done, failed, stop, hdr, latencies) = (
            auth.clone(),
            done.clone(),
            failed.clone(),
            stop.clone(),
            hdr.clone(),
            latencies.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let agent_id = format!("bench-agent-{a}");
            while !stop.load(Ordering::Relaxed) {
                let mut req = tonic::Request::new(ReportRequest {
                    agent_id: agent_id.clone(),
                    windows: windows(&hdr),
                    ..Default::default()
                });
                req.metadata_mut().insert("authorization", auth.clone());
                let t = Instant::now();
                match client.report(req).await {
                    Ok(r) if r.get_ref().accepted_windows == 10 => {
                        done.fetch_add(1, Ordering::Relaxed);
                        let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                        if let Ok(mut l) = latencies.lock() {
                            let _ = l.record(us);
                        }
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let reports = done.load(Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let l = latencies.lock().unwrap().clone();
    println!(
        "agents {} on {} connections, {:.1} s: {} reports stored ({} failed), {:.0} reports/s, {:.0} windows/s",
        args.agents,
        args.connections,
        elapsed,
        reports,
        failed.load(Ordering::Relaxed),
        reports as f64 / elapsed,
        reports as f64 * 10.0 / elapsed
    );
    println!(
        "report latency (send → answer after the group commit): p50 {:.1} ms, p99 {:.1} ms",
        l.value_at_quantile(0.5) as f64 / 1000.0,
        l.value_at_quantile(0.99) as f64 / 1000.0
    );
    if let (Some(pid), Some(t0)) = (args.pid, ticks0) {
        let hz = 100.0;
        let cpu = (cpu_ticks(pid).unwrap_or(t0) - t0) as f64 / hz;
        let per_report_us = cpu * 1e6 / reports.max(1) as f64;
        println!(
            "server CPU {:.2} s over {:.1} s ({:.0} % of one core): {:.0} µs a report; 10,000 agents every 10 s = 1,000 reports/s would use {:.1} % of one core",
            cpu,
            elapsed,
            cpu / elapsed * 100.0,
            per_report_us,
            per_report_us * 1000.0 / 1e6 * 100.0
        );
        println!(
            "server RSS {} KiB before, {} KiB after",
            rss0.unwrap_or(0),
            rss_kib(pid).unwrap_or(0)
        );
    }
}
