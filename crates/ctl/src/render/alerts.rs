//! Alerts (`budgetctl alerts`): each with the value that tripped its rule next to the rule's
//! threshold, in the rule's unit.

use budget_api::feedback::{Alert, AlertList};

use super::production::{share, times};
use super::{opt, pct, table, text};

/// `GET /alerts`: firing and resolved alerts, as the server lists them.
pub fn alerts(v: &AlertList) -> String {
    if v.alerts.is_empty() {
        return "no alerts".into();
    }
    let mut t = table(
        &[
            "id",
            "rule",
            "chain",
            "segment",
            "state",
            "value vs threshold",
            "since",
            "resolved",
        ],
        &[0],
    );
    for a in &v.alerts {
        t.add_row(vec![
            a.id.to_string(),
            text(&a.rule),
            text(&a.chain),
            text(&a.segment),
            text(&a.state),
            value_vs_threshold(a),
            text(&a.since),
            opt(&a.resolved_at),
        ]);
    }
    let firing = v.alerts.iter().filter(|a| a.state == "firing").count();
    format!(
        "{t}\n{firing} firing, {} resolved (--json adds the window and counts behind each value)",
        v.alerts.len() - firing
    )
}

/// The measured value against the threshold, in the unit of the alert's rule: a multiplier
/// (amplification), a share of attempts (kill rate), a change in percent (drift), agents
/// (NACK) or seconds (archive backlog).
fn value_vs_threshold(a: &Alert) -> String {
    let (value, threshold) = (a.value, a.threshold);
    match a.rule.as_str() {
        "amplification" => format!("{} vs {}", times(Some(value)), times(Some(threshold))),
        "kill_rate" => format!("{} vs {}", share(Some(value)), share(Some(threshold))),
        "drift" => format!("{} % vs ±{threshold} %", pct(Some(value))),
        "nack" => format!("{value} agent(s) refusing"),
        "archive_backlog" => format!("{value} s vs {threshold} s"),
        _ => format!("{value} vs {threshold}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn alerts_show_each_value_against_its_threshold_in_the_rule_unit() {
        let v = json!({"alerts": [
            {"id": 7, "rule": "amplification", "chain": "checkout", "segment": "order->inventory",
             "state": "firing", "value": 3.0, "threshold": 2.0,
             "detail": {"window": "1m", "counts": {"calls": 100, "attempts": 300}},
             "since": "2026-11-30T10:06:00Z", "resolved_at": null},
            {"id": 6, "rule": "drift", "chain": "checkout", "segment": "order->payment",
             "state": "resolved", "value": -35.2, "threshold": 20.0, "detail": {},
             "since": "2026-11-30T09:00:00Z", "resolved_at": "2026-11-30T09:20:00Z"},
            {"id": 5, "rule": "kill_rate", "chain": "checkout", "segment": "order->user",
             "state": "resolved", "value": 0.0425, "threshold": 0.01, "detail": {},
             "since": "2026-11-30T08:00:00Z", "resolved_at": "2026-11-30T08:05:00Z"},
            {"id": 4, "rule": "nack", "chain": "checkout", "segment": "", "state": "firing",
             "value": 2.0, "threshold": 0.0, "detail": {"revision": 3},
             "since": "2026-11-30T07:00:00Z", "resolved_at": null},
            {"id": 3, "rule": "archive_backlog", "chain": "", "segment": "", "state": "firing",
             "value": 720.0, "threshold": 600.0, "detail": {"pending": 1},
             "since": "2026-11-30T06:00:00Z", "resolved_at": null}
        ]});
        crate::render::check(
            &alerts(&serde_json::from_value(v).unwrap()),
            &[
                "┌────┬─────────────────┬──────────┬──────────────────┬──────────┬─────────────────────┬──────────────────────┬──────────────────────┐",
                "│ id ┆ rule            ┆ chain    ┆ segment          ┆ state    ┆ value vs threshold  ┆ since                ┆ resolved             │",
                "╞════╪═════════════════╪══════════╪══════════════════╪══════════╪═════════════════════╪══════════════════════╪══════════════════════╡",
                "│  7 ┆ amplification   ┆ checkout ┆ order->inventory ┆ firing   ┆ 3× vs 2×            ┆ 2026-11-30T10:06:00Z ┆ -                    │",
                "│  6 ┆ drift           ┆ checkout ┆ order->payment   ┆ resolved ┆ -35.2 % vs ±20 %    ┆ 2026-11-30T09:00:00Z ┆ 2026-11-30T09:20:00Z │",
                "│  5 ┆ kill_rate       ┆ checkout ┆ order->user      ┆ resolved ┆ 4.2 % vs 1.0 %      ┆ 2026-11-30T08:00:00Z ┆ 2026-11-30T08:05:00Z │",
                "│  4 ┆ nack            ┆ checkout ┆ -                ┆ firing   ┆ 2 agent(s) refusing ┆ 2026-11-30T07:00:00Z ┆ -                    │",
                "│  3 ┆ archive_backlog ┆ -        ┆ -                ┆ firing   ┆ 720 s vs 600 s      ┆ 2026-11-30T06:00:00Z ┆ -                    │",
                "└────┴─────────────────┴──────────┴──────────────────┴──────────┴─────────────────────┴──────────────────────┴──────────────────────┘",
                "3 firing, 2 resolved (--json adds the window and counts behind each value)",
            ],
        );
    }

    #[test]
    fn no_alerts_is_said_plainly() {
        assert_eq!(alerts(&AlertList::default()), "no alerts");
    }
}
