//! SQLite, the embedded default: one file under the data directory (mode 0600), WAL journal,
//! `synchronous = FULL`: a transaction is on disk when its commit returns, so a 2xx survives a
//! power loss.
//!
//! Checkpoints (copying the WAL into the database file, with its own fsync) run off the
//! request path: the server calls [`crate::store::Connection::checkpoint`] twice a second.
//! SQLite's own automatic checkpoint, which runs inside whichever commit passes its threshold,
//! is kept only as a backstop at [`AUTOCHECKPOINT_PAGES`]: at its default of 1 000 pages,
//! about every upload of a 1 000-segment chain paid for a checkpoint in its commit (commit 35-40
//! ms, 8-9 ms without).

use std::time::Duration;

use anyhow::Context as _;
use sqlx::any::AnyPoolOptions;
use sqlx::Executor as _;

use super::sql::SqlStore;
use super::Backend;

/// WAL pages (4 KiB) after which a commit checkpoints by itself: 40 MiB, reached only when
/// the background checkpoint falls behind.
pub const AUTOCHECKPOINT_PAGES: u32 = 10_000;

/// Opens (creating if needed) the SQLite database at `url` and applies migrations.
pub async fn open(url: &str) -> anyhow::Result<SqlStore> {
    sqlx::any::install_default_drivers();
    restrict_file(url)?;
    let url = if url.contains('?') || url.contains(":memory:") {
        url.to_owned()
    } else {
        format!("{url}?mode=rwc")
    };
    let pool = AnyPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(30))
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute(
                    format!(
                        "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 10000; \
                         PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; \
                         PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}; \
                         PRAGMA journal_size_limit = 67108864;"
                    )
                    .as_str(),
                )
                .await?;
                Ok(())
            })
        })
        .connect(&url)
        .await
        .with_context(|| format!("failed to open SQLite database {url}"))?;
    sqlx::migrate!("./migrations/sqlite")
        .run(&pool)
        .await
        .context("failed to apply SQLite migrations")?;
    Ok(SqlStore::new(pool, Backend::Sqlite))
}

/// Creates the database file readable by its owner only (it holds token hashes and every
/// baseline), or tightens an existing one; SQLite gives its WAL files the same mode.
fn restrict_file(url: &str) -> anyhow::Result<()> {
    let Some(path) = sqlite_path(url) else {
        return Ok(());
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("failed to create SQLite database {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("failed to restrict {} to mode 0600", path.display()))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// The file of a `sqlite:` URL; none for an in-memory database.
fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && !path.contains(":memory:") && !url.contains("mode=memory"))
        .then(|| path.into())
}
