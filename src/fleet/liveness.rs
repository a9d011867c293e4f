//! Replica liveness: each process records that it is alive in the store, and fleet status
//! shows the agents of a process that stopped (killed, host lost) as disconnected.

use std::collections::HashSet;
use std::time::Duration;

use super::Fleet;
use crate::clock;
use crate::store::{AgentStatus, StoreResult};

impl Fleet {
    /// How often this replica beats: six times per [`crate::config::AgentSettings::replica_silence`].
    pub fn beat_every(&self) -> Duration {
        self.silence / 6
    }

    /// Records in the store that this replica's process is alive, so that its agents read as
    /// connected on every replica.
    pub async fn beat(&self) -> StoreResult<()> {
        self.store
            .beat_replica(
                &self.process,
                &self.replica,
                &clock::now(),
                &clock::before(self.retention),
            )
            .await
    }

    /// The replica processes that beat within `agents.replica_silence_secs`.
    pub async fn live_processes(&self) -> StoreResult<HashSet<String>> {
        self.store
            .live_processes(&clock::before(self.silence))
            .await
    }

    /// `agents` as fleet status shows them: an agent whose replica process is not among
    /// `live` (killed, or its host lost) is not connected, whatever its entry last said.
    pub fn mark_gone(agents: &mut [AgentStatus], live: &HashSet<String>) {
        for a in agents {
            if a.connected && !a.process.is_empty() && !live.contains(&a.process) {
                a.connected = false;
            }
        }
    }

    /// Beats every [`Self::beat_every`], the first at once. A failed beat is logged and
    /// retried at the next; six in a row make this replica's agents read as disconnected.
    pub fn spawn_beats(&self) -> tokio::task::JoinHandle<()> {
        let fleet = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(fleet.beat_every());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = fleet.beat().await {
                    tracing::warn!(error = %e, "fleet: recording that this replica is alive failed");
                }
            }
        })
    }
}
