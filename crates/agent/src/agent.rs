//! [`Agent`], the handle a service embeds: how it starts (control plane, else cache), the
//! live budgets and `deadline`, calls under R-retry with their counts (SPEC §8), and the
//! reporting of those counts. It wires the other modules together and holds no protocol of
//! its own.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::warn;

use crate::cache;
use crate::call::{self, Attempt, CallError};
use crate::cell::Record;
use crate::config::AgentConfig;
use crate::counts::Counts;
use crate::error::AgentError;
use crate::live::Live;
use crate::policy::{self, Cause, Classify};
use crate::report::{self, ReportError, ReportStats, Reporter};
use crate::snapshot::{Refusal, Snapshot};
use crate::watch::Watcher;

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

/// The client library a service embeds. Cheap to clone; the background task stops when the
/// last clone is dropped or on [`Agent::shutdown`].
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

struct Inner {
    live: Arc<Live>,
    /// Retries made by calls: (segment, cause) → count.
    retries: Mutex<BTreeMap<(String, Cause), u64>>,
    /// What calls did in the window in progress, per segment (SPEC §8).
    counts: Arc<Counts>,
    /// Sends the counts; `None` for a static agent.
    reporter: Option<Arc<Reporter>>,
    source: Source,
    task: Option<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
        if let Some(reporter) = &self.reporter {
            reporter.stop();
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
    /// - A second background task reports what the calls did every `report_window` (see
    ///   [`Agent::flush_report`]).
    ///
    /// Must be called inside a tokio runtime.
    pub async fn start(config: AgentConfig) -> Result<Agent, AgentError> {
        let mut watcher = Watcher::new(&config)?;
        report::check_window(&config)?;
        match watcher.first_config().await {
            Ok((mut stream, update)) => {
                let snapshot = watcher.accept_first(&mut stream, update).await?;
                let live = Live::new(snapshot);
                let reporting = Self::reporting(&config, &watcher, &live)?;
                let task = tokio::spawn(watcher.run(live.clone(), Some(stream))).abort_handle();
                Ok(Self::with(
                    live,
                    reporting,
                    Source::ControlPlane,
                    Some(task),
                ))
            }
            Err(reason) => {
                let Some(path) = config.cache_path.clone() else {
                    return Err(AgentError::Unavailable { reason });
                };
                let snapshot = cache::load(path)
                    .await
                    .map_err(|e| AgentError::Unavailable {
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
                let live = Live::new(snapshot);
                let reporting = Self::reporting(&config, &watcher, &live)?;
                let task = tokio::spawn(watcher.run(live.clone(), None)).abort_handle();
                Ok(Self::with(live, reporting, Source::Cache, Some(task)))
            }
        }
    }

    /// An agent over a fixed snapshot, with no control plane: for tests, examples and tools.
    /// The snapshot is validated like any received config. Its calls are counted (and seen by
    /// the `metrics` recorder) but never reported.
    pub fn from_snapshot(snapshot: Snapshot) -> Result<Agent, AgentError> {
        snapshot.check()?;
        let counts = Arc::new(Counts::new(&snapshot));
        Ok(Self::with(
            Live::new(snapshot),
            (counts, None),
            Source::Static,
            None,
        ))
    }

    /// The counts of `live`'s segments and the task reporting them, started.
    fn reporting(
        config: &AgentConfig,
        watcher: &Watcher,
        live: &Arc<Live>,
    ) -> Result<(Arc<Counts>, Option<Arc<Reporter>>), AgentError> {
        let counts = Arc::new(Counts::new(&live.current()));
        let reporter = Arc::new(Reporter::new(
            config,
            counts.clone(),
            live.clone(),
            watcher.link(),
            watcher.auth(),
        )?);
        tokio::spawn(reporter.clone().run());
        Ok((counts, Some(reporter)))
    }

    fn with(
        live: Arc<Live>,
        (counts, reporter): (Arc<Counts>, Option<Arc<Reporter>>),
        source: Source,
        task: Option<AbortHandle>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                live,
                retries: Mutex::new(BTreeMap::new()),
                counts,
                reporter,
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
        self.inner.live.current()
    }

    /// A receiver that sees every config the agent applies (the newest, never a backlog).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.inner.live.subscribe()
    }

    /// The revision of the live config (0 for none).
    pub fn revision(&self) -> i64 {
        self.inner.live.current().revision
    }

    /// The budget of `segment` (`caller->callee`), retries included, from any chain watched.
    pub fn budget(&self, segment: &str) -> Option<Duration> {
        self.inner.live.current().budget(segment)
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
    ///
    /// When it ends, the call is counted for its segment's report and metrics: its attempts,
    /// retries by cause, its [`crate::Outcome`] and, when an attempt succeeded, that attempt's
    /// duration. A call on an unknown segment, or dropped before it ends, is not counted.
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
        let Some((chain, seg)) = snapshot.locate(segment) else {
            return Err(CallError::UnknownSegment(segment.to_owned()));
        };
        let (result, ended) = call::run(seg, idempotency_key.is_some(), inherited, op, |cause| {
            *self
                .retries()
                .entry((segment.to_owned(), cause))
                .or_default() += 1;
        })
        .await;
        let record = Record {
            attempts: ended.attempts,
            retries: [
                ended.retries.retries(Cause::Deadline),
                ended.retries.retries(Cause::Unavailable),
            ],
            outcome: ended.outcome,
            latency: ended.latency,
        };
        self.inner.counts.record(chain, segment, &record);
        result
    }

    /// Sends the window in progress now, with every window still pending, and waits for the
    /// answer (at most half a report window, within 1..=10 s). Returns how many windows
    /// (one per segment and minute) the control plane accepted; 0 when there was nothing to
    /// send. On failure the windows stay pending for the next report.
    ///
    /// For graceful shutdown: `agent.flush_report().await` before the runtime stops, so the
    /// last seconds of calls are not lost ([`Agent::shutdown`] also tries, without waiting).
    pub async fn flush_report(&self) -> Result<u64, ReportError> {
        match &self.inner.reporter {
            Some(reporter) => reporter.flush().await,
            None => Err(ReportError::NoControlPlane),
        }
    }

    /// How reporting is going: segments counted and the memory they take, windows pending,
    /// sent and dropped (`dropped_windows`), failed requests.
    pub fn report_stats(&self) -> ReportStats {
        match &self.inner.reporter {
            Some(reporter) => reporter.stats(),
            None => {
                let (segments, counting_bytes) = self.inner.counts.footprint();
                ReportStats {
                    segments,
                    counting_bytes,
                    ..ReportStats::default()
                }
            }
        }
    }

    /// Retries made by this agent on `segment` for `cause`.
    pub fn retry_count(&self, segment: &str, cause: Cause) -> u64 {
        self.retries()
            .get(&(segment.to_owned(), cause))
            .copied()
            .unwrap_or(0)
    }

    /// Every retry counter: (segment, cause) → retries.
    pub fn retry_counts(&self) -> BTreeMap<(String, Cause), u64> {
        self.retries().clone()
    }

    /// The last config refused (NACKed) since start, with its revision.
    pub fn last_refusal(&self) -> Option<(i64, Refusal)> {
        self.inner.live.last_refusal()
    }

    fn retries(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, Cause), u64>> {
        self.inner
            .retries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops the background tasks, even if clones of this agent remain. The live config stays
    /// readable but is no longer updated. The reporter sends the last partial window first,
    /// best effort, within [`crate::FINAL_REPORT_TIMEOUT`]; this does not wait for it (await
    /// [`Agent::flush_report`] first for that). Dropping the last clone does the same.
    pub fn shutdown(self) {
        if let Some(task) = &self.inner.task {
            task.abort();
        }
        if let Some(reporter) = &self.inner.reporter {
            reporter.stop();
        }
    }
}

#[cfg(test)]
impl Agent {
    /// Takes every segment's counts as windows, as the reporter does.
    pub(crate) fn take_windows(&self) -> Vec<crate::window::Window> {
        self.inner.counts.take(0, 1, &self.snapshot())
    }
}
