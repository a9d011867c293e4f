//! What the drill drives: budgetd as a real process (killed and restarted on the same SQLite
//! database and ports), its HTTP API, the child processes of the chain, and a local webhook
//! receiver that checks every delivery's signature.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use budget_api::feedback::{Alert, AlertList, Delivery, DeliveryList, Production};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};

use crate::services::{Role, RoleSpec, READY};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `child`'s standard output on a thread until a line passes `pick`; keeps draining it
/// afterwards so the child never blocks on a full pipe.
fn wait_for_line(
    child: &mut Child,
    what: &str,
    limit: Duration,
    mut pick: impl FnMut(&str) -> bool + Send + 'static,
) -> anyhow::Result<Vec<String>> {
    let out = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("{what}: no stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel::<Vec<String>>();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut lines = BufReader::new(out).lines();
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            let done = pick(&line);
            seen.push(line);
            if done {
                let _ = tx.send(std::mem::take(&mut seen));
                break;
            }
        }
        for _ in lines {}
    });
    match rx.recv_timeout(limit) {
        Ok(lines) => Ok(lines),
        Err(_) => match child.try_wait() {
            Ok(Some(status)) => bail!("{what} exited ({status}) before it was ready"),
            _ => bail!("{what} was not ready within {limit:?}"),
        },
    }
}

/// A `budgetd serve` process on a data directory that outlives it.
pub struct Budgetd {
    bin: PathBuf,
    data_dir: PathBuf,
    log: PathBuf,
    env: Vec<(String, String)>,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    child: Option<Child>,
    pub starts: u32,
}

impl Budgetd {
    /// Starts budgetd on loopback port 0 with `feedback.rollup_ms` and
    /// `feedback.evaluate_every_ms` shortened; stderr goes to `log`.
    pub fn start(
        bin: &Path,
        data_dir: &Path,
        log: &Path,
        admin_token: &str,
        rollup_ms: u64,
        evaluate_ms: u64,
    ) -> anyhow::Result<Self> {
        let env = vec![
            ("BUDGETD_ADMIN_TOKEN".to_owned(), admin_token.to_owned()),
            (
                "BUDGETD_FEEDBACK__ROLLUP_MS".to_owned(),
                rollup_ms.to_string(),
            ),
            (
                "BUDGETD_FEEDBACK__EVALUATE_EVERY_MS".to_owned(),
                evaluate_ms.to_string(),
            ),
            ("RUST_LOG".to_owned(), "info,sqlx=warn".to_owned()),
        ];
        let mut me = Self {
            bin: bin.to_owned(),
            data_dir: data_dir.to_owned(),
            log: log.to_owned(),
            env,
            http: "127.0.0.1:0".parse()?,
            grpc: "127.0.0.1:0".parse()?,
            child: None,
            starts: 0,
        };
        me.spawn()?;
        Ok(me)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("failed to open {}", self.log.display()))?;
        let mut child = Command::new(&self.bin)
            .args(["serve", "--http", &self.http.to_string()])
            .args(["--grpc", &self.grpc.to_string()])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("failed to start {}", self.bin.display()))?;
        let lines = wait_for_line(&mut child, "budgetd", Duration::from_secs(60), |l| {
            l.starts_with("budgetd: gRPC")
        });
        let lines = match lines {
            Ok(lines) => lines,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.context(format!("see {}", self.log.display())));
            }
        };
        let addr = |prefix: &str| -> anyhow::Result<SocketAddr> {
            let line = lines
                .iter()
                .find_map(|l| l.strip_prefix(prefix))
                .ok_or_else(|| anyhow!("budgetd did not print {prefix:?}"))?;
            let line = line.trim().trim_end_matches("/api/v1");
            let line = line.strip_prefix("http://").unwrap_or(line);
            Ok(line.parse()?)
        };
        self.http = addr("budgetd: HTTP API on ")?;
        self.grpc = addr("budgetd: gRPC (budget.v1.BudgetControl) on ")?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.http)
    }

    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// SIGTERM (graceful: in-flight requests finish, reports are committed) and waits; kills
    /// it after 20 s. Returns how long it took.
    pub fn stop(&mut self) -> anyhow::Result<Duration> {
        let Some(mut child) = self.child.take() else {
            return Ok(Duration::ZERO);
        };
        let t = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        loop {
            if child.try_wait()?.is_some() {
                return Ok(t.elapsed());
            }
            if t.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                bail!("budgetd did not stop within 20 s of SIGTERM (killed)");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts it again on the same database and ports.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop()?;
        self.spawn()
    }
}

impl Drop for Budgetd {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// budgetd's HTTP API.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    pub admin: String,
}

impl Api {
    pub fn new(base: String, admin: String) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
            base,
            admin,
        }
    }

    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut req = self
            .http
            .request(method.clone(), format!("{}/api/v1{path}", self.base))
            .bearer_auth(token);
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}"))?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, value))
    }

    /// `send`, requiring a 2xx answer.
    pub async fn ok(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let (status, value) = self.send(method.clone(), path, token, body).await?;
        if !(200..300).contains(&status) {
            bail!("{method} {path}: HTTP {status}: {value}");
        }
        Ok(value)
    }

    /// A token of `role` owned by `owner`; returns its secret.
    pub async fn token(&self, role: &str, name: &str, owner: &str) -> anyhow::Result<String> {
        let body = json!({"role": role, "name": name, "owner": owner});
        let v = self
            .ok(reqwest::Method::POST, "/tokens", &self.admin, Some(&body))
            .await?;
        v["token"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("no token in {v}"))
    }

    pub async fn production(&self, window: &str) -> anyhow::Result<Production> {
        let v = self
            .ok(
                reqwest::Method::GET,
                &format!("/chains/checkout/production?window={window}"),
                &self.admin,
                None,
            )
            .await?;
        Ok(serde_json::from_value(v)?)
    }

    pub async fn alerts(&self) -> anyhow::Result<Vec<Alert>> {
        let v = self
            .ok(reqwest::Method::GET, "/alerts", &self.admin, None)
            .await?;
        Ok(serde_json::from_value::<AlertList>(v)?.alerts)
    }

    pub async fn deliveries(&self, hook: &str) -> anyhow::Result<Vec<Delivery>> {
        let v = self
            .ok(
                reqwest::Method::GET,
                &format!("/webhooks/{hook}/deliveries"),
                &self.admin,
                None,
            )
            .await?;
        Ok(serde_json::from_value::<DeliveryList>(v)?.deliveries)
    }
}

/// One request the webhook receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    /// `X-Budgetd-Delivery`.
    pub delivery: String,
    pub event: String,
    /// Whether `X-Budgetd-Signature` is `sha256=<hex HMAC-SHA256 of the raw body>`.
    pub signed: bool,
    pub body: Value,
    /// What the receiver answered.
    pub status: u16,
}

#[derive(Default)]
struct ReceiverState {
    got: Vec<Received>,
    /// Refuse (503) the next delivery of this event for this alert rule.
    refuse: Option<(String, String)>,
}

/// A local webhook receiver (an HTTP server in the drill's process).
#[derive(Clone)]
pub struct Receiver {
    secret: String,
    state: Arc<Mutex<ReceiverState>>,
}

impl Receiver {
    /// Listens on loopback; returns the receiver and its URL.
    pub async fn start(secret: &str) -> anyhow::Result<(Self, String)> {
        let me = Self {
            secret: secret.to_owned(),
            state: Arc::default(),
        };
        let hook = me.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let hook = hook.clone();
                    async move { hook.receive(&headers, &body) }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok((me, url))
    }

    fn receive(&self, headers: &axum::http::HeaderMap, body: &[u8]) -> axum::http::StatusCode {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(self.secret.as_bytes())
            .expect("HMAC takes any key");
        mac.update(body);
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let event = value["event"].as_str().unwrap_or_default().to_owned();
        let mut st = lock(&self.state);
        let refuse = st.refuse.as_ref().is_some_and(|(e, rule)| {
            *e == event && value["alert"]["rule"].as_str() == Some(rule.as_str())
        });
        if refuse {
            st.refuse = None;
        }
        let status = if refuse { 503 } else { 200 };
        st.got.push(Received {
            at: Instant::now(),
            delivery: header("x-budgetd-delivery"),
            event,
            signed: header("x-budgetd-signature") == expected,
            body: value,
            status,
        });
        axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::OK)
    }

    /// Answers 503 to the next delivery of `event` about an alert of `rule`.
    pub fn refuse_next(&self, event: &str, rule: &str) {
        lock(&self.state).refuse = Some((event.to_owned(), rule.to_owned()));
    }

    pub fn got(&self) -> Vec<Received> {
        lock(&self.state).got.clone()
    }
}

/// How the drill starts its child processes: the same binary, told its role.
#[derive(Debug, Clone)]
pub enum Launcher {
    /// The example: `drill role '<spec JSON>'`.
    Example { exe: PathBuf },
    /// The integration test: the test binary, filtered to `test`, with the spec in
    /// `BUDGETD_DRILL_ROLE` (the test runs the role instead of the drill when it is set).
    #[allow(dead_code)] // made by tests/drill.rs only
    Test { exe: PathBuf, test: String },
}

/// The variable a test child finds its role in.
pub const ROLE_ENV: &str = "BUDGETD_DRILL_ROLE";

/// A child process of the chain; killed when dropped. Its standard input stays open while
/// this lives: the child exits when it closes.
pub struct ChildProc {
    pub name: String,
    pub url: String,
    pub control: Option<String>,
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Launcher {
    /// Starts `spec`'s role; waits for its `DRILL-READY` line. Stderr goes to `log_dir`.
    pub fn spawn(&self, spec: &RoleSpec, log_dir: &Path) -> anyhow::Result<ChildProc> {
        let json = serde_json::to_string(spec)?;
        let mut cmd = match self {
            Self::Example { exe } => {
                let mut c = Command::new(exe);
                c.arg("role").arg(&json);
                c
            }
            Self::Test { exe, test } => {
                let mut c = Command::new(exe);
                c.args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
                    .env(ROLE_ENV, &json);
                c
            }
        };
        let name = if spec.role == Role::Proxy {
            spec.name.clone()
        } else {
            spec.role.name().to_owned()
        };
        let log = std::fs::File::create(log_dir.join(format!("{name}.log")))?;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("failed to start {name}"))?;
        let stdin = child.stdin.take();
        // Under libtest the line may follow "test … ... " on the same line.
        let lines = wait_for_line(&mut child, &name, Duration::from_secs(30), |l| {
            l.contains(READY)
        });
        let lines = match lines {
            Ok(lines) => lines,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let ready = lines.last().cloned().unwrap_or_default();
        let ready = ready.split_once(READY).map_or("", |(_, rest)| rest);
        let mut words = ready.split_whitespace();
        let url = words.next().unwrap_or_default().to_owned();
        let control = words
            .next()
            .and_then(|w| w.strip_prefix("control="))
            .map(str::to_owned);
        Ok(ChildProc {
            name,
            url,
            control,
            child,
            stdin,
        })
    }
}

impl ChildProc {
    /// The traffic address (`host:port`) of a proxy or service.
    pub fn addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.url.trim_start_matches("http://").parse()?)
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `check` every 100 ms until it gives a value; fails after `limit`.
pub async fn eventually<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let t = Instant::now();
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if t.elapsed() > limit {
            let why = last_error
                .map(|e| format!(" (last error: {e:#})"))
                .unwrap_or_default();
            bail!("timed out after {limit:?}: {what}{why}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Service name → its base URL, for the specs.
pub fn urls(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
