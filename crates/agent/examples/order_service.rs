//! The `order` service of SPEC §4 example A, embedding budget-agent: it serves one request
//! under the gateway's 800 ms entry deadline and calls inventory, payment and user, each under
//! its live budget (inventory 44/208 ms, payment 390 ms without deadline retry, user 9 ms).
//! The downstreams are simulated: inventory times out once, payment is unavailable once.
//!
//! Run it against a local budgetd:
//!
//! ```text
//! budgetd serve --demo        # loads chain `checkout` (example A, approved) and prints
//!                             # BUDGETD_TOKEN=<admin token>; gRPC on 127.0.0.1:50051
//! export BUDGETD_TOKEN=<admin token>
//! export BUDGET_AGENT_TOKEN=$(budgetctl token create --role agent --name order-1)
//! cargo run -p budget-agent --example order_service
//! ```
//!
//! Environment: `BUDGETD_GRPC` (default `http://127.0.0.1:50051`), `BUDGET_AGENT_TOKEN`
//! (role `agent`), `BUDGET_AGENT_CACHE` (default `$TMPDIR/budget-agent-order-1.json`).
//! Each retry is logged as `retrying segment=… retry=n cause=…`.
//!
//! Offline: if budgetd cannot be reached within a few seconds the agent starts from the cache
//! a previous run left; with no cache either, the example says so and exits with status 1.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use budget_agent::{Agent, AgentConfig, AgentError, Attempt, CallError, Failure, Source};
use tokio::time::{sleep, Instant};

const ENTRY_DEADLINE: Duration = Duration::from_millis(800);

#[tokio::main(flavor = "current_thread")]
#[allow(clippy::disallowed_methods)] // main is where the environment is read
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .without_time()
        .init();

    let endpoint =
        std::env::var("BUDGETD_GRPC").unwrap_or_else(|_| "http://127.0.0.1:50051".into());
    let token = std::env::var("BUDGET_AGENT_TOKEN").unwrap_or_default();
    let cache = std::env::var_os("BUDGET_AGENT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("budget-agent-order-1.json"));

    let mut config = AgentConfig::new(endpoint.clone(), token, "order-1", "order");
    config.chains = vec!["checkout".into()];
    config.cache_path = Some(cache.clone());
    config.connect_timeout = Duration::from_secs(3);
    config.first_config_timeout = Duration::from_secs(3);

    let agent = match Agent::start(config).await {
        Ok(agent) => agent,
        Err(AgentError::Unavailable { reason }) => {
            eprintln!("order_service: no budgets to run with.");
            eprintln!(
                "  budgetd at {endpoint} gave no budgets and there is no cache at {}",
                cache.display()
            );
            eprintln!("  ({reason})");
            eprintln!(
                "  start one with `budgetd serve --demo` and set BUDGET_AGENT_TOKEN to a token"
            );
            eprintln!("  from `budgetctl token create --role agent --name order-1`.");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("order_service: refusing to start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let from = match agent.source() {
        Source::ControlPlane => format!("the control plane at {endpoint}"),
        Source::Cache => format!(
            "the cache at {} (control plane unreachable)",
            cache.display()
        ),
        Source::Static => "a static snapshot".into(),
    };
    println!("budgets at revision {} from {from}", agent.revision());
    for segment in ["order->inventory", "order->payment", "order->user"] {
        match agent.budget(segment) {
            Some(b) => println!("  {segment:<18} budget {} ms", b.as_millis()),
            None => println!("  {segment:<18} not in the live config"),
        }
    }

    // One request from the gateway: whatever order does must finish by its deadline.
    let inherited = Instant::now() + ENTRY_DEADLINE;
    let order_id = "order-20261130-42";
    let started = Instant::now();

    let inventory = agent
        .call_within("order->inventory", Some(order_id), Some(inherited), |a| {
            downstream("inventory", a, |n| if n == 1 { Slow } else { Fast })
        })
        .await;
    report("order->inventory", &inventory);

    let payment = agent
        .call_within("order->payment", Some("pay-42"), Some(inherited), |a| {
            downstream("payment", a, |n| if n == 1 { Down } else { Fast })
        })
        .await;
    report("order->payment", &payment);

    // Not idempotent: never retried, so no key is given.
    let user = agent
        .call_within("order->user", None, Some(inherited), |a| {
            downstream("user", a, |_| Fast)
        })
        .await;
    report("order->user", &user);

    println!(
        "request served in {} ms (entry deadline {} ms); retries: {:?}",
        started.elapsed().as_millis(),
        ENTRY_DEADLINE.as_millis(),
        agent.retry_counts()
    );
    // Graceful shutdown: report what the calls did (SPEC §8) before the process exits.
    match agent.flush_report().await {
        Ok(windows) => println!("reported {windows} segment window(s) to the control plane"),
        Err(e) => println!("calls not reported: {e}"),
    }
    agent.shutdown();
    ExitCode::SUCCESS
}

#[derive(Clone, Copy)]
enum Behaviour {
    Fast,
    /// Hangs past any timeout.
    Slow,
    /// Fails at once with UNAVAILABLE.
    Down,
}
use Behaviour::{Down, Fast, Slow};

/// A simulated downstream that behaves as `script(attempt number)` says.
async fn downstream(
    name: &'static str,
    attempt: Attempt,
    script: impl Fn(u32) -> Behaviour,
) -> Result<String, Failure> {
    println!(
        "  -> {name}: attempt {} with timeout {} ms",
        attempt.number,
        attempt.timeout.as_millis()
    );
    match script(attempt.number) {
        Fast => {
            sleep(Duration::from_millis(3)).await;
            Ok(format!("{name} ok"))
        }
        Slow => {
            sleep(Duration::from_secs(5)).await;
            Ok(format!("{name} ok (late)"))
        }
        Down => Err(Failure::Unavailable),
    }
}

fn report(segment: &str, result: &Result<String, CallError<Failure>>) {
    match result {
        Ok(v) => println!("{segment}: {v}"),
        Err(CallError::UnknownSegment(_)) => {
            println!("{segment}: not in the live config; falling back")
        }
        Err(e) => println!("{segment}: failed ({e:?}); falling back"),
    }
}
