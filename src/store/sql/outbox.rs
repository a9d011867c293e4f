//! [`Outbox`] over SQL: queueing archive uploads, and the worker's claims on them.

use async_trait::async_trait;
use budget_api::archive::ArchiveUpload;
use sqlx::Row;

use super::rows::{
    archive_upload_from_row, document_from_row, outbox_item_from_row, ARCHIVE_UPLOAD_COLUMNS,
    OUTBOX_ITEM_COLUMNS,
};
use super::{sha256_hex, SqlStore, Tx};
use crate::store::{archive_key, Backend, Outbox, OutboxItem, StoreResult, StoredBaseline};

/// Queues `body` (whose SHA-256 is `sha256`; empty: the baseline's document, read when the
/// item is claimed) for upload at `key`; older pending items of the key are superseded. An
/// item that is superseded or archived keeps no copy of its body: it is never uploaded again.
pub(super) async fn enqueue(
    tx: &mut Tx,
    baseline_id: &str,
    key: &str,
    (body, sha256): (&str, &str),
    now: &str,
) -> StoreResult<()> {
    sqlx::query("UPDATE archive_outbox SET state = 'superseded', body = '' WHERE object_key = $1 AND state = 'pending'")
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
    .bind(sha256)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Archives the current document of a baseline at `{prefix}/{date}/{id}.json`. The item holds
/// the document's SHA-256 and no copy of it: the worker's claim reads the document from its
/// baseline (a document of a large chain is about a megabyte, and every change of a baseline
/// queues its document again). A claimed item whose baseline has changed since is superseded
/// by the item that change queued.
pub(super) async fn archive_document(
    tx: &mut Tx,
    prefix: &str,
    (id, created_at, sha256): (&str, &str, &str),
    now: &str,
) -> StoreResult<()> {
    let key = archive_key(prefix, created_at, &format!("{id}.json"));
    enqueue(tx, id, &key, ("", sha256), now).await
}

/// An approval (or rollback) also writes the seed's `{prefix}/{date}/budget.json`.
pub(super) async fn archive_budget(
    tx: &mut Tx,
    prefix: &str,
    stored: &StoredBaseline,
    now: &str,
) -> StoreResult<()> {
    let key = archive_key(prefix, &stored.doc.created_at, "budget.json");
    // The document as approved: the baseline's own changes later (superseded) are not for
    // this key, so the item keeps its copy.
    enqueue(
        tx,
        &stored.doc.id,
        &key,
        (&stored.bytes, &stored.sha256),
        now,
    )
    .await
}

#[async_trait]
impl Outbox for SqlStore {
    async fn archive_claim(
        &self,
        now: &str,
        lease_until: &str,
        limit: i64,
    ) -> StoreResult<Vec<OutboxItem>> {
        // PostgreSQL: concurrent workers skip each other's rows; SQLite serialises writers.
        let skip_locked = if self.backend == Backend::Postgres {
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
             RETURNING {OUTBOX_ITEM_COLUMNS}, baseline_id"
        ))
        .bind(now)
        .bind(lease_until)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut items = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut item = outbox_item_from_row(row)?;
            // An item without a body archives its baseline's document (`archive_document`).
            if item.body.is_empty() {
                let baseline_id: String = row.try_get("baseline_id")?;
                let document = sqlx::query(
                    "SELECT d.document, b.state, b.superseded_by, b.document_behind \
                     FROM baselines b JOIN baseline_documents d ON d.baseline_id = b.id \
                     WHERE b.id = $1 AND b.sha256 = $2",
                )
                .bind(&baseline_id)
                .bind(&item.sha256)
                .fetch_optional(&self.pool)
                .await?;
                match document {
                    Some(row) => item.body = document_from_row(&row)?,
                    None => {
                        // Changed since it was queued: the change queued a newer item (and
                        // may have marked this one superseded since the claim). Let go of it
                        // either way, or the newer item waits for this claim's lease.
                        sqlx::query(
                            "UPDATE archive_outbox SET state = CASE WHEN state = 'pending' \
                             THEN 'superseded' ELSE state END, body = '', locked_until = NULL \
                             WHERE id = $1",
                        )
                        .bind(item.id)
                        .execute(&self.pool)
                        .await?;
                        continue;
                    }
                }
            }
            items.push(item);
        }
        items.sort_by_key(|i| i.id);
        Ok(items)
    }

    async fn archive_done(&self, id: i64, now: &str) -> StoreResult<()> {
        sqlx::query(
            "UPDATE archive_outbox SET state = CASE WHEN state = 'pending' THEN 'done' ELSE state END, \
             body = '', archived_at = $2, locked_until = NULL, attempts = attempts + 1, last_error = NULL \
             WHERE id = $1",
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
        let sha256 = sha256_hex(body.as_bytes());
        enqueue(&mut tx, baseline_id, key, (body, &sha256), now).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn archive_items(&self, baseline_id: &str) -> StoreResult<Vec<ArchiveUpload>> {
        let rows = sqlx::query(&format!(
            "SELECT {ARCHIVE_UPLOAD_COLUMNS} FROM archive_outbox WHERE baseline_id = $1 ORDER BY id"
        ))
        .bind(baseline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(archive_upload_from_row).collect()
    }

    async fn archive_backlog(&self) -> StoreResult<(i64, Option<String>)> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM archive_outbox WHERE state = 'pending'",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((row.try_get("n")?, row.try_get("oldest")?))
    }
}
