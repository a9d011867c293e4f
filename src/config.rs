//! Settings: defaults → TOML file → `BUDGETD_*` environment (`__` nests) → command-line flags.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Value};
use figment::Figment;
use serde::{Deserialize, Serialize};

use self::describe::describe;

mod describe;

/// A secret string: never printed by `Debug`.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Where the embedded SQLite database lives.
    pub data_dir: PathBuf,
    /// `sqlite:PATH` or `postgres://…`; default: `sqlite:{data_dir}/budgetd.db`.
    pub database_url: Option<Secret>,
    /// HTTP listener (API, schemas, health).
    pub http: SocketAddr,
    /// gRPC listener (BudgetControl Watch/Ack, health, reflection).
    pub grpc: SocketAddr,
    /// This replica's name in fleet status; default: the gRPC address.
    pub replica: Option<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Largest load-test upload (all files of one run), in bytes; streamed, never buffered.
    pub max_upload_bytes: u64,
    /// Where baseline documents are archived: `file://PATH` or `s3://BUCKET[/PREFIX]`;
    /// default: `file://{data_dir}/archive`.
    pub archive_url: Option<String>,
    /// Key prefix of archived objects (an `s3://BUCKET/PREFIX` URL's prefix wins).
    pub archive_prefix: String,
    pub approval: ApprovalSettings,
    /// The admin token to install at start (`BUDGETD_ADMIN_TOKEN`).
    pub admin_token: Option<Secret>,
    /// `text` or `json` log lines.
    pub log_format: LogFormat,
    /// TLS for both listeners (off unless both files are set).
    pub tls: TlsSettings,
    /// Connection limit and timeouts of the HTTP listener.
    pub http_limits: HttpLimits,
    /// Limits of the agents' gRPC Watch streams and how long the fleet remembers an agent.
    pub agents: AgentSettings,
    /// Runtime feedback: agents' reports, alert rules and webhook delivery (SPEC §8).
    pub feedback: FeedbackSettings,
}

/// Runtime feedback (SPEC §8): how long rollups are kept, how often rules run, the rules'
/// thresholds and webhook delivery.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FeedbackSettings {
    /// Days per-minute rollups are kept.
    pub retention_days: u64,
    /// Length of one rollup in milliseconds: 60 000 (a minute, as SPEC §8 says) unless a test
    /// shortens it; the production windows `1m`, `5m` and `1h` are 1, 5 and 60 rollups.
    pub rollup_ms: u64,
    /// How often the alert rules are evaluated, in milliseconds.
    pub evaluate_every_ms: u64,
    /// The rules' thresholds (seed defaults: amplification 2, kill rate 1 %, drift needs
    /// 1 000 samples, archive backlog 600 s).
    pub alerts: budget_core::feedback::AlertThresholds,
    /// Seconds a webhook receiver has to answer one delivery.
    pub webhook_timeout_secs: u64,
    /// Attempts before a delivery is given up (`failed`); the backoff doubles from 1 s up to
    /// 10 minutes between attempts.
    pub webhook_max_attempts: u32,
}

impl Default for FeedbackSettings {
    fn default() -> Self {
        Self {
            retention_days: 7,
            rollup_ms: 60_000,
            evaluate_every_ms: 10_000,
            alerts: budget_core::feedback::AlertThresholds::default(),
            webhook_timeout_secs: 5,
            webhook_max_attempts: 20,
        }
    }
}

impl FeedbackSettings {
    /// The settings' problems, if any (checked at start).
    pub fn check(&self) -> Result<(), String> {
        if !(1_000..=60_000).contains(&self.rollup_ms) {
            return Err("feedback.rollup_ms must be from 1000 to 60000".into());
        }
        if !(100..=600_000).contains(&self.evaluate_every_ms) {
            return Err("feedback.evaluate_every_ms must be from 100 to 600000".into());
        }
        if !(1..=366).contains(&self.retention_days) {
            return Err("feedback.retention_days must be from 1 to 366".into());
        }
        if !(1..=120).contains(&self.webhook_timeout_secs) || self.webhook_max_attempts == 0 {
            return Err(
                "feedback.webhook_timeout_secs must be from 1 to 120 and webhook_max_attempts at least 1"
                    .into(),
            );
        }
        let a = &self.alerts;
        let amplification_ok = a.amplification.is_finite() && a.amplification >= 1.0;
        let kill_rate_ok = a.kill_rate.is_finite() && (0.0..=1.0).contains(&a.kill_rate);
        if !amplification_ok || !kill_rate_ok {
            return Err(
                "feedback.alerts: amplification must be at least 1 and kill_rate from 0 to 1"
                    .into(),
            );
        }
        Ok(())
    }
}

/// What agents may hold, and how long a gone agent is remembered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    /// Watch streams one token may hold open on one replica; one more answers
    /// RESOURCE_EXHAUSTED.
    pub max_streams_per_token: usize,
    /// Seconds an agent with no Watch stream stays in fleet status (`GET /agents`, memory
    /// and database) before it is forgotten.
    pub retention_secs: u64,
    /// Streams per second this replica's agents should reopen at after their streams end:
    /// each stream is told to spread its reconnect over (open streams / this) seconds, at
    /// most a minute (`budget-reconnect-spread-ms`).
    pub reconnect_per_second: u32,
    /// Seconds a replica process may go without recording that it is alive (it does six
    /// times in this period) before fleet status shows its agents disconnected: a replica
    /// killed or its host lost. Replicas' clocks must agree to well within it.
    pub replica_silence_secs: u64,
    /// Connections the gRPC listener holds at once; at the limit it accepts no more until one
    /// closes (new clients wait in the kernel's listen backlog).
    pub max_connections: usize,
    /// Bytes that Ack and Report calls may hold at once on the gRPC listener (headers,
    /// request, answer, a fixed 8 KiB each); a call that would pass it answers
    /// RESOURCE_EXHAUSTED.
    pub max_call_bytes: u64,
}

impl Default for AgentSettings {
    fn default() -> Self {
        Self {
            max_streams_per_token: 1024,
            retention_secs: 24 * 3600,
            reconnect_per_second: 2000,
            replica_silence_secs: 30,
            max_connections: 10_000,
            max_call_bytes: 256 << 20,
        }
    }
}

impl AgentSettings {
    /// The settings' problems, if any (checked at start).
    pub fn check(&self) -> Result<(), String> {
        let within = |key: &str, value: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&value) {
                Ok(())
            } else {
                Err(format!(
                    "agents.{key} must be from {lo} to {hi}, not {value}"
                ))
            }
        };
        let max_streams = u64::try_from(self.max_streams_per_token).unwrap_or(u64::MAX);
        within("max_streams_per_token", max_streams, 1, 1_000_000)?;
        within(
            "reconnect_per_second",
            self.reconnect_per_second.into(),
            1,
            1_000_000,
        )?;
        within("replica_silence_secs", self.replica_silence_secs, 3, 3600)?;
        let max_connections = u64::try_from(self.max_connections).unwrap_or(u64::MAX);
        within("max_connections", max_connections, 1, 1_000_000)?;
        within("max_call_bytes", self.max_call_bytes, 1 << 20, 64 << 30)?;
        Ok(())
    }

    /// [`Self::replica_silence_secs`].
    pub fn replica_silence(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.replica_silence_secs.clamp(3, 3600))
    }

    /// [`Self::retention_secs`], at least one second.
    pub fn retention(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.retention_secs.max(1))
    }
}

/// What one HTTP client may hold: connections and how long each may sit idle or stall.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HttpLimits {
    /// Open HTTP connections (TLS handshakes included); at the limit, new connections wait in
    /// the kernel's backlog until one closes.
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers; HTTP/1 also waits this long for the
    /// next request on a kept-alive connection.
    pub header_read_timeout_secs: u64,
    /// Seconds a connection may stay open with no request in flight (HTTP/2 included).
    pub idle_timeout_secs: u64,
    /// Seconds a request body may go without a byte arriving (uploads included).
    pub body_read_timeout_secs: u64,
    /// Seconds a request may take in total, load-test uploads and archive verification excepted.
    pub request_timeout_secs: u64,
    /// Concurrent requests (streams) on one HTTP/2 connection.
    pub max_concurrent_streams: u32,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            header_read_timeout_secs: 10,
            idle_timeout_secs: 60,
            body_read_timeout_secs: 30,
            request_timeout_secs: 60,
            max_concurrent_streams: 100,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// PEM certificate chain (leaf first) served on HTTP and gRPC.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the leaf certificate.
    pub key_file: Option<PathBuf>,
    /// Seconds between checks of the files' modification time; a change is loaded for new
    /// connections without a restart. 0: never reload.
    pub reload_interval_secs: u64,
}

impl Default for TlsSettings {
    fn default() -> Self {
        Self {
            cert_file: None,
            key_file: None,
            reload_interval_secs: 5,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSettings {
    /// Four eyes: the approver of a draft must not be the uploader of its run.
    pub require_distinct_approver: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./budgetd-data"),
            database_url: None,
            http: SocketAddr::from(([127, 0, 0, 1], 8080)),
            grpc: SocketAddr::from(([127, 0, 0, 1], 50051)),
            replica: None,
            max_body_bytes: 8 * 1024 * 1024,
            max_upload_bytes: 4 * 1024 * 1024 * 1024,
            archive_url: None,
            archive_prefix: crate::store::DEFAULT_ARCHIVE_PREFIX.to_owned(),
            approval: ApprovalSettings {
                require_distinct_approver: true,
            },
            admin_token: None,
            log_format: LogFormat::Text,
            tls: TlsSettings::default(),
            http_limits: HttpLimits::default(),
            agents: AgentSettings::default(),
            feedback: FeedbackSettings::default(),
        }
    }
}

/// Environment keys that belong to the server (others, such as budgetctl's, are ignored).
const ENV_KEYS: [&str; 15] = [
    "archive_url",
    "archive_prefix",
    "data_dir",
    "database_url",
    "http",
    "grpc",
    "replica",
    "max_body_bytes",
    "max_upload_bytes",
    "approval",
    "admin_token",
    "log_format",
    "tls",
    "agents",
    "feedback",
];

fn insert_nested(dict: &mut Dict, path: &[&str], value: Value) {
    match path {
        [] => {}
        [last] => {
            dict.insert((*last).to_owned(), value);
        }
        [first, rest @ ..] => {
            let entry = dict
                .entry((*first).to_owned())
                .or_insert_with(|| Value::from(Dict::new()));
            if let Value::Dict(_, inner) = entry {
                insert_nested(inner, rest, value);
            }
        }
    }
}

impl Settings {
    /// Loads the layers below the command line. `env` is the process environment, passed in
    /// so only `main` reads it.
    pub fn load(file: Option<&Path>, env: &[(String, String)]) -> anyhow::Result<Self> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        if let Some(file) = file {
            anyhow::ensure!(
                file.exists(),
                "config file {} does not exist",
                file.display()
            );
            figment = figment.merge(Toml::file_exact(file));
        }
        let vars: Vec<(String, String)> = env
            .iter()
            .filter_map(|(k, v)| {
                let rest = k.strip_prefix("BUDGETD_")?.to_ascii_lowercase();
                ENV_KEYS
                    .iter()
                    .any(|p| rest.starts_with(p))
                    .then(|| (rest, v.clone()))
            })
            .collect();
        // Which variable set each key, to name it in an error.
        let from_env: BTreeMap<String, String> = vars
            .iter()
            .map(|(key, _)| {
                (
                    key.replace("__", "."),
                    format!("BUDGETD_{}", key.to_ascii_uppercase()),
                )
            })
            .collect();
        let mut dict = Dict::new();
        for (key, value) in vars {
            let path: Vec<&str> = key.split("__").collect();
            insert_nested(
                &mut dict,
                &path,
                value
                    .parse()
                    .unwrap_or_else(|e: std::convert::Infallible| match e {}),
            );
        }
        figment = figment.merge(Serialized::defaults(dict));
        figment
            .extract()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {}", describe(e, &from_env)))
    }

    /// The database URL in effect.
    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) => url.0.clone(),
            None => format!("sqlite:{}", self.data_dir.join("budgetd.db").display()),
        }
    }

    /// The archive URL in effect.
    pub fn archive_url(&self) -> String {
        match &self.archive_url {
            Some(url) => url.clone(),
            None => format!("file://{}", self.data_dir.join("archive").display()),
        }
    }
}

/// A URL with any password replaced, for logs.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

/// The commented example printed by `budgetd print-config`.
pub const EXAMPLE: &str = include_str!("config/example.toml");

#[cfg(test)]
mod tests {
    use super::*;

    /// `pairs` as the process environment `Settings::load` takes.
    pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn layers_and_nesting() {
        let s = Settings::load(
            None,
            &env(&[
                ("BUDGETD_HTTP", "127.0.0.1:9999"),
                ("BUDGETD_APPROVAL__REQUIRE_DISTINCT_APPROVER", "false"),
                ("BUDGETD_URL", "http://ignored"),
                ("BUDGETD_ADMIN_TOKEN", "s3cret"),
            ]),
        )
        .unwrap();
        assert_eq!(s.http.port(), 9999);
        assert!(!s.approval.require_distinct_approver);
        assert_eq!(s.admin_token, Some(Secret("s3cret".into())));
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    /// Every agents setting with a range is checked at start, the message naming the value.
    #[test]
    fn agent_ranges_are_checked() {
        let check = |key: &str, value: &str| {
            Settings::load(None, &env(&[(key, value)]))
                .unwrap()
                .agents
                .check()
        };
        assert_eq!(
            check("BUDGETD_AGENTS__MAX_STREAMS_PER_TOKEN", "0").unwrap_err(),
            "agents.max_streams_per_token must be from 1 to 1000000, not 0"
        );
        assert_eq!(
            check("BUDGETD_AGENTS__REPLICA_SILENCE_SECS", "2").unwrap_err(),
            "agents.replica_silence_secs must be from 3 to 3600, not 2"
        );
        assert_eq!(
            check("BUDGETD_AGENTS__MAX_CONNECTIONS", "0").unwrap_err(),
            "agents.max_connections must be from 1 to 1000000, not 0"
        );
        assert_eq!(check("BUDGETD_AGENTS__MAX_CONNECTIONS", "20000"), Ok(()));
        assert_eq!(
            check("BUDGETD_AGENTS__MAX_CALL_BYTES", "1000").unwrap_err(),
            "agents.max_call_bytes must be from 1048576 to 68719476736, not 1000"
        );
        assert_eq!(check("BUDGETD_AGENTS__MAX_CALL_BYTES", "1048576"), Ok(()));
    }

    #[test]
    fn tls_from_the_environment() {
        let s = Settings::load(None, &[]).unwrap();
        assert_eq!(s.tls, TlsSettings::default());
        let s = Settings::load(
            None,
            &env(&[
                ("BUDGETD_TLS__CERT_FILE", "/tls/tls.crt"),
                ("BUDGETD_TLS__KEY_FILE", "/tls/tls.key"),
                ("BUDGETD_TLS__RELOAD_INTERVAL_SECS", "2"),
            ]),
        )
        .unwrap();
        assert_eq!(s.tls.cert_file, Some(PathBuf::from("/tls/tls.crt")));
        assert_eq!(s.tls.key_file, Some(PathBuf::from("/tls/tls.key")));
        assert_eq!(s.tls.reload_interval_secs, 2);
    }

    #[test]
    fn http_limits_from_the_environment() {
        let s = Settings::load(None, &[]).unwrap();
        assert_eq!(s.http_limits, HttpLimits::default());
        let s = Settings::load(
            None,
            &env(&[
                ("BUDGETD_HTTP", "127.0.0.1:9999"),
                ("BUDGETD_HTTP_LIMITS__MAX_CONNECTIONS", "10"),
                ("BUDGETD_HTTP_LIMITS__IDLE_TIMEOUT_SECS", "5"),
            ]),
        )
        .unwrap();
        assert_eq!(s.http.port(), 9999);
        assert_eq!(s.http_limits.max_connections, 10);
        assert_eq!(s.http_limits.idle_timeout_secs, 5);
        assert_eq!(s.http_limits.header_read_timeout_secs, 10);
    }

    #[test]
    fn agent_settings_from_the_environment() {
        let s = Settings::load(None, &[]).unwrap();
        assert_eq!(s.agents, AgentSettings::default());
        assert_eq!(s.agents.retention(), std::time::Duration::from_secs(86400));
        let s = Settings::load(
            None,
            &env(&[
                ("BUDGETD_AGENTS__MAX_STREAMS_PER_TOKEN", "8"),
                ("BUDGETD_AGENTS__RETENTION_SECS", "60"),
            ]),
        )
        .unwrap();
        assert_eq!(s.agents.max_streams_per_token, 8);
        assert_eq!(s.agents.retention_secs, 60);
    }

    #[test]
    fn reconnect_pace_is_checked() {
        let pace = |v: &str| {
            Settings::load(None, &env(&[("BUDGETD_AGENTS__RECONNECT_PER_SECOND", v)]))
                .map(|s| s.agents.check())
        };
        assert_eq!(pace("500").unwrap(), Ok(()));
        let refused = pace("0").unwrap().unwrap_err();
        assert!(refused.contains("agents.reconnect_per_second"), "{refused}");
        assert!(pace("1000001").unwrap().is_err() && pace("-1").is_err() && pace("x").is_err());
    }

    #[test]
    fn example_parses_and_unknown_keys_fail() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("budgetd.toml");
        std::fs::write(&file, EXAMPLE).unwrap();
        Settings::load(Some(&file), &[]).unwrap();
        std::fs::write(&file, "htp = \"x\"").unwrap();
        let err = Settings::load(Some(&file), &[]).unwrap_err().to_string();
        assert!(err.contains("htp"), "{err}");
        assert!(Settings::load(None, &env(&[("BUDGETD_HTTP", "nonsense")])).is_err());
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("sqlite:./x.db"), "sqlite:./x.db");
    }
}
