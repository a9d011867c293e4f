//! The audit log.

use budget_api::audit::AuditLog;
use serde_json::Value;

use super::{opt, table, text};

/// `GET /audit`.
pub fn audit(v: &AuditLog) -> String {
    if v.entries.is_empty() {
        return "no audit entries".into();
    }
    let mut t = table(
        &["id", "at", "actor", "action", "chain", "subject", "detail"],
        &[0],
    );
    for e in &v.entries {
        let detail = match &e.detail {
            Value::Object(m) if m.is_empty() => "-".into(),
            Value::Null => "-".into(),
            other => other.to_string(),
        };
        t.add_row(vec![
            e.id.to_string(),
            text(&e.at),
            text(&e.actor),
            text(&e.action),
            opt(&e.chain),
            opt(&e.subject),
            detail,
        ]);
    }
    t.to_string()
}
