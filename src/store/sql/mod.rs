//! The one SQL implementation of [`Store`](super::Store), over sqlx's `Any` pool (SQLite or
//! PostgreSQL).
//!
//! Every statement is plain SQL both backends accept (`$N` placeholders — anonymous `?` for
//! SQLite in the multi-row writes —, `ON CONFLICT`, `RETURNING`). Every transaction that changes a chain first touches the chain's row, which
//! serialises writers per chain on PostgreSQL (row lock) and takes SQLite's write lock at
//! once; counters (`bl-…` ids, publication revisions) are rows updated in the same
//! transaction, so ids are unique and revisions increase in commit order across processes.
//!
//! One file per concern trait. The steps every write transaction shares (chain lock,
//! counters, audit, idempotency replay and commit, publication) are in `tx`; the mapping of
//! rows to store types is in `rows`, apart from the queries.

mod access;
mod audit;
mod baselines;
mod chains;
mod export;
mod feedback;
mod fleet;
mod idempotency;
mod outbox;
mod publications;
mod releases;
mod rollouts;
mod rows;
mod runs;
mod tx;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::AnyPool;
use tokio::sync::Notify;

use self::tx::Tx;
use super::{Backend, Connection, PoolStatus, StoreError, StoreResult, DEFAULT_ARCHIVE_PREFIX};

/// The store over one sqlx `Any` pool, on either [`Backend`].
#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: Backend,
    archive_prefix: String,
    /// Where to LISTEN for other processes' publications (PostgreSQL only).
    listen_url: Option<String>,
    /// Transactions waiting to begin (for a pooled connection, then SQLite's write lock), which
    /// the fleet's bulk writes let go first ([`Self::after_transactions`]).
    beginning: Arc<Beginning>,
}

/// How many transactions are waiting to begin (for one of the pool's connections, then for
/// SQLite's write lock in their `BEGIN IMMEDIATE`), and a wake-up when none is.
#[derive(Debug, Default)]
struct Beginning {
    waiting: AtomicUsize,
    none: Notify,
}

/// One transaction waiting to begin, until dropped.
struct Waiting<'a>(&'a Beginning);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.0.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none.notify_waiters();
        }
    }
}

/// Longest one bulk write of the fleet (all its statements together) lets transactions go
/// first: long enough for a flush made while uploads and approvals go on (16 of each take
/// about a second during an opening storm), bounded so that a steady stream of transactions
/// cannot hold the fleet's writes back for good.
pub(super) const YIELD_AT_MOST: Duration = Duration::from_secs(10);

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

fn internal(e: impl Into<anyhow::Error>) -> StoreError {
    StoreError::Internal(e.into())
}

/// `($1, $2, …), ($k+1, …), …`: the VALUES of a multi-row statement of `rows` rows of `width`
/// columns, the statement's only parameters. SQLite gets anonymous `?`s, bound in order: SQLite
/// keeps a list of *named* parameters (`$1` and `?1` are both names) that the binding walks
/// once per parameter, so a 1 000-row fleet write (14 000 parameters) spent most of the
/// server's CPU after each publication in `sqlite3_bind_parameter_name`.
fn placeholders(backend: Backend, rows: usize, width: usize) -> String {
    let numbered = backend == Backend::Postgres;
    let mut sql = String::with_capacity(rows * width * 5);
    for r in 0..rows {
        if r > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for c in 0..width {
            if c > 0 {
                sql.push_str(", ");
            }
            if numbered {
                sql.push_str(&format!("${}", r * width + c + 1));
            } else {
                sql.push('?');
            }
        }
        sql.push(')');
    }
    sql
}

/// A multi-row statement of `rows` rows, written for a chunk of at most `chunk`: kept prepared
/// on its connection only when the chunk is full. The text changes with the row count, and a
/// connection keeps up to 100 prepared statements with their compiled programs (on SQLite
/// about 35 KiB for 50 rows of 15 values, 1.5 MiB for 1,000), so agents claimed and flushed in
/// batches of every size could fill each connection's cache with statements rarely run again,
/// up to hundreds of MiB. Now a connection holds, besides its full chunks', the last statement
/// it did not keep (sqlx finalizes it when the next one comes).
fn rows_query(
    sql: &str,
    rows: usize,
    chunk: usize,
) -> sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments<'_>> {
    sqlx::query(sql).persistent(rows == chunk)
}

/// `2026-11-30T06:00:00.000Z` → `20261130`.
fn compact_date(rfc3339: &str) -> String {
    rfc3339.get(..10).unwrap_or_default().replace('-', "")
}

impl SqlStore {
    pub(super) fn new(pool: AnyPool, backend: Backend) -> Self {
        Self {
            pool,
            backend,
            archive_prefix: DEFAULT_ARCHIVE_PREFIX.to_owned(),
            listen_url: None,
            beginning: Arc::default(),
        }
    }

    /// Listen for publications on this database URL (a dedicated connection).
    pub(super) fn with_listen_url(mut self, url: &str) -> Self {
        self.listen_url = Some(url.to_owned());
        self
    }

    pub fn with_archive_prefix(mut self, prefix: &str) -> Self {
        self.archive_prefix = prefix.trim_matches('/').to_owned();
        self
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Begins a write transaction. On SQLite it takes the write lock at once (`BEGIN
    /// IMMEDIATE`): a deferred transaction that reads before it writes fails with
    /// `SQLITE_BUSY` when another connection commits in between, and no busy timeout helps.
    ///
    /// The BEGIN runs in a task of its own, so a caller abandoned while it is in flight (a
    /// request timed out, a client gone) cannot leave a pooled connection inside a transaction:
    /// sqlx's `begin` is not cancel-safe (a BEGIN sent but not yet answered when its future is
    /// dropped left the connection in a transaction, and every later write on it failed). The
    /// task finishes the BEGIN; the transaction it returns, dropped unused, rolls back.
    ///
    /// While it waits for a connection and SQLite's write lock, the fleet's bulk writes wait
    /// for it ([`Self::after_transactions`]).
    async fn begin(&self) -> StoreResult<Tx> {
        let (pool, backend) = (self.pool.clone(), self.backend);
        let _waiting = (backend == Backend::Sqlite).then(|| {
            self.beginning.waiting.fetch_add(1, Ordering::AcqRel);
            Waiting(&self.beginning)
        });
        Self::detached(async move {
            match backend {
                Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await,
                Backend::Postgres => pool.begin().await,
            }
        })
        .await
    }

    /// Waits (on SQLite; never past `until`) until no transaction waits to begin. The fleet's
    /// bulk writes (thousands of agents after an opening storm, in a few statements) call it
    /// before each statement, with one `until` ([`YIELD_AT_MOST`] from their start) for all
    /// of them. SQLite's busy handler is no queue: a waiting connection sleeps 1, 2, 5 … 100
    /// ms between tries, and a statement that comes along meanwhile takes the lock first, so
    /// without it a transaction (an approval) could wait behind statement after statement.
    async fn after_transactions(&self, until: tokio::time::Instant) {
        if self.backend != Backend::Sqlite {
            return;
        }
        loop {
            let none = self.beginning.none.notified();
            tokio::pin!(none);
            none.as_mut().enable();
            if self.beginning.waiting.load(Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(until, none).await.is_err() {
                return;
            }
        }
    }

    /// Begins a transaction that only reads: it takes no write lock, so writers go on. In a task
    /// of its own, as [`Self::begin`].
    async fn begin_read(&self) -> StoreResult<Tx> {
        let pool = self.pool.clone();
        Self::detached(async move { pool.begin().await }).await
    }

    /// Runs a transaction's BEGIN to its end whatever happens to the caller.
    async fn detached(
        begin: impl std::future::Future<Output = Result<Tx, sqlx::Error>> + Send + 'static,
    ) -> StoreResult<Tx> {
        match tokio::spawn(begin).await {
            Ok(tx) => Ok(tx?),
            Err(e) => Err(StoreError::Internal(anyhow::anyhow!(
                "beginning a transaction: {e}"
            ))),
        }
    }
}

#[async_trait]
impl Connection for SqlStore {
    fn backend(&self) -> Backend {
        self.backend
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    fn pool_status(&self) -> PoolStatus {
        PoolStatus {
            size: self.pool.size(),
            idle: u32::try_from(self.pool.num_idle()).unwrap_or(u32::MAX),
        }
    }

    async fn checkpoint(&self) -> StoreResult<()> {
        if self.backend == Backend::Sqlite {
            sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&self.pool)
                .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Row as _;

    use super::*;

    /// SQLite's multi-row statements carry no parameter names (their binding cost grows with
    /// the square of the named parameters); PostgreSQL needs `$N`.
    #[test]
    fn multi_row_placeholders_per_backend() {
        assert_eq!(placeholders(Backend::Sqlite, 2, 2), "(?, ?), (?, ?)");
        assert_eq!(placeholders(Backend::Postgres, 2, 2), "($1, $2), ($3, $4)");
    }

    /// A SQLite store in `dir`, and its file.
    async fn sqlite_in(dir: &tempfile::TempDir) -> (std::path::PathBuf, SqlStore) {
        let file = dir.path().join("budgetd.db");
        let store = crate::store::sqlite::open(&format!("sqlite:{}", file.display()))
            .await
            .unwrap();
        (file, store)
    }

    /// A bulk write of the fleet lets a transaction that waits for SQLite's write lock go
    /// first, though SQLite's busy handler would have given the lock to the bulk write: the
    /// transaction has waited long enough to sleep 100 ms between tries, the bulk write
    /// arrives 1 ms before the lock is let go.
    #[tokio::test]
    async fn sqlite_bulk_writes_let_a_waiting_transaction_go_first() {
        let dir = tempfile::tempdir().unwrap();
        let (_, store) = sqlite_in(&dir).await;
        sqlx::query("CREATE TABLE turns (who TEXT NOT NULL)")
            .execute(&store.pool)
            .await
            .unwrap();
        let held = store.begin().await.unwrap();
        let waiting = tokio::spawn({
            let store = store.clone();
            async move {
                let mut tx = store.begin().await.unwrap();
                sqlx::query("INSERT INTO turns (who) VALUES ('transaction')")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        });
        tokio::time::sleep(Duration::from_millis(400)).await;
        let bulk = tokio::spawn({
            let store = store.clone();
            async move {
                let until = tokio::time::Instant::now() + YIELD_AT_MOST;
                store.after_transactions(until).await;
                let gone_on = tokio::time::Instant::now();
                sqlx::query("INSERT INTO turns (who) VALUES ('bulk')")
                    .execute(&store.pool)
                    .await
                    .unwrap();
                (gone_on, until)
            }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        held.rollback().await.unwrap();
        waiting.await.unwrap();
        let (gone_on, until) = bulk.await.unwrap();
        // Woken when the transaction began, not by the end of its wait.
        assert!(
            gone_on < until,
            "the bulk write waited its whole {YIELD_AT_MOST:?}"
        );
        let order: Vec<String> = sqlx::query_scalar("SELECT who FROM turns ORDER BY rowid")
            .fetch_all(&store.pool)
            .await
            .unwrap();
        assert_eq!(order, ["transaction", "bulk"]);
    }

    /// The alert evaluator's read of the agents refusing a revision goes through the index of
    /// the agents that ever refused one, not through every agent of the fleet, and finds them:
    /// 2,000 agents, two refusing the revision they were sent, one that refused an older one
    /// and accepted a newer since.
    #[tokio::test]
    async fn nacking_agents_are_read_without_going_through_the_fleet() {
        use crate::store::Feedback as _;
        let dir = tempfile::tempdir().unwrap();
        let (_, store) = sqlite_in(&dir).await;
        let nacked = |i: usize| match i {
            7 | 1_500 => Some(3),
            900 => Some(1),
            _ => None,
        };
        for i in 0..2_000 {
            sqlx::query(
                "INSERT INTO agents (agent_id, service, labels, chains, replica, connected, \
                 delivered, acked, nack_revision, nack_error, first_seen, last_seen) \
                 VALUES ($1, 'checkout', '{}', 'c', 'r', 1, 3, 2, $2, 'bad', 't', 't')",
            )
            .bind(format!("agent-{i:04}"))
            .bind(nacked(i))
            .execute(&store.pool)
            .await
            .unwrap();
        }
        let plan: Vec<String> = sqlx::query(&format!("EXPLAIN QUERY PLAN {}", feedback::NACKING))
            .bind(10_000_i64)
            .fetch_all(&store.pool)
            .await
            .unwrap_or_else(|e| panic!("EXPLAIN QUERY PLAN: {e}"))
            .iter()
            .map(|step| step.try_get("detail").unwrap())
            .collect();
        let agents = plan
            .iter()
            .find(|step| step.contains(" a "))
            .unwrap_or_else(|| panic!("no step reads the agents: {plan:?}"));
        assert!(
            agents.ends_with("USING INDEX agents_nacking"),
            "the agents are read another way: {plan:?}"
        );
        let nacking: Vec<(String, i64)> = store
            .nacking_agents(10_000)
            .await
            .unwrap()
            .into_iter()
            .map(|n| (n.agent_id, n.revision))
            .collect();
        assert_eq!(
            nacking,
            [("agent-0007".into(), 3), ("agent-1500".into(), 3)]
        );
    }

    /// A SQLite commit of more WAL pages than SQLite's default threshold (1 000) does not
    /// checkpoint: the database file stays as it was until `checkpoint` (the server's
    /// background task) copies the log into it.
    #[tokio::test]
    async fn sqlite_commits_leave_checkpoints_to_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let (file, store) = sqlite_in(&dir).await;
        let pages: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(pages, i64::from(crate::store::sqlite::AUTOCHECKPOINT_PAGES));
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&store.pool)
            .await
            .unwrap();
        let size = || std::fs::metadata(&file).unwrap().len();
        let before = size();
        // 2 000 pages of 4 KiB in one commit.
        sqlx::query("CREATE TABLE filler (b BLOB)")
            .execute(&store.pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO filler VALUES (zeroblob(8192000))")
            .execute(&store.pool)
            .await
            .unwrap();
        assert!(
            size() < before + 1_000_000,
            "the commit checkpointed: {before} -> {} bytes",
            size()
        );
        store.checkpoint().await.unwrap();
        assert!(size() > before + 8_000_000, "{before} -> {} bytes", size());
    }
}
