//! [`Rollouts`] over SQL. A canary's state changes under its chain's lock, like every
//! publication, so two replicas ending the same canary take turns and the second finds it
//! ended.

use async_trait::async_trait;
use base64::Engine as _;
use budget_core::baseline::BaselineState;
use budget_core::canary::{CanaryState, Rollout, Selector};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::baselines::{fetch_baseline, mark, transition, Change};
use super::feedback::{counts_from_row, counts_values, COUNT_COLUMNS};
use super::outbox::archive_budget;
use super::rows::{publication_with_baseline_from_row, BASELINE_COLUMNS, BASELINE_JOINS};
use super::tx::{commit, lock_chain, publish, replayed, write_audit};
use super::{internal, placeholders, SqlStore, Tx};
use crate::store::rollouts::{CanaryEnd, CanaryHealthRow, Rollouts, StoredRollout, WHOLE_BAKE};
use crate::store::{
    Audit, Publication, Published, StoreError, StoreResult, StoredBaseline, Verdict,
};

const ROLLOUT_COLUMNS: &str = "baseline_id, chain, revision, previous_baseline_id, previous_revision, selector, bake_s, auto, state, \
     started_at, started_by, bake_ends_at, ended_at, ended_by, reason, end_revision, figures";

fn rollout_from_row(r: &AnyRow) -> StoreResult<StoredRollout> {
    let selector: String = r.try_get("selector")?;
    let state: String = r.try_get("state")?;
    Ok(StoredRollout {
        baseline_id: r.try_get("baseline_id")?,
        chain: r.try_get("chain")?,
        revision: r.try_get("revision")?,
        previous_baseline_id: r.try_get("previous_baseline_id")?,
        previous_revision: r.try_get("previous_revision")?,
        selector: serde_json::from_str::<Selector>(&selector).map_err(internal)?,
        bake_s: u64::try_from(r.try_get::<i64, _>("bake_s")?).unwrap_or(0),
        auto: r.try_get::<i64, _>("auto")? != 0,
        state: CanaryState::parse(&state)
            .ok_or_else(|| internal(anyhow::anyhow!("bad rollout state {state:?}")))?,
        started_at: r.try_get("started_at")?,
        started_by: r.try_get("started_by")?,
        bake_ends_at: r.try_get("bake_ends_at")?,
        ended_at: r.try_get("ended_at")?,
        ended_by: r.try_get("ended_by")?,
        reason: r.try_get("reason")?,
        end_revision: r.try_get("end_revision")?,
        figures: r
            .try_get::<Option<String>, _>("figures")?
            .map(|f| serde_json::from_str(&f).map_err(internal))
            .transpose()?,
    })
}

/// The baseline of the canary baking on `chain`, if any.
pub(super) async fn baking_on(tx: &mut Tx, chain: &str) -> StoreResult<Option<String>> {
    Ok(
        sqlx::query_scalar(
            "SELECT baseline_id FROM rollouts WHERE chain = $1 AND state = 'baking'",
        )
        .bind(chain)
        .fetch_optional(&mut **tx)
        .await?,
    )
}

/// Records a canary just published at `revision`; `previous` stays live for the others.
#[allow(clippy::too_many_arguments)]
pub(super) async fn insert_rollout(
    tx: &mut Tx,
    chain: &str,
    baseline_id: &str,
    revision: i64,
    previous: &str,
    rollout: &Rollout,
    bake_ends_at: &str,
    audit: &Audit,
) -> StoreResult<()> {
    let previous_revision: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(revision), 0) FROM publications WHERE chain = $1 AND baseline_id = $2 AND revision < $3",
    )
    .bind(chain)
    .bind(previous)
    .bind(revision)
    .fetch_one(&mut **tx)
    .await?;
    sqlx::query(&format!(
        "INSERT INTO rollouts ({ROLLOUT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'baking', $9, $10, $11, NULL, NULL, NULL, NULL, NULL)"
    ))
    .bind(baseline_id)
    .bind(chain)
    .bind(revision)
    .bind(previous)
    .bind(previous_revision)
    .bind(serde_json::to_string(&rollout.canary).map_err(internal)?)
    .bind(i64::try_from(rollout.bake_s).unwrap_or(i64::MAX))
    .bind(i64::from(rollout.auto))
    .bind(&audit.at)
    .bind(&audit.actor)
    .bind(bake_ends_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Marks the baking rollout of `baseline_id` ended (`to`), by `audit.actor`, at `end_revision`.
pub(super) async fn finish(
    tx: &mut Tx,
    baseline_id: &str,
    (to, reason, figures): (CanaryState, &str, Option<&serde_json::Value>),
    end_revision: i64,
    audit: &Audit,
) -> StoreResult<()> {
    let done = sqlx::query(
        "UPDATE rollouts SET state = $2, ended_at = $3, ended_by = $4, reason = $5, end_revision = $6, figures = $7 \
         WHERE baseline_id = $1 AND state = 'baking'",
    )
    .bind(baseline_id)
    .bind(to.as_str())
    .bind(&audit.at)
    .bind(&audit.actor)
    .bind(reason)
    .bind(end_revision)
    .bind(figures.map(serde_json::Value::to_string))
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() != 1 {
        return Err(StoreError::Conflict(format!(
            "the canary of {baseline_id} is not baking"
        )));
    }
    Ok(())
}

async fn rollout_in(tx: &mut Tx, baseline_id: &str) -> StoreResult<StoredRollout> {
    let row = sqlx::query(&format!(
        "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE baseline_id = $1"
    ))
    .bind(baseline_id)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("a canary rollout of baseline {baseline_id:?}")))?;
    rollout_from_row(&row)
}

/// The columns of a [`CanaryHealthRow`], in the order it is bound.
const HEALTH_COLUMNS: &str =
    "baseline_id, segment, writer, minute, calls, attempts, retries_deadline, \
     retries_unavailable, ok, deadline_exceeded, unavailable, business_error, budget_exhausted, \
     retry_refused_no_key, latency_hdr, updated_at";
const HEALTH_WIDTH: usize = 16;

fn health_from_row(r: &AnyRow) -> StoreResult<CanaryHealthRow> {
    let hdr: String = r.try_get("latency_hdr")?;
    Ok(CanaryHealthRow {
        baseline_id: r.try_get("baseline_id")?,
        segment: r.try_get("segment")?,
        writer: r.try_get("writer")?,
        minute: r.try_get("minute")?,
        counts: counts_from_row(r)?,
        latency_hdr: base64::engine::general_purpose::STANDARD
            .decode(hdr)
            .map_err(internal)?,
        updated_at: r.try_get("updated_at")?,
    })
}

#[async_trait]
impl Rollouts for SqlStore {
    async fn approve_canary(
        &self,
        id: &str,
        comment: Option<String>,
        rollout: &Rollout,
        bake_ends_at: &str,
        audit: Audit,
    ) -> StoreResult<(StoredBaseline, Published)> {
        let (stored, published) = self
            .decide_with(
                id,
                Verdict::Approve,
                comment,
                audit,
                Some((rollout, bake_ends_at)),
            )
            .await?;
        let published = published.ok_or_else(|| internal(anyhow::anyhow!("nothing published")))?;
        Ok((stored, published))
    }

    async fn get_rollout(&self, baseline_id: &str) -> StoreResult<Option<StoredRollout>> {
        let row = sqlx::query(&format!(
            "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE baseline_id = $1"
        ))
        .bind(baseline_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(rollout_from_row).transpose()
    }

    async fn baking_rollouts(&self) -> StoreResult<Vec<StoredRollout>> {
        let rows = sqlx::query(&format!(
            "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE state = 'baking' ORDER BY revision"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rollout_from_row).collect()
    }

    async fn end_rollout(
        &self,
        baseline_id: &str,
        end: CanaryEnd,
        reason: &str,
        figures: &serde_json::Value,
        audit: Audit,
    ) -> StoreResult<(StoredRollout, Published)> {
        let chain: String = sqlx::query_scalar("SELECT chain FROM rollouts WHERE baseline_id = $1")
            .bind(baseline_id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| {
                StoreError::NotFound(format!("a canary rollout of baseline {baseline_id:?}"))
            })?;
        let mut tx = self.begin().await?;
        lock_chain(&mut tx, &chain, &audit.at).await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let rollout = rollout_in(&mut tx, baseline_id).await?;
        if rollout.state != CanaryState::Baking {
            return Err(StoreError::Conflict(format!(
                "the canary of {baseline_id} is {} already{}",
                rollout.state.as_str(),
                rollout
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            )));
        }
        let (published, to) = match end {
            CanaryEnd::Promote => {
                let stored = fetch_baseline(&mut tx, baseline_id).await?;
                let revision = publish(
                    &mut tx,
                    self.backend,
                    &chain,
                    baseline_id,
                    "promote",
                    &audit,
                )
                .await?;
                let published = Published {
                    baseline: stored,
                    revision,
                    superseded: None,
                };
                (published, CanaryState::Promoted)
            }
            CanaryEnd::Abort => {
                let previous = rollout.previous_baseline_id.as_str();
                mark(
                    &mut tx,
                    &self.archive_prefix,
                    baseline_id,
                    BaselineState::Approved,
                    Change::superseded_by(previous),
                    &audit.at,
                )
                .await?;
                let stored = transition(
                    &mut tx,
                    &self.archive_prefix,
                    previous,
                    BaselineState::Superseded,
                    Change::to(BaselineState::Approved),
                    &audit.at,
                )
                .await?;
                archive_budget(&mut tx, &self.archive_prefix, &stored, &audit.at).await?;
                let revision =
                    publish(&mut tx, self.backend, &chain, previous, "abort", &audit).await?;
                let published = Published {
                    baseline: stored,
                    revision,
                    superseded: Some(baseline_id.to_owned()),
                };
                (published, CanaryState::Aborted)
            }
        };
        finish(
            &mut tx,
            baseline_id,
            (to, reason, Some(figures)),
            published.revision,
            &audit,
        )
        .await?;
        let ended = rollout_in(&mut tx, baseline_id).await?;
        let mut audit = audit;
        audit.chain = Some(chain);
        audit.subject = Some(baseline_id.to_owned());
        audit.detail["reason"] = reason.into();
        audit.detail["revision"] = published.revision.into();
        audit.detail["live_baseline"] = published.baseline.doc.id.clone().into();
        write_audit(&mut tx, &audit).await?;
        commit(tx, (ended, published)).await
    }

    async fn record_canary_nack(
        &self,
        baseline_id: &str,
        agent_id: &str,
        error: &str,
        at: &str,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO canary_nacks (baseline_id, agent_id, error, at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (baseline_id, agent_id) DO NOTHING",
        )
        .bind(baseline_id)
        .bind(agent_id)
        .bind(error)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn canary_nacks(&self, baseline_id: &str) -> StoreResult<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT agent_id, error FROM canary_nacks WHERE baseline_id = $1 ORDER BY at, agent_id",
        )
        .bind(baseline_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }

    async fn writer_canary_health(
        &self,
        baseline_id: &str,
        writer: &str,
        from: i64,
    ) -> StoreResult<Vec<CanaryHealthRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {HEALTH_COLUMNS} FROM canary_health WHERE baseline_id = $1 AND writer = $2 \
             AND (minute = $3 OR minute >= $4)"
        ))
        .bind(baseline_id)
        .bind(writer)
        .bind(WHOLE_BAKE)
        .bind(from)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(health_from_row).collect()
    }

    async fn canary_health(
        &self,
        baseline_id: &str,
        from: i64,
    ) -> StoreResult<Vec<CanaryHealthRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {HEALTH_COLUMNS} FROM canary_health WHERE baseline_id = $1 \
             AND (minute = $2 OR minute >= $3) ORDER BY segment, minute, writer"
        ))
        .bind(baseline_id)
        .bind(WHOLE_BAKE)
        .bind(from)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(health_from_row).collect()
    }

    async fn expire_canary_health(&self, before: i64) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM canary_health WHERE minute >= 0 AND minute < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn stable_publication(
        &self,
        chain: &str,
        before: i64,
    ) -> StoreResult<Option<(Publication, StoredBaseline)>> {
        let row = sqlx::query(&format!(
            "SELECT p.revision, p.chain, p.baseline_id, p.kind, p.created_by, p.created_at, {BASELINE_COLUMNS} \
             FROM publications p JOIN baselines b ON b.id = p.baseline_id {BASELINE_JOINS} \
             WHERE p.chain = $1 AND p.kind <> 'canary' AND p.revision < $2 ORDER BY p.revision DESC LIMIT 1"
        ))
        .bind(chain)
        .bind(before)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(publication_with_baseline_from_row)
            .transpose()
    }
}

/// Rows per statement: 1,000 × 16 binds stays below both backends' limits.
const HEALTH_CHUNK: usize = 1_000;

/// Writes canary health rows in `tx` (each replacing the same key's row), a multi-row
/// statement per [`HEALTH_CHUNK`] rows.
pub(super) async fn put_health_in(
    tx: &mut Tx,
    backend: crate::store::Backend,
    rows: &[CanaryHealthRow],
) -> StoreResult<()> {
    let replace = |c: &str| format!("{c} = excluded.{c}");
    for chunk in rows.chunks(HEALTH_CHUNK) {
        let sql = format!(
            "INSERT INTO canary_health ({HEALTH_COLUMNS}) VALUES {} \
             ON CONFLICT (baseline_id, segment, writer, minute) DO UPDATE SET {}, {}",
            placeholders(backend, chunk.len(), HEALTH_WIDTH),
            COUNT_COLUMNS.map(replace).join(", "),
            ["latency_hdr", "updated_at"].map(replace).join(", ")
        );
        let mut q = super::rows_query(&sql, chunk.len(), HEALTH_CHUNK);
        for r in chunk {
            q = q
                .bind(r.baseline_id.clone())
                .bind(r.segment.clone())
                .bind(r.writer.clone())
                .bind(r.minute);
            for v in counts_values(&r.counts) {
                q = q.bind(v);
            }
            q = q
                .bind(base64::engine::general_purpose::STANDARD.encode(&r.latency_hdr))
                .bind(r.updated_at.clone());
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}
