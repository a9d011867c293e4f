//! Human-readable views of the server's JSON answers: pure functions from a `Value` to text,
//! one module per resource (the same split as the commands), re-exported here.
//!
//! They read fields leniently (a missing field shows as `-`) so an older or newer server still
//! renders; `--json` is the exact answer.

mod agents;
mod archive;
mod audit;
mod baselines;
mod budgets;
mod chains;
mod checks;
mod errors;
mod releases;
mod runs;
mod tokens;

pub use agents::agents;
pub use archive::{archive_status, archive_verify};
pub use audit::audit;
pub use baselines::{approved, baseline, baselines, diff, recomputed, rejected, rollout};
pub use budgets::{budgets, rolled_back};
pub use chains::{chains, topology};
pub use checks::{drift_table, findings};
pub use errors::error_details;
pub use releases::{baseline_releases, release, release_check, releases};
pub use runs::{mapping, percentiles, run, run_outcome, runs};
pub use tokens::tokens;

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

/// A string field, or `-`.
fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// Milliseconds: `300`, `40.5`, `0.125`; `-` when absent.
pub fn ms(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
        Some(x) => {
            let t = format!("{x:.3}");
            t.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
        None => "-".into(),
    }
}

/// A signed percentage with one decimal: `+30.0`, `-12.5`, `0.0`; `-` when absent.
pub fn pct(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.abs() < 0.05 => "0.0".into(),
        Some(x) => format!("{x:+.1}"),
        None => "-".into(),
    }
}

fn yes_no(v: &Value) -> &'static str {
    if v.as_bool().unwrap_or(false) {
        "yes"
    } else {
        "no"
    }
}

/// A SHA-256 cut to its first 12 hex digits (`--json` has it whole); `-` when absent.
fn short_sha(v: &Value) -> String {
    match v.as_str() {
        Some(h) if h.len() > 12 => format!("{}…", h.get(..12).unwrap_or(h)),
        _ => s(v),
    }
}

/// A segment's idempotency key and its TTL (topology and live config); `-` when it has none.
fn idempotency(i: &Value) -> String {
    if i.is_null() {
        "-".into()
    } else {
        format!("{} ({})", s(&i["key"]), s(&i["ttl"]))
    }
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
    use serde_json::json;

    #[test]
    fn numbers_are_shown_plainly() {
        assert_eq!(ms(&json!(300.0)), "300");
        assert_eq!(ms(&json!(44)), "44");
        assert_eq!(ms(&json!(40.5)), "40.5");
        assert_eq!(ms(&json!(0.125)), "0.125");
        assert_eq!(ms(&Value::Null), "-");
        assert_eq!(pct(&json!(30.0)), "+30.0");
        assert_eq!(pct(&json!(-12.46)), "-12.5");
        assert_eq!(pct(&json!(0.0)), "0.0");
        assert_eq!(pct(&Value::Null), "-");
    }
}
