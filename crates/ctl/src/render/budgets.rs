//! A chain's live config (`budgets show`) and the answer of a rollback.

use budget_api::chains::{LiveBudgets, LiveChain, RollbackResult};
use budget_core::rules::RetryPlan;

use super::{fields, idempotency, ms_u, opt, table, text, wire};

/// A live segment's retry plan: `deadline 1× [100] · unavailable 2× [100,300]`.
fn retry_plan(r: &RetryPlan) -> String {
    if !r.idempotent {
        return "never (not idempotent)".into();
    }
    let mut parts = Vec::new();
    for (name, rule) in [
        ("deadline", &r.on_deadline),
        ("unavailable", &r.on_unavailable),
    ] {
        if let Some(p) = rule {
            let backoffs: Vec<String> = p.backoffs_ms.iter().copied().map(ms_u).collect();
            parts.push(format!(
                "{name} {}× [{} ms]",
                p.max_retries,
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

/// `GET /chains/{chain}/budgets`: the live config and, while a canary bakes, what its
/// agents receive instead.
pub fn budgets(v: &LiveBudgets) -> String {
    let live = live_chain(&v.live);
    match &v.canary {
        None => live,
        Some(c) => format!(
            "{live}\n\ncanary baking until {}: agents selected by {} receive instead:\n{}",
            text(&c.bake_ends_at),
            super::baselines::selector(&c.selector),
            live_chain(&c.budgets)
        ),
    }
}

fn live_chain(v: &LiveChain) -> String {
    let head = fields(&[
        ("chain", text(&v.chain)),
        ("revision", v.revision.to_string()),
        ("baseline", text(&v.baseline_id)),
        ("published", text(&v.published_at)),
        ("entry budget", format!("{} ms", ms_u(v.entry_budget_ms))),
        (
            "breaker window",
            format!("{} ms", ms_u(v.breaker_window_ms)),
        ),
        ("max recovery", wire(&v.max_recovery)),
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
    for seg in &v.segments {
        t.add_row(vec![
            text(&seg.id),
            opt(&seg.parent),
            wire(&seg.class),
            ms_u(seg.timeout_ms),
            ms_u(seg.budget_ms),
            ms_u(seg.reserve_ms),
            retry_plan(&seg.retry),
            idempotency(&seg.idempotency),
        ]);
    }
    format!("{head}\n{t}")
}

/// `POST /chains/{chain}/rollback`.
pub fn rolled_back(v: &RollbackResult) -> String {
    let mut line = format!(
        "{} now serves {} (revision {})",
        text(&v.chain),
        text(&v.baseline_id),
        v.revision
    );
    if let Some(old) = &v.superseded {
        line.push_str(&format!("; {old} superseded"));
    }
    line
}
