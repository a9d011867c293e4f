//! Replica liveness: each process records that it is alive in the store, and fleet status
//! shows the agents of a process that stopped (killed, host lost) as disconnected.

use super::Fleet;
use crate::store::{AgentStatus, StoreResult};
use std::time::Duration;

impl Fleet {
    /// How often this replica beats: six times per [`crate::config::AgentSettings::replica_silence`].
    pub fn beat_every(&self) -> Duration {
        self.silence / 6
    }

    /// Records in the store that this replica's process is alive, so that its agents read as
    /// connected on every replica.
    pub async fn beat(&self) -> StoreResult<()> {
        let now = chrono::Utc::now();
        let stamp = |t: chrono::DateTime<chrono::Utc>| {
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        let forget =
            now - chrono::Duration::from_std(self.retention).unwrap_or(chrono::Duration::MAX);
        self.store
            .beat_replica(&self.process, &self.replica, &stamp(now), &stamp(forget))
            .await
    }

    /// `agents` as fleet status shows them: an agent whose replica process has not beaten
    /// within `agents.replica_silence_secs` (killed, or its host lost) is not connected,
    /// whatever its entry last said.
    pub async fn with_liveness(
        &self,
        mut agents: Vec<AgentStatus>,
    ) -> StoreResult<Vec<AgentStatus>> {
        if !agents.iter().any(|a| a.connected && !a.process.is_empty()) {
            return Ok(agents);
        }
        let since = chrono::Utc::now()
            - chrono::Duration::from_std(self.silence).unwrap_or(chrono::Duration::MAX);
        let live = self
            .store
            .live_processes(&since.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .await?;
        for a in &mut agents {
            if a.connected && !a.process.is_empty() && !live.contains(&a.process) {
                a.connected = false;
            }
        }
        Ok(agents)
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
