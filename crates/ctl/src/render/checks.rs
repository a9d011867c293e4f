//! What the server's checks found, as shown by run uploads and baselines: the drift comparison
//! (one row per compared percentile) and the findings.

use serde_json::Value;

use super::{arr, ms, pct, s, table, yes_no};

/// The drift comparison of a run upload: one row per compared percentile.
pub fn drift_table(comparison: &Value) -> String {
    let mut t = table(
        &["segment", "metric", "baseline", "run", "change %", "drift"],
        &[2, 3, 4],
    );
    for e in arr(comparison) {
        t.add_row(vec![
            s(&e["segment"]),
            s(&e["metric"]),
            ms(&e["baseline_ms"]),
            ms(&e["run_ms"]),
            pct(&e["change_pct"]),
            yes_no(&e["drift"]).to_owned(),
        ]);
    }
    t.to_string()
}

/// Findings: severity, check, segment and message; or a line saying there are none.
pub fn findings(list: &Value) -> String {
    let list = arr(list);
    if list.is_empty() {
        return "findings: none".into();
    }
    let errors = list.iter().filter(|f| f["severity"] == "error").count();
    let mut t = table(&["severity", "check", "segment", "message"], &[]);
    for f in list {
        t.add_row(vec![
            s(&f["severity"]),
            s(&f["check"]),
            s(&f["segment"]),
            s(&f["message"]),
        ]);
    }
    let verdict = if errors > 0 {
        format!(", {errors} error(s): cannot be approved")
    } else {
        String::new()
    };
    format!("findings: {}{verdict}\n{t}", list.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::check;
    use serde_json::json;

    #[test]
    fn drift_comparison_renders_one_row_per_percentile() {
        // Example C of the spec: payment p999 300 → 390 drifts, the rest does not.
        let comparison = json!([
            {"segment": "order->inventory", "metric": "p99", "baseline_ms": 40.0, "run_ms": 40.0, "change_pct": 0.0, "drift": false},
            {"segment": "order->payment", "metric": "p999", "baseline_ms": 300.0, "run_ms": 390.0, "change_pct": 30.0, "drift": true},
            {"segment": "order->user", "metric": "p999", "baseline_ms": null, "run_ms": 20.5, "change_pct": null, "drift": false}
        ]);
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
