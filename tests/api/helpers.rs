//! `spawn_app()`: the real `App` on port 0 with a fresh database, driven over real HTTP.

use budgetd::config::Secret;
use budgetd::{App, Settings};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

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
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    pub async fn stop(mut self) {
        self.stop_in_place().await;
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
