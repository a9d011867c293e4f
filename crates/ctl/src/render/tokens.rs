//! API tokens (never their secrets).

use serde_json::Value;

use super::{arr, s, table};

/// `GET /tokens`.
pub fn tokens(v: &Value) -> String {
    let list = arr(&v["tokens"]);
    if list.is_empty() {
        return "no tokens".into();
    }
    let mut t = table(&["name", "role", "owner", "created by", "created at"], &[]);
    for tok in list {
        t.add_row(vec![
            s(&tok["name"]),
            s(&tok["role"]),
            s(&tok["owner"]),
            s(&tok["created_by"]),
            s(&tok["created_at"]),
        ]);
    }
    t.to_string()
}
