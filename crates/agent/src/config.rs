//! What an agent is told at start: [`AgentConfig`] — where the control plane is, who the agent
//! is, what it watches, where it caches, its timeouts and its reporting window. Plain data;
//! checked when the agent starts (`connect` for endpoints, TLS and the token, `report` for the
//! window).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// How an agent reaches the control plane and what it watches.
#[derive(Clone)]
pub struct AgentConfig {
    /// gRPC endpoint of budgetd: `http://127.0.0.1:50051` (plaintext HTTP/2) or
    /// `https://budgetd.internal:50051` (TLS; the server's certificate is verified).
    pub endpoint: String,
    /// Other replicas to fail over to, tried in order after `endpoint` (same scheme, token
    /// and TLS settings). A stream that breaks reconnects to the next one.
    pub fallback_endpoints: Vec<String>,
    /// Bearer token with role `agent`, sent as `authorization: Bearer <token>`. Never logged.
    pub token: String,
    /// Stable id of this agent instance, e.g. `order-7f9c-1`.
    pub agent_id: String,
    /// The service the agent runs in.
    pub service: String,
    /// Chains to watch; empty means every chain where `service` is a caller or callee.
    pub chains: Vec<String>,
    /// Where the last good config is cached; `None` disables the cache.
    pub cache_path: Option<PathBuf>,
    /// Free-form labels shown in fleet status (host, version …); a canary rollout may select
    /// agents by them (`--canary zone=a`).
    pub labels: BTreeMap<String, String>,
    /// Longest wait for a TCP/HTTP2 connection.
    pub connect_timeout: Duration,
    /// Longest wait, once connected, for the first config at start; then the cache is used.
    pub first_config_timeout: Duration,
    /// PEM file of the CA (one or more certificates) that signed budgetd's certificate; with
    /// it only these CAs are trusted, without it the system's roots. Needs an `https://`
    /// endpoint; read once at start.
    pub ca_cert: Option<PathBuf>,
    /// The name the server's certificate must carry, when it differs from the endpoint's
    /// host (e.g. connecting by IP address to a certificate for `budgetd.internal`).
    pub tls_domain: Option<String>,
    /// Length of a reporting window (SPEC §8): every `report_window` of wall-clock time,
    /// aligned to multiples of it, the agent sends what its calls did. Must divide a minute
    /// (10 s, 15 s, 30 s, 1 min …); at least 100 ms.
    pub report_window: Duration,
}

impl AgentConfig {
    /// A config with no chain filter, no cache, no labels, a 3 s connect timeout, a 5 s
    /// first-config timeout and 10 s reporting windows.
    pub fn new(
        endpoint: impl Into<String>,
        token: impl Into<String>,
        agent_id: impl Into<String>,
        service: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            fallback_endpoints: Vec::new(),
            token: token.into(),
            agent_id: agent_id.into(),
            service: service.into(),
            chains: Vec::new(),
            cache_path: None,
            labels: BTreeMap::new(),
            connect_timeout: Duration::from_secs(3),
            first_config_timeout: Duration::from_secs(5),
            ca_cert: None,
            tls_domain: None,
            report_window: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for AgentConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("endpoint", &self.endpoint)
            .field("fallback_endpoints", &self.fallback_endpoints)
            .field("token", &"<redacted>")
            .field("agent_id", &self.agent_id)
            .field("service", &self.service)
            .field("chains", &self.chains)
            .field("cache_path", &self.cache_path)
            .field("labels", &self.labels)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_config_timeout", &self.first_config_timeout)
            .field("ca_cert", &self.ca_cert)
            .field("tls_domain", &self.tls_domain)
            .field("report_window", &self.report_window)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let c = AgentConfig::new("http://127.0.0.1:1", "s3cr3t-token", "a-1", "order");
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cr3t-token"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("a-1"),
            "{shown}"
        );
    }
}
