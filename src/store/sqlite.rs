//! SQLite, the embedded default: one file under the data directory (mode 0600), WAL journal,
//! `synchronous = FULL`: a transaction is on disk when its commit returns, so a 2xx survives a
//! power loss.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::any::AnyPoolOptions;
use sqlx::Executor as _;

use super::sql::SqlStore;
use super::Backend;

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
                    "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 10000; \
                     PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;",
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
