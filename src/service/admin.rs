//! Operating the control plane: readiness, the store's gauges for `/metrics`, and moving a
//! whole store out and in (`budgetd export` / `budgetd import`).

use std::io::{Read, Write};

use budget_api::chains::ChainSummary;

use crate::state::AppState;
use crate::store::{self, Backend, Export, PoolStatus, Store, TableCounts};

/// The store's backend when it answers (`/readyz`); why not otherwise.
pub async fn ready(state: &AppState) -> anyhow::Result<Backend> {
    state.store.ping().await?;
    Ok(state.store.backend())
}

/// What `/metrics` shows of the store; a part the store could not read is `None` (and left
/// out), so metrics keep answering while the database is down.
#[derive(Debug)]
pub struct Gauges {
    pub pool: PoolStatus,
    /// Archive uploads waiting, and when the oldest was queued.
    pub archive_backlog: Option<(i64, Option<String>)>,
    pub chains: Option<Vec<ChainSummary>>,
}

pub async fn gauges(state: &AppState) -> Gauges {
    Gauges {
        pool: state.store.pool_status(),
        archive_backlog: state.store.archive_backlog().await.ok(),
        chains: state.store.list_chains().await.ok(),
    }
}

/// What an export or import did: rows per table, and the store's backend.
#[derive(Debug)]
pub struct Moved {
    pub counts: TableCounts,
    pub backend: Backend,
}

impl Moved {
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|(_, n)| n).sum()
    }
}

/// Writes the whole store at `database_url` as one JSON document to `out` (every table but
/// idempotency keys; token hashes, never secrets). `progress` hears of every 10 000 rows of a
/// table and of its end.
pub async fn export(
    database_url: &str,
    out: &mut (dyn Write + Send),
    progress: &(dyn Fn(&str, u64) + Send + Sync),
) -> anyhow::Result<Moved> {
    let store = store::connect(database_url).await?;
    let counts = store
        .export_all(out, progress)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Moved {
        counts,
        backend: store.backend(),
    })
}

/// A `budgetd export` document read from `input` (named `name` in errors).
pub async fn read_export(input: Box<dyn Read + Send>, name: String) -> anyhow::Result<Export> {
    tokio::task::spawn_blocking(move || {
        serde_json::from_reader(std::io::BufReader::new(input))
            .map_err(|e| anyhow::anyhow!("{name} is not a budgetd export: {e}"))
    })
    .await?
}

/// Loads `export` into the empty store at `database_url` (creating its schema) in one
/// transaction, keeping ids, revisions and counters.
pub async fn import(
    database_url: &str,
    export: &Export,
    progress: &(dyn Fn(&str, u64) + Send + Sync),
) -> anyhow::Result<Moved> {
    let store = store::connect(database_url).await?;
    import_into(&*store, export, progress).await
}

async fn import_into(
    store: &dyn Store,
    export: &Export,
    progress: &(dyn Fn(&str, u64) + Send + Sync),
) -> anyhow::Result<Moved> {
    let counts = store
        .import_all(export, progress)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Moved {
        counts,
        backend: store.backend(),
    })
}
