//! The watch + ACK protocol (xDS-style) and the background task that keeps the live config
//! current.
//!
//! `Watch` is opened from the revision held; every update is validated ([`Snapshot::apply`]):
//! a good one is put in force, cached and ACKed, a bad one NACKed while the previous config
//! stays. A stream that ends or breaks is reopened forever — next replica first
//! ([`Endpoints::rotate`]), after a [`ReconnectBackoff`] delay.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use budget_proto::v1;
use tokio::time::Instant;
use tonic::codec::Streaming;
use tracing::{debug, info, warn};

use crate::backoff::{self, ReconnectBackoff};
use crate::cache;
use crate::config::AgentConfig;
use crate::connect::{status, Auth, Client, Endpoints, Link};
use crate::error::AgentError;
use crate::jitter::random_pick;
use crate::live::Live;
use crate::snapshot::{Refusal, Snapshot};

/// The most chains a Watch names as held (`known_chains`); an agent holding more names none.
const MAX_KNOWN_CHAINS: usize = 256;

/// The revision and chains a Watch resumes from, given the config the agent has. The chains
/// held go with the revision, so that a chain the config lacks (added to `chains` since the
/// cache was written) is sent however old its publication; more than the server takes go as
/// none (every chain then counts as held).
fn resume_point(known: Option<&Snapshot>) -> (i64, Vec<String>) {
    match known {
        Some(s) if s.revision > 0 && !s.chains.is_empty() => {
            let held = if s.chains.len() <= MAX_KNOWN_CHAINS {
                s.chains.keys().cloned().collect()
            } else {
                Vec::new()
            };
            (s.revision, held)
        }
        _ => (0, Vec::new()),
    }
}

/// An open watch stream and the client it came from.
pub(crate) struct Stream {
    client: Client,
    updates: Watching,
}

/// A watch stream's updates, and the reconnect spread its replica asked for in the headers.
pub(crate) struct Watching {
    updates: Streaming<v1::BudgetUpdate>,
    spread: Option<Duration>,
}

/// The spread a replica asks for in `metadata` ([`backoff::SPREAD_KEY`]), if any.
fn spread_in(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    metadata
        .get(backoff::SPREAD_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(backoff::parse_spread)
}

/// Who the agent is, what it watches and where it caches; owned by the background task.
pub(crate) struct Watcher {
    endpoints: Endpoints,
    /// The client in use, shared with the reporter.
    link: Link,
    agent_id: String,
    service: String,
    chains: Vec<String>,
    labels: BTreeMap<String, String>,
    cache_path: Option<PathBuf>,
    first_config_timeout: Duration,
}

impl Watcher {
    pub(crate) fn new(config: &AgentConfig) -> Result<Self, AgentError> {
        let endpoints = Endpoints::new(config)?;
        if config.agent_id.is_empty() {
            return Err(AgentError::Config("agent_id must not be empty".into()));
        }
        Ok(Self {
            link: Link::new(endpoints.lazy()),
            endpoints,
            agent_id: config.agent_id.clone(),
            service: config.service.clone(),
            chains: config.chains.clone(),
            labels: config.labels.clone(),
            cache_path: config.cache_path.clone(),
            first_config_timeout: config.first_config_timeout,
        })
    }

    /// The client in use, kept current through reconnects and failover.
    pub(crate) fn link(&self) -> Link {
        self.link.clone()
    }

    /// The bearer token, for the reporter.
    pub(crate) fn auth(&self) -> Auth {
        self.endpoints.auth()
    }

    /// The first config from the first endpoint that gives one, trying each in order. The
    /// error is a one-line reason for the log and [`AgentError::Unavailable`].
    pub(crate) async fn first_config(&mut self) -> Result<(Stream, v1::BudgetUpdate), String> {
        let mut reasons = Vec::new();
        for i in 0..self.endpoints.len() {
            self.endpoints.select(i);
            match self.first_config_from_current().await {
                Ok(found) => return Ok(found),
                Err(reason) => reasons.push(reason),
            }
        }
        Err(reasons.join("; "))
    }

    /// Connects, opens the watch stream from revision 0 and waits for its first update.
    async fn first_config_from_current(&self) -> Result<(Stream, v1::BudgetUpdate), String> {
        let target = self.endpoints.target();
        let mut client = self.endpoints.connect().await?;
        let first = async {
            let mut updates = self
                .watch(&mut client, None)
                .await
                .map_err(|s| format!("watch on {target} failed: {}", status(&s)))?;
            match updates.updates.message().await {
                Ok(Some(update)) => Ok((updates, update)),
                Ok(None) => Err(format!("watch on {target} ended before the first config")),
                Err(s) => Err(format!("watch on {target} failed: {}", status(&s))),
            }
        };
        let (updates, update) = tokio::time::timeout(self.first_config_timeout, first)
            .await
            .map_err(|_| {
                format!(
                    "no config from {target} within {:?}",
                    self.first_config_timeout
                )
            })??;
        Ok((Stream { client, updates }, update))
    }

    /// Validates the first config: cached and ACKed when good, NACKed and refused when not
    /// (a service refuses to start with an inverted config).
    pub(crate) async fn accept_first(
        &self,
        stream: &mut Stream,
        update: v1::BudgetUpdate,
    ) -> Result<Snapshot, Refusal> {
        let revision = update.revision;
        let snapshot = match Snapshot::default().apply(update) {
            Ok(s) => s,
            Err(refusal) => {
                warn!(revision, %refusal, "refusing to start with the budgets received");
                self.ack(&mut stream.client, revision, Err(&refusal)).await;
                return Err(refusal);
            }
        };
        self.save(&snapshot).await;
        self.ack(&mut stream.client, revision, Ok(())).await;
        info!(
            revision,
            chains = snapshot.chains.len(),
            "started with budgets from the control plane"
        );
        Ok(snapshot)
    }

    /// Opens the watch stream; `known` is the config the agent has (`None`: nothing yet).
    async fn watch(
        &self,
        client: &mut Client,
        known: Option<&Snapshot>,
    ) -> Result<Watching, tonic::Status> {
        let (known_revision, known_chains) = resume_point(known);
        let request = self.endpoints.authorized(v1::WatchRequest {
            agent_id: self.agent_id.clone(),
            service: self.service.clone(),
            chains: self.chains.clone(),
            known_revision,
            labels: self.labels.clone().into_iter().collect(),
            client: crate::CLIENT.to_owned(),
            known_chains,
        });
        let response = client.watch(request).await?;
        let spread = spread_in(response.metadata());
        Ok(Watching {
            updates: response.into_inner(),
            spread,
        })
    }

    /// ACK (`Ok`) or NACK (`Err`, with the reason) of `revision`; failures are only logged.
    async fn ack(&self, client: &mut Client, revision: i64, result: Result<(), &Refusal>) {
        let request = self.endpoints.authorized(v1::AckRequest {
            agent_id: self.agent_id.clone(),
            revision,
            accepted: result.is_ok(),
            error: result.err().map(ToString::to_string).unwrap_or_default(),
        });
        let limit = self.first_config_timeout.max(Duration::from_secs(1));
        match tokio::time::timeout(limit, client.ack(request)).await {
            Ok(Ok(_)) => debug!(revision, accepted = result.is_ok(), "acknowledged"),
            Ok(Err(s)) => warn!(revision, error = %status(&s), "failed to acknowledge a revision"),
            Err(_) => warn!(revision, "failed to acknowledge a revision: timed out"),
        }
    }

    /// Caches `snapshot` on disk when a cache path is set.
    async fn save(&self, snapshot: &Snapshot) {
        if let Some(path) = self.cache_path.clone() {
            cache::save(path, snapshot.clone()).await;
        }
    }

    /// Validates and applies one update: publish + cache + ACK, or NACK and keep the old one.
    async fn handle(&self, client: &mut Client, live: &Live, update: v1::BudgetUpdate) {
        let revision = update.revision;
        let current = live.current();
        match current.apply(update) {
            Ok(next) => {
                // Equal: chains the agent lacked at its revision, sent on resume.
                if revision < current.revision {
                    warn!(revision, current = current.revision, "revision went back");
                }
                let next = Arc::new(next);
                live.publish(next.clone());
                info!(revision, "applied new budgets");
                self.save(&next).await;
                self.ack(client, revision, Ok(())).await;
            }
            Err(refusal) => {
                warn!(
                    revision,
                    kept = current.revision,
                    %refusal,
                    "refused new budgets; keeping the previous ones"
                );
                live.refuse(revision, refusal.clone());
                self.ack(client, revision, Err(&refusal)).await;
            }
        }
    }

    /// The background task: consumes the watch stream (`stream`, when start opened one),
    /// reconnecting forever.
    pub(crate) async fn run(mut self, live: Arc<Live>, stream: Option<Stream>) {
        let (mut client, mut updates) = match stream {
            Some(s) => (s.client, Some(s.updates)),
            None => (self.endpoints.lazy(), None),
        };
        self.link.set(client.clone());
        let mut backoff = ReconnectBackoff::default();
        let mut failing = false;
        // The spread the replica of the last stream asked for in its headers: taken after a
        // failed attempt (the replica is down, its fleet is retrying), not at once (a broken
        // connection of this agent alone comes back quickly).
        let mut asked: Option<Duration> = None;
        loop {
            if let Some(Watching {
                updates: mut s,
                spread,
            }) = updates.take()
            {
                asked = spread;
                let opened = Instant::now();
                let mut ended_by_replica = None;
                loop {
                    match s.message().await {
                        Ok(Some(update)) => {
                            backoff.reset();
                            self.handle(&mut client, &live, update).await;
                        }
                        Ok(None) => {
                            info!("watch stream ended; reconnecting");
                            ended_by_replica = s
                                .trailers()
                                .await
                                .ok()
                                .flatten()
                                .and_then(|t| spread_in(&t));
                            break;
                        }
                        Err(e) => {
                            warn!(error = %status(&e), "watch stream failed; reconnecting");
                            break;
                        }
                    }
                }
                if opened.elapsed() >= ReconnectBackoff::CAP {
                    backoff.reset();
                }
                // The replica stopped and told its whole fleet to spread out: so does this agent,
                // from the spread (the stream's end was no failure of this agent's).
                if let Some(spread) = ended_by_replica {
                    backoff.reset();
                    debug!(
                        spread_ms = spread.as_millis(),
                        "spreading the reconnect as the replica asked"
                    );
                    backoff.spread(spread);
                }
                // The replica went away or broke the stream: try the next one first.
                if self.endpoints.len() > 1 {
                    client = self.endpoints.rotate();
                    self.link.set(client.clone());
                }
            }
            tokio::time::sleep(backoff.next_delay(random_pick)).await;
            let known = live.current();
            let known_revision = known.revision;
            let limit = self.endpoints.connect_timeout() + self.first_config_timeout;
            let reason =
                match tokio::time::timeout(limit, self.watch(&mut client, Some(&known))).await {
                    Ok(Ok(s)) => {
                        info!(known_revision, "watch stream open");
                        updates = Some(s);
                        failing = false;
                        continue;
                    }
                    Ok(Err(s)) => status(&s),
                    Err(_) => format!("no answer within {limit:?}"),
                };
            if let Some(spread) = asked {
                backoff.spread(spread);
            }
            let target = self.endpoints.target();
            if failing {
                debug!(%target, %reason, "still cannot watch the control plane");
            } else {
                warn!(%target, %reason, "cannot watch the control plane; retrying with backoff");
                failing = true;
            }
            if self.endpoints.len() > 1 {
                client = self.endpoints.rotate();
                self.link.set(client.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::example_a;

    fn holding(n: usize) -> Snapshot {
        Snapshot::from_chains((0..n).map(|i| {
            let mut chain = example_a();
            chain.chain = format!("checkout-{i:03}");
            chain
        }))
    }

    #[test]
    fn a_watch_resumes_naming_the_chains_held_up_to_the_servers_limit() {
        assert_eq!(resume_point(None), (0, Vec::new()));
        let (revision, held) = resume_point(Some(&holding(2)));
        assert_eq!(
            (revision, held.as_slice()),
            (
                7,
                ["checkout-000".to_string(), "checkout-001".to_string()].as_slice()
            )
        );
        assert_eq!(resume_point(Some(&holding(256))).1.len(), 256);
        // More than the server takes: none named, so every chain counts as held.
        assert_eq!(resume_point(Some(&holding(257))), (7, Vec::new()));
    }
}
