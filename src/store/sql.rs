//! The one SQL implementation of [`Store`], over sqlx's `Any` pool (SQLite or PostgreSQL).
//!
//! Every statement is plain SQL both backends accept (`$N` placeholders, `ON CONFLICT`,
//! `RETURNING`). Every transaction that changes a chain first touches the chain's row, which
//! serialises writers per chain on PostgreSQL (row lock) and takes SQLite's write lock at
//! once; counters (`bl-…` ids, publication revisions) are rows updated in the same
//! transaction, so ids are unique and revisions increase in commit order across processes.

use async_trait::async_trait;
use budget_core::baseline::{BaselineDocument, BaselineState, Decision};
use budget_core::{RunData, Topology};
use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, FromRow, Row, Transaction};

use super::*;
use crate::auth::Role;

#[derive(Debug, Clone)]
pub struct SqlStore {
    pool: AnyPool,
    backend: &'static str,
    archive_prefix: String,
}

type Tx = Transaction<'static, Any>;

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

fn internal(e: impl Into<anyhow::Error>) -> StoreError {
    StoreError::Internal(e.into())
}

/// `2026-11-30T06:00:00.000Z` → `20261130`.
fn compact_date(rfc3339: &str) -> String {
    rfc3339.get(..10).unwrap_or_default().replace('-', "")
}

impl SqlStore {
    pub(super) fn new(pool: AnyPool, backend: &'static str) -> Self {
        Self {
            pool,
            backend,
            archive_prefix: DEFAULT_ARCHIVE_PREFIX.to_owned(),
        }
    }

    pub fn with_archive_prefix(mut self, prefix: &str) -> Self {
        self.archive_prefix = prefix.trim_matches('/').to_owned();
        self
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The newest publication where `column` (`chain` or `baseline_id`) equals `value`.
    async fn one_publication(
        &self,
        column: &'static str,
        value: &str,
    ) -> StoreResult<Option<Publication>> {
        let row = sqlx::query(&format!(
            "SELECT revision, chain, baseline_id, kind, created_by, created_at FROM publications \
             WHERE {column} = $1 ORDER BY revision DESC LIMIT 1"
        ))
        .bind(value)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(publication_from_row).transpose()
    }

    async fn begin(&self) -> StoreResult<Tx> {
        Ok(self.pool.begin().await?)
    }
}

async fn lock_chain(tx: &mut Tx, chain: &str, now: &str) -> StoreResult<()> {
    let done = sqlx::query("UPDATE chains SET updated_at = $2 WHERE name = $1")
        .bind(chain)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::NotFound(format!("chain {chain:?}")));
    }
    Ok(())
}

async fn next_counter(tx: &mut Tx, scope: &str) -> StoreResult<i64> {
    let row = sqlx::query(
        "INSERT INTO counters (scope, n) VALUES ($1, 1) \
         ON CONFLICT (scope) DO UPDATE SET n = counters.n + 1 RETURNING n",
    )
    .bind(scope)
    .fetch_one(&mut **tx)
    .await?;
    Ok(row.try_get(0)?)
}

async fn write_audit(tx: &mut Tx, a: &Audit) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO audit_log (at, actor, action, chain, subject, detail) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&a.at)
    .bind(&a.actor)
    .bind(a.action)
    .bind(a.chain.clone())
    .bind(a.subject.clone())
    .bind(a.detail.to_string())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// With an `Idempotency-Key` in scope ([`with_idempotency`]): the result this key already
/// committed — the caller then writes nothing and answers it — or `Conflict` when the key
/// committed another request. Called after the chain's row is locked, so a concurrent
/// repeat on another connection sees the first one's commit.
async fn replayed<T: serde::de::DeserializeOwned>(tx: &mut Tx) -> StoreResult<Option<T>> {
    let Some(claim) = unused_claim() else {
        return Ok(None);
    };
    let row = sqlx::query(
        "SELECT request_hash, result FROM idempotency_keys WHERE principal = $1 AND key = $2",
    )
    .bind(&claim.scope)
    .bind(&claim.key)
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else { return Ok(None) };
    if row.try_get::<String, _>("request_hash")? != claim.request_hash {
        return Err(StoreError::Conflict(format!(
            "Idempotency-Key {:?} was already used with a different request",
            claim.key
        )));
    }
    let Some(result) = row.try_get::<Option<String>, _>("result")? else {
        return Ok(None);
    };
    mark_used(&claim);
    serde_json::from_str(&result).map(Some).map_err(internal)
}

/// Commits `tx`, first recording `result` under the request's `Idempotency-Key` (if any) in
/// the same transaction: the key's record exists exactly when the effect does.
async fn commit<T: Serialize>(mut tx: Tx, result: T) -> StoreResult<T> {
    if let Some(claim) = unused_claim() {
        let json = serde_json::to_string(&result).map_err(internal)?;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        sqlx::query(
            "INSERT INTO idempotency_keys (principal, key, request_hash, result, created_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&claim.scope)
        .bind(&claim.key)
        .bind(&claim.request_hash)
        .bind(json)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        mark_used(&claim);
    }
    tx.commit().await?;
    Ok(result)
}

/// Queues `body` for upload at `key`; older pending items of the key are superseded.
async fn enqueue(
    tx: &mut Tx,
    baseline_id: &str,
    key: &str,
    body: &str,
    now: &str,
) -> StoreResult<()> {
    sqlx::query("UPDATE archive_outbox SET state = 'superseded' WHERE object_key = $1 AND state = 'pending'")
        .bind(key)
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO archive_outbox (baseline_id, object_key, body, sha256, state, attempts, next_attempt_at, created_at) \
         VALUES ($1, $2, $3, $4, 'pending', 0, $5, $5)",
    )
    .bind(baseline_id)
    .bind(key)
    .bind(body)
    .bind(sha256_hex(body.as_bytes()))
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Archives the current document of a baseline at `{prefix}/{date}/{id}.json`.
async fn archive_document(
    tx: &mut Tx,
    prefix: &str,
    stored: &StoredBaseline,
    now: &str,
) -> StoreResult<()> {
    let key = archive_key(
        prefix,
        &stored.doc.created_at,
        &format!("{}.json", stored.doc.id),
    );
    enqueue(tx, &stored.doc.id, &key, &stored.bytes, now).await
}

/// An approval (or rollback) also writes the seed's `{prefix}/{date}/budget.json`.
async fn archive_budget(
    tx: &mut Tx,
    prefix: &str,
    stored: &StoredBaseline,
    now: &str,
) -> StoreResult<()> {
    let key = archive_key(prefix, &stored.doc.created_at, "budget.json");
    enqueue(tx, &stored.doc.id, &key, &stored.bytes, now).await
}

const BASELINE_COLUMNS: &str =
    "b.document, b.sha256, r.uploaded_by, COALESCE(r.uploaded_by_owner, r.uploaded_by) AS uploaded_by_owner";

fn baseline_from_row(row: &AnyRow) -> StoreResult<StoredBaseline> {
    let bytes: String = row.try_get(0)?;
    let doc: BaselineDocument = serde_json::from_str(&bytes).map_err(|e| {
        internal(anyhow::Error::new(e).context("stored baseline document is not valid"))
    })?;
    Ok(StoredBaseline {
        doc,
        bytes,
        sha256: row.try_get(1)?,
        run_uploaded_by: row.try_get(2)?,
        run_uploaded_by_owner: row.try_get(3)?,
    })
}

async fn fetch_baseline(tx: &mut Tx, id: &str) -> StoreResult<StoredBaseline> {
    let row = sqlx::query(&format!(
        "SELECT {BASELINE_COLUMNS} FROM baselines b JOIN runs r ON r.id = b.run_id WHERE b.id = $1"
    ))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("baseline {id:?}")))?;
    baseline_from_row(&row)
}

/// Allocates the id, renders the document and inserts it.
async fn insert_baseline_tx(
    tx: &mut Tx,
    prefix: &str,
    mut doc: BaselineDocument,
    (run_uploaded_by, run_uploaded_by_owner): (String, String),
) -> StoreResult<StoredBaseline> {
    let day = compact_date(&doc.created_at);
    let n = next_counter(tx, &format!("bl-{day}")).await?;
    doc.id = format!("bl-{day}-{n:03}");
    doc.state = BaselineState::Draft;
    let bytes = String::from_utf8(doc.to_bytes()).map_err(internal)?;
    let sha256 = sha256_hex(bytes.as_bytes());
    let reason = serde_json::to_value(doc.reason).map_err(internal)?;
    sqlx::query(
        "INSERT INTO baselines (id, chain, run_id, topology_version, state, reason, has_errors, document, sha256, created_at, created_by, updated_at) \
         VALUES ($1, $2, $3, $4, 'draft', $5, $6, $7, $8, $9, $10, $9)",
    )
    .bind(&doc.id)
    .bind(&doc.chain)
    .bind(&doc.run_id)
    .bind(doc.topology_version)
    .bind(reason.as_str().unwrap_or_default().to_owned())
    .bind(i64::from(doc.has_errors()))
    .bind(&bytes)
    .bind(&sha256)
    .bind(&doc.created_at)
    .bind(&doc.created_by)
    .execute(&mut **tx)
    .await?;
    let stored = StoredBaseline {
        doc,
        bytes,
        sha256,
        run_uploaded_by,
        run_uploaded_by_owner,
    };
    archive_document(tx, prefix, &stored, &stored.doc.created_at).await?;
    Ok(stored)
}

/// Moves a baseline to `state` (re-rendering its document) if it is in `from` now.
async fn transition(
    tx: &mut Tx,
    prefix: &str,
    id: &str,
    from: BaselineState,
    to: BaselineState,
    decision: Option<Decision>,
    now: &str,
) -> StoreResult<StoredBaseline> {
    let mut stored = fetch_baseline(tx, id).await?;
    if stored.doc.state != from {
        return Err(StoreError::Conflict(format!(
            "baseline {id} is {}, not {}",
            stored.doc.state.as_str(),
            from.as_str()
        )));
    }
    stored.doc.state = to;
    if decision.is_some() {
        stored.doc.decision = decision;
    }
    stored.bytes = String::from_utf8(stored.doc.to_bytes()).map_err(internal)?;
    stored.sha256 = sha256_hex(stored.bytes.as_bytes());
    let done = sqlx::query(
        "UPDATE baselines SET state = $2, document = $3, sha256 = $4, updated_at = $5 WHERE id = $1 AND state = $6",
    )
    .bind(id)
    .bind(to.as_str())
    .bind(&stored.bytes)
    .bind(&stored.sha256)
    .bind(now)
    .bind(from.as_str())
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() != 1 {
        return Err(StoreError::Conflict(format!(
            "baseline {id} changed state concurrently"
        )));
    }
    archive_document(tx, prefix, &stored, now).await?;
    Ok(stored)
}

async fn current_id(tx: &mut Tx, chain: &str) -> StoreResult<Option<String>> {
    let row = sqlx::query("SELECT id FROM baselines WHERE chain = $1 AND state = 'approved'")
        .bind(chain)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
}

/// The PostgreSQL channel every replica listens on; the payload is the new revision.
pub const PUBLICATION_CHANNEL: &str = "budgetd_publications";

async fn publish(
    tx: &mut Tx,
    backend: &str,
    chain: &str,
    baseline_id: &str,
    kind: &str,
    audit: &Audit,
) -> StoreResult<i64> {
    let revision = next_counter(tx, "publication").await?;
    // Taken under the counter's row lock, so a later revision never gets an earlier time —
    // also across replicas whose clocks differ a little.
    let previous: Option<String> =
        sqlx::query_scalar("SELECT created_at FROM publications ORDER BY revision DESC LIMIT 1")
            .fetch_optional(&mut **tx)
            .await?;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let created_at = previous.filter(|p| *p > now).unwrap_or(now);
    if backend == "postgres" {
        // Delivered to every replica's listener when this transaction commits.
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(PUBLICATION_CHANNEL)
            .bind(revision.to_string())
            .execute(&mut **tx)
            .await?;
    }
    sqlx::query(
        "INSERT INTO publications (revision, chain, baseline_id, kind, created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(revision)
    .bind(chain)
    .bind(baseline_id)
    .bind(kind)
    .bind(&audit.actor)
    .bind(&created_at)
    .execute(&mut **tx)
    .await?;
    Ok(revision)
}

fn topology_from_row(row: &AnyRow) -> StoreResult<TopologyVersion> {
    let document: String = row.try_get("document")?;
    Ok(TopologyVersion {
        chain: row.try_get("chain")?,
        version: row.try_get("version")?,
        sha256: row.try_get("sha256")?,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        topology: serde_json::from_str(&document).map_err(internal)?,
    })
}

const RUN_COLUMNS: &str =
    "id, chain, topology_version, format, tool, note, source_sha256, source_size, data, uploaded_by, created_at, sources, mapping, uploaded_by_owner";

fn run_from_row(row: &AnyRow) -> StoreResult<StoredRun> {
    let data: String = row.try_get("data")?;
    let uploaded_by: String = row.try_get("uploaded_by")?;
    Ok(StoredRun {
        id: row.try_get("id")?,
        chain: row.try_get("chain")?,
        topology_version: row.try_get("topology_version")?,
        format: row.try_get("format")?,
        tool: row.try_get("tool")?,
        note: row.try_get("note")?,
        source_sha256: row.try_get("source_sha256")?,
        source_size: row.try_get("source_size")?,
        // Null only in a store imported from an export older than owners: the token name.
        uploaded_by_owner: row
            .try_get::<Option<String>, _>("uploaded_by_owner")?
            .unwrap_or_else(|| uploaded_by.clone()),
        uploaded_by,
        created_at: row.try_get("created_at")?,
        sources: serde_json::from_str(&row.try_get::<String, _>("sources")?).map_err(internal)?,
        mapping: row
            .try_get::<Option<String>, _>("mapping")?
            .map(|m| serde_json::from_str(&m))
            .transpose()
            .map_err(internal)?,
        data: serde_json::from_str::<RunData>(&data).map_err(internal)?,
    })
}

fn publication_from_row(r: &AnyRow) -> StoreResult<Publication> {
    Ok(Publication::from_row(r)?)
}

const OUTBOX_COLUMNS: &str =
    "id, baseline_id, object_key, body, sha256, state, attempts, last_error, next_attempt_at, created_at, archived_at";

fn outbox_from_row(r: &AnyRow) -> StoreResult<OutboxItem> {
    Ok(OutboxItem::from_row(r)?)
}

/// `owner` is null only in a store imported from an export older than owners: the name.
const TOKEN_COLUMNS: &str =
    "name, role, COALESCE(owner, name) AS owner, created_at, created_by, token_hash";

fn token_from_row(row: &AnyRow) -> StoreResult<TokenRecord> {
    let role: String = row.try_get("role")?;
    Ok(TokenRecord {
        name: row.try_get("name")?,
        role: Role::parse(&role)
            .ok_or_else(|| internal(anyhow::anyhow!("unknown role {role:?} in store")))?,
        owner: row.try_get("owner")?,
        created_at: row.try_get("created_at")?,
        created_by: row.try_get("created_by")?,
        token_id: row.try_get("token_hash")?,
    })
}

/// Inserts a token; `Conflict` when the name is taken.
async fn insert_token(tx: &mut Tx, token: &NewToken, audit: &Audit) -> StoreResult<TokenRecord> {
    let done = sqlx::query(
        "INSERT INTO api_tokens (name, role, token_hash, created_at, created_by, owner) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(&token.name)
    .bind(token.role.as_str())
    .bind(&token.hash)
    .bind(&audit.at)
    .bind(&audit.actor)
    .bind(&token.owner)
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Conflict(format!(
            "a token named {:?} already exists",
            token.name
        )));
    }
    Ok(TokenRecord {
        name: token.name.clone(),
        role: token.role,
        owner: token.owner.clone(),
        created_at: audit.at.clone(),
        created_by: audit.actor.clone(),
        token_id: token.hash.clone(),
    })
}

/// An agent's entry with the name of the token it is bound to (if that token still exists).
const AGENT_SELECT: &str =
    "SELECT a.agent_id, a.service, a.labels, a.chains, a.replica, a.connected, a.delivered, a.acked, \
       a.nack_revision, a.nack_error, a.first_seen, a.last_seen, a.token_hash, t.name AS token \
     FROM agents a LEFT JOIN api_tokens t ON t.token_hash = a.token_hash";

fn agent_from_row(r: &AnyRow) -> StoreResult<AgentStatus> {
    let labels: String = r.try_get("labels")?;
    let chains: String = r.try_get("chains")?;
    Ok(AgentStatus {
        agent_id: r.try_get("agent_id")?,
        service: r.try_get("service")?,
        labels: serde_json::from_str(&labels).unwrap_or_default(),
        chains: chains
            .split(',')
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect(),
        replica: r.try_get("replica")?,
        connected: r.try_get::<i64, _>("connected")? != 0,
        delivered: r.try_get("delivered")?,
        acked: r.try_get("acked")?,
        nack_revision: r.try_get("nack_revision")?,
        nack_error: r.try_get("nack_error")?,
        first_seen: r.try_get("first_seen")?,
        last_seen: r.try_get("last_seen")?,
        token: r.try_get("token")?,
        token_id: r
            .try_get::<Option<String>, _>("token_hash")?
            .unwrap_or_default(),
    })
}

#[async_trait]
impl Store for SqlStore {
    fn backend(&self) -> &'static str {
        self.backend
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn put_topology(
        &self,
        chain: &str,
        topology: &Topology,
        audit: Audit,
    ) -> StoreResult<(TopologyVersion, bool)> {
        let document = serde_json::to_string(topology).map_err(internal)?;
        let sha256 = sha256_hex(document.as_bytes());
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO chains (name, created_at, updated_at) VALUES ($1, $2, $2) \
             ON CONFLICT (name) DO UPDATE SET updated_at = $2",
        )
        .bind(chain)
        .bind(&audit.at)
        .execute(&mut *tx)
        .await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let latest = sqlx::query(
            "SELECT chain, version, document, sha256, created_at, created_by FROM topology_versions \
             WHERE chain = $1 ORDER BY version DESC LIMIT 1",
        )
        .bind(chain)
        .fetch_optional(&mut *tx)
        .await?;
        let next = match &latest {
            Some(row) => {
                let current = topology_from_row(row)?;
                if current.sha256 == sha256 {
                    tx.rollback().await?;
                    return Ok((current, false));
                }
                current.version + 1
            }
            None => 1,
        };
        sqlx::query(
            "INSERT INTO topology_versions (chain, version, document, sha256, created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(chain)
        .bind(next)
        .bind(&document)
        .bind(&sha256)
        .bind(&audit.at)
        .bind(&audit.actor)
        .execute(&mut *tx)
        .await?;
        let mut audit = audit;
        audit.subject = Some(format!("topology v{next}"));
        write_audit(&mut tx, &audit).await?;
        let version = TopologyVersion {
            chain: chain.to_owned(),
            version: next,
            sha256,
            created_at: audit.at.clone(),
            created_by: audit.actor.clone(),
            topology: topology.clone(),
        };
        commit(tx, (version, true)).await
    }

    async fn get_topology(
        &self,
        chain: &str,
        version: Option<i64>,
    ) -> StoreResult<TopologyVersion> {
        let row = sqlx::query(
            "SELECT chain, version, document, sha256, created_at, created_by FROM topology_versions \
             WHERE chain = $1 AND ($2 < 0 OR version = $2) ORDER BY version DESC LIMIT 1",
        )
        .bind(chain)
        .bind(version.unwrap_or(-1))
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => topology_from_row(&row),
            None => Err(StoreError::NotFound(match version {
                Some(v) => format!("topology version {v} of chain {chain:?}"),
                None => format!("chain {chain:?}"),
            })),
        }
    }

    async fn list_chains(&self) -> StoreResult<Vec<ChainSummary>> {
        let rows = sqlx::query(
            "SELECT c.name, c.updated_at, \
               (SELECT MAX(t.version) FROM topology_versions t WHERE t.chain = c.name) AS topology_version, \
               (SELECT b.id FROM baselines b WHERE b.chain = c.name AND b.state = 'approved') AS current_baseline, \
               (SELECT MAX(p.revision) FROM publications p WHERE p.chain = c.name) AS revision, \
               (SELECT COUNT(*) FROM baselines b WHERE b.chain = c.name AND b.state = 'draft') AS drafts, \
               (SELECT COUNT(*) FROM runs r WHERE r.chain = c.name) AS runs \
             FROM chains c ORDER BY c.name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok(ChainSummary::from_row(r)?))
            .collect()
    }

    async fn insert_run(
        &self,
        run: NewRun,
        draft: Option<BaselineDocument>,
        expect_current: Option<String>,
        audit: Audit,
    ) -> StoreResult<(StoredRun, Option<StoredBaseline>)> {
        let mut tx = self.begin().await?;
        lock_chain(&mut tx, &run.chain, &run.created_at).await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let current = current_id(&mut tx, &run.chain).await?;
        if current != expect_current {
            return Err(StoreError::Conflict(format!(
                "the approved baseline of {:?} changed while the run was compared",
                run.chain
            )));
        }
        let day = compact_date(&run.created_at);
        let n = next_counter(&mut tx, &format!("run-{day}")).await?;
        let id = format!("run-{day}-{n:03}");
        let data = serde_json::to_string(&run.data).map_err(internal)?;
        sqlx::query(&format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        ))
        .bind(&id)
        .bind(&run.chain)
        .bind(run.topology_version)
        .bind(&run.format)
        .bind(run.tool.clone())
        .bind(run.note.clone())
        .bind(&run.source_sha256)
        .bind(run.source_size)
        .bind(&data)
        .bind(&run.uploaded_by)
        .bind(&run.created_at)
        .bind(serde_json::to_string(&run.sources).map_err(internal)?)
        .bind(
            run.mapping
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(internal)?,
        )
        .bind(&run.uploaded_by_owner)
        .execute(&mut *tx)
        .await?;
        let baseline = match draft {
            Some(mut doc) => {
                doc.run_id = id.clone();
                Some(
                    insert_baseline_tx(
                        &mut tx,
                        &self.archive_prefix,
                        doc,
                        (run.uploaded_by.clone(), run.uploaded_by_owner.clone()),
                    )
                    .await?,
                )
            }
            None => None,
        };
        let mut audit = audit;
        audit.subject = Some(id.clone());
        if let Some(b) = &baseline {
            audit.detail["baseline_id"] = b.doc.id.clone().into();
        }
        write_audit(&mut tx, &audit).await?;
        let stored = StoredRun {
            id,
            chain: run.chain,
            topology_version: run.topology_version,
            format: run.format,
            tool: run.tool,
            note: run.note,
            source_sha256: run.source_sha256,
            source_size: run.source_size,
            uploaded_by: run.uploaded_by,
            uploaded_by_owner: run.uploaded_by_owner,
            created_at: run.created_at,
            sources: run.sources,
            mapping: run.mapping,
            data: run.data,
        };
        commit(tx, (stored, baseline)).await
    }

    async fn get_run(&self, chain: &str, id: &str) -> StoreResult<StoredRun> {
        let row = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 AND chain = $2"
        ))
        .bind(id)
        .bind(chain)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("run {id:?} of chain {chain:?}")))?;
        run_from_row(&row)
    }

    async fn list_runs(&self, chain: &str, limit: i64) -> StoreResult<Vec<StoredRun>> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE chain = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
        ))
        .bind(chain)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn run_count(&self, chain: &str) -> StoreResult<i64> {
        let row = sqlx::query("SELECT COUNT(*) FROM runs WHERE chain = $1")
            .bind(chain)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get(0)?)
    }

    async fn insert_baseline(
        &self,
        draft: BaselineDocument,
        audit: Audit,
    ) -> StoreResult<StoredBaseline> {
        let mut tx = self.begin().await?;
        lock_chain(&mut tx, &draft.chain, &draft.created_at).await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let row = sqlx::query(
            "SELECT uploaded_by, COALESCE(uploaded_by_owner, uploaded_by) FROM runs WHERE id = $1",
        )
        .bind(&draft.run_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("run {:?}", draft.run_id)))?;
        let uploader = (row.try_get(0)?, row.try_get(1)?);
        let stored = insert_baseline_tx(&mut tx, &self.archive_prefix, draft, uploader).await?;
        let mut audit = audit;
        audit.subject = Some(stored.doc.id.clone());
        write_audit(&mut tx, &audit).await?;
        commit(tx, stored).await
    }

    async fn get_baseline(&self, id: &str) -> StoreResult<StoredBaseline> {
        let row = sqlx::query(&format!(
            "SELECT {BASELINE_COLUMNS} FROM baselines b JOIN runs r ON r.id = b.run_id WHERE b.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("baseline {id:?}")))?;
        baseline_from_row(&row)
    }

    async fn list_baselines(
        &self,
        chain: &str,
        state: Option<BaselineState>,
        before: Option<&BaselineCursor>,
        limit: i64,
    ) -> StoreResult<Vec<BaselineSummary>> {
        let (before_at, before_id) = before.map_or(("", ""), |(at, id)| (at, id));
        let rows = sqlx::query(
            "SELECT id, chain, state, reason, run_id, topology_version, has_errors, created_at, created_by, updated_at \
             FROM baselines WHERE chain = $1 AND ($2 = '' OR state = $2) \
             AND ($3 = '' OR created_at < $3 OR (created_at = $3 AND id < $4)) \
             ORDER BY created_at DESC, id DESC LIMIT $5",
        )
        .bind(chain)
        .bind(state.map_or("", |s| s.as_str()))
        .bind(before_at)
        .bind(before_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let state: String = r.try_get("state")?;
                Ok(BaselineSummary {
                    id: r.try_get("id")?,
                    chain: r.try_get("chain")?,
                    state: BaselineState::parse(&state)
                        .ok_or_else(|| internal(anyhow::anyhow!("bad state {state:?}")))?,
                    reason: r.try_get("reason")?,
                    run_id: r.try_get("run_id")?,
                    topology_version: r.try_get("topology_version")?,
                    has_errors: r.try_get::<i64, _>("has_errors")? != 0,
                    created_at: r.try_get("created_at")?,
                    created_by: r.try_get("created_by")?,
                    updated_at: r.try_get("updated_at")?,
                })
            })
            .collect()
    }

    async fn current_baseline(&self, chain: &str) -> StoreResult<Option<StoredBaseline>> {
        let row = sqlx::query(&format!(
            "SELECT {BASELINE_COLUMNS} FROM baselines b JOIN runs r ON r.id = b.run_id \
             WHERE b.chain = $1 AND b.state = 'approved'"
        ))
        .bind(chain)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(baseline_from_row).transpose()
    }

    async fn decide(
        &self,
        id: &str,
        verdict: Verdict,
        comment: Option<String>,
        audit: Audit,
    ) -> StoreResult<(StoredBaseline, Option<Published>)> {
        let chain: String = sqlx::query("SELECT chain FROM baselines WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("baseline {id:?}")))?
            .try_get(0)?;
        let mut tx = self.begin().await?;
        lock_chain(&mut tx, &chain, &audit.at).await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let decision = Decision {
            by: audit.actor.clone(),
            at: audit.at.clone(),
            comment: comment.clone(),
        };
        let (to, label) = match verdict {
            Verdict::Approve => (BaselineState::Approved, "approved"),
            Verdict::Reject => (BaselineState::Rejected, "rejected"),
        };
        // Check the draft first so a non-draft answers Conflict before anything moves.
        let draft = fetch_baseline(&mut tx, id).await?;
        if draft.doc.state != BaselineState::Draft {
            return Err(StoreError::Conflict(format!(
                "baseline {id} is {}; only a draft can be {label}",
                draft.doc.state.as_str()
            )));
        }
        let mut superseded = None;
        if verdict == Verdict::Approve {
            if let Some(old) = current_id(&mut tx, &chain).await? {
                transition(
                    &mut tx,
                    &self.archive_prefix,
                    &old,
                    BaselineState::Approved,
                    BaselineState::Superseded,
                    None,
                    &audit.at,
                )
                .await?;
                superseded = Some(old);
            }
        }
        let stored = transition(
            &mut tx,
            &self.archive_prefix,
            id,
            BaselineState::Draft,
            to,
            Some(decision),
            &audit.at,
        )
        .await?;
        sqlx::query("INSERT INTO approvals (baseline_id, decision, actor, comment, created_at) VALUES ($1, $2, $3, $4, $5)")
            .bind(id)
            .bind(label)
            .bind(&audit.actor)
            .bind(comment)
            .bind(&audit.at)
            .execute(&mut *tx)
            .await?;
        let published = match verdict {
            Verdict::Approve => {
                archive_budget(&mut tx, &self.archive_prefix, &stored, &audit.at).await?;
                let revision =
                    publish(&mut tx, self.backend, &chain, id, "approve", &audit).await?;
                Some(Published {
                    baseline: stored.clone(),
                    revision,
                    superseded,
                })
            }
            Verdict::Reject => None,
        };
        let mut audit = audit;
        audit.chain = Some(chain);
        audit.subject = Some(id.to_owned());
        if let Some(p) = &published {
            audit.detail["revision"] = p.revision.into();
            audit.detail["superseded"] = p.superseded.clone().into();
        }
        write_audit(&mut tx, &audit).await?;
        commit(tx, (stored, published)).await
    }

    async fn rollback(&self, chain: &str, id: &str, audit: Audit) -> StoreResult<Published> {
        let mut tx = self.begin().await?;
        lock_chain(&mut tx, chain, &audit.at).await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let target = fetch_baseline(&mut tx, id).await?;
        if target.doc.chain != chain {
            return Err(StoreError::NotFound(format!(
                "baseline {id:?} of chain {chain:?}"
            )));
        }
        if target.doc.state != BaselineState::Superseded {
            return Err(StoreError::Conflict(format!(
                "baseline {id} is {}; only a previously approved (superseded) baseline can be rolled back to",
                target.doc.state.as_str()
            )));
        }
        let mut superseded = None;
        if let Some(old) = current_id(&mut tx, chain).await? {
            transition(
                &mut tx,
                &self.archive_prefix,
                &old,
                BaselineState::Approved,
                BaselineState::Superseded,
                None,
                &audit.at,
            )
            .await?;
            superseded = Some(old);
        }
        let stored = transition(
            &mut tx,
            &self.archive_prefix,
            id,
            BaselineState::Superseded,
            BaselineState::Approved,
            None,
            &audit.at,
        )
        .await?;
        archive_budget(&mut tx, &self.archive_prefix, &stored, &audit.at).await?;
        let revision = publish(&mut tx, self.backend, chain, id, "rollback", &audit).await?;
        let mut audit = audit;
        audit.subject = Some(id.to_owned());
        audit.detail["revision"] = revision.into();
        audit.detail["superseded"] = superseded.clone().into();
        write_audit(&mut tx, &audit).await?;
        let published = Published {
            baseline: stored,
            revision,
            superseded,
        };
        commit(tx, published).await
    }

    async fn latest_publication(&self, chain: &str) -> StoreResult<Option<Publication>> {
        self.one_publication("chain", chain).await
    }

    async fn baseline_publication(&self, baseline_id: &str) -> StoreResult<Option<Publication>> {
        self.one_publication("baseline_id", baseline_id).await
    }

    async fn latest_publications(
        &self,
        after: i64,
    ) -> StoreResult<Vec<(Publication, StoredBaseline)>> {
        let rows = sqlx::query(&format!(
            "SELECT p.revision, p.chain, p.baseline_id, p.kind, p.created_by, p.created_at, {BASELINE_COLUMNS} \
             FROM publications p JOIN baselines b ON b.id = p.baseline_id JOIN runs r ON r.id = b.run_id \
             WHERE p.revision > $1 AND p.revision = (SELECT MAX(q.revision) FROM publications q WHERE q.chain = p.chain) \
             ORDER BY p.revision"
        ))
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let publication = publication_from_row(r)?;
                let bytes: String = r.try_get("document")?;
                let doc = serde_json::from_str(&bytes).map_err(internal)?;
                let baseline = StoredBaseline {
                    doc,
                    bytes,
                    sha256: r.try_get("sha256")?,
                    run_uploaded_by: r.try_get("uploaded_by")?,
                    run_uploaded_by_owner: r.try_get("uploaded_by_owner")?,
                };
                Ok((publication, baseline))
            })
            .collect()
    }

    async fn claim_agent(&self, agent: &AgentStatus) -> StoreResult<AgentClaim> {
        // Most Watch streams are reconnects of an agent bound to the same token: a read.
        let row = sqlx::query(&format!(
            "{AGENT_SELECT} WHERE a.agent_id = $1 AND a.token_hash = $2"
        ))
        .bind(&agent.agent_id)
        .bind(&agent.token_id)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(row) = row {
            return Ok(AgentClaim::Bound(Box::new(agent_from_row(&row)?)));
        }
        // New, unbound, or bound to a token that no longer exists: take it, in one statement
        // so two tokens racing for the id cannot both win (on any replica).
        let claimed = sqlx::query(
            "INSERT INTO agents (agent_id, service, labels, chains, replica, connected, delivered, acked, nack_revision, nack_error, first_seen, last_seen, token_hash) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
             ON CONFLICT (agent_id) DO UPDATE SET token_hash = excluded.token_hash, service = excluded.service, \
               labels = excluded.labels, replica = excluded.replica, connected = excluded.connected, \
               last_seen = excluded.last_seen \
             WHERE agents.token_hash IS NULL OR agents.token_hash = excluded.token_hash \
               OR NOT EXISTS (SELECT 1 FROM api_tokens t WHERE t.token_hash = agents.token_hash) \
             RETURNING agent_id",
        )
        .bind(&agent.agent_id)
        .bind(&agent.service)
        .bind(serde_json::to_string(&agent.labels).map_err(internal)?)
        .bind(agent.chains.join(","))
        .bind(&agent.replica)
        .bind(i64::from(agent.connected))
        .bind(agent.delivered)
        .bind(agent.acked)
        .bind(agent.nack_revision)
        .bind(agent.nack_error.clone())
        .bind(&agent.first_seen)
        .bind(&agent.last_seen)
        .bind(&agent.token_id)
        .fetch_optional(&self.pool)
        .await?;
        if claimed.is_none() {
            return Ok(AgentClaim::Taken);
        }
        let row = sqlx::query(&format!("{AGENT_SELECT} WHERE a.agent_id = $1"))
            .bind(&agent.agent_id)
            .fetch_one(&self.pool)
            .await?;
        Ok(AgentClaim::Bound(Box::new(agent_from_row(&row)?)))
    }

    async fn agent_token(&self, agent_id: &str) -> StoreResult<Option<String>> {
        let row = sqlx::query(
            "SELECT a.token_hash FROM agents a JOIN api_tokens t ON t.token_hash = a.token_hash \
             WHERE a.agent_id = $1",
        )
        .bind(agent_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get(0)).transpose()?)
    }

    async fn upsert_agents(&self, agents: &[AgentStatus]) -> StoreResult<()> {
        if agents.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        for a in agents {
            // An entry bound to another token is never overwritten (nor one that was expired
            // and claimed by another token since).
            sqlx::query(
                "INSERT INTO agents (agent_id, service, labels, chains, replica, connected, delivered, acked, nack_revision, nack_error, first_seen, last_seen, token_hash) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
                 ON CONFLICT (agent_id) DO UPDATE SET service = excluded.service, labels = excluded.labels, \
                   chains = excluded.chains, replica = excluded.replica, connected = excluded.connected, \
                   delivered = excluded.delivered, acked = excluded.acked, nack_revision = excluded.nack_revision, \
                   nack_error = excluded.nack_error, last_seen = excluded.last_seen \
                 WHERE agents.token_hash = excluded.token_hash",
            )
            .bind(&a.agent_id)
            .bind(&a.service)
            .bind(serde_json::to_string(&a.labels).map_err(internal)?)
            .bind(a.chains.join(","))
            .bind(&a.replica)
            .bind(i64::from(a.connected))
            .bind(a.delivered)
            .bind(a.acked)
            .bind(a.nack_revision)
            .bind(a.nack_error.clone())
            .bind(&a.first_seen)
            .bind(&a.last_seen)
            .bind(&a.token_id)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn list_agents(
        &self,
        seen_since: &str,
        after: Option<&AgentCursor>,
        limit: i64,
    ) -> StoreResult<Vec<AgentStatus>> {
        let (after_service, after_id) = after.map_or(("", ""), |(s, id)| (s, id));
        let rows = sqlx::query(&format!(
            "{AGENT_SELECT} WHERE a.last_seen >= $1 \
             AND ($2 = 0 OR a.service > $3 OR (a.service = $3 AND a.agent_id > $4)) \
             ORDER BY a.service, a.agent_id LIMIT $5"
        ))
        .bind(seen_since)
        .bind(i64::from(after.is_some()))
        .bind(after_service)
        .bind(after_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(agent_from_row).collect()
    }

    async fn expire_agents(&self, cutoff: &str) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM agents WHERE last_seen < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn archive_claim(
        &self,
        now: &str,
        lease_until: &str,
        limit: i64,
    ) -> StoreResult<Vec<OutboxItem>> {
        // PostgreSQL: concurrent workers skip each other's rows; SQLite serialises writers.
        let skip_locked = if self.backend == "postgres" {
            "FOR UPDATE SKIP LOCKED"
        } else {
            ""
        };
        let rows = sqlx::query(&format!(
            "UPDATE archive_outbox SET locked_until = $2 WHERE id IN ( \
               SELECT o.id FROM archive_outbox o \
               WHERE o.state = 'pending' AND o.next_attempt_at <= $1 \
                 AND (o.locked_until IS NULL OR o.locked_until < $1) \
                 AND NOT EXISTS (SELECT 1 FROM archive_outbox f WHERE f.object_key = o.object_key \
                                 AND f.id <> o.id AND f.locked_until IS NOT NULL AND f.locked_until >= $1) \
               ORDER BY o.id LIMIT $3 {skip_locked}) \
             RETURNING {OUTBOX_COLUMNS}"
        ))
        .bind(now)
        .bind(lease_until)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut items = rows
            .iter()
            .map(outbox_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        items.sort_by_key(|i| i.id);
        Ok(items)
    }

    async fn archive_done(&self, id: i64, now: &str) -> StoreResult<()> {
        sqlx::query(
            "UPDATE archive_outbox SET state = CASE WHEN state = 'pending' THEN 'done' ELSE state END, \
             archived_at = $2, locked_until = NULL, attempts = attempts + 1, last_error = NULL WHERE id = $1",
        )
        .bind(id)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn archive_failed(&self, id: i64, error: &str, next_attempt_at: &str) -> StoreResult<()> {
        sqlx::query(
            "UPDATE archive_outbox SET attempts = attempts + 1, last_error = $2, next_attempt_at = $3, \
             locked_until = NULL WHERE id = $1",
        )
        .bind(id)
        .bind(error)
        .bind(next_attempt_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn archive_enqueue(
        &self,
        baseline_id: &str,
        key: &str,
        body: &str,
        now: &str,
    ) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        enqueue(&mut tx, baseline_id, key, body, now).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn archive_items(&self, baseline_id: &str) -> StoreResult<Vec<OutboxItem>> {
        let rows = sqlx::query(&format!(
            "SELECT {OUTBOX_COLUMNS} FROM archive_outbox WHERE baseline_id = $1 ORDER BY id"
        ))
        .bind(baseline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(outbox_from_row).collect()
    }

    async fn archive_backlog(&self) -> StoreResult<(i64, Option<String>)> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM archive_outbox WHERE state = 'pending'",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((row.try_get("n")?, row.try_get("oldest")?))
    }

    async fn baselines_created_on(&self, date: Option<&str>) -> StoreResult<Vec<StoredBaseline>> {
        let rows = sqlx::query(&format!(
            "SELECT {BASELINE_COLUMNS} FROM baselines b JOIN runs r ON r.id = b.run_id \
             WHERE ($1 = '' OR b.created_at LIKE $2) ORDER BY b.created_at, b.id"
        ))
        .bind(date.unwrap_or(""))
        .bind(format!("{}%", date.unwrap_or("")))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(baseline_from_row).collect()
    }

    async fn create_release(
        &self,
        release: NewRelease,
        sha256: &str,
        audit: Audit,
    ) -> StoreResult<Release> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let row = sqlx::query(
            "INSERT INTO releases (service, version, baseline_id, baseline_sha256, ticket, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(&release.service)
        .bind(&release.version)
        .bind(&release.baseline_id)
        .bind(sha256)
        .bind(&release.ticket)
        .bind(&audit.actor)
        .bind(&audit.at)
        .fetch_one(&mut *tx)
        .await?;
        let id: i64 = row.try_get(0)?;
        write_audit(&mut tx, &audit).await?;
        let release = Release {
            id,
            service: release.service,
            version: release.version,
            baseline_id: release.baseline_id,
            baseline_sha256: sha256.to_owned(),
            ticket: release.ticket,
            created_by: audit.actor,
            created_at: audit.at,
        };
        commit(tx, release).await
    }

    async fn list_releases(
        &self,
        baseline_id: Option<&str>,
        service: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<Release>> {
        let rows = sqlx::query(
            "SELECT id, service, version, baseline_id, baseline_sha256, ticket, created_by, created_at FROM releases \
             WHERE ($1 = '' OR baseline_id = $1) AND ($2 = '' OR service = $2) ORDER BY id DESC LIMIT $3",
        )
        .bind(baseline_id.unwrap_or(""))
        .bind(service.unwrap_or(""))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| Ok(Release::from_row(r)?)).collect()
    }

    async fn audit_log(
        &self,
        chain: Option<&str>,
        limit: i64,
        before: Option<i64>,
    ) -> StoreResult<Vec<AuditEntry>> {
        let rows = sqlx::query(
            "SELECT id, at, actor, action, chain, subject, detail FROM audit_log \
             WHERE ($1 = '' OR chain = $1) AND id < $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(chain.unwrap_or(""))
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let detail: String = r.try_get("detail")?;
                Ok(AuditEntry {
                    id: r.try_get("id")?,
                    at: r.try_get("at")?,
                    actor: r.try_get("actor")?,
                    action: r.try_get("action")?,
                    chain: r.try_get("chain")?,
                    subject: r.try_get("subject")?,
                    detail: serde_json::from_str(&detail)
                        .unwrap_or(serde_json::Value::String(detail)),
                })
            })
            .collect()
    }

    async fn create_token(&self, token: &NewToken, audit: Audit) -> StoreResult<TokenRecord> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let record = insert_token(&mut tx, token, &audit).await?;
        write_audit(&mut tx, &audit).await?;
        commit(tx, record).await
    }

    async fn rotate_token(
        &self,
        name: &str,
        new_name: &str,
        hash: &str,
        audit: Audit,
    ) -> StoreResult<TokenRecord> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        // Written first, the old token read inside the insert: a SQLite transaction that
        // reads before it writes fails when another connection commits in between.
        let done = sqlx::query(
            "INSERT INTO api_tokens (name, role, token_hash, created_at, created_by, owner) \
             SELECT $1, role, $2, $3, $4, COALESCE(owner, name) FROM api_tokens WHERE name = $5 \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(new_name)
        .bind(hash)
        .bind(&audit.at)
        .bind(&audit.actor)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            let old = sqlx::query("SELECT 1 FROM api_tokens WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
            return Err(match old {
                None => StoreError::NotFound(format!("token {name:?}")),
                Some(_) => {
                    StoreError::Conflict(format!("a token named {new_name:?} already exists"))
                }
            });
        }
        let row = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE name = $1"
        ))
        .bind(new_name)
        .fetch_one(&mut *tx)
        .await?;
        let record = token_from_row(&row)?;
        let mut audit = audit;
        audit.detail["role"] = serde_json::json!(record.role);
        audit.detail["owner"] = record.owner.clone().into();
        write_audit(&mut tx, &audit).await?;
        commit(tx, record).await
    }

    async fn upsert_token(
        &self,
        name: &str,
        role: Role,
        hash: &str,
        audit: Audit,
    ) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO api_tokens (name, role, token_hash, created_at, created_by, owner) VALUES ($1, $2, $3, $4, $5, $1) \
             ON CONFLICT (name) DO UPDATE SET role = $2, token_hash = $3",
        )
        .bind(name)
        .bind(role.as_str())
        .bind(hash)
        .bind(&audit.at)
        .bind(&audit.actor)
        .execute(&mut *tx)
        .await?;
        write_audit(&mut tx, &audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn revoke_token(&self, name: &str, audit: Audit) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let done = sqlx::query("DELETE FROM api_tokens WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("token {name:?}")));
        }
        write_audit(&mut tx, &audit).await?;
        commit(tx, ()).await
    }

    async fn find_token(&self, hash: &str) -> StoreResult<Option<TokenRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_hash = $1"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    async fn list_tokens(&self) -> StoreResult<Vec<TokenRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY name"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(token_from_row).collect()
    }

    async fn idem_lookup(
        &self,
        scope: &str,
        key: &str,
        request_hash: &str,
    ) -> StoreResult<IdemLookup> {
        let row = sqlx::query(
            "SELECT request_hash, status, content_type, body FROM idempotency_keys \
             WHERE principal = $1 AND key = $2",
        )
        .bind(scope)
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(IdemLookup::Absent);
        };
        if row.try_get::<String, _>("request_hash")? != request_hash {
            return Ok(IdemLookup::Mismatch);
        }
        Ok(match row.try_get::<Option<i64>, _>("status")? {
            None => IdemLookup::Committed,
            Some(status) => IdemLookup::Done(IdemResponse {
                status: u16::try_from(status).map_err(internal)?,
                content_type: row
                    .try_get::<Option<String>, _>("content_type")?
                    .unwrap_or_default(),
                body: row
                    .try_get::<Option<String>, _>("body")?
                    .unwrap_or_default(),
            }),
        })
    }

    async fn idem_finish(
        &self,
        scope: &str,
        key: &str,
        response: &IdemResponse,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE idempotency_keys SET status = $3, content_type = $4, body = $5 \
             WHERE principal = $1 AND key = $2 AND status IS NULL",
        )
        .bind(scope)
        .bind(key)
        .bind(i64::from(response.status))
        .bind(&response.content_type)
        .bind(&response.body)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn idem_expire(&self, cutoff: &str) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM idempotency_keys WHERE created_at < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    fn pool_status(&self) -> PoolStatus {
        PoolStatus {
            size: self.pool.size(),
            idle: u32::try_from(self.pool.num_idle()).unwrap_or(u32::MAX),
        }
    }

    async fn export_all(
        &self,
        out: &mut (dyn std::io::Write + Send),
        progress: Progress<'_>,
    ) -> StoreResult<TableCounts> {
        use futures_util::TryStreamExt as _;
        let mut tx = self.begin().await?;
        if self.backend == "postgres" {
            // One snapshot for every table.
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await?;
        }
        // On SQLite the read transaction's snapshot starts here.
        let schema_version = schema_version(&mut tx).await?;
        let head = serde_json::json!({
            "format": EXPORT_FORMAT,
            "schema_version": schema_version,
            "exported_at": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "backend": self.backend,
        })
        .to_string();
        // `{"format":…,"backend":"…"}` → `{"format":…,"backend":"…","tables":{`
        let head = head.strip_suffix('}').unwrap_or(&head);
        write_out(out, format!("{head},\"tables\":{{").as_bytes())?;
        let mut counts = TableCounts::new();
        for (i, table) in EXPORT_TABLES.iter().enumerate() {
            let names: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
            write_out(
                out,
                format!(
                    "{}\n{}:{{\"columns\":{},\"rows\":[",
                    if i == 0 { "" } else { "," },
                    serde_json::Value::from(table.name),
                    serde_json::Value::from(names.clone())
                )
                .as_bytes(),
            )?;
            let order = if table.name == "topology_versions" {
                "chain, version"
            } else {
                names[0]
            };
            let sql = format!(
                "SELECT {} FROM {} ORDER BY {order}",
                names.join(", "),
                table.name
            );
            let mut rows = sqlx::query(&sql).fetch(&mut *tx);
            let mut n = 0u64;
            while let Some(row) = rows.try_next().await? {
                let values = export_row(&row, table)?;
                write_out(out, if n == 0 { b"\n" } else { b",\n" })?;
                serde_json::to_writer(&mut *out, &values).map_err(internal)?;
                n += 1;
                if n % 10_000 == 0 {
                    progress(table.name, n);
                }
            }
            drop(rows);
            write_out(out, b"]}")?;
            progress(table.name, n);
            counts.push((table.name, n));
        }
        write_out(out, b"\n}}\n")?;
        out.flush().map_err(internal)?;
        tx.rollback().await?;
        Ok(counts)
    }

    async fn import_all(
        &self,
        export: &Export,
        progress: Progress<'_>,
    ) -> StoreResult<TableCounts> {
        let invalid = |msg: String| StoreError::Conflict(format!("invalid export: {msg}"));
        if export.format != EXPORT_FORMAT {
            return Err(invalid(format!(
                "format is {:?}, expected {EXPORT_FORMAT:?}",
                export.format
            )));
        }
        if let Some(unknown) = export
            .tables
            .keys()
            .find(|k| !EXPORT_TABLES.iter().any(|t| t.name == k.as_str()))
        {
            return Err(invalid(format!("unknown table {unknown:?}")));
        }
        let mut tx = self.begin().await?;
        let local_version = schema_version(&mut tx).await?;
        if export.schema_version > local_version {
            return Err(invalid(format!(
                "it was written by a newer budgetd (schema version {}, this one has {local_version}); upgrade budgetd first",
                export.schema_version
            )));
        }
        // Only into an empty store: ids, revisions and counters are kept as they are.
        let every = EXPORT_TABLES
            .iter()
            .map(|t| t.name)
            .chain(["idempotency_keys"]);
        for name in every {
            let n: i64 = sqlx::query(&format!("SELECT COUNT(*) FROM {name}"))
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?;
            if n > 0 {
                return Err(StoreError::Conflict(format!(
                    "the target store is not empty (table {name} has {n} row(s)); import only into a new, empty database, before any server has started on it"
                )));
            }
        }
        let mut counts = TableCounts::new();
        for table in EXPORT_TABLES {
            let data = export
                .tables
                .get(table.name)
                .ok_or_else(|| invalid(format!("table {:?} is missing", table.name)))?;
            // Where each of our columns is in the export's rows; none for a column added after
            // the export's schema version (imported as null).
            let mut positions = Vec::with_capacity(table.columns.len());
            for (column, _) in table.columns {
                let at = data.columns.iter().position(|c| c == column);
                let added_later = ADDED_COLUMNS.iter().any(|(t, c, version)| {
                    *t == table.name && c == column && export.schema_version < *version
                });
                if at.is_none() && !added_later {
                    return Err(invalid(format!(
                        "table {:?} lacks column {column:?}",
                        table.name
                    )));
                }
                positions.push(at);
            }
            if let Some(extra) = data
                .columns
                .iter()
                .find(|c| !table.columns.iter().any(|(k, _)| k == c))
            {
                return Err(invalid(format!(
                    "table {:?} has an unknown column {extra:?}",
                    table.name
                )));
            }
            let names: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
            let overriding = if self.backend == "postgres" && table.identity {
                " OVERRIDING SYSTEM VALUE"
            } else {
                ""
            };
            let width = table.columns.len();
            let per_statement = (900 / width).max(1);
            let mut n = 0u64;
            for chunk in data.rows.chunks(per_statement) {
                let tuples: Vec<String> = (0..chunk.len())
                    .map(|r| {
                        let params: Vec<String> =
                            (1..=width).map(|c| format!("${}", r * width + c)).collect();
                        format!("({})", params.join(", "))
                    })
                    .collect();
                let sql = format!(
                    "INSERT INTO {} ({}){overriding} VALUES {}",
                    table.name,
                    names.join(", "),
                    tuples.join(", ")
                );
                let mut query = sqlx::query(&sql);
                for (r, row) in chunk.iter().enumerate() {
                    if row.len() != data.columns.len() {
                        return Err(invalid(format!(
                            "row {} of table {:?} has {} values for {} columns",
                            n + r as u64 + 1,
                            table.name,
                            row.len(),
                            data.columns.len()
                        )));
                    }
                    for ((column, kind), at) in table.columns.iter().zip(&positions) {
                        let value = at.map_or(&serde_json::Value::Null, |at| &row[at]);
                        let bad = || {
                            invalid(format!(
                                "row {} of table {:?}: column {column:?} holds {value}",
                                n + r as u64 + 1,
                                table.name
                            ))
                        };
                        query = match (kind, value) {
                            (ColumnKind::Text, serde_json::Value::Null) => {
                                query.bind(None::<String>)
                            }
                            (ColumnKind::Text, serde_json::Value::String(s)) => {
                                query.bind(Some(s.clone()))
                            }
                            (ColumnKind::Int, serde_json::Value::Null) => query.bind(None::<i64>),
                            (ColumnKind::Int, serde_json::Value::Number(x)) => {
                                query.bind(Some(x.as_i64().ok_or_else(bad)?))
                            }
                            _ => return Err(bad()),
                        };
                    }
                }
                query.execute(&mut *tx).await?;
                n += chunk.len() as u64;
                if n % 10_000 < chunk.len() as u64 {
                    progress(table.name, n);
                }
            }
            if overriding.is_empty() {
                // SQLite: inserting explicit ids moves sqlite_sequence to the largest one.
            } else {
                // PostgreSQL: the identity sequence continues after the largest imported id.
                sqlx::query(&format!(
                    "SELECT setval(pg_get_serial_sequence('{0}', 'id'), \
                     (SELECT COALESCE(MAX(id), 0) + 1 FROM {0}), false)",
                    table.name
                ))
                .execute(&mut *tx)
                .await?;
            }
            progress(table.name, n);
            counts.push((table.name, n));
        }
        tx.commit().await?;
        Ok(counts)
    }
}

/// The newest migration applied to the store.
async fn schema_version(tx: &mut Tx) -> StoreResult<i64> {
    Ok(
        sqlx::query("SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations")
            .fetch_one(&mut **tx)
            .await?
            .try_get(0)?,
    )
}

fn write_out(out: &mut (dyn std::io::Write + Send), bytes: &[u8]) -> StoreResult<()> {
    out.write_all(bytes)
        .map_err(|e| internal(anyhow::Error::new(e).context("failed to write the export")))
}

/// One row of an exported table: a string, an integer or null per column.
fn export_row(row: &AnyRow, table: &ExportTable) -> StoreResult<Vec<serde_json::Value>> {
    table
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, kind))| {
            Ok(match kind {
                ColumnKind::Text => row
                    .try_get::<Option<String>, _>(i)?
                    .map_or(serde_json::Value::Null, serde_json::Value::String),
                ColumnKind::Int => row
                    .try_get::<Option<i64>, _>(i)?
                    .map_or(serde_json::Value::Null, serde_json::Value::from),
            })
        })
        .collect()
}
