//! SQLite, the embedded default: one file under the data directory, WAL journal.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::any::AnyPoolOptions;
use sqlx::Executor as _;

use super::sql::SqlStore;

/// Opens (creating if needed) the SQLite database at `url` and applies migrations.
pub async fn open(url: &str) -> anyhow::Result<SqlStore> {
    sqlx::any::install_default_drivers();
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
                     PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;",
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
    Ok(SqlStore::new(pool, "sqlite"))
}
