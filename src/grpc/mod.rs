//! gRPC transport: `budget.v1.BudgetControl` (Watch, Ack, Report), health and reflection.
//!
//! Each call authenticates ([`auth::authenticate`]), converts its message, calls one function
//! of [`service::agents`](crate::service::agents) (which validates and bounds every field an agent sends, binds agent
//! ids to tokens and limits streams per token) and maps the result; every error is an
//! [`ApiError`] turned into a `Status` by the one mapping in `crate::error`. What is left here
//! is the stream itself: sending each chain's newest publication the agent does not have.

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

// The encode-once view of budget.v1.BudgetControl: same wire protocol, chains pre-encoded.
use budget_proto::wire::budget_control_server::{BudgetControl, BudgetControlServer};
use budget_proto::wire::{
    AckRequest, AckResponse, BudgetUpdate, ReportRequest, ReportResponse, WatchRequest,
};
use futures_util::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::auth::{Principal, Via};
use crate::error::ApiError;
use crate::fleet::{Fleet, Slot, StreamPermit};
use crate::publish::{ChainEntry, Hub, HubState};
use crate::service::agents::{self, Selection};
use crate::service::feedback;
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

    /// The caller of `req`, from its `authorization` metadata. Agents call often (Watch on
    /// every connect, Ack after every publication, Report every window): their tokens come
    /// from the cache.
    async fn authenticate<T>(&self, req: &Request<T>) -> Result<Principal, ApiError> {
        let authorization = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        self.state
            .agent_tokens
            .authenticate(&self.state, authorization, Via::Metadata)
            .await
    }
}

/// The chains of the hub's `state` that `selection` receives: named chains are looked up
/// (a stream costs what it asks for, not what the hub holds); a service's are found through
/// each chain's set of services.
fn pick<'a>(
    selection: &'a Selection,
    state: &'a HubState,
) -> Box<dyn Iterator<Item = &'a Arc<ChainEntry>> + 'a> {
    match selection {
        Selection::Chains(set) => Box::new(set.iter().filter_map(|name| state.get(name))),
        Selection::Service(service) => {
            Box::new(state.values().filter(move |entry| entry.involves(service)))
        }
    }
}

/// Marks the agent disconnected, and gives its token's stream back, when its stream ends,
/// however it ends.
struct Connection {
    slot: Arc<Slot>,
    fleet: Fleet,
    _permit: StreamPermit,
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
        for entry in pick(&self.selection, &state) {
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
        let request = agents::WatchRequest {
            agent_id: req.agent_id,
            service: req.service,
            chains: req.chains,
            known_revision: req.known_revision,
            labels: req.labels,
            client: req.client,
        };
        let watch = agents::watch(&self.state, &principal, request).await?;
        let mut rx = self.hub.subscribe();
        rx.mark_changed();
        let state = StreamState {
            rx,
            shutdown: self.shutdown.clone(),
            selection: watch.selection,
            sent: HashMap::new(),
            known: watch.known_revision,
            conn: Connection {
                slot: watch.slot,
                fleet: self.fleet.clone(),
                _permit: watch.permit,
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
        let request = agents::AckRequest {
            agent_id: req.agent_id,
            revision: req.revision,
            accepted: req.accepted,
            error: req.error,
        };
        agents::ack(&self.state, &principal, request).await?;
        Ok(Response::new(AckResponse {}))
    }

    async fn report(
        &self,
        req: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let principal = self.authenticate(&req).await?;
        let req = req.into_inner();
        let windows = req
            .windows
            .into_iter()
            .map(|w| feedback::ReportWindow {
                chain: w.chain,
                segment: w.segment,
                start_unix_ms: w.start_unix_ms,
                end_unix_ms: w.end_unix_ms,
                calls: w.calls,
                attempts: w.attempts,
                retries: w.retries,
                outcomes: w.outcomes,
                latency_hdr: w.latency_hdr.to_vec(),
            })
            .collect();
        let accepted = feedback::report(&self.state, &principal, &req.agent_id, windows).await?;
        Ok(Response::new(ReportResponse {
            accepted_windows: i64::try_from(accepted).unwrap_or(i64::MAX),
        }))
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
