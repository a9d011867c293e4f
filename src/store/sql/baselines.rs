//! [`Baselines`] over SQL: drafts, decisions and rollbacks, each re-rendering the documents it
//! changes and queueing them for the archive in the same transaction.

use async_trait::async_trait;
use budget_api::baselines::BaselineSummary;
use budget_core::baseline::{BaselineDocument, BaselineState, Decision};
use sqlx::Row;

use super::outbox::{archive_budget, archive_document};
use super::rows::{baseline_from_row, baseline_summary_from_row, BASELINE_COLUMNS};
use super::tx::{commit, lock_chain, next_counter, publish, replayed, write_audit};
use super::{compact_date, internal, sha256_hex, SqlStore, Tx};
use crate::store::{
    Audit, BaselineCursor, Baselines, Published, StoreError, StoreResult, StoredBaseline, Verdict,
};

pub(super) async fn fetch_baseline(tx: &mut Tx, id: &str) -> StoreResult<StoredBaseline> {
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
pub(super) async fn insert_baseline_tx(
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
pub(super) async fn transition(
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

pub(super) async fn current_id(tx: &mut Tx, chain: &str) -> StoreResult<Option<String>> {
    let row = sqlx::query("SELECT id FROM baselines WHERE chain = $1 AND state = 'approved'")
        .bind(chain)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
}

/// Moves the chain's approved baseline, if any, to superseded (before another one goes live);
/// its id.
async fn supersede_current(
    tx: &mut Tx,
    archive_prefix: &str,
    chain: &str,
    at: &str,
) -> StoreResult<Option<String>> {
    let Some(old) = current_id(tx, chain).await? else {
        return Ok(None);
    };
    transition(
        tx,
        archive_prefix,
        &old,
        BaselineState::Approved,
        BaselineState::Superseded,
        None,
        at,
    )
    .await?;
    Ok(Some(old))
}

#[async_trait]
impl Baselines for SqlStore {
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
        rows.iter().map(baseline_summary_from_row).collect()
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
        // Check the draft first (core's rule, inside the transaction) so a non-draft answers
        // Conflict before anything moves.
        let draft = fetch_baseline(&mut tx, id).await?;
        let to = budget_core::lifecycle::decide(id, draft.doc.state, verdict)
            .map_err(|e| StoreError::Conflict(e.to_string()))?;
        let label = match verdict {
            Verdict::Approve => "approved",
            Verdict::Reject => "rejected",
        };
        let superseded = match verdict {
            Verdict::Approve => {
                supersede_current(&mut tx, &self.archive_prefix, &chain, &audit.at).await?
            }
            Verdict::Reject => None,
        };
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
        budget_core::lifecycle::roll_back_to(id, target.doc.state)
            .map_err(|e| StoreError::Conflict(e.to_string()))?;
        let superseded = supersede_current(&mut tx, &self.archive_prefix, chain, &audit.at).await?;
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
}
