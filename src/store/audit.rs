//! The audit log, written in the transaction of each change.

use async_trait::async_trait;
use budget_api::audit::AuditEntry;

use super::StoreResult;

/// What happened, by whom, to go into the audit log in the same transaction.
#[derive(Debug, Clone)]
pub struct Audit {
    pub actor: String,
    pub action: &'static str,
    pub chain: Option<String>,
    pub subject: Option<String>,
    pub detail: serde_json::Value,
    pub at: String,
}

/// Reading the audit log (every write appends to it in its own transaction).
#[async_trait]
pub trait AuditLog: Send + Sync {
    async fn audit_log(
        &self,
        chain: Option<&str>,
        limit: i64,
        before: Option<i64>,
    ) -> StoreResult<Vec<AuditEntry>>;
}
