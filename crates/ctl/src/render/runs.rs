//! Runs: the outcome of an upload (run id, percentiles, label mapping, drift, draft), one run,
//! a chain's runs.

use budget_api::runs::{LabelMapping, Run, RunList, RunSegment, RunSource, RunUploadResult};

use super::baselines::segment_table;
use super::checks::{drift_table, findings};
use super::{fields, ms, opt, table, text, wire};

/// `POST /chains/{chain}/runs`: run id, drift table, draft; for a dry run, what the upload
/// would give.
pub fn run_outcome(v: &RunUploadResult) -> String {
    let run = if v.dry_run {
        ("dry run", "nothing stored (no run, no draft)".to_owned())
    } else {
        ("run", text(&v.run_id))
    };
    let mut out = vec![fields(&[
        run,
        ("chain", text(&v.chain)),
        ("topology", format!("v{}", v.topology_version)),
        ("format", format!("{} ({})", text(&v.format), opt(&v.tool))),
        (
            "compared with",
            match &v.compared_to {
                Some(id) => id.clone(),
                None => "nothing (the chain has no approved baseline)".into(),
            },
        ),
    ])];
    if !v.segments.is_empty() {
        let segments: Vec<RunSegment> = v
            .segments
            .iter()
            .map(|s| RunSegment {
                id: s.id.clone(),
                samples: s.samples,
                failures: s.failures,
                p50_ms: s.p50_ms,
                p99_ms: s.p99_ms,
                p999_ms: s.p999_ms,
                distribution: None,
                distribution_bytes: None,
            })
            .collect();
        out.push(percentiles(&segments));
    }
    out.extend(notes(&v.sources));
    out.extend(v.mapping.as_ref().map(mapping));
    if !v.comparison.is_empty() {
        out.push(drift_table(&v.comparison));
        let drifted = v.drift.len();
        out.push(if drifted == 0 {
            "drift: none (no percentile moved more than 20 %)".into()
        } else {
            format!("drift: {drifted} percentile(s) moved more than 20 %")
        });
    }
    if let (true, Some(preview)) = (v.dry_run, &v.preview) {
        out.push(match (&v.reason, &v.compared_to) {
            (Some(reason), _) => format!("would open a draft (reason: {}) holding:", wire(reason)),
            (None, Some(live)) => {
                format!("would open no draft (no drift from {live}); a recompute would give:")
            }
            (None, None) => "would open no draft; a recompute would give:".to_owned(),
        });
        out.push(segment_table(&preview.segments));
        out.push(findings(&preview.findings));
        return out.join("\n");
    }
    // The draft id alone after its label, for eyes and for `grep '^draft:'`.
    match &v.baseline_id {
        Some(id) => {
            out.push(format!("draft: {id}"));
            out.push(format!(
                "reason: {}",
                v.reason.as_ref().map_or_else(|| "-".into(), wire)
            ));
            out.push(findings(&v.findings));
        }
        None => out.push(match &v.compared_to {
            Some(live) => format!("draft: none (no drift from {live})"),
            None => "draft: none".into(),
        }),
    }
    out.join("\n")
}

/// One run (`GET /chains/{chain}/runs/{id}`).
pub fn run(v: &Run) -> String {
    let head = fields(&[
        ("run", text(&v.id)),
        ("chain", text(&v.chain)),
        ("topology", format!("v{}", v.topology_version)),
        ("format", text(&v.format)),
        ("tool", opt(&v.tool)),
        ("note", opt(&v.note)),
        (
            "uploaded",
            format!("{} by {}", text(&v.created_at), text(&v.uploaded_by)),
        ),
        (
            "source",
            format!("{} bytes, sha256 {}", v.source_size, text(&v.source_sha256)),
        ),
    ]);
    let mut out = vec![head, percentiles(&v.segments)];
    if !v.sources.is_empty() {
        let mut t = table(&["file", "format", "bytes", "sha256"], &[2]);
        for f in &v.sources {
            t.add_row(vec![
                opt(&f.name),
                text(&f.format),
                f.size.to_string(),
                text(&f.sha256),
            ]);
        }
        out.push(format!("evidence:\n{t}"));
    }
    out.extend(notes(&v.sources));
    out.extend(v.mapping.as_ref().map(mapping));
    out.join("\n")
}

/// Per-segment percentiles read from a run.
pub fn percentiles(segments: &[RunSegment]) -> String {
    // A stored run says which distribution it keeps per segment (upload answers do not).
    let kept = segments.iter().any(|s| s.distribution.is_some());
    let mut header = vec!["segment", "samples", "failures", "p50", "p99", "p999"];
    if kept {
        header.push("distribution kept");
    }
    let mut t = table(&header, &[1, 2, 3, 4, 5]);
    for seg in segments {
        let mut row = vec![
            text(&seg.id),
            seg.samples.to_string(),
            seg.failures
                .map_or_else(|| "unknown".to_owned(), |f| f.to_string()),
            ms(seg.p50_ms),
            ms(Some(seg.p99_ms)),
            ms(Some(seg.p999_ms)),
        ];
        if kept {
            row.push(match (&seg.distribution, seg.distribution_bytes) {
                (Some(kind), Some(bytes)) => format!("{}, {bytes} B", wire(kind)),
                (Some(kind), None) => wire(kind),
                (None, _) => "none".into(),
            });
        }
        t.add_row(row);
    }
    t.to_string()
}

/// What the files say about their numbers: how each computed its percentiles, and its notes
/// (failures that are unknown, latencies corrected for coordinated omission, …).
fn notes(sources: &[RunSource]) -> Option<String> {
    let many = sources.len() > 1;
    let one_method = sources
        .windows(2)
        .all(|w| w[0].percentiles == w[1].percentiles);
    let mut lines = Vec::new();
    if let (true, Some(method)) = (
        one_method,
        sources.first().and_then(|s| s.percentiles.as_ref()),
    ) {
        lines.push(format!("  percentiles: {}", text(method)));
    }
    for s in sources {
        let prefix = match (&s.name, many) {
            (Some(name), true) => format!("{}: ", text(name)),
            _ => String::new(),
        };
        if let (false, Some(method)) = (one_method, &s.percentiles) {
            lines.push(format!("  {prefix}percentiles: {}", text(method)));
        }
        for note in &s.notes {
            lines.push(format!("  {prefix}{}", text(note)));
        }
    }
    (!lines.is_empty()).then(|| format!("notes:\n{}", lines.join("\n")))
}

/// How load-tool labels were mapped: `label → segment`, and the labels left unmapped.
pub fn mapping(m: &LabelMapping) -> String {
    let mut lines = vec!["labels:".to_owned()];
    for (label, seg) in &m.mapped {
        lines.push(format!("  {label} → {}", text(seg)));
    }
    if !m.unmapped.is_empty() {
        lines.push(format!(
            "  unmapped (not used; map them with --map LABEL=SEGMENT or the topology's labels): {}",
            m.unmapped.join(", ")
        ));
    }
    if !m.ignored.is_empty() {
        lines.push(format!("  ignored: {}", m.ignored.join(", ")));
    }
    lines.join("\n")
}

/// `GET /chains/{chain}/runs`.
pub fn runs(v: &RunList) -> String {
    if v.runs.is_empty() {
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
    for r in &v.runs {
        t.add_row(vec![
            text(&r.id),
            r.topology_version.to_string(),
            r.segments.len().to_string(),
            opt(&r.tool),
            text(&r.uploaded_by),
            text(&r.created_at),
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
        let compared = json!({"run_id": "run-2", "chain": "c", "topology_version": 1,
            "compared_to": "bl-20261130-001", "comparison": [], "drift": [], "baseline_id": null});
        let text = run_outcome(&serde_json::from_value(compared).unwrap());
        assert!(
            text.ends_with("\ndraft: none (no drift from bl-20261130-001)"),
            "{text}"
        );
        let with_draft = json!({
            "run_id": "run-20261130-002", "chain": "checkout", "topology_version": 1,
            "compared_to": "bl-20261130-001",
            "comparison": [{"segment": "order->payment", "metric": "p999", "baseline_ms": 300.0, "run_ms": 390.0, "change_pct": 30.0, "drift": true}],
            "drift": [{"segment": "order->payment", "metric": "p999", "baseline_ms": 300.0, "run_ms": 390.0, "change_pct": 30.0, "drift": true}],
            "baseline_id": "bl-20261130-002", "reason": "drift", "findings": []
        });
        let text = run_outcome(&serde_json::from_value(with_draft).unwrap());
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
            text.contains("\ndraft: bl-20261130-002\nreason: drift\nfindings: none"),
            "{text}"
        );

        let first = json!({"run_id": "run-1", "chain": "c", "topology_version": 1, "compared_to": null,
            "comparison": [], "drift": [], "baseline_id": null, "reason": null, "findings": []});
        let text = run_outcome(&serde_json::from_value(first).unwrap());
        assert!(
            text.contains("compared with: nothing (the chain has no approved baseline)"),
            "{text}"
        );
        assert!(text.ends_with("\ndraft: none"), "{text}");

        assert!(!text.contains('┌'), "no comparison, no table: {text}");

        let dry = json!({"run_id": "", "chain": "c", "topology_version": 1, "compared_to": null,
            "comparison": [], "drift": [], "baseline_id": null, "reason": "first_run",
            "findings": [], "dry_run": true, "preview": {
                "id": "", "chain": "c", "state": "draft", "reason": "first_run", "run_id": "",
                "topology_version": 1, "created_at": "2026-11-30T10:00:00Z", "created_by": "uma",
                "entry_budget_ms": 800, "breaker_window_ms": 5000, "max_recovery": "18h",
                "findings": [], "segments": [{"id": "order->user", "caller": "order",
                    "callee": "user", "parent": "gateway->order", "class": "stable",
                    "p99_ms": 8.0, "p999_ms": 20.0, "rule": "p99_plus10", "timeout_ms": 9,
                    "budget_ms": 9, "retry": {"idempotent": false}}]}});
        let dry_text = run_outcome(&serde_json::from_value(dry).unwrap());
        assert!(
            dry_text.starts_with("dry run:       nothing stored (no run, no draft)\n"),
            "{dry_text}"
        );
        assert!(
            dry_text.contains("would open a draft (reason: first_run) holding:\n"),
            "{dry_text}"
        );
        assert!(
            dry_text
                .contains("│ order->user ┆ stable ┆ p99_plus10 ┆       - ┆        - ┆   8 ┆   20 ┆       9 ┆      9 ┆      - │"),
            "{dry_text}"
        );
        assert!(!dry_text.contains("draft: "), "{dry_text}");
    }
}
