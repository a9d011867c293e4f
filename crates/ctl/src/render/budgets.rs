//! A chain's live config (`budgets show`) and the answer of a rollback.

use serde_json::Value;

use super::{arr, fields, idempotency, ms, s, table};

/// A live segment's retry plan: `deadline 1× [100] · unavailable 2× [100,300]`.
fn retry_plan(r: &Value) -> String {
    if !r["idempotent"].as_bool().unwrap_or(false) {
        return "never (not idempotent)".into();
    }
    let mut parts = Vec::new();
    for (name, key) in [
        ("deadline", "on_deadline"),
        ("unavailable", "on_unavailable"),
    ] {
        let p = &r[key];
        if !p.is_null() {
            let backoffs: Vec<String> = arr(&p["backoffs_ms"]).iter().map(ms).collect();
            parts.push(format!(
                "{name} {}× [{} ms]",
                s(&p["max_retries"]),
                backoffs.join(", ")
            ));
        }
    }
    if parts.is_empty() {
        "never".into()
    } else {
        parts.join("; ")
    }
}

/// `GET /chains/{chain}/budgets`: the live config.
pub fn budgets(v: &Value) -> String {
    let head = fields(&[
        ("chain", s(&v["chain"])),
        ("revision", s(&v["revision"])),
        ("baseline", s(&v["baseline_id"])),
        ("published", s(&v["published_at"])),
        ("entry budget", format!("{} ms", ms(&v["entry_budget_ms"]))),
        (
            "breaker window",
            format!("{} ms", ms(&v["breaker_window_ms"])),
        ),
        ("max recovery", s(&v["max_recovery"])),
    ]);
    let mut t = table(
        &[
            "segment",
            "parent",
            "class",
            "timeout",
            "budget",
            "reserve",
            "retries",
            "idempotency",
        ],
        &[3, 4, 5],
    );
    for seg in arr(&v["segments"]) {
        t.add_row(vec![
            s(&seg["id"]),
            s(&seg["parent"]),
            s(&seg["class"]),
            ms(&seg["timeout_ms"]),
            ms(&seg["budget_ms"]),
            ms(&seg["reserve_ms"]),
            retry_plan(&seg["retry"]),
            idempotency(&seg["idempotency"]),
        ]);
    }
    format!("{head}\n{t}")
}

/// `POST /chains/{chain}/rollback`.
pub fn rolled_back(v: &Value) -> String {
    let mut line = format!(
        "{} now serves {} (revision {})",
        s(&v["chain"]),
        s(&v["baseline_id"]),
        s(&v["revision"])
    );
    if let Some(old) = v["superseded"].as_str() {
        line.push_str(&format!("; {old} superseded"));
    }
    line
}
