//! [`Idempotency`] over SQL: the responses kept under `Idempotency-Key`s (the keys themselves
//! are recorded by [`commit`](super::tx::commit)).

use async_trait::async_trait;
use sqlx::Row;

use super::{internal, SqlStore};
use crate::store::{IdemLookup, IdemResponse, Idempotency, StoreResult};

#[async_trait]
impl Idempotency for SqlStore {
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
}
