//! The drill's load: entry requests to the gateway at a fixed rate (open loop), each one's
//! answer kept for the steps' figures. Bounded whatever the chain does: a fixed rate, at most
//! [`MAX_IN_FLIGHT`] requests in flight (more are not sent, and counted), each given up after
//! [`REQUEST_TIMEOUT`], and nothing sent once stopped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::services::KEY_HEADER;

pub const MAX_IN_FLIGHT: usize = 256;
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// One entry request of the load.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Seconds since the drill started.
    pub sent: f64,
    pub keyed: bool,
    /// HTTP status; 0 when no answer came (client timeout, connection error).
    pub status: u16,
    /// Client-observed latency, ms.
    pub ms: f64,
    pub body: Value,
}

impl Entry {
    pub fn outcome(&self) -> &str {
        if self.status == 0 {
            return "no answer";
        }
        self.body["status"].as_str().unwrap_or("no answer")
    }
}

/// An open-loop load on the gateway at a fixed rate, bounded: at most
/// [`MAX_IN_FLIGHT`] requests in flight, each given up after [`REQUEST_TIMEOUT`].
pub struct Load {
    stop: tokio::sync::watch::Sender<bool>,
    /// While set, every n-th request carries no idempotency key.
    pub keyless: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(Vec<Entry>, u64)>,
}

impl Load {
    /// Sends `POST url` at `rps` requests a second until stopped; request `n` (numbered by
    /// `seq`, shared by every load of the drill) carries `idempotency-key: ord-n`, unless
    /// `keyless` is set and `n` is a multiple of `keyless_every`.
    pub fn start(
        client: reqwest::Client,
        url: String,
        rps: u32,
        keyless_every: u64,
        seq: Arc<AtomicU64>,
        t0: Instant,
    ) -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let keyless = Arc::new(AtomicBool::new(false));
        let every = keyless_every.max(1);
        let no_key = keyless.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rps)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let limit = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
            let mut running = tokio::task::JoinSet::new();
            let mut entries = Vec::new();
            let mut shed = 0u64;
            loop {
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tick.tick() => {
                        let n = seq.fetch_add(1, Ordering::Relaxed) + 1;
                        let keyed = !(no_key.load(Ordering::Relaxed) && n % every == 0);
                        let Ok(permit) = limit.clone().try_acquire_owned() else {
                            shed += 1;
                            continue;
                        };
                        let mut req = client.post(&url).timeout(REQUEST_TIMEOUT);
                        if keyed {
                            req = req.header(KEY_HEADER, format!("ord-{n}"));
                        }
                        running.spawn(async move {
                            let _permit = permit;
                            let sent = t0.elapsed().as_secs_f64();
                            let t = Instant::now();
                            let (status, body) = match req.send().await {
                                Ok(r) => {
                                    let status = r.status().as_u16();
                                    (status, r.json::<Value>().await.unwrap_or(Value::Null))
                                }
                                Err(e) => (0, json!({"client_error": e.to_string()})),
                            };
                            let ms = t.elapsed().as_secs_f64() * 1000.0;
                            Entry { sent, keyed, status, ms, body }
                        });
                    }
                }
                while let Some(done) = running.try_join_next() {
                    entries.extend(done);
                }
            }
            while let Some(done) = running.join_next().await {
                entries.extend(done);
            }
            (entries, shed)
        });
        Self {
            stop,
            keyless,
            task,
        }
    }

    /// Stops sending and waits for every request in flight. Returns the entries and how many
    /// were not sent (every slot in flight was taken).
    pub async fn stop(self) -> anyhow::Result<(Vec<Entry>, u64)> {
        let _ = self.stop.send(true);
        Ok(self.task.await?)
    }
}
