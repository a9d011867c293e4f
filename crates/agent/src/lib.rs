//! budget-agent: the client library services embed to follow budgetd's live budgets.
//!
//! - [`Agent::start`] watches the control plane over gRPC (`budget.v1.BudgetControl/Watch`),
//!   validates every config it receives with the same checks as the server
//!   (`LiveChain::findings`), ACKs good ones and NACKs bad ones (keeping the previous config),
//!   caches the last good one on disk ([`cache`]) and starts from it when the control plane is
//!   unreachable. A config with an error finding (e.g. an inversion) is refused at start.
//! - [`Agent::snapshot`] / [`Agent::subscribe`] give the live budgets as core types;
//!   [`Agent::deadline`] is the earlier of now + a segment's budget and the inherited deadline.
//! - [`Agent::call`] runs a downstream call under SPEC R-retry; the pure rules are
//!   budget-core's ([`budget_core::retry`], re-exported in [`policy`]), the same code that
//!   computes the conformance corpus every client runs.
//! - Every call is counted per segment (SPEC §8: calls, attempts, retries by cause, one
//!   [`Outcome`] per call, a latency histogram of successful attempts) and reported to the
//!   control plane every `report_window` (default 10 s) with `BudgetControl/Report`; see
//!   [`Outcome`] for how a call's outcome is decided and [`Agent::flush_report`] /
//!   [`Agent::report_stats`]. The same counts are exposed as Prometheus metrics (below).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use budget_agent::{Agent, AgentConfig, Failure};
//!
//! let mut config = AgentConfig::new("http://127.0.0.1:50051", "token", "order-1", "order");
//! config.cache_path = Some("/var/cache/order/budgets.json".into());
//! let agent = Agent::start(config).await?;
//! let reserved = agent
//!     .call("order->inventory", Some("order-42"), |attempt| async move {
//!         // call inventory with `attempt.deadline` as its deadline …
//!         Ok::<_, Failure>(attempt.number)
//!     })
//!     .await?;
//! # let _ = reserved;
//! # Ok(())
//! # }
//! ```
//!
//! # Metrics
//!
//! The agent records through the [`metrics`] facade and depends on no exporter: the service
//! installs the recorder it likes, **before** [`Agent::start`] (series are registered when a
//! segment's counters are made, and their handles kept, so a call does no registry lookup):
//!
//! - `budget_agent_calls_total{segment,outcome}`: calls by [`Outcome`] name;
//! - `budget_agent_retries_total{segment,cause}`: retries made, cause `deadline` or
//!   `unavailable`;
//! - `budget_agent_attempt_duration_seconds{segment}`: histogram of successful attempts.
//!
//! A segment id found in several chains is one series (the label has no chain); a segment first
//! seen in a later config registers with the recorder in force then.
//!
//! For a Prometheus scrape endpoint, with `metrics-exporter-prometheus` in the service:
//!
//! ```ignore
//! use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
//!
//! PrometheusBuilder::new()
//!     .with_http_listener(([0, 0, 0, 0], 9000))
//!     // Buckets make a Prometheus histogram (without them the exporter renders a summary).
//!     .set_buckets_for_metric(
//!         Matcher::Full("budget_agent_attempt_duration_seconds".into()),
//!         &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0],
//!     )?
//!     .install()?;
//! let agent = budget_agent::Agent::start(config).await?;
//! ```
//!
//! # Modules, one concern each
//!
//! - `agent`: the [`Agent`] handle — start (control plane, else cache), live view, calls.
//! - `config`: [`AgentConfig`]. `error`: [`AgentError`].
//! - `connect`: the replicas in failover order, TLS, the token as metadata, the shared client.
//! - `watch`: Watch + ACK/NACK, and the task reconnecting with [`backoff`] (not R-retry's).
//! - [`cache`]: the last good config on disk. `snapshot`: a validated config ([`Snapshot`]);
//!   `live`: the one in force.
//! - [`policy`]: budget-core's R-retry rules, re-exported, and [`Classify`]; `call`: their
//!   async loop; `jitter`: the randomness.
//! - `outcome`: how a call ended (budget-core's [`Outcome`]) and the order of the retry
//!   counters. `cell`: one segment's striped counters and
//!   metric handles; `counts`: the cells of every segment. `window`: a window's counts, their
//!   wire form and HdrHistogram encoding; `pending`: undelivered windows, merged and bounded;
//!   `report`: the task sending them ([`ReportStats`], [`ReportError`]). `bench`: a hidden
//!   handle for `examples/record_bench.rs`.
//!
//! Imports point one way, always to a later line (`src/tests/layers.rs` checks this graph
//! against the code):
//!
//! ```text
//! agent   -> report watch call counts cell cache live policy snapshot config error
//! bench   -> counts cell outcome snapshot
//! report  -> connect pending counts window live jitter config error
//! watch   -> connect backoff jitter cache live snapshot config error
//! call    -> outcome policy jitter
//! connect -> config error
//! pending -> window
//! counts  -> cell window snapshot
//! cell    -> window outcome
//! window  -> outcome
//! outcome -> policy
//! cache   -> snapshot
//! live    -> snapshot
//! error   -> snapshot
//! backoff policy jitter snapshot config   (leaves: no crate module imported)
//! ```
#![forbid(unsafe_code)]

mod agent;
pub mod backoff;
#[doc(hidden)]
pub mod bench;
pub mod cache;
mod call;
mod cell;
mod config;
mod connect;
mod counts;
mod error;
mod jitter;
mod live;
mod outcome;
mod pending;
pub mod policy;
mod report;
mod snapshot;
mod watch;
mod window;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use agent::{Agent, Source};
pub use budget_core::live::{LiveChain, LiveSegment};
pub use call::{Attempt, CallError};
pub use config::AgentConfig;
pub use error::AgentError;
pub use outcome::Outcome;
pub use policy::{Cause, Classify, Failure};
pub use report::{ReportError, ReportStats, FINAL_REPORT_TIMEOUT};
pub use snapshot::{Refusal, Snapshot};
pub use window::MAX_LATENCY_US;

/// What this library says it is in `WatchRequest.client` (shown by `budgetctl agents`):
/// `rust/` and the crate's version.
pub const CLIENT: &str = concat!("rust/", env!("CARGO_PKG_VERSION"));
