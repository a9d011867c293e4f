//! The archive on a real S3-compatible server (s3s-fs, in process, over real HTTP with SigV4):
//! keys and bytes, outage and recovery, restarts, and two workers never uploading one item.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use budget_core::example::{CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY};
use budgetd::archive::s3::S3Archive;
use budgetd::archive::worker::Archiver;
use budgetd::archive::Archive;
use budgetd::App;
use serde_json::Value;
use sha2::Digest;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::helpers::draft_a;
use crate::helpers::{example, settings_for, spawn_app_on, Backend, TestApp, TestDb};

pub const ACCESS_KEY: &str = "budgetd-test";
pub const SECRET_KEY: &str = "budgetd-test-secret-0123456789";

/// An s3s-fs server on a loopback port; `stop` closes the listener and every connection.
pub struct S3Server {
    pub addr: SocketAddr,
    pub root: Arc<tempfile::TempDir>,
    tasks: JoinSet<()>,
}

impl S3Server {
    pub async fn start(root: Arc<tempfile::TempDir>, addr: SocketAddr) -> Self {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fs = s3s_fs::FileSystem::new(root.path()).unwrap();
        let mut builder = s3s::service::S3ServiceBuilder::new(fs);
        builder.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let service = builder.build();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    break;
                };
                let service = service.clone();
                conns.spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, service)
                    .await;
                });
            }
        });
        Self { addr, root, tasks }
    }

    pub fn create_bucket(&self, bucket: &str) {
        std::fs::create_dir_all(self.root.path().join(bucket)).unwrap();
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn stop(mut self) -> (Arc<tempfile::TempDir>, SocketAddr) {
        self.tasks.shutdown().await;
        (self.root, self.addr)
    }
}

fn sdk_config(endpoint: &str, secret: &str) -> aws_config::SdkConfig {
    aws_config::SdkConfig::builder()
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_s3::config::SharedCredentialsProvider::new(
            aws_sdk_s3::config::Credentials::new(ACCESS_KEY, secret, None, None, "test"),
        ))
        .behavior_version(aws_config::BehaviorVersion::latest())
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(3))
                .connect_timeout(Duration::from_secs(1))
                .build(),
        )
        .build()
}

/// One shared server for the tests that go through `s3://` URLs and the AWS environment.
fn shared_server() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let root = Arc::new(tempfile::tempdir().unwrap());
                let server = S3Server::start(root, "127.0.0.1:0".parse().unwrap()).await;
                tx.send((server.endpoint(), server.root.path().to_path_buf()))
                    .unwrap();
                let _keep = server;
                std::future::pending::<()>().await;
            });
        });
        let (endpoint, _) = rx.recv().unwrap();
        // The standard AWS environment, as an operator would set it.
        #[allow(clippy::disallowed_methods)]
        for (k, v) in [
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
            ("AWS_CONFIG_FILE", "/nonexistent/budgetd-test"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/budgetd-test"),
        ] {
            std::env::set_var(k, v);
        }
        endpoint
    })
}

async fn create_bucket_via_sdk(bucket: &str) {
    let endpoint = shared_server();
    let client = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk_config(endpoint, SECRET_KEY))
            .force_path_style(true)
            .build(),
    );
    client.create_bucket().bucket(bucket).send().await.unwrap();
}

fn sha(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

async fn wait_archived(app: &TestApp, id: &str) -> Value {
    for _ in 0..200 {
        let s = app
            .get(
                &format!("/api/v1/baselines/{id}/archive"),
                crate::helpers::ADMIN_TOKEN,
            )
            .await
            .expect(200)
            .json();
        if s["state"] == "archived" {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("baseline {id} was not archived in time");
}

async fn get_object(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
) -> Option<(Vec<u8>, Option<String>, Option<String>)> {
    let out = match client.get_object().bucket(bucket).key(key).send().await {
        Ok(out) => out,
        Err(e) => {
            eprintln!(
                "get_object {key}: {}",
                aws_sdk_s3::error::DisplayErrorContext(&e)
            );
            return None;
        }
    };
    let ct = out.content_type().map(str::to_owned);
    let meta = out.metadata().and_then(|m| m.get("sha256").cloned());
    Some((
        out.body.collect().await.unwrap().into_bytes().to_vec(),
        ct,
        meta,
    ))
}

/// `s3://bucket/prefix` through the AWS environment: keys, bytes, content type, SHA-256.
async fn s3_keys_and_bytes(backend: Backend) {
    let endpoint = shared_server().to_owned();
    let bucket = format!("archive-{}", hex::encode(rand::random::<[u8; 4]>()));
    create_bucket_via_sdk(&bucket).await;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let url = format!("s3://{bucket}/gov/bench");
    let app = spawn_app_on(db, |u| {
        let mut s = settings_for(u);
        s.archive_url = Some(url.clone());
        s
    })
    .await;
    let p = app.people().await;
    let id = draft_a(&app, &p).await;
    let draft_bytes = app
        .get(&format!("/api/v1/baselines/{id}"), &p.uploader)
        .await
        .expect(200)
        .body;
    let status = wait_archived(&app, &id).await;
    let date = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(status["key"], format!("gov/bench/{date}/{id}.json"));
    assert_eq!(status["sha256"], sha(&draft_bytes));

    let client = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk_config(&endpoint, SECRET_KEY))
            .force_path_style(true)
            .build(),
    );
    let (bytes, ct, meta) = get_object(&client, &bucket, &format!("gov/bench/{date}/{id}.json"))
        .await
        .unwrap();
    assert_eq!(
        bytes,
        draft_bytes.to_vec(),
        "the object is GET /baselines/{{id}} byte for byte"
    );
    assert_eq!(ct.as_deref(), Some("application/json"));
    assert_eq!(meta, Some(sha(&draft_bytes)));

    // Approval: the document is re-archived, and budget.json written with the same bytes.
    app.approve(&p.approver, &id).await.expect(200);
    let approved = app
        .get(&format!("/api/v1/baselines/{id}"), &p.uploader)
        .await
        .expect(200)
        .body;
    wait_archived(&app, &id).await;
    let mut budget = None;
    for _ in 0..100 {
        budget = get_object(&client, &bucket, &format!("gov/bench/{date}/budget.json")).await;
        if budget.as_ref().is_some_and(|b| b.0 == approved.to_vec()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(budget.unwrap().0, approved.to_vec());
    assert_eq!(
        get_object(&client, &bucket, &format!("gov/bench/{date}/{id}.json"))
            .await
            .unwrap()
            .0,
        approved.to_vec()
    );
    // Latest approval of the date wins.
    let c = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    let c_id = c["baseline_id"].as_str().unwrap().to_owned();
    app.approve(&p.approver, &c_id).await.expect(200);
    let c_bytes = app
        .get(&format!("/api/v1/baselines/{c_id}"), &p.uploader)
        .await
        .expect(200)
        .body;
    let mut latest = None;
    for _ in 0..100 {
        latest = get_object(&client, &bucket, &format!("gov/bench/{date}/budget.json")).await;
        if latest.as_ref().is_some_and(|b| b.0 == c_bytes.to_vec()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(latest.unwrap().0, c_bytes.to_vec());
    wait_archived(&app, &c_id).await;
    wait_archived(&app, &id).await;
    let verify = app
        .get(&format!("/api/v1/archive/verify?date={date}"), &p.approver)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (
            verify["checked"].as_u64(),
            verify["problems"].as_array().unwrap().len()
        ),
        (Some(2), 0),
        "{verify}"
    );
    // An object deleted behind our back is reported.
    client
        .delete_object()
        .bucket(&bucket)
        .key(format!("gov/bench/{date}/{c_id}.json"))
        .send()
        .await
        .unwrap();
    let verify = app
        .get("/api/v1/archive/verify", &p.approver)
        .await
        .expect(200)
        .json();
    assert_eq!(verify["problems"][0]["baseline_id"], c_id.as_str());
    assert_eq!(verify["problems"][0]["problem"], "missing");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_s3_keys_and_bytes() {
    s3_keys_and_bytes(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_s3_keys_and_bytes() {
    s3_keys_and_bytes(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_problems_are_reported_clearly_at_start() {
    let root = Arc::new(tempfile::tempdir().unwrap());
    let server = S3Server::start(root, "127.0.0.1:0".parse().unwrap()).await;
    server.create_bucket("exists");
    let missing = S3Archive::from_config(&sdk_config(&server.endpoint(), SECRET_KEY), "nope");
    let e = format!("{:#}", missing.check().await.unwrap_err());
    assert!(e.contains("does not exist"), "{e}");
    let bad = S3Archive::from_config(&sdk_config(&server.endpoint(), "wrong-secret"), "exists");
    let e = format!("{:#}", bad.check().await.unwrap_err());
    assert!(e.contains("denied") && e.contains("credentials"), "{e}");
    S3Archive::from_config(&sdk_config(&server.endpoint(), SECRET_KEY), "exists")
        .check()
        .await
        .unwrap();
    // Through the app: a start against a missing bucket fails with the reason…
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let archive = Arc::new(S3Archive::from_config(
        &sdk_config(&server.endpoint(), SECRET_KEY),
        "nope",
    ));
    let err = App::build_with_archive(settings_for(&db.url), archive, "gov/bench".into())
        .await
        .err()
        .unwrap();
    assert!(
        format!("{err:#}").contains("bucket \"nope\" does not exist"),
        "{err:#}"
    );
    // …but a store that is merely down does not stop budgetd from starting.
    let _ = server.stop().await;
    let down = Arc::new(S3Archive::from_config(
        &sdk_config("http://127.0.0.1:1", SECRET_KEY),
        "b",
    ));
    down.check().await.unwrap();
}

/// The object store goes down: baselines keep being created and approved; after a restart of
/// budgetd and the store's return, every document is archived; nothing lost.
async fn outage_and_restart(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let root = Arc::new(tempfile::tempdir().unwrap());
    let server = S3Server::start(root, "127.0.0.1:0".parse().unwrap()).await;
    server.create_bucket("budgets");
    let endpoint = server.endpoint();
    let archive: Arc<dyn Archive> = Arc::new(S3Archive::from_config(
        &sdk_config(&endpoint, SECRET_KEY),
        "budgets",
    ));
    let url = db.url.clone();
    let app = crate::helpers::spawn_app_with_archive(db, settings_for(&url), archive.clone()).await;
    let p = app.people().await;
    app.apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let (root, addr) = server.stop().await;

    // Down: create and approve anyway.
    let mut ids = Vec::new();
    let run = |p999: u32| {
        let mut r = example(budget_core::example::CHECKOUT_RUN_A);
        r["segments"][2]["p999_ms"] = p999.into();
        r
    };
    for (i, p999) in [300, 390, 300].into_iter().enumerate() {
        let up = app
            .upload(&p.uploader, "checkout", run(p999))
            .await
            .expect(201)
            .json();
        let id = up["baseline_id"].as_str().unwrap().to_owned();
        if i < 2 {
            app.approve(&p.approver, &id).await.expect(200);
        }
        ids.push(id);
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let status = app
        .get(
            &format!("/api/v1/baselines/{}/archive", ids[0]),
            &p.uploader,
        )
        .await
        .expect(200)
        .json();
    assert_ne!(status["state"], "archived");
    assert!(
        status["uploads"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["attempts"].as_i64() > Some(0)),
        "{status}"
    );
    let metrics = app.raw(app.http.get(app.url("/metrics"))).await.expect(200);
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    let pending: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("budgetd_archive_pending "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(pending >= 3.0, "{pending}");

    // budgetd restarts while the store is still down; then the store comes back.
    let app = app.pause().await.start_with_archive(archive.clone()).await;
    let server = S3Server::start(root, addr).await;
    for id in &ids {
        wait_archived_within(&app, id, Duration::from_secs(60)).await;
    }
    let date = chrono::Utc::now().format("%Y-%m-%d").to_string();
    for id in &ids {
        let doc = app
            .get(&format!("/api/v1/baselines/{id}"), &p.uploader)
            .await
            .expect(200)
            .body;
        let obj = archive
            .get(&format!("gov/bench/{date}/{id}.json"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(obj, doc.to_vec(), "{id}");
    }
    let live = app
        .get(&format!("/api/v1/baselines/{}", ids[1]), &p.uploader)
        .await
        .expect(200)
        .body;
    assert_eq!(
        archive
            .get(&format!("gov/bench/{date}/budget.json"))
            .await
            .unwrap()
            .unwrap(),
        live.to_vec()
    );
    app.stop().await;
    let _ = server.stop().await;
}

async fn wait_archived_within(app: &TestApp, id: &str, limit: Duration) {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        let s = app
            .get(
                &format!("/api/v1/baselines/{id}/archive"),
                crate::helpers::ADMIN_TOKEN,
            )
            .await
            .expect(200)
            .json();
        if s["state"] == "archived" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{id} not archived within {limit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_outage_and_restart() {
    outage_and_restart(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_and_restart() {
    outage_and_restart(Backend::Postgres).await;
}

/// Two workers (two replicas' worth) on one database: no item is uploaded twice at once.
async fn two_workers(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store_a = budgetd::store::connect(&db.url).await.unwrap();
    let store_b = budgetd::store::connect(&db.url).await.unwrap();
    let t: budget_core::Topology = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
    store_a.put_topology("checkout", &t, audit()).await.unwrap();

    let uploads = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let folder = tempfile::tempdir().unwrap();
    let counting = Arc::new(Counting {
        inner: budgetd::archive::fs::FsArchive::new(folder.path()),
        seen: uploads.clone(),
    });
    for i in 0..20 {
        let run = budget_core::example::CHECKOUT_RUN_A;
        let t: budget_core::Topology = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
        let data = serde_json::from_str::<budget_core::run::RunUpload>(run)
            .unwrap()
            .into_run(&t)
            .unwrap();
        let new_run = budgetd::store::NewRun {
            chain: "checkout".into(),
            topology_version: 1,
            format: "native".into(),
            tool: None,
            note: Some(format!("{i}")),
            source_sha256: "00".into(),
            source_size: 1,
            sources: vec![],
            mapping: None,
            data,
            uploaded_by: "uma".into(),
            uploaded_by_owner: "uma".into(),
            created_at: budgetd::service::now(),
        };
        let (run, _) = store_a
            .insert_run(new_run, None, None, audit())
            .await
            .unwrap();
        let c = budget_core::compute(&t, &run.data, &budget_core::distribution::NoDistributions)
            .unwrap();
        let doc = budget_core::baseline::BaselineDocument {
            id: String::new(),
            chain: "checkout".into(),
            state: budget_core::baseline::BaselineState::Draft,
            reason: budget_core::baseline::BaselineReason::Recompute,
            run_id: run.id.clone(),
            topology_version: 1,
            created_at: budgetd::service::now(),
            created_by: "uma".into(),
            entry_budget_ms: 800,
            breaker_window_ms: 5000,
            max_recovery: t.max_recovery,
            segments: c.segments,
            findings: c.findings,
            drift: vec![],
            drift_baseline_id: None,
            decision: None,
            superseded_by: None,
        };
        store_a.insert_baseline(doc, audit()).await.unwrap();
    }
    let a = Archiver::new(store_a.clone(), counting.clone());
    let b = Archiver::new(store_b.clone(), counting.clone());
    let (ra, rb) = tokio::join!(drain(&a), drain(&b));
    assert_eq!(ra + rb, 20);
    let seen = uploads.lock().unwrap().clone();
    let unique: std::collections::BTreeSet<_> = seen.iter().collect();
    assert_eq!(
        seen.len(),
        unique.len(),
        "an item was uploaded twice: {seen:?}"
    );
    assert_eq!(store_a.archive_backlog().await.unwrap().0, 0);
    drop(db);
}

async fn drain(a: &Archiver) -> usize {
    let mut total = 0;
    loop {
        let n = a.run_once().await.unwrap();
        if n == 0 {
            return total;
        }
        total += n;
    }
}

fn audit() -> budgetd::store::Audit {
    budgetd::store::Audit {
        actor: "uma".into(),
        action: "test",
        chain: Some("checkout".into()),
        subject: None,
        detail: serde_json::json!({}),
        at: budgetd::service::now(),
    }
}

/// A folder archive that records every key it is asked to upload, slowly.
struct Counting {
    inner: budgetd::archive::fs::FsArchive,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl Archive for Counting {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn check(&self) -> anyhow::Result<()> {
        self.inner.check().await
    }
    async fn put(&self, key: &str, body: &[u8], sha256: &str) -> anyhow::Result<()> {
        self.seen.lock().unwrap().push(key.to_owned());
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.inner.put(key, body, sha256).await
    }
    async fn get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        self.inner.get(key).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_workers_never_upload_one_item_twice() {
    two_workers(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_workers_never_upload_one_item_twice() {
    two_workers(Backend::Postgres).await;
}
