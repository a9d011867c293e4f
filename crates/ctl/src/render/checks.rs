//! What the server's checks found, as shown by run uploads and baselines: the drift comparison
//! (one row per compared percentile) and the findings.

use budget_core::checks::{Finding, Severity};
use budget_core::drift::DriftEntry;

use super::{flag, ms, pct, table, text, wire};

/// The drift comparison of a run upload: one row per compared percentile.
pub fn drift_table(comparison: &[DriftEntry]) -> String {
    let mut t = table(
        &["segment", "metric", "baseline", "run", "change %", "drift"],
        &[2, 3, 4],
    );
    for e in comparison {
        t.add_row(vec![
            text(&e.segment),
            wire(&e.metric),
            ms(e.baseline_ms),
            ms(Some(e.run_ms)),
            pct(e.change_pct),
            flag(e.drift).to_owned(),
        ]);
    }
    t.to_string()
}

/// Findings: severity, check, segment and message; or a line saying there are none.
pub fn findings(list: &[Finding]) -> String {
    if list.is_empty() {
        return "findings: none".into();
    }
    let errors = list
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let mut t = table(&["severity", "check", "segment", "message"], &[]);
    for f in list {
        t.add_row(vec![
            wire(&f.severity),
            check_name(f),
            text(&f.segment),
            text(&f.message),
        ]);
    }
    let verdict = if errors > 0 {
        format!(", {errors} error(s): cannot be approved")
    } else {
        String::new()
    };
    format!("findings: {}{verdict}\n{t}", list.len())
}

/// The check a finding comes from: its kind's tag on the wire (`inversion`, …).
fn check_name(f: &Finding) -> String {
    serde_json::to_value(&f.kind)
        .ok()
        .and_then(|kind| kind.get("check")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::check;
    use serde_json::json;

    #[test]
    fn drift_comparison_renders_one_row_per_percentile() {
        // Example C of the spec: payment p999 300 → 390 drifts, the rest does not.
        let comparison: Vec<DriftEntry> = serde_json::from_value(json!([
            {"segment": "order->inventory", "metric": "p99", "baseline_ms": 40.0, "run_ms": 40.0, "change_pct": 0.0, "drift": false},
            {"segment": "order->payment", "metric": "p999", "baseline_ms": 300.0, "run_ms": 390.0, "change_pct": 30.0, "drift": true},
            {"segment": "order->user", "metric": "p999", "baseline_ms": null, "run_ms": 20.5, "change_pct": null, "drift": false}
        ]))
        .unwrap();
        check(
            &drift_table(&comparison),
            &[
                "┌──────────────────┬────────┬──────────┬──────┬──────────┬───────┐",
                "│ segment          ┆ metric ┆ baseline ┆  run ┆ change % ┆ drift │",
                "╞══════════════════╪════════╪══════════╪══════╪══════════╪═══════╡",
                "│ order->inventory ┆ p99    ┆       40 ┆   40 ┆      0.0 ┆ no    │",
                "│ order->payment   ┆ p999   ┆      300 ┆  390 ┆    +30.0 ┆ yes   │",
                "│ order->user      ┆ p999   ┆        - ┆ 20.5 ┆        - ┆ no    │",
                "└──────────────────┴────────┴──────────┴──────┴──────────┴───────┘",
            ],
        );
    }
}
