//! `spawn_app()`: the real `App` on port 0 with a fresh database, driven over real HTTP.

use budgetd::config::Secret;
use budgetd::{App, Settings};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

/// A strong value: budgetd refuses short, low-variety and placeholder admin tokens.
pub const ADMIN_TOKEN: &str = "3b7e5a9c1d4f8062e1c9a7b5d3f10e2c4a6b8d0f2e4c6a8b";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh database for one test; dropped (PostgreSQL) when the guard goes.
pub struct TestDb {
    pub url: String,
    _dir: Option<tempfile::TempDir>,
    pg_admin: Option<(String, String)>,
}

/// The PostgreSQL server to create test databases on, when configured.
#[allow(clippy::disallowed_methods)] // tests take their database from the environment
pub fn postgres_url() -> Option<String> {
    std::env::var("BUDGETD_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

impl TestDb {
    /// `None` only for PostgreSQL without `BUDGETD_TEST_DATABASE_URL` (a visible skip).
    pub async fn new(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite:{}", dir.path().join("budgetd.db").display());
                Some(Self {
                    url,
                    _dir: Some(dir),
                    pg_admin: None,
                })
            }
            Backend::Postgres => {
                let Some(admin_url) = postgres_url() else {
                    eprintln!("SKIPPED PostgreSQL variant: set BUDGETD_TEST_DATABASE_URL to run it (.ci/run does)");
                    return None;
                };
                let name = format!("budgetd_test_{}", hex::encode(rand::random::<[u8; 6]>()));
                let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("PostgreSQL at BUDGETD_TEST_DATABASE_URL is unreachable: {e}")
                    });
                sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE {name}").as_str())
                    .await
                    .unwrap();
                let base = admin_url
                    .rsplit_once('/')
                    .map_or(admin_url.as_str(), |(b, _)| b);
                let url = format!("{base}/{name}");
                Some(Self {
                    url,
                    _dir: None,
                    pg_admin: Some((admin_url, name)),
                })
            }
        }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.pg_admin.take() else {
            return;
        };
        // Best effort, on a thread of its own: Drop cannot await.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(mut conn) =
                    <sqlx::PgConnection as sqlx::Connection>::connect(&admin_url).await
                {
                    let _ = sqlx::Executor::execute(
                        &mut conn,
                        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str(),
                    )
                    .await;
                }
            });
        })
        .join();
    }
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub http: reqwest::Client,
    pub db_url: String,
    /// The archive folder (shared by replicas, kept across restarts).
    pub archive_dir: Arc<tempfile::TempDir>,
    /// Keeps the database alive (and drops it, on PostgreSQL) with the app; `None` for a
    /// second replica on another app's database.
    _db: Option<TestDb>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// `https` when the app serves TLS (then `http` must trust its CA).
    scheme: &'static str,
}

pub fn init_logs() {
    #[allow(clippy::disallowed_methods)]
    if std::env::var_os("TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_test_writer()
            .try_init();
    }
}

pub fn settings_for(url: &str) -> Settings {
    Settings {
        database_url: Some(Secret(url.to_owned())),
        http: "127.0.0.1:0".parse().unwrap(),
        grpc: "127.0.0.1:0".parse().unwrap(),
        admin_token: Some(Secret(ADMIN_TOKEN.into())),
        max_body_bytes: 256 * 1024,
        ..Settings::default()
    }
}

pub async fn spawn_app(backend: Backend) -> Option<TestApp> {
    let db = TestDb::new(backend).await?;
    Some(spawn_app_on(db, settings_for).await)
}

pub async fn spawn_app_on(db: TestDb, settings: impl FnOnce(&str) -> Settings) -> TestApp {
    let url = db.url.clone();
    spawn_with(Some(db), settings(&url), None).await
}

/// An app archiving to `archive` (e.g. an S3 client configured in code).
pub async fn spawn_app_with_archive(
    db: TestDb,
    settings: Settings,
    archive: Arc<dyn budgetd::archive::Archive>,
) -> TestApp {
    spawn_inner(Some(db), settings, None, Some(archive)).await
}

/// Another replica on the same database (and archive) as `first`.
pub async fn spawn_replica(first: &TestApp) -> TestApp {
    spawn_with(
        None,
        settings_for(&first.db_url),
        Some(first.archive_dir.clone()),
    )
    .await
}

/// Another replica on the same database (and archive) as `first`, with its settings tuned.
pub async fn spawn_replica_with(first: &TestApp, tune: impl FnOnce(&mut Settings)) -> TestApp {
    let mut settings = settings_for(&first.db_url);
    tune(&mut settings);
    spawn_with(None, settings, Some(first.archive_dir.clone())).await
}

async fn spawn_with(
    db: Option<TestDb>,
    settings: Settings,
    archive_dir: Option<Arc<tempfile::TempDir>>,
) -> TestApp {
    spawn_inner(db, settings, archive_dir, None).await
}

async fn spawn_inner(
    db: Option<TestDb>,
    mut settings: Settings,
    archive_dir: Option<Arc<tempfile::TempDir>>,
    archive: Option<Arc<dyn budgetd::archive::Archive>>,
) -> TestApp {
    init_logs();
    let archive_dir = archive_dir.unwrap_or_else(|| Arc::new(tempfile::tempdir().unwrap()));
    if settings.archive_url.is_none() {
        settings.archive_url = Some(format!("file://{}", archive_dir.path().display()));
    }
    let db_url = settings.database_url();
    let scheme = if settings.tls.cert_file.is_some() {
        "https"
    } else {
        "http"
    };
    let app = match archive {
        Some(archive) => App::build_with_archive(settings, archive, "gov/bench".into()).await,
        None => App::build(settings).await,
    }
    .expect("app builds");
    let addr = app.http_addr();
    let grpc_addr = app.grpc_addr();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        app.run_until_stopped(async {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    TestApp {
        addr,
        grpc_addr,
        http: reqwest::Client::new(),
        db_url,
        archive_dir,
        _db: db,
        shutdown: Some(tx),
        task: Some(task),
        scheme,
    }
}

/// An HTTP answer: status, headers and the raw body.
pub struct Answer {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: bytes::Bytes,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// The error code of an error answer.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    #[track_caller]
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(
            self.status.as_u16(),
            status,
            "body: {}",
            String::from_utf8_lossy(&self.body)
        );
        self
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{}", self.scheme, self.addr, path)
    }

    pub fn grpc_url(&self) -> String {
        format!("{}://{}", self.scheme, self.grpc_addr)
    }

    /// Stops this app, keeping its database and ports for [`Stopped::start`].
    pub async fn pause(mut self) -> Stopped {
        let db = self._db.take();
        let mut settings = settings_for(&self.db_url);
        settings.http = self.addr;
        settings.grpc = self.grpc_addr;
        self.stop_in_place().await;
        Stopped {
            db,
            settings,
            archive_dir: self.archive_dir.clone(),
        }
    }

    async fn stop_in_place(&mut self) {
        self.begin_stop();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    pub async fn stop(mut self) {
        self.stop_in_place().await;
    }

    /// Tells the app to stop without waiting for it: it drains until [`Self::stop`].
    pub fn begin_stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Sends `body` (JSON value, raw string, or nothing) with `token`.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> Answer {
        let mut req = self.http.request(method, self.url(path)).bearer_auth(token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request sent");
        Answer {
            status: resp.status(),
            headers: resp.headers().clone(),
            body: resp.bytes().await.unwrap(),
        }
    }

    pub async fn raw(&self, req: reqwest::RequestBuilder) -> Answer {
        let resp = req.send().await.expect("request sent");
        Answer {
            status: resp.status(),
            headers: resp.headers().clone(),
            body: resp.bytes().await.unwrap(),
        }
    }

    pub async fn get(&self, path: &str, token: &str) -> Answer {
        self.send(Method::GET, path, token, None).await
    }

    pub async fn post(&self, path: &str, token: &str, body: Value) -> Answer {
        self.send(Method::POST, path, token, Some(body)).await
    }

    pub async fn put(&self, path: &str, token: &str, body: Value) -> Answer {
        self.send(Method::PUT, path, token, Some(body)).await
    }

    /// Creates a token with `role` through the admin API and returns its secret.
    pub async fn token(&self, role: &str, name: &str) -> String {
        let a = self
            .post(
                "/api/v1/tokens",
                ADMIN_TOKEN,
                json!({"role": role, "name": name}),
            )
            .await
            .expect(201);
        a.json()["token"].as_str().unwrap().to_owned()
    }

    /// Uploader and approver tokens, for the four-eyes flow.
    pub async fn people(&self) -> People {
        People {
            uploader: self.token("uploader", "uma").await,
            approver: self.token("approver", "abe").await,
        }
    }

    pub async fn apply_topology(&self, token: &str, chain: &str, topology: &str) -> Answer {
        self.put(
            &format!("/api/v1/chains/{chain}/topology"),
            token,
            serde_json::from_str(topology).unwrap(),
        )
        .await
    }

    pub async fn upload(&self, token: &str, chain: &str, run: Value) -> Answer {
        self.post(&format!("/api/v1/chains/{chain}/runs"), token, run)
            .await
    }

    pub async fn baseline(&self, id: &str) -> Value {
        self.get(&format!("/api/v1/baselines/{id}"), ADMIN_TOKEN)
            .await
            .expect(200)
            .json()
    }

    pub async fn approve(&self, token: &str, id: &str) -> Answer {
        self.post(
            &format!("/api/v1/baselines/{id}/approve"),
            token,
            json!({"comment": "ok"}),
        )
        .await
    }
}

/// A stopped app that can start again where it was.
pub struct Stopped {
    db: Option<TestDb>,
    settings: Settings,
    archive_dir: Arc<tempfile::TempDir>,
}

impl Stopped {
    pub async fn start(self) -> TestApp {
        spawn_with(self.db, self.settings, Some(self.archive_dir)).await
    }

    pub async fn start_with_archive(self, archive: Arc<dyn budgetd::archive::Archive>) -> TestApp {
        spawn_inner(
            self.db,
            self.settings,
            Some(self.archive_dir),
            Some(archive),
        )
        .await
    }
}

/// Topology + run A on chain `checkout` (the chain's first run: a draft); returns the draft id.
pub async fn draft_a(app: &TestApp, p: &People) -> String {
    app.apply_topology(
        &p.uploader,
        "checkout",
        budget_core::example::CHECKOUT_TOPOLOGY,
    )
    .await
    .expect(201);
    app.upload(
        &p.uploader,
        "checkout",
        example(budget_core::example::CHECKOUT_RUN_A),
    )
    .await
    .expect(201)
    .json()["baseline_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A new chain `chain` of `topology` with `run` approved as its first baseline: the
/// publication's revision.
pub async fn publish_new_chain(
    app: &TestApp,
    p: &People,
    chain: &str,
    topology: &str,
    run: Value,
) -> i64 {
    app.apply_topology(&p.uploader, chain, topology)
        .await
        .expect(201);
    let draft = app.upload(&p.uploader, chain, run).await.expect(201).json();
    app.approve(&p.approver, draft["baseline_id"].as_str().unwrap())
        .await
        .expect(200)
        .json()["revision"]
        .as_i64()
        .unwrap()
}

/// Uploads `run` to `checkout` (it must open a draft) and approves it as the approver;
/// returns the baseline id and the publication's revision.
pub async fn publish_run(app: &TestApp, p: &People, run: &str) -> (String, i64) {
    let up = app
        .upload(&p.uploader, "checkout", example(run))
        .await
        .expect(201)
        .json();
    let id = up["baseline_id"]
        .as_str()
        .expect("the run opened a draft")
        .to_owned();
    let revision = app.approve(&p.approver, &id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    (id, revision)
}

pub struct People {
    pub uploader: String,
    pub approver: String,
}

pub fn example(src: &str) -> Value {
    serde_json::from_str(src).unwrap()
}

/// Defines one test per backend for an `async fn(TestApp)` scenario.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let app = $crate::helpers::spawn_app($crate::helpers::Backend::Sqlite).await.unwrap();
                    super::$name(&app).await;
                    app.stop().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(app) = $crate::helpers::spawn_app($crate::helpers::Backend::Postgres).await else { return };
                    super::$name(&app).await;
                    app.stop().await;
                }
            )*
        }
    };
}

// ---- Raw HTTP, real processes and their memory (hardening and fuzz tests) ----

/// An HTTP/1.1 answer read off a raw TCP connection.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Body bytes the client had written when the answer was complete.
    pub sent: u64,
    /// Why the answer's body is incomplete, if it is (e.g. a reset: a server that answers
    /// without reading the whole request body and closes may make the kernel send one).
    pub cut: Option<String>,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
}

/// A request body written as the server reads it, never held whole by the test: `prefix`,
/// then `fill_len` bytes of `fill`, then `suffix`; with `stall_after`, the client stops
/// writing after that many bytes and keeps the connection open (a body that never ends).
pub struct RawBody {
    pub prefix: Vec<u8>,
    pub fill: u8,
    pub fill_len: u64,
    pub suffix: Vec<u8>,
    pub stall_after: Option<u64>,
}

impl RawBody {
    /// A body held in memory, sent whole.
    pub fn whole(bytes: Vec<u8>) -> Self {
        Self {
            prefix: bytes,
            fill: 0,
            fill_len: 0,
            suffix: Vec::new(),
            stall_after: None,
        }
    }

    pub fn len(&self) -> u64 {
        self.prefix.len() as u64 + self.fill_len + self.suffix.len() as u64
    }
}

/// Sends `head` (request line and headers, without the blank line; `Content-Length` is added
/// from `body`) and streams `body` while reading the answer; gives up after `limit`. The
/// answer may arrive before the body is sent: the writer stops then.
pub async fn raw_request(
    addr: SocketAddr,
    head: &str,
    body: RawBody,
    limit: std::time::Duration,
) -> Result<RawAnswer, String> {
    raw_request_bytes(addr, head.as_bytes().to_vec(), body, limit).await
}

/// [`raw_request`] with a head of any bytes (header values need not be UTF-8). With
/// `connection: close` in the head, an answer without a length is read to the end.
pub async fn raw_request_bytes(
    addr: SocketAddr,
    mut head: Vec<u8>,
    body: RawBody,
    limit: std::time::Duration,
) -> Result<RawAnswer, String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut rd, mut wr) = stream.into_split();
    let sent = Arc::new(AtomicU64::new(0));
    let is_head = head.starts_with(b"HEAD ");
    head.extend(format!("\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes());
    let counter = sent.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(&head).await?;
        let fill = vec![body.fill; 64 * 1024];
        // What may still be written before the body stalls.
        let mut budget = body.stall_after.unwrap_or(u64::MAX);
        let take = |budget: &mut u64, n: u64| {
            let n = n.min(*budget);
            *budget -= n;
            n as usize
        };
        let n = take(&mut budget, body.prefix.len() as u64);
        wr.write_all(&body.prefix[..n]).await?;
        counter.fetch_add(n as u64, Ordering::Relaxed);
        let mut left = body.fill_len;
        while left > 0 && budget > 0 {
            let n = take(&mut budget, left.min(fill.len() as u64));
            wr.write_all(&fill[..n]).await?;
            counter.fetch_add(n as u64, Ordering::Relaxed);
            left -= n as u64;
        }
        let n = take(&mut budget, body.suffix.len() as u64);
        wr.write_all(&body.suffix[..n]).await?;
        counter.fetch_add(n as u64, Ordering::Relaxed);
        wr.flush().await?;
        // Keep the connection open: a stalled body never ends, a complete one waits here.
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(wr)
    });
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let text = String::from_utf8_lossy(&buf[..end]).into_owned();
                let mut lines = text.split("\r\n");
                let status = lines
                    .next()
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|s| s.parse::<u16>().ok())
                    .ok_or_else(|| format!("bad status line in {text:?}"))?;
                let headers: Vec<(String, String)> = lines
                    .filter_map(|l| l.split_once(':'))
                    .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
                    .collect();
                let len = headers
                    .iter()
                    .find(|(n, _)| n == "content-length")
                    .and_then(|(_, v)| v.parse::<usize>().ok());
                let start = end + 4;
                // No body after these, whatever the headers say.
                let len = if is_head || status == 204 || status == 304 {
                    Some(0)
                } else {
                    len
                };
                let mut cut = None;
                loop {
                    let complete = match len {
                        Some(len) => buf.len() - start >= len,
                        None => false,
                    };
                    if complete {
                        break;
                    }
                    match rd.read(&mut chunk).await {
                        Ok(0) if len.is_some() => {
                            cut = Some("connection closed inside the answer's body".to_owned());
                            break;
                        }
                        Ok(0) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        Err(e) => {
                            cut = Some(format!("read body: {e}"));
                            break;
                        }
                    }
                }
                let chunked = headers
                    .iter()
                    .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
                let body = if chunked && cut.is_none() {
                    dechunk(&buf[start..])?
                } else {
                    buf[start..].to_vec()
                };
                return Ok(RawAnswer {
                    status,
                    headers,
                    body,
                    sent: 0,
                    cut,
                });
            }
            let n = rd
                .read(&mut chunk)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err(format!(
                    "connection closed before an answer ({} bytes read)",
                    buf.len()
                ));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let outcome = tokio::time::timeout(limit, read).await;
    writer.abort();
    let mut answer = outcome.map_err(|_| {
        format!(
            "no answer within {limit:?} ({} body bytes sent)",
            sent.load(Ordering::Relaxed)
        )
    })??;
    answer.sent = sent.load(Ordering::Relaxed);
    Ok(answer)
}

/// The payload of a complete `transfer-encoding: chunked` body.
fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunked body cut off")?;
        let size = String::from_utf8_lossy(&raw[..eol]);
        let size = size.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size, 16).map_err(|e| format!("chunk size {size:?}: {e}"))?;
        raw = &raw[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = raw.get(..size).ok_or("chunked body cut off")?;
        out.extend_from_slice(chunk);
        raw = raw.get(size + 2..).ok_or("chunked body cut off")?;
    }
}

/// Resident memory of process `pid` in KiB (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// CPU time process `pid` has used (user + system), in clock ticks (10 ms here).
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    // The fields after the command name (which may hold spaces, in parentheses).
    let rest = &stat[stat.rfind(')').expect("(comm) in /proc/<pid>/stat") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Samples a process's resident memory every 5 ms until dropped; `peak_kib` is the largest.
pub struct RssSampler {
    peak: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        use std::sync::atomic::Ordering;
        let peak = Arc::new(std::sync::atomic::AtomicU64::new(rss_kib(pid)));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    if let Some(kib) = status
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.split_whitespace().next())
                        .and_then(|v| v.parse::<u64>().ok())
                    {
                        p.fetch_max(kib, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        Self {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling; the peak resident memory seen, in KiB.
    pub fn finish(mut self) -> u64 {
        self.stop_thread();
        self.peak.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// A real `budgetd serve` process on SQLite in a fresh data directory, on loopback ports.
pub struct ServerProcess {
    pub child: std::process::Child,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub data_dir: std::path::PathBuf,
    /// The data directory when this process made it (removed with it).
    _own_dir: Option<tempfile::TempDir>,
}

impl ServerProcess {
    /// Starts `budgetd serve`; with `wrapper` (e.g. `["strace", …, "--"]`) the binary runs
    /// under it. Blocks until the server printed its addresses.
    pub fn start(wrapper: &[String]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Self::start_in(dir.path(), wrapper);
        server._own_dir = Some(dir);
        server
    }

    /// `budgetd serve` with `args` added (e.g. `--demo`).
    pub fn start_with_args(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut server = Self::launch(dir.path(), &[], args, &[]);
        server._own_dir = Some(dir);
        server
    }

    /// [`ServerProcess::start`] on a data directory the caller keeps (e.g. across restarts).
    pub fn start_in(data_dir: &std::path::Path, wrapper: &[String]) -> Self {
        Self::launch(data_dir, wrapper, &[], &[])
    }

    /// `budgetd serve` on a data directory the caller keeps, with `args` added and `env` set.
    pub fn start_in_with(data_dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::launch(data_dir, &[], args, env)
    }

    fn launch(
        data_dir: &std::path::Path,
        wrapper: &[String],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        use std::io::{BufRead as _, BufReader};
        use std::process::{Command, Stdio};
        let bin = env!("CARGO_BIN_EXE_budgetd");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("BUDGETD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("budgetd starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut http = None;
        let grpc = loop {
            let line = lines
                .next()
                .expect("budgetd printed its HTTP and gRPC addresses")
                .unwrap();
            if let Some(rest) = line.strip_prefix("budgetd: HTTP API on ") {
                let rest = rest.trim_end_matches("/api/v1");
                let rest = rest
                    .strip_prefix("http://")
                    .or_else(|| rest.strip_prefix("https://"))
                    .unwrap_or(rest);
                http = Some(rest.parse().expect("an address"));
            }
            if let Some(rest) = line.strip_prefix("budgetd: gRPC (budget.v1.BudgetControl) on ") {
                break rest.parse().expect("an address");
            }
        };
        let http = http.expect("the HTTP address is printed before the gRPC one");
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            http,
            grpc,
            data_dir: data_dir.to_owned(),
            _own_dir: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.http, path)
    }

    /// Resident memory of the server process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }

    /// SIGTERM, then wait for the process to end.
    pub fn stop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A file under `tests/fixtures/`.
pub fn fixture(path: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A `multipart/form-data` body with one part per `(name, bytes)` (a file part, except `map`).
pub fn multipart_body(boundary: &str, parts: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, bytes) in parts {
        let disposition = if name == "map" {
            format!("form-data; name=\"{name}\"")
        } else {
            format!("form-data; name=\"{name}\"; filename=\"{name}.out\"")
        };
        body.extend(
            format!("--{boundary}\r\ncontent-disposition: {disposition}\r\n\r\n").as_bytes(),
        );
        body.extend(bytes);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").as_bytes());
    body
}
