//! SPEC §7 bounds on what a client can hold, through the real HTTP stack and the real binary:
//! HTTP connection limit and header-read, idle, body-read and request timeouts (issue 10,
//! item 5), and the admin token — weak or placeholder tokens refused, a generated one written
//! to a 0600 file, never to stdout (item 13).

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
use budgetd::config::HttpLimits;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_yaml_ng::Value as Yaml;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::helpers::{
    raw_request, settings_for, spawn_app_on, Backend, RawBody, TestApp, TestDb, ADMIN_TOKEN,
};

pub(crate) async fn app_with(limits: HttpLimits) -> TestApp {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    spawn_app_on(db, move |url| budgetd::Settings {
        http_limits: limits,
        ..settings_for(url)
    })
    .await
}

/// Reads (and drops) whatever the server sends until it closes the connection (EOF or
/// reset); how long that took, or `None` when it is still open after `limit`.
pub(crate) async fn closed_within<R: AsyncRead + Unpin>(
    rd: &mut R,
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((start + limit).into(), rd.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Reads one HTTP/1.1 answer's head; its status code.
async fn read_status<R: AsyncRead + Unpin>(rd: &mut R) -> Result<u16, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = rd
            .read(&mut chunk)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!(
                "closed before an answer: {:?}",
                String::from_utf8_lossy(&buf)
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad answer {text:?}"))
}

/// Sends `body` in `pieces` with `gap` between them (every gap shorter than the body-read
/// timeout, the whole longer than the request timeout); the answer's status and when it came.
pub(crate) async fn trickle(
    addr: std::net::SocketAddr,
    head: &str,
    body: &[u8],
    pieces: usize,
    gap: Duration,
) -> (u16, Duration) {
    let start = Instant::now();
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = format!("{head}\r\ncontent-length: {}\r\n\r\n", body.len());
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (mut rd, mut wr) = tcp.into_split();
    let body = body.to_vec();
    let writer = tokio::spawn(async move {
        for piece in body.chunks(body.len().div_ceil(pieces)) {
            tokio::time::sleep(gap).await;
            if wr.write_all(piece).await.is_err() {
                break;
            }
        }
        std::future::pending::<()>().await;
        drop(wr);
    });
    let status = tokio::time::timeout(Duration::from_secs(20), read_status(&mut rd))
        .await
        .expect("an answer within 20 s")
        .unwrap();
    writer.abort();
    (status, start.elapsed())
}

/// Silent connections, slowloris headers and a kept-alive connection waiting for its next
/// request are all closed after the header-read timeout (1 s here; the idle timeout is 30 s,
/// so it is the header-read timer that closes the kept-alive one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_slow_header_and_kept_alive_http1_connections_are_closed() {
    let app = app_with(HttpLimits {
        header_read_timeout_secs: 1,
        idle_timeout_secs: 30,
        ..HttpLimits::default()
    })
    .await;
    let limit = Duration::from_secs(6);
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(app.addr).await.unwrap();
        tasks.push(tokio::spawn(async move {
            ("silent", closed_within(&mut tcp, limit).await)
        }));
    }
    for _ in 0..20 {
        let tcp = TcpStream::connect(app.addr).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let (mut rd, mut wr) = tcp.into_split();
            let writer = tokio::spawn(async move {
                let _ = wr.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n").await;
                loop {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if wr.write_all(b"x-slow: 1\r\n").await.is_err() {
                        break;
                    }
                }
            });
            let closed = closed_within(&mut rd, limit).await;
            writer.abort();
            ("slowloris", closed)
        }));
    }
    let mut tcp = TcpStream::connect(app.addr).await.unwrap();
    tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("\"ok\"") {
        let n = tcp.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the answer");
        seen.extend_from_slice(&chunk[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
    let kept_alive = closed_within(&mut tcp, limit).await;
    assert!(
        kept_alive.is_some_and(|d| d >= Duration::from_millis(700)),
        "a kept-alive connection was closed after {kept_alive:?}, expected ~1 s"
    );
    for task in tasks {
        let (kind, closed) = task.await.unwrap();
        let closed =
            closed.unwrap_or_else(|| panic!("a {kind} connection is open after {limit:?}"));
        assert!(
            closed >= Duration::from_millis(700),
            "a {kind} connection was closed after {closed:?}, before the 1 s timeout"
        );
    }
    app.stop().await;
}

/// An HTTP/2 connection (prior knowledge, as a client answering pings would keep it) is shut
/// down once it has had no request in flight for the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connection_is_closed() {
    let app = app_with(HttpLimits {
        header_read_timeout_secs: 1,
        idle_timeout_secs: 2,
        ..HttpLimits::default()
    })
    .await;
    let io = TokioIo::new(TcpStream::connect(app.addr).await.unwrap());
    let (mut sender, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
        .await
        .unwrap();
    let driver = tokio::spawn(conn);
    let req = hyper::Request::get(format!("http://{}/healthz", app.addr))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    resp.into_body().collect().await.unwrap();
    let idle = Instant::now();
    tokio::time::timeout(Duration::from_secs(8), driver)
        .await
        .expect("the idle HTTP/2 connection is closed within 8 s")
        .unwrap()
        .unwrap();
    let after = idle.elapsed();
    assert!(
        after >= Duration::from_millis(1500),
        "closed after {after:?}, before the 2 s idle timeout"
    );
    app.stop().await;
}

/// A body that stops arriving is aborted after the body-read timeout, an upload or not; a
/// slow but steady upload is not (uploads have no total timeout); any other request that
/// takes longer than the request timeout answers 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_are_aborted_and_only_uploads_may_take_long() {
    let app = app_with(HttpLimits {
        header_read_timeout_secs: 5,
        body_read_timeout_secs: 1,
        request_timeout_secs: 2,
        ..HttpLimits::default()
    })
    .await;
    let uploader = app.token("uploader", "uma").await;
    app.apply_topology(ADMIN_TOKEN, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let head = |method: &str, path: &str| {
        format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {uploader}\r\n\
             content-type: application/json"
        )
    };
    let stalled = |head: String| {
        let addr = app.addr;
        async move {
            let start = Instant::now();
            let body = RawBody {
                prefix: b"{\"a\":\"".to_vec(),
                fill: b'x',
                fill_len: 100_000,
                suffix: b"\"}".to_vec(),
                stall_after: Some(64),
            };
            let answer = raw_request(addr, &head, body, Duration::from_secs(8)).await;
            (answer, start.elapsed())
        }
    };
    let gap = Duration::from_millis(400);
    let (upload, topology) = (
        head("POST", "/api/v1/chains/checkout/runs"),
        head("PUT", "/api/v1/chains/checkout/topology"),
    );
    let (stalled_upload, stalled_put, slow_upload, slow_put) = tokio::join!(
        stalled(upload.clone()),
        stalled(topology.clone()),
        trickle(app.addr, &upload, CHECKOUT_RUN_A.as_bytes(), 8, gap),
        trickle(app.addr, &topology, CHECKOUT_TOPOLOGY.as_bytes(), 8, gap),
    );
    for (what, (answer, took)) in [("upload", stalled_upload), ("topology", stalled_put)] {
        let answer = answer.unwrap_or_else(|e| panic!("stalled {what}: {e}"));
        assert!(
            (400..500).contains(&answer.status),
            "stalled {what}: {answer:?}"
        );
        assert!(
            took >= Duration::from_millis(700) && took < Duration::from_secs(6),
            "stalled {what} aborted after {took:?}, expected ~1 s"
        );
    }
    let (status, took) = slow_upload;
    assert_eq!(status, 201, "a slow upload ({took:?}) is not cut short");
    assert!(took > Duration::from_secs(2), "{took:?}");
    let (status, took) = slow_put;
    assert_eq!(
        status, 503,
        "a slow topology ({took:?}) hits the request timeout"
    );
    assert!(
        took >= Duration::from_millis(1700) && took < Duration::from_secs(6),
        "{took:?}"
    );
    app.stop().await;
}

/// At the connection limit budgetd accepts nothing more: a third connection is not answered
/// until one of the first two closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_wait_for_a_free_slot() {
    let app = app_with(HttpLimits {
        max_connections: 2,
        header_read_timeout_secs: 20,
        idle_timeout_secs: 30,
        ..HttpLimits::default()
    })
    .await;
    let first = TcpStream::connect(app.addr).await.unwrap();
    let _second = TcpStream::connect(app.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut third = TcpStream::connect(app.addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut byte = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(800), third.read(&mut byte)).await;
    assert!(
        early.is_err(),
        "the third connection was served at the limit: {early:?}"
    );
    drop(first);
    let status = tokio::time::timeout(Duration::from_secs(5), read_status(&mut third))
        .await
        .expect("served once a slot is free")
        .unwrap();
    assert_eq!(status, 200);
    app.stop().await;
}

/// Stopping the server lets a request in flight finish (here a slow upload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_lets_in_flight_requests_finish() {
    let app = app_with(HttpLimits {
        body_read_timeout_secs: 2,
        ..HttpLimits::default()
    })
    .await;
    let uploader = app.token("uploader", "uma").await;
    app.apply_topology(ADMIN_TOKEN, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let head = format!(
        "POST /api/v1/chains/checkout/runs HTTP/1.1\r\nhost: x\r\n\
         authorization: Bearer {uploader}\r\ncontent-type: application/json"
    );
    let addr = app.addr;
    let upload = trickle(
        addr,
        &head,
        CHECKOUT_RUN_A.as_bytes(),
        5,
        Duration::from_millis(300),
    );
    let stop = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        app.stop().await;
        started.elapsed()
    };
    let ((status, _), stopping) = tokio::join!(upload, stop);
    assert_eq!(status, 201, "the upload in flight finished");
    assert!(stopping < Duration::from_secs(10), "{stopping:?}");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}

// ---- Item 13: the admin token ----

/// A `budgetd serve` process on a data directory, up to the point it printed its address.
struct Serve {
    child: Child,
    /// Standard output up to and including the HTTP address line.
    stdout: Vec<String>,
    http: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// Starts `budgetd serve`; `Err(stderr)` when it exits before printing its address.
fn serve(data_dir: &Path, admin_token: Option<&str>) -> Result<Serve, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_budgetd"));
    cmd.args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(data_dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = admin_token {
        cmd.env("BUDGETD_ADMIN_TOKEN", token);
    }
    let mut child = cmd.spawn().expect("budgetd starts");
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stdout = Vec::new();
    let http = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.wait();
            return Err(stderr.join().unwrap());
        };
        stdout.push(line.clone());
        if let Some(rest) = line.strip_prefix("budgetd: HTTP API on ") {
            break rest.trim_end_matches("/api/v1").to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Ok(Serve {
        child,
        stdout,
        http,
        stderr: Some(stderr),
    })
}

impl Serve {
    /// SIGTERM, wait; everything it wrote to standard error.
    fn stop(mut self) -> String {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        self.stderr.take().unwrap().join().unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn whoami(base: &str, token: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("{base}/api/v1/whoami"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// The deploy manifests' old sample values, a short, a one-letter and an empty token: the
/// server refuses each before touching the store, says how to make a good one, never echoes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weak_and_placeholder_admin_tokens_stop_the_start() {
    for token in [
        "change-me-admin-token",
        "replace-with-a-long-random-token",
        "test-admin-token-0123456789",
        "please-change-me-before-production-use",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_owned();
        let t = token.to_owned();
        let started = tokio::task::spawn_blocking(move || serve(&data, Some(&t)))
            .await
            .unwrap();
        let stderr = match started {
            Ok(s) => panic!("budgetd started with admin token {token:?}: {:?}", s.stdout),
            Err(stderr) => stderr,
        };
        assert!(
            stderr.contains("BUDGETD_ADMIN_TOKEN") && stderr.contains("refused"),
            "{token:?}: {stderr}"
        );
        assert!(stderr.contains("openssl rand -hex 32"), "{stderr}");
        assert!(
            token.is_empty() || !stderr.contains(token),
            "the token is echoed: {stderr}"
        );
        assert!(
            !dir.path().join("budgetd.db").exists(),
            "refused before the store is opened"
        );
    }
}

/// Without a configured token, a new store's admin token goes to `{data_dir}/admin-token`
/// (0600) and only the path is printed; a restart neither prints nor rewrites it; a store
/// without an admin token next to an existing file is refused rather than the file replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_admin_token_goes_to_a_private_file_not_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let data: PathBuf = dir.path().join("data");
    let file = std::fs::canonicalize(dir.path())
        .unwrap()
        .join("data")
        .join("admin-token");

    let d = data.clone();
    let first = tokio::task::spawn_blocking(move || serve(&d, None))
        .await
        .unwrap()
        .expect("budgetd starts");
    let announced = format!("budgetd: admin token written to {}", file.display());
    assert!(
        first.stdout.iter().any(|l| l == &announced),
        "{announced:?} not in {:?}",
        first.stdout
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let written = std::fs::read_to_string(&file).unwrap();
    let token = written.trim_end().to_owned();
    assert!(budgetd::app::admin_token_weakness(&token).is_none());
    assert_eq!(whoami(&first.http, &token).await, 200);
    assert!(
        first.stdout.iter().all(|l| !l.contains(&token)),
        "{:?}",
        first.stdout
    );
    let stderr = tokio::task::spawn_blocking(move || first.stop())
        .await
        .unwrap();
    assert!(!stderr.contains(&token), "the token is logged: {stderr}");

    // A restart: the store has its admin; nothing printed, the file untouched.
    let d = data.clone();
    let second = tokio::task::spawn_blocking(move || serve(&d, None))
        .await
        .unwrap()
        .expect("budgetd restarts");
    assert!(
        second.stdout.iter().all(|l| !l.contains("admin token")),
        "{:?}",
        second.stdout
    );
    assert_eq!(whoami(&second.http, &token).await, 200);
    tokio::task::spawn_blocking(move || second.stop())
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);

    // A new store next to the old file: refused, the file kept.
    for entry in std::fs::read_dir(&data).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("budgetd.db"))
        {
            std::fs::remove_file(path).unwrap();
        }
    }
    let d = data.clone();
    let stderr = match tokio::task::spawn_blocking(move || serve(&d, None))
        .await
        .unwrap()
    {
        Ok(s) => panic!("started over an existing token file: {:?}", s.stdout),
        Err(stderr) => stderr,
    };
    assert!(stderr.contains("already exists"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
}

/// The deploy manifests carry no admin token budgetd would accept: compose requires one from
/// the environment, the Kubernetes Secret ships it empty (refused at start), and both say how
/// to generate one.
#[test]
fn deploy_manifests_ship_no_usable_admin_token() {
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");

    let text = std::fs::read_to_string(deploy.join("compose.yaml")).unwrap();
    assert!(text.contains("openssl rand -hex 32"), "compose.yaml");
    let mut compose: Yaml = serde_yaml_ng::from_str(&text).unwrap();
    compose.apply_merge().unwrap();
    let mut seen = 0;
    for (name, service) in compose["services"].as_mapping().unwrap() {
        if let Some(value) = service["environment"]["BUDGETD_ADMIN_TOKEN"].as_str() {
            seen += 1;
            assert!(
                value.starts_with("${BUDGETD_ADMIN_TOKEN:?"),
                "{name:?} sets BUDGETD_ADMIN_TOKEN to a literal: {value:?}"
            );
        }
    }
    assert_eq!(seen, 2, "both replicas take the admin token");

    let text = std::fs::read_to_string(deploy.join("k8s/budgetd.yaml")).unwrap();
    assert!(text.contains("openssl rand -hex 32"), "k8s/budgetd.yaml");
    let mut secrets = 0;
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let doc = <Yaml as serde::Deserialize>::deserialize(doc).unwrap();
        if doc["kind"].as_str() != Some("Secret") {
            continue;
        }
        if let Some(value) = doc["stringData"]["BUDGETD_ADMIN_TOKEN"].as_str() {
            secrets += 1;
            assert!(
                budgetd::app::admin_token_weakness(value).is_some(),
                "the Secret ships a usable admin token"
            );
        }
    }
    assert_eq!(secrets, 1, "the Secret lists BUDGETD_ADMIN_TOKEN");
}
