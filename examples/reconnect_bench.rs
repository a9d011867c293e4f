//! Reconnect after a restart (issue 14): how a fleet of agents — the budget-agent library, one
//! HTTP/2 connection each, as services run it — comes back when budgetd restarts, and whether
//! it comes back as a herd.
//!
//! ```sh
//! cargo build --release --bin budgetd --example reconnect_bench
//! target/release/examples/reconnect_bench --budgetd target/release/budgetd --agents 2000
//! ```
//!
//! It starts budgetd on a fresh data directory (loopback ports of its own), publishes a chain
//! (`bench-reconnect`), starts `--agents` agents watching it and waits until every stream is
//! open (`budgetd_watch_streams` in `/metrics`). Then it stops budgetd with SIGTERM (streams end
//! with a status, as in a rolling restart), waits `--down-ms`, and starts it again on the same
//! data and ports. The clock starts just before the new process is spawned. It samples
//! `budgetd_watch_streams` every 5 ms until every agent is back and prints when the server was
//! ready, when 50 / 90 / 99 / 100 % of the streams were open again, the most streams opened
//! in any 100 ms, and the new process's CPU time and memory once all are back. The agents'
//! reconnect backoff is the library's (full jitter, 100 ms doubling to 10 s, from the spread
//! the stopping replica asks for: its streams / `agents.reconnect_per_second`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use budget_agent::{Agent, AgentConfig};
use clap::Parser;
use serde_json::json;

#[path = "common/http.rs"]
mod http;
use http::call;

#[derive(Parser)]
struct Args {
    /// The budgetd binary to run.
    #[arg(long)]
    budgetd: String,
    #[arg(long, default_value_t = 2000)]
    agents: usize,
    /// How long budgetd stays down between stop and start.
    #[arg(long, default_value_t = 1000)]
    down_ms: u64,
}

const CHAIN: &str = "bench-reconnect";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

struct Server {
    bin: String,
    data: std::path::PathBuf,
    http: u16,
    grpc: u16,
    token: String,
}

impl Server {
    fn spawn(&self) -> Child {
        Command::new(&self.bin)
            .args([
                "serve",
                "--data-dir",
                self.data.to_str().expect("a UTF-8 path"),
                "--http",
                &format!("127.0.0.1:{}", self.http),
                "--grpc",
                &format!("127.0.0.1:{}", self.grpc),
            ])
            .env("BUDGETD_ADMIN_TOKEN", &self.token)
            .env("BUDGETD_AGENTS__MAX_STREAMS_PER_TOKEN", "200000")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("budgetd starts")
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.http)
    }
}

/// Topology, run and approval of the bench chain; returns an agent token.
async fn setup(s: &Server) -> String {
    let http = reqwest::Client::new();
    let mut tokens = Vec::new();
    for (role, name) in [("uploader", "up"), ("approver", "ok"), ("agent", "agents")] {
        let t = call(
            &http,
            reqwest::Method::POST,
            s.url("/api/v1/tokens"),
            &s.token,
            json!({"role": role, "name": name}),
        )
        .await;
        tokens.push(t["token"].as_str().expect("a token").to_owned());
    }
    let topology = json!({"entry_budget_ms": 800, "breaker_window_ms": 5000, "max_recovery": "18h", "segments": [
        {"id": "edge->svc", "caller": "edge", "callee": "svc", "parent": null, "class": "volatile"},
        {"id": "svc->db", "caller": "svc", "callee": "db", "parent": "edge->svc", "class": "stable"}]});
    call(
        &http,
        reqwest::Method::PUT,
        s.url(&format!("/api/v1/chains/{CHAIN}/topology")),
        &tokens[0],
        topology,
    )
    .await;
    let run = json!({"tool": "bench", "segments": [
        {"id": "edge->svc", "samples": 100000, "p99_ms": 300, "p999_ms": 400},
        {"id": "svc->db", "samples": 100000, "p99_ms": 5, "p999_ms": 10}]});
    let up = call(
        &http,
        reqwest::Method::POST,
        s.url(&format!("/api/v1/chains/{CHAIN}/runs")),
        &tokens[0],
        run,
    )
    .await;
    let id = up["baseline_id"].as_str().expect("a draft");
    call(
        &http,
        reqwest::Method::POST,
        s.url(&format!("/api/v1/baselines/{id}/approve")),
        &tokens[1],
        json!({}),
    )
    .await;
    tokens.pop().expect("the agent token")
}

/// `budgetd_watch_streams` from `/metrics`, or `None` while the server does not answer.
async fn streams(http: &reqwest::Client, s: &Server) -> Option<u64> {
    let text = http
        .get(s.url("/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("budgetd_watch_streams "))
        .and_then(|v| v.trim().parse().ok())
}

fn proc_field(pid: u32, file: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    if file == "stat" {
        // utime + stime, after the command name's closing parenthesis.
        let rest = text.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        return Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?);
    }
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let data = std::env::temp_dir().join(format!("reconnect-bench-{}", std::process::id()));
    std::fs::create_dir_all(&data).expect("a data directory");
    let token = hex::encode(rand::random::<[u8; 32]>());
    let s = Server {
        bin: args.budgetd.clone(),
        data: data.clone(),
        http: free_port(),
        grpc: free_port(),
        token,
    };
    let http = reqwest::Client::new();
    let mut child = s.spawn();
    while !http
        .get(s.url("/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let agent_token = setup(&s).await;

    let opened = Instant::now();
    let mut agents = Vec::with_capacity(args.agents);
    for chunk in (0..args.agents).collect::<Vec<_>>().chunks(200) {
        let started = chunk.iter().map(|i| {
            let mut c = AgentConfig::new(
                format!("http://127.0.0.1:{}", s.grpc),
                &agent_token,
                format!("agent-{i}"),
                "svc",
            );
            c.chains = vec![CHAIN.to_owned()];
            c.first_config_timeout = Duration::from_secs(30);
            Agent::start(c)
        });
        for a in futures_util::future::join_all(started).await {
            agents.push(a.expect("an agent starts"));
        }
    }
    let n = args.agents as u64;
    while streams(&http, &s).await != Some(n) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "agents: {n}, one HTTP/2 connection each; all streams open in {:?}",
        opened.elapsed()
    );

    // The restart: SIGTERM, wait for the exit, down for --down-ms, start again.
    let stopping = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    child.wait().expect("budgetd exits");
    println!("stopped (SIGTERM to exit) in {:?}", stopping.elapsed());
    tokio::time::sleep(Duration::from_millis(args.down_ms)).await;
    let t0 = Instant::now();
    let mut child = s.spawn();
    let pid = child.id();
    let mut ready = None;
    let mut samples: Vec<(Duration, u64)> = Vec::new();
    loop {
        if t0.elapsed() > Duration::from_secs(60) {
            eprintln!("not every agent came back within 60 s");
            break;
        }
        if let Some(v) = streams(&http, &s).await {
            ready.get_or_insert(t0.elapsed());
            samples.push((t0.elapsed(), v));
            if v >= n {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu = proc_field(pid, "stat", "").unwrap_or(0);
    let rss = proc_field(pid, "status", "VmRSS:").unwrap_or(0);
    let at = |share: f64| {
        let want = (n as f64 * share).ceil() as u64;
        samples
            .iter()
            .find(|(_, v)| *v >= want)
            .map(|(t, _)| format!("{:.0} ms", t.as_secs_f64() * 1000.0))
            .unwrap_or_else(|| "-".into())
    };
    // The most streams opened in any 100 ms.
    let mut peak = 0;
    for (i, (t, v)) in samples.iter().enumerate() {
        let before = samples[..i]
            .iter()
            .rev()
            .find(|(u, _)| *t - *u >= Duration::from_millis(100))
            .map_or(0, |(_, w)| *w);
        peak = peak.max(v.saturating_sub(before));
    }
    println!(
        "down: {} ms; clock starts before the new process is spawned",
        args.down_ms
    );
    println!(
        "ready (first /metrics answer): {:.0} ms",
        ready.unwrap_or_default().as_secs_f64() * 1000.0
    );
    println!(
        "streams back: 50 % {}, 90 % {}, 99 % {}, 100 % {}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    println!(
        "most streams opened in 100 ms: {peak} ({:.0} % of the fleet)",
        peak as f64 * 100.0 / n as f64
    );
    println!(
        "server after all were back: CPU {:.2} s, RSS {} MiB",
        cpu as f64 / 100.0,
        rss / 1024
    );

    for a in agents {
        a.shutdown();
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&data);
}
