//! The drill's steps (issue 12), shared by the example (`cargo run --example drill`) and the
//! test (`cargo test --test drill`): set the chain up, replay the handbook's incidents, and
//! check what budgetd shows against what the agents and services counted.
//!
//! Exact comparisons use cumulative figures: at each checkpoint the load has stopped, every
//! agent has flushed its window (`Agent::flush_report`, answered only once durable) and the
//! rollup holding it is complete, so `GET /production?window=1h` (60 rollups: the whole drill
//! with shortened rollups) must equal, per segment, what the agents counted
//! (`budget_agent_*` metrics) and what the services saw of their own calls — calls, attempts,
//! retries by cause and outcomes, to the unit. A step's figures are differences between two
//! checkpoints.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::control::{Api, Budgetd, ChildProc, Launcher, Receiver};
use crate::tally::Checkpoint;

/// The chain's segments, root first.
pub const SEGMENTS: [&str; 4] = [
    "gateway->order",
    "order->inventory",
    "order->payment",
    "order->user",
];

/// How late calls may come back (p90, after a leaf's table latency in step 1, after a
/// timed-out attempt's deadline in step 2a) for a step's timing checks to be judged: a 44 ms
/// timeout on a 40 ms p99 absorbs 4 ms. Later than that, the host is busy (other builds on the
/// same cores) and those checks are shown, not judged.
pub(crate) const HOST_LAG_P90_MS: f64 = 4.0;

/// Durations and rates of the drill.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `feedback.rollup_ms` (the server's "minute"); `1h` is 60 of them.
    pub rollup_ms: u64,
    pub evaluate_ms: u64,
    /// The agents' `report_window` (divides the rollup and a minute).
    pub report_window_ms: u64,
    /// Step 1: normal traffic.
    pub normal: Duration,
    pub normal_rps: u32,
    /// Step 2a: inventory slowed by `slow_delay_ms`.
    pub slow: Duration,
    pub slow_delay_ms: u64,
    /// Steps 2a, 2b, 3.
    pub storm_rps: u32,
    /// Step 4: every n-th entry request carries no idempotency key while inventory is down.
    pub keyless_every: u64,
    /// Step 5: how long budgetd stays down.
    pub restart_down: Duration,
    /// Step 3: how long payment's network is cut.
    pub cut: Duration,
}

impl Plan {
    /// Short enough for a test (about a minute and a half of wall time).
    pub fn test() -> Self {
        Self {
            rollup_ms: 3000,
            evaluate_ms: 250,
            report_window_ms: 500,
            normal: Duration::from_secs(20),
            normal_rps: 50,
            slow: Duration::from_secs(6),
            slow_delay_ms: 400,
            storm_rps: 50,
            keyless_every: 10,
            restart_down: Duration::from_secs(1),
            cut: Duration::from_secs(5),
        }
    }

    /// The example: the handbook's 30 s cut.
    pub fn example() -> Self {
        Self {
            cut: Duration::from_secs(30),
            ..Self::test()
        }
    }
}

/// Where the drill finds its programs and puts its files.
pub struct Options {
    pub budgetd: PathBuf,
    pub launcher: Launcher,
    /// Data directory, caches and logs.
    pub work_dir: PathBuf,
}

/// What a line of the drill's result is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A check: it passes or fails.
    Verdict,
    /// An observation that is not a verdict (a timing not judged on a busy host, a finding).
    Note,
    /// A measured figure, for the closing note.
    Figure,
}

/// One line of the drill's result.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: String,
    pub pass: bool,
    pub detail: String,
    pub kind: Kind,
}

pub(crate) fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// An RFC 3339 time of the API in Unix ms (`i64::MAX` if it does not parse).
pub(crate) fn unix_ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339).map_or(i64::MAX, |t| t.timestamp_millis())
}

/// Run A's p99 / p999 per segment.
pub(crate) fn run_a(segment: &str) -> (f64, f64) {
    match segment {
        "gateway->order" => (420.0, 610.0),
        "order->inventory" => (40.0, 150.0),
        "order->payment" => (210.0, 300.0),
        _ => (8.0, 20.0),
    }
}

pub(crate) struct Drill {
    pub(crate) plan: Plan,
    pub(crate) opts: Options,
    pub(crate) budgetd: Budgetd,
    pub(crate) api: Api,
    pub(crate) uploader: String,
    pub(crate) approver: String,
    pub(crate) receiver: Receiver,
    pub(crate) hook: String,
    pub(crate) children: BTreeMap<String, ChildProc>,
    pub(crate) client: reqwest::Client,
    pub(crate) t0: Instant,
    pub(crate) first_traffic_ms: Option<i64>,
    pub(crate) seq: Arc<AtomicU64>,
    pub(crate) last: Checkpoint,
    pub(crate) checks: Vec<Check>,
}

/// Runs the whole drill; returns every check (the caller decides what a failure means).
/// Figures are printed as the drill goes.
pub async fn run(plan: Plan, opts: Options) -> anyhow::Result<Vec<Check>> {
    let mut drill = Drill::setup(plan, opts).await?;
    drill.step1_normal().await?;
    drill.step2a_slow_inventory().await?;
    drill.step2b_retry_storm_and_restart().await?;
    drill.step3_payment_cut().await?;
    drill.final_checks().await?;
    Ok(std::mem::take(&mut drill.checks))
}

/// The drill's figures, notes and failed checks as text, and whether every check passed.
pub fn summary(checks: &[Check]) -> (bool, String) {
    let lines = |kind: Kind, prefix: &str| -> Vec<String> {
        checks
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| format!("{prefix}{}", c.name))
            .collect()
    };
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("FAIL {}: {}", c.name, c.detail))
        .collect();
    let verdicts = checks.iter().filter(|c| c.kind == Kind::Verdict).count();
    let mut text = vec!["== figures".to_owned()];
    text.extend(lines(Kind::Figure, "  "));
    text.extend(lines(Kind::Note, "NOTE "));
    if failed.is_empty() {
        text.push(format!("all {verdicts} checks passed"));
    } else {
        text.push(format!("{} of {verdicts} checks failed:", failed.len()));
        text.extend(failed.iter().cloned());
    }
    (failed.is_empty(), text.join("\n"))
}

/// A context line for errors from the drill's own machinery.
pub fn with_logs(e: anyhow::Error, work_dir: &std::path::Path) -> anyhow::Error {
    e.context(format!("drill aborted; logs in {}", work_dir.display()))
}
