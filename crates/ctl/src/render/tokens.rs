//! API tokens (never their secrets).

use budget_api::tokens::TokenList;

use super::{table, text};

/// `GET /tokens`.
pub fn tokens(v: &TokenList) -> String {
    if v.tokens.is_empty() {
        return "no tokens".into();
    }
    let mut t = table(&["name", "role", "owner", "created by", "created at"], &[]);
    for tok in &v.tokens {
        t.add_row(vec![
            text(&tok.name),
            text(&tok.role),
            text(&tok.owner),
            text(&tok.created_by),
            text(&tok.created_at),
        ]);
    }
    t.to_string()
}
