//! `budgetctl bench report`: a fleet's Reports (SPEC §8) against a running budgetd. Every
//! agent holds a Watch stream, as real agents do, and sends one Report per window at a random
//! moment within min(window / 4, 2.5 s) after the window's boundary, as the client libraries
//! do; each Report carries one window per segment of the benchmark chain with a busy
//! histogram. Prints how many Reports the server accepted and refused (by status), their
//! latency from before the call, the server's CPU per Report and its resident memory.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use budget_core::example::CHECKOUT_RUN_A;
use budget_proto::v1::budget_control_client::BudgetControlClient;
use budget_proto::v1::{ReportRequest, SegmentWindow};
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use prost::Message;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::sync::Notify;

use super::{agent_id, connect, internal, metric, ms, percentile, rss, watch_request, Bench};
use crate::cli::ReportArgs;
use crate::output::print;
use crate::{Client, CtlError};

/// The agents' own bound on a Report's delay after its window's boundary.
const MAX_SPREAD: Duration = Duration::from_millis(2500);

/// A histogram of `n` latencies spread log-uniformly over 1–100 ms (microseconds), encoded
/// as the agents send it (HdrHistogram V2, DEFLATE), and its count.
fn busy_histogram(n: u32, seed: u64) -> Result<Vec<u8>, CtlError> {
    let mut h = Histogram::<u64>::new(3).map_err(|e| internal("histogram", e))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for _ in 0..n {
        let us = 1000.0 * 100f64.powf(rng.gen::<f64>());
        h.record(us as u64).map_err(|e| internal("histogram", e))?;
    }
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(&h, &mut out)
        .map_err(|e| internal("histogram", format!("{e:?}")))?;
    Ok(out)
}

/// What the agents saw, shared by all of them.
#[derive(Default)]
struct Tally {
    /// Agents holding the first snapshot, and the first that could not.
    watching: AtomicU32,
    all_watching: Notify,
    failed: OnceLock<String>,
    /// The benchmark chain's segments, from the first snapshot.
    segments: OnceLock<Vec<String>>,
    accepted_windows: AtomicU64,
    /// Every Report's time from before the call to its answer, and its status.
    calls: Mutex<Vec<(Duration, tonic::Code)>>,
    /// The status message of the first Report refused with each code.
    first_refusal: Mutex<BTreeMap<String, String>>,
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(in crate::commands) async fn report(
    args: ReportArgs,
    admin: &Client,
    json_out: bool,
) -> Result<(), CtlError> {
    let n = args.agents;
    // A connection carries at most 1,024 streams at once: a Watch and a Report each.
    let connections = args.connections.unwrap_or(n.div_ceil(100)).min(n);
    let window = Duration::from_secs(u64::from(args.window_secs));
    let spread = (window / 4).min(MAX_SPREAD);
    let bench = Bench::new(admin, n).await?;
    let (tag, chain) = (&bench.tag, &bench.chain);
    let run_a = serde_json::from_str(CHECKOUT_RUN_A).map_err(|e| internal("example run", e))?;
    bench.publish(&run_a).await?;

    let histogram = Arc::new(busy_histogram(args.latencies, 1)?);
    let rss_before = rss(admin).await;
    eprintln!(
        "opening {n} agents (a Watch stream each) over {connections} connection(s) to {} …",
        args.grpc
    );
    let channels = connect(&args.grpc, admin, connections).await?;
    let tally = Arc::new(Tally::default());
    let opened = Instant::now();
    let (go_tx, go_rx) = tokio::sync::watch::channel(None::<SystemTime>);
    let mut agents = Vec::new();
    for i in 0..n {
        let mut client = BudgetControlClient::new(channels[(i % connections) as usize].clone());
        let auth = bench.agent_auth(i);
        let mut req = tonic::Request::new(watch_request(tag, i, chain));
        req.metadata_mut().insert("authorization", auth.clone());
        let (tally, histogram, chain, mut go) = (
            tally.clone(),
            histogram.clone(),
            chain.clone(),
            go_rx.clone(),
        );
        let (id, windows, latencies) = (agent_id(tag, i), args.windows, args.latencies);
        agents.push(tokio::spawn(async move {
            let fail = |why: String| {
                let _ = tally.failed.set(why);
                tally.all_watching.notify_one();
            };
            let mut stream = match client.watch(req).await {
                Ok(resp) => resp.into_inner(),
                Err(status) => return fail(format!("the Watch of agent {i} failed: {status}")),
            };
            match stream.message().await {
                Ok(Some(update)) => {
                    if let Some(c) = update.chains.iter().find(|c| c.chain == chain) {
                        let _ = tally
                            .segments
                            .set(c.segments.iter().map(|s| s.id.clone()).collect());
                    }
                }
                Ok(None) => {
                    return fail(format!("the Watch of agent {i} ended before its snapshot"))
                }
                Err(status) => return fail(format!("the Watch of agent {i} failed: {status}")),
            }
            // Hold the stream, taking what it sends, while the agent reports.
            tokio::spawn(async move { while let Ok(Some(_)) = stream.message().await {} });
            if tally.watching.fetch_add(1, Ordering::AcqRel) + 1 == n {
                tally.all_watching.notify_one();
            }
            let Ok(first) = go
                .wait_for(Option::is_some)
                .await
                .map(|t| t.unwrap_or(UNIX_EPOCH))
            else {
                return;
            };
            let segments = tally.segments.get().cloned().unwrap_or_default();
            let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(i));
            for k in 0..windows {
                let boundary = first + window * k;
                let at = boundary + spread.mul_f64(rng.gen::<f64>());
                if let Ok(wait) = at.duration_since(SystemTime::now()) {
                    tokio::time::sleep(wait).await;
                }
                let (start, end) = (unix_ms(boundary - window), unix_ms(boundary));
                let request = ReportRequest {
                    agent_id: id.clone(),
                    windows: segments
                        .iter()
                        .map(|segment| SegmentWindow {
                            chain: chain.clone(),
                            segment: segment.clone(),
                            start_unix_ms: start,
                            end_unix_ms: end,
                            calls: u64::from(latencies),
                            attempts: u64::from(latencies) + u64::from(latencies / 100),
                            retries: [("deadline".to_owned(), u64::from(latencies / 100))].into(),
                            outcomes: [("ok".to_owned(), u64::from(latencies))].into(),
                            latency_hdr: histogram.to_vec(),
                        })
                        .collect(),
                    // An id as the agents send (the server keeps each agent's last one).
                    report_id: rng.gen::<[u8; 16]>().to_vec(),
                    resend: false,
                };
                let mut req = tonic::Request::new(request);
                req.metadata_mut().insert("authorization", auth.clone());
                let sent = Instant::now();
                let result = client.report(req).await;
                let took = sent.elapsed();
                let code = match result {
                    Ok(resp) => {
                        let accepted = resp.into_inner().accepted_windows;
                        tally
                            .accepted_windows
                            .fetch_add(u64::try_from(accepted).unwrap_or(0), Ordering::AcqRel);
                        tonic::Code::Ok
                    }
                    Err(status) => {
                        let mut first = tally
                            .first_refusal
                            .lock()
                            .unwrap_or_else(|e| e.into_inner());
                        first
                            .entry(format!("{:?}", status.code()))
                            .or_insert_with(|| status.message().to_owned());
                        status.code()
                    }
                };
                tally
                    .calls
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((took, code));
            }
        }));
    }
    if tokio::time::timeout(Duration::from_secs(120), tally.all_watching.notified())
        .await
        .is_err()
    {
        let got = tally.watching.load(Ordering::Acquire);
        return Err(internal(
            "timeout",
            format!("only {got} of {n} agents hold the snapshot after 120 s"),
        ));
    }
    if let Some(why) = tally.failed.get() {
        return Err(internal("bench", why));
    }
    let open_time = opened.elapsed();
    let segments = tally.segments.get().map_or(0, Vec::len);
    let sample = ReportRequest {
        agent_id: agent_id(tag, 0),
        windows: vec![
            SegmentWindow {
                latency_hdr: histogram.to_vec(),
                ..Default::default()
            };
            segments
        ],
        report_id: vec![0; 16],
        resend: false,
    };
    // The first window boundary at least one second away, on the window's grid as the
    // agents' clocks are.
    let soon = u64::try_from(unix_ms(SystemTime::now()) + 1000).unwrap_or(0);
    let w_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    let first = UNIX_EPOCH + Duration::from_millis(soon.div_ceil(w_ms) * w_ms);
    eprintln!(
        "all {n} agents hold the snapshot after {open_time:?}; each sends {} Report(s) of {segments} \
         windows (about {} bytes), one per {}-second window, within {} ms of its boundary …",
        args.windows,
        sample.encoded_len(),
        args.window_secs,
        spread.as_millis()
    );
    let cpu_before = metric(admin, "process_cpu_seconds_total").await;
    let idle_rss = rss(admin).await;
    let _ = go_tx.send(Some(first));
    // The server's resident memory, sampled every 100 ms until the last Report is answered.
    let mut peak = idle_rss.unwrap_or(0);
    let end = first + window * (args.windows - 1) + spread;
    while SystemTime::now() < end
        || tally.calls.lock().unwrap_or_else(|e| e.into_inner()).len() < (n * args.windows) as usize
    {
        if let Some(r) = rss(admin).await {
            peak = peak.max(r);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if agents.iter().all(|a| a.is_finished()) {
            break;
        }
    }
    for a in agents {
        a.await.map_err(|e| internal("agent", e))?;
    }
    // Settle: the rollups are flushed in the background.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let cpu_after = metric(admin, "process_cpu_seconds_total").await;
    let rss_after = rss(admin).await;

    let calls = std::mem::take(&mut *tally.calls.lock().unwrap_or_else(|e| e.into_inner()));
    let sent = calls.len();
    let mut by_code: BTreeMap<String, usize> = BTreeMap::new();
    for (_, code) in &calls {
        *by_code.entry(format!("{code:?}")).or_default() += 1;
    }
    let mut times: Vec<Duration> = calls.iter().map(|(d, _)| *d).collect();
    times.sort();
    let ok = by_code.get("Ok").copied().unwrap_or(0);
    let cpu_per_report_us = match (cpu_before, cpu_after) {
        (Some(b), Some(a)) if sent > 0 => Some((a - b).max(0.0) * 1e6 / sent as f64),
        _ => None,
    };
    let accepted_windows = tally.accepted_windows.load(Ordering::Acquire);
    let first_refusal = tally
        .first_refusal
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mib = |b: Option<u64>| b.map(|b| b as f64 / f64::from(1 << 20));
    let result = json!({
        "agents": n,
        "connections": connections,
        "windows": args.windows,
        "window_secs": args.window_secs,
        "spread_ms": spread.as_millis() as u64,
        "segments_per_report": segments,
        "report_bytes": sample.encoded_len(),
        "open_all_ms": ms(open_time),
        "reports": {"sent": sent, "by_code": by_code, "first_refusal": first_refusal},
        "windows_accepted": accepted_windows,
        "windows_sent": sent * segments,
        "report_ms": {
            "p50": ms(percentile(&times, 50.0)),
            "p99": ms(percentile(&times, 99.0)),
            "max": ms(times.last().copied().unwrap_or_default()),
        },
        "server_cpu_per_report_us": cpu_per_report_us,
        "server_rss_bytes": {"before_agents": rss_before, "idle": idle_rss, "peak": peak, "after": rss_after},
        "chain": chain,
    });
    if json_out {
        print(&serde_json::to_string_pretty(&result).unwrap_or_default());
        return Ok(());
    }
    let codes = by_code
        .iter()
        .map(|(c, k)| format!("{c} {k}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut text = format!(
        "agents: {n} over {connections} connection(s); {} window(s) of {} s, Reports spread over {} ms\n\
         Reports: {sent} sent ({codes}); windows stored: {accepted_windows} of {}\n\
         Report call (request sent to answer, its group commit included): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms\n\
         server CPU per Report: {}\n\
         server memory: {} MiB before the agents, {} MiB holding them, peak {} MiB while reporting (sampled every 100 ms), {} MiB after",
        args.windows,
        args.window_secs,
        spread.as_millis(),
        sent * segments,
        ms(percentile(&times, 50.0)),
        ms(percentile(&times, 99.0)),
        ms(times.last().copied().unwrap_or_default()),
        cpu_per_report_us.map_or("unknown (no process_cpu_seconds_total in /metrics)".into(), |us| format!("{us:.0} µs")),
        fmt_mib(mib(rss_before)),
        fmt_mib(mib(idle_rss)),
        fmt_mib(mib(Some(peak))),
        fmt_mib(mib(rss_after)),
    );
    for (code, message) in &first_refusal {
        text.push_str(&format!("\nfirst {code}: {message}"));
    }
    if ok < sent {
        text.push_str("\n(refused Reports are counted, not sent again: an agent would keep their windows and resend them with its next Report)");
    }
    print(&text);
    Ok(())
}

fn fmt_mib(m: Option<f64>) -> String {
    m.map_or("unknown".into(), |m| format!("{m:.0}"))
}
