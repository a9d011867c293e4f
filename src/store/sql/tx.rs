//! The steps every write transaction shares: lock the chain, draw a counter, append to the
//! audit log, replay or record an `Idempotency-Key`, commit, publish.

use serde::Serialize;
use sqlx::{Any, Row, Transaction};

use super::internal;
use crate::store::idempotency::{mark_used, unused_claim};
use crate::store::{Audit, Backend, StoreError, StoreResult};

/// A write transaction on the store's pool.
pub(super) type Tx = Transaction<'static, Any>;

/// Touches the chain's row: serialises this transaction with every other writer of the chain.
/// `NotFound` when the chain does not exist.
pub(super) async fn lock_chain(tx: &mut Tx, chain: &str, now: &str) -> StoreResult<()> {
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

/// The next value of the counter `scope` (from 1), drawn in this transaction.
pub(super) async fn next_counter(tx: &mut Tx, scope: &str) -> StoreResult<i64> {
    let row = sqlx::query(
        "INSERT INTO counters (scope, n) VALUES ($1, 1) \
         ON CONFLICT (scope) DO UPDATE SET n = counters.n + 1 RETURNING n",
    )
    .bind(scope)
    .fetch_one(&mut **tx)
    .await?;
    Ok(row.try_get(0)?)
}

/// Appends `a` to the audit log in this transaction.
pub(super) async fn write_audit(tx: &mut Tx, a: &Audit) -> StoreResult<()> {
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
    if let Some(event) = crate::store::feedback::WebhookEvent::of_audit(a) {
        super::feedback::enqueue_in(tx, &event, &a.at).await?;
    }
    Ok(())
}

/// With an `Idempotency-Key` in scope ([`with_idempotency`]): the result this key already
/// committed — the caller then writes nothing and answers it — or `Conflict` when the key
/// committed another request. Called after the chain's row is locked, so a concurrent
/// repeat on another connection sees the first one's commit.
///
/// [`with_idempotency`]: crate::store::with_idempotency
pub(super) async fn replayed<T: serde::de::DeserializeOwned>(
    tx: &mut Tx,
) -> StoreResult<Option<T>> {
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
pub(super) async fn commit<T: Serialize>(mut tx: Tx, result: T) -> StoreResult<T> {
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

/// The PostgreSQL channel every replica listens on; the payload is the new revision.
pub const PUBLICATION_CHANNEL: &str = "budgetd_publications";

/// Publishes `baseline_id` for `chain` under the next revision; on PostgreSQL, every replica
/// is notified when the transaction commits. Returns the revision.
pub(super) async fn publish(
    tx: &mut Tx,
    backend: Backend,
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
    if backend == Backend::Postgres {
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
