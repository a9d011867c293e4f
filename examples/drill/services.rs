//! The checkout chain of SPEC §4 as real processes: gateway → order → inventory / payment /
//! user, each a small HTTP/1.1 service embedding `budget-agent`, plus the fault proxy
//! (`proxy.rs`). One binary plays every role; the drill starts one child process per role.
//!
//! - Every call to a downstream goes through [`Agent::call_within`] with its segment id
//!   (`gateway->order`, `order->inventory` …), the idempotency key when the request carries one
//!   (inventory: the order id, payment: `pay-<order id>`, user: never — not idempotent), and
//!   `attempt.deadline` as the downstream timeout: the attempt's remaining time travels in the
//!   `x-drill-deadline-ms` header (like gRPC's `grpc-timeout`), and the callee takes it as its
//!   inherited deadline ("dial 时自动继承 ctx 剩余时间"). Leaves stop work at that deadline
//!   (cancel-aware: nobody is waiting any more).
//! - order runs its three calls by the live config's stages: children of `gateway->order` with
//!   the same `stage` run in parallel, the others one after the other (SPEC §2).
//! - The gateway has a fallback: when order failed in payment it answers "order accepted,
//!   payment pending" (`pay_no` is idempotent, payment can be settled later); any other
//!   failure is an entry error (502, or 504 for its own deadline). Its in-flight calls hold a
//!   permit of a 64-slot pool (the handbook's thread pool).
//! - Leaves answer after a latency drawn from a fixed table whose nearest-rank p99 / p999 are
//!   run A's (inventory 40 / 150, payment 210 / 300, user 8 / 20 ms), visited in a stride
//!   order so every stretch of traffic has the table's distribution. The latency counts from
//!   when the caller sent the attempt (`x-drill-sent-us`), so a busy machine's request path
//!   does not add to it.
//! - Each service counts its own calls (calls, attempts, retries by cause, backoffs, release
//!   lags) next to what its agent counted (a `metrics` recorder reading
//!   `budget_agent_calls_total` and `budget_agent_retries_total`), and serves both with its
//!   agent's `report_stats` on `GET /stats`; `POST /flush` sends the agent's window now.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use budget_agent::{Agent, AgentConfig, Attempt, CallError, Classify, Failure};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::counters::Recorder;
use crate::routes::{checkout, flush, leaf, order, stats};

/// The attempt's remaining time, in milliseconds, sent to the callee.
pub const DEADLINE_HEADER: &str = "x-drill-deadline-ms";
/// When the caller sent the attempt (Unix µs): a leaf answers at that time + its latency, so
/// the latency the caller sees is the table's whatever the request path cost.
pub const SENT_HEADER: &str = "x-drill-sent-us";
/// The request's idempotency key (the order id), when it has one.
pub const KEY_HEADER: &str = "idempotency-key";
/// The line a child prints once it listens: `DRILL-READY http://ADDR [control=http://ADDR]`.
pub const READY: &str = "DRILL-READY";
/// Slots of the gateway's pool of in-flight calls.
pub const GATEWAY_POOL: usize = 64;
/// order's calls, in the topology's order: segment id, callee.
pub const ORDER_CALLS: [(&str, &str); 3] = [
    ("order->inventory", "inventory"),
    ("order->payment", "payment"),
    ("order->user", "user"),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Gateway,
    Order,
    Inventory,
    Payment,
    User,
    /// The fault proxy (`proxy.rs`).
    Proxy,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Order => "order",
            Self::Inventory => "inventory",
            Self::Payment => "payment",
            Self::User => "user",
            Self::Proxy => "proxy",
        }
    }
}

/// What a child process is told: its role and everything it connects to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RoleSpec {
    pub role: Role,
    /// Agent id (services) or a name (proxy).
    pub name: String,
    /// budgetd's gRPC endpoint, e.g. `http://127.0.0.1:50051`.
    pub grpc: String,
    /// An `agent` token of its own.
    pub token: String,
    pub report_window_ms: u64,
    /// The agent's cache of the last good config.
    pub cache: PathBuf,
    /// Callee name → base URL (gateway: order; order: inventory, payment, user).
    pub downstream: BTreeMap<String, String>,
    /// The proxy's upstream.
    pub upstream: Option<SocketAddr>,
}

/// Runs the role of `spec` until the parent closes our standard input (or the process is
/// killed): a child never outlives the drill that started it. Returns the exit status.
pub fn run_role(spec: RoleSpec) -> i32 {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter("warn,budget_agent=info")
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(serve(spec)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("drill role failed: {e:#}");
            1
        }
    }
}

async fn serve(spec: RoleSpec) -> anyhow::Result<()> {
    if spec.role == Role::Proxy {
        return crate::proxy::serve(spec).await;
    }
    // Before Agent::start: the agent registers its series when it makes a segment's counters.
    let recorder = Recorder::install();
    let mut config = AgentConfig::new(
        spec.grpc.clone(),
        spec.token.clone(),
        spec.name.clone(),
        spec.role.name(),
    );
    config.chains = vec!["checkout".into()];
    config.cache_path = Some(spec.cache.clone());
    config.report_window = Duration::from_millis(spec.report_window_ms);
    let agent = Agent::start(config).await?;
    let svc = Arc::new(Service {
        role: spec.role,
        downstream: spec.downstream.clone(),
        agent,
        http: reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?,
        recorder,
        own: Mutex::new(BTreeMap::new()),
        drawn: AtomicU64::new(0),
        served: AtomicU64::new(0),
        cancelled: AtomicU64::new(0),
        pool: Arc::new(Semaphore::new(GATEWAY_POOL)),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
    });
    let work = match spec.role {
        Role::Gateway => Router::new().route("/checkout", post(checkout)),
        Role::Order => Router::new().route("/order", post(order)),
        _ => Router::new().route("/call", post(leaf)),
    };
    let app = work
        .route("/stats", get(stats))
        .route("/flush", post(flush))
        .with_state(svc);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("{READY} http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

pub(crate) struct Service {
    pub(crate) role: Role,
    pub(crate) downstream: BTreeMap<String, String>,
    pub(crate) agent: Agent,
    pub(crate) http: reqwest::Client,
    pub(crate) recorder: Arc<Recorder>,
    /// What this service saw of its own calls, per segment.
    pub(crate) own: Mutex<BTreeMap<String, Own>>,
    /// Leaves: latencies drawn, requests answered, requests given up at the caller's deadline.
    pub(crate) drawn: AtomicU64,
    pub(crate) served: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    /// Gateway: the pool of in-flight calls.
    pub(crate) pool: Arc<Semaphore>,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) max_in_flight: AtomicUsize,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One segment's calls as the calling service saw them, independently of its agent.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Own {
    /// Calls that ended (a call whose future was dropped is not counted, as the agent does).
    pub calls: u64,
    pub attempts: u64,
    /// Retries by the cause of the attempt before them (a timed-out attempt: `deadline`).
    pub retries: BTreeMap<String, u64>,
    /// Calls made without an idempotency key.
    pub keyless: u64,
    /// Observed backoffs (end of a failed attempt → start of the next), ms, by cause.
    pub backoffs_ms: BTreeMap<String, Vec<f64>>,
    /// Calls whose last attempt timed out: how long after its deadline the call returned, ms.
    pub release_lag_ms: Vec<f64>,
    /// Successful attempts on a leaf: how much later than the leaf's table latency they
    /// returned, ms (the way back and the host's scheduling lag).
    #[serde(default)]
    pub host_lag_ms: Vec<f64>,
    /// The duration of each successful attempt, ms: what the agent puts in its latency
    /// histogram, measured beside it.
    #[serde(default)]
    pub ok_latency_ms: Vec<f64>,
}

/// How one call ended, as a service tells its caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallInfo {
    pub segment: String,
    pub attempts: u32,
    pub ok: bool,
    /// `deadline`, `unavailable`, `business`, `other` or `budget_exhausted` when it failed.
    pub cause: Option<String>,
    /// The call's duration, ms.
    pub ms: f64,
    /// When the last attempt timed out: how long after its deadline the call returned, ms.
    pub release_lag_ms: Option<f64>,
}

/// A downstream's answer other than 200, or no answer.
#[derive(Debug)]
pub(crate) enum Downstream {
    Status(u16, Value),
    Transport(String),
}

impl std::fmt::Display for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Status(s, _) => write!(f, "HTTP {s}"),
            Self::Transport(e) => write!(f, "transport: {e}"),
        }
    }
}

/// 503 and no answer (refused, reset) are UNAVAILABLE, 504 DEADLINE_EXCEEDED, 409 a business
/// error, the rest other failures.
impl Classify for Downstream {
    fn classify(&self) -> Failure {
        match self {
            Self::Status(503, _) | Self::Transport(_) => Failure::Unavailable,
            Self::Status(504, _) => Failure::Deadline,
            Self::Status(409, _) => Failure::Business,
            Self::Status(..) => Failure::Other,
        }
    }
}

fn cause_name(failure: Failure) -> &'static str {
    match failure {
        Failure::Deadline => "deadline",
        Failure::Unavailable => "unavailable",
        Failure::Business => "business",
        Failure::Other => "other",
    }
}

pub(crate) fn status_for(cause: Option<&str>) -> StatusCode {
    match cause {
        Some("deadline" | "budget_exhausted") => StatusCode::GATEWAY_TIMEOUT,
        Some("unavailable") => StatusCode::SERVICE_UNAVAILABLE,
        Some("business") => StatusCode::CONFLICT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The deadline a caller gave us (its attempt's remaining time), from now.
pub(crate) fn inherited(headers: &HeaderMap) -> Option<Instant> {
    let left: u64 = headers.get(DEADLINE_HEADER)?.to_str().ok()?.parse().ok()?;
    Some(Instant::now() + Duration::from_millis(left))
}

pub(crate) fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

pub(crate) fn key_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get(KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
}

/// One attempt as the operation saw it.
#[derive(Debug, Clone, Copy)]
struct AttemptLog {
    start: Instant,
    deadline: Instant,
    /// When it returned an error, and which; `None` if it succeeded or timed out.
    failed: Option<(Instant, Failure)>,
    /// When it succeeded.
    ok_at: Option<Instant>,
}

impl Service {
    /// Calls `url` as `segment` under the agent's R-retry and counts what it saw.
    pub(crate) async fn call(
        &self,
        segment: &str,
        key: Option<&str>,
        within: Option<Instant>,
        url: &str,
    ) -> (Result<Value, CallError<Downstream>>, CallInfo) {
        let log: Arc<Mutex<Vec<AttemptLog>>> = Arc::default();
        let started = Instant::now();
        let result = self
            .agent
            .call_within(segment, key, within, |attempt: Attempt| {
                // First: the agent times the attempt from just before this call.
                let start = Instant::now();
                let log = log.clone();
                let left = attempt.deadline.saturating_duration_since(Instant::now());
                let mut request = self
                    .http
                    .post(url)
                    .header(DEADLINE_HEADER, left.as_millis().to_string())
                    .header(SENT_HEADER, unix_us().to_string());
                if let Some(key) = key {
                    request = request.header(KEY_HEADER, key);
                }
                let index = {
                    let mut log = lock(&log);
                    log.push(AttemptLog {
                        start,
                        deadline: attempt.deadline,
                        failed: None,
                        ok_at: None,
                    });
                    log.len() - 1
                };
                async move {
                    let answer = match request.send().await {
                        Ok(r) if r.status() == reqwest::StatusCode::OK => {
                            Ok(r.json::<Value>().await.unwrap_or(Value::Null))
                        }
                        Ok(r) => {
                            let status = r.status().as_u16();
                            Err(Downstream::Status(
                                status,
                                r.json::<Value>().await.unwrap_or(Value::Null),
                            ))
                        }
                        Err(e) => Err(Downstream::Transport(e.to_string())),
                    };
                    match &answer {
                        Ok(_) => lock(&log)[index].ok_at = Some(Instant::now()),
                        Err(e) => lock(&log)[index].failed = Some((Instant::now(), e.classify())),
                    }
                    answer
                }
            })
            .await;
        let returned = Instant::now();
        let log = lock(&log).clone();
        let timed_out_last = matches!(result, Err(CallError::DeadlineExceeded { .. }));
        let release_lag_ms = timed_out_last
            .then(|| {
                log.last()
                    .map(|a| ms(returned.saturating_duration_since(a.deadline)))
            })
            .flatten();
        {
            let mut own = lock(&self.own);
            let own = own.entry(segment.to_owned()).or_default();
            own.calls += 1;
            own.attempts += log.len() as u64;
            if key.is_none() {
                own.keyless += 1;
            }
            for pair in log.windows(2) {
                let (cause, ended) = match pair[0].failed {
                    Some((at, failure)) => (cause_name(failure), at),
                    None => ("deadline", pair[0].deadline),
                };
                *own.retries.entry(cause.to_owned()).or_default() += 1;
                own.backoffs_ms
                    .entry(cause.to_owned())
                    .or_default()
                    .push(ms(pair[1].start.saturating_duration_since(ended)));
            }
            if let Some(ok) = log.last().filter(|a| result.is_ok() && a.ok_at.is_some()) {
                let ok_at = ok.ok_at.unwrap_or(ok.start);
                let took = ms(ok_at.saturating_duration_since(ok.start));
                own.ok_latency_ms.push(took);
                if let Some(target) = result.as_ref().ok().and_then(|v| v["target_ms"].as_f64()) {
                    own.host_lag_ms.push(took - target);
                }
            }
            if let Some(lag) = release_lag_ms {
                own.release_lag_ms.push(lag);
            }
        }
        let cause = match &result {
            Ok(_) => None,
            Err(CallError::Failed(e)) => Some(cause_name(e.classify()).to_owned()),
            Err(CallError::DeadlineExceeded { .. }) => Some("deadline".to_owned()),
            Err(CallError::BudgetExhausted) => Some("budget_exhausted".to_owned()),
            Err(CallError::UnknownSegment(_)) => Some("other".to_owned()),
        };
        let info = CallInfo {
            segment: segment.to_owned(),
            attempts: log.len() as u32,
            ok: result.is_ok(),
            cause,
            ms: ms(returned.saturating_duration_since(started)),
            release_lag_ms,
        };
        (result, info)
    }

    pub(crate) fn url(&self, callee: &str, path: &str) -> String {
        format!(
            "{}{path}",
            self.downstream.get(callee).map_or("", String::as_str)
        )
    }
}
