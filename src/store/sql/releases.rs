//! [`Releases`] over SQL.

use async_trait::async_trait;
use sqlx::{FromRow, Row};

use super::tx::{commit, replayed, write_audit};
use super::SqlStore;
use crate::store::{Audit, NewRelease, Release, Releases, StoreResult};

#[async_trait]
impl Releases for SqlStore {
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
}
