//! The hub: the newest published config of every chain, shared by all Watch streams.
//!
//! Config is state, not events: the hub holds one immutable snapshot (`HubState`) in a
//! `tokio::sync::watch` channel. A stream that falls behind reads the newest snapshot when it
//! catches up — never a backlog — and one slow stream never delays the others. Each chain's
//! wire message is built once per publication and shared (`Arc`) by every stream.
//!
//! The hub reloads from the store after a local publication, on a PostgreSQL notification from
//! another replica, and on a periodic catch-up read, so a dropped notification loses nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use budget_core::live::LiveChain;
use tokio::sync::{watch, Mutex};

use budget_core::canary::Selector;

use crate::store::{Publication, Store, StoreResult, StoredBaseline};

/// One chain's published config: core form, and its `budget.v1.ChainBudget` encoded once.
#[derive(Debug)]
pub struct ChainEntry {
    pub live: LiveChain,
    pub encoded: bytes::Bytes,
    /// The gRPC message most streams send: an update of this chain alone at its revision,
    /// framed once for all of them.
    pub frame: bytes::Bytes,
    /// Every service that calls or serves a segment of the chain.
    services: BTreeSet<String>,
    /// When it was published (its `published_at`), for the delivery latency metric.
    pub published: std::time::SystemTime,
    /// A canary baking on the chain (SPEC §9): the agents its selector picks get its entry
    /// instead of this one.
    canary: Option<(Selector, Arc<ChainEntry>)>,
}

/// What a Watch stream's agent is, for canary selection: its place in 0..100 and its labels.
#[derive(Debug, Clone, Default)]
pub struct Member {
    pub bucket: u8,
    pub labels: BTreeMap<String, String>,
}

impl Member {
    pub fn new(agent_id: &str, labels: BTreeMap<String, String>) -> Self {
        Self {
            bucket: budget_core::canary::bucket(agent_id),
            labels,
        }
    }
}

impl ChainEntry {
    pub fn revision(&self) -> i64 {
        self.live.revision
    }

    /// Whether `service` calls or serves any segment of this chain.
    pub fn involves(&self, service: &str) -> bool {
        self.services.contains(service)
    }

    /// The entry the agent `member` receives: the canary's, if it selects the agent.
    pub fn for_agent<'a>(self: &'a Arc<Self>, member: &Member) -> &'a Arc<Self> {
        match &self.canary {
            Some((selector, canary)) if selector.selects_bucket(member.bucket, &member.labels) => {
                canary
            }
            _ => self,
        }
    }

    /// The canary baking on the chain, if any: its selector and entry.
    pub fn canary(&self) -> Option<(&Selector, &Arc<Self>)> {
        self.canary.as_ref().map(|(s, e)| (s, e))
    }

    /// The newest revision any agent of the chain receives.
    pub fn newest_revision(&self) -> i64 {
        self.canary
            .as_ref()
            .map_or(self.revision(), |(_, c)| c.revision().max(self.revision()))
    }

    /// Whether some agent of the chain receives `revision` now.
    pub fn serves(&self, revision: i64) -> bool {
        self.revision() == revision
            || self
                .canary
                .as_ref()
                .is_some_and(|(_, c)| c.revision() == revision)
    }

    pub fn new(live: LiveChain, published: std::time::SystemTime) -> Self {
        let encoded: bytes::Bytes = budget_proto::convert::encode_chain(&live).into();
        let frame = budget_proto::codec::frame(&budget_proto::wire::BudgetUpdate {
            revision: live.revision,
            chains: vec![encoded.clone()],
        });
        let services = live
            .segments
            .iter()
            .flat_map(|s| [s.caller.clone(), s.callee.clone()])
            .collect();
        Self {
            live,
            encoded,
            frame,
            services,
            published,
            canary: None,
        }
    }
}

/// Every chain's newest publication.
pub type HubState = Arc<BTreeMap<String, Arc<ChainEntry>>>;

fn newest_revision(state: &HubState) -> i64 {
    state
        .values()
        .map(|e| e.newest_revision())
        .max()
        .unwrap_or(0)
}

#[derive(Clone)]
pub struct Hub {
    tx: Arc<watch::Sender<HubState>>,
    store: Arc<dyn Store>,
    refresh: Arc<Mutex<()>>,
}

impl Hub {
    pub fn new(store: Arc<dyn Store>) -> Self {
        let (tx, _) = watch::channel(HubState::default());
        Self {
            tx: Arc::new(tx),
            store,
            refresh: Arc::new(Mutex::new(())),
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<HubState> {
        self.tx.subscribe()
    }

    pub fn current(&self) -> HubState {
        self.tx.borrow().clone()
    }

    /// The newest revision the hub has loaded (0 before the first publication).
    pub fn newest_revision(&self) -> i64 {
        newest_revision(&self.current())
    }

    /// Loads every publication newer than what the hub has; returns how many chains changed.
    pub async fn refresh(&self) -> StoreResult<usize> {
        let _one_at_a_time = self.refresh.lock().await;
        let current = self.current();
        let after = newest_revision(&current);
        let newer = self.store.latest_publications(after).await?;
        if newer.is_empty() {
            return Ok(0);
        }
        let mut next = (*current).clone();
        for (publication, baseline) in &newer {
            let entry = entry_of(publication, baseline);
            let entry = if publication.kind == "canary" {
                self.with_stable(entry, &publication.chain, &baseline.doc.id)
                    .await?
            } else {
                entry
            };
            next.insert(publication.chain.clone(), Arc::new(entry));
        }
        tracing::info!(
            chains = newer.len(),
            revision = newer.last().map(|(p, _)| p.revision),
            "hub updated"
        );
        self.tx.send_replace(Arc::new(next));
        Ok(newer.len())
    }

    /// A canary's `entry` as the overlay of the chain's stable publication before it
    /// ([`resolve_canary`]).
    async fn with_stable(
        &self,
        entry: ChainEntry,
        chain: &str,
        baseline_id: &str,
    ) -> StoreResult<ChainEntry> {
        Ok(
            match resolve_canary(&*self.store, chain, baseline_id, entry.revision()).await? {
                Canary::Overlay {
                    selector,
                    stable: (publication, baseline),
                    ..
                } => {
                    let mut stable = entry_of(&publication, &baseline);
                    stable.canary = Some((selector, Arc::new(entry)));
                    stable
                }
                Canary::Nobody(publication, baseline) => entry_of(&publication, &baseline),
                Canary::Everyone => entry,
            },
        )
    }

    /// Refreshes every `every`, whatever notifications said.
    pub fn spawn_catch_up(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let hub = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = hub.refresh().await {
                    tracing::warn!(error = %e, "hub catch-up read failed");
                }
            }
        })
    }

    /// Listens for publications made on other replicas (the store's notifications: PostgreSQL
    /// LISTEN/NOTIFY), reconnecting with backoff; every (re)connection is followed by a
    /// catch-up read. Ends at once where the store cannot notify (SQLite).
    pub fn spawn_listener(&self) -> tokio::task::JoinHandle<()> {
        let hub = self.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                match listen(&hub).await {
                    Ok(false) => return,
                    Ok(true) => backoff = Duration::from_millis(200),
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in = ?backoff, "publication listener lost its connection");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                }
            }
        })
    }
}

/// Who gets a canary publication (of `baseline_id` at `revision`), as the hub serves it and
/// `GET /chains/{chain}/budgets` shows it.
pub enum Canary {
    /// The agents `selector` picks; every other agent keeps `stable`, the chain's publication
    /// before the canary's revision. Read after the canary, that is the one before it whatever
    /// was published since: a promotion or abort committed meanwhile has a higher revision.
    Overlay {
        selector: Selector,
        bake_ends_at: String,
        stable: (Publication, StoredBaseline),
    },
    /// No agent (its rollout is missing, not expected): everyone keeps this publication.
    Nobody(Publication, StoredBaseline),
    /// Every agent (nothing was published before it, not expected: a canary needs a live
    /// baseline).
    Everyone,
}

/// Reads who gets the canary publication of `baseline_id` at `revision` on `chain`.
pub async fn resolve_canary(
    store: &dyn Store,
    chain: &str,
    baseline_id: &str,
    revision: i64,
) -> StoreResult<Canary> {
    let rollout = store.get_rollout(baseline_id).await?;
    let stable = store.stable_publication(chain, revision).await?;
    Ok(match (rollout, stable) {
        (Some(rollout), Some(stable)) => Canary::Overlay {
            selector: rollout.selector,
            bake_ends_at: rollout.bake_ends_at,
            stable,
        },
        (None, Some((publication, baseline))) => {
            tracing::warn!(%chain, %baseline_id, "a canary publication without its rollout: served to no agent");
            Canary::Nobody(publication, baseline)
        }
        (_, None) => {
            tracing::warn!(%chain, %baseline_id, "a canary publication with no publication before it: served to every agent");
            Canary::Everyone
        }
    })
}

fn entry_of(publication: &Publication, baseline: &StoredBaseline) -> ChainEntry {
    let live =
        LiveChain::from_baseline(&baseline.doc, publication.revision, &publication.created_at);
    let published = crate::observe::parse_time(&publication.created_at);
    ChainEntry::new(live, published)
}

/// Follows the store's notifications until the connection fails; `false` when the store
/// has none to give.
async fn listen(hub: &Hub) -> anyhow::Result<bool> {
    let Some(mut listener) = hub.store.publication_listener().await? else {
        return Ok(false);
    };
    hub.refresh().await?;
    loop {
        let revision = listener.next().await?;
        tracing::debug!(%revision, "publication notified");
        hub.refresh().await?;
    }
}
