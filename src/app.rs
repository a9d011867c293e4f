//! Building and running the server: bind every listener first, then serve until told to stop.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;

use crate::archive::{self, worker::Archiver, Archive};
use crate::auth::{generate_token, hash_token, Principal, Role};
use crate::config::{redact_url, Settings};
use crate::fleet::Fleet;
use crate::publish::Hub;
use crate::state::AppState;
use crate::store::{self, Audit};
use crate::tls::Tls;
use crate::{grpc, http, service};

pub struct App {
    listener: TcpListener,
    grpc_listener: TcpListener,
    state: AppState,
    http_addr: SocketAddr,
    grpc_addr: SocketAddr,
    generated_admin_token: Option<String>,
    tls: Option<Arc<Tls>>,
}

type Serving<E> = Pin<Box<dyn Future<Output = Result<(), E>> + Send>>;

impl App {
    /// Opens the store (applying migrations), installs the admin token and binds the listener.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let (archive, url_prefix) = archive::open(&settings.archive_url()).await?;
        let archive_prefix =
            url_prefix.unwrap_or_else(|| settings.archive_prefix.trim_matches('/').to_owned());
        Self::build_with_archive(settings, archive, archive_prefix).await
    }

    /// [`App::build`] with an archive opened by the caller (e.g. an S3 client configured in
    /// code rather than from the environment).
    pub async fn build_with_archive(
        settings: Settings,
        archive: Arc<dyn Archive>,
        archive_prefix: String,
    ) -> anyhow::Result<Self> {
        // Unusable certificate files stop the start before anything else, naming the file.
        let tls = Tls::from_settings(&settings.tls)?;
        let url = settings.database_url();
        if url.starts_with("sqlite:") && settings.database_url.is_none() {
            std::fs::create_dir_all(&settings.data_dir).with_context(|| {
                format!(
                    "failed to create data directory {}",
                    settings.data_dir.display()
                )
            })?;
        }
        archive.check().await?;
        let store = store::connect_with(&url, &archive_prefix).await?;
        tracing::info!(database = %redact_url(&url), backend = store.backend(), "store ready");
        tracing::info!(archive = %archive.describe(), prefix = %archive_prefix, "archive ready");
        let generated_admin_token = bootstrap_admin(&*store, &settings).await?;
        let listener = TcpListener::bind(settings.http)
            .await
            .with_context(|| format!("failed to bind HTTP listener on {}", settings.http))?;
        let http_addr = listener.local_addr()?;
        let grpc_listener = TcpListener::bind(settings.grpc)
            .await
            .with_context(|| format!("failed to bind gRPC listener on {}", settings.grpc))?;
        let grpc_addr = grpc_listener.local_addr()?;
        let hub = Hub::new(store.clone());
        hub.refresh()
            .await
            .context("failed to load the published budgets")?;
        let replica = settings
            .replica
            .clone()
            .unwrap_or_else(|| grpc_addr.to_string());
        let fleet = Fleet::new(store.clone(), replica);
        let archiver = Archiver::new(store.clone(), archive);
        let state = AppState {
            store,
            settings: Arc::new(settings),
            hub,
            fleet,
            archiver,
            archive_prefix,
        };
        Ok(Self {
            listener,
            grpc_listener,
            state,
            http_addr,
            grpc_addr,
            generated_admin_token,
            tls,
        })
    }

    /// The TLS in effect on both listeners, when configured.
    pub fn tls(&self) -> Option<&Arc<Tls>> {
        self.tls.as_ref()
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The admin token generated at this start, when none existed and none was configured.
    pub fn generated_admin_token(&self) -> Option<&str> {
        self.generated_admin_token.as_deref()
    }

    /// Loads SPEC example A (`checkout`) into an empty store and publishes it.
    pub async fn load_demo(&self) -> anyhow::Result<bool> {
        load_demo(&self.state).await
    }

    /// Serves HTTP and gRPC until `shutdown` resolves; then Watch streams end (agents
    /// reconnect elsewhere), in-flight requests finish, and fleet status is flushed.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let state = self.state;
        let mut background = vec![
            tokio::spawn(expire_idempotency_keys(state.clone())),
            state.hub.spawn_catch_up(Duration::from_secs(5)),
            state.fleet.spawn_flusher(Duration::from_millis(500)),
            state.archiver.spawn(Duration::from_secs(1)),
        ];
        let url = state.settings.database_url();
        if state.store.backend() == "postgres" {
            background.push(state.hub.spawn_pg_listener(url));
        }
        if let Some(reloader) = self.tls.as_ref().and_then(|tls| tls.spawn_reloader()) {
            background.push(reloader);
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };

        let control = grpc::Control::new(
            state.clone(),
            state.hub.clone(),
            state.fleet.clone(),
            stop_rx.clone(),
        );
        let grpc_router = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(grpc::KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(grpc::KEEPALIVE_TIMEOUT))
            .max_concurrent_streams(Some(grpc::MAX_CONCURRENT_STREAMS))
            .add_routes(grpc::routes(control).await?);
        let http_router = http::router(state.clone());
        let (grpc_server, http_server): (
            Serving<tonic::transport::Error>,
            Serving<std::io::Error>,
        ) = match &self.tls {
            // One reloadable acceptor per listener, both on the same certificate.
            Some(tls) => (
                Box::pin(grpc_router.serve_with_incoming_shutdown(
                    tls.grpc_incoming(self.grpc_listener),
                    stopped(stop_rx.clone()),
                )),
                Box::pin(
                    axum::serve(tls.http_listener(self.listener)?, http_router)
                        .with_graceful_shutdown(stopped(stop_rx.clone()))
                        .into_future(),
                ),
            ),
            None => {
                let listener = self.listener.tap_io(|tcp| {
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::debug!(error = %e, "failed to set TCP_NODELAY");
                    }
                });
                (
                    Box::pin(grpc_router.serve_with_incoming_shutdown(
                        // Publications are small writes that must leave at once: no Nagle delay.
                        TcpIncoming::from(self.grpc_listener).with_nodelay(Some(true)),
                        stopped(stop_rx.clone()),
                    )),
                    Box::pin(
                        axum::serve(listener, http_router)
                            .with_graceful_shutdown(stopped(stop_rx.clone()))
                            .into_future(),
                    ),
                )
            }
        };
        let (grpc_result, http_result) = tokio::join!(grpc_server, http_server);
        for task in background {
            task.abort();
        }
        state.fleet.flush().await;
        grpc_result.context("gRPC server failed")?;
        http_result.context("HTTP server failed")
    }
}

async fn bootstrap_admin(
    store: &dyn store::Store,
    settings: &Settings,
) -> anyhow::Result<Option<String>> {
    let audit = |action| Audit {
        actor: "budgetd".into(),
        action,
        chain: None,
        subject: Some("admin".into()),
        detail: json!({}),
        at: service::now(),
    };
    if let Some(token) = &settings.admin_token {
        anyhow::ensure!(
            token.0.len() >= 16,
            "BUDGETD_ADMIN_TOKEN must be at least 16 characters"
        );
        store
            .upsert_token(
                "admin",
                Role::Admin,
                &hash_token(&token.0),
                audit("token.bootstrap"),
            )
            .await
            .context("failed to install the admin token")?;
        return Ok(None);
    }
    let tokens = store.list_tokens().await.context("failed to read tokens")?;
    if tokens.iter().any(|t| t.role == Role::Admin) {
        return Ok(None);
    }
    let token = generate_token();
    store
        .upsert_token(
            "admin",
            Role::Admin,
            &hash_token(&token),
            audit("token.generate"),
        )
        .await
        .context("failed to store the generated admin token")?;
    Ok(Some(token))
}

/// Forgets `Idempotency-Key` records after a day.
async fn expire_idempotency_keys(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tick.tick().await;
        let cutoff = (chrono::Utc::now() - chrono::Duration::hours(24))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        match state.store.idem_expire(&cutoff).await {
            Ok(n) if n > 0 => tracing::info!(removed = n, "expired idempotency keys"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "failed to expire idempotency keys"),
        }
    }
}

async fn load_demo(state: &AppState) -> anyhow::Result<bool> {
    if !state.store.list_chains().await?.is_empty() {
        return Ok(false);
    }
    let uploader = Principal {
        name: "demo-uploader".into(),
        role: Role::Uploader,
    };
    let approver = Principal {
        name: "demo-approver".into(),
        role: Role::Approver,
    };
    let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).expect("example is JSON");
    let err = |e: crate::error::ApiError| anyhow::anyhow!("demo: {e}");
    service::put_topology(
        state,
        &uploader,
        "checkout",
        parse(budget_core::example::CHECKOUT_TOPOLOGY),
    )
    .await
    .map_err(err)?;
    let raw = budget_core::example::CHECKOUT_RUN_A;
    let outcome = service::upload_run(state, &uploader, "checkout", parse(raw), raw.as_bytes())
        .await
        .map_err(err)?;
    let id = outcome
        .baseline_id
        .context("demo: the first run created no draft")?;
    service::approve(state, &approver, &id, Some("demo: SPEC example A".into()))
        .await
        .map_err(err)?;
    Ok(true)
}
