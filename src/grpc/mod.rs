//! gRPC transport: `budget.v1.BudgetControl` (Watch, Ack, Report), health and reflection.
//!
//! [`serve`] is the serve loop (h2, one task per connection); Watch streams live in their
//! connection's task ([`watch`]), every other call goes through tonic's routes ([`pipe`]).
//!
//! Each call authenticates ([`auth::authenticate`](crate::auth::authenticate)), converts its message, calls one function
//! of [`service::agents`](crate::service::agents) (which validates and bounds every field an agent sends, binds agent
//! ids to tokens and limits streams per token) and maps the result; every error is an
//! [`ApiError`] turned into a `Status` by the one mapping in `crate::error`.

pub mod pipe;
pub mod serve;
pub mod watch;

use std::pin::Pin;
use std::time::Duration;

// The encode-once view of budget.v1.BudgetControl: same wire protocol, chains pre-encoded.
use budget_proto::wire::budget_control_server::{BudgetControl, BudgetControlServer};
use budget_proto::wire::{
    AckRequest, AckResponse, BudgetUpdate, ReportRequest, ReportResponse, WatchRequest,
};
use futures_util::Stream;
use tonic::{Request, Response, Status};

use crate::auth::{Principal, Via};
use crate::error::{ApiError, Code};
use crate::fleet::{Fleet, TokenPermit};
use crate::publish::Hub;
use crate::service::agents;
use crate::service::feedback;
use crate::state::AppState;

/// Streams per HTTP/2 connection: an agent holds one or two; a benchmark client multiplexes
/// up to 1,000 (`bench watch`'s default). h2 decodes the headers of every stream it reads
/// before the serve loop sees them, so this times the header list bounds what a connection
/// can hold that no budget has charged yet (1,024 × 8 KiB).
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

#[derive(Clone)]
pub struct Control {
    state: AppState,
    hub: Hub,
    fleet: Fleet,
}

impl Control {
    pub fn new(state: AppState, hub: Hub, fleet: Fleet) -> Self {
        Self { state, hub, fleet }
    }

    /// The caller named by `headers`' `authorization`. Agents call often (Watch on every
    /// connect, Ack after every publication, Report every window): their tokens come from the
    /// cache.
    pub(crate) async fn caller(&self, headers: &http::HeaderMap) -> Result<Principal, ApiError> {
        // Bytes that are not visible ASCII hold no token: said so, not "missing".
        let authorization = headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or(""));
        self.state
            .agent_tokens
            .authenticate(&self.state, authorization, Via::Metadata)
            .await
    }

    /// The agent calling, from its headers, before its request is read: refused unless its
    /// token is an agent's. The serve loop keeps it in the request's extensions, where Ack and
    /// Report find it ([`Self::authenticate`]).
    pub(crate) async fn agent_caller(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<Principal, ApiError> {
        let principal = self.caller(headers).await?;
        agents::require_agent(&principal)?;
        Ok(principal)
    }

    /// One of `principal`'s places for an Ack or Report call in flight, held until it ends.
    pub(crate) fn take_call(&self, principal: &Principal) -> Result<TokenPermit, ApiError> {
        agents::take_call(&self.state, principal)
    }

    /// The caller of `req`: the one the serve loop found from its headers, or else from its
    /// `authorization` metadata.
    async fn authenticate<T>(&self, req: &Request<T>) -> Result<Principal, ApiError> {
        match req.extensions().get::<Principal>() {
            Some(principal) => Ok(principal.clone()),
            None => self.caller(req.metadata().as_ref()).await,
        }
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<BudgetUpdate, Status>> + Send>>;

#[tonic::async_trait]
impl BudgetControl for Control {
    type WatchStream = WatchStream;

    /// Never called: the serve loop ([`serve`]) answers Watch itself, on the connection's
    /// task ([`watch`]).
    async fn watch(&self, _req: Request<WatchRequest>) -> Result<Response<WatchStream>, Status> {
        Err(Status::internal("Watch is served by the connection's task"))
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

    /// Besides its request's bytes, what decoding made of them and then the decoded
    /// histograms are charged to the call's budget (`agents.max_call_bytes`) while they are
    /// held ([`feedback::report`]).
    async fn report(
        &self,
        req: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let principal = self.authenticate(&req).await?;
        let Some(charge) = req.extensions().get::<pipe::Charge>().cloned() else {
            return Err(Status::internal(
                "a Report call is charged by the serve loop",
            ));
        };
        let mut req = req.into_inner();
        // Copied out: the bytes fields share the whole request's buffer, which the call would
        // otherwise hold until its report is stored.
        let report_id = std::mem::take(&mut req.report_id).to_vec();
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
        let hold = |bytes: usize| {
            charge
                .hold(bytes)
                .map_err(|s| ApiError::new(Code::TooManyRequests, s.message()))
        };
        let accepted = feedback::report(
            &self.state,
            &principal,
            &req.agent_id,
            (&report_id, req.resend),
            windows,
            &hold,
        )
        .await?;
        Ok(Response::new(ReportResponse {
            accepted_windows: i64::try_from(accepted).unwrap_or(i64::MAX),
        }))
    }
}

/// Largest request of the calls that need no token (health, reflection).
pub const OPEN_REQUEST_MAX: usize = 16 * 1024;

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
    // Health and reflection need no token: their requests are small, and read only so far.
    Ok(
        tonic::service::Routes::new(BudgetControlServer::new(control))
            .add_service(health_service.max_decoding_message_size(OPEN_REQUEST_MAX))
            .add_service(reflection.max_decoding_message_size(OPEN_REQUEST_MAX)),
    )
}

/// HTTP/2 keepalive: detect dead agents and keep idle streams through middleboxes.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
