//! The drill of issue 12: the handbook's checkout chain as real processes on loopback, its
//! incidents replayed against a real budgetd, and what budgetd shows checked against what the
//! agents counted. See `docs/drill.md`; the same steps run as `cargo test --test drill`.
//!
//! ```text
//! cargo build --bin budgetd --example drill
//! target/debug/examples/drill                # or: cargo run --example drill
//! ```
//!
//! Processes: budgetd (SQLite in a temporary directory, rollups shortened to 3 s), gateway,
//! order, inventory, payment, user (each with budget-agent), and two fault proxies
//! (order → inventory, order → payment). Steps:
//!
//! 1. normal traffic: amplification ≈ 1, kill rate ≈ 0, production percentiles ≈ run A's;
//! 2. inventory slowed past its timeout: one deadline retry with backoff and jitter, the
//!    server's amplification equal to the agents' counts (2.0, no alert); then a topology
//!    allowing more retries and inventory dropping traffic: above 2×, the alert fires once,
//!    a signed webhook event, resolved once after recovery;
//! 3. payment's network cut (30 s): in-flight calls released at their deadline, the entry
//!    error rate with the gateway's fallback;
//! 4. calls without an idempotency key: UNAVAILABLE after one attempt, counted as
//!    `retry_refused_no_key`;
//! 5. budgetd restarted mid-storm: no report window lost, no alert duplicated, no webhook lost.
//!
//! All traffic stays on 127.0.0.1; the load is bounded (fixed rate, at most 256 requests in
//! flight, 5 s timeouts) and every child exits when the drill does.

mod checks;
mod control;
mod counters;
mod final_checks;
mod load;
mod proxy;
mod routes;
mod scenario;
mod services;
mod setup;
mod step1_normal;
mod step2a_slow_inventory;
mod step2b_retry_storm;
mod step3_payment_cut;
mod tally;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "drill",
    about = "Replay the handbook's timeout incidents against budgetd"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the drill (the default).
    Run(RunArgs),
    /// Run one process of the chain (the drill starts these itself).
    #[command(hide = true)]
    Role { spec: String },
}

#[derive(clap::Args, Default)]
struct RunArgs {
    /// The budgetd binary [default: $BUDGETD_BIN, else `budgetd` next to target/…/examples/]
    #[arg(long, value_name = "PATH")]
    budgetd: Option<PathBuf>,
    /// How long payment's network is cut in step 3, in seconds.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    cut_secs: u64,
    /// Keep budgetd's data directory and the processes' logs here, a new or empty directory
    /// (default: a temporary directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Role { spec }) => match serde_json::from_str(&spec) {
            Ok(spec) => ExitCode::from(services::run_role(spec) as u8),
            Err(e) => {
                eprintln!("drill role: bad spec: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Run(args)) => run(args),
        None => run(RunArgs {
            cut_secs: 30,
            ..RunArgs::default()
        }),
    }
}

/// budgetd: `--budgetd`, `$BUDGETD_BIN`, or the one cargo built next to this example.
#[allow(clippy::disallowed_methods)] // main is where the environment is read
fn budgetd_path(arg: Option<PathBuf>) -> Option<PathBuf> {
    arg.or_else(|| std::env::var_os("BUDGETD_BIN").map(PathBuf::from))
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            // target/<profile>/examples/drill → target/<profile>/budgetd
            Some(exe.parent()?.parent()?.join("budgetd"))
        })
        .filter(|p| p.is_file())
}

fn run(args: RunArgs) -> ExitCode {
    let Some(budgetd) = budgetd_path(args.budgetd) else {
        eprintln!("drill: no budgetd binary; build it first: cargo build --bin budgetd");
        eprintln!("       (or pass --budgetd PATH, or set BUDGETD_BIN)");
        return ExitCode::FAILURE;
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("drill: cannot find my own binary: {e}");
            return ExitCode::FAILURE;
        }
    };
    let temp = tempfile::tempdir().expect("a temporary directory");
    let work_dir = args
        .work_dir
        .clone()
        .unwrap_or_else(|| temp.path().to_owned());
    let plan = scenario::Plan {
        cut: Duration::from_secs(args.cut_secs.max(1)),
        ..scenario::Plan::example()
    };
    let opts = scenario::Options {
        budgetd,
        launcher: control::Launcher::Example { exe },
        work_dir: work_dir.clone(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(scenario::run(plan, opts));
    // Stop whatever is still in flight before the children go.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(checks) => {
            let (ok, text) = scenario::summary(&checks);
            println!("\n{text}");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("\n{:#}", scenario::with_logs(e, &work_dir));
            if args.work_dir.is_none() {
                eprintln!("(pass --work-dir DIR to keep the logs)");
            }
            ExitCode::FAILURE
        }
    }
}
