//! Fleet status: what each agent connected to this replica was sent and acknowledged.
//!
//! The hot path (a publication delivered to 10 000 streams) touches only atomics in each
//! stream's own [`Slot`]; the status is written to the store in batches by [`Fleet::flush`],
//! so `GET /api/v1/agents` shows the agents of every replica.
//!
//! Every `agent_id` is bound to the token that first watched it ([`Fleet::claim_agents`](crate::store::Fleet::claim_agents), in
//! the database, so the binding holds across restarts and replicas; claims are batched by
//! [`claims`]): another token can neither
//! watch, ACK nor overwrite it. Memory is bounded: a slot lives while the agent has a stream
//! here (at most `agents.max_streams_per_token` per token, [`Fleet::open_stream`]) and until
//! its last status is stored. Entries of agents gone longer than `agents.retention_secs` are
//! deleted from the database ([`Fleet::expire`]); connected agents are rewritten now and then
//! so they never look gone.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub mod claims;
mod cohorts;
mod liveness;
mod permits;

use cohorts::Cohorts;
use permits::TokenCounts;
pub use permits::{TokenPermit, CALLS_PER_STREAM};

use crate::clock::now;
use crate::config::AgentSettings;
use crate::store::{AgentClaim, AgentStatus, Store, StoreError};

/// One agent's status; shared by its streams and the fleet.
#[derive(Debug)]
pub struct Slot {
    /// The identity of the token the agent is bound to.
    token_id: String,
    status: Mutex<AgentStatus>,
    delivered: AtomicI64,
    /// Something besides the revisions changed: the whole entry is rewritten.
    dirty: AtomicBool,
    /// The revisions sent or accepted changed (every publication): a compact update.
    progressed: AtomicBool,
    /// Open Watch streams of the agent on this replica. Rises only under the fleet's lock, so
    /// a slot the fleet forgets (no stream, status stored) is never used again.
    streams: AtomicUsize,
    /// Set with `dirty` or `progressed`: the fleet has something to flush.
    news: Arc<AtomicBool>,
    /// The stored entry follows its token's cohort on this replica ([`Fleet::flush`]).
    /// Changed only by the flush and [`Fleet::check_cohorts`], under the flush's lock.
    in_cohort: AtomicBool,
    /// The token and chains watched, one line each: the agents that may share a cohort.
    /// Made when first needed, forgotten when the chains change.
    cohort_key: Mutex<Option<Arc<str>>>,
}

/// A Watch stream's hold on its agent's slot: the agent reads as connected while one is held.
/// Dropped, with its stream or before the stream was served (its connection ended while it
/// was being opened), it counts the stream gone.
pub struct Attached(Arc<Slot>);

impl std::ops::Deref for Attached {
    type Target = Slot;

    fn deref(&self) -> &Slot {
        &self.0
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let slot = &self.0;
        let mut s = lock(&slot.status);
        let left = slot
            .streams
            .fetch_sub(1, Ordering::AcqRel)
            .saturating_sub(1);
        s.connected = left > 0;
        drop(s);
        slot.touch();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Slot {
    fn touch(&self) {
        self.dirty.store(true, Ordering::Release);
        self.tell();
    }

    fn progress(&self) {
        if !self.progressed.load(Ordering::Acquire) {
            self.progressed.store(true, Ordering::Release);
        }
        self.tell();
    }

    /// Sets the fleet's flag, which every slot shares: read first, so that a publication to
    /// every stream does not write one cache line from every core.
    fn tell(&self) {
        if !self.news.load(Ordering::Acquire) {
            self.news.store(true, Ordering::Release);
        }
    }

    /// The agent resumed holding entries up to `revision`, which it had accepted.
    pub fn resumed_with(&self, revision: i64) {
        let mut s = lock(&self.status);
        if revision > s.acked {
            s.acked = revision;
            drop(s);
            self.progress();
        }
    }

    /// A revision was sent; `new_chains` lists chains the agent had not received before.
    pub fn delivered(&self, revision: i64, new_chains: &[String]) {
        self.delivered.fetch_max(revision, Ordering::AcqRel);
        if new_chains.is_empty() {
            self.progress();
            return;
        }
        let mut s = lock(&self.status);
        for c in new_chains {
            if !s.chains.contains(c) {
                s.chains.push(c.clone());
            }
        }
        s.chains.sort();
        drop(s);
        *lock(&self.cohort_key) = None;
        self.touch();
    }

    fn cohort_key(&self) -> Arc<str> {
        let mut key = lock(&self.cohort_key);
        key.get_or_insert_with(|| {
            let chains = lock(&self.status).chains.join(",");
            format!("{}\n{chains}", self.token_id).into()
        })
        .clone()
    }

    fn snapshot(&self) -> AgentStatus {
        let mut s = lock(&self.status).clone();
        s.delivered = s.delivered.max(self.delivered.load(Ordering::Acquire));
        s
    }

    /// One more stream; the caller holds the fleet's lock.
    fn attach(&self, peer: &Peer, replica: &str, process: &str, at: &str) {
        let mut s = lock(&self.status);
        self.streams.fetch_add(1, Ordering::AcqRel);
        s.service = peer.service.to_owned();
        s.client = peer.client.to_owned();
        s.labels = peer.labels.clone();
        s.replica = replica.to_owned();
        s.process = process.to_owned();
        s.connected = true;
        s.last_seen = at.to_owned();
        drop(s);
        self.touch();
    }
}

/// Who is on the other end of a Watch stream, as it says.
struct Peer<'a> {
    service: &'a str,
    client: &'a str,
    labels: BTreeMap<String, String>,
}

/// Why an agent could not connect.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Another token holds the agent id.
    #[error("agent id is bound to another token")]
    Taken,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What became of an ACK or NACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    Recorded,
    /// The agent streams here under another token.
    OtherToken,
    /// The agent has no stream on this replica.
    Unknown,
    /// The revision was never sent to the agent here: the newest it was sent (or said it had).
    NotSent(i64),
}

/// The longest reconnect spread a replica asks of its agents.
pub const MAX_RECONNECT_SPREAD: Duration = Duration::from_secs(60);

/// The agents of this replica. A handle: every Watch stream keeps one, so a clone is one
/// pointer (the fields inline took about 170 bytes of each stream and a copy of the replica's
/// name).
#[derive(Clone)]
pub struct Fleet(Arc<Shared>);

impl std::ops::Deref for Fleet {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What every handle of a [`Fleet`] shares.
pub struct Shared {
    replica: String,
    /// This run of the replica: its name and a random suffix ([`Fleet::beat`]).
    process: Arc<str>,
    agents: Arc<Mutex<HashMap<String, Arc<Slot>>>>,
    streams: Arc<TokenCounts>,
    /// Ack and Report calls in flight, per token ([`CALLS_PER_STREAM`]).
    calls: Arc<TokenCounts>,
    store: Arc<dyn Store>,
    claims: claims::Claims,
    /// Some slot has news since the last flush (an idle fleet costs no scan of its slots).
    news: Arc<AtomicBool>,
    /// When every connected agent was last rewritten (the heartbeat).
    beat: Arc<Mutex<Instant>>,
    max_streams_per_token: usize,
    reconnect_per_second: u32,
    /// The spread asked of every stream this replica ends because it stops, fixed when the
    /// first is ended (streams close meanwhile).
    stopping_spread: Arc<std::sync::OnceLock<Duration>>,
    retention: Duration,
    /// How long a replica process may go without beating before its agents read as
    /// disconnected (`agents.replica_silence_secs`).
    silence: Duration,
    /// One flush at a time: cohort membership is decided by the flush.
    flushing: Arc<tokio::sync::Mutex<Cohorts>>,
}

impl Fleet {
    /// A fleet on the current tokio runtime (its claim task runs there).
    pub fn new(store: Arc<dyn Store>, replica: String, settings: &AgentSettings) -> Self {
        let process: Arc<str> =
            format!("{replica}#{}", hex::encode(rand::random::<[u8; 6]>())).into();
        Self(Arc::new(Shared {
            replica,
            process: process.clone(),
            silence: settings.replica_silence(),
            agents: Default::default(),
            streams: Default::default(),
            calls: Default::default(),
            claims: claims::Claims::spawn(store.clone()),
            news: Default::default(),
            beat: Arc::new(Mutex::new(Instant::now())),
            store,
            max_streams_per_token: settings.max_streams_per_token,
            reconnect_per_second: settings.reconnect_per_second.max(1),
            stopping_spread: Default::default(),
            retention: settings.retention(),
            flushing: Arc::new(tokio::sync::Mutex::new(Cohorts::new(process.to_string()))),
        }))
    }

    /// A place for one more Watch stream of the token `token_id`, or `None` when it holds
    /// `agents.max_streams_per_token` already.
    pub fn open_stream(&self, token_id: &str) -> Option<TokenPermit> {
        self.streams.take(token_id, self.max_streams_per_token)
    }

    /// A place for one more Ack or Report call of the token `token_id` until it ends, or
    /// `None` when it has [`Self::max_calls_per_token`] in flight already.
    pub fn open_call(&self, token_id: &str) -> Option<TokenPermit> {
        self.calls.take(token_id, self.max_calls_per_token())
    }

    /// Ack and Report calls one token may have in flight on this replica.
    pub fn max_calls_per_token(&self) -> usize {
        self.max_streams_per_token.saturating_mul(CALLS_PER_STREAM)
    }

    /// Watch streams open on this replica (accepted, not yet ended).
    pub fn open_streams(&self) -> usize {
        self.streams.total()
    }

    /// How long the agents of this replica should spread their reconnects over when their
    /// streams end: its open streams at `agents.reconnect_per_second`, at most
    /// [`MAX_RECONNECT_SPREAD`]. Sent to each agent as `budget-reconnect-spread-ms`.
    pub fn reconnect_spread(&self) -> Duration {
        let streams = u64::try_from(self.open_streams()).unwrap_or(u64::MAX);
        let ms = streams.saturating_mul(1000) / u64::from(self.reconnect_per_second);
        Duration::from_millis(ms).min(MAX_RECONNECT_SPREAD)
    }

    /// [`Self::reconnect_spread`] as it was when this replica began ending its streams.
    pub fn stopping_spread(&self) -> Duration {
        *self.stopping_spread.get_or_init(|| self.reconnect_spread())
    }

    /// The stream limit per token in effect.
    pub fn max_streams_per_token(&self) -> usize {
        self.max_streams_per_token
    }

    /// An agent opened a Watch stream with the token `token_id` (named `token`); the returned
    /// slot records what the stream delivers. `Taken` when another token holds `agent_id`.
    #[allow(clippy::too_many_arguments)]
    pub async fn connected(
        &self,
        agent_id: &str,
        token_id: &str,
        token: &str,
        service: &str,
        client: &str,
        labels: BTreeMap<String, String>,
        known_revision: i64,
    ) -> Result<Attached, ConnectError> {
        let at = now();
        let peer = Peer {
            service,
            client,
            labels,
        };
        {
            // A reconnect to this replica: the binding was checked when the slot was made.
            let agents = lock(&self.agents);
            if let Some(slot) = agents.get(agent_id).filter(|s| s.token_id == token_id) {
                slot.attach(&peer, &self.replica, &self.process, &at);
                slot.delivered.fetch_max(known_revision, Ordering::AcqRel);
                return Ok(Attached(slot.clone()));
            }
        }
        let fresh = AgentStatus {
            agent_id: agent_id.to_owned(),
            service: service.to_owned(),
            client: client.to_owned(),
            labels: peer.labels.clone(),
            chains: Vec::new(),
            replica: self.replica.clone(),
            process: self.process.to_string(),
            connected: true,
            delivered: known_revision,
            acked: 0,
            nack_revision: None,
            nack_error: None,
            first_seen: at.clone(),
            last_seen: at.clone(),
            token: Some(token.to_owned()),
            token_id: token_id.to_owned(),
        };
        let stored = match self.claims.claim(fresh.clone()).await? {
            AgentClaim::Taken => return Err(ConnectError::Taken),
            AgentClaim::Bound(stored) => *stored,
        };
        // Continue from what the store knows (the agent may have streamed here or from another
        // replica before): what it acknowledged, refused and receives.
        let status = AgentStatus {
            chains: stored.chains,
            acked: stored.acked,
            nack_revision: stored.nack_revision,
            nack_error: stored.nack_error,
            first_seen: stored.first_seen,
            connected: false,
            ..fresh
        };
        let mut agents = lock(&self.agents);
        let slot = match agents.get(agent_id).filter(|s| s.token_id == token_id) {
            // Another stream of the agent got here first.
            Some(slot) => slot.clone(),
            None => {
                // A slot of another token (whose token was revoked since) is replaced; its
                // stream keeps its own slot, which is never stored again.
                let slot = Arc::new(Slot {
                    token_id: token_id.to_owned(),
                    delivered: AtomicI64::new(known_revision),
                    status: Mutex::new(status),
                    dirty: AtomicBool::new(true),
                    progressed: AtomicBool::new(false),
                    streams: AtomicUsize::new(0),
                    news: self.news.clone(),
                    in_cohort: AtomicBool::new(false),
                    cohort_key: Mutex::new(None),
                });
                agents.insert(agent_id.to_owned(), slot.clone());
                slot
            }
        };
        slot.attach(&peer, &self.replica, &self.process, &at);
        slot.delivered.fetch_max(known_revision, Ordering::AcqRel);
        Ok(Attached(slot))
    }

    /// Records an ACK or NACK of `agent_id` sent with the token `token_id`.
    pub fn acked(
        &self,
        agent_id: &str,
        token_id: &str,
        revision: i64,
        accepted: bool,
        error: &str,
    ) -> AckOutcome {
        let Some(slot) = lock(&self.agents).get(agent_id).cloned() else {
            return AckOutcome::Unknown;
        };
        if slot.token_id != token_id {
            return AckOutcome::OtherToken;
        }
        // Only what the agent received counts: an ACK of a revision never sent would count it
        // in a canary it never took part in.
        let sent = slot.delivered.load(Ordering::Acquire);
        if revision > sent {
            return AckOutcome::NotSent(sent);
        }
        let mut s = lock(&slot.status);
        if accepted {
            s.acked = s.acked.max(revision);
            drop(s);
            slot.progress();
        } else {
            s.nack_revision = Some(revision);
            s.nack_error = Some(error.to_owned());
            drop(s);
            slot.touch();
        }
        AckOutcome::Recorded
    }

    /// The labels `agent_id` declared, if it has a slot here.
    pub fn labels_of(&self, agent_id: &str) -> Option<BTreeMap<String, String>> {
        let slot = lock(&self.agents).get(agent_id).cloned()?;
        let labels = lock(&slot.status).labels.clone();
        Some(labels)
    }

    /// The identity of the token `agent_id` is bound to, if the agent has a slot here.
    pub fn token_of(&self, agent_id: &str) -> Option<String> {
        lock(&self.agents)
            .get(agent_id)
            .map(|slot| slot.token_id.clone())
    }

    /// How often a connected agent's entry is rewritten, so it never looks gone.
    fn heartbeat(&self) -> Duration {
        (self.retention / 4).min(Duration::from_secs(3600))
    }

    /// The oldest `last_seen` of an agent still shown: now minus the retention period.
    pub fn seen_since(&self) -> String {
        crate::clock::before(self.retention)
    }

    /// Writes what changed since the last flush (and connected agents due for a heartbeat),
    /// then forgets the slots of agents whose streams all ended.
    ///
    /// Entries with news besides their revisions (connected, disconnected, new chains, a NACK)
    /// are rewritten whole, and follow no cohort. A publication changes only the revisions
    /// each agent was sent and accepted: the agents of one token watching the same chains
    /// follow a cohort, whose revisions are those most of them are at (`src/fleet/cohorts.rs`),
    /// so a publication to a whole fleet updates one cohort row, and writes only the agents
    /// not at its revisions.
    ///
    /// The flush runs in a task of its own, so a caller that goes away (an HTTP request whose
    /// client left) cannot stop it between two of its statements, with slots already taken
    /// as written.
    pub async fn flush(&self) {
        let fleet = self.clone();
        if let Err(e) = tokio::spawn(async move { fleet.flush_now(false).await }).await {
            tracing::warn!(error = %e, "the fleet flush failed");
        }
    }

    /// [`Self::flush`]; with `may_wait` (the periodic flush), the revisions of a cohort whose
    /// agents are caught mid-publication (at different revisions) wait for a later flush, up
    /// to 2 s, so that a publication still on its way to some agents, or a burst of them, does
    /// not write the entries of the others. `GET /agents` flushes without waiting.
    async fn flush_now(&self, may_wait: bool) {
        let mut cohorts = self.flushing.lock().await;
        let beat = lock(&self.beat).elapsed() >= self.heartbeat();
        if !self.news.swap(false, Ordering::AcqRel) && !beat {
            return;
        }
        let mut whole: Vec<Arc<Slot>> = Vec::new();
        let mut progressed: Vec<Arc<Slot>> = Vec::new();
        // Cohort members without news: they leave their cohort if it moves on without them.
        let mut members: Vec<Arc<Slot>> = Vec::new();
        for slot in lock(&self.agents).values() {
            if slot.dirty.swap(false, Ordering::AcqRel) {
                // The whole entry carries the revisions too.
                slot.progressed.store(false, Ordering::Release);
                whole.push(slot.clone());
            } else if slot.progressed.swap(false, Ordering::AcqRel)
                || (beat && slot.streams.load(Ordering::Acquire) > 0)
            {
                progressed.push(slot.clone());
            } else if slot.in_cohort.load(Ordering::Acquire) {
                members.push(slot.clone());
            }
        }
        if whole.is_empty() && progressed.is_empty() {
            if beat {
                *lock(&self.beat) = Instant::now();
            }
            return;
        }
        let at = now();
        if !whole.is_empty() {
            let batch: Vec<AgentStatus> = whole
                .iter()
                .map(|slot| {
                    let mut s = slot.snapshot();
                    s.last_seen = at.clone();
                    s
                })
                .collect();
            if let Err(e) = self.store.upsert_agents(&batch).await {
                tracing::warn!(error = %e, agents = batch.len(), "failed to record fleet status; will retry");
                whole.iter().for_each(|slot| slot.touch());
                progressed.iter().for_each(|slot| slot.progress());
                return;
            }
            whole
                .iter()
                .for_each(|slot| slot.in_cohort.store(false, Ordering::Release));
        }
        if !progressed.is_empty() {
            let seen = beat.then_some(at.as_str());
            if !self
                .progress(&mut cohorts, seen, may_wait && !beat, &progressed, members)
                .await
            {
                return;
            }
        }
        if beat {
            *lock(&self.beat) = Instant::now();
        }
        let mut agents = lock(&self.agents);
        let before = agents.len();
        agents.retain(|_, slot| {
            slot.streams.load(Ordering::Acquire) > 0
                || slot.dirty.load(Ordering::Acquire)
                || slot.progressed.load(Ordering::Acquire)
        });
        // Slots forgotten (or chains changed): keep at most a cohort per slot in memory.
        if agents.len() < before || cohorts.len() > agents.len() {
            cohorts.forget_unfollowed(agents.values());
        }
    }

    /// Deletes the entries of agents gone longer than the retention period.
    pub async fn expire(&self) {
        match self.store.expire_agents(&self.seen_since()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                removed = n,
                "forgot agents gone longer than the retention period"
            ),
            Err(e) => tracing::warn!(error = %e, "failed to expire gone agents; will retry"),
        }
    }

    /// Flushes every `every`, counts the followers of cohorts that moved
    /// (`check_cohorts`), and expires gone agents every quarter of the retention
    /// period (at most every 10 minutes).
    pub fn spawn_flusher(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        let sweep = (self.retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(600));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            let mut last_sweep: Option<Instant> = None;
            loop {
                tick.tick().await;
                fleet.flush_now(true).await;
                fleet.check_cohorts().await;
                if last_sweep.is_none_or(|t| t.elapsed() >= sweep) {
                    fleet.expire().await;
                    last_sweep = Some(Instant::now());
                }
            }
        })
    }
}

#[cfg(test)]
mod tests;
