//! The agent a service embeds: start (from the control plane or the cache), the live budgets,
//! and calls under R-retry.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::call::{self, Attempt, CallError};
use crate::policy::{self, Cause, Classify};
use crate::snapshot::{Refusal, Snapshot};
use crate::watch::Conn;

/// How an agent reaches the control plane and what it watches.
#[derive(Clone)]
pub struct AgentConfig {
    /// gRPC endpoint of budgetd: `http://127.0.0.1:50051` (plaintext HTTP/2) or
    /// `https://budgetd.internal:50051` (TLS; the server's certificate is verified).
    pub endpoint: String,
    /// Other replicas to fail over to, tried in order after `endpoint` (same scheme, token
    /// and TLS settings). A stream that breaks reconnects to the next one.
    pub fallback_endpoints: Vec<String>,
    /// Bearer token with role `agent`, sent as `authorization: Bearer <token>`. Never logged.
    pub token: String,
    /// Stable id of this agent instance, e.g. `order-7f9c-1`.
    pub agent_id: String,
    /// The service the agent runs in.
    pub service: String,
    /// Chains to watch; empty means every chain where `service` is a caller or callee.
    pub chains: Vec<String>,
    /// Where the last good config is cached; `None` disables the cache.
    pub cache_path: Option<PathBuf>,
    /// Free-form labels shown in fleet status (host, version …).
    pub labels: BTreeMap<String, String>,
    /// Longest wait for a TCP/HTTP2 connection.
    pub connect_timeout: Duration,
    /// Longest wait, once connected, for the first config at start; then the cache is used.
    pub first_config_timeout: Duration,
    /// PEM file of the CA (one or more certificates) that signed budgetd's certificate; with
    /// it only these CAs are trusted, without it the system's roots. Needs an `https://`
    /// endpoint; read once at start.
    pub ca_cert: Option<PathBuf>,
    /// The name the server's certificate must carry, when it differs from the endpoint's
    /// host (e.g. connecting by IP address to a certificate for `budgetd.internal`).
    pub tls_domain: Option<String>,
}

impl AgentConfig {
    /// A config with no chain filter, no cache, no labels, a 3 s connect timeout and a 5 s
    /// first-config timeout.
    pub fn new(
        endpoint: impl Into<String>,
        token: impl Into<String>,
        agent_id: impl Into<String>,
        service: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            fallback_endpoints: Vec::new(),
            token: token.into(),
            agent_id: agent_id.into(),
            service: service.into(),
            chains: Vec::new(),
            cache_path: None,
            labels: BTreeMap::new(),
            connect_timeout: Duration::from_secs(3),
            first_config_timeout: Duration::from_secs(5),
            ca_cert: None,
            tls_domain: None,
        }
    }
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("endpoint", &self.endpoint)
            .field("fallback_endpoints", &self.fallback_endpoints)
            .field("token", &"<redacted>")
            .field("agent_id", &self.agent_id)
            .field("service", &self.service)
            .field("chains", &self.chains)
            .field("cache_path", &self.cache_path)
            .field("labels", &self.labels)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_config_timeout", &self.first_config_timeout)
            .field("ca_cert", &self.ca_cert)
            .field("tls_domain", &self.tls_domain)
            .finish()
    }
}

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The [`AgentConfig`] itself is unusable (bad endpoint, token not a header value …).
    #[error("invalid agent config: {0}")]
    Config(String),
    /// The config received (or cached) has an error finding, e.g. an inversion: a service
    /// refuses to start with it. `message` carries the numbers.
    #[error("refused the budgets of chain {chain:?} at segment {segment:?}: {message}")]
    Refused {
        chain: String,
        segment: String,
        message: String,
    },
    /// Neither the control plane nor a usable cache gave a config.
    #[error("no budgets: control plane unavailable and no usable cached config ({reason})")]
    Unavailable { reason: String },
}

impl From<Refusal> for AgentError {
    fn from(r: Refusal) -> Self {
        Self::Refused {
            chain: r.chain,
            segment: r.segment,
            message: r.message,
        }
    }
}

/// Where the config an agent started with came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The first update of the control plane's watch stream.
    ControlPlane,
    /// The on-disk cache: the control plane was unreachable at start.
    Cache,
    /// A snapshot given to [`Agent::from_snapshot`]; never updated.
    Static,
}

/// State shared by the agent handle and its background task.
pub(crate) struct Shared {
    pub(crate) tx: watch::Sender<Arc<Snapshot>>,
    pub(crate) last_refusal: Mutex<Option<(i64, Refusal)>>,
    retries: Mutex<BTreeMap<(String, Cause), u64>>,
}

impl Shared {
    fn new(snapshot: Snapshot) -> Arc<Self> {
        let (tx, _rx) = watch::channel(Arc::new(snapshot));
        Arc::new(Self {
            tx,
            last_refusal: Mutex::new(None),
            retries: Mutex::new(BTreeMap::new()),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The client library a service embeds. Cheap to clone; the background task stops when the
/// last clone is dropped or on [`Agent::shutdown`].
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    source: Source,
    task: Option<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("source", &self.inner.source)
            .field("revision", &self.revision())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Connects to the control plane, watches the budgets and waits for the first config.
    ///
    /// - A first config with an error finding (e.g. an inversion) is NACKed and refused:
    ///   [`AgentError::Refused`], like a service refusing to start with an inverted config.
    /// - A good one is ACKed, cached, and kept current by a background task that reconnects
    ///   forever (exponential backoff with full jitter) and NACKs any later bad config,
    ///   keeping the previous one.
    /// - When no connection is made within `connect_timeout`, or no config arrives within
    ///   `first_config_timeout`, the agent starts from the cache (validated the same way) and
    ///   keeps trying to connect in the background; without a usable cache:
    ///   [`AgentError::Unavailable`].
    ///
    /// Must be called inside a tokio runtime.
    pub async fn start(config: AgentConfig) -> Result<Agent, AgentError> {
        let mut conn = Conn::new(&config)?;
        match conn.first_config().await {
            Ok((mut client, stream, update)) => {
                let revision = update.revision;
                let snapshot = match Snapshot::default().apply(update) {
                    Ok(s) => s,
                    Err(refusal) => {
                        warn!(revision, %refusal, "refusing to start with the budgets received");
                        conn.ack(&mut client, revision, Err(&refusal)).await;
                        return Err(refusal.into());
                    }
                };
                conn.write_cache(&snapshot).await;
                conn.ack(&mut client, revision, Ok(())).await;
                info!(
                    revision,
                    chains = snapshot.chains.len(),
                    "started with budgets from the control plane"
                );
                let shared = Shared::new(snapshot);
                let task = tokio::spawn(conn.run(shared.clone(), Some(client), Some(stream)));
                Ok(Self::with(
                    shared,
                    Source::ControlPlane,
                    Some(task.abort_handle()),
                ))
            }
            Err(reason) => {
                let Some(path) = config.cache_path.clone() else {
                    return Err(AgentError::Unavailable { reason });
                };
                let read = tokio::task::spawn_blocking(move || crate::cache::read(&path))
                    .await
                    .map_err(|e| AgentError::Unavailable {
                        reason: format!("{reason}; cache read failed: {e}"),
                    })?;
                let snapshot = read.map_err(|e| AgentError::Unavailable {
                    reason: format!("{reason}; {e}"),
                })?;
                if let Err(refusal) = snapshot.check() {
                    warn!(revision = snapshot.revision, %refusal, "refusing to start with the cached budgets");
                    return Err(refusal.into());
                }
                warn!(
                    %reason,
                    revision = snapshot.revision,
                    "control plane unavailable; starting from the cached budgets"
                );
                let shared = Shared::new(snapshot);
                let task = tokio::spawn(conn.run(shared.clone(), None, None));
                Ok(Self::with(shared, Source::Cache, Some(task.abort_handle())))
            }
        }
    }

    /// An agent over a fixed snapshot, with no control plane: for tests, examples and tools.
    /// The snapshot is validated like any received config.
    pub fn from_snapshot(snapshot: Snapshot) -> Result<Agent, AgentError> {
        snapshot.check()?;
        Ok(Self::with(Shared::new(snapshot), Source::Static, None))
    }

    fn with(shared: Arc<Shared>, source: Source, task: Option<AbortHandle>) -> Self {
        Self {
            inner: Arc::new(Inner {
                shared,
                source,
                task,
            }),
        }
    }

    /// Where the config the agent started with came from.
    pub fn source(&self) -> Source {
        self.inner.source
    }

    /// The live config now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.shared.tx.borrow().clone()
    }

    /// A receiver that sees every config the agent applies (the newest, never a backlog).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.inner.shared.tx.subscribe()
    }

    /// The revision of the live config (0 for none).
    pub fn revision(&self) -> i64 {
        self.inner.shared.tx.borrow().revision
    }

    /// The budget of `segment` (`caller->callee`), retries included, from any chain watched.
    pub fn budget(&self, segment: &str) -> Option<Duration> {
        self.inner.shared.tx.borrow().budget(segment)
    }

    /// The deadline for a call of `segment` starting now: the earlier of now + its budget and
    /// the `inherited` deadline of the request being served. `None` for an unknown segment.
    pub fn deadline(&self, segment: &str, inherited: Option<Instant>) -> Option<Instant> {
        let budget = self.budget(segment)?;
        Some(policy::earliest(Instant::now(), budget, inherited))
    }

    /// Runs `op` as a call of `segment` under R-retry; see [`Agent::call_within`].
    pub async fn call<T, E, F, Fut>(
        &self,
        segment: &str,
        idempotency_key: Option<&str>,
        op: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
    {
        self.call_within(segment, idempotency_key, None, op).await
    }

    /// Runs `op` as a call of `segment` under R-retry, within the `inherited` deadline.
    ///
    /// Each attempt gets the segment's `timeout_ms`, capped by the time left; an attempt that
    /// hits it fails with cause deadline. A failure is retried only when the caller gave an
    /// `idempotency_key`, the segment is idempotent and its retry plan has a rule for the cause
    /// (`max_retries` per cause, `backoffs_ms[i]` stretched by 0..=`jitter_pct` %). Business and
    /// other errors never retry. No backoff or attempt runs past the segment's `budget_ms`
    /// (counted from now) or the inherited deadline: the call stops with the last error.
    /// Each retry is logged (`retry=n cause=…`) and counted ([`Agent::retry_count`]).
    pub async fn call_within<T, E, F, Fut>(
        &self,
        segment: &str,
        idempotency_key: Option<&str>,
        inherited: Option<Instant>,
        op: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut(Attempt) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Classify,
    {
        let snapshot = self.snapshot();
        let Some(seg) = snapshot.segment(segment) else {
            return Err(CallError::UnknownSegment(segment.to_owned()));
        };
        let shared = &self.inner.shared;
        call::run(seg, idempotency_key.is_some(), inherited, op, |cause| {
            *lock(&shared.retries)
                .entry((segment.to_owned(), cause))
                .or_default() += 1;
        })
        .await
    }

    /// Retries made by this agent on `segment` for `cause`.
    pub fn retry_count(&self, segment: &str, cause: Cause) -> u64 {
        lock(&self.inner.shared.retries)
            .get(&(segment.to_owned(), cause))
            .copied()
            .unwrap_or(0)
    }

    /// Every retry counter: (segment, cause) → retries.
    pub fn retry_counts(&self) -> BTreeMap<(String, Cause), u64> {
        lock(&self.inner.shared.retries).clone()
    }

    /// The last config refused (NACKed) since start, with its revision.
    pub fn last_refusal(&self) -> Option<(i64, Refusal)> {
        lock(&self.inner.shared.last_refusal).clone()
    }

    /// Stops the background task now, even if clones of this agent remain. The live config
    /// stays readable but is no longer updated.
    pub fn shutdown(self) {
        if let Some(task) = &self.inner.task {
            task.abort();
        }
    }
}
