//! Runs: the outcome of an upload (run id, percentiles, label mapping, drift, draft), one run,
//! a chain's runs.

use serde_json::Value;

use super::checks::{drift_table, findings};
use super::{arr, fields, ms, s, table};

/// `POST /chains/{chain}/runs`: run id, drift table, draft.
pub fn run_outcome(v: &Value) -> String {
    let mut out = vec![fields(&[
        ("run", s(&v["run_id"])),
        ("chain", s(&v["chain"])),
        ("topology", format!("v{}", s(&v["topology_version"]))),
        ("format", format!("{} ({})", s(&v["format"]), s(&v["tool"]))),
        (
            "compared with",
            match v["compared_to"].as_str() {
                Some(id) => id.to_owned(),
                None => "nothing (the chain has no approved baseline)".into(),
            },
        ),
    ])];
    if !arr(&v["segments"]).is_empty() {
        out.push(percentiles(&v["segments"]));
    }
    out.extend(mapping(&v["mapping"]));
    if !arr(&v["comparison"]).is_empty() {
        out.push(drift_table(&v["comparison"]));
        let drifted = arr(&v["drift"]).len();
        out.push(if drifted == 0 {
            "drift: none (no percentile moved more than 20 %)".into()
        } else {
            format!("drift: {drifted} percentile(s) moved more than 20 %")
        });
    }
    match v["baseline_id"].as_str() {
        Some(id) => {
            out.push(format!("draft: {id} (reason: {})", s(&v["reason"])));
            out.push(findings(&v["findings"]));
        }
        None => out.push("no draft".into()),
    }
    out.join("\n")
}

/// One run (`GET /chains/{chain}/runs/{id}`).
pub fn run(v: &Value) -> String {
    let head = fields(&[
        ("run", s(&v["id"])),
        ("chain", s(&v["chain"])),
        ("topology", format!("v{}", s(&v["topology_version"]))),
        ("format", s(&v["format"])),
        ("tool", s(&v["tool"])),
        ("note", s(&v["note"])),
        (
            "uploaded",
            format!("{} by {}", s(&v["created_at"]), s(&v["uploaded_by"])),
        ),
        (
            "source",
            format!(
                "{} bytes, sha256 {}",
                s(&v["source_size"]),
                s(&v["source_sha256"])
            ),
        ),
    ]);
    let mut out = vec![head, percentiles(&v["segments"])];
    let sources = arr(&v["sources"]);
    if !sources.is_empty() {
        let mut t = table(&["file", "format", "bytes", "sha256"], &[2]);
        for f in sources {
            t.add_row(vec![
                s(&f["name"]),
                s(&f["format"]),
                s(&f["size"]),
                s(&f["sha256"]),
            ]);
        }
        out.push(format!("evidence:\n{t}"));
    }
    out.extend(mapping(&v["mapping"]));
    out.join("\n")
}

/// Per-segment percentiles read from a run.
pub fn percentiles(segments: &Value) -> String {
    let mut t = table(
        &["segment", "samples", "failures", "p50", "p99", "p999"],
        &[1, 2, 3, 4, 5],
    );
    for seg in arr(segments) {
        t.add_row(vec![
            s(&seg["id"]),
            s(&seg["samples"]),
            s(&seg["failures"]),
            ms(&seg["p50_ms"]),
            ms(&seg["p99_ms"]),
            ms(&seg["p999_ms"]),
        ]);
    }
    t.to_string()
}

/// How load-tool labels were mapped: `label → segment`, and the labels left unmapped.
pub fn mapping(m: &Value) -> Option<String> {
    let mapped = m["mapped"].as_object()?;
    let mut lines = vec!["labels:".to_owned()];
    for (label, seg) in mapped {
        lines.push(format!("  {label} → {}", s(seg)));
    }
    let unmapped: Vec<String> = arr(&m["unmapped"]).iter().map(s).collect();
    if !unmapped.is_empty() {
        lines.push(format!(
            "  unmapped (not used; map them with --map LABEL=SEGMENT or the topology's labels): {}",
            unmapped.join(", ")
        ));
    }
    let ignored: Vec<String> = arr(&m["ignored"]).iter().map(s).collect();
    if !ignored.is_empty() {
        lines.push(format!("  ignored: {}", ignored.join(", ")));
    }
    Some(lines.join("\n"))
}

/// `GET /chains/{chain}/runs`.
pub fn runs(v: &Value) -> String {
    let list = arr(&v["runs"]);
    if list.is_empty() {
        return "no runs".into();
    }
    let mut t = table(
        &[
            "run",
            "topology",
            "segments",
            "tool",
            "uploaded by",
            "uploaded at",
        ],
        &[1, 2],
    );
    for r in list {
        t.add_row(vec![
            s(&r["id"]),
            s(&r["topology_version"]),
            arr(&r["segments"]).len().to_string(),
            s(&r["tool"]),
            s(&r["uploaded_by"]),
            s(&r["created_at"]),
        ]);
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn run_outcome_names_the_draft_or_says_there_is_none() {
        let with_draft = json!({
            "run_id": "run-20261130-002", "chain": "checkout", "topology_version": 1,
            "compared_to": "bl-20261130-001",
            "comparison": [{"segment": "order->payment", "metric": "p999", "baseline_ms": 300.0, "run_ms": 390.0, "change_pct": 30.0, "drift": true}],
            "drift": [{"segment": "order->payment"}],
            "baseline_id": "bl-20261130-002", "reason": "drift", "findings": []
        });
        let text = run_outcome(&with_draft);
        assert!(
            text.starts_with("run:           run-20261130-002\n"),
            "{text}"
        );
        assert!(
            text.contains("│ order->payment ┆ p999   ┆      300 ┆ 390 ┆    +30.0 ┆ yes   │"),
            "{text}"
        );
        assert!(
            text.contains("drift: 1 percentile(s) moved more than 20 %"),
            "{text}"
        );
        assert!(
            text.contains("draft: bl-20261130-002 (reason: drift)\nfindings: none"),
            "{text}"
        );

        let first = json!({"run_id": "run-1", "chain": "c", "topology_version": 1, "compared_to": null,
            "comparison": [], "drift": [], "baseline_id": null, "reason": null, "findings": []});
        let text = run_outcome(&first);
        assert!(
            text.contains("compared with: nothing (the chain has no approved baseline)"),
            "{text}"
        );
        assert!(text.ends_with("\nno draft"), "{text}");
        assert!(!text.contains('┌'), "no comparison, no table: {text}");
    }
}
