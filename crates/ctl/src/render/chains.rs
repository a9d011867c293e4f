//! A chain's topology (`topology apply|show`) and the list of chains.

use serde_json::Value;

use super::{arr, fields, idempotency, ms, s, table};

/// A topology segment's explicit retry flags, e.g. `on_deadline=false`; `-` when defaulted.
fn retry_flags(r: &Value) -> String {
    let set: Vec<String> = ["on_deadline", "on_unavailable"]
        .iter()
        .filter_map(|name| r[*name].as_bool().map(|b| format!("{name}={b}")))
        .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(" ")
    }
}

/// `GET|PUT /chains/{chain}/topology`.
pub fn topology(v: &Value) -> String {
    let topo = &v["topology"];
    let head = fields(&[
        ("chain", s(&v["chain"])),
        ("version", s(&v["version"])),
        (
            "entry budget",
            format!("{} ms", ms(&topo["entry_budget_ms"])),
        ),
        (
            "breaker window",
            format!("{} ms", ms(&topo["breaker_window_ms"])),
        ),
        ("max recovery", s(&topo["max_recovery"])),
        ("sha256", s(&v["sha256"])),
        (
            "created",
            format!("{} by {}", s(&v["created_at"]), s(&v["created_by"])),
        ),
    ]);
    let mut t = table(
        &[
            "segment",
            "parent",
            "class",
            "stage",
            "idempotency",
            "retry",
            "pinned ms",
            "reserve ms",
        ],
        &[3, 6, 7],
    );
    for seg in arr(&topo["segments"]) {
        t.add_row(vec![
            s(&seg["id"]),
            s(&seg["parent"]),
            s(&seg["class"]),
            s(&seg["stage"]),
            idempotency(&seg["idempotency"]),
            retry_flags(&seg["retry"]),
            ms(&seg["pinned_timeout_ms"]),
            ms(&seg["reserve_ms"]),
        ]);
    }
    format!("{head}\n{t}")
}

/// `GET /chains`.
pub fn chains(v: &Value) -> String {
    let list = arr(&v["chains"]);
    if list.is_empty() {
        return "no chains".into();
    }
    let mut t = table(
        &[
            "chain",
            "topology",
            "live baseline",
            "revision",
            "drafts",
            "runs",
            "updated at",
        ],
        &[1, 3, 4, 5],
    );
    for c in list {
        t.add_row(vec![
            s(&c["name"]),
            s(&c["topology_version"]),
            s(&c["current_baseline"]),
            s(&c["revision"]),
            s(&c["drafts"]),
            s(&c["runs"]),
            s(&c["updated_at"]),
        ]);
    }
    t.to_string()
}
