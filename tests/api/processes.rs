//! Two real budgetd processes on one PostgreSQL database and one S3-compatible store: an agent
//! streaming from replica B receives an approval made on replica A; when B stops, the agent
//! fails over to A and receives the next publication; every archive item is uploaded exactly once.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use budget_agent::{Agent, AgentConfig};
use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY};
use serde_json::{json, Value};

use crate::helpers::{Backend, TestDb, ADMIN_TOKEN};
use crate::s3::{S3Server, ACCESS_KEY, SECRET_KEY};

/// A `budgetd serve` child process and the addresses it printed.
struct Replica {
    child: Child,
    http: String,
    grpc: String,
}

impl Replica {
    fn start(name: &str, db_url: &str, s3_endpoint: &str, bucket: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_budgetd"))
            .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("BUDGETD_DATABASE_URL", db_url)
            .env("BUDGETD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("BUDGETD_REPLICA", name)
            .env("BUDGETD_ARCHIVE_URL", format!("s3://{bucket}/gov/bench"))
            .env("AWS_ENDPOINT_URL", s3_endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .env("AWS_CONFIG_FILE", "/nonexistent/budgetd-test")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/budgetd-test")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("budgetd starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut http, mut grpc) = (None, None);
        while http.is_none() || grpc.is_none() {
            let line = lines
                .next()
                .expect("budgetd printed its addresses")
                .unwrap();
            if let Some(rest) = line.strip_prefix("budgetd: HTTP API on ") {
                http = Some(rest.trim_end_matches("/api/v1").to_owned());
            } else if let Some(rest) =
                line.strip_prefix("budgetd: gRPC (budget.v1.BudgetControl) on ")
            {
                grpc = Some(format!("http://{rest}"));
            }
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            http: http.unwrap(),
            grpc: grpc.unwrap(),
        }
    }

    /// SIGTERM, then wait: a graceful stop that ends the Watch streams.
    fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http.request(method, &url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert!(status.is_success(), "{url}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_failover_and_archive_exactly_once() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let s3 = S3Server::start(
        Arc::new(tempfile::tempdir().unwrap()),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await;
    s3.create_bucket("replicas");
    let endpoint = s3.endpoint();
    let (url, ep) = (db.url.clone(), endpoint.clone());
    let a = tokio::task::spawn_blocking(move || Replica::start("replica-a", &url, &ep, "replicas"))
        .await
        .unwrap();
    let (url, ep) = (db.url.clone(), endpoint.clone());
    let mut b =
        tokio::task::spawn_blocking(move || Replica::start("replica-b", &url, &ep, "replicas"))
            .await
            .unwrap();

    let http = reqwest::Client::new();
    let api = |base: &str, path: &str| format!("{base}/api/v1{path}");
    let token = |role: &str, name: &str| {
        let (http, url) = (http.clone(), api(&a.http, "/tokens"));
        let body = json!({"role": role, "name": name});
        async move {
            call(&http, reqwest::Method::POST, url, ADMIN_TOKEN, Some(body)).await["token"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let (uploader, approver, agent_token) = (
        token("uploader", "uma").await,
        token("approver", "abe").await,
        token("agent", "order-1").await,
    );
    let topology: Value = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
    call(
        &http,
        reqwest::Method::PUT,
        api(&a.http, "/chains/checkout/topology"),
        &uploader,
        Some(topology),
    )
    .await;

    // The agent streams from B, with A as its fallback.
    let cache = tempfile::tempdir().unwrap();
    let mut config = AgentConfig::new(b.grpc.clone(), agent_token, "order-1", "order");
    config.fallback_endpoints = vec![a.grpc.clone()];
    config.cache_path = Some(cache.path().join("budgets.json"));
    config.connect_timeout = Duration::from_secs(2);
    config.first_config_timeout = Duration::from_secs(30);
    let upload_and_approve = |run: &'static str| {
        let (http, a_http) = (http.clone(), a.http.clone());
        let (uploader, approver) = (uploader.clone(), approver.clone());
        async move {
            let up = call(
                &http,
                reqwest::Method::POST,
                format!("{a_http}/api/v1/chains/checkout/runs"),
                &uploader,
                Some(serde_json::from_str(run).unwrap()),
            )
            .await;
            let id = up["baseline_id"].as_str().unwrap().to_owned();
            let v = call(
                &http,
                reqwest::Method::POST,
                format!("{a_http}/api/v1/baselines/{id}/approve"),
                &approver,
                Some(json!({})),
            )
            .await;
            (id, v["revision"].as_i64().unwrap())
        }
    };
    // Start the agent first (it waits for the first config), then approve on A.
    let starting = tokio::spawn(Agent::start(config));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (first_id, rev1) = upload_and_approve(CHECKOUT_RUN_A).await;
    let agent = starting
        .await
        .unwrap()
        .expect("agent starts from replica B");
    assert_eq!(agent.revision(), rev1);
    assert_eq!(agent.snapshot().chains["checkout"].baseline_id, first_id);
    // B's fleet status reaches the shared database within its flush interval.
    let mut on_b = false;
    for _ in 0..50 {
        let fleet = call(
            &http,
            reqwest::Method::GET,
            api(&a.http, "/agents"),
            &uploader,
            None,
        )
        .await;
        let agents = fleet["agents"].as_array().unwrap().clone();
        if agents
            .iter()
            .any(|x| x["agent_id"] == "order-1" && x["replica"] == "replica-b")
        {
            on_b = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(on_b, "the agent shows as streaming from replica B");

    // B stops: the agent fails over to A and receives the next publication made on A.
    tokio::task::spawn_blocking(move || {
        b.stop();
        b
    })
    .await
    .unwrap();
    let (second_id, rev2) = upload_and_approve(CHECKOUT_RUN_C).await;
    let mut rx = agent.subscribe();
    tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|s| s.revision == rev2))
        .await
        .expect("failed over to A")
        .unwrap();
    assert_eq!(agent.snapshot().chains["checkout"].baseline_id, second_id);
    let mut on_a = false;
    for _ in 0..50 {
        let fleet = call(
            &http,
            reqwest::Method::GET,
            api(&a.http, "/agents"),
            &uploader,
            None,
        )
        .await;
        if fleet["agents"].as_array().unwrap().iter().any(|x| {
            x["agent_id"] == "order-1" && x["replica"] == "replica-a" && x["acked"] == rev2
        }) {
            on_a = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        on_a,
        "the agent's status shows replica A and its ACK of revision {rev2}"
    );

    // The archive: every item uploaded exactly once (attempts == 1, nothing pending).
    let store = budgetd::store::connect(&db.url).await.unwrap();
    let mut items = Vec::new();
    for _ in 0..100 {
        items.clear();
        for id in [&first_id, &second_id] {
            items.extend(store.archive_items(id).await.unwrap());
        }
        if items.iter().all(|i| i.state != "pending") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!items.is_empty());
    for i in &items {
        assert_ne!(i.state, "pending", "{i:?}");
        if i.state == "done" {
            assert_eq!(i.attempts, 1, "uploaded more than once: {i:?}");
        }
    }
    agent.shutdown();
    drop(a);
    let _ = s3.stop().await;
}

/// `budgetd serve | head -1`: stdout's reader is gone before the banner is printed, and the
/// server serves all the same (before, the banner's first line panicked on the closed pipe).
#[test]
fn a_closed_stdout_does_not_stop_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string()
    };
    let (http, grpc) = (free(), free());
    let mut child = Command::new(env!("CARGO_BIN_EXE_budgetd"))
        .args(["serve", "--http", &http, "--grpc", &grpc, "--demo"])
        .arg("--data-dir")
        .arg(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("BUDGETD_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("budgetd starts");
    drop(child.stdout.take());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut serving = false;
    while !serving && std::time::Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        serving = std::net::TcpStream::connect(&http).is_ok_and(|mut tcp| {
            use std::io::{Read as _, Write as _};
            let _ = tcp.write_all(b"GET /healthz HTTP/1.0\r\n\r\n");
            let mut answer = String::new();
            let _ = tcp.read_to_string(&mut answer);
            answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200")
        });
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.try_wait().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, None, "budgetd exited with its stdout closed");
    assert!(serving, "budgetd never answered /healthz");
}

/// The server gives memory it has freed back to the system while it idles: it runs jemalloc
/// with one background thread that does so (glibc's allocator kept a burst's memory resident,
/// 166–204 MiB after 10,000 agents' Reports; docs/benchmarks.md).
#[test]
fn the_server_runs_one_thread_that_gives_freed_memory_back() {
    let server = crate::helpers::ServerProcess::start(&[]);
    let tasks = std::fs::read_dir(format!("/proc/{}/task", server.pid())).unwrap();
    let names: Vec<String> = tasks
        .map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).unwrap_or_default())
        .map(|name| name.trim().to_owned())
        .collect();
    let purgers = names.iter().filter(|n| *n == "jemalloc_bg_thd").count();
    drop(server);
    assert_eq!(purgers, 1, "threads: {names:?}");
}
