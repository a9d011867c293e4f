//! Persistence behind one [`Store`] trait, returning core types — and `budget_api`'s types for
//! the records the API shows as they are stored (chain and baseline summaries, topology
//! versions, run sources, releases, archive uploads, audit entries): one type for each, no
//! copy between a row type and a wire type.
//!
//! [`Store`] is the sum of one trait per concern, each declared beside its types in its own
//! module: [`Chains`], [`Runs`], [`Baselines`], [`Publications`], [`Outbox`], [`Releases`],
//! [`Fleet`], [`Feedback`], [`AuditLog`], [`Access`], [`Idempotency`], [`ExportImport`] and [`Connection`].
//! Every type implementing them all is a `Store`; through `dyn Store` (or a `T: Store` bound)
//! every method is callable without importing the concern traits.
//!
//! One SQL implementation ([`sql::SqlStore`]) serves both backends through sqlx's `Any` driver;
//! [`sqlite`] and [`postgres`] hold what differs: connecting, pragmas and migrations. The
//! backend is chosen from the URL scheme at start ([`connect`]).

mod access;
mod audit;
mod baselines;
mod chains;
mod connection;
mod export;
pub mod feedback;
mod fleet;
mod idempotency;
mod outbox;
mod publications;
mod releases;
mod runs;

pub mod postgres;
pub mod rollouts;
pub mod sql;
pub mod sqlite;

use std::sync::Arc;

pub use self::access::{Access, NewToken, TokenRecord};
pub use self::audit::{Audit, AuditLog};
pub use self::baselines::{BaselineCursor, Baselines, Published, StoredBaseline, Verdict};
pub use self::chains::Chains;
pub use self::connection::{Backend, Connection, PoolStatus};
pub use self::export::{
    ColumnKind, Export, ExportImport, ExportTable, ExportedTable, Progress, TableCounts,
    ADDED_COLUMNS, ADDED_TABLES, DOCUMENTS_TABLE_VERSION, EXPORT_FORMAT, EXPORT_TABLES,
};
pub use self::feedback::Feedback;
pub use self::fleet::{AgentClaim, AgentCursor, AgentProgress, AgentStatus, CohortProgress, Fleet};
pub use self::idempotency::{with_idempotency, IdemClaim, IdemLookup, IdemResponse, Idempotency};
pub use self::outbox::{archive_key, Outbox, OutboxItem, DEFAULT_ARCHIVE_PREFIX};
pub use self::publications::{Publication, PublicationListener, Publications};
pub use self::releases::Releases;
pub use self::rollouts::{CanaryEnd, CanaryHealthRow, Rollouts, StoredRollout, WHOLE_BAKE};
pub use self::runs::{NewRun, Runs, StoredRun};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    /// A value the database cannot hold (e.g. a NUL character in text on PostgreSQL): the
    /// caller's input, not the server, is at fault.
    #[error("{0}")]
    Invalid(String),
    /// No database connection came free in time (every one busy): the caller may retry.
    #[error("{0}")]
    Busy(String),
    /// A report id a batch of rollups would store was its agent's stored one already
    /// (stored meanwhile, by another replica or this one): the batch wrote nothing
    /// ([`Feedback::write_rollups`]). `first_sends`: the agents of those that were sent once
    /// (not as resends); empty when all were resends.
    #[error("{}", if first_sends.is_empty() {
        "a report sent again was stored by another replica meanwhile; its agents send it again"
    } else {
        "a report sent as new was stored already (from its resend, or sent before); its agents send it again"
    })]
    ReportStored { first_sends: Vec<String> },
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::RowNotFound => Self::NotFound("row".into()),
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                Self::Conflict(format!("already exists ({})", db.message()))
            }
            // character_not_in_repertoire, untranslatable_character: text with a NUL byte.
            sqlx::Error::Database(db)
                if matches!(db.code().as_deref(), Some("22021" | "22P05")) =>
            {
                Self::Invalid(format!(
                    "a value holds a character that cannot be stored ({})",
                    db.message()
                ))
            }
            sqlx::Error::PoolTimedOut => Self::Busy(
                "the database is busy: no connection came free in time; retry shortly".into(),
            ),
            other => Self::Internal(anyhow::Error::new(other).context("database error")),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// `pub trait Name = A + B + …`: a trait that is the sum of others, implemented for every type
/// implementing them all (a trait alias, which stable Rust lacks), so the list is written once.
macro_rules! sum_of {
    ($(#[$doc:meta])* pub trait $name:ident = $first:ident $(+ $concern:ident)*) => {
        $(#[$doc])*
        pub trait $name: $first $(+ $concern)* + Send + Sync + 'static {}

        impl<T> $name for T where T: $first $(+ $concern)* + Send + Sync + 'static {}
    };
}

sum_of! {
    /// Everything the server keeps: one trait per concern. Implemented for every type that
    /// implements them all, so an `Arc<dyn Store>` reaches every method of each.
    pub trait Store = Connection
        + Chains
        + Runs
        + Baselines
        + Publications
        + Rollouts
        + Outbox
        + Releases
        + Fleet
        + Feedback
        + AuditLog
        + Access
        + Idempotency
        + ExportImport
}

/// Opens the store named by `url` (`sqlite:…` or `postgres://…`) and applies its migrations;
/// archive keys use the default prefix.
pub async fn connect(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    connect_with(url, DEFAULT_ARCHIVE_PREFIX).await
}

/// [`connect`], with the archive key prefix the outbox writes.
pub async fn connect_with(url: &str, archive_prefix: &str) -> anyhow::Result<Arc<dyn Store>> {
    let store: sql::SqlStore = if url.starts_with("sqlite:") {
        sqlite::open(url).await?
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        postgres::open(url).await?
    } else {
        anyhow::bail!("unsupported database URL {url:?}: use sqlite:PATH or postgres://…");
    };
    Ok(Arc::new(store.with_archive_prefix(archive_prefix)))
}
