//! [`AuditLog`] over SQL (entries are written by [`write_audit`](super::tx::write_audit)).

use async_trait::async_trait;
use budget_api::audit::AuditEntry;

use super::rows::audit_entry_from_row;
use super::SqlStore;
use crate::store::{AuditLog, StoreResult};

#[async_trait]
impl AuditLog for SqlStore {
    async fn audit_log(
        &self,
        chain: Option<&str>,
        limit: i64,
        before: Option<i64>,
    ) -> StoreResult<Vec<AuditEntry>> {
        let rows = sqlx::query(
            "SELECT id, at, actor, action, chain, subject, detail FROM audit_log \
             WHERE ($1 = '' OR chain = $1) AND id < $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(chain.unwrap_or(""))
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(audit_entry_from_row).collect()
    }
}
