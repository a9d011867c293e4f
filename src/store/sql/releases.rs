//! [`Releases`] over SQL.

use async_trait::async_trait;
use budget_api::releases::{Release, ReleaseRequest};

use super::rows::{release_from_row, RELEASE_COLUMNS};
use super::tx::{commit, replayed, write_audit};
use super::SqlStore;
use crate::store::{Audit, Releases, StoreResult};

#[async_trait]
impl Releases for SqlStore {
    async fn create_release(
        &self,
        release: ReleaseRequest,
        sha256: &str,
        audit: Audit,
    ) -> StoreResult<Release> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let row = sqlx::query(&format!(
            "INSERT INTO releases (service, version, baseline_id, baseline_sha256, ticket, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {RELEASE_COLUMNS}"
        ))
        .bind(&release.service)
        .bind(&release.version)
        .bind(&release.baseline_id)
        .bind(sha256)
        .bind(&release.ticket)
        .bind(&audit.actor)
        .bind(&audit.at)
        .fetch_one(&mut *tx)
        .await?;
        let release = release_from_row(&row)?;
        write_audit(&mut tx, &audit).await?;
        commit(tx, release).await
    }

    async fn list_releases(
        &self,
        baseline_id: Option<&str>,
        service: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<Release>> {
        let rows = sqlx::query(&format!(
            "SELECT {RELEASE_COLUMNS} FROM releases \
             WHERE ($1 = '' OR baseline_id = $1) AND ($2 = '' OR service = $2) ORDER BY id DESC LIMIT $3"
        ))
        .bind(baseline_id.unwrap_or(""))
        .bind(service.unwrap_or(""))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(release_from_row).collect()
    }
}
