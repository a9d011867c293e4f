//! [`Runs`] over SQL: a run and, when given, the draft computed from it, in one transaction.

use async_trait::async_trait;
use budget_core::baseline::BaselineDocument;
use sqlx::Row;

use super::baselines::{current_id, insert_baseline_tx};
use super::rows::{run_from_row, RUN_COLUMNS, RUN_LIST_COLUMNS, RUN_READ_COLUMNS};
use super::tx::{commit, lock_chain, next_counter, replayed, write_audit};
use super::{compact_date, internal, SqlStore};
use crate::store::{Audit, NewRun, Runs, StoreError, StoreResult, StoredBaseline, StoredRun};

#[async_trait]
impl Runs for SqlStore {
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
        // The distributions go to a column of their own (a list of runs does not read them).
        let mut percentiles = run.data.clone();
        let distributions = std::mem::take(&mut percentiles.distributions);
        let data = serde_json::to_string(&percentiles).map_err(internal)?;
        let distributions = (!distributions.is_empty())
            .then(|| serde_json::to_string(&distributions))
            .transpose()
            .map_err(internal)?;
        let row = sqlx::query(&format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
             RETURNING {RUN_COLUMNS}"
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
        .bind(distributions)
        .fetch_one(&mut *tx)
        .await?;
        let mut stored = run_from_row(&row)?;
        let (baseline, superseded) = match draft {
            Some(mut doc) => {
                doc.run_id = id.clone();
                let uploader = (run.uploaded_by, run.uploaded_by_owner);
                let (baseline, superseded) =
                    insert_baseline_tx(&mut tx, &self.archive_prefix, doc, uploader).await?;
                (Some(baseline), superseded)
            }
            None => (None, Vec::new()),
        };
        stored.opened_draft = baseline
            .as_ref()
            .map(|b| (b.doc.id.clone(), b.doc.state.as_str().to_owned()));
        let mut audit = audit;
        audit.subject = Some(id.clone());
        if let Some(b) = &baseline {
            audit.detail["baseline_id"] = b.doc.id.clone().into();
        }
        if !superseded.is_empty() {
            audit.detail["superseded_drafts"] = superseded.into();
        }
        write_audit(&mut tx, &audit).await?;
        commit(tx, (stored, baseline)).await
    }

    async fn get_run(&self, chain: &str, id: &str) -> StoreResult<StoredRun> {
        let row = sqlx::query(&format!(
            "SELECT {RUN_READ_COLUMNS} FROM runs WHERE id = $1 AND chain = $2"
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
            "SELECT {RUN_LIST_COLUMNS} FROM runs WHERE chain = $1 ORDER BY created_at DESC, id DESC LIMIT $2"
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
}
