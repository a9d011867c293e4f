//! Fleet status: what each agent connected to this replica was sent and acknowledged.
//!
//! The hot path (a publication delivered to 10 000 streams) touches only atomics in each
//! stream's own [`Slot`]; the status is written to the store in batches by [`Fleet::flush`],
//! so `GET /api/v1/agents` shows the agents of every replica.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::service::now;
use crate::store::{AgentStatus, Store};

/// One agent's status; shared by its stream and the fleet.
#[derive(Debug)]
pub struct Slot {
    status: Mutex<AgentStatus>,
    delivered: AtomicI64,
    dirty: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Slot {
    fn touch(&self) {
        self.dirty.store(true, Ordering::Release);
    }

    /// A revision was sent; `new_chains` lists chains the agent had not received before.
    pub fn delivered(&self, revision: i64, new_chains: &[String]) {
        self.delivered.fetch_max(revision, Ordering::AcqRel);
        if !new_chains.is_empty() {
            let mut s = lock(&self.status);
            for c in new_chains {
                if !s.chains.contains(c) {
                    s.chains.push(c.clone());
                }
            }
            s.chains.sort();
        }
        self.touch();
    }

    fn snapshot(&self) -> AgentStatus {
        let mut s = lock(&self.status).clone();
        s.delivered = s.delivered.max(self.delivered.load(Ordering::Acquire));
        s
    }
}

#[derive(Clone)]
pub struct Fleet {
    replica: String,
    agents: Arc<Mutex<HashMap<String, Arc<Slot>>>>,
    store: Arc<dyn Store>,
}

impl Fleet {
    pub fn new(store: Arc<dyn Store>, replica: String) -> Self {
        Self {
            replica,
            agents: Default::default(),
            store,
        }
    }

    /// An agent opened a Watch stream; the returned slot records what the stream delivers.
    pub fn connected(
        &self,
        agent_id: &str,
        service: &str,
        labels: BTreeMap<String, String>,
        known_revision: i64,
    ) -> Arc<Slot> {
        let at = now();
        let mut agents = lock(&self.agents);
        let slot = agents
            .entry(agent_id.to_owned())
            .or_insert_with(|| {
                Arc::new(Slot {
                    status: Mutex::new(AgentStatus {
                        agent_id: agent_id.to_owned(),
                        service: service.to_owned(),
                        labels: BTreeMap::new(),
                        chains: Vec::new(),
                        replica: self.replica.clone(),
                        connected: true,
                        delivered: 0,
                        acked: 0,
                        nack_revision: None,
                        nack_error: None,
                        first_seen: at.clone(),
                        last_seen: at.clone(),
                    }),
                    delivered: AtomicI64::new(0),
                    dirty: AtomicBool::new(true),
                })
            })
            .clone();
        drop(agents);
        {
            let mut s = lock(&slot.status);
            s.service = service.to_owned();
            s.labels = labels;
            s.replica = self.replica.clone();
            s.connected = true;
            s.last_seen = at;
        }
        slot.delivered.fetch_max(known_revision, Ordering::AcqRel);
        slot.touch();
        slot
    }

    /// The stream of `slot` ended.
    pub fn disconnected(&self, slot: &Slot) {
        lock(&slot.status).connected = false;
        slot.touch();
    }

    /// Records an ACK or NACK. Returns false for an agent this replica never saw.
    pub fn acked(&self, agent_id: &str, revision: i64, accepted: bool, error: &str) -> bool {
        let Some(slot) = lock(&self.agents).get(agent_id).cloned() else {
            return false;
        };
        {
            let mut s = lock(&slot.status);
            if accepted {
                s.acked = s.acked.max(revision);
            } else {
                s.nack_revision = Some(revision);
                s.nack_error = Some(error.to_owned());
            }
        }
        slot.touch();
        true
    }

    /// Writes what changed since the last flush.
    pub async fn flush(&self) {
        let dirty: Vec<Arc<Slot>> = lock(&self.agents)
            .values()
            .filter(|s| s.dirty.swap(false, Ordering::AcqRel))
            .cloned()
            .collect();
        if dirty.is_empty() {
            return;
        }
        let at = now();
        let batch: Vec<AgentStatus> = dirty
            .iter()
            .map(|slot| {
                let mut s = slot.snapshot();
                s.last_seen = at.clone();
                lock(&slot.status).last_seen = at.clone();
                s
            })
            .collect();
        if let Err(e) = self.store.upsert_agents(&batch).await {
            tracing::warn!(error = %e, agents = batch.len(), "failed to record fleet status; will retry");
            for slot in &dirty {
                slot.touch();
            }
        }
    }

    pub fn spawn_flusher(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                fleet.flush().await;
            }
        })
    }
}
