//! [`Publications`] over SQL (they are written by [`publish`](super::tx::publish)).

use async_trait::async_trait;

use super::rows::{
    publication_from_row, publication_with_baseline_from_row, BASELINE_COLUMNS, BASELINE_JOINS,
};
use super::tx::PUBLICATION_CHANNEL;
use super::SqlStore;
use crate::store::{Publication, PublicationListener, Publications, StoreResult, StoredBaseline};

impl SqlStore {
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
}

#[async_trait]
impl Publications for SqlStore {
    async fn latest_publication(&self, chain: &str) -> StoreResult<Option<Publication>> {
        self.one_publication("chain", chain).await
    }

    async fn publication_listener(&self) -> StoreResult<Option<Box<dyn PublicationListener>>> {
        let Some(url) = &self.listen_url else {
            return Ok(None);
        };
        let mut listener = sqlx::postgres::PgListener::connect(url).await?;
        listener.listen(PUBLICATION_CHANNEL).await?;
        Ok(Some(Box::new(PgPublications(listener))))
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
             FROM publications p JOIN baselines b ON b.id = p.baseline_id {BASELINE_JOINS} \
             WHERE p.revision > $1 AND p.revision = (SELECT MAX(q.revision) FROM publications q WHERE q.chain = p.chain) \
             ORDER BY p.revision"
        ))
        .bind(after)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(publication_with_baseline_from_row)
            .collect()
    }
}

/// PostgreSQL's notifications on [`PUBLICATION_CHANNEL`].
struct PgPublications(sqlx::postgres::PgListener);

#[async_trait]
impl PublicationListener for PgPublications {
    async fn next(&mut self) -> StoreResult<String> {
        Ok(self.0.recv().await?.payload().to_owned())
    }
}
