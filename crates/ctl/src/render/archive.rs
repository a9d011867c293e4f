//! The archive: one baseline's archive state (a section of `baseline show`) and `archive verify`.

use budget_api::archive::{ArchiveReport, ArchiveStatus};

use super::{fields, flag, opt, short, table, text};

/// `GET /baselines/{id}/archive`, as a section of `baseline show`.
pub fn archive_status(v: &ArchiveStatus) -> String {
    let state = match v.state.as_str() {
        "archived" => "archived".to_owned(),
        "pending" => "pending (upload queued)".to_owned(),
        "retrying" => "retrying (uploads failed so far; retried until one succeeds)".to_owned(),
        "unknown" => "unknown (no upload of this key recorded)".to_owned(),
        other => text(other),
    };
    let body = fields(&[
        ("state", state),
        ("key", text(&v.key)),
        ("store", text(&v.archive)),
        ("sha256", text(&v.sha256)),
        ("attempts", opt(&v.attempts)),
        ("last error", opt(&v.last_error)),
        ("archived at", opt(&v.archived_at)),
    ]);
    let indented: Vec<String> = body.lines().map(|l| format!("  {l}")).collect();
    format!("archive:\n{}", indented.join("\n"))
}

/// `GET /archive/verify`: the baselines whose archived object is missing or differs.
pub fn archive_verify(v: &ArchiveReport) -> String {
    let scope = match &v.date {
        Some(d) => format!(" created on {d}"),
        None => String::new(),
    };
    let checked = v.checked;
    if v.problems.is_empty() {
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
    for p in &v.problems {
        t.add_row(vec![
            text(&p.baseline_id),
            text(&p.key),
            text(&p.problem),
            short(&p.expected_sha256),
            p.actual_sha256.as_deref().map_or_else(|| "-".into(), short),
            flag(p.pending).to_owned(),
            opt(&p.error),
        ]);
    }
    format!(
        "archive: {} of {checked} baseline(s){scope} missing, differing or unreadable\n{t}",
        v.problems.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::check;
    use serde_json::{json, Value};

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
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
            &archive_status(&typed(archived)),
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
        let text = archive_status(&typed(retrying));
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
            archive_verify(&typed(clean)),
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
        let text = archive_verify(&typed(report));
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
}
