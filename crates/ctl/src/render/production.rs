//! A chain's production figures (`budgetctl production`): per segment what its agents reported
//! over the window, next to the live baseline. Every figure is the server's; a ratio the
//! server left empty (nothing counted) shows as `-`.

use budget_api::feedback::{Production, ProductionSegment};
use budget_core::drift::DRIFT_THRESHOLD_PCT;
use budget_core::feedback::{OUTCOMES, RETRY_CAUSES};

use super::{fields, ms, ms_u, pct, table, text};

/// `GET /chains/{chain}/production`: the figures table, then retries and outcomes.
pub fn production(v: &Production) -> String {
    let head = fields(&[
        ("chain", text(&v.chain)),
        (
            "window",
            format!("{} ({} to {})", text(&v.window), text(&v.from), text(&v.to)),
        ),
        (
            "baseline",
            match &v.baseline_id {
                Some(id) => format!("{id} (live)"),
                None => "none approved: no baseline percentiles, timeouts or drift".into(),
            },
        ),
    ]);
    if v.segments.is_empty() {
        return format!("{head}\nno agent reported calls of this chain in the window");
    }
    let mut figures = table(
        &[
            "segment",
            "calls",
            "attempts",
            "amplification",
            "kill rate",
            "key coverage",
            "p99 (base)",
            "p999 (base)",
            "timeout",
            "drift",
            "samples",
            "agents",
        ],
        &[1, 2, 3, 4, 5, 6, 7, 8, 10, 11],
    );
    for s in &v.segments {
        figures.add_row(vec![
            text(&s.segment),
            s.calls.to_string(),
            s.attempts.to_string(),
            times(s.amplification),
            share(s.kill_rate),
            share(s.key_coverage),
            observed(s.p99_ms, s.baseline_p99_ms),
            observed(s.p999_ms, s.baseline_p999_ms),
            s.timeout_ms.map_or_else(|| "-".into(), ms_u),
            drift(s),
            s.samples.to_string(),
            s.agents.to_string(),
        ]);
    }
    let mut calls = table(
        &[
            "segment",
            "retries (deadline)",
            "retries (unavailable)",
            "ok",
            "deadline exceeded",
            "unavailable",
            "business error",
            "budget exhausted",
            "retry refused (no key)",
        ],
        &[1, 2, 3, 4, 5, 6, 7, 8],
    );
    // The columns follow the agents' retry causes and call outcomes, in their order.
    for s in &v.segments {
        let mut row = vec![text(&s.segment)];
        row.extend(RETRY_CAUSES.iter().map(|k| count(s.retries.get(*k))));
        row.extend(OUTCOMES.iter().map(|k| count(s.outcomes.get(*k))));
        calls.add_row(row);
    }
    format!(
        "{head}\n{figures}\nmilliseconds; (base): the live baseline's; drift: more than \
         {DRIFT_THRESHOLD_PCT} % from it, either way\nretries by cause and how calls ended:\n{calls}"
    )
}

fn count(n: Option<&u64>) -> String {
    n.map_or_else(|| "-".into(), u64::to_string)
}

/// A multiplier: `1.3×`, `2×`; `-` when absent.
pub(super) fn times(v: Option<f64>) -> String {
    match v {
        Some(x) => format!("{}×", trimmed(x, 2)),
        None => "-".into(),
    }
}

/// A fraction as a percentage with one decimal (`0.5 %`, `<0.1 %`, `>99.9 %`); `-` when absent.
pub(super) fn share(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x > 0.0 && x < 0.0005 => "<0.1 %".into(),
        Some(x) if x < 1.0 && x > 0.9995 => ">99.9 %".into(),
        Some(x) => format!("{:.1} %", x * 100.0),
    }
}

/// `x` with at most `decimals` decimals, trailing zeros cut.
fn trimmed(x: f64, decimals: usize) -> String {
    let t = format!("{x:.decimals$}");
    if t.contains('.') {
        t.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        t
    }
}

/// `46 (44)`: the production percentile and the live baseline's.
fn observed(production: Option<f64>, baseline: Option<f64>) -> String {
    format!("{} ({})", ms(production), ms(baseline))
}

/// `yes +30.0 %` / `no -3.1 %`: the server's drift flag and largest change; `-` when nothing
/// was compared (no baseline, or no samples).
fn drift(s: &ProductionSegment) -> String {
    match (s.drift, s.drift_pct) {
        (true, Some(p)) => format!("yes {} %", pct(Some(p))),
        (true, None) => "yes".into(),
        (false, Some(p)) => format!("no {} %", pct(Some(p))),
        (false, None) => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::check;
    use serde_json::{json, Value};

    fn render(v: Value) -> String {
        production(&serde_json::from_value(v).unwrap())
    }

    #[test]
    fn production_shows_figures_next_to_the_baseline_and_dashes_for_null_ratios() {
        let text = render(json!({
            "chain": "checkout", "window": "5m",
            "from": "2026-11-30T10:00:00Z", "to": "2026-11-30T10:05:00Z",
            "baseline_id": "bl-20261130-001",
            "segments": [
                {"segment": "order->inventory", "calls": 1000, "attempts": 1300,
                 "retries": {"deadline": 300, "unavailable": 0},
                 "outcomes": {"ok": 990, "deadline_exceeded": 10, "unavailable": 0, "business_error": 0,
                              "budget_exhausted": 0, "retry_refused_no_key": 0},
                 "amplification": 1.3, "kill_rate": 0.230769, "key_coverage": 1.0,
                 "samples": 1290, "p50_ms": 21.0, "p99_ms": 46.5, "p999_ms": 61.0,
                 "baseline_p99_ms": 44.0, "baseline_p999_ms": 60.0, "timeout_ms": 48,
                 "drift": false, "drift_pct": 5.7, "agents": 3,
                 "distribution": [[10.0, 0.1], [61.0, 1.0]]},
                {"segment": "order->user", "calls": 0, "attempts": 0,
                 "retries": {"deadline": 0, "unavailable": 0},
                 "outcomes": {"ok": 0, "deadline_exceeded": 0, "unavailable": 0, "business_error": 0,
                              "budget_exhausted": 0, "retry_refused_no_key": 0},
                 "amplification": null, "kill_rate": null, "key_coverage": null,
                 "samples": 0, "p50_ms": null, "p99_ms": null, "p999_ms": null,
                 "baseline_p99_ms": 20.0, "baseline_p999_ms": null, "timeout_ms": 22,
                 "drift": false, "drift_pct": null, "agents": 1, "distribution": []},
                {"segment": "order->payment", "calls": 500, "attempts": 500,
                 "amplification": 1.0, "kill_rate": 0.0004, "key_coverage": 0.9996,
                 "samples": 500, "p99_ms": 280.0, "p999_ms": 390.0,
                 "baseline_p99_ms": 210.0, "baseline_p999_ms": 300.0, "timeout_ms": 390,
                 "drift": true, "drift_pct": 30.0, "agents": 2}
            ]
        }));
        let expect = [
            "chain:    checkout",
            "window:   5m (2026-11-30T10:00:00Z to 2026-11-30T10:05:00Z)",
            "baseline: bl-20261130-001 (live)",
            "│ segment          ┆ calls ┆ attempts ┆ amplification ┆ kill rate ┆ key coverage ┆ p99 (base) ┆ p999 (base) ┆ timeout ┆ drift       ┆ samples ┆ agents │",
            "│ order->inventory ┆  1000 ┆     1300 ┆          1.3× ┆    23.1 % ┆      100.0 % ┆  46.5 (44) ┆     61 (60) ┆      48 ┆ no +5.7 %   ┆    1290 ┆      3 │",
            // nothing counted: the null ratios and percentiles are dashes, the baseline's stay
            "│ order->user      ┆     0 ┆        0 ┆             - ┆         - ┆            - ┆     - (20) ┆       - (-) ┆      22 ┆ -           ┆       0 ┆      1 │",
            "│ order->payment   ┆   500 ┆      500 ┆            1× ┆    <0.1 % ┆      >99.9 % ┆  280 (210) ┆   390 (300) ┆     390 ┆ yes +30.0 % ┆     500 ┆      2 │",
            "milliseconds; (base): the live baseline's; drift: more than 20 % from it, either way",
            "retries by cause and how calls ended:",
            "│ segment          ┆ retries (deadline) ┆ retries (unavailable) ┆  ok ┆ deadline exceeded ┆ unavailable ┆ business error ┆ budget exhausted ┆ retry refused (no key) │",
            "│ order->inventory ┆                300 ┆                     0 ┆ 990 ┆                10 ┆           0 ┆              0 ┆                0 ┆                      0 │",
            "│ order->user      ┆                  0 ┆                     0 ┆   0 ┆                 0 ┆           0 ┆              0 ┆                0 ┆                      0 │",
            // an answer without the maps (another server version) still renders
            "│ order->payment   ┆                  - ┆                     - ┆   - ┆                 - ┆           - ┆              - ┆                - ┆                      - │",
        ];
        let lines: Vec<&str> = text.lines().collect();
        let mut at = 0;
        for line in expect {
            match lines[at..].iter().position(|l| *l == line) {
                Some(i) => at += i + 1,
                None => panic!("missing or out of order: {line}\n{text}"),
            }
        }
    }

    #[test]
    fn production_without_reports_or_baseline_says_so() {
        check(
            &render(
                json!({"chain": "checkout", "window": "1m", "from": "2026-11-30T10:04:00Z",
                "to": "2026-11-30T10:05:00Z", "baseline_id": null, "segments": []}),
            ),
            &[
                "chain:    checkout",
                "window:   1m (2026-11-30T10:04:00Z to 2026-11-30T10:05:00Z)",
                "baseline: none approved: no baseline percentiles, timeouts or drift",
                "no agent reported calls of this chain in the window",
            ],
        );
    }

    #[test]
    fn ratios_are_shown_as_multipliers_and_shares() {
        assert_eq!(times(Some(1.3)), "1.3×");
        assert_eq!(times(Some(2.0)), "2×");
        assert_eq!(times(Some(2.456)), "2.46×");
        assert_eq!(times(None), "-");
        assert_eq!(share(Some(0.01)), "1.0 %");
        assert_eq!(share(Some(0.0)), "0.0 %");
        assert_eq!(share(Some(1.0)), "100.0 %");
        assert_eq!(share(Some(0.00001)), "<0.1 %");
        assert_eq!(share(Some(0.99999)), ">99.9 %");
        assert_eq!(share(None), "-");
    }
}
