//! Which database a store runs on, and its connections.

use async_trait::async_trait;
use serde::Serialize;

use super::StoreResult;

/// The database behind a store, chosen from the URL scheme at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// `sqlite` or `postgres`: how logs, `/readyz` and exports name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Connections of the store's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// Open connections (idle + in use).
    pub size: u32,
    pub idle: u32,
}

/// The store's link to its database.
#[async_trait]
pub trait Connection: Send + Sync {
    /// Which backend this is.
    fn backend(&self) -> Backend;
    async fn ping(&self) -> StoreResult<()>;
    /// Open and idle connections of the pool (for `/metrics`).
    fn pool_status(&self) -> PoolStatus;
    /// Moves committed writes from the write-ahead log into the database file, off the
    /// request path (SQLite: a passive checkpoint, which never waits for a lock; PostgreSQL's
    /// own checkpointer does this, so there it does nothing).
    async fn checkpoint(&self) -> StoreResult<()>;
}
