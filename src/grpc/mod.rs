//! gRPC transport: `budget.v1.BudgetControl` (Watch, Ack), health and reflection.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::pin::Pin;
use std::time::Duration;

// The encode-once view of budget.v1.BudgetControl: same wire protocol, chains pre-encoded.
use budget_proto::wire::budget_control_server::{BudgetControl, BudgetControlServer};
use budget_proto::wire::{AckRequest, AckResponse, BudgetUpdate, WatchRequest};
use futures_util::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::auth::{hash_token, Principal, Role};
use crate::error::ApiError;
use crate::fleet::{Fleet, Slot};
use crate::publish::{ChainEntry, Hub, HubState};
use crate::service::check_chain_name;
use crate::state::AppState;
use std::sync::Arc;

/// Streams per HTTP/2 connection: enough for a benchmark client multiplexing thousands of
/// Watch streams over a few connections, bounded so one client cannot take the server.
pub const MAX_CONCURRENT_STREAMS: u32 = 8192;

#[derive(Clone)]
pub struct Control {
    state: AppState,
    hub: Hub,
    fleet: Fleet,
    shutdown: watch::Receiver<bool>,
}

impl Control {
    pub fn new(state: AppState, hub: Hub, fleet: Fleet, shutdown: watch::Receiver<bool>) -> Self {
        Self {
            state,
            hub,
            fleet,
            shutdown,
        }
    }

    async fn authenticate<T>(&self, req: &Request<T>) -> Result<Principal, Status> {
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Status::unauthenticated("missing bearer token in the authorization metadata")
            })?;
        let record = self
            .state
            .store
            .find_token(&hash_token(token))
            .await
            .map_err(|e| Status::from(ApiError::from(e)))?
            .ok_or_else(|| Status::unauthenticated("invalid or revoked token"))?;
        let principal = Principal {
            name: record.name,
            role: record.role,
        };
        if principal.has_any(&[Role::Agent]) {
            Ok(principal)
        } else {
            Err(Status::permission_denied(format!(
                "token {:?} has role {}; Watch and Ack need agent",
                principal.name, principal.role
            )))
        }
    }
}

fn check_id(field: &str, v: &str) -> Result<(), Status> {
    if v.is_empty() || v.len() > 128 || !v.chars().all(|c| c.is_ascii_graphic()) {
        return Err(Status::invalid_argument(format!(
            "{field} must be 1-128 printable ASCII characters"
        )));
    }
    Ok(())
}

/// Which chains a stream receives.
enum Selection {
    Chains(BTreeSet<String>),
    Service(String),
}

impl Selection {
    fn pick<'a>(
        &'a self,
        state: &'a HubState,
    ) -> impl Iterator<Item = &'a std::sync::Arc<ChainEntry>> + 'a {
        state.iter().filter_map(move |(name, entry)| {
            let wanted = match self {
                Self::Chains(set) => set.contains(name),
                Self::Service(service) => entry.involves(service),
            };
            wanted.then_some(entry)
        })
    }
}

/// Marks the agent disconnected when its stream ends, however it ends.
struct Connection {
    slot: Arc<Slot>,
    fleet: Fleet,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.fleet.disconnected(&self.slot);
    }
}

struct StreamState {
    rx: watch::Receiver<HubState>,
    shutdown: watch::Receiver<bool>,
    selection: Selection,
    /// Revision of each chain sent so far.
    sent: HashMap<String, i64>,
    known: i64,
    conn: Connection,
}

impl StreamState {
    /// The update to send now, if any chain is newer than what the agent has.
    fn pending(&mut self) -> Option<BudgetUpdate> {
        let state = self.rx.borrow_and_update().clone();
        let mut revision = self.known;
        let mut chains = Vec::new();
        let mut new_chains = Vec::new();
        for entry in self.selection.pick(&state) {
            revision = revision.max(entry.revision());
            match self.sent.get_mut(&entry.live.chain) {
                Some(have) if entry.revision() > *have => {
                    *have = entry.revision();
                    chains.push(entry.encoded.clone());
                    crate::observe::delivered(entry.published);
                }
                Some(_) => {}
                None if entry.revision() > self.known => {
                    self.sent.insert(entry.live.chain.clone(), entry.revision());
                    new_chains.push(entry.live.chain.clone());
                    chains.push(entry.encoded.clone());
                }
                None => {}
            }
        }
        if chains.is_empty() {
            return None;
        }
        self.known = revision;
        self.conn.slot.delivered(revision, &new_chains);
        Some(BudgetUpdate { revision, chains })
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<BudgetUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl BudgetControl for Control {
    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let principal = self.authenticate(&req).await?;
        let req = req.into_inner();
        check_id("agent_id", &req.agent_id)?;
        if req.known_revision < 0 {
            return Err(Status::invalid_argument(
                "known_revision must not be negative",
            ));
        }
        let selection = if req.chains.is_empty() {
            check_id("service (or chains)", &req.service)?;
            Selection::Service(req.service.clone())
        } else {
            for c in &req.chains {
                check_chain_name(c).map_err(Status::from)?;
            }
            Selection::Chains(req.chains.iter().cloned().collect())
        };
        if req.labels.len() > 32
            || req
                .labels
                .iter()
                .any(|(k, v)| k.len() > 64 || v.len() > 256)
        {
            return Err(Status::invalid_argument(
                "labels: at most 32, keys ≤ 64 and values ≤ 256 bytes",
            ));
        }
        tracing::info!(agent = %req.agent_id, service = %req.service, token = %principal.name, known = req.known_revision, "watch opened");
        let labels: BTreeMap<String, String> = req.labels.into_iter().collect();
        let slot = self
            .fleet
            .connected(&req.agent_id, &req.service, labels, req.known_revision);
        let mut rx = self.hub.subscribe();
        rx.mark_changed();
        let state = StreamState {
            rx,
            shutdown: self.shutdown.clone(),
            selection,
            sent: HashMap::new(),
            known: req.known_revision,
            conn: Connection {
                slot,
                fleet: self.fleet.clone(),
            },
        };
        let stream = futures_util::stream::unfold(state, |mut st| async move {
            loop {
                if *st.shutdown.borrow() {
                    return None;
                }
                tokio::select! {
                    changed = st.rx.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                        if let Some(update) = st.pending() {
                            return Some((Ok(update), st));
                        }
                    }
                    _ = st.shutdown.changed() => return None,
                }
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn ack(&self, req: Request<AckRequest>) -> Result<Response<AckResponse>, Status> {
        self.authenticate(&req).await?;
        let req = req.into_inner();
        check_id("agent_id", &req.agent_id)?;
        if req.revision <= 0 {
            return Err(Status::invalid_argument("revision must be positive"));
        }
        if !req.accepted && req.error.trim().is_empty() {
            return Err(Status::invalid_argument(
                "a NACK (accepted=false) needs the error that made the agent refuse",
            ));
        }
        let error: String = req.error.chars().take(2000).collect();
        if !req.accepted {
            tracing::warn!(agent = %req.agent_id, revision = req.revision, %error, "agent refused a config (NACK)");
        }
        if !self
            .fleet
            .acked(&req.agent_id, req.revision, req.accepted, &error)
        {
            return Err(Status::failed_precondition(format!(
                "agent {:?} has no Watch stream on this replica; open one first",
                req.agent_id
            )));
        }
        crate::observe::acked(req.accepted);
        Ok(Response::new(AckResponse {}))
    }
}

/// The tonic router: BudgetControl, health and reflection.
pub async fn routes(control: Control) -> anyhow::Result<tonic::service::Routes> {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<BudgetControlServer<Control>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(budget_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    Ok(
        tonic::service::Routes::new(BudgetControlServer::new(control))
            .add_service(health_service)
            .add_service(reflection),
    )
}

/// HTTP/2 keepalive: detect dead agents and keep idle streams through middleboxes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
