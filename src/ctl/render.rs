//! Human-readable views of the server's JSON answers: pure functions from a `Value` to text.
//!
//! They read fields leniently (a missing field shows as `-`) so an older or newer server still
//! renders; `--json` is the exact answer.

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

/// A topology segment's explicit retry flags, e.g. `on_deadline=false`; `-` when defaulted.
fn retry_flags(r: &Value) -> String {
    let set: Vec<String> = ["on_deadline", "on_unavailable"]
        .iter()
        .filter_map(|name| r[*name].as_bool().map(|b| format!("{name}={b}")))
        .collect();
    if set.is_empty() {
        "-".into()
    } else {
        set.join(" ")
    }
}

fn idempotency(i: &Value) -> String {
    if i.is_null() {
        "-".into()
    } else {
        format!("{} ({})", s(&i["key"]), s(&i["ttl"]))
    }
}

/// `GET|PUT /chains/{chain}/topology`.
pub fn topology(v: &Value) -> String {
    let topo = &v["topology"];
    let head = fields(&[
        ("chain", s(&v["chain"])),
        ("version", s(&v["version"])),
        (
            "entry budget",
            format!("{} ms", ms(&topo["entry_budget_ms"])),
        ),
        (
            "breaker window",
            format!("{} ms", ms(&topo["breaker_window_ms"])),
        ),
        ("max recovery", s(&topo["max_recovery"])),
        ("sha256", s(&v["sha256"])),
        (
            "created",
            format!("{} by {}", s(&v["created_at"]), s(&v["created_by"])),
        ),
    ]);
    let mut t = table(
        &[
            "segment",
            "parent",
            "class",
            "stage",
            "idempotency",
            "retry",
            "pinned ms",
            "reserve ms",
        ],
        &[3, 6, 7],
    );
    for seg in arr(&topo["segments"]) {
        t.add_row(vec![
            s(&seg["id"]),
            s(&seg["parent"]),
            s(&seg["class"]),
            s(&seg["stage"]),
            idempotency(&seg["idempotency"]),
            retry_flags(&seg["retry"]),
            ms(&seg["pinned_timeout_ms"]),
            ms(&seg["reserve_ms"]),
        ]);
    }
    format!("{head}\n{t}")
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

/// A live segment's retry plan: `deadline 1× [100] · unavailable 2× [100,300]`.
fn retry_plan(r: &Value) -> String {
    if !r["idempotent"].as_bool().unwrap_or(false) {
        return "never (not idempotent)".into();
    }
    let mut parts = Vec::new();
    for (name, key) in [
        ("deadline", "on_deadline"),
        ("unavailable", "on_unavailable"),
    ] {
        let p = &r[key];
        if !p.is_null() {
            let backoffs: Vec<String> = arr(&p["backoffs_ms"]).iter().map(ms).collect();
            parts.push(format!(
                "{name} {}× [{} ms]",
                s(&p["max_retries"]),
                backoffs.join(", ")
            ));
        }
    }
    if parts.is_empty() {
        "never".into()
    } else {
        parts.join("; ")
    }
}

/// `GET /chains/{chain}/budgets`: the live config.
pub fn budgets(v: &Value) -> String {
    let head = fields(&[
        ("chain", s(&v["chain"])),
        ("revision", s(&v["revision"])),
        ("baseline", s(&v["baseline_id"])),
        ("published", s(&v["published_at"])),
        ("entry budget", format!("{} ms", ms(&v["entry_budget_ms"]))),
        (
            "breaker window",
            format!("{} ms", ms(&v["breaker_window_ms"])),
        ),
        ("max recovery", s(&v["max_recovery"])),
    ]);
    let mut t = table(
        &[
            "segment",
            "parent",
            "class",
            "timeout",
            "budget",
            "reserve",
            "retries",
            "idempotency",
        ],
        &[3, 4, 5],
    );
    for seg in arr(&v["segments"]) {
        t.add_row(vec![
            s(&seg["id"]),
            s(&seg["parent"]),
            s(&seg["class"]),
            ms(&seg["timeout_ms"]),
            ms(&seg["budget_ms"]),
            ms(&seg["reserve_ms"]),
            retry_plan(&seg["retry"]),
            idempotency(&seg["idempotency"]),
        ]);
    }
    format!("{head}\n{t}")
}

/// `POST /chains/{chain}/rollback`.
pub fn rolled_back(v: &Value) -> String {
    let mut line = format!(
        "{} now serves {} (revision {})",
        s(&v["chain"]),
        s(&v["baseline_id"]),
        s(&v["revision"])
    );
    if let Some(old) = v["superseded"].as_str() {
        line.push_str(&format!("; {old} superseded"));
    }
    line
}

/// `GET /chains`.
pub fn chains(v: &Value) -> String {
    let list = arr(&v["chains"]);
    if list.is_empty() {
        return "no chains".into();
    }
    let mut t = table(
        &[
            "chain",
            "topology",
            "live baseline",
            "revision",
            "drafts",
            "runs",
            "updated at",
        ],
        &[1, 3, 4, 5],
    );
    for c in list {
        t.add_row(vec![
            s(&c["name"]),
            s(&c["topology_version"]),
            s(&c["current_baseline"]),
            s(&c["revision"]),
            s(&c["drafts"]),
            s(&c["runs"]),
            s(&c["updated_at"]),
        ]);
    }
    t.to_string()
}

/// `GET /audit`.
pub fn audit(v: &Value) -> String {
    let list = arr(&v["entries"]);
    if list.is_empty() {
        return "no audit entries".into();
    }
    let mut t = table(
        &["id", "at", "actor", "action", "chain", "subject", "detail"],
        &[0],
    );
    for e in list {
        let detail = match &e["detail"] {
            Value::Object(m) if m.is_empty() => "-".into(),
            Value::Null => "-".into(),
            other => other.to_string(),
        };
        t.add_row(vec![
            s(&e["id"]),
            s(&e["at"]),
            s(&e["actor"]),
            s(&e["action"]),
            s(&e["chain"]),
            s(&e["subject"]),
            detail,
        ]);
    }
    t.to_string()
}

/// `GET /tokens`.
pub fn tokens(v: &Value) -> String {
    let list = arr(&v["tokens"]);
    if list.is_empty() {
        return "no tokens".into();
    }
    let mut t = table(&["name", "role", "owner", "created by", "created at"], &[]);
    for tok in list {
        t.add_row(vec![
            s(&tok["name"]),
            s(&tok["role"]),
            s(&tok["owner"]),
            s(&tok["created_by"]),
            s(&tok["created_at"]),
        ]);
    }
    t.to_string()
}

/// The lines explaining a failed request's `details`: violations, findings, or the raw value.
pub fn error_details(details: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    for v in arr(&details["violations"]) {
        let at = match (v["pointer"].as_str(), v["segment"].as_str()) {
            (Some(""), _) => "(document)".to_owned(),
            (Some(p), _) => p.to_owned(),
            (None, Some(seg)) => seg.to_owned(),
            (None, None) => "-".to_owned(),
        };
        lines.push(format!("  {at}: {}", s(&v["message"])));
    }
    for f in arr(&details["findings"]) {
        lines.push(format!(
            "  {} {} at {}: {}",
            s(&f["severity"]),
            s(&f["check"]),
            s(&f["segment"]),
            s(&f["message"])
        ));
    }
    // Keys the message already states, or that the lines above cover.
    const SHOWN: [&str; 6] = [
        "violations",
        "findings",
        "schema",
        "line",
        "column",
        "limit_bytes",
    ];
    if let Some(schema) = details["schema"].as_str() {
        lines.push(format!("  (schema: {schema})"));
    }
    match details {
        Value::Object(m) if m.keys().all(|k| SHOWN.contains(&k.as_str())) => {}
        Value::Null => {}
        other => lines.push(format!("  details: {other}")),
    }
    lines
}

/// A SHA-256 cut to its first 12 hex digits (`--json` has it whole); `-` when absent.
fn short_sha(v: &Value) -> String {
    match v.as_str() {
        Some(h) if h.len() > 12 => format!("{}…", h.get(..12).unwrap_or(h)),
        _ => s(v),
    }
}

/// `POST /releases`: the recorded release.
pub fn release(v: &Value) -> String {
    fields(&[
        ("release", s(&v["id"])),
        ("service", s(&v["service"])),
        ("version", s(&v["version"])),
        ("baseline", s(&v["baseline_id"])),
        ("sha256", s(&v["baseline_sha256"])),
        ("ticket", s(&v["ticket"])),
        (
            "recorded",
            format!("{} by {}", s(&v["created_at"]), s(&v["created_by"])),
        ),
    ])
}

/// `GET /releases`.
pub fn releases(v: &Value) -> String {
    let list = arr(&v["releases"]);
    if list.is_empty() {
        return "no releases".into();
    }
    let mut t = table(
        &[
            "id", "service", "version", "baseline", "sha256", "ticket", "by", "at",
        ],
        &[0],
    );
    for r in list {
        t.add_row(vec![
            s(&r["id"]),
            s(&r["service"]),
            s(&r["version"]),
            s(&r["baseline_id"]),
            short_sha(&r["baseline_sha256"]),
            s(&r["ticket"]),
            s(&r["created_by"]),
            s(&r["created_at"]),
        ]);
    }
    t.to_string()
}

/// `GET /baselines/{id}/releases`, as a section of `baseline show`.
pub fn baseline_releases(v: &Value) -> String {
    let list = arr(&v["releases"]);
    if list.is_empty() {
        return "releases: none cite this baseline".into();
    }
    let mut t = table(&["service", "version", "ticket", "by", "at"], &[]);
    for r in list {
        t.add_row(vec![
            s(&r["service"]),
            s(&r["version"]),
            s(&r["ticket"]),
            s(&r["created_by"]),
            s(&r["created_at"]),
        ]);
    }
    format!("releases: {}\n{t}", list.len())
}

/// `GET /baselines/{id}/archive`, as a section of `baseline show`.
pub fn archive_status(v: &Value) -> String {
    let state = match v["state"].as_str() {
        Some("archived") => "archived".to_owned(),
        Some("pending") => "pending (upload queued)".to_owned(),
        Some("retrying") => {
            "retrying (uploads failed so far; retried until one succeeds)".to_owned()
        }
        Some("unknown") => "unknown (no upload of this key recorded)".to_owned(),
        _ => s(&v["state"]),
    };
    let body = fields(&[
        ("state", state),
        ("key", s(&v["key"])),
        ("store", s(&v["archive"])),
        ("sha256", s(&v["sha256"])),
        ("attempts", s(&v["attempts"])),
        ("last error", s(&v["last_error"])),
        ("archived at", s(&v["archived_at"])),
    ]);
    let indented: Vec<String> = body.lines().map(|l| format!("  {l}")).collect();
    format!("archive:\n{}", indented.join("\n"))
}

/// `GET /archive/verify`: the baselines whose archived object is missing or differs.
pub fn archive_verify(v: &Value) -> String {
    let scope = match v["date"].as_str() {
        Some(d) => format!(" created on {d}"),
        None => String::new(),
    };
    let checked = s(&v["checked"]);
    let list = arr(&v["problems"]);
    if list.is_empty() {
        return format!(
            "archive verified: {checked} baseline(s){scope} checked, none missing or differing"
        );
    }
    let mut t = table(
        &[
            "baseline",
            "key",
            "problem",
            "expected sha256",
            "actual sha256",
            "upload queued",
            "error",
        ],
        &[],
    );
    for p in list {
        t.add_row(vec![
            s(&p["baseline_id"]),
            s(&p["key"]),
            s(&p["problem"]),
            short_sha(&p["expected_sha256"]),
            short_sha(&p["actual_sha256"]),
            yes_no(&p["pending"]).to_owned(),
            s(&p["error"]),
        ]);
    }
    format!(
        "archive: {} of {checked} baseline(s){scope} missing, differing or unreadable\n{t}",
        list.len()
    )
}

/// `release check`: the verdict when the baseline may be cited.
pub fn release_check(v: &Value) -> String {
    let head = fields(&[
        ("baseline", s(&v["baseline_id"])),
        ("chain", s(&v["chain"])),
        ("state", s(&v["state"])),
        ("current", s(&v["current_baseline_id"])),
    ]);
    format!("{head}\nok: {}", s(&v["message"]))
}

/// `GET /agents`: the fleet.
pub fn agents(v: &Value) -> String {
    let list = arr(&v["agents"]);
    if list.is_empty() {
        return "no agents seen yet".into();
    }
    let mut t = table(
        &[
            "agent",
            "service",
            "token",
            "chains",
            "replica",
            "connected",
            "delivered",
            "acked",
            "nack",
            "last seen",
        ],
        &[6, 7],
    );
    for a in list {
        let chains: Vec<String> = arr(&a["chains"]).iter().map(s).collect();
        let nack = match (&a["nack_revision"], &a["nack_error"]) {
            (Value::Null, _) => "-".into(),
            (rev, err) => format!("r{}: {}", s(rev), s(err)),
        };
        t.add_row(vec![
            s(&a["agent_id"]),
            s(&a["service"]),
            s(&a["token"]),
            if chains.is_empty() {
                "-".into()
            } else {
                chains.join(",")
            },
            s(&a["replica"]),
            if a["connected"].as_bool() == Some(true) {
                "yes".into()
            } else {
                "no".into()
            },
            s(&a["delivered"]),
            s(&a["acked"]),
            nack,
            s(&a["last_seen"]),
        ]);
    }
    t.to_string()
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

    fn check(actual: &str, expect: &[&str]) {
        let lines: Vec<&str> = actual.lines().collect();
        assert_eq!(lines, expect, "\nactual:\n{actual}");
    }

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

    #[test]
    fn error_details_list_violations_and_findings() {
        let details = json!({"schema": "/schemas/topology.json", "violations": [
            {"pointer": "/entry_budget_ms", "message": "\"x\" is not of type \"integer\""},
            {"pointer": "", "message": "expected an object"},
            {"segment": "order->user", "message": "no data"}
        ]});
        assert_eq!(
            error_details(&details),
            [
                "  /entry_budget_ms: \"x\" is not of type \"integer\"",
                "  (document): expected an object",
                "  order->user: no data",
                "  (schema: /schemas/topology.json)"
            ]
        );
        let findings = json!({"findings": [{"check": "inversion", "segment": "gateway->order", "severity": "error", "message": "109 ms over"}]});
        assert_eq!(
            error_details(&findings),
            ["  error inversion at gateway->order: 109 ms over"]
        );
        assert!(
            error_details(&json!({"line": 3, "column": 0})).is_empty(),
            "the message says where"
        );
        assert_eq!(
            error_details(&json!({"retry_after": 2})),
            ["  details: {\"retry_after\":2}"]
        );
        assert!(error_details(&Value::Null).is_empty());
    }

    fn a_release() -> Value {
        json!({
            "id": 7, "service": "order", "version": "1.4.2", "baseline_id": "bl-20261130-001",
            "baseline_sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "ticket": "CHG-1", "created_by": "uma", "created_at": "2026-11-30T10:00:00Z"
        })
    }

    #[test]
    fn a_recorded_release_shows_what_it_cites() {
        check(
            &release(&a_release()),
            &[
                "release:  7",
                "service:  order",
                "version:  1.4.2",
                "baseline: bl-20261130-001",
                "sha256:   0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "ticket:   CHG-1",
                "recorded: 2026-11-30T10:00:00Z by uma",
            ],
        );
    }

    #[test]
    fn releases_list_as_a_table() {
        check(
            &releases(&json!({"releases": [a_release()]})),
            &[
                "┌────┬─────────┬─────────┬─────────────────┬───────────────┬────────┬─────┬──────────────────────┐",
                "│ id ┆ service ┆ version ┆ baseline        ┆ sha256        ┆ ticket ┆ by  ┆ at                   │",
                "╞════╪═════════╪═════════╪═════════════════╪═══════════════╪════════╪═════╪══════════════════════╡",
                "│  7 ┆ order   ┆ 1.4.2   ┆ bl-20261130-001 ┆ 0123456789ab… ┆ CHG-1  ┆ uma ┆ 2026-11-30T10:00:00Z │",
                "└────┴─────────┴─────────┴─────────────────┴───────────────┴────────┴─────┴──────────────────────┘",
            ],
        );
        assert_eq!(releases(&json!({"releases": []})), "no releases");
        assert_eq!(releases(&json!({})), "no releases");
    }

    #[test]
    fn the_baseline_view_lists_the_releases_citing_it() {
        check(
            &baseline_releases(&json!({"releases": [a_release()]})),
            &[
                "releases: 1",
                "┌─────────┬─────────┬────────┬─────┬──────────────────────┐",
                "│ service ┆ version ┆ ticket ┆ by  ┆ at                   │",
                "╞═════════╪═════════╪════════╪═════╪══════════════════════╡",
                "│ order   ┆ 1.4.2   ┆ CHG-1  ┆ uma ┆ 2026-11-30T10:00:00Z │",
                "└─────────┴─────────┴────────┴─────┴──────────────────────┘",
            ],
        );
        assert_eq!(
            baseline_releases(&json!({"releases": []})),
            "releases: none cite this baseline"
        );
    }

    #[test]
    fn the_archive_section_shows_state_attempts_and_errors() {
        let archived = json!({
            "baseline_id": "bl-20261130-001", "archive": "file:///data/archive",
            "key": "gov/bench/2026-11-30/bl-20261130-001.json", "sha256": "ab12",
            "state": "archived", "attempts": 1, "last_error": null,
            "archived_at": "2026-11-30T10:00:01Z", "uploads": []
        });
        check(
            &archive_status(&archived),
            &[
                "archive:",
                "  state:       archived",
                "  key:         gov/bench/2026-11-30/bl-20261130-001.json",
                "  store:       file:///data/archive",
                "  sha256:      ab12",
                "  attempts:    1",
                "  last error:  -",
                "  archived at: 2026-11-30T10:00:01Z",
            ],
        );
        let retrying = json!({
            "state": "retrying", "key": "gov/bench/2026-11-30/bl-20261130-001.json",
            "attempts": 3, "last_error": "connection refused", "archived_at": null
        });
        let text = archive_status(&retrying);
        assert!(
            text.contains(
                "  state:       retrying (uploads failed so far; retried until one succeeds)\n"
            ),
            "{text}"
        );
        assert!(text.contains("  attempts:    3\n"), "{text}");
        assert!(
            text.contains("  last error:  connection refused\n"),
            "{text}"
        );
        assert!(text.ends_with("  archived at: -"), "{text}");
    }

    #[test]
    fn archive_verify_lists_every_problem_or_says_there_is_none() {
        let clean = json!({"date": "2026-11-30", "checked": 3, "problems": []});
        assert_eq!(
            archive_verify(&clean),
            "archive verified: 3 baseline(s) created on 2026-11-30 checked, none missing or differing"
        );
        let report = json!({"date": null, "checked": 4, "problems": [
            {"baseline_id": "bl-20261130-001", "key": "gov/bench/2026-11-30/bl-20261130-001.json",
             "problem": "missing", "expected_sha256": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
             "actual_sha256": null, "pending": true},
            {"baseline_id": "bl-20261130-002", "key": "gov/bench/2026-11-30/bl-20261130-002.json",
             "problem": "differs", "expected_sha256": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
             "actual_sha256": "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc", "pending": false},
            {"baseline_id": "bl-20261130-003", "key": "gov/bench/2026-11-30/bl-20261130-003.json",
             "problem": "unreadable", "expected_sha256": "dddd", "actual_sha256": null,
             "pending": false, "error": "permission denied"}
        ]});
        let text = archive_verify(&report);
        assert_eq!(
            text.lines().next(),
            Some("archive: 3 of 4 baseline(s) missing, differing or unreadable")
        );
        for row in [
            "│ baseline        ┆ key                                       ┆ problem    ┆ expected sha256 ┆ actual sha256 ┆ upload queued ┆ error             │",
            "│ bl-20261130-001 ┆ gov/bench/2026-11-30/bl-20261130-001.json ┆ missing    ┆ aaaaaaaaaaaa…   ┆ -             ┆ yes           ┆ -                 │",
            "│ bl-20261130-002 ┆ gov/bench/2026-11-30/bl-20261130-002.json ┆ differs    ┆ bbbbbbbbbbbb…   ┆ cccccccccccc… ┆ no            ┆ -                 │",
            "│ bl-20261130-003 ┆ gov/bench/2026-11-30/bl-20261130-003.json ┆ unreadable ┆ dddd            ┆ -             ┆ no            ┆ permission denied │",
        ] {
            assert!(text.contains(row), "missing row {row}\n{text}");
        }
    }

    #[test]
    fn a_passed_release_check_says_why() {
        let verdict = json!({"baseline_id": "bl-20261130-001", "chain": "checkout", "state": "approved",
            "current_baseline_id": "bl-20261130-001", "ok": true,
            "message": "bl-20261130-001 is the approved, current baseline of checkout"});
        check(
            &release_check(&verdict),
            &[
                "baseline: bl-20261130-001",
                "chain:    checkout",
                "state:    approved",
                "current:  bl-20261130-001",
                "ok: bl-20261130-001 is the approved, current baseline of checkout",
            ],
        );
    }

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
