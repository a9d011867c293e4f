//! Reaching the control plane: the replicas in failover order (`endpoint`, then each
//! fallback), TLS for `https://` endpoints, the bearer token as `authorization` metadata, and
//! the [`Link`]: the client in use now, which the watch task picks (failover) and the reporter
//! follows. Knows nothing of what is said over the connection (that is `watch` and `report`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use budget_proto::v1::budget_control_client::BudgetControlClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::config::AgentConfig;
use crate::error::AgentError;

pub(crate) type Client = BudgetControlClient<Channel>;

/// The control plane's replicas and the credentials to talk to them.
pub(crate) struct Endpoints {
    /// `endpoint` first, then the fallbacks; `current` is the one in use.
    list: Vec<Endpoint>,
    current: usize,
    auth: Auth,
    connect_timeout: Duration,
}

/// The bearer token as `authorization` metadata (marked sensitive: never logged).
#[derive(Clone)]
pub(crate) struct Auth(MetadataValue<Ascii>);

impl Auth {
    pub(crate) fn new(token: &str) -> Result<Self, AgentError> {
        let mut auth: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| AgentError::Config("token is not a valid header value".into()))?;
        auth.set_sensitive(true);
        Ok(Self(auth))
    }

    /// `message` as a request carrying the bearer token.
    pub(crate) fn authorized<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        request
    }
}

/// The control-plane client in use now, shared: the watch task sets it whenever it connects
/// or fails over, the reporter sends over it. Cloning a client shares its connection.
#[derive(Clone)]
pub(crate) struct Link(Arc<Mutex<Client>>);

impl Link {
    pub(crate) fn new(client: Client) -> Self {
        Self(Arc::new(Mutex::new(client)))
    }

    pub(crate) fn set(&self, client: Client) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = client;
    }

    pub(crate) fn get(&self) -> Client {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Endpoints {
    /// Every endpoint parsed, with keep-alive and TLS set up, and the token as metadata.
    /// Errors name the setting at fault ([`AgentError::Config`]).
    pub(crate) fn new(config: &AgentConfig) -> Result<Self, AgentError> {
        let mut list = Vec::new();
        for url in std::iter::once(&config.endpoint).chain(&config.fallback_endpoints) {
            let endpoint = Endpoint::from_shared(url.clone())
                .map_err(|e| AgentError::Config(format!("endpoint {url:?}: {}", chain(&e))))?
                .connect_timeout(config.connect_timeout)
                // Detect half-open connections on a long-idle watch stream.
                .http2_keep_alive_interval(Duration::from_secs(30))
                .keep_alive_timeout(Duration::from_secs(10))
                .keep_alive_while_idle(true);
            list.push(with_tls(endpoint, config)?);
        }
        Ok(Self {
            list,
            current: 0,
            auth: Auth::new(&config.token)?,
            connect_timeout: config.connect_timeout,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Makes endpoint `index` (0 = `endpoint`, then the fallbacks in order) the current one.
    pub(crate) fn select(&mut self, index: usize) {
        self.current = index;
    }

    /// The URI of the current endpoint, for logs and error messages.
    pub(crate) fn target(&self) -> String {
        self.list[self.current].uri().to_string()
    }

    /// Connects to the current endpoint now, within `connect_timeout`. The error is a
    /// one-line reason naming the endpoint.
    pub(crate) async fn connect(&self) -> Result<Client, String> {
        let target = self.target();
        let channel = tokio::time::timeout(self.connect_timeout, self.list[self.current].connect())
            .await
            .map_err(|_| {
                format!(
                    "no connection to {target} within {:?}",
                    self.connect_timeout
                )
            })?
            .map_err(|e| format!("failed to connect to {target}: {}", chain(&e)))?;
        Ok(BudgetControlClient::new(channel))
    }

    /// A client of the current endpoint that connects on first use.
    pub(crate) fn lazy(&self) -> Client {
        BudgetControlClient::new(self.list[self.current].connect_lazy())
    }

    /// Moves to the next endpoint (wrapping); returns a client for it.
    pub(crate) fn rotate(&mut self) -> Client {
        self.current = (self.current + 1) % self.list.len();
        self.lazy()
    }

    /// `message` as a request carrying the bearer token.
    pub(crate) fn authorized<T>(&self, message: T) -> tonic::Request<T> {
        self.auth.authorized(message)
    }

    /// The bearer token, for another task talking to the same control plane.
    pub(crate) fn auth(&self) -> Auth {
        self.auth.clone()
    }
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

/// A gRPC status on one line, for logs and [`AgentError::Unavailable`].
pub(crate) fn status(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(config: &AgentConfig) -> String {
        match Endpoints::new(config) {
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

    #[tokio::test]
    async fn failover_goes_through_the_endpoints_in_order_and_wraps() {
        let mut c = AgentConfig::new("http://10.0.0.1:1", "t", "a-1", "order");
        c.fallback_endpoints = vec!["http://10.0.0.2:1".into(), "http://10.0.0.3:1".into()];
        let mut endpoints = Endpoints::new(&c).unwrap();
        assert_eq!(endpoints.len(), 3);
        let mut seen = vec![endpoints.target()];
        for _ in 0..3 {
            endpoints.rotate();
            seen.push(endpoints.target());
        }
        assert_eq!(
            seen,
            [
                "http://10.0.0.1:1/",
                "http://10.0.0.2:1/",
                "http://10.0.0.3:1/",
                "http://10.0.0.1:1/"
            ]
        );
        let request = endpoints.authorized(());
        let auth = request.metadata().get("authorization").unwrap();
        assert_eq!(auth.to_str().unwrap(), "Bearer t");
        assert!(auth.is_sensitive(), "the token is kept out of logs");
    }
}
