//! The audit log: who did what, newest first.

use budget_api::audit::AuditEntry;

use super::check_chain_name;
use crate::error::ApiResult;
use crate::state::AppState;

/// Up to `limit` entries (of one chain, or all), newer than nothing and older than entry
/// `before` when given.
pub async fn log(
    state: &AppState,
    chain: Option<&str>,
    limit: i64,
    before: Option<i64>,
) -> ApiResult<Vec<AuditEntry>> {
    if let Some(chain) = chain {
        check_chain_name(chain)?;
    }
    Ok(state.store.audit_log(chain, limit, before).await?)
}
