//! A chain's topology (`topology apply|show`) and the list of chains.

use budget_api::chains::{ChainList, TopologyVersion};
use budget_core::topology::RetryFlags;

use super::{fields, idempotency, ms_u, opt, table, text, wire};

/// A topology segment's explicit retry flags, e.g. `on_deadline=false`; `-` when defaulted.
fn retry_flags(r: &Option<RetryFlags>) -> String {
    let Some(r) = r else { return "-".into() };
    let set: Vec<String> = [
        ("on_deadline", r.on_deadline),
        ("on_unavailable", r.on_unavailable),
    ]
    .iter()
    .filter_map(|(name, b)| b.map(|b| format!("{name}={b}")))
    .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(" ")
    }
}

/// `GET|PUT /chains/{chain}/topology`.
pub fn topology(v: &TopologyVersion) -> String {
    let topo = &v.topology;
    let head = fields(&[
        ("chain", text(&v.chain)),
        ("version", v.version.to_string()),
        ("entry budget", format!("{} ms", ms_u(topo.entry_budget_ms))),
        (
            "breaker window",
            format!("{} ms", ms_u(topo.breaker_window_ms)),
        ),
        ("max recovery", wire(&topo.max_recovery)),
        ("sha256", text(&v.sha256)),
        (
            "created",
            format!("{} by {}", text(&v.created_at), text(&v.created_by)),
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
    for seg in &topo.segments {
        t.add_row(vec![
            text(&seg.id),
            opt(&seg.parent),
            wire(&seg.class),
            opt(&seg.stage),
            idempotency(&seg.idempotency),
            retry_flags(&seg.retry),
            seg.pinned_timeout_ms.map_or_else(|| "-".into(), ms_u),
            reserve(seg.reserve_ms),
        ]);
    }
    format!("{head}\n{t}")
}

/// A topology's reserve: absent on the wire (`-`) when zero.
fn reserve(ms: u64) -> String {
    if ms == 0 {
        "-".into()
    } else {
        ms_u(ms)
    }
}

/// `GET /chains`.
pub fn chains(v: &ChainList) -> String {
    if v.chains.is_empty() {
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
    for c in &v.chains {
        t.add_row(vec![
            text(&c.name),
            opt(&c.topology_version),
            opt(&c.current_baseline),
            opt(&c.revision),
            c.drafts.to_string(),
            c.runs.to_string(),
            text(&c.updated_at),
        ]);
    }
    t.to_string()
}
