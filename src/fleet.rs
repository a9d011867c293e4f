//! Fleet status: what each agent connected to this replica was sent and acknowledged.
//!
//! Kept in memory on the hot path (a delivery to 10 000 streams must not be 10 000 writes) and
//! flushed to the store in batches, so `GET /api/v1/agents` shows agents of every replica.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::service::now;
use crate::store::{AgentStatus, Store};

#[derive(Clone)]
pub struct Fleet {
    replica: String,
    inner: Arc<Mutex<Inner>>,
    store: Arc<dyn Store>,
}

#[derive(Default)]
struct Inner {
    agents: HashMap<String, AgentStatus>,
    dirty: HashSet<String>,
}

impl Fleet {
    pub fn new(store: Arc<dyn Store>, replica: String) -> Self {
        Self {
            replica,
            inner: Default::default(),
            store,
        }
    }

    fn update(&self, agent_id: &str, f: impl FnOnce(&mut AgentStatus)) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = inner.agents.get_mut(agent_id) {
            f(a);
            a.last_seen = now();
            inner.dirty.insert(agent_id.to_owned());
        }
    }

    /// An agent opened a Watch stream.
    pub fn connected(
        &self,
        agent_id: &str,
        service: &str,
        labels: BTreeMap<String, String>,
        known_revision: i64,
    ) {
        let at = now();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let replica = self.replica.clone();
        let a = inner
            .agents
            .entry(agent_id.to_owned())
            .or_insert_with(|| AgentStatus {
                agent_id: agent_id.to_owned(),
                service: service.to_owned(),
                labels: BTreeMap::new(),
                chains: Vec::new(),
                replica: replica.clone(),
                connected: true,
                delivered: 0,
                acked: 0,
                nack_revision: None,
                nack_error: None,
                first_seen: at.clone(),
                last_seen: at.clone(),
            });
        a.service = service.to_owned();
        a.labels = labels;
        a.replica = replica;
        a.connected = true;
        a.delivered = a.delivered.max(known_revision);
        a.last_seen = at;
        inner.dirty.insert(agent_id.to_owned());
    }

    pub fn delivered(&self, agent_id: &str, revision: i64, chains: &[String]) {
        self.update(agent_id, |a| {
            a.delivered = revision;
            for c in chains {
                if !a.chains.contains(c) {
                    a.chains.push(c.clone());
                }
            }
            a.chains.sort();
        });
    }

    pub fn disconnected(&self, agent_id: &str) {
        self.update(agent_id, |a| a.connected = false);
    }

    /// Records an ACK or NACK. Returns false for an agent this replica never saw.
    pub fn acked(&self, agent_id: &str, revision: i64, accepted: bool, error: &str) -> bool {
        let known = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .agents
            .contains_key(agent_id);
        self.update(agent_id, |a| {
            if accepted {
                a.acked = a.acked.max(revision);
            } else {
                a.nack_revision = Some(revision);
                a.nack_error = Some(error.to_owned());
            }
        });
        known
    }

    /// Writes what changed since the last flush.
    pub async fn flush(&self) {
        let batch: Vec<AgentStatus> = {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            let dirty: Vec<String> = inner.dirty.drain().collect();
            dirty
                .iter()
                .filter_map(|id| inner.agents.get(id).cloned())
                .collect()
        };
        if let Err(e) = self.store.upsert_agents(&batch).await {
            tracing::warn!(error = %e, agents = batch.len(), "failed to record fleet status; will retry");
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.dirty.extend(batch.into_iter().map(|a| a.agent_id));
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
