//! gRPC transport: `budget.v1.BudgetControl` (Watch, Ack), health and reflection.
//!
//! Every field an agent sends is validated and bounded before it is kept or logged, and logged
//! with `?` (escaped), so a newline in it cannot forge a log line. An agent id belongs to the
//! token that first watched it ([`Fleet::connected`]); each token has a limited number of
//! streams per replica ([`Fleet::open_stream`]).

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
use crate::fleet::{AckOutcome, ConnectError, Fleet, Slot, StreamPermit};
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
        let principal = Principal::from(record);
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

/// Longest agent id or service name.
pub const MAX_ID_LEN: usize = 128;
/// Most chains one Watch may name.
pub const MAX_CHAINS: usize = 256;
/// Longest NACK error kept (bytes); longer ones are cut at a character boundary.
pub const MAX_NACK_ERROR_BYTES: usize = 4096;

/// Agent ids and service names: 1-128 printable ASCII characters (no spaces, no control
/// characters). The value is not echoed: it may be huge or hostile.
fn check_id(field: &str, v: &str) -> Result<(), Status> {
    if v.is_empty() || v.len() > MAX_ID_LEN || !v.chars().all(|c| c.is_ascii_graphic()) {
        return Err(Status::invalid_argument(format!(
            "{field} must be 1-{MAX_ID_LEN} printable ASCII characters (no spaces or control characters)"
        )));
    }
    Ok(())
}

/// Labels: at most 32, keys ≤ 64 and values ≤ 256 bytes, no control characters.
fn check_labels(labels: &HashMap<String, String>) -> Result<(), Status> {
    let bad = |t: &str, max: usize| t.len() > max || t.chars().any(char::is_control);
    if labels.len() > 32
        || labels
            .iter()
            .any(|(k, v)| k.is_empty() || bad(k, 64) || bad(v, 256))
    {
        return Err(Status::invalid_argument(
            "labels: at most 32, keys 1-64 and values at most 256 bytes, no control characters",
        ));
    }
    Ok(())
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
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

/// Marks the agent disconnected, and gives its token's stream back, when its stream ends,
/// however it ends.
struct Connection {
    slot: Arc<Slot>,
    fleet: Fleet,
    _permit: StreamPermit,
}

fn agent_taken(agent_id: &str) -> Status {
    Status::permission_denied(format!(
        "agent_id {agent_id:?} belongs to another token: each agent id is bound to the token that first watched it"
    ))
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
        if !req.service.is_empty() || req.chains.is_empty() {
            check_id("service (or chains)", &req.service)?;
        }
        let selection = if req.chains.is_empty() {
            Selection::Service(req.service.clone())
        } else {
            if req.chains.len() > MAX_CHAINS {
                return Err(Status::invalid_argument(format!(
                    "chains: at most {MAX_CHAINS}"
                )));
            }
            for c in &req.chains {
                check_chain_name(c).map_err(Status::from)?;
            }
            Selection::Chains(req.chains.iter().cloned().collect())
        };
        check_labels(&req.labels)?;
        let Some(permit) = self.fleet.open_stream(&principal.token_id) else {
            tracing::warn!(token = ?principal.name, agent = ?req.agent_id, "watch refused: the token holds its stream limit");
            return Err(Status::resource_exhausted(format!(
                "token {:?} already holds {} Watch streams on this replica (agents.max_streams_per_token); close one, or give these agents a token of their own",
                principal.name,
                self.fleet.max_streams_per_token()
            )));
        };
        let labels: BTreeMap<String, String> = req.labels.into_iter().collect();
        let slot = match self
            .fleet
            .connected(
                &req.agent_id,
                &principal.token_id,
                &principal.name,
                &req.service,
                labels,
                req.known_revision,
            )
            .await
        {
            Ok(slot) => slot,
            Err(ConnectError::Taken) => {
                tracing::warn!(agent = ?req.agent_id, token = ?principal.name, "watch refused: the agent id belongs to another token");
                return Err(agent_taken(&req.agent_id));
            }
            Err(ConnectError::Store(e)) => return Err(Status::from(ApiError::from(e))),
        };
        tracing::info!(agent = ?req.agent_id, service = ?req.service, token = ?principal.name, known = req.known_revision, "watch opened");
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
                _permit: permit,
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
        let principal = self.authenticate(&req).await?;
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
        let error = truncate(&req.error, MAX_NACK_ERROR_BYTES);
        let outcome = self.fleet.acked(
            &req.agent_id,
            &principal.token_id,
            req.revision,
            req.accepted,
            error,
        );
        match outcome {
            AckOutcome::Recorded => {}
            AckOutcome::OtherToken => return Err(agent_taken(&req.agent_id)),
            AckOutcome::Unknown => {
                let bound = self
                    .state
                    .store
                    .agent_token(&req.agent_id)
                    .await
                    .map_err(|e| Status::from(ApiError::from(e)))?;
                if bound.is_some_and(|t| t != principal.token_id) {
                    return Err(agent_taken(&req.agent_id));
                }
                return Err(Status::failed_precondition(format!(
                    "agent {:?} has no Watch stream on this replica; open one first",
                    req.agent_id
                )));
            }
        }
        if !req.accepted {
            tracing::warn!(agent = ?req.agent_id, revision = req.revision, error = ?error, "agent refused a config (NACK)");
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
