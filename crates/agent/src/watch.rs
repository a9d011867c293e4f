//! The control-plane connection: `Watch` and `Ack` over gRPC, and the background task that
//! keeps the live config current (reconnect forever, exponential backoff with full jitter,
//! resuming from the revision held).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use budget_proto::v1::{self, budget_control_client::BudgetControlClient};
use tokio::time::Instant;
use tonic::codec::Streaming;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tracing::{debug, info, warn};

use crate::agent::{AgentConfig, AgentError, Shared};
use crate::policy::{random_pick, ReconnectBackoff};
use crate::snapshot::{Refusal, Snapshot};

type Client = BudgetControlClient<Channel>;

/// Everything needed to talk to the control plane; owned by the background task.
pub(crate) struct Conn {
    /// `endpoint` first, then the fallbacks; `current` is the one in use.
    endpoints: Vec<Endpoint>,
    current: usize,
    auth: MetadataValue<Ascii>,
    agent_id: String,
    service: String,
    chains: Vec<String>,
    labels: BTreeMap<String, String>,
    cache_path: Option<PathBuf>,
    connect_timeout: Duration,
    first_config_timeout: Duration,
}

/// An error and its sources on one line (tonic's transport errors say little at the top).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn status(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// TLS for an `https://` endpoint: the configured CA file (only it) or the system's roots,
/// ALPN h2, and the name to verify. A CA file or domain with an `http://` endpoint is an error:
/// it would silently go unencrypted.
fn with_tls(endpoint: Endpoint, config: &AgentConfig) -> Result<Endpoint, AgentError> {
    let https = endpoint.uri().scheme_str() == Some("https");
    if !https {
        if config.ca_cert.is_some() || config.tls_domain.is_some() {
            return Err(AgentError::Config(format!(
                "ca_cert/tls_domain need an https:// endpoint, not {:?}",
                config.endpoint
            )));
        }
        return Ok(endpoint);
    }
    let mut tls = ClientTlsConfig::new();
    tls = match &config.ca_cert {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| {
                AgentError::Config(format!("cannot read ca_cert {}: {e}", path.display()))
            })?;
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                return Err(AgentError::Config(format!(
                    "ca_cert {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                    path.display()
                )));
            }
            tls.ca_certificate(Certificate::from_pem(pem))
        }
        None => tls.with_native_roots(),
    };
    if let Some(domain) = &config.tls_domain {
        tls = tls.domain_name(domain.clone());
    }
    endpoint
        .tls_config(tls)
        .map_err(|e| AgentError::Config(format!("TLS for {:?}: {}", config.endpoint, chain(&e))))
}

impl Conn {
    pub(crate) fn new(config: &AgentConfig) -> Result<Self, AgentError> {
        let mut endpoints = Vec::new();
        for url in std::iter::once(&config.endpoint).chain(&config.fallback_endpoints) {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| AgentError::Config(format!("endpoint {url:?}: {}", chain(&e))))?
                .connect_timeout(config.connect_timeout)
                // Detect half-open connections on a long-idle watch stream.
                .http2_keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(10))
                .keep_alive_while_idle(true);
            endpoints.push(with_tls(endpoint, config)?);
        }
        let mut auth: MetadataValue<Ascii> = format!("Bearer {}", config.token)
            .parse()
            .map_err(|_| AgentError::Config("token is not a valid header value".into()))?;
        auth.set_sensitive(true);
        if config.agent_id.is_empty() {
            return Err(AgentError::Config("agent_id must not be empty".into()));
        }
        Ok(Self {
            endpoints,
            current: 0,
            auth,
            agent_id: config.agent_id.clone(),
            service: config.service.clone(),
            chains: config.chains.clone(),
            labels: config.labels.clone(),
            cache_path: config.cache_path.clone(),
            connect_timeout: config.connect_timeout,
            first_config_timeout: config.first_config_timeout,
        })
    }

    fn target(&self) -> String {
        self.endpoints[self.current].uri().to_string()
    }

    /// Moves to the next endpoint (wrapping); returns a client for it.
    fn rotate(&mut self) -> Client {
        self.current = (self.current + 1) % self.endpoints.len();
        BudgetControlClient::new(self.endpoints[self.current].connect_lazy())
    }

    /// The first config from the first endpoint that gives one, trying each in order.
    pub(crate) async fn first_config(
        &mut self,
    ) -> Result<(Client, Streaming<v1::BudgetUpdate>, v1::BudgetUpdate), String> {
        let mut reasons = Vec::new();
        for i in 0..self.endpoints.len() {
            self.current = i;
            match self.first_config_from_current().await {
                Ok(found) => return Ok(found),
                Err(reason) => reasons.push(reason),
            }
        }
        Err(reasons.join("; "))
    }

    /// Connects, opens the watch stream from revision 0 and waits for its first update.
    /// The error is a one-line reason for the log and [`AgentError::Unavailable`].
    async fn first_config_from_current(
        &self,
    ) -> Result<(Client, Streaming<v1::BudgetUpdate>, v1::BudgetUpdate), String> {
        let target = self.target();
        let endpoint = &self.endpoints[self.current];
        let channel = tokio::time::timeout(self.connect_timeout, endpoint.connect())
            .await
            .map_err(|_| {
                format!(
                    "no connection to {target} within {:?}",
                    self.connect_timeout
                )
            })?
            .map_err(|e| format!("failed to connect to {target}: {}", chain(&e)))?;
        let mut client = BudgetControlClient::new(channel);
        let first = async {
            let mut stream = self
                .watch(&mut client, 0)
                .await
                .map_err(|s| format!("watch on {target} failed: {}", status(&s)))?;
            match stream.message().await {
                Ok(Some(update)) => Ok((stream, update)),
                Ok(None) => Err(format!("watch on {target} ended before the first config")),
                Err(s) => Err(format!("watch on {target} failed: {}", status(&s))),
            }
        };
        let (stream, update) = tokio::time::timeout(self.first_config_timeout, first)
            .await
            .map_err(|_| {
                format!(
                    "no config from {target} within {:?}",
                    self.first_config_timeout
                )
            })??;
        Ok((client, stream, update))
    }

    async fn watch(
        &self,
        client: &mut Client,
        known_revision: i64,
    ) -> Result<Streaming<v1::BudgetUpdate>, tonic::Status> {
        let mut request = tonic::Request::new(v1::WatchRequest {
            agent_id: self.agent_id.clone(),
            service: self.service.clone(),
            chains: self.chains.clone(),
            known_revision,
            labels: self.labels.clone().into_iter().collect(),
        });
        request
            .metadata_mut()
            .insert("authorization", self.auth.clone());
        Ok(client.watch(request).await?.into_inner())
    }

    /// ACK (`Ok`) or NACK (`Err`, with the reason) of `revision`; failures are only logged.
    pub(crate) async fn ack(
        &self,
        client: &mut Client,
        revision: i64,
        result: Result<(), &Refusal>,
    ) {
        let mut request = tonic::Request::new(v1::AckRequest {
            agent_id: self.agent_id.clone(),
            revision,
            accepted: result.is_ok(),
            error: result.err().map(ToString::to_string).unwrap_or_default(),
        });
        request
            .metadata_mut()
            .insert("authorization", self.auth.clone());
        let limit = self.first_config_timeout.max(Duration::from_secs(1));
        match tokio::time::timeout(limit, client.ack(request)).await {
            Ok(Ok(_)) => debug!(revision, accepted = result.is_ok(), "acknowledged"),
            Ok(Err(s)) => warn!(revision, error = %status(&s), "failed to acknowledge a revision"),
            Err(_) => warn!(revision, "failed to acknowledge a revision: timed out"),
        }
    }

    /// Caches `snapshot` on disk (when a cache path is set); failures are only logged.
    pub(crate) async fn write_cache(&self, snapshot: &Snapshot) {
        let Some(path) = self.cache_path.clone() else {
            return;
        };
        let snapshot = snapshot.clone();
        let shown = path.display().to_string();
        match tokio::task::spawn_blocking(move || crate::cache::write(&path, &snapshot)).await {
            Ok(Ok(())) => debug!(path = %shown, "cached the budgets"),
            Ok(Err(e)) => warn!(path = %shown, error = %e, "failed to cache the budgets"),
            Err(e) => warn!(path = %shown, error = %e, "failed to cache the budgets"),
        }
    }

    /// Validates and applies one update: ACK + cache + publish, or NACK and keep the old one.
    async fn handle(&self, client: &mut Client, shared: &Shared, update: v1::BudgetUpdate) {
        let revision = update.revision;
        let current = shared.tx.borrow().clone();
        match current.apply(update) {
            Ok(next) => {
                if revision <= current.revision {
                    warn!(
                        revision,
                        current = current.revision,
                        "revision did not increase"
                    );
                }
                let next = Arc::new(next);
                shared.tx.send_replace(next.clone());
                info!(revision, "applied new budgets");
                self.write_cache(&next).await;
                self.ack(client, revision, Ok(())).await;
            }
            Err(refusal) => {
                warn!(
                    revision,
                    kept = current.revision,
                    %refusal,
                    "refused new budgets; keeping the previous ones"
                );
                *shared
                    .last_refusal
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner()) =
                    Some((revision, refusal.clone()));
                self.ack(client, revision, Err(&refusal)).await;
            }
        }
    }

    /// The background task: consumes the watch stream, reconnecting forever.
    pub(crate) async fn run(
        mut self,
        shared: Arc<Shared>,
        client: Option<Client>,
        mut stream: Option<Streaming<v1::BudgetUpdate>>,
    ) {
        let mut client = client.unwrap_or_else(|| {
            BudgetControlClient::new(self.endpoints[self.current].connect_lazy())
        });
        let mut backoff = ReconnectBackoff::default();
        let mut failing = false;
        loop {
            if let Some(mut s) = stream.take() {
                let opened = Instant::now();
                loop {
                    match s.message().await {
                        Ok(Some(update)) => {
                            backoff.reset();
                            self.handle(&mut client, &shared, update).await;
                        }
                        Ok(None) => {
                            info!("watch stream ended; reconnecting");
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
                // The replica went away or broke the stream: try the next one first.
                if self.endpoints.len() > 1 {
                    client = self.rotate();
                }
            }
            tokio::time::sleep(backoff.next_delay(random_pick)).await;
            let known_revision = shared.tx.borrow().revision;
            let limit = self.connect_timeout + self.first_config_timeout;
            let reason =
                match tokio::time::timeout(limit, self.watch(&mut client, known_revision)).await {
                    Ok(Ok(s)) => {
                        info!(known_revision, "watch stream open");
                        stream = Some(s);
                        failing = false;
                        continue;
                    }
                    Ok(Err(s)) => status(&s),
                    Err(_) => format!("no answer within {limit:?}"),
                };
            if failing {
                debug!(target = %self.target(), %reason, "still cannot watch the control plane");
            } else {
                warn!(target = %self.target(), %reason, "cannot watch the control plane; retrying with backoff");
                failing = true;
            }
            if self.endpoints.len() > 1 {
                client = self.rotate();
            }
        }
    }
}

#[cfg(test)]
mod tls_tests {
    use super::*;

    fn err(config: &AgentConfig) -> String {
        match Conn::new(config) {
            Err(AgentError::Config(e)) => e,
            Err(e) => panic!("not a config error: {e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn tls_settings_are_checked_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        let mut c = AgentConfig::new("http://127.0.0.1:1", "t", "a-1", "order");
        c.ca_cert = Some(ca.clone());
        assert!(err(&c).contains("https://"));

        c.endpoint = "https://127.0.0.1:1".into();
        let e = err(&c);
        assert!(e.contains("ca.pem") && e.contains("cannot read"), "{e}");

        std::fs::write(&ca, "garbage").unwrap();
        let e = err(&c);
        assert!(
            e.contains("ca.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
    }
}
