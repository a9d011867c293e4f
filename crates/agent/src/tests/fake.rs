//! An in-process fake `BudgetControl` (real gRPC on 127.0.0.1:0): publishes configs on Watch,
//! records ACKs and Reports, and can be told to fail Reports (e.g. with UNAVAILABLE).

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use budget_core::live::LiveChain;
use budget_proto::v1::budget_control_server::{BudgetControl, BudgetControlServer};
use budget_proto::v1::{
    AckRequest, AckResponse, BudgetUpdate, ChainBudget, ReportRequest, ReportResponse, WatchRequest,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};

use crate::AgentConfig;

type Tx = mpsc::Sender<Result<BudgetUpdate, Status>>;

#[derive(Default)]
struct State {
    /// Sent at once on every watch whose `known_revision` is older.
    current: Option<BudgetUpdate>,
    watches: Vec<(WatchRequest, String)>,
    acks: Vec<AckRequest>,
    streams: Vec<Tx>,
    /// Reports answered OK, with their `authorization`.
    reports: Vec<(ReportRequest, String)>,
    /// Reports answered with an error.
    failed_reports: Vec<ReportRequest>,
    /// The error Reports are answered with, if any.
    fail_reports: Option<tonic::Code>,
    /// Reports are never answered (kept here) while set.
    hang_reports: bool,
    hung_reports: Vec<ReportRequest>,
}

#[derive(Clone, Default)]
pub(super) struct Fake(Arc<Mutex<State>>);

fn authorization<T>(request: &Request<T>) -> String {
    request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tonic::async_trait]
impl BudgetControl for Fake {
    type WatchStream = ReceiverStream<Result<BudgetUpdate, Status>>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let auth = authorization(&request);
        let request = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let mut state = self.0.lock().unwrap();
        if let Some(current) = &state.current {
            if current.revision > request.known_revision {
                tx.try_send(Ok(current.clone())).unwrap();
            }
        }
        state.watches.push((request, auth));
        state.streams.push(tx);
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn ack(&self, request: Request<AckRequest>) -> Result<Response<AckResponse>, Status> {
        self.0.lock().unwrap().acks.push(request.into_inner());
        Ok(Response::new(AckResponse {}))
    }

    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let auth = authorization(&request);
        let request = request.into_inner();
        let hang = {
            let mut state = self.0.lock().unwrap();
            if state.hang_reports {
                state.hung_reports.push(request.clone());
            }
            state.hang_reports
        };
        if hang {
            return std::future::pending().await;
        }
        let mut state = self.0.lock().unwrap();
        if let Some(code) = state.fail_reports {
            state.failed_reports.push(request);
            return Err(Status::new(code, "told to fail"));
        }
        let accepted_windows = request.windows.len() as i64;
        state.reports.push((request, auth));
        Ok(Response::new(ReportResponse { accepted_windows }))
    }
}

impl Fake {
    pub(super) async fn serve(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = BudgetControlServer::new(self.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .serve_with_incoming(service, TcpListenerStream::new(listener)),
        );
        addr
    }

    /// Publishes `update` on every open stream and to later watches.
    pub(super) fn publish(&self, update: BudgetUpdate) {
        let mut state = self.0.lock().unwrap();
        state.current = Some(update.clone());
        state
            .streams
            .retain(|tx| tx.try_send(Ok(update.clone())).is_ok());
    }

    /// Ends every open stream (the agent must reconnect).
    pub(super) fn drop_streams(&self) {
        self.0.lock().unwrap().streams.clear();
    }

    /// Ends every open stream as a stopping replica does: status OK, with trailers asking the
    /// agents to spread their reconnects over `spread_ms`.
    pub(super) fn end_streams_asking_spread(&self, spread_ms: u64) {
        let mut trailers = tonic::metadata::MetadataMap::new();
        trailers.insert(
            crate::backoff::SPREAD_KEY,
            spread_ms.to_string().parse().unwrap(),
        );
        let end = Status::with_metadata(tonic::Code::Ok, "", trailers);
        for tx in self.0.lock().unwrap().streams.drain(..) {
            let _ = tx.try_send(Err(end.clone()));
        }
    }

    pub(super) fn acks(&self) -> Vec<(i64, bool, String)> {
        let state = self.0.lock().unwrap();
        state
            .acks
            .iter()
            .map(|a| (a.revision, a.accepted, a.error.clone()))
            .collect()
    }

    pub(super) fn watches(&self) -> Vec<(WatchRequest, String)> {
        self.0.lock().unwrap().watches.clone()
    }

    pub(super) fn open_streams(&self) -> usize {
        let state = self.0.lock().unwrap();
        state.streams.iter().filter(|tx| !tx.is_closed()).count()
    }

    /// From now on, Reports fail with `code` (`None`: they succeed).
    pub(super) fn fail_reports(&self, code: Option<tonic::Code>) {
        self.0.lock().unwrap().fail_reports = code;
    }

    /// The Reports answered OK, with their `authorization`.
    pub(super) fn reports(&self) -> Vec<(ReportRequest, String)> {
        self.0.lock().unwrap().reports.clone()
    }

    pub(super) fn failed_reports(&self) -> Vec<ReportRequest> {
        self.0.lock().unwrap().failed_reports.clone()
    }

    /// Leaves Reports unanswered while `hang` is set.
    pub(super) fn hang_reports(&self, hang: bool) {
        self.0.lock().unwrap().hang_reports = hang;
    }

    /// The Reports left unanswered.
    pub(super) fn hung_reports(&self) -> Vec<ReportRequest> {
        self.0.lock().unwrap().hung_reports.clone()
    }
}

pub(super) fn update(revision: i64, chain: &LiveChain) -> BudgetUpdate {
    let mut chain = chain.clone();
    chain.revision = revision;
    BudgetUpdate {
        revision,
        chains: vec![ChainBudget::from(&chain)],
    }
}

pub(super) fn config(endpoint: String, cache: Option<&Path>) -> AgentConfig {
    let mut c = AgentConfig::new(endpoint, "s3cret-agent-token", "order-1", "order");
    c.cache_path = cache.map(Path::to_owned);
    c.labels.insert("host".into(), "test".into());
    c.connect_timeout = Duration::from_secs(2);
    c.first_config_timeout = Duration::from_millis(500);
    c
}

/// An address nothing listens on.
pub(super) async fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

pub(super) async fn eventually<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
