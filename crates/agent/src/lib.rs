//! budget-agent: the client library services embed to follow budgetd's live budgets.
//!
//! - [`Agent::start`] watches the control plane over gRPC (`budget.v1.BudgetControl/Watch`),
//!   validates every config it receives with the same checks as the server
//!   (`LiveChain::findings`), ACKs good ones and NACKs bad ones (keeping the previous config),
//!   caches the last good one on disk ([`cache`]) and starts from it when the control plane is
//!   unreachable. A config with an error finding (e.g. an inversion) is refused at start.
//! - [`Agent::snapshot`] / [`Agent::subscribe`] give the live budgets as core types;
//!   [`Agent::deadline`] is the earlier of now + a segment's budget and the inherited deadline.
//! - [`Agent::call`] runs a downstream call under SPEC R-retry; the pure rules live in
//!   [`policy`] and are unit-tested without a clock.
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
//! # Modules, one concern each
//!
//! - `agent`: the [`Agent`] handle — start (control plane, else cache), live view, calls.
//! - `config`: [`AgentConfig`]. `error`: [`AgentError`].
//! - `connect`: the replicas in failover order, TLS, the token as metadata.
//! - `watch`: Watch + ACK/NACK, and the task reconnecting with [`backoff`] (not R-retry's).
//! - [`cache`]: the last good config on disk. `snapshot`: a validated config ([`Snapshot`]);
//!   `live`: the one in force.
//! - [`policy`]: the pure R-retry rules; `call`: their async loop; `jitter`: the randomness.
//!
//! Imports point one way, always to a later line (`src/tests/layers.rs` checks this graph
//! against the code):
//!
//! ```text
//! agent   -> watch call cache live policy snapshot config error
//! watch   -> connect backoff jitter cache live snapshot config error
//! call    -> policy jitter
//! connect -> config error
//! cache   -> snapshot
//! live    -> snapshot
//! error   -> snapshot
//! backoff policy jitter snapshot config   (leaves: no crate module imported)
//! ```
#![forbid(unsafe_code)]

mod agent;
pub mod backoff;
pub mod cache;
mod call;
mod config;
mod connect;
mod error;
mod jitter;
mod live;
pub mod policy;
mod snapshot;
mod watch;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use agent::{Agent, Source};
pub use budget_core::live::{LiveChain, LiveSegment};
pub use call::{Attempt, CallError};
pub use config::AgentConfig;
pub use error::AgentError;
pub use policy::{Cause, Classify, Failure};
pub use snapshot::{Refusal, Snapshot};
