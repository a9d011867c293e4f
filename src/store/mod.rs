//! Persistence behind one [`Store`] trait, returning core types.
//!
//! One SQL implementation ([`sql::SqlStore`]) serves both backends through sqlx's `Any` driver;
//! [`sqlite`] and [`postgres`] hold what differs: connecting, pragmas and migrations. The
//! backend is chosen from the URL scheme at start ([`connect`]).

pub mod postgres;
pub mod sql;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use budget_core::baseline::{BaselineDocument, BaselineState};
use budget_core::{RunData, Topology};
use serde::Serialize;

use crate::auth::Role;

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
            other => Self::Internal(anyhow::Error::new(other).context("database error")),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TopologyVersion {
    pub chain: String,
    pub version: i64,
    pub sha256: String,
    pub created_at: String,
    pub created_by: String,
    pub topology: Topology,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ChainSummary {
    pub name: String,
    pub topology_version: Option<i64>,
    pub current_baseline: Option<String>,
    pub revision: Option<i64>,
    pub drafts: i64,
    pub runs: i64,
    pub updated_at: String,
}

/// One uploaded file of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RunSource {
    /// The multipart part or file name, when known.
    pub name: Option<String>,
    pub format: String,
    pub sha256: String,
    pub size: i64,
}

/// A run to insert; the store assigns its id (`run-YYYYMMDD-NNN`).
#[derive(Debug, Clone)]
pub struct NewRun {
    /// Every file the run was read from.
    pub sources: Vec<RunSource>,
    /// How tool labels were mapped to segments (load-tool formats).
    pub mapping: Option<budget_core::ingest::mapping::Mapping>,
    pub chain: String,
    pub topology_version: i64,
    pub format: String,
    pub tool: Option<String>,
    pub note: Option<String>,
    pub source_sha256: String,
    pub source_size: i64,
    pub data: RunData,
    pub uploaded_by: String,
    /// The owner of the uploading token (four eyes compares owners).
    pub uploaded_by_owner: String,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StoredRun {
    pub id: String,
    pub chain: String,
    pub topology_version: i64,
    pub format: String,
    pub tool: Option<String>,
    pub note: Option<String>,
    pub source_sha256: String,
    pub source_size: i64,
    pub uploaded_by: String,
    /// The owner of the uploading token.
    #[serde(default)]
    pub uploaded_by_owner: String,
    pub created_at: String,
    pub sources: Vec<RunSource>,
    pub mapping: Option<budget_core::ingest::mapping::Mapping>,
    #[serde(skip_serializing, default)]
    pub data: RunData,
}

/// A baseline as stored: the parsed document and its canonical bytes.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct StoredBaseline {
    pub doc: BaselineDocument,
    pub bytes: String,
    pub sha256: String,
    /// Which token uploaded the run it was computed from.
    pub run_uploaded_by: String,
    /// The owner of that token (four eyes).
    #[serde(default)]
    pub run_uploaded_by_owner: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct BaselineSummary {
    pub id: String,
    pub chain: String,
    pub state: BaselineState,
    pub reason: String,
    pub run_id: String,
    pub topology_version: i64,
    pub has_errors: bool,
    pub created_at: String,
    pub created_by: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct Publication {
    pub revision: i64,
    pub chain: String,
    pub baseline_id: String,
    pub kind: String,
    pub created_by: String,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditEntry {
    pub id: i64,
    pub at: String,
    pub actor: String,
    pub action: String,
    pub chain: Option<String>,
    pub subject: Option<String>,
    pub detail: serde_json::Value,
}

/// What happened, by whom, to go into the audit log in the same transaction.
#[derive(Debug, Clone)]
pub struct Audit {
    pub actor: String,
    pub action: &'static str,
    pub chain: Option<String>,
    pub subject: Option<String>,
    pub detail: serde_json::Value,
    pub at: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TokenRecord {
    pub name: String,
    pub role: Role,
    /// The person or pipeline the token belongs to (defaults to its name).
    pub owner: String,
    pub created_at: String,
    pub created_by: String,
    /// The token's identity: the hash of its secret (never shown).
    #[serde(skip)]
    pub token_id: String,
}

/// A token to create: its secret is given as its hash only.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub name: String,
    pub role: Role,
    pub owner: String,
    pub hash: String,
}

/// What the fleet knows of one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentStatus {
    pub agent_id: String,
    pub service: String,
    pub labels: std::collections::BTreeMap<String, String>,
    /// The chains the agent receives.
    pub chains: Vec<String>,
    /// The replica it streams from (`host:port` of that replica's gRPC listener).
    pub replica: String,
    pub connected: bool,
    /// Last revision sent to it.
    pub delivered: i64,
    /// Last revision it accepted (ACK).
    pub acked: i64,
    /// Last revision it refused (NACK), and why.
    pub nack_revision: Option<i64>,
    pub nack_error: Option<String>,
    pub first_seen: String,
    pub last_seen: String,
    /// The name of the token the agent is bound to (none once that token is revoked).
    pub token: Option<String>,
    /// The identity of that token (its hash): only it may update this entry.
    #[serde(skip)]
    pub token_id: String,
}

/// Where a page of `GET /agents` starts: after this `(service, agent_id)`.
pub type AgentCursor = (String, String);

/// Where a page of a chain's baselines starts: after (older than) this `(created_at, id)`.
pub type BaselineCursor = (String, String);

/// The outcome of claiming an `agent_id` for a token ([`Store::claim_agent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentClaim {
    /// The id is this token's (now or already): its stored status, to continue from.
    Bound(Box<AgentStatus>),
    /// Another token that still exists holds the id.
    Taken,
}

/// One archive upload waiting in (or done through) the outbox.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct OutboxItem {
    pub id: i64,
    pub baseline_id: String,
    #[sqlx(rename = "object_key")]
    pub key: String,
    #[serde(skip)]
    pub body: String,
    pub sha256: String,
    /// `pending`, `done` or `superseded` (a newer item for the same key replaced it).
    pub state: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub next_attempt_at: String,
    pub created_at: String,
    pub archived_at: Option<String>,
}

/// A release citing a baseline.
#[derive(Debug, Clone, Serialize, serde::Deserialize, sqlx::FromRow)]
pub struct Release {
    pub id: i64,
    pub service: String,
    pub version: String,
    pub baseline_id: String,
    pub baseline_sha256: String,
    pub ticket: String,
    pub created_by: String,
    pub created_at: String,
}

#[derive(Debug, Clone)]
pub struct NewRelease {
    pub service: String,
    pub version: String,
    pub baseline_id: String,
    pub ticket: String,
}

/// The archive key layout: `{prefix}/{YYYY-MM-DD}/{name}`, the date being the baseline's UTC
/// creation date.
pub fn archive_key(prefix: &str, created_at: &str, name: &str) -> String {
    let date = created_at.get(..10).unwrap_or("unknown-date");
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        format!("{date}/{name}")
    } else {
        format!("{prefix}/{date}/{name}")
    }
}

/// The default archive prefix (the seed's `gov/bench/{date}/budget.json`).
pub const DEFAULT_ARCHIVE_PREFIX: &str = "gov/bench";

/// A stored response for an `Idempotency-Key`.
#[derive(Debug, Clone)]
pub struct IdemResponse {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// What the store holds for an `Idempotency-Key`.
#[derive(Debug, Clone)]
pub enum IdemLookup {
    /// Nothing committed under the key: run the request.
    Absent,
    /// A write committed under the key and its response was not kept (the request died
    /// between its commit and its answer): run the request again; every write of the store
    /// then answers the committed result instead of writing anew.
    Committed,
    /// The same key and request completed before: its response.
    Done(IdemResponse),
    /// The key was used with another request.
    Mismatch,
}

/// The `Idempotency-Key` of the request being served. The HTTP layer sets it around the
/// handler ([`with_idempotency`]); the first write transaction of that request records its
/// result under the key in the same transaction as its effect, or — when the key already
/// committed — returns that result and writes nothing. So a key is never stuck, and an
/// effect is never applied twice, whenever the request or the process dies.
#[derive(Debug)]
pub struct IdemClaim {
    /// Who the key belongs to: the token's identity (its hash), not its name.
    pub scope: String,
    pub key: String,
    /// SHA-256 of method, URI, content type and body.
    pub request_hash: String,
    /// Set once a write of this request has recorded (or replayed) under the key; later
    /// writes of the same request run normally.
    used: std::sync::atomic::AtomicBool,
}

impl IdemClaim {
    pub fn new(scope: String, key: String, request_hash: String) -> Self {
        Self {
            scope,
            key,
            request_hash,
            used: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

tokio::task_local! {
    static IDEMPOTENCY: Arc<IdemClaim>;
}

/// Runs `f` (a request's handler) with `claim` in scope of every store write it makes.
pub async fn with_idempotency<F: std::future::Future>(claim: IdemClaim, f: F) -> F::Output {
    IDEMPOTENCY.scope(Arc::new(claim), f).await
}

/// The claim in scope that no write of this request has used yet.
pub(crate) fn unused_claim() -> Option<Arc<IdemClaim>> {
    IDEMPOTENCY
        .try_with(Arc::clone)
        .ok()
        .filter(|c| !c.used.load(std::sync::atomic::Ordering::Acquire))
}

pub(crate) fn mark_used(claim: &IdemClaim) {
    claim.used.store(true, std::sync::atomic::Ordering::Release);
}

/// How a decision changes a draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Approve,
    Reject,
}

/// Result of a publication (approve or rollback).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Published {
    pub baseline: StoredBaseline,
    pub revision: i64,
    pub superseded: Option<String>,
}

/// How a column is read and written by export/import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    Text,
    Int,
}

/// One exported table: its name and columns, in the order they are written.
#[derive(Debug, Clone, Copy)]
pub struct ExportTable {
    pub name: &'static str,
    pub columns: &'static [(&'static str, ColumnKind)],
    /// An identity / AUTOINCREMENT `id` column whose sequence must follow the imported ids.
    pub identity: bool,
}

/// `format` of an export document.
pub const EXPORT_FORMAT: &str = "budgetd-export/1";

/// Every table `budgetd export` writes, in an order that satisfies the foreign keys
/// (idempotency keys are not exported: they are short-lived and tied to live clients).
pub const EXPORT_TABLES: &[ExportTable] = {
    use ColumnKind::{Int as I, Text as T};
    &[
        ExportTable {
            name: "chains",
            columns: &[("name", T), ("created_at", T), ("updated_at", T)],
            identity: false,
        },
        ExportTable {
            name: "topology_versions",
            columns: &[
                ("chain", T),
                ("version", I),
                ("document", T),
                ("sha256", T),
                ("created_at", T),
                ("created_by", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "runs",
            columns: &[
                ("id", T),
                ("chain", T),
                ("topology_version", I),
                ("format", T),
                ("tool", T),
                ("note", T),
                ("source_sha256", T),
                ("source_size", I),
                ("data", T),
                ("uploaded_by", T),
                ("created_at", T),
                ("sources", T),
                ("mapping", T),
                ("uploaded_by_owner", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "baselines",
            columns: &[
                ("id", T),
                ("chain", T),
                ("run_id", T),
                ("topology_version", I),
                ("state", T),
                ("reason", T),
                ("has_errors", I),
                ("document", T),
                ("sha256", T),
                ("created_at", T),
                ("created_by", T),
                ("updated_at", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "publications",
            columns: &[
                ("revision", I),
                ("chain", T),
                ("baseline_id", T),
                ("kind", T),
                ("created_by", T),
                ("created_at", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "approvals",
            columns: &[
                ("id", I),
                ("baseline_id", T),
                ("decision", T),
                ("actor", T),
                ("comment", T),
                ("created_at", T),
            ],
            identity: true,
        },
        ExportTable {
            name: "audit_log",
            columns: &[
                ("id", I),
                ("at", T),
                ("actor", T),
                ("action", T),
                ("chain", T),
                ("subject", T),
                ("detail", T),
            ],
            identity: true,
        },
        ExportTable {
            name: "api_tokens",
            columns: &[
                ("name", T),
                ("role", T),
                ("token_hash", T),
                ("created_at", T),
                ("created_by", T),
                ("owner", T),
            ],
            identity: false,
        },
        ExportTable {
            name: "counters",
            columns: &[("scope", T), ("n", I)],
            identity: false,
        },
        ExportTable {
            name: "archive_outbox",
            columns: &[
                ("id", I),
                ("baseline_id", T),
                ("object_key", T),
                ("body", T),
                ("sha256", T),
                ("state", T),
                ("attempts", I),
                ("last_error", T),
                ("next_attempt_at", T),
                ("locked_until", T),
                ("created_at", T),
                ("archived_at", T),
            ],
            identity: true,
        },
        ExportTable {
            name: "releases",
            columns: &[
                ("id", I),
                ("service", T),
                ("version", T),
                ("baseline_id", T),
                ("baseline_sha256", T),
                ("ticket", T),
                ("created_by", T),
                ("created_at", T),
            ],
            identity: true,
        },
        ExportTable {
            name: "agents",
            columns: &[
                ("agent_id", T),
                ("service", T),
                ("labels", T),
                ("chains", T),
                ("replica", T),
                ("connected", I),
                ("delivered", I),
                ("acked", I),
                ("nack_revision", I),
                ("nack_error", T),
                ("first_seen", T),
                ("last_seen", T),
                ("token_hash", T),
            ],
            identity: false,
        },
    ]
};

/// Columns added after the first export format, with the schema version that added them: an
/// export from an older schema lacks them and imports them as null (which the store reads as
/// the old meaning: a token's owner is its name, a run's uploader owner the token name, an
/// agent unbound).
pub const ADDED_COLUMNS: &[(&str, &str, i64)] = &[
    ("runs", "uploaded_by_owner", 5),
    ("api_tokens", "owner", 5),
    ("agents", "token_hash", 5),
];

/// A whole-store export as read back: what `export_all` writes.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Export {
    /// [`EXPORT_FORMAT`].
    pub format: String,
    /// The newest migration applied to the exported store.
    pub schema_version: i64,
    pub exported_at: String,
    /// `sqlite` or `postgres`.
    pub backend: String,
    pub tables: std::collections::BTreeMap<String, ExportedTable>,
}

/// One table of an [`Export`]: column names and rows (one JSON value per column: a string,
/// an integer or null).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ExportedTable {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
}

/// Rows per table, as exported or imported.
pub type TableCounts = Vec<(&'static str, u64)>;

/// Called with a table name and how many of its rows are done so far (progress reports).
pub type Progress<'a> = &'a (dyn Fn(&str, u64) + Send + Sync);

/// Connections of the store's pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PoolStatus {
    /// Open connections (idle + in use).
    pub size: u32,
    pub idle: u32,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which backend this is: `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    async fn ping(&self) -> StoreResult<()>;

    /// Stores a topology version; same content as the latest → the latest, `false`.
    async fn put_topology(
        &self,
        chain: &str,
        topology: &Topology,
        audit: Audit,
    ) -> StoreResult<(TopologyVersion, bool)>;
    async fn get_topology(&self, chain: &str, version: Option<i64>)
        -> StoreResult<TopologyVersion>;
    async fn list_chains(&self) -> StoreResult<Vec<ChainSummary>>;

    /// Inserts a run and, when given, a draft computed from it, in one transaction.
    /// `expect_current` is the approved baseline the caller compared against; if another is
    /// current now, nothing is written and `Conflict` is returned so the caller can recompute.
    async fn insert_run(
        &self,
        run: NewRun,
        draft: Option<BaselineDocument>,
        expect_current: Option<String>,
        audit: Audit,
    ) -> StoreResult<(StoredRun, Option<StoredBaseline>)>;
    async fn get_run(&self, chain: &str, id: &str) -> StoreResult<StoredRun>;
    async fn list_runs(&self, chain: &str, limit: i64) -> StoreResult<Vec<StoredRun>>;
    /// Whether the chain has any run yet.
    async fn run_count(&self, chain: &str) -> StoreResult<i64>;

    /// Inserts a draft; the store assigns its id (`bl-YYYYMMDD-NNN`, date of `created_at`).
    async fn insert_baseline(
        &self,
        draft: BaselineDocument,
        audit: Audit,
    ) -> StoreResult<StoredBaseline>;
    async fn get_baseline(&self, id: &str) -> StoreResult<StoredBaseline>;
    /// A page of a chain's baselines, newest first: at most `limit`, older than `before`.
    async fn list_baselines(
        &self,
        chain: &str,
        state: Option<BaselineState>,
        before: Option<&BaselineCursor>,
        limit: i64,
    ) -> StoreResult<Vec<BaselineSummary>>;
    /// The chain's approved baseline, if any.
    async fn current_baseline(&self, chain: &str) -> StoreResult<Option<StoredBaseline>>;

    /// Approves or rejects a draft. `Conflict` when it is no longer a draft.
    async fn decide(
        &self,
        id: &str,
        verdict: Verdict,
        comment: Option<String>,
        audit: Audit,
    ) -> StoreResult<(StoredBaseline, Option<Published>)>;
    /// Makes a superseded baseline of `chain` approved again and publishes it.
    async fn rollback(&self, chain: &str, id: &str, audit: Audit) -> StoreResult<Published>;
    /// The latest publication of a chain.
    async fn latest_publication(&self, chain: &str) -> StoreResult<Option<Publication>>;

    /// Each chain's latest publication with a revision above `after`, with its baseline.
    async fn latest_publications(
        &self,
        after: i64,
    ) -> StoreResult<Vec<(Publication, StoredBaseline)>>;

    /// The latest publication of a baseline (approve or rollback), if it was ever published.
    async fn baseline_publication(&self, baseline_id: &str) -> StoreResult<Option<Publication>>;

    /// Claims up to `limit` due outbox items for this worker until `lease_until`. Items whose
    /// key has another upload in flight are skipped, so the newest bytes always land last and
    /// no two workers upload the same item at once.
    async fn archive_claim(
        &self,
        now: &str,
        lease_until: &str,
        limit: i64,
    ) -> StoreResult<Vec<OutboxItem>>;
    async fn archive_done(&self, id: i64, now: &str) -> StoreResult<()>;
    async fn archive_failed(&self, id: i64, error: &str, next_attempt_at: &str) -> StoreResult<()>;
    /// Queues an upload of `body` at `key` (backfill); older pending items for the key are
    /// superseded.
    async fn archive_enqueue(
        &self,
        baseline_id: &str,
        key: &str,
        body: &str,
        now: &str,
    ) -> StoreResult<()>;
    /// Every outbox item of a baseline, oldest first.
    async fn archive_items(&self, baseline_id: &str) -> StoreResult<Vec<OutboxItem>>;
    /// Pending items and the creation time of the oldest one.
    async fn archive_backlog(&self) -> StoreResult<(i64, Option<String>)>;
    /// Baselines created on `date` (`YYYY-MM-DD`), or all, oldest first.
    async fn baselines_created_on(&self, date: Option<&str>) -> StoreResult<Vec<StoredBaseline>>;

    async fn create_release(
        &self,
        release: NewRelease,
        sha256: &str,
        audit: Audit,
    ) -> StoreResult<Release>;
    async fn list_releases(
        &self,
        baseline_id: Option<&str>,
        service: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<Release>>;

    /// Binds `agent.agent_id` to the token `agent.token_id` — inserting `agent` as its entry
    /// — unless a token that still exists holds it: then `Taken`, and nothing changes. An
    /// entry of a revoked token, or an unbound one, is taken over.
    async fn claim_agent(&self, agent: &AgentStatus) -> StoreResult<AgentClaim>;
    /// The identity of the token `agent_id` is bound to, if that token still exists.
    async fn agent_token(&self, agent_id: &str) -> StoreResult<Option<String>>;
    /// Records agents' status: inserts new entries, updates those bound to the same token
    /// (an entry bound to another token is left alone).
    async fn upsert_agents(&self, agents: &[AgentStatus]) -> StoreResult<()>;
    /// A page of the agents last seen at or after `seen_since`, by service and id: at most
    /// `limit`, after `after`.
    async fn list_agents(
        &self,
        seen_since: &str,
        after: Option<&AgentCursor>,
        limit: i64,
    ) -> StoreResult<Vec<AgentStatus>>;
    /// Forgets agents last seen before `cutoff`; returns how many.
    async fn expire_agents(&self, cutoff: &str) -> StoreResult<u64>;

    async fn audit_log(
        &self,
        chain: Option<&str>,
        limit: i64,
        before: Option<i64>,
    ) -> StoreResult<Vec<AuditEntry>>;

    async fn create_token(&self, token: &NewToken, audit: Audit) -> StoreResult<TokenRecord>;
    /// Rotation: creates `new_name` (secret hash `hash`) with the role and owner of the token
    /// `name`, which stays valid until revoked.
    async fn rotate_token(
        &self,
        name: &str,
        new_name: &str,
        hash: &str,
        audit: Audit,
    ) -> StoreResult<TokenRecord>;
    /// Creates or replaces a token (start-up bootstrap of the admin token); a new token's
    /// owner is its name.
    async fn upsert_token(
        &self,
        name: &str,
        role: Role,
        hash: &str,
        audit: Audit,
    ) -> StoreResult<()>;
    async fn revoke_token(&self, name: &str, audit: Audit) -> StoreResult<()>;
    async fn find_token(&self, hash: &str) -> StoreResult<Option<TokenRecord>>;
    async fn list_tokens(&self) -> StoreResult<Vec<TokenRecord>>;

    /// What is stored under `key` for `scope`, compared with `request_hash`.
    async fn idem_lookup(
        &self,
        scope: &str,
        key: &str,
        request_hash: &str,
    ) -> StoreResult<IdemLookup>;
    /// Keeps the response of a request whose write committed under `key`, for repeats.
    async fn idem_finish(&self, scope: &str, key: &str, response: &IdemResponse)
        -> StoreResult<()>;
    /// Forgets keys created before `cutoff`; returns how many.
    async fn idem_expire(&self, cutoff: &str) -> StoreResult<u64>;

    /// Open and idle connections of the pool (for `/metrics`).
    fn pool_status(&self) -> PoolStatus;

    /// Writes every table of [`EXPORT_TABLES`] to `out` as one [`Export`] JSON document, from
    /// one consistent snapshot, row by row (never the whole store in memory).
    async fn export_all(
        &self,
        out: &mut (dyn std::io::Write + Send),
        progress: Progress<'_>,
    ) -> StoreResult<TableCounts>;

    /// Loads an [`Export`] into this store in one transaction, keeping ids, revisions and
    /// counters; identity sequences continue after the imported ids. `Conflict` when the
    /// store is not empty.
    async fn import_all(&self, export: &Export, progress: Progress<'_>)
        -> StoreResult<TableCounts>;
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
