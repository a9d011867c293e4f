//! Uploads outbox items until they succeed: exponential backoff with jitter, restart-safe
//! (state lives in the database), safe with several replicas (leased claims).

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::Notify;

use super::Archive;
use crate::store::Store;

/// How long a claimed item stays reserved for one worker; also how long items claimed by a
/// worker that died (kill -9, lost node) wait before another worker takes them.
const LEASE: Duration = Duration::from_secs(30);
/// The longest one upload may take. A batch starts no upload that could outlive its lease,
/// so two workers never upload one item at once.
const PUT_TIMEOUT: Duration = Duration::from_secs(10);
const BATCH: i64 = 16;
const BACKOFF_BASE: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(60);

fn at(offset: Duration) -> String {
    let t = chrono::Utc::now() + chrono::Duration::from_std(offset).unwrap_or_default();
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Delay before attempt `attempts + 1`: base × 2^attempts, capped, half of it random.
pub fn backoff(attempts: i64) -> Duration {
    let exp = BACKOFF_BASE
        .saturating_mul(1u32 << attempts.clamp(0, 16) as u32)
        .min(BACKOFF_CAP);
    let half = exp / 2;
    half + Duration::from_millis(rand::thread_rng().gen_range(0..=half.as_millis() as u64))
}

#[derive(Clone)]
pub struct Archiver {
    store: Arc<dyn Store>,
    archive: Arc<dyn Archive>,
    wake: Arc<Notify>,
}

impl Archiver {
    pub fn new(store: Arc<dyn Store>, archive: Arc<dyn Archive>) -> Self {
        Self {
            store,
            archive,
            wake: Arc::new(Notify::new()),
        }
    }

    pub fn archive(&self) -> &Arc<dyn Archive> {
        &self.archive
    }

    /// Something was queued: look now rather than at the next poll.
    pub fn kick(&self) {
        self.wake.notify_one();
    }

    /// Claims and uploads one batch; returns how many items it handled.
    pub async fn run_once(&self) -> anyhow::Result<usize> {
        let claimed = std::time::Instant::now();
        let items = self
            .store
            .archive_claim(&at(Duration::ZERO), &at(LEASE), BATCH)
            .await?;
        for item in &items {
            if claimed.elapsed() + PUT_TIMEOUT >= LEASE {
                // The rest stay leased until it ends, then any worker takes them.
                break;
            }
            let put = self
                .archive
                .put(&item.key, item.body.as_bytes(), &item.sha256);
            let done = match tokio::time::timeout(PUT_TIMEOUT, put).await {
                Ok(result) => result,
                Err(_) => Err(anyhow::anyhow!(
                    "the upload took longer than {PUT_TIMEOUT:?}"
                )),
            };
            match done {
                Ok(()) => {
                    self.store
                        .archive_done(item.id, &at(Duration::ZERO))
                        .await?;
                    tracing::debug!(key = %item.key, "archived");
                }
                Err(e) => {
                    let delay = backoff(item.attempts);
                    tracing::warn!(key = %item.key, attempts = item.attempts + 1, retry_in = ?delay, error = %format!("{e:#}"), "archive upload failed");
                    self.store
                        .archive_failed(item.id, &format!("{e:#}"), &at(delay))
                        .await?;
                }
            }
        }
        Ok(items.len())
    }

    /// Runs forever: a batch whenever kicked, and a poll every `poll`.
    pub fn spawn(&self, poll: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                match me.run_once().await {
                    Ok(n) if n > 0 => continue,
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "archive worker cannot reach the store")
                    }
                }
                tokio::select! {
                    _ = me.wake.notified() => {}
                    _ = tokio::time::sleep(poll) => {}
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        for attempts in 0..30 {
            let d = backoff(attempts);
            let exp = BACKOFF_BASE
                .saturating_mul(1u32 << attempts.clamp(0, 16) as u32)
                .min(BACKOFF_CAP);
            assert!(d >= exp / 2 && d <= exp, "{attempts}: {d:?}");
        }
        assert!(backoff(40) <= BACKOFF_CAP);
    }
}
