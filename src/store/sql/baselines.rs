//! [`Baselines`] over SQL: drafts, decisions and rollbacks, each re-rendering the documents it
//! changes and queueing them for the archive in the same transaction. A new draft supersedes
//! the chain's older pending drafts in the transaction that inserts it, and an approval checks
//! that its draft is the newest, after the chain's row is locked: two replicas writing one
//! chain on PostgreSQL take turns on that lock, so each sees the other's drafts.

use async_trait::async_trait;
use budget_api::baselines::BaselineSummary;
use budget_core::baseline::{BaselineDocument, BaselineState, Decision, Restate};
use budget_core::canary::{CanaryState, Rollout};
use budget_core::lifecycle;
use sqlx::Row;

use super::outbox::{archive_budget, archive_document};
use super::rollouts::baking_on;
use super::rows::{
    baseline_from_row, baseline_summary_from_row, restated_document, BASELINE_COLUMNS,
    BASELINE_JOINS,
};
use super::tx::{commit, lock_chain, next_counter, publish, replayed, write_audit};
use super::{compact_date, internal, sha256_hex, SqlStore, Tx};
use crate::store::{
    Audit, BaselineCursor, Baselines, Published, StoreError, StoreResult, StoredBaseline, Verdict,
};

pub(super) async fn fetch_baseline(tx: &mut Tx, id: &str) -> StoreResult<StoredBaseline> {
    let row = sqlx::query(&format!(
        "SELECT {BASELINE_COLUMNS} FROM baselines b {BASELINE_JOINS} WHERE b.id = $1"
    ))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("baseline {id:?}")))?;
    baseline_from_row(&row)
}

/// Allocates the id, renders the document and inserts it, then supersedes the chain's other
/// pending drafts (core's rule); answers the draft and the ids it superseded. The chain's row
/// must be locked.
pub(super) async fn insert_baseline_tx(
    tx: &mut Tx,
    prefix: &str,
    mut doc: BaselineDocument,
    (run_uploaded_by, run_uploaded_by_owner): (String, String),
) -> StoreResult<(StoredBaseline, Vec<String>)> {
    let day = compact_date(&doc.created_at);
    let n = next_counter(tx, &format!("bl-{day}")).await?;
    doc.id = format!("bl-{day}-{n:03}");
    doc.state = BaselineState::Draft;
    let bytes = String::from_utf8(doc.to_bytes()).map_err(internal)?;
    let sha256 = sha256_hex(bytes.as_bytes());
    let reason = serde_json::to_value(doc.reason).map_err(internal)?;
    // Drawn under the chain's lock: the chain's baselines in commit order.
    let seq = next_counter(tx, &format!("baselines:{}", doc.chain)).await?;
    sqlx::query(
        "INSERT INTO baselines (id, chain, run_id, topology_version, state, reason, has_errors, sha256, created_at, created_by, updated_at, chain_seq, document_behind) \
         VALUES ($1, $2, $3, $4, 'draft', $5, $6, $7, $8, $9, $8, $10, 0)",
    )
    .bind(&doc.id)
    .bind(&doc.chain)
    .bind(&doc.run_id)
    .bind(doc.topology_version)
    .bind(reason.as_str().unwrap_or_default().to_owned())
    .bind(i64::from(doc.has_errors()))
    .bind(&sha256)
    .bind(&doc.created_at)
    .bind(&doc.created_by)
    .bind(seq)
    .execute(&mut **tx)
    .await?;
    sqlx::query("INSERT INTO baseline_documents (baseline_id, document) VALUES ($1, $2)")
        .bind(&doc.id)
        .bind(&bytes)
        .execute(&mut **tx)
        .await?;
    let stored = StoredBaseline {
        doc,
        bytes,
        sha256,
        run_uploaded_by,
        run_uploaded_by_owner,
    };
    let doc = &stored.doc;
    archive_document(
        tx,
        prefix,
        (&doc.id, &doc.created_at, &stored.sha256),
        &doc.created_at,
    )
    .await?;
    let pending: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM baselines WHERE chain = $1 AND state = 'draft' ORDER BY created_at, id",
    )
    .bind(&stored.doc.chain)
    .fetch_all(&mut **tx)
    .await?;
    let superseded: Vec<String> = lifecycle::superseded_by(&stored.doc.id, &pending)
        .into_iter()
        .map(str::to_owned)
        .collect();
    for old in &superseded {
        let change = Change::superseded_by(&stored.doc.id);
        mark(
            tx,
            prefix,
            old,
            BaselineState::Draft,
            change,
            &stored.doc.created_at,
        )
        .await?;
    }
    Ok((stored, superseded))
}

/// What a [`transition`] makes of a baseline: its new state, the decision recorded (kept when
/// `None`), and for `superseded` the baseline that replaced it (cleared in every other state).
pub(super) struct Change<'a> {
    pub to: BaselineState,
    pub decision: Option<Decision>,
    pub superseded_by: Option<&'a str>,
}

impl<'a> Change<'a> {
    pub fn to(to: BaselineState) -> Self {
        Self {
            to,
            decision: None,
            superseded_by: None,
        }
    }

    pub fn superseded_by(by: &'a str) -> Self {
        Self {
            superseded_by: Some(by),
            ..Self::to(BaselineState::Superseded)
        }
    }
}

/// Moves a baseline to `change.to` if it is in `from` now, and answers it as stored. The
/// document's bytes are re-rendered by [`budget_core::baseline::restate`] (only its state fields change).
pub(super) async fn transition(
    tx: &mut Tx,
    prefix: &str,
    id: &str,
    from: BaselineState,
    change: Change<'_>,
    now: &str,
) -> StoreResult<StoredBaseline> {
    let (bytes, sha256, row) = restated(tx, prefix, id, from, &change, now).await?;
    let doc = serde_json::from_str(&bytes).map_err(internal)?;
    Ok(StoredBaseline {
        doc,
        bytes,
        sha256,
        run_uploaded_by: row.try_get("uploaded_by")?,
        run_uploaded_by_owner: row.try_get("uploaded_by_owner")?,
    })
}

/// [`transition`] for a caller that does not need the document: the megabyte of a large
/// chain's document is not parsed (superseding a draft on every upload, the approved baseline
/// on every approval).
pub(super) async fn mark(
    tx: &mut Tx,
    prefix: &str,
    id: &str,
    from: BaselineState,
    change: Change<'_>,
    now: &str,
) -> StoreResult<()> {
    restated(tx, prefix, id, from, &change, now).await.map(drop)
}

/// The state change of [`transition`] and [`mark`]: the row's state and the SHA-256 of the
/// changed document stored, the archive item queued; answers the changed document's bytes,
/// their SHA-256 and the row read (`uploaded_by`, …). On SQLite the document itself is written
/// again only when a decision is recorded (it lives in the document alone); otherwise the row
/// is marked `document_behind` and reads render the state fields from it
/// ([`document_from_row`](super::rows::document_from_row)).
async fn restated(
    tx: &mut Tx,
    prefix: &str,
    id: &str,
    from: BaselineState,
    change: &Change<'_>,
    now: &str,
) -> StoreResult<(String, String, sqlx::any::AnyRow)> {
    let row = sqlx::query(
        "SELECT d.document, b.state, b.created_at, r.uploaded_by, \
         COALESCE(r.uploaded_by_owner, r.uploaded_by) AS uploaded_by_owner \
         FROM baselines b JOIN runs r ON r.id = b.run_id \
         JOIN baseline_documents d ON d.baseline_id = b.id WHERE b.id = $1",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("baseline {id:?}")))?;
    let state: String = row.try_get("state")?;
    if state != from.as_str() {
        return Err(StoreError::Conflict(format!(
            "baseline {id} is {state}, not {}",
            from.as_str()
        )));
    }
    // The stored document may be behind its row; `restate` rewrites every state field but the
    // decision, which only a full write (below) changes.
    let old: String = row.try_get("document")?;
    let restate = Restate {
        state: change.to,
        decision: change.decision.as_ref(),
        superseded_by: change.superseded_by,
    };
    let (bytes, canonical) = restated_document(&old, restate)?;
    drop(old);
    let sha256 = sha256_hex(bytes.as_bytes());
    // Written whole: a decision; bytes that had to be rendered anew (so that reads never
    // render them with another version's code); and on PostgreSQL always, where replicas of
    // the previous version read the document from the baseline's row (migration 0013).
    let written = change.decision.is_some() || !canonical || !documents_apart(tx);
    let done = sqlx::query(
        "UPDATE baselines SET state = $2, sha256 = $3, updated_at = $4, superseded_by = $6, document_behind = $7 \
         WHERE id = $1 AND state = $5",
    )
    .bind(id)
    .bind(change.to.as_str())
    .bind(&sha256)
    .bind(now)
    .bind(from.as_str())
    .bind(match change.to {
        BaselineState::Superseded => change.superseded_by.map(str::to_owned),
        _ => None,
    })
    .bind(i64::from(!written))
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() != 1 {
        return Err(StoreError::Conflict(format!(
            "baseline {id} changed state concurrently"
        )));
    }
    if written {
        sqlx::query("UPDATE baseline_documents SET document = $2 WHERE baseline_id = $1")
            .bind(id)
            .bind(&bytes)
            .execute(&mut **tx)
            .await?;
    }
    let created_at: String = row.try_get("created_at")?;
    archive_document(tx, prefix, (id, &created_at, &sha256), now).await?;
    Ok((bytes, sha256, row))
}

/// Whether a baseline's document has a table of its own (SQLite), so that a state change may
/// leave it behind the baseline's row; on PostgreSQL `baseline_documents` is a view of the
/// row's own document (migration 0013).
fn documents_apart(tx: &Tx) -> bool {
    tx.backend_name() == "SQLite"
}

pub(super) async fn current_id(tx: &mut Tx, chain: &str) -> StoreResult<Option<String>> {
    let row = sqlx::query("SELECT id FROM baselines WHERE chain = $1 AND state = 'approved'")
        .bind(chain)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(row.map(|r| r.try_get(0)).transpose()?)
}

/// Moves the chain's approved baseline, if any, to superseded by `by` (before `by` goes
/// live); its id.
async fn supersede_current(
    tx: &mut Tx,
    archive_prefix: &str,
    chain: &str,
    by: &str,
    at: &str,
) -> StoreResult<Option<String>> {
    let Some(old) = current_id(tx, chain).await? else {
        return Ok(None);
    };
    let change = Change::superseded_by(by);
    mark(
        tx,
        archive_prefix,
        &old,
        BaselineState::Approved,
        change,
        at,
    )
    .await?;
    Ok(Some(old))
}

/// The chain's newest baseline, in commit order; baselines from before `chain_seq` come first,
/// by creation time.
const NEWEST_BASELINE: &str = "SELECT id FROM baselines WHERE chain = $1 \
     ORDER BY COALESCE(chain_seq, 0) DESC, created_at DESC, id DESC LIMIT 1";

/// [`NEWEST_BASELINE`], read after the chain's row is locked.
async fn newest_baseline(tx: &mut Tx, chain: &str) -> StoreResult<Option<String>> {
    Ok(sqlx::query_scalar(NEWEST_BASELINE)
        .bind(chain)
        .fetch_optional(&mut **tx)
        .await?)
}

impl SqlStore {
    /// Approves or rejects a draft; an approval with `canary` publishes it for the canary's
    /// agents only (kind `canary`) and records the rollout, baking until its end time.
    pub(super) async fn decide_with(
        &self,
        id: &str,
        verdict: Verdict,
        comment: Option<String>,
        audit: Audit,
        canary: Option<(&Rollout, &str)>,
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
        // Check the draft first (core's rule, inside the transaction, the chain locked) so a
        // non-draft, a superseded draft or an older draft answers Conflict before anything moves.
        let draft = fetch_baseline(&mut tx, id).await?;
        let newest = newest_baseline(&mut tx, &chain).await?;
        let to = lifecycle::decide(&draft.doc, verdict, newest.as_deref())
            .map_err(|e| StoreError::Conflict(e.to_string()))?;
        if verdict == Verdict::Approve {
            if let Some(baking) = baking_on(&mut tx, &chain).await? {
                return Err(StoreError::Conflict(format!(
                    "chain {chain} has a canary baking (baseline {baking}): promote or abort it first"
                )));
            }
        }
        let label = match verdict {
            Verdict::Approve => "approved",
            Verdict::Reject => "rejected",
        };
        let superseded = match verdict {
            Verdict::Approve => {
                supersede_current(&mut tx, &self.archive_prefix, &chain, id, &audit.at).await?
            }
            Verdict::Reject => None,
        };
        let change = Change {
            decision: Some(decision),
            ..Change::to(to)
        };
        let stored = transition(
            &mut tx,
            &self.archive_prefix,
            id,
            BaselineState::Draft,
            change,
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
                let kind = if canary.is_some() {
                    "canary"
                } else {
                    "approve"
                };
                let revision = publish(&mut tx, self.backend, &chain, id, kind, &audit).await?;
                if let Some((rollout, bake_ends_at)) = canary {
                    let previous = superseded.as_deref().ok_or_else(|| {
                        StoreError::Conflict(format!(
                            "chain {chain} has no approved baseline for the agents outside a canary to keep: approve without a rollout"
                        ))
                    })?;
                    super::rollouts::insert_rollout(
                        &mut tx,
                        &chain,
                        id,
                        revision,
                        previous,
                        rollout,
                        bake_ends_at,
                        &audit,
                    )
                    .await?;
                }
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
        let (stored, superseded) =
            insert_baseline_tx(&mut tx, &self.archive_prefix, draft, uploader).await?;
        let mut audit = audit;
        audit.subject = Some(stored.doc.id.clone());
        if !superseded.is_empty() {
            audit.detail["superseded_drafts"] = superseded.into();
        }
        write_audit(&mut tx, &audit).await?;
        commit(tx, stored).await
    }

    async fn get_baseline(&self, id: &str) -> StoreResult<StoredBaseline> {
        let row = sqlx::query(&format!(
            "SELECT {BASELINE_COLUMNS} FROM baselines b {BASELINE_JOINS} WHERE b.id = $1"
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
            "SELECT id, chain, state, reason, run_id, topology_version, has_errors, created_at, created_by, updated_at, \
               superseded_by, (SELECT MIN(a.created_at) FROM approvals a \
                 WHERE a.baseline_id = baselines.id AND a.decision = 'approved') AS approved_at \
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

    async fn newest_baseline(&self, chain: &str) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar(NEWEST_BASELINE)
            .bind(chain)
            .fetch_optional(&self.pool)
            .await?)
    }

    async fn current_baseline(&self, chain: &str) -> StoreResult<Option<StoredBaseline>> {
        let row = sqlx::query(&format!(
            "SELECT {BASELINE_COLUMNS} FROM baselines b {BASELINE_JOINS} \
             WHERE b.chain = $1 AND b.state = 'approved'"
        ))
        .bind(chain)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(baseline_from_row).transpose()
    }

    async fn current_baseline_ref(&self, chain: &str) -> StoreResult<Option<(String, String)>> {
        let row =
            sqlx::query("SELECT id, sha256 FROM baselines WHERE chain = $1 AND state = 'approved'")
                .bind(chain)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).transpose()
    }

    async fn decide(
        &self,
        id: &str,
        verdict: Verdict,
        comment: Option<String>,
        audit: Audit,
    ) -> StoreResult<(StoredBaseline, Option<Published>)> {
        self.decide_with(id, verdict, comment, audit, None).await
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
        lifecycle::roll_back_to(&target.doc).map_err(|e| StoreError::Conflict(e.to_string()))?;
        let superseded =
            supersede_current(&mut tx, &self.archive_prefix, chain, id, &audit.at).await?;
        let stored = transition(
            &mut tx,
            &self.archive_prefix,
            id,
            BaselineState::Superseded,
            Change::to(BaselineState::Approved),
            &audit.at,
        )
        .await?;
        archive_budget(&mut tx, &self.archive_prefix, &stored, &audit.at).await?;
        let revision = publish(&mut tx, self.backend, chain, id, "rollback", &audit).await?;
        if let Some(baking) = baking_on(&mut tx, chain).await? {
            let reason = format!("rolled back to {id} by {}", audit.actor);
            super::rollouts::finish(
                &mut tx,
                &baking,
                (CanaryState::Aborted, &reason, None),
                revision,
                &audit,
            )
            .await?;
            // Audited (and sent to webhooks) as the canary's end, beside the rollback.
            let ended = Audit {
                action: "rollout.abort",
                subject: Some(baking.clone()),
                detail: serde_json::json!({"reason": reason, "revision": revision, "live_baseline": id}),
                ..audit.clone()
            };
            write_audit(&mut tx, &ended).await?;
        }
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
            "SELECT {BASELINE_COLUMNS} FROM baselines b {BASELINE_JOINS} \
             WHERE ($1 = '' OR b.created_at LIKE $2) ORDER BY b.created_at, b.id"
        ))
        .bind(date.unwrap_or(""))
        .bind(format!("{}%", date.unwrap_or("")))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(baseline_from_row).collect()
    }
}
