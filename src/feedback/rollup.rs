//! Agents' report windows merged in memory and written as rollups, one group commit at a time.
//!
//! A Report merges its windows into the current batch and waits for that batch's commit: the
//! agent is answered only once its windows are durable, and a batch that fails to commit is
//! dropped whole (every agent in it is answered UNAVAILABLE and sends its windows again), so
//! a window is neither lost nor counted twice. One flusher commits a batch at a time: it reads
//! this writer's rows for the batch's minutes, adds the batch, and writes them back in one
//! transaction of multi-row statements, however many agents reported.
//!
//! The windows of a canary's agents are also summed per (canary, segment, rollup) and for the
//! whole bake, and those rows are written in the same transaction as the rollups: a canary's
//! health never counts a window its rollups do not, nor counts one twice when a batch fails.
//!
//! A report its agent sends again (`resend`: its answer was lost, so it may be stored) is kept
//! apart from the batch's sums until the commit, which reads its agent's last stored report id
//! and counts it only if the id differs; each agent's last counted id is written in the
//! commit's transaction. A resend whose report is in the same batch already is not kept.
//! A report sent once that another replica stored meanwhile from its resend (the agent gave
//! up waiting here and failed over) makes the commit write nothing: its windows are in the
//! batch's sums, so the batch is dropped and its agents send again, as resends. The process
//! then keeps that agent's reports apart as resends (`repeaters`), so an agent that repeats
//! stored reports as new fails one batch of the process (two with two reports in flight),
//! and once [`REPEATERS`] agents have, every report is kept apart so.
//!
//! Memory: a batch holds one entry per (chain, segment, rollup) reported since the last commit
//! (segments of published chains only, rollups at most 11 minutes old), and per (canary,
//! segment, rollup or whole bake) of canary agents' windows, each with one histogram, and
//! the id of each agent's last report; the counts of reports are not kept. Resends are held
//! whole until the commit, charged to their calls' budgets until then.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use budget_core::feedback::Counts;
use hdrhistogram::Histogram;
use tokio::sync::watch;

use super::hdr;
use super::repeaters::Repeaters;
pub use super::repeaters::REPEATERS;
use crate::store::feedback::{LastReport, Rollup, ROLLUP_AGENT_NAMES};
use crate::store::{CanaryHealthRow, Store, StoreError, WHOLE_BAKE};

/// Why a batch's write failed: a resend another replica stored meanwhile (the batch is
/// written again without it), a report sent once that was stored already (its windows are in
/// the batch's sums and cannot be taken out: the batch is dropped, its agents send again), or
/// anything else (dropped likewise).
enum Conflict {
    ResentStored(String),
    /// With the agents whose report sent once was stored.
    FirstStored(String, Vec<String>),
    Other(String),
}

impl From<StoreError> for Conflict {
    fn from(e: StoreError) -> Self {
        let m = e.to_string();
        match e {
            StoreError::ReportStored { first_sends } if first_sends.is_empty() => {
                Self::ResentStored(m)
            }
            StoreError::ReportStored { first_sends } => Self::FirstStored(m, first_sends),
            _ => Self::Other(m),
        }
    }
}

/// One window of a report, checked and converted.
#[derive(Debug, Clone)]
pub struct Window {
    pub chain: String,
    pub segment: String,
    pub start_ms: i64,
    pub counts: Counts,
    pub latency: hdr::Sparse,
}

/// (chain, segment, start of the rollup).
type Key = (String, String, i64);

/// Canary agents' windows summed per (canary baseline id, segment, start of the rollup or
/// [`WHOLE_BAKE`]).
pub type CanarySums = HashMap<(String, String, i64), Sum>;

/// Counts and successful attempts' latencies.
type Sum = (Counts, Histogram<u64>);

/// Adds `from` into `into`.
fn add_sums(into: &mut CanarySums, from: CanarySums) {
    for (key, (counts, latency)) in from {
        match into.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut o) => {
                let (c, l) = o.get_mut();
                c.add(&counts);
                hdr::merge(l, &latency);
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert((counts, latency));
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Acc {
    counts: Counts,
    latency: Histogram<u64>,
    agents: BTreeSet<String>,
    /// Agents beyond the names kept (an upper bound: they cannot be told apart).
    more_agents: u64,
}

impl Acc {
    fn new() -> Self {
        Self {
            counts: Counts::default(),
            latency: hdr::empty(),
            agents: BTreeSet::new(),
            more_agents: 0,
        }
    }

    fn add_agent(&mut self, agent: &str) {
        if self.agents.contains(agent) {
            return;
        }
        if self.agents.len() < ROLLUP_AGENT_NAMES {
            self.agents.insert(agent.to_owned());
        } else {
            self.more_agents += 1;
        }
    }

    fn add(&mut self, other: &Self) {
        self.counts.add(&other.counts);
        hdr::merge(&mut self.latency, &other.latency);
        for a in &other.agents {
            self.add_agent(a);
        }
        self.more_agents = self.more_agents.saturating_add(other.more_agents);
    }

    fn from_row(row: &Rollup) -> Self {
        let mut latency = hdr::empty();
        match hdr::decode(&row.latency_hdr) {
            Ok(stored) => hdr::add(&mut latency, &stored),
            Err(e) => {
                tracing::warn!(chain = %row.chain, segment = %row.segment, error = %e, "a stored rollup histogram does not decode; counting from empty");
            }
        }
        Self {
            counts: row.counts,
            latency,
            agents: row.agents.iter().cloned().collect(),
            more_agents: row.agent_count.saturating_sub(row.agents.len() as u64),
        }
    }
}

type Outcome = Option<Result<(), String>>;

/// The commit of the batch some windows were merged into ([`Rollups::merge`]).
pub struct Commit(Option<watch::Receiver<Outcome>>);

impl Commit {
    /// Waits until the batch is committed (at most 10 s).
    pub async fn wait(self) -> Result<(), String> {
        let Some(mut rx) = self.0 else {
            return Ok(());
        };
        let outcome = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(Option::is_some))
            .await
            .map_err(|_| "the report was not committed within 10 s".to_owned())?
            .map_err(|_| "the report's commit was abandoned".to_owned())?
            .clone();
        outcome.unwrap_or_else(|| Err("not committed".into()))
    }
}

/// A report's id (`ReportRequest.report_id`), and whether its agent sends it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub id: [u8; 16],
    pub resend: bool,
}

/// A report sent again, kept apart until the commit: counted only if its id is not the last
/// its agent has stored.
struct Resend {
    windows: Vec<Window>,
    canary: CanarySums,
}

struct Batch {
    deltas: HashMap<Key, Acc>,
    canary: CanarySums,
    /// The id of each agent's last new report in this batch.
    last: HashMap<String, [u8; 16]>,
    /// By (agent, report id).
    resends: HashMap<(String, [u8; 16]), Resend>,
    /// The windows counted in `deltas`.
    windows: u64,
    done: watch::Sender<Outcome>,
}

impl Batch {
    fn new() -> Self {
        Self {
            deltas: HashMap::new(),
            canary: HashMap::new(),
            last: HashMap::new(),
            resends: HashMap::new(),
            windows: 0,
            done: watch::channel(None).0,
        }
    }

    fn is_empty(&self) -> bool {
        self.deltas.is_empty() && self.resends.is_empty()
    }

    /// Whether `agent`'s report `id` is already in this batch.
    fn holds(&self, agent: &str, id: &[u8; 16]) -> bool {
        self.last.get(agent) == Some(id) || self.resends.contains_key(&(agent.to_owned(), *id))
    }

    /// Counts `agent`'s `windows` and their `canary` sums in this batch.
    fn add(&mut self, rollup_ms: i64, agent: &str, windows: Vec<Window>, canary: CanarySums) {
        add_sums(&mut self.canary, canary);
        self.windows += windows.len() as u64;
        for w in windows {
            let minute = w.start_ms.div_euclid(rollup_ms) * rollup_ms;
            let key = (w.chain, w.segment, minute);
            add_window(&mut self.deltas, key, agent, &w.counts, &w.latency);
        }
    }
}

/// Adds a window of `agent` (its counts and latencies) to the sums of its rollup `key`.
fn add_window(
    deltas: &mut HashMap<Key, Acc>,
    key: Key,
    agent: &str,
    counts: &Counts,
    latency: &hdr::Sparse,
) {
    let acc = deltas.entry(key).or_insert_with(Acc::new);
    acc.counts.add(counts);
    hdr::add(&mut acc.latency, latency);
    acc.add_agent(agent);
}

/// What a batch's write holds: its sums (moved, or copied with the resends counted added),
/// the last report id of each agent (with whether it was a resend), and how many windows the
/// sums count (for `budgetd_report_windows_total`, once they are stored).
struct Writing {
    deltas: HashMap<Key, Acc>,
    canary: CanarySums,
    last: HashMap<String, ([u8; 16], bool)>,
    windows: u64,
}

/// The merge of reports into rollups on this server process.
#[derive(Clone)]
pub struct Rollups {
    store: Arc<dyn Store>,
    writer: String,
    rollup_ms: i64,
    batch: Arc<Mutex<Batch>>,
    /// Serialises flushes (the periodic one and explicit ones).
    flushing: Arc<tokio::sync::Mutex<()>>,
    /// Agents whose report sent once a commit found stored ([`Repeaters`]).
    repeaters: Arc<Mutex<Repeaters>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Rollups {
    pub fn new(store: Arc<dyn Store>, writer: String, rollup_ms: u64) -> Self {
        Self {
            store,
            writer,
            rollup_ms: i64::try_from(rollup_ms).unwrap_or(60_000).max(1),
            batch: Arc::new(Mutex::new(Batch::new())),
            flushing: Arc::new(tokio::sync::Mutex::new(())),
            repeaters: Arc::default(),
        }
    }

    /// This process's writer id (its rows are its own).
    pub fn writer(&self) -> &str {
        &self.writer
    }

    pub fn rollup_ms(&self) -> i64 {
        self.rollup_ms
    }

    /// The start of the rollup holding `unix_ms`.
    pub fn rollup_of(&self, unix_ms: i64) -> i64 {
        unix_ms.div_euclid(self.rollup_ms) * self.rollup_ms
    }

    /// Merges `windows` of `agent`, and `canary`, the sums of those of them that count for
    /// a canary, into the current batch; wait on the answer until the batch is committed.
    ///
    /// A report sent again (`sent.resend`) is not counted if the same report is in this batch
    /// already; otherwise it is kept apart, and the commit counts it only if it is not the
    /// last report its agent has stored (a batch committed before this one, on any replica).
    pub fn merge(
        &self,
        agent: &str,
        sent: Option<Sent>,
        windows: Vec<Window>,
        canary: CanarySums,
    ) -> Commit {
        if windows.is_empty() {
            return Commit(None);
        }
        // An agent that sent a stored report as new: each of its reports is looked for as a
        // resend is.
        let sent = sent.map(|s| Sent {
            resend: s.resend || lock(&self.repeaters).holds(agent),
            ..s
        });
        let mut batch = lock(&self.batch);
        match sent {
            Some(Sent { id, resend: true }) => {
                if batch.holds(agent, &id) {
                    crate::observe::report_resends(1, 0);
                } else {
                    let resend = Resend { windows, canary };
                    batch.resends.insert((agent.to_owned(), id), resend);
                }
            }
            // Its resend came first (it overtook the report on another connection).
            Some(Sent { id, resend: false }) if batch.holds(agent, &id) => {
                crate::observe::report_resends(1, 0);
            }
            Some(Sent { id, resend: false }) => {
                batch.add(self.rollup_ms, agent, windows, canary);
                batch.last.insert(agent.to_owned(), id);
            }
            None => batch.add(self.rollup_ms, agent, windows, canary),
        }
        Commit(Some(batch.done.subscribe()))
    }

    /// Commits the current batch, if any: reads this writer's rows of its rollups and canary
    /// health, adds the batch, writes them back in one transaction. Everyone waiting on the
    /// batch learns the outcome.
    pub async fn flush(&self) {
        let _one = self.flushing.lock().await;
        let mut batch = std::mem::replace(&mut *lock(&self.batch), Batch::new());
        if batch.is_empty() {
            return;
        }
        let outcome = self.commit(&mut batch).await.map_err(|c| {
            let (m, agents) = match c {
                Conflict::FirstStored(m, agents) => (m, agents),
                Conflict::ResentStored(m) | Conflict::Other(m) => (m, Vec::new()),
            };
            lock(&self.repeaters).learn(agents.iter().map(String::as_str));
            tracing::warn!(error = %m, repeated = agents.len(), first = ?agents.first(), "report rollups not stored; agents will send again");
            m
        });
        batch.done.send_replace(Some(outcome));
    }

    /// The last stored report ids of the agents of `batch`'s resends.
    async fn stored_ids(&self, batch: &Batch) -> Result<HashMap<String, String>, StoreError> {
        let agents: BTreeSet<String> = batch.resends.keys().map(|(a, _)| a.clone()).collect();
        self.store
            .last_reports(&agents.into_iter().collect::<Vec<_>>())
            .await
    }

    /// Writes `batch`, with the resends its agents have not stored. A resend another replica
    /// stored meanwhile (since it was looked for) makes the write a conflict that writes
    /// nothing: the ids are read again and the batch written once more without it, so that
    /// no batch fails for it. A report sent once that was stored (from its resend, by another
    /// replica) fails the batch: its windows are in the sums. A batch without resends is
    /// moved into its rows, not copied.
    async fn commit(&self, batch: &mut Batch) -> Result<(), Conflict> {
        if batch.resends.is_empty() {
            let writing = Writing {
                deltas: std::mem::take(&mut batch.deltas),
                canary: std::mem::take(&mut batch.canary),
                last: std::mem::take(&mut batch.last)
                    .into_iter()
                    .map(|(agent, id)| (agent, (id, false)))
                    .collect(),
                windows: batch.windows,
            };
            return self.write(writing, (0, 0)).await;
        }
        let mut tries = 0;
        loop {
            tries += 1;
            let stored = self.stored_ids(batch).await?;
            let (writing, counts) = self.with_resends(batch, &stored);
            match self.write(writing, counts).await {
                Err(Conflict::ResentStored(_)) if tries < 2 => continue,
                done => return done,
            }
        }
    }

    /// A copy of `batch`'s sums with its resends added whose ids are neither `stored` nor new
    /// reports of the batch; and how many resends were stored before, and are counted.
    fn with_resends(
        &self,
        batch: &Batch,
        stored: &HashMap<String, String>,
    ) -> (Writing, (u64, u64)) {
        let mut w = Writing {
            deltas: batch.deltas.clone(),
            canary: batch.canary.clone(),
            last: batch
                .last
                .iter()
                .map(|(agent, id)| (agent.clone(), (*id, false)))
                .collect(),
            windows: batch.windows,
        };
        let (mut again, mut counted) = (0, 0);
        for ((agent, id), r) in &batch.resends {
            if stored.get(agent) == Some(&hex::encode(id)) || batch.last.get(agent) == Some(id) {
                again += 1;
                continue;
            }
            counted += 1;
            w.windows += r.windows.len() as u64;
            for win in &r.windows {
                let key = (
                    win.chain.clone(),
                    win.segment.clone(),
                    self.rollup_of(win.start_ms),
                );
                add_window(&mut w.deltas, key, agent, &win.counts, &win.latency);
            }
            add_sums(&mut w.canary, r.canary.clone());
            // A new report of an agent in this batch is later than any resend of it.
            w.last.entry(agent.clone()).or_insert((*id, true));
        }
        (w, (again, counted))
    }

    /// Writes this writer's rollups with `writing`'s sums added, its canary sums into the
    /// canary health, and the agents' last report ids; then counts the resends `(stored
    /// before, counted)`.
    async fn write(&self, writing: Writing, (again, counted): (u64, u64)) -> Result<(), Conflict> {
        let Writing {
            deltas,
            canary,
            last,
            windows,
        } = writing;
        if deltas.is_empty() {
            crate::observe::report_resends(again, counted);
            return Ok(());
        }
        let from = deltas.keys().map(|k| k.2).min().unwrap_or(0);
        let existing = self.store.writer_rollups(&self.writer, from).await?;
        let mut existing: HashMap<Key, &Rollup> = existing
            .iter()
            .map(|r| ((r.chain.clone(), r.segment.clone(), r.minute), r))
            .collect();
        let at = crate::clock::now();
        let rows: Vec<Rollup> = deltas
            .into_iter()
            .map(|(key, delta)| {
                let mut acc = existing.remove(&key).map_or_else(Acc::new, Acc::from_row);
                acc.add(&delta);
                Rollup {
                    chain: key.0,
                    segment: key.1,
                    minute: key.2,
                    writer: self.writer.clone(),
                    counts: acc.counts,
                    latency_hdr: hdr::encode(&acc.latency),
                    agent_count: (acc.agents.len() as u64).saturating_add(acc.more_agents),
                    agents: acc.agents.into_iter().collect(),
                    updated_at: at.clone(),
                }
            })
            .collect();
        let health = self
            .health_rows(canary, &at)
            .await
            .map_err(Conflict::Other)?;
        let stored_ms = crate::clock::now_ms();
        let mut reports: Vec<LastReport> = last
            .into_iter()
            .map(|(agent_id, (id, resent))| LastReport {
                agent_id,
                report_id: hex::encode(id),
                stored_ms,
                resent,
            })
            .collect();
        // In one order on every replica: two batches upserting the same agents never wait
        // on each other's rows crosswise.
        reports.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
        self.store.write_rollups(&rows, &health, &reports).await?;
        crate::observe::report_resends(again, counted);
        crate::observe::report_windows(windows, 0);
        Ok(())
    }

    /// This writer's canary health rows with `canary` added: its running totals per canary,
    /// segment, rollup and for the whole bake.
    async fn health_rows(
        &self,
        canary: CanarySums,
        at: &str,
    ) -> Result<Vec<CanaryHealthRow>, String> {
        let mut by_canary: HashMap<String, HashMap<(String, i64), Sum>> = HashMap::new();
        for ((baseline_id, segment, minute), sum) in canary {
            by_canary
                .entry(baseline_id)
                .or_default()
                .insert((segment, minute), sum);
        }
        let mut rows = Vec::new();
        for (baseline_id, mut sums) in by_canary {
            let from = sums
                .keys()
                .map(|(_, m)| *m)
                .filter(|m| *m != WHOLE_BAKE)
                .min()
                .unwrap_or(0);
            let mine = self
                .store
                .writer_canary_health(&baseline_id, &self.writer, from)
                .await
                .map_err(|e| e.to_string())?;
            for old in mine {
                let Some((counts, latency)) = sums.get_mut(&(old.segment.clone(), old.minute))
                else {
                    continue;
                };
                counts.add(&old.counts);
                match hdr::decode(&old.latency_hdr) {
                    Ok(h) => hdr::add(latency, &h),
                    Err(e) => {
                        tracing::warn!(%baseline_id, segment = %old.segment, error = %e, "a canary histogram of this process does not decode; starting it again")
                    }
                }
            }
            rows.extend(
                sums.into_iter()
                    .map(|((segment, minute), (counts, latency))| CanaryHealthRow {
                        baseline_id: baseline_id.clone(),
                        segment,
                        writer: self.writer.clone(),
                        minute,
                        counts,
                        latency_hdr: hdr::encode(&latency),
                        updated_at: at.to_owned(),
                    }),
            );
        }
        Ok(rows)
    }

    /// Flushes every `every` until the process stops.
    pub fn spawn_flusher(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                me.flush().await;
            }
        })
    }
}
