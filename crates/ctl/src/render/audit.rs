//! The audit log.

use serde_json::Value;

use super::{arr, s, table};

/// `GET /audit`.
pub fn audit(v: &Value) -> String {
    let list = arr(&v["entries"]);
    if list.is_empty() {
        return "no audit entries".into();
    }
    let mut t = table(
        &["id", "at", "actor", "action", "chain", "subject", "detail"],
        &[0],
    );
    for e in list {
        let detail = match &e["detail"] {
            Value::Object(m) if m.is_empty() => "-".into(),
            Value::Null => "-".into(),
            other => other.to_string(),
        };
        t.add_row(vec![
            s(&e["id"]),
            s(&e["at"]),
            s(&e["actor"]),
            s(&e["action"]),
            s(&e["chain"]),
            s(&e["subject"]),
            detail,
        ]);
    }
    t.to_string()
}
