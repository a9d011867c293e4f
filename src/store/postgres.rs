//! PostgreSQL, for several replicas sharing one database.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::any::AnyPoolOptions;

use super::sql::SqlStore;
use super::Backend;

/// Connects to PostgreSQL at `url` and applies migrations (sqlx takes an advisory lock, so
/// replicas starting together migrate once).
pub async fn open(url: &str) -> anyhow::Result<SqlStore> {
    sqlx::any::install_default_drivers();
    let pool = AnyPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .context("failed to connect to PostgreSQL")?;
    sqlx::migrate!("./migrations/postgres")
        .run(&pool)
        .await
        .context("failed to apply PostgreSQL migrations")?;
    Ok(SqlStore::new(pool, Backend::Postgres).with_listen_url(url))
}
