//! budgetctl names baselines without their ids: `current` and `latest-draft` with `--chain`
//! wherever it takes a baseline id, and `run upload` prints the draft id plainly (alone with
//! `--quiet`), so scripts capture it instead of guessing `bl-YYYYMMDD-NNN`.

use budget_core::example::CHECKOUT_TOPOLOGY;

use crate::helpers::TestApp;
use crate::releases::budgetctl;

/// A SPEC example run, by path (as a user passes it).
fn example_file(name: &str) -> String {
    format!("{}/schemas/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The id after `draft: ` on a line of its own.
fn draft_line(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("draft: "))
        .filter(|id| id.starts_with("bl-") && !id.contains(' '))
        .map(str::to_owned)
}

fn is_baseline_id(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    matches!(parts.as_slice(), ["bl", day, n] if day.len() == 8 && n.len() >= 3
        && day.chars().chain(n.chars()).all(|c| c.is_ascii_digit()))
}

async fn aliases_and_plain_draft_ids(app: &TestApp) {
    let p = app.people().await;
    app.apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let (run_a, run_c) = (
        example_file("checkout-run-a.json"),
        example_file("checkout-run-c-drift.json"),
    );
    let ctl = |token: &str, args: &[&str]| {
        let (token, args): (String, Vec<String>) = (
            token.to_owned(),
            args.iter().map(|a| a.to_string()).collect(),
        );
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            budgetctl(app, &token, &args).await
        }
    };

    // --quiet: the draft id alone, one line.
    let up = ctl(
        &p.uploader,
        &["run", "upload", "--quiet", "--chain", "checkout", &run_a],
    )
    .await
    .expect(0);
    let a = up.stdout.trim_end().to_owned();
    assert!(is_baseline_id(&a), "{up:?}");
    assert_eq!(up.stdout, format!("{a}\n"));

    // latest-draft names it; an alias needs --chain; current needs an approved baseline.
    let shown = ctl(
        &p.uploader,
        &["baseline", "show", "latest-draft", "--chain", "checkout"],
    )
    .await
    .expect(0);
    assert!(
        shown.stdout.starts_with(&format!("baseline: {a}\n")),
        "{shown:?}"
    );
    let usage = ctl(&p.uploader, &["baseline", "show", "latest-draft"])
        .await
        .expect(2);
    assert!(usage.stderr.contains("add --chain CHAIN"), "{usage:?}");
    let none = ctl(
        &p.uploader,
        &["baseline", "show", "current", "--chain", "checkout"],
    )
    .await
    .expect(3);
    assert!(
        none.stderr
            .contains("chain checkout has no approved baseline yet"),
        "{none:?}"
    );

    // Approve by alias; then nothing is pending, and `current` is it.
    let approved = ctl(
        &p.approver,
        &[
            "baseline",
            "approve",
            "latest-draft",
            "--chain",
            "checkout",
            "--comment",
            "ok",
        ],
    )
    .await
    .expect(0);
    assert!(
        approved.stdout.starts_with(&format!("approved {a} ")),
        "{approved:?}"
    );
    let none = ctl(
        &p.uploader,
        &["baseline", "show", "latest-draft", "--chain", "checkout"],
    )
    .await
    .expect(3);
    assert!(
        none.stderr.contains("chain checkout has no pending draft"),
        "{none:?}"
    );
    let rollout = ctl(
        &p.uploader,
        &["baseline", "rollout", "current", "--chain", "checkout"],
    )
    .await
    .expect(0);
    let first = rollout.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("baseline:") && first.ends_with(&format!(" {a}")),
        "{rollout:?}"
    );
    let rec = ctl(
        &p.uploader,
        &[
            "release",
            "record",
            "--service",
            "order",
            "--version",
            "1.4.2",
            "--baseline",
            "current",
            "--chain",
            "checkout",
            "--ticket",
            "CHG-1",
            "--json",
        ],
    )
    .await
    .expect(0);
    assert_eq!(
        rec.json()["baseline_id"],
        a.as_str(),
        "the release cites the id"
    );
    ctl(
        &p.uploader,
        &[
            "release",
            "check",
            "--baseline",
            "current",
            "--chain",
            "checkout",
        ],
    )
    .await
    .expect(0);
    let cited = ctl(
        &p.uploader,
        &[
            "release",
            "list",
            "--baseline",
            "current",
            "--chain",
            "checkout",
            "--json",
        ],
    )
    .await
    .expect(0);
    assert_eq!(cited.json()["releases"][0]["baseline_id"], a.as_str());

    // The plain output names the draft on a line of its own.
    let up = ctl(
        &p.uploader,
        &["run", "upload", "--chain", "checkout", &run_c],
    )
    .await
    .expect(0);
    let c = draft_line(&up.stdout).unwrap_or_else(|| panic!("no `draft: ID` line: {up:?}"));
    assert!(up.stdout.contains("\nreason: drift\n"), "{}", up.stdout);
    // No drift: --quiet prints nothing on stdout (and says why on stderr).
    let up = ctl(
        &p.uploader,
        &["run", "upload", "--quiet", "--chain", "checkout", &run_a],
    )
    .await
    .expect(0);
    assert_eq!(up.stdout, "");
    assert!(up.stderr.contains("no draft"), "{up:?}");
    let up = ctl(
        &p.uploader,
        &["run", "upload", "--chain", "checkout", &run_a],
    )
    .await
    .expect(0);
    assert!(
        up.stdout
            .ends_with(&format!("\ndraft: none (no drift from {a})\n")),
        "{}",
        up.stdout
    );

    // diff both ways by alias.
    let diff = ctl(
        &p.uploader,
        &["baseline", "diff", "latest-draft", "--chain", "checkout"],
    )
    .await
    .expect(0);
    assert!(
        diff.stdout.starts_with(&format!("diff {a} → {c}\n")),
        "{diff:?}"
    );
    let diff = ctl(
        &p.uploader,
        &[
            "baseline",
            "diff",
            "current",
            "--chain",
            "checkout",
            "--against",
            "latest-draft",
        ],
    )
    .await
    .expect(0);
    assert!(
        diff.stdout.starts_with(&format!("diff {c} → {a}\n")),
        "{diff:?}"
    );

    // An id with another --chain is refused before anything is done.
    let wrong = ctl(
        &p.approver,
        &["baseline", "approve", &c, "--chain", "search"],
    )
    .await
    .expect(5);
    assert!(
        wrong.stderr.contains(&format!(
            "baseline {c} belongs to chain checkout, not search"
        )),
        "{wrong:?}"
    );
    let rejected = ctl(
        &p.approver,
        &[
            "baseline",
            "reject",
            "latest-draft",
            "--chain",
            "checkout",
            "--comment",
            "no",
        ],
    )
    .await
    .expect(0);
    assert!(
        rejected.stdout.starts_with(&format!("rejected {c} ")),
        "{rejected:?}"
    );
}

crate::on_both_backends!(aliases_and_plain_draft_ids);
