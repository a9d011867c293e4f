//! Building and running the server: bind every listener first, then serve until told to stop.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::archive::{self, worker::Archiver, Archive};
use crate::auth::{generate_token, Principal, Role};
use crate::config::{redact_url, Settings};
use crate::fleet::Fleet;
use crate::publish::Hub;
use crate::state::AppState;
use crate::store;
use crate::tls::Tls;
use crate::{feedback, grpc, http, service};

pub struct App {
    listener: TcpListener,
    grpc_listener: TcpListener,
    state: AppState,
    http_addr: SocketAddr,
    grpc_addr: SocketAddr,
    admin_token_file: Option<PathBuf>,
    tls: Option<Arc<Tls>>,
    http_limits: http::serve::Limits,
    /// The gRPC listener's bounds (`agents.max_connections`, `agents.max_call_bytes`).
    grpc: grpc::serve::Http2,
}

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
        let http_limits = http::serve::Limits::from_settings(&settings.http_limits)?;
        let grpc = grpc::serve::Http2 {
            max_connections: settings.agents.max_connections,
            max_call_bytes: usize::try_from(settings.agents.max_call_bytes).unwrap_or(usize::MAX),
            ..grpc::serve::Http2::default()
        };
        warn_of_file_limit(http_limits.max_connections, grpc.max_connections);
        settings
            .feedback
            .check()
            .and_then(|()| settings.agents.check())
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        if let Some(token) = &settings.admin_token {
            check_admin_token(&token.0)?;
        }
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
        tracing::info!(database = %redact_url(&url), backend = %store.backend(), "store ready");
        tracing::info!(archive = %archive.describe(), prefix = %archive_prefix, "archive ready");
        let admin_token_file = bootstrap_admin(&*store, &settings).await?;
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
        let fleet = Fleet::new(store.clone(), replica.clone(), &settings.agents);
        let archiver = Archiver::new(store.clone(), archive);
        // Each process writes rollup rows of its own (a restart starts new ones).
        let writer = format!("{replica}#{}", hex::encode(rand::random::<[u8; 4]>()));
        let reports = Arc::new(feedback::Reports::new(feedback::rollup::Rollups::new(
            store.clone(),
            writer,
            settings.feedback.rollup_ms,
        )));
        let bodies = crate::http::bodies::Bodies::new(settings.max_body_bytes);
        let state = AppState {
            bodies,
            uploads: crate::http::api::upload::Uploads::new(Duration::from_secs(
                settings.http_limits.body_read_timeout_secs,
            )),
            store,
            settings: Arc::new(settings),
            hub,
            fleet,
            archiver,
            archive_prefix,
            reports,
            agent_tokens: Default::default(),
            approved: Default::default(),
        };
        Ok(Self {
            listener,
            grpc_listener,
            state,
            http_addr,
            grpc_addr,
            admin_token_file,
            tls,
            http_limits,
            grpc,
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

    /// The file the admin token generated at this start was written to (mode 0600), when
    /// none existed and none was configured. The token itself is never printed or logged.
    pub fn admin_token_file(&self) -> Option<&Path> {
        self.admin_token_file.as_deref()
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
            tokio::spawn(checkpoint(state.clone(), Duration::from_millis(500))),
            state.hub.spawn_catch_up(Duration::from_secs(5)),
            state.fleet.spawn_flusher(Duration::from_millis(500)),
            state.fleet.spawn_beats(),
            state.archiver.spawn(Duration::from_secs(1)),
            state
                .reports
                .rollups
                .spawn_flusher(Duration::from_millis(200)),
            feedback::alerts::spawn(state.clone()),
            crate::service::rollouts::spawn(state.clone()),
            feedback::webhooks::Deliverer::new(state.store.clone(), &state.settings.feedback)
                .spawn(Duration::from_millis(500)),
        ];
        background.push(state.hub.spawn_listener());
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

        let control = grpc::Control::new(state.clone(), state.hub.clone(), state.fleet.clone());
        let routes = grpc::routes(control.clone()).await?;
        // HTTP: connection limit and timeouts (SPEC §7), TCP_NODELAY, TLS when configured.
        let http_server = http::serve::serve(
            self.listener,
            self.tls.as_ref().map(|tls| tls.http_acceptor()),
            http::router(state.clone()),
            self.http_limits,
            stopped(stop_rx.clone()),
        );
        let http2 = self.grpc;
        let grpc_server: Pin<Box<dyn Future<Output = ()> + Send>> = match &self.tls {
            // One reloadable acceptor per listener, both on the same certificate.
            Some(tls) => Box::pin(grpc::serve::serve(
                tls.grpc_incoming(self.grpc_listener),
                routes,
                control,
                http2,
                stop_rx.clone(),
            )),
            // Publications are small writes that must leave at once: no Nagle delay.
            None => Box::pin(grpc::serve::serve(
                tcp_incoming(self.grpc_listener),
                routes,
                control,
                http2,
                stop_rx.clone(),
            )),
        };
        let ((), http_result) = tokio::join!(grpc_server, http_server);
        for task in background {
            task.abort();
        }
        state.fleet.flush().await;
        state.reports.rollups.flush().await;
        http_result.context("HTTP server failed")
    }
}

/// Plain TCP connections of the gRPC listener, Nagle's delay off (publications are small
/// writes that must leave at once).
fn tcp_incoming(
    listener: TcpListener,
) -> impl futures_util::Stream<Item = Result<tokio::net::TcpStream, std::io::Error>> + Send + 'static
{
    futures_util::stream::unfold(listener, |listener| async move {
        loop {
            if let Some((tcp, _)) = crate::tls::accepted_tcp(listener.accept().await).await {
                return Some((Ok(tcp), listener));
            }
        }
    })
}

/// The file under the data directory a generated admin token is written to.
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// How to make a good admin token, for every refusal.
const GENERATE_HINT: &str = "generate one with `openssl rand -hex 32`, or leave \
    BUDGETD_ADMIN_TOKEN unset on a store without an admin token and budgetd writes a generated \
    one to {data_dir}/admin-token";

/// Parts of the sample values manifests and guides use: a token containing one is refused.
const PLACEHOLDERS: [&str; 16] = [
    "change-me",
    "change_me",
    "changeme",
    "example",
    "placeholder",
    "replace",
    "admin",
    "password",
    "passwd",
    "secret",
    "default",
    "sample",
    "dummy",
    "your-token",
    "your_token",
    "xxxxx",
];

/// Why `token` is not acceptable as the admin token, if it is not: shorter than 32
/// characters, whitespace, fewer than 10 distinct characters (`aaaa…`, `12121212…`), or a
/// known placeholder (`change-me-admin-token`, `replace-with-a-long-random-token`, …).
pub fn admin_token_weakness(token: &str) -> Option<String> {
    let len = token.chars().count();
    if len < 32 {
        return Some(format!(
            "it is {len} characters long, at least 32 are needed"
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("it contains whitespace or control characters".into());
    }
    let lower = token.to_lowercase();
    if let Some(word) = PLACEHOLDERS.iter().find(|w| lower.contains(*w)) {
        return Some(format!(
            "it looks like a placeholder (it contains {word:?})"
        ));
    }
    let distinct = token
        .chars()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if distinct < 10 {
        return Some(format!(
            "it has only {distinct} distinct characters, at least 10 are needed"
        ));
    }
    None
}

/// Warns when the two listeners' connection limits together pass the process's limit of open
/// files (Linux: `/proc/self/limits`): at that limit accepting fails instead of waiting, and
/// the database and archive cannot open files either.
fn warn_of_file_limit(http: usize, grpc: usize) {
    let Some(limit) = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| open_files_limit(&limits))
    else {
        return;
    };
    // Files besides connections: listeners, the database, logs, archive writes.
    const SPARE: u64 = 256;
    let wanted = (http as u64)
        .saturating_add(grpc as u64)
        .saturating_add(SPARE);
    if wanted > limit {
        tracing::warn!(
            open_files_limit = limit,
            http_limits.max_connections = http,
            agents.max_connections = grpc,
            "the connection limits ({http} HTTP + {grpc} gRPC, and {SPARE} other files) pass the \
             process's limit of open files ({limit}): raise the limit (ulimit -n, LimitNOFILE) or \
             lower agents.max_connections"
        );
    }
}

/// The soft limit of open files in `/proc/self/limits`' text; `None` when unlimited or absent.
fn open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Refuses a configured admin token that is weak or a known placeholder; the message says
/// why (never the token) and how to make a good one.
fn check_admin_token(token: &str) -> anyhow::Result<()> {
    match admin_token_weakness(token) {
        None => Ok(()),
        Some(why) => {
            anyhow::bail!("BUDGETD_ADMIN_TOKEN (admin_token) is refused: {why}; {GENERATE_HINT}")
        }
    }
}

/// Installs the configured admin token, or, on a store without an admin token, generates one
/// and writes it to `{data_dir}/admin-token` (mode 0600, created exclusively, never
/// overwritten); returns that file's path. The token is never printed or logged.
async fn bootstrap_admin(
    store: &dyn store::Store,
    settings: &Settings,
) -> anyhow::Result<Option<PathBuf>> {
    let failed =
        |what: &'static str| move |e: crate::error::ApiError| e.into_anyhow().context(what);
    if let Some(token) = &settings.admin_token {
        check_admin_token(&token.0)?;
        service::tokens::install_admin(store, &token.0, "token.bootstrap")
            .await
            .map_err(failed("failed to install the admin token"))?;
        return Ok(None);
    }
    if service::tokens::has_admin(store)
        .await
        .map_err(failed("failed to read tokens"))?
    {
        return Ok(None);
    }
    let token = generate_token();
    // The file first: a token the store knows but nobody can read would lock the admin out.
    let path = write_secret_file(&settings.data_dir, ADMIN_TOKEN_FILE, &token)?;
    let stored = service::tokens::install_admin(store, &token, "token.generate")
        .await
        .map_err(failed("failed to store the generated admin token"));
    if let Err(e) = stored {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    tracing::info!(file = %path.display(), "generated the admin token");
    Ok(Some(path))
}

/// Creates `dir/name` holding `secret` and a newline: readable by the owner only (0600),
/// created exclusively (an existing file is never overwritten), synced to disk. Returns its
/// absolute path.
fn write_secret_file(dir: &Path, name: &str, secret: &str) -> anyhow::Result<PathBuf> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("failed to create data directory {}", dir.display()))?;
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
    let path = dir.join(name);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = match options.open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => anyhow::bail!(
            "the store has no admin token and {} already exists (budgetd never overwrites it): \
             if it holds a token you still need, set BUDGETD_ADMIN_TOKEN to it; otherwise \
             remove the file to have a new token generated",
            path.display()
        ),
        Err(e) => {
            return Err(e).with_context(|| format!("failed to create {}", path.display()));
        }
    };
    file.write_all(format!("{secret}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("failed to write {}", path.display()))?;
    #[cfg(unix)]
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(path)
}

/// Checkpoints the store's write-ahead log every `every`, so that commits do not (see
/// `store::sqlite`).
async fn checkpoint(state: AppState, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = state.store.checkpoint().await {
            tracing::warn!(error = %e, "checkpoint of the store's write-ahead log failed");
        }
    }
}

/// Forgets `Idempotency-Key` records after a day.
async fn expire_idempotency_keys(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600));
    loop {
        tick.tick().await;
        let cutoff = (chrono::Utc::now() - chrono::Duration::hours(24))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        match service::idempotency::expire(&state, &cutoff).await {
            Ok(n) if n > 0 => tracing::info!(removed = n, "expired idempotency keys"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "failed to expire idempotency keys"),
        }
    }
}

async fn load_demo(state: &AppState) -> anyhow::Result<bool> {
    if !service::chains::list(state)
        .await
        .map_err(|e| anyhow::anyhow!("demo: {e}"))?
        .is_empty()
    {
        return Ok(false);
    }
    let uploader = Principal::internal("demo-uploader", Role::Uploader);
    let approver = Principal::internal("demo-approver", Role::Approver);
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
    let body = parse(raw);
    let outcome = service::upload_run(state, &uploader, "checkout", body, raw.as_bytes(), false)
        .await
        .map_err(err)?;
    let id = outcome
        .baseline_id
        .context("demo: the first run created no draft")?;
    service::approve(
        state,
        &approver,
        &id,
        Some("demo: SPEC example A".into()),
        None,
    )
    .await
    .map_err(err)?;
    Ok(true)
}

#[cfg(test)]
mod tests {

    /// The soft limit of open files is read from `/proc/self/limits`' row; unlimited is none.
    #[test]
    fn the_open_files_limit_is_read_from_proc() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             unlimited            unlimited            processes \n\
                      Max open files            20000                20000                files     \n";
        assert_eq!(open_files_limit(limits), Some(20000));
        assert_eq!(
            open_files_limit(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
        assert_eq!(open_files_limit(""), None);
    }

    use super::*;

    #[test]
    fn weak_and_placeholder_admin_tokens_are_refused() {
        for weak in [
            "",
            "short",
            "change-me-admin-token",
            "replace-with-a-long-random-token",
            "CHANGEME-0123456789abcdef0123456789abcdef",
            "test-admin-token-0123456789abcdefghijkl",
            "an-example-token-0123456789abcdefghijkl",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "abababababababababababababababababababab",
            "0123456701234567012345670123456701234567",
            "3f9c0d6e1b2a4c5d8e7f90a1b2c3d4e5 f6a7b8c9",
        ] {
            assert!(admin_token_weakness(weak).is_some(), "{weak:?} accepted");
            let e = check_admin_token(weak).unwrap_err().to_string();
            assert!(e.contains("openssl rand -hex 32"), "{e}");
            assert!(
                weak.len() < 8 || !e.contains(weak),
                "the token is echoed: {e}"
            );
        }
        for strong in [
            "3f9c0d6e1b2a4c5d8e7f90a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b",
            "bgt_0b8e4f3c2a1d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f",
            "Zk3pQ9vX2mL7wR4tY8nB1cF6hJ0sD5gA",
        ] {
            assert_eq!(admin_token_weakness(strong), None, "{strong:?}");
        }
        for _ in 0..100 {
            assert_eq!(admin_token_weakness(&generate_token()), None);
        }
    }

    #[test]
    fn secret_files_are_private_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let path = write_secret_file(&data, ADMIN_TOKEN_FILE, "s3cr3t").unwrap();
        assert!(path.is_absolute());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "s3cr3t\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let e = write_secret_file(&data, ADMIN_TOKEN_FILE, "other").unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "s3cr3t\n");
    }
}
