//! Reporting what the calls did (SPEC §8): the background task that, at the end of every
//! window, takes the counts and sends `Report` to the control plane, keeping what it could not
//! deliver for the next report.
//!
//! - Windows are aligned to wall-clock multiples of `AgentConfig::report_window` (default
//!   10 s). At each window end the task takes every segment's counts (a window ending at that
//!   boundary) and sends every pending window in one request, over the client the watch task
//!   is using ([`Link`]: the same connection, failing over with it), with the agent's token.
//!   The request leaves at a random moment within a quarter of the window after the boundary
//!   (at most 2.5 s), so a fleet's reports do not reach the control plane together.
//!   Counts are attributed to the window in which they are taken: a call ending a few
//!   milliseconds after a boundary, before the take, lands in the window before it.
//! - Every report carries 16 random bytes of its own (`report_id`). A request that fails
//!   (control plane down, timeout, lost connection) may still have been stored, so it is kept
//!   as it was, *in doubt*, and sent again first, with `resend` set and the same id and
//!   windows, until it is answered: a control plane that stored it already answers without
//!   counting it again. Meanwhile newer windows wait in `pending`, merged per segment and
//!   minute and bounded; they go in a report of their own once the one in doubt is answered,
//!   after the watch task has reconnected or failed over. A request answered
//!   INVALID_ARGUMENT (malformed) or UNIMPLEMENTED (a control plane without Report) is
//!   dropped, as it would fail forever, and counted in `dropped_windows`.
//! - Nothing here runs on a call's path: calls only record into the counts (`counts`).
//!   Sending never panics; failures are logged (the first of a series as a warning).
//! - [`crate::Agent::flush_report`] sends the partial window now; on shutdown the task sends
//!   the last partial window, giving up after [`FINAL_REPORT_TIMEOUT`].
//!
//! Windows with no call are not sent. Windows of a report in doubt that grow too old for the
//! control plane are dropped from it (and counted in `dropped_windows`) before it is sent
//! again.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use budget_proto::v1;
use tokio::sync::Notify;
use tracing::{debug, error, info, warn};

use crate::config::AgentConfig;
use crate::connect::{status, Auth, Link};
use crate::counts::Counts;
use crate::error::AgentError;
use crate::live::Live;
use crate::pending::Pending;
use crate::window::{check_length, window_floor};

/// The longest the last report, sent on shutdown, may take.
pub const FINAL_REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// How reporting is going, for health checks and tests ([`crate::Agent::report_stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReportStats {
    /// Segments being counted (one cell each).
    pub segments: usize,
    /// Bytes held by the counting state (cells, shards, histograms).
    pub counting_bytes: usize,
    /// Windows waiting to be sent (one per segment and minute), and those of the report in
    /// doubt (sent, not yet answered).
    pub pending_windows: usize,
    /// Windows the control plane accepted.
    pub sent_windows: u64,
    /// Windows given up: more than 11 minutes pending for a segment, too old for the control
    /// plane (10 min), or refused (malformed, or no Report on the control plane). Logged.
    pub dropped_windows: u64,
    /// Report requests that failed (their windows were kept).
    pub failed_reports: u64,
}

/// Why [`crate::Agent::flush_report`] did not deliver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// The agent has no control plane ([`crate::Agent::from_snapshot`]).
    #[error("no control plane to report to")]
    NoControlPlane,
    /// The request failed; its windows are kept for the next report.
    #[error("report failed, windows kept for the next one: {0}")]
    Failed(String),
    /// The control plane refused the windows (malformed, or it has no Report); they were
    /// dropped.
    #[error("report refused, windows dropped: {0}")]
    Refused(String),
}

/// What the reporter keeps between rounds.
struct State {
    /// The end of the last window taken (Unix ms); the next window starts there.
    last_end_ms: i64,
    pending: Pending,
    /// The report whose answer never came, sent again before anything newer.
    in_doubt: Option<InDoubt>,
    sent_windows: u64,
    failed_reports: u64,
    /// Whether the last request failed (to log a series of failures once).
    failing: bool,
    /// `pending.dropped()` when last logged.
    dropped_logged: u64,
}

/// A report sent whose answer never came: it may have been stored.
#[derive(Debug, Clone)]
struct InDoubt {
    id: [u8; 16],
    windows: Vec<v1::SegmentWindow>,
}

impl InDoubt {
    /// Drops the windows that ended too long ago for the control plane; returns how many.
    fn drop_stale(&mut self, now_ms: i64) -> u64 {
        let before = self.windows.len();
        let limit = now_ms.saturating_sub(crate::pending::MAX_AGE_MS);
        self.windows.retain(|w| w.end_unix_ms >= limit);
        (before - self.windows.len()) as u64
    }
}

/// Refuses a `report_window` that does not divide a minute (before anything connects).
pub(crate) fn check_window(config: &AgentConfig) -> Result<(), AgentError> {
    check_length(config.report_window)
        .map(drop)
        .map_err(AgentError::Config)
}

/// Takes windows from the counts and sends them; shared by the background task and the
/// [`crate::Agent`] handles (for flushes and stats).
pub(crate) struct Reporter {
    counts: Arc<Counts>,
    live: Arc<Live>,
    link: Link,
    auth: Auth,
    agent_id: String,
    window_ms: i64,
    state: Mutex<State>,
    /// One request at a time, so a flush returns after everything taken before it was sent.
    sending: tokio::sync::Mutex<()>,
    stop: Notify,
}

impl Reporter {
    /// A reporter for `config`'s window; checks the window length.
    pub(crate) fn new(
        config: &AgentConfig,
        counts: Arc<Counts>,
        live: Arc<Live>,
        link: Link,
        auth: Auth,
    ) -> Result<Self, AgentError> {
        let window_ms = check_length(config.report_window).map_err(AgentError::Config)?;
        Ok(Self {
            counts,
            live,
            link,
            auth,
            agent_id: config.agent_id.clone(),
            window_ms,
            state: Mutex::new(State {
                last_end_ms: wall_ms(),
                pending: Pending::default(),
                in_doubt: None,
                sent_windows: 0,
                failed_reports: 0,
                failing: false,
                dropped_logged: 0,
            }),
            sending: tokio::sync::Mutex::new(()),
            stop: Notify::new(),
        })
    }

    /// The background task: a report at every window end until [`Reporter::stop`], then the
    /// last partial window.
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            let now = wall_ms();
            let boundary = window_floor(now, self.window_ms) + self.window_ms;
            let wait = Duration::from_millis(u64::try_from(boundary - now).unwrap_or(0));
            if self.stopped_within(wait).await {
                return;
            }
            // Woken late (a suspended host): end at the last boundary passed.
            let end = boundary.max(window_floor(wall_ms(), self.window_ms));
            // The window is taken at its boundary and sent a little later, at a moment of
            // this agent's own, so a fleet's reports do not reach the server together.
            self.take(end, wall_ms());
            let delay = send_delay(self.window_ms, crate::jitter::random_pick);
            if self.stopped_within(delay).await {
                return;
            }
            let _ = self.send(self.send_timeout()).await;
        }
    }

    /// Waits `wait` unless [`Reporter::stop`] is called meanwhile: then sends the last
    /// partial window and everything pending, and answers true.
    async fn stopped_within(&self, wait: Duration) -> bool {
        if tokio::time::timeout(wait, self.stop.notified())
            .await
            .is_err()
        {
            return false;
        }
        let _ = self.round(wall_ms(), FINAL_REPORT_TIMEOUT).await;
        debug!("reporter stopped");
        true
    }

    /// Asks the background task to send the last partial window and stop.
    pub(crate) fn stop(&self) {
        self.stop.notify_one();
    }

    /// Sends the window in progress and everything pending now.
    pub(crate) async fn flush(&self) -> Result<u64, ReportError> {
        self.round(wall_ms(), self.send_timeout()).await
    }

    pub(crate) fn stats(&self) -> ReportStats {
        let (segments, counting_bytes) = self.counts.footprint();
        let st = self.state();
        ReportStats {
            segments,
            counting_bytes,
            pending_windows: st.pending.len() + st.in_doubt.as_ref().map_or(0, |d| d.windows.len()),
            sent_windows: st.sent_windows,
            dropped_windows: st.pending.dropped(),
            failed_reports: st.failed_reports,
        }
    }

    /// Half a window, within 1..=10 s: a slow request never delays the next take by a window.
    fn send_timeout(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.window_ms / 2).unwrap_or(0))
            .clamp(Duration::from_secs(1), Duration::from_secs(10))
    }

    /// Takes the window ending at `end_ms`, then sends every pending window within `limit`.
    /// Returns how many windows the control plane accepted.
    async fn round(&self, end_ms: i64, limit: Duration) -> Result<u64, ReportError> {
        self.take(end_ms, wall_ms());
        self.send(limit).await
    }

    /// Sends the report in doubt, if any, then every pending window, within `limit`. Returns
    /// how many windows the control plane accepted.
    async fn send(&self, limit: Duration) -> Result<u64, ReportError> {
        let _one_at_a_time = self.sending.lock().await;
        let deadline = tokio::time::Instant::now() + limit;
        let mut accepted = 0;
        // The report in doubt stays in place while it is sent: a caller that gives up on a
        // flush loses nothing, the next round sends it again.
        let doubt = {
            let mut st = self.state();
            let now = wall_ms();
            st.pending.drop_stale(now);
            // Its windows too old for the control plane are dropped, and counted.
            if let Some(mut doubt) = st.in_doubt.take() {
                st.pending.count_refused(doubt.drop_stale(now));
                st.in_doubt = (!doubt.windows.is_empty()).then_some(doubt);
            }
            let doubt = st.in_doubt.clone();
            let dropped = st.pending.dropped();
            if dropped > st.dropped_logged {
                warn!(
                    dropped = dropped - st.dropped_logged,
                    dropped_windows = dropped,
                    "dropped report windows: more than 11 minutes pending, or too old to send"
                );
                st.dropped_logged = dropped;
            }
            doubt
        };
        if let Some(doubt) = doubt {
            match self.deliver(&doubt, true, deadline).await {
                Ok(n) => accepted += n,
                // Refused: dropped, and counted; what is pending goes on.
                Err(ReportError::Refused(_)) => {}
                Err(e) => return Err(e),
            }
            // Too little time left for another request: the newer windows wait a round.
            if deadline.saturating_duration_since(tokio::time::Instant::now()) < limit / 2 {
                return Ok(accepted);
            }
        }
        // In doubt from the moment it is sent until it is answered.
        let report = {
            let mut st = self.state();
            let windows = st.pending.take_all();
            if windows.is_empty() {
                return Ok(accepted);
            }
            let report = InDoubt {
                id: rand::random(),
                windows,
            };
            st.in_doubt = Some(report.clone());
            report
        };
        Ok(accepted + self.deliver(&report, false, deadline).await?)
    }

    /// Sends `report`, the report in doubt, (again, with `resend`) by `deadline`. One answered
    /// or refused is no longer in doubt; one not answered stays so.
    async fn deliver(
        &self,
        report: &InDoubt,
        resend: bool,
        deadline: tokio::time::Instant,
    ) -> Result<u64, ReportError> {
        let count = report.windows.len() as u64;
        let request = self.auth.authorized(v1::ReportRequest {
            agent_id: self.agent_id.clone(),
            windows: report.windows.clone(),
            report_id: report.id.to_vec(),
            resend,
        });
        let mut client = self.link.get();
        let answer = tokio::time::timeout_at(deadline, client.report(request)).await;
        let mut st = self.state();
        let reason = match answer {
            Ok(Ok(response)) => {
                let accepted = response.into_inner().accepted_windows;
                if accepted != count as i64 {
                    warn!(
                        sent = count,
                        accepted, "control plane accepted part of a report"
                    );
                }
                if st.failing {
                    info!(windows = count, resend, "report delivered after failures");
                }
                st.failing = false;
                st.sent_windows += count;
                st.in_doubt = None;
                return Ok(count);
            }
            Ok(Err(s))
                if matches!(
                    s.code(),
                    tonic::Code::InvalidArgument | tonic::Code::Unimplemented
                ) =>
            {
                st.pending.count_refused(count);
                st.dropped_logged = st.pending.dropped();
                if s.code() == tonic::Code::Unimplemented && st.failing {
                    debug!(
                        windows = count,
                        "control plane without Report; windows dropped"
                    );
                } else {
                    error!(windows = count, error = %status(&s), "control plane refused a report; windows dropped");
                }
                st.failing = s.code() == tonic::Code::Unimplemented;
                st.in_doubt = None;
                return Err(ReportError::Refused(status(&s)));
            }
            Ok(Err(s)) => status(&s),
            Err(_) => "no answer in time".to_owned(),
        };
        st.failed_reports += 1;
        let pending = st.pending.len();
        if st.failing {
            debug!(%reason, pending, "report failed again");
        } else {
            warn!(%reason, pending, "report failed; sending it again before newer windows");
            st.failing = true;
        }
        Err(ReportError::Failed(reason))
    }

    /// Takes every segment's counts into pending windows. The window ends at `end_ms` (a
    /// boundary) unless a flush already took past it, then at `now_ms`; it starts where the
    /// last one ended, but never before its own aligned window (so never in another minute).
    fn take(&self, end_ms: i64, now_ms: i64) {
        let mut st = self.state();
        let end = if end_ms > st.last_end_ms {
            end_ms
        } else {
            now_ms.max(st.last_end_ms + 1)
        };
        let start = st.last_end_ms.max(window_floor(end - 1, self.window_ms));
        let live = self.live.current();
        for window in self.counts.take(start, end, &live) {
            st.pending.add(window.to_proto());
        }
        st.last_end_ms = end;
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Longest a window waits after its boundary before it is sent: a quarter of the window, at
/// most 2.5 s (the send itself has half a window), so the next take is never late.
const MAX_SEND_DELAY_MS: i64 = 2_500;

/// How long after a boundary the windows are sent: `pick(max)` milliseconds, uniform in
/// `0..=max` for the running agent, where `max` is a quarter of the window, at most
/// [`MAX_SEND_DELAY_MS`].
fn send_delay(window_ms: i64, pick: impl FnOnce(u64) -> u64) -> Duration {
    let max = u64::try_from((window_ms / 4).min(MAX_SEND_DELAY_MS)).unwrap_or(0);
    Duration::from_millis(pick(max).min(max))
}

/// Wall-clock time in Unix milliseconds (0 before 1970).
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_sent_within_a_quarter_of_the_window_at_most_2_5_s() {
        let max_of = |window_ms| {
            let mut asked = None;
            let delay = send_delay(window_ms, |max| {
                asked = Some(max);
                max
            });
            assert_eq!(Some(delay.as_millis() as u64), asked);
            delay
        };
        assert_eq!(max_of(10_000), Duration::from_millis(2_500));
        assert_eq!(max_of(60_000), Duration::from_millis(2_500));
        assert_eq!(max_of(1_000), Duration::from_millis(250));
        assert_eq!(max_of(100), Duration::from_millis(25));
        assert_eq!(send_delay(10_000, |_| 0), Duration::ZERO);
        assert_eq!(send_delay(10_000, |_| 1_234), Duration::from_millis(1_234));
        // A pick past the bound is cut to it.
        assert_eq!(send_delay(10_000, |_| 9_999), Duration::from_millis(2_500));
    }

    #[test]
    fn the_running_agents_delays_spread_over_the_bound() {
        let delays: std::collections::BTreeSet<_> = (0..200)
            .map(|_| send_delay(10_000, crate::jitter::random_pick).as_millis())
            .collect();
        assert!(delays.iter().all(|d| *d <= 2_500));
        assert!(
            delays.len() > 100,
            "{} distinct delays of 200",
            delays.len()
        );
    }
}
