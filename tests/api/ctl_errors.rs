//! budgetctl's errors speak its own language: flags (`--format`, `--unit`), not query
//! parameters, and readable lines, not raw `details` JSON; a mistyped chain is said not to exist,
//! with the nearest known chains (which the server's 404 carries in its details).

use budget_core::example::CHECKOUT_TOPOLOGY;
use serde_json::json;

use crate::helpers::TestApp;
use crate::releases::{budgetctl, Ctl};

/// What no failure shown to a budgetctl user holds: HTTP words and raw JSON.
#[track_caller]
fn speaks_budgetctl(ctl: &Ctl) {
    for http in ["HTTP", "?format", "?unit", "?map", "details:", "{\""] {
        assert!(!ctl.stderr.contains(http), "{http:?} in {}", ctl.stderr);
    }
}

async fn errors_speak_in_flags_and_name_the_nearest_chains(app: &TestApp) {
    let p = app.people().await;
    for chain in ["checkout", "checkout-eu", "search"] {
        app.apply_topology(&p.uploader, chain, CHECKOUT_TOPOLOGY)
            .await
            .expect(201);
    }

    // The API: a 404 whose details carry the nearest known names.
    let answer = app
        .get("/api/v1/chains/chekout/budgets", &p.uploader)
        .await
        .expect(404);
    let error = &answer.json()["error"];
    assert_eq!(error["message"], "chain \"chekout\" does not exist");
    assert_eq!(
        error["details"],
        json!({"chain": "chekout", "nearest": ["checkout"]})
    );
    // A chain that exists but has nothing live says that instead.
    let answer = app
        .get("/api/v1/chains/checkout/budgets", &p.uploader)
        .await
        .expect(404);
    assert!(answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("has no published budgets yet"));

    // budgetctl: it does not exist, and these are the chains meant.
    let shown = budgetctl(app, &p.uploader, &["budgets", "show", "chekout"])
        .await
        .expect(3);
    assert_eq!(
        shown.stderr,
        "error: chain \"chekout\" does not exist (not_found)\n  known chains nearest to \"chekout\": checkout\n"
    );
    speaks_budgetctl(&shown);
    for args in [
        &["run", "list", "--chain", "checkout-us"][..],
        &["baseline", "list", "--chain", "checkout-us"],
        &["topology", "show", "checkout-us"],
        &["production", "--chain", "checkout-us"],
    ] {
        let ctl = budgetctl(app, &p.uploader, args).await.expect(3);
        assert!(
            ctl.stderr
                .starts_with("error: chain \"checkout-us\" does not exist")
                && ctl
                    .stderr
                    .contains("known chains nearest to \"checkout-us\": checkout-eu, checkout\n"),
            "{args:?}: {}",
            ctl.stderr
        );
        speaks_budgetctl(&ctl);
    }
    let far = budgetctl(app, &p.uploader, &["run", "list", "--chain", "inventory"])
        .await
        .expect(3);
    assert!(
        far.stderr
            .contains("no known chain is named like it; `budgetctl chains` lists them"),
        "{}",
        far.stderr
    );

    // Uploads: the flag to pass, not the query parameter.
    let dir = tempfile::tempdir().unwrap();
    let upload = |flags: &'static [&'static str], file: String| {
        let uploader = p.uploader.clone();
        async move {
            let mut args = vec!["run", "upload", "--chain", "checkout"];
            args.extend_from_slice(flags);
            args.push(&file);
            budgetctl(app, &uploader, &args).await.expect(4)
        }
    };
    let unknown = dir.path().join("results.txt");
    std::fs::write(&unknown, "these are not load-test results\n").unwrap();
    let ctl = upload(&[], unknown.display().to_string()).await;
    assert!(ctl.stderr.contains("--format locust|"), "{}", ctl.stderr);
    speaks_budgetctl(&ctl);
    let hlog = format!(
        "{}/tests/fixtures/hdrhistogram/tagged.hlog",
        env!("CARGO_MANIFEST_DIR")
    );
    let ctl = upload(&["--format", "hdrhistogram"], hlog).await;
    assert!(ctl.stderr.contains("--unit ns|us|ms|s"), "{}", ctl.stderr);
    speaks_budgetctl(&ctl);

    // A malformed file: where, in lines of their own.
    let broken = dir.path().join("broken_stats.csv");
    std::fs::write(
        &broken,
        "Type,Name,Request Count,Failure Count,99%,99.9%\nGET,inventory,ten,0,9,10\n",
    )
    .unwrap();
    let ctl = upload(&["--format", "locust"], broken.display().to_string()).await;
    assert!(ctl.stderr.starts_with("error: "), "{}", ctl.stderr);
    assert!(ctl.stderr.lines().count() >= 2, "{}", ctl.stderr);
    speaks_budgetctl(&ctl);
}

crate::on_both_backends!(errors_speak_in_flags_and_name_the_nearest_chains);
