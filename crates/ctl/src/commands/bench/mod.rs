//! `budgetctl bench`: benchmarks against a running budgetd (loopback only: every stream and
//! call is real gRPC or HTTP to the server). `watch` times fan-out to Watch streams, `report`
//! a fleet's Reports; this module holds what both set up.

use std::time::{Duration, Instant};

use budget_core::example::CHECKOUT_TOPOLOGY;
use budget_proto::v1::budget_control_client::BudgetControlClient;
use budget_proto::v1::{AckRequest, WatchRequest};
use serde_json::{json, Value};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::{Client, CtlError};

mod report;
mod watch;

pub(super) use report::report;
pub(super) use watch::watch;

/// TLS for an `https://` --grpc: the --ca-cert file's CAs, or the system's roots.
fn grpc_tls(endpoint: Endpoint, admin: &Client) -> Result<Endpoint, CtlError> {
    if endpoint.uri().scheme_str() != Some("https") {
        return Ok(endpoint);
    }
    let tls = match admin.ca_cert() {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| {
                CtlError::Input(format!("cannot read --ca-cert {}: {e}", path.display()))
            })?;
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
        }
        None => ClientTlsConfig::new().with_native_roots(),
    };
    endpoint
        .tls_config(tls)
        .map_err(|e| CtlError::Input(format!("TLS for --grpc: {e}")))
}

/// Watch streams opened with one agent token (below budgetd's default per-token limit).
const STREAMS_PER_TOKEN: u32 = 1000;

fn internal(what: &str, e: impl std::fmt::Display) -> CtlError {
    CtlError::Internal(format!("{what}: {e}"))
}

/// A sample of the server's `/metrics`, e.g. `process_resident_memory_bytes`.
async fn metric(client: &Client, name: &str) -> Option<f64> {
    let text = client.get_text("metrics").await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

async fn rss(client: &Client) -> Option<u64> {
    metric(client, "process_resident_memory_bytes")
        .await
        .map(|b| b as u64)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Creates a token of `role` named `name` and returns its secret.
async fn token(admin: &Client, role: &str, name: String) -> Result<String, CtlError> {
    let v = admin
        .post(
            admin.url(&["tokens"]),
            Some(json!({"role": role, "name": name}).to_string().into_bytes()),
        )
        .await?;
    Ok(v["token"].as_str().unwrap_or_default().to_owned())
}

/// A fresh benchmark chain (the checkout topology, named `bench-<tag>`) and the tokens that
/// drive it: an uploader, an approver, and agent tokens for `n` agents.
struct Bench {
    tag: String,
    chain: String,
    uploader: Client,
    approver: Client,
    agent_auth: Vec<MetadataValue<Ascii>>,
}

impl Bench {
    async fn new(admin: &Client, n: u32) -> Result<Self, CtlError> {
        let tag = format!("{:08x}", rand::random::<u32>());
        let chain = format!("bench-{tag}");
        let uploader =
            admin.with_token(&token(admin, "uploader", format!("bench-uploader-{tag}")).await?);
        let approver =
            admin.with_token(&token(admin, "approver", format!("bench-approver-{tag}")).await?);
        let agent_auth = agent_tokens(admin, n, &tag).await?;
        uploader
            .put(
                uploader.url(&["chains", &chain, "topology"]),
                CHECKOUT_TOPOLOGY.as_bytes().to_vec(),
            )
            .await?;
        Ok(Self {
            tag,
            chain,
            uploader,
            approver,
            agent_auth,
        })
    }

    /// Uploads `run` (it must open a draft) and approves the draft: the revision published,
    /// and when the approve request was sent and answered.
    async fn publish(&self, run: &Value) -> Result<(i64, Instant, Instant), CtlError> {
        let up = self
            .uploader
            .post(
                self.uploader.url(&["chains", &self.chain, "runs"]),
                Some(run.to_string().into_bytes()),
            )
            .await?;
        let id = up["baseline_id"]
            .as_str()
            .ok_or_else(|| internal("upload", "the run opened no draft"))?
            .to_owned();
        let sent = Instant::now();
        let v = self
            .approver
            .post(self.approver.url(&["baselines", &id, "approve"]), None)
            .await?;
        let done = Instant::now();
        let revision = v["revision"]
            .as_i64()
            .ok_or_else(|| internal("approve", "no revision"))?;
        Ok((revision, sent, done))
    }

    /// The `authorization` value of agent `i`'s token.
    fn agent_auth(&self, i: u32) -> MetadataValue<Ascii> {
        self.agent_auth[(i / STREAMS_PER_TOKEN) as usize].clone()
    }
}

/// `authorization` values of enough agent tokens for `n` agents: budgetd limits the Watch
/// streams of one token (`agents.max_streams_per_token`, default 1024), so agent `i` uses
/// token `i / STREAMS_PER_TOKEN`.
async fn agent_tokens(
    admin: &Client,
    n: u32,
    tag: &str,
) -> Result<Vec<MetadataValue<Ascii>>, CtlError> {
    let mut auth = Vec::new();
    for k in 0..n.div_ceil(STREAMS_PER_TOKEN) {
        let secret = token(admin, "agent", format!("bench-agent-{tag}-{k}")).await?;
        auth.push(
            MetadataValue::try_from(format!("Bearer {secret}"))
                .map_err(|e| internal("token", e))?,
        );
    }
    Ok(auth)
}

/// `connections` HTTP/2 connections to `grpc`, with fixed windows (32 MiB per connection,
/// 256 KiB per stream): a client's adaptive window can stall many streams that share one
/// connection.
async fn connect(grpc: &str, admin: &Client, connections: u32) -> Result<Vec<Channel>, CtlError> {
    let endpoint = Endpoint::from_shared(grpc.to_owned())
        .map_err(|e| CtlError::Input(format!("bad --grpc {grpc}: {e}")))?
        .initial_connection_window_size(Some(32 * 1024 * 1024))
        .initial_stream_window_size(Some(256 * 1024))
        .tcp_nodelay(true);
    let endpoint = grpc_tls(endpoint, admin)?;
    let unreachable = |reason: String| CtlError::Unreachable {
        url: grpc.to_owned(),
        reason,
        setting: "--grpc (budgetd's gRPC listener, not its HTTP address)",
    };
    let mut channels = Vec::new();
    for _ in 0..connections {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        if channels.is_empty() {
            is_budgetd(&channel).await.map_err(unreachable)?;
        }
        channels.push(channel);
    }
    Ok(channels)
}

/// Whether `channel` leads to budgetd's gRPC listener: an Ack without a token is answered
/// UNAUTHENTICATED there, from its headers. Another server (budgetd's HTTP address, say)
/// answers something else, which would otherwise fail every agent with a protocol error.
async fn is_budgetd(channel: &Channel) -> Result<(), String> {
    let answer = BudgetControlClient::new(channel.clone())
        .ack(AckRequest::default())
        .await;
    match answer {
        Err(status) if status.code() == tonic::Code::Unauthenticated => Ok(()),
        Ok(_) => Err("an Ack without a token was accepted: not budgetd's gRPC listener".into()),
        // tonic's words for an answer that is not gRPC end with the HTTP status.
        Err(status) => {
            Err(
                match status.message().split_once("response with status: ") {
                    Some((_, http)) => {
                        format!("not budgetd's gRPC listener: an Ack was answered HTTP {http}, not gRPC")
                    }
                    None => format!(
                        "not budgetd's gRPC listener: an Ack was answered {:?}: {}",
                        status.code(),
                        status.message()
                    ),
                },
            )
        }
    }
}

/// The Watch request of bench agent `i` on `chain`.
fn watch_request(tag: &str, i: u32, chain: &str) -> WatchRequest {
    WatchRequest {
        agent_id: agent_id(tag, i),
        service: "bench".into(),
        chains: vec![chain.to_owned()],
        known_revision: 0,
        labels: Default::default(),
        client: concat!("budgetctl-bench/", env!("CARGO_PKG_VERSION")).into(),
        known_chains: Vec::new(),
    }
}

fn agent_id(tag: &str, i: u32) -> String {
    format!("bench-{tag}-{i}")
}

/// Milliseconds of a duration, for the printed figures.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
