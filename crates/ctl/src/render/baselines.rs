//! Baselines: a chain's list, one document, a diff, the answers of approve / reject /
//! recompute, and a publication's rollout.

use serde_json::Value;

use super::checks::{drift_table, findings};
use super::{arr, fields, ms, pct, s, table, yes_no};

/// `GET /chains/{chain}/baselines`.
pub fn baselines(v: &Value) -> String {
    let list = arr(&v["baselines"]);
    if list.is_empty() {
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
    for b in list {
        t.add_row(vec![
            s(&b["id"]),
            s(&b["state"]),
            s(&b["reason"]),
            s(&b["run_id"]),
            s(&b["topology_version"]),
            yes_no(&b["has_errors"]).to_owned(),
            s(&b["created_by"]),
            s(&b["created_at"]),
        ]);
    }
    t.to_string()
}

/// A baseline document: header, segments, findings (and its drift, when it has one).
pub fn baseline(v: &Value) -> String {
    let mut head = vec![
        ("baseline", s(&v["id"])),
        ("chain", s(&v["chain"])),
        ("state", s(&v["state"])),
        ("reason", s(&v["reason"])),
        ("run", s(&v["run_id"])),
        ("topology", format!("v{}", s(&v["topology_version"]))),
        (
            "created",
            format!("{} by {}", s(&v["created_at"]), s(&v["created_by"])),
        ),
        (
            "policy",
            format!(
                "entry {} ms, breaker window {} ms, max recovery {}",
                ms(&v["entry_budget_ms"]),
                ms(&v["breaker_window_ms"]),
                s(&v["max_recovery"])
            ),
        ),
    ];
    let d = &v["decision"];
    if !d.is_null() {
        let comment = d["comment"]
            .as_str()
            .map(|c| format!(": {c:?}"))
            .unwrap_or_default();
        head.push((
            "decision",
            format!(
                "{} by {} at {}{comment}",
                s(&v["state"]),
                s(&d["by"]),
                s(&d["at"])
            ),
        ));
    }
    let mut t = table(
        &[
            "segment", "class", "rule", "p99", "p999", "timeout", "budget",
        ],
        &[3, 4, 5, 6],
    );
    for seg in arr(&v["segments"]) {
        t.add_row(vec![
            s(&seg["id"]),
            s(&seg["class"]),
            s(&seg["rule"]),
            ms(&seg["p99_ms"]),
            ms(&seg["p999_ms"]),
            ms(&seg["timeout_ms"]),
            ms(&seg["budget_ms"]),
        ]);
    }
    let mut out = vec![fields(&head), t.to_string(), findings(&v["findings"])];
    if !arr(&v["drift"]).is_empty() {
        out.push(format!("drift from {}:", s(&v["drift_baseline_id"])));
        out.push(drift_table(&v["drift"]));
    }
    out.join("\n")
}

/// One `{from, to, change_pct}` of a diff: `390 → 507 (+30.0 %)`, or `44` when unchanged.
fn change(c: &Value) -> String {
    match (c["from"].is_null(), c["to"].is_null()) {
        (true, true) => "-".into(),
        (true, false) => format!("new {}", ms(&c["to"])),
        (false, true) => format!("removed (was {})", ms(&c["from"])),
        _ if c["from"].as_f64() == c["to"].as_f64() => ms(&c["to"]),
        _ => match c["change_pct"].as_f64() {
            Some(_) => format!(
                "{} → {} ({} %)",
                ms(&c["from"]),
                ms(&c["to"]),
                pct(&c["change_pct"])
            ),
            None => format!("{} → {}", ms(&c["from"]), ms(&c["to"])),
        },
    }
}

/// `GET /baselines/{id}/diff`.
pub fn diff(v: &Value) -> String {
    let mut t = table(
        &["segment", "status", "p99", "p999", "timeout", "budget"],
        &[2, 3, 4, 5],
    );
    for seg in arr(&v["segments"]) {
        t.add_row(vec![
            s(&seg["id"]),
            s(&seg["status"]),
            change(&seg["p99_ms"]),
            change(&seg["p999_ms"]),
            change(&seg["timeout_ms"]),
            change(&seg["budget_ms"]),
        ]);
    }
    let mut out = vec![
        format!("diff {} → {}", s(&v["from"]), s(&v["to"])),
        t.to_string(),
    ];
    for (title, key) in [
        ("findings added", "findings_added"),
        ("findings resolved", "findings_resolved"),
    ] {
        let list = arr(&v[key]);
        if list.is_empty() {
            out.push(format!("{title}: none"));
        } else {
            out.push(format!("{title}:"));
            out.extend(list.iter().map(|f| {
                format!(
                    "  {} {} at {}: {}",
                    s(&f["severity"]),
                    s(&f["check"]),
                    s(&f["segment"]),
                    s(&f["message"])
                )
            }));
        }
    }
    out.join("\n")
}

/// `POST /baselines/{id}/approve`.
pub fn approved(v: &Value) -> String {
    let b = &v["baseline"];
    let mut line = format!("approved {} ({})", s(&b["id"]), s(&b["chain"]));
    match v["revision"].as_i64() {
        Some(rev) => line.push_str(&format!(": published as revision {rev}")),
        None => line.push_str(": not published"),
    }
    if let Some(old) = v["superseded"].as_str() {
        line.push_str(&format!(", supersedes {old}"));
    }
    line
}

/// `POST /baselines/{id}/reject`.
pub fn rejected(v: &Value) -> String {
    let b = &v["baseline"];
    format!(
        "rejected {} ({}): {}",
        s(&b["id"]),
        s(&b["chain"]),
        s(&b["decision"]["comment"])
    )
}

/// `POST /chains/{chain}/baselines`: the new draft.
pub fn recomputed(v: &Value) -> String {
    format!(
        "draft {} created for {} from run {} (topology v{})\n{}",
        s(&v["id"]),
        s(&v["chain"]),
        s(&v["run_id"]),
        s(&v["topology_version"]),
        findings(&v["findings"])
    )
}

/// `GET /baselines/{id}/rollout`.
pub fn rollout(v: &Value) -> String {
    fields(&[
        ("baseline", s(&v["baseline_id"])),
        ("chain", s(&v["chain"])),
        ("state", s(&v["state"])),
        ("published as revision", s(&v["revision"])),
        ("agents of the chain", s(&v["agents"])),
        ("connected", s(&v["connected"])),
        ("acked", s(&v["acked"])),
        ("nacked", s(&v["nacked"])),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_changes_show_from_and_to() {
        assert_eq!(
            change(&json!({"from": 390, "to": 507, "change_pct": 30.0})),
            "390 → 507 (+30.0 %)"
        );
        assert_eq!(
            change(&json!({"from": 44, "to": 44, "change_pct": 0.0})),
            "44"
        );
        assert_eq!(change(&json!({"from": null, "to": 9})), "new 9");
        assert_eq!(change(&json!({"from": 9, "to": null})), "removed (was 9)");
    }
}
