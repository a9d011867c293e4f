//! Human-readable views of the server's JSON answers: pure functions from one of
//! `budget_api`'s types to text, one module per resource (the same split as the commands),
//! re-exported here.
//!
//! The types read leniently (a missing field is empty and shows as `-`) so an older or newer
//! server still renders; an answer that is not the type at all is printed as JSON
//! (`output::render_as`). `--json` is the exact answer.

mod agents;
mod alerts;
mod archive;
mod audit;
mod baselines;
mod budgets;
mod chains;
mod checks;
mod errors;
mod production;
mod releases;
mod runs;
mod tokens;
mod webhooks;

pub use agents::agents;
pub use alerts::alerts;
pub use archive::{archive_status, archive_verify};
pub use audit::audit;
pub use baselines::{
    approved, baseline, baselines, canary, diff, recomputed, rejected, rollout, selector, whatif,
};
pub use budgets::{budgets, rolled_back};
pub use chains::{chains, topology};
pub use checks::{drift_table, findings};
pub use errors::{error_details, error_message};
pub use production::production;
pub use releases::{baseline_releases, release, release_check, releases};
pub use runs::{mapping, percentiles, run, run_outcome, runs};
pub use tokens::tokens;
pub use webhooks::{deliveries, webhook, webhooks};

use budget_core::topology::Idempotency;
use comfy_table::{presets, CellAlignment, Table};
use serde_json::Value;

/// A table with our style; `right` lists the columns holding numbers.
fn table(header: &[&str], right: &[usize]) -> Table {
    let mut t = Table::new();
    t.load_preset(presets::UTF8_FULL_CONDENSED);
    t.set_header(header.to_vec());
    for &i in right {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// `key: value` lines with the values aligned.
fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    pairs
        .iter()
        .map(|(k, v)| format!("{:<width$} {v}", format!("{k}:"), width = width))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A text field, or `-` when empty.
fn text(v: &str) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.to_owned()
    }
}

/// An optional field, or `-` when absent (or an empty string).
fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "-".into(), |v| text(&v.to_string()))
}

/// How a value is written on the wire, as text (an enum's snake_case name), or `-`.
fn wire<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v).unwrap_or_default() {
        Value::Null => "-".into(),
        Value::String(s) => text(&s),
        other => other.to_string(),
    }
}

/// Milliseconds: `300`, `40.5`, `0.125`; `-` when absent.
pub fn ms(v: Option<f64>) -> String {
    match v {
        Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
        Some(x) => {
            let t = format!("{x:.3}");
            t.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
        None => "-".into(),
    }
}

/// A signed percentage with one decimal: `+30.0`, `-12.5`, `0.0`; `-` when absent.
pub fn pct(v: Option<f64>) -> String {
    match v {
        Some(x) if x.abs() < 0.05 => "0.0".into(),
        Some(x) => format!("{x:+.1}"),
        None => "-".into(),
    }
}

/// `yes` or `no`.
fn flag(v: bool) -> &'static str {
    if v {
        "yes"
    } else {
        "no"
    }
}

/// A SHA-256 cut to its first 12 hex digits (`--json` has it whole); `-` when empty.
fn short(h: &str) -> String {
    if h.len() > 12 {
        format!("{}…", h.get(..12).unwrap_or(h))
    } else {
        text(h)
    }
}

/// A segment's idempotency key and its TTL (topology and live config); `-` when it has none.
fn idempotency(i: &Option<Idempotency>) -> String {
    match i {
        None => "-".into(),
        Some(i) => format!("{} ({})", text(&i.key), wire(&i.ttl)),
    }
}

/// Whole milliseconds as shown.
fn ms_u(v: u64) -> String {
    ms(Some(v as f64))
}

/// Compares a rendering with the expected lines (the tests of every view).
#[cfg(test)]
fn check(actual: &str, expect: &[&str]) {
    let lines: Vec<&str> = actual.lines().collect();
    assert_eq!(lines, expect, "\nactual:\n{actual}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// STYLE §8: renderers read `budget_api`'s types; none indexes a JSON value by key.
    #[test]
    fn no_renderer_indexes_a_json_value() {
        let files = [
            ("agents.rs", include_str!("agents.rs")),
            ("alerts.rs", include_str!("alerts.rs")),
            ("archive.rs", include_str!("archive.rs")),
            ("audit.rs", include_str!("audit.rs")),
            ("baselines.rs", include_str!("baselines.rs")),
            ("budgets.rs", include_str!("budgets.rs")),
            ("chains.rs", include_str!("chains.rs")),
            ("checks.rs", include_str!("checks.rs")),
            ("errors.rs", include_str!("errors.rs")),
            ("mod.rs", include_str!("mod.rs")),
            ("production.rs", include_str!("production.rs")),
            ("releases.rs", include_str!("releases.rs")),
            ("runs.rs", include_str!("runs.rs")),
            ("tokens.rs", include_str!("tokens.rs")),
            ("webhooks.rs", include_str!("webhooks.rs")),
        ];
        for (name, text) in files {
            for (at, _) in text.match_indices("[\"") {
                let before = text[..at].chars().next_back().unwrap_or(' ');
                assert!(
                    !(before.is_alphanumeric() || matches!(before, '_' | ']' | ')')),
                    "render/{name} indexes a JSON value at byte {at}"
                );
            }
        }
    }

    #[test]
    fn numbers_are_shown_plainly() {
        assert_eq!(ms(Some(300.0)), "300");
        assert_eq!(ms(Some(44.0)), "44");
        assert_eq!(ms(Some(40.5)), "40.5");
        assert_eq!(ms(Some(0.125)), "0.125");
        assert_eq!(ms(None), "-");
        assert_eq!(pct(Some(30.0)), "+30.0");
        assert_eq!(pct(Some(-12.46)), "-12.5");
        assert_eq!(pct(Some(0.0)), "0.0");
        assert_eq!(pct(None), "-");
    }
}
