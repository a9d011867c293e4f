//! Releases: a recorded one, the list, those citing a baseline (a section of `baseline show`),
//! and a passed `release check`.

use budget_api::releases::{Release, ReleaseCheck, ReleaseList};

use super::{fields, opt, short, table, text};

/// `POST /releases`: the recorded release.
pub fn release(v: &Release) -> String {
    fields(&[
        ("release", v.id.to_string()),
        ("service", text(&v.service)),
        ("version", text(&v.version)),
        ("baseline", text(&v.baseline_id)),
        ("sha256", text(&v.baseline_sha256)),
        ("ticket", text(&v.ticket)),
        (
            "recorded",
            format!("{} by {}", text(&v.created_at), text(&v.created_by)),
        ),
    ])
}

/// `GET /releases`.
pub fn releases(v: &ReleaseList) -> String {
    if v.releases.is_empty() {
        return "no releases".into();
    }
    let mut t = table(
        &[
            "id", "service", "version", "baseline", "sha256", "ticket", "by", "at",
        ],
        &[0],
    );
    for r in &v.releases {
        t.add_row(vec![
            r.id.to_string(),
            text(&r.service),
            text(&r.version),
            text(&r.baseline_id),
            short(&r.baseline_sha256),
            text(&r.ticket),
            text(&r.created_by),
            text(&r.created_at),
        ]);
    }
    t.to_string()
}

/// `GET /baselines/{id}/releases`, as a section of `baseline show`.
pub fn baseline_releases(v: &ReleaseList) -> String {
    if v.releases.is_empty() {
        return "releases: none cite this baseline".into();
    }
    let mut t = table(&["service", "version", "ticket", "by", "at"], &[]);
    for r in &v.releases {
        t.add_row(vec![
            text(&r.service),
            text(&r.version),
            text(&r.ticket),
            text(&r.created_by),
            text(&r.created_at),
        ]);
    }
    format!("releases: {}\n{t}", v.releases.len())
}

/// `release check`: the verdict when the baseline may be cited.
pub fn release_check(v: &ReleaseCheck) -> String {
    let head = fields(&[
        ("baseline", text(&v.baseline_id)),
        ("chain", text(&v.chain)),
        ("state", text(&v.state)),
        ("current", opt(&v.current_baseline_id)),
    ]);
    format!("{head}\nok: {}", text(&v.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::check;
    use serde_json::{json, Value};

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
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
            &release(&typed(a_release())),
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
            &releases(&typed(json!({"releases": [a_release()]}))),
            &[
                "┌────┬─────────┬─────────┬─────────────────┬───────────────┬────────┬─────┬──────────────────────┐",
                "│ id ┆ service ┆ version ┆ baseline        ┆ sha256        ┆ ticket ┆ by  ┆ at                   │",
                "╞════╪═════════╪═════════╪═════════════════╪═══════════════╪════════╪═════╪══════════════════════╡",
                "│  7 ┆ order   ┆ 1.4.2   ┆ bl-20261130-001 ┆ 0123456789ab… ┆ CHG-1  ┆ uma ┆ 2026-11-30T10:00:00Z │",
                "└────┴─────────┴─────────┴─────────────────┴───────────────┴────────┴─────┴──────────────────────┘",
            ],
        );
        assert_eq!(releases(&typed(json!({"releases": []}))), "no releases");
        assert_eq!(releases(&typed(json!({}))), "no releases");
    }

    #[test]
    fn the_baseline_view_lists_the_releases_citing_it() {
        check(
            &baseline_releases(&typed(json!({"releases": [a_release()]}))),
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
            baseline_releases(&typed(json!({"releases": []}))),
            "releases: none cite this baseline"
        );
    }

    #[test]
    fn a_passed_release_check_says_why() {
        let verdict = json!({"baseline_id": "bl-20261130-001", "chain": "checkout", "state": "approved",
            "current_baseline_id": "bl-20261130-001", "ok": true,
            "message": "bl-20261130-001 is the approved, current baseline of checkout"});
        check(
            &release_check(&typed(verdict)),
            &[
                "baseline: bl-20261130-001",
                "chain:    checkout",
                "state:    approved",
                "current:  bl-20261130-001",
                "ok: bl-20261130-001 is the approved, current baseline of checkout",
            ],
        );
    }
}
