//! Upload → draft with and without latency distributions (issue 17): what keeping every
//! segment's histogram costs an upload of a 1,000-segment chain, and the bytes it adds.
//!
//! ```sh
//! cargo build --release --bins --example upload_bench
//! TOK=$(openssl rand -hex 32)
//! BUDGETD_ADMIN_TOKEN=$TOK target/release/budgetd serve --data-dir "$(mktemp -d)" \
//!   --http 127.0.0.1:18080 --grpc 127.0.0.1:15051 &
//! target/release/examples/upload_bench --url http://127.0.0.1:18080 --token $TOK --runs 30
//! ```
//!
//! It registers chain `bench-upload` (a root, 32 parallel mid services pinned at 5 s, 967
//! leaves under them in parallel: 1,000 segments) and approves a first run. Then it uploads `--runs` native runs
//! per mode, the modes alternated run by run: `none` (percentiles only, as before issue 17),
//! `histogram` (every segment with its HdrHistogram of `--samples` latencies, V2 compressed,
//! base64) and `points` (every segment with 10 percentile points). The approved run is 80 %
//! slower than the base and the runs alternate between the base and 35 % slower, so each drifts
//! from the approved baseline, opens a draft and supersedes the last. The
//! histograms are made before the clock starts; the clock starts just before the upload
//! request and stops when its answer (with the draft's id) has arrived.
//!
//! It prints, per mode, upload → draft p50 / p99 / max, the request body's size, and the stored
//! distribution's bytes per segment (the base64 text kept in the run, as the server stores it).

use std::time::Instant;

use base64::Engine as _;
use clap::Parser;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

#[path = "common/http.rs"]
mod http;
use http::call;

#[derive(Parser)]
struct Args {
    /// budgetd's HTTP address.
    #[arg(long)]
    url: String,
    /// An admin token.
    #[arg(long)]
    token: String,
    /// Runs per mode.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// Latencies per segment's histogram.
    #[arg(long, default_value_t = 10_000)]
    samples: usize,
    /// Only percentiles (`none`): what a server from before distributions takes.
    #[arg(long)]
    percentiles_only: bool,
}

const CHAIN: &str = "bench-upload";
const MIDS: usize = 32;
const SEGMENTS: usize = 1_000;

/// The chain: root `edge->api`, mids `api->m{i}` (stage 1 of the root), leaves `m{i}->l{j}`
/// (stage 1 of their mid), spread evenly.
fn topology() -> Value {
    let mut segments = vec![json!({"id": "edge->api", "caller": "edge", "callee": "api",
        "class": "volatile"})];
    for i in 0..MIDS {
        // Pinned: room for the leaves below whatever the run says.
        segments.push(
            json!({"id": format!("api->m{i}"), "caller": "api", "callee": format!("m{i}"),
            "parent": "edge->api", "class": "volatile", "stage": 1, "pinned_timeout_ms": 5000}),
        );
    }
    for j in 0..SEGMENTS - 1 - MIDS {
        let mid = j % MIDS;
        segments.push(
            json!({"id": format!("m{mid}->l{j}"), "caller": format!("m{mid}"),
            "callee": format!("l{j}"), "parent": format!("api->m{mid}"), "class": "stable",
            "stage": 1}),
        );
    }
    json!({"entry_budget_ms": 60000, "segments": segments})
}

/// One segment's latencies (µs): log-normal around `median_us`, with a slow tail.
fn histogram(rng: &mut StdRng, median_us: f64, samples: usize) -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    for _ in 0..samples {
        // Box–Muller: a standard normal from two uniforms.
        let (u1, u2): (f64, f64) = (rng.gen_range(1e-12..1.0), rng.gen());
        let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        let spike = if rng.gen_ratio(1, 500) { 4.0 } else { 1.0 };
        h.saturating_record((median_us * (0.45 * z).exp() * spike) as u64);
    }
    h
}

fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2DeflateSerializer::new().serialize(h, &mut bytes).unwrap();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    None,
    Histogram,
    Points,
}

/// A segment's row in one variant (0: base, 1: 35 % slower, 2: 80 % slower — the approved run,
/// which both others drift from).
struct Row {
    id: String,
    samples: u64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    hdr: String,
    points: Value,
}

fn rows(ids: &[String], variant: usize, samples: usize) -> Vec<Row> {
    let mut rng = StdRng::seed_from_u64(17 + variant as u64);
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let median = (2_000 + (i % 97) * 300) as f64 * [1.0, 1.35, 1.8][variant];
            let h = histogram(&mut rng, median, samples);
            let at = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            let points: Vec<Value> = [0.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.9, 99.99, 100.0]
                .iter()
                .map(|&p| json!({"percentile": p, "us": h.value_at_quantile(p / 100.0)}))
                .collect();
            Row {
                id: id.clone(),
                samples: h.len(),
                p50_ms: at(0.5),
                p99_ms: at(0.99),
                p999_ms: at(0.999),
                hdr: encode(&h),
                points: json!({"kind": "percentiles", "points": points}),
            }
        })
        .collect()
}

fn body(rows: &[Row], mode: Mode) -> Value {
    let segments: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut s = json!({"id": r.id, "samples": r.samples, "p50_ms": r.p50_ms,
                "p99_ms": r.p99_ms, "p999_ms": r.p999_ms});
            match mode {
                Mode::None => {}
                Mode::Histogram => s["distribution"] = json!({"kind": "histogram", "hdr": r.hdr}),
                Mode::Points => s["distribution"] = r.points.clone(),
            }
            s
        })
        .collect();
    json!({"tool": "upload_bench", "segments": segments})
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    let http = reqwest::Client::new();
    let api = |path: &str| format!("{}/api/v1{path}", args.url.trim_end_matches('/'));
    // Four eyes: one person uploads, another approves the first run.
    let mut tokens = Vec::new();
    for (role, name) in [
        ("uploader", "bench-uploader"),
        ("approver", "bench-approver"),
    ] {
        let made = call(
            &http,
            reqwest::Method::POST,
            api("/tokens"),
            &args.token,
            json!({"role": role, "name": name}),
        )
        .await;
        tokens.push(made["token"].as_str().unwrap().to_owned());
    }
    let (uploader, approver) = (&tokens[0], &tokens[1]);
    let topology = topology();
    let ids: Vec<String> = topology["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    call(
        &http,
        reqwest::Method::PUT,
        api(&format!("/chains/{CHAIN}/topology")),
        uploader,
        topology,
    )
    .await;
    eprintln!(
        "making {} histograms of {} latencies…",
        2 * ids.len(),
        args.samples
    );
    let variants = [
        rows(&ids, 0, args.samples),
        rows(&ids, 1, args.samples),
        rows(&ids, 2, args.samples),
    ];
    let first = call(
        &http,
        reqwest::Method::POST,
        api(&format!("/chains/{CHAIN}/runs")),
        uploader,
        body(&variants[2], Mode::None),
    )
    .await;
    let draft = first["baseline_id"].as_str().unwrap().to_owned();
    call(
        &http,
        reqwest::Method::POST,
        api(&format!("/baselines/{draft}/approve")),
        approver,
        json!({"comment": "bench"}),
    )
    .await;

    let modes: &[Mode] = if args.percentiles_only {
        &[Mode::None]
    } else {
        &[Mode::None, Mode::Histogram, Mode::Points]
    };
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut sizes = vec![0usize; modes.len()];
    let mut variant = 0;
    for run in 0..args.runs * modes.len() {
        let m = run % modes.len();
        variant = 1 - variant;
        let payload = serde_json::to_vec(&body(&variants[variant], modes[m])).unwrap();
        sizes[m] = payload.len();
        let started = Instant::now();
        let answer = http
            .post(api(&format!("/chains/{CHAIN}/runs")))
            .bearer_auth(uploader)
            .header("content-type", "application/json")
            .body(payload)
            .send()
            .await
            .expect("budgetd answers");
        let status = answer.status();
        let value: Value = answer.json().await.unwrap_or(Value::Null);
        let took = started.elapsed().as_secs_f64() * 1000.0;
        assert!(
            status.is_success() && value["baseline_id"].is_string(),
            "{status}: {value}"
        );
        times[m].push(took);
    }
    let per_segment = |m: Mode| -> f64 {
        let total: usize = variants
            .iter()
            .flatten()
            .map(|r| match m {
                Mode::None => 0,
                Mode::Histogram => r.hdr.len(),
                Mode::Points => r.points.to_string().len(),
            })
            .sum();
        total as f64 / (variants.len() * ids.len()) as f64
    };
    println!(
        "{} segments, {} samples per histogram, {} runs per mode (alternated)",
        ids.len(),
        args.samples,
        args.runs
    );
    println!("| distributions | body | stored per segment | upload → draft p50 | p99 | max |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (m, mode) in modes.iter().enumerate() {
        let mut t = times[m].clone();
        t.sort_by(f64::total_cmp);
        println!(
            "| {mode:?} | {:.1} KB | {:.0} B | {:.1} ms | {:.1} ms | {:.1} ms |",
            sizes[m] as f64 / 1000.0,
            per_segment(*mode),
            quantile(&t, 0.5),
            quantile(&t, 0.99),
            t[t.len() - 1]
        );
    }
}
