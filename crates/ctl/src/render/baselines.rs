//! Baselines: a chain's list, one document, a diff, the answers of approve / reject /
//! recompute, and a publication's rollout.

use budget_api::baselines::WhatIf;
use budget_api::baselines::{
    ApproveResult, BaselineDiff, BaselineList, Canary, Change, RejectResult, Rollout,
};
use budget_core::baseline::{BaselineDocument, BaselineSegment};
use budget_core::canary::Selector;

use super::checks::{drift_table, findings};
use super::{fields, flag, ms, ms_u, opt, pct, table, text, wire};

/// `GET /chains/{chain}/baselines`.
pub fn baselines(v: &BaselineList) -> String {
    if v.baselines.is_empty() {
        return "no baselines".into();
    }
    let mut t = table(
        &[
            "id",
            "state",
            "reason",
            "run",
            "topology",
            "errors",
            "created by",
            "created at",
        ],
        &[4],
    );
    for b in &v.baselines {
        let state = match &b.superseded_by {
            Some(by) => format!("{} by {by}", wire(&b.state)),
            None => wire(&b.state),
        };
        t.add_row(vec![
            text(&b.id),
            state,
            text(&b.reason),
            text(&b.run_id),
            b.topology_version.to_string(),
            flag(b.has_errors).to_owned(),
            text(&b.created_by),
            text(&b.created_at),
        ]);
    }
    t.to_string()
}

/// A baseline document: header, segments, findings (and its drift, when it has one).
pub fn baseline(v: &BaselineDocument) -> String {
    let mut head = vec![
        ("baseline", text(&v.id)),
        ("chain", text(&v.chain)),
        ("state", wire(&v.state)),
        ("reason", wire(&v.reason)),
        ("run", text(&v.run_id)),
        ("topology", format!("v{}", v.topology_version)),
        (
            "created",
            format!("{} by {}", text(&v.created_at), text(&v.created_by)),
        ),
        (
            "policy",
            format!(
                "entry {} ms, breaker window {} ms, max recovery {}",
                ms_u(v.entry_budget_ms),
                ms_u(v.breaker_window_ms),
                wire(&v.max_recovery)
            ),
        ),
    ];
    if let Some(by) = &v.superseded_by {
        let what = if v.was_approved() {
            "the baseline approved after it"
        } else {
            "a newer draft, before any decision: it can no longer be approved"
        };
        head.push(("superseded by", format!("{by} ({what})")));
    }
    if let Some(d) = &v.decision {
        let comment = d
            .comment
            .as_ref()
            .map(|c| format!(": {c:?}"))
            .unwrap_or_default();
        head.push((
            "decision",
            format!(
                "{} by {} at {}{comment}",
                wire(&v.state),
                text(&d.by),
                text(&d.at)
            ),
        ));
    }
    let mut out = vec![
        fields(&head),
        segment_table(&v.segments),
        findings(&v.findings),
    ];
    if !v.drift.is_empty() {
        out.push(format!("drift from {}:", opt(&v.drift_baseline_id)));
        out.push(drift_table(&v.drift));
    }
    out.join("\n")
}

/// A baseline's segments: the measured percentiles, the rule applied, timeout and budget.
pub(super) fn segment_table(segments: &[BaselineSegment]) -> String {
    let mut t = table(
        &[
            "segment", "class", "rule", "samples", "failures", "p99", "p999", "timeout", "budget",
            "killed",
        ],
        &[3, 4, 5, 6, 7, 8, 9],
    );
    for seg in segments {
        t.add_row(vec![
            text(&seg.id),
            wire(&seg.class),
            wire(&seg.rule),
            opt(&seg.samples),
            match (seg.samples, seg.failures) {
                (None, _) => "-".to_owned(),
                (Some(_), None) => "unknown".to_owned(),
                (Some(_), Some(f)) => f.to_string(),
            },
            ms(seg.p99_ms),
            ms(seg.p999_ms),
            ms_u(seg.timeout_ms),
            ms_u(seg.budget_ms),
            killed(seg.kill_rate, seg.kill_rate_bounds, seg.attempts_per_call),
        ]);
    }
    t.to_string()
}

/// A share as a percentage with up to two decimals: `25`, `1.03`, `0.01`.
fn share(v: f64) -> String {
    ms(Some((v * 10_000.0).round() / 100.0))
}

/// What a timeout kills of the run's samples: `25 % (1.25 attempts/call)`, `0.1–1 %` from
/// percentile points, `-` when the run holds no distribution.
fn killed(rate: Option<f64>, bounds: Option<[f64; 2]>, attempts: Option<f64>) -> String {
    match (rate, bounds) {
        (Some(r), _) => match attempts {
            Some(a) => format!("{} % ({} attempts/call)", share(r), ms(Some(a))),
            None => format!("{} %", share(r)),
        },
        (None, Some([lo, hi])) if lo == hi => format!("{} %", share(hi)),
        (None, Some([lo, hi])) => format!("{}–{} %", share(lo), share(hi)),
        (None, None) => "-".into(),
    }
}

/// `GET /baselines/{id}/whatif`: what the tried timeout kills, beside the baseline's own.
pub fn whatif(v: &WhatIf) -> String {
    let kills = match (v.kill_rate, v.kill_rate_bounds) {
        (Some(r), _) => format!(
            "{} % of the load test's calls ({} of {} samples slower)",
            share(r),
            opt(&v.killed),
            opt(&v.samples)
        ),
        (None, Some(b)) => format!(
            "{} of the load test's calls (the run holds percentile points only: bounds)",
            killed(None, Some(b), None)
        ),
        (None, None) => "-".into(),
    };
    let attempts = match v.attempts_per_call {
        Some(a) if v.retries_on_deadline => {
            format!("{} (each killed call is retried once)", ms(Some(a)))
        }
        Some(a) => format!("{} (the segment does not retry on deadline)", ms(Some(a))),
        None => "- (percentile points only)".into(),
    };
    fields(&[
        ("baseline", text(&v.baseline_id)),
        ("run", text(&v.run_id)),
        ("segment", text(&v.segment)),
        ("timeout", format!("{} ms", v.timeout_ms)),
        (
            "baseline's timeout",
            format!("{} ms", v.baseline_timeout_ms),
        ),
        ("kills", kills),
        ("attempts per call", attempts),
    ])
}

/// One `{from, to, change_pct}` of a diff: `390 → 507 (+30.0 %)`, or `44` when unchanged.
fn change<T: Copy + Into<f64>>(c: &Change<T>) -> String {
    let f = |v: T| ms(Some(v.into()));
    match (c.from, c.to) {
        (None, None) => "-".into(),
        (None, Some(to)) => format!("new {}", f(to)),
        (Some(from), None) => format!("removed (was {})", f(from)),
        (Some(from), Some(to)) if from.into() == to.into() => f(to),
        (Some(from), Some(to)) => match c.change_pct {
            Some(_) => format!("{} → {} ({} %)", f(from), f(to), pct(c.change_pct)),
            None => format!("{} → {}", f(from), f(to)),
        },
    }
}

/// A `u64` change as milliseconds.
fn change_u(c: &Change<u64>) -> String {
    change(&Change {
        from: c.from.map(|v| v as f64),
        to: c.to.map(|v| v as f64),
        change_pct: c.change_pct,
        drift: c.drift,
    })
}

/// `GET /baselines/{id}/diff`.
pub fn diff(v: &BaselineDiff) -> String {
    let mut t = table(
        &["segment", "status", "p99", "p999", "timeout", "budget"],
        &[2, 3, 4, 5],
    );
    for seg in &v.segments {
        t.add_row(vec![
            text(&seg.id),
            text(&seg.status),
            change(&seg.p99_ms),
            change(&seg.p999_ms),
            change_u(&seg.timeout_ms),
            change_u(&seg.budget_ms),
        ]);
    }
    let mut out = vec![
        format!("diff {} → {}", text(&v.from), text(&v.to)),
        t.to_string(),
    ];
    for (title, list) in [
        ("findings added", &v.findings_added),
        ("findings resolved", &v.findings_resolved),
    ] {
        if list.is_empty() {
            out.push(format!("{title}: none"));
        } else {
            out.push(format!("{title}:"));
            out.extend(list.iter().map(|f| {
                format!(
                    "  {} {} at {}: {}",
                    wire(&f.severity),
                    f.kind.check_name(),
                    text(&f.segment),
                    text(&f.message)
                )
            }));
        }
    }
    out.join("\n")
}

/// `POST /baselines/{id}/approve`.
pub fn approved(v: &ApproveResult) -> String {
    let b = &v.baseline;
    let mut line = format!("approved {} ({})", text(&b.id), text(&b.chain));
    match v.revision {
        Some(rev) => line.push_str(&format!(": published as revision {rev}")),
        None => line.push_str(": not published"),
    }
    if let Some(old) = &v.superseded {
        line.push_str(&format!(", supersedes {old}"));
    }
    line
}

/// `POST /baselines/{id}/reject`.
pub fn rejected(v: &RejectResult) -> String {
    let b = &v.baseline;
    let comment = b.decision.as_ref().and_then(|d| d.comment.clone());
    format!(
        "rejected {} ({}): {}",
        text(&b.id),
        text(&b.chain),
        opt(&comment)
    )
}

/// `POST /chains/{chain}/baselines`: the new draft.
pub fn recomputed(v: &BaselineDocument) -> String {
    format!(
        "draft {} created for {} from run {} (topology v{})\n{}",
        text(&v.id),
        text(&v.chain),
        text(&v.run_id),
        v.topology_version,
        findings(&v.findings)
    )
}

/// `GET /baselines/{id}/rollout`.
pub fn rollout(v: &Rollout) -> String {
    let head = fields(&[
        ("baseline", text(&v.baseline_id)),
        ("chain", text(&v.chain)),
        ("state", wire(&v.state)),
        ("published as revision", opt(&v.revision)),
        (
            "published",
            match (&v.kind, &v.published_at) {
                (Some(kind), Some(at)) => format!(
                    "{} at {at} by {}",
                    match kind.as_str() {
                        "rollback" => "by a rollback",
                        "canary" => "to a canary",
                        "promote" => "by a canary's promotion",
                        "abort" => "by a canary's abort",
                        _ => "on approval",
                    },
                    opt(&v.published_by)
                ),
                _ => "never".into(),
            },
        ),
        ("agents of the chain", v.agents.to_string()),
        ("connected", v.connected.to_string()),
        ("acked", v.acked.to_string()),
        ("nacked", v.nacked.to_string()),
    ]);
    match &v.canary {
        Some(c) => format!("{head}\n\n{}", canary(c)),
        None => head,
    }
}

/// A canary selector: `10% of agents` or `agents labelled zone=a`.
pub fn selector(s: &Selector) -> String {
    match s {
        Selector::Percent(p) => format!("{p}% of agents (by id)"),
        Selector::Labels(l) => {
            let pairs: Vec<String> = l.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("agents labelled {}", pairs.join(","))
        }
    }
}

/// A canary rollout: state, members, ACKs, the figures that decide, time left.
pub fn canary(c: &Canary) -> String {
    let ended = match (&c.ended_at, &c.end_revision) {
        (Some(at), Some(rev)) => format!("{at} by {} (revision {rev})", opt(&c.ended_by)),
        _ => "-".into(),
    };
    let head = fields(&[
        ("canary", wire(&c.state)),
        ("selects", selector(&c.selector)),
        ("canary revision", c.revision.to_string()),
        ("others keep", text(&c.previous_baseline_id)),
        (
            "started",
            format!("{} by {}", text(&c.started_at), text(&c.started_by)),
        ),
        (
            "bake",
            format!(
                "{} s, ends {} ({})",
                c.bake_s,
                text(&c.bake_ends_at),
                if c.auto {
                    "decided automatically"
                } else {
                    "a person decides"
                }
            ),
        ),
        ("members", c.members.len().to_string()),
        ("acked", c.acked.to_string()),
        ("nacked", c.nacked.to_string()),
        ("reason", opt(&c.reason)),
        ("ended", ended),
    ]);
    let mut t = table(
        &[
            "segment",
            "calls",
            "attempts",
            "amplification",
            "kill rate %",
            "samples",
            "p99",
            "p999",
            "drift %",
        ],
        &[1, 2, 3, 4, 5, 6, 7, 8],
    );
    for h in &c.health {
        t.add_row(vec![
            text(&h.segment),
            h.calls.to_string(),
            h.attempts.to_string(),
            h.amplification.map_or("-".into(), |a| format!("{a:.3}")),
            h.kill_rate
                .map_or("-".into(), |k| format!("{:.2}", k * 100.0)),
            h.samples.to_string(),
            ms(h.p99_ms),
            ms(h.p999_ms),
            pct(h.drift_pct),
        ]);
    }
    let members = if c.members.is_empty() {
        "no agent selected yet".to_owned()
    } else {
        format!("members: {}", c.members.join(", "))
    };
    if c.health.is_empty() {
        format!("{head}\n{members}\nno report from canary agents yet")
    } else {
        format!("{head}\n{members}\n{t}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(v: serde_json::Value) -> String {
        change::<f64>(&serde_json::from_value(v).unwrap())
    }

    #[test]
    fn diff_changes_show_from_and_to() {
        assert_eq!(
            c(json!({"from": 390, "to": 507, "change_pct": 30.0})),
            "390 → 507 (+30.0 %)"
        );
        assert_eq!(c(json!({"from": 44, "to": 44, "change_pct": 0.0})), "44");
        assert_eq!(c(json!({"from": null, "to": 9})), "new 9");
        assert_eq!(c(json!({"from": 9, "to": null})), "removed (was 9)");
    }

    #[test]
    fn kill_rates_read_as_percentages() {
        assert_eq!(
            killed(Some(0.25), None, Some(1.25)),
            "25 % (1.25 attempts/call)"
        );
        assert_eq!(killed(Some(0.010301), None, None), "1.03 %");
        assert_eq!(killed(None, Some([0.001, 0.01]), None), "0.1–1 %");
        assert_eq!(killed(None, Some([0.0, 0.0]), None), "0 %");
        assert_eq!(killed(None, None, None), "-");
    }

    #[test]
    fn whatif_names_timeout_kill_and_attempts() {
        let w: WhatIf = serde_json::from_value(json!({
            "baseline_id": "bl-20261130-001", "run_id": "run-20261130-001",
            "segment": "order->payment", "timeout_ms": 200, "baseline_timeout_ms": 390,
            "source": "percentiles", "kill_rate": null, "kill_rate_bounds": [0.01, 0.5],
            "killed": null, "samples": null, "retries_on_deadline": false,
            "attempts_per_call": null}))
        .unwrap();
        let text = whatif(&w);
        for line in [
            "timeout:            200 ms",
            "baseline's timeout: 390 ms",
            "kills:              1–50 % of the load test's calls (the run holds percentile points only: bounds)",
            "attempts per call:  - (percentile points only)",
        ] {
            assert!(text.contains(line), "{text}");
        }
    }
}
