//! `?dry_run=true` and `budgetctl run upload --dry-run`: an upload read, mapped and computed as
//! usual — the label mapping, the segments, the comparison and the draft it would open with its
//! budgets and findings — that stores nothing: no run, no draft, no archive item, no audit
//! entry, no `Idempotency-Key` record.

use std::path::Path;

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
use serde_json::Value;

use crate::helpers::{example, Answer, TestApp, ADMIN_TOKEN};
use crate::releases::budgetctl;

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path.display().to_string());
        }
    }
    out
}

/// What the store holds for `checkout`: runs, baselines, audit entries of uploads, archive files.
async fn stored(app: &TestApp) -> (usize, usize, usize, usize) {
    let get =
        |path: &'static str| async move { app.get(path, ADMIN_TOKEN).await.expect(200).json() };
    let runs = get("/api/v1/chains/checkout/runs").await;
    let baselines = get("/api/v1/chains/checkout/baselines").await;
    let audit = get("/api/v1/audit?chain=checkout&limit=1000").await;
    let uploads = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "run.upload" || e["action"] == "baseline.recompute")
        .count();
    (
        runs["runs"].as_array().unwrap().len(),
        baselines["baselines"].as_array().unwrap().len(),
        uploads,
        files_under(app.archive_dir.path()).len(),
    )
}

fn segment<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no segment {id} in {doc}"))
}

/// Run A uploaded with `query` under the `Idempotency-Key` `run-a`.
async fn run_a_with_key(app: &TestApp, token: &str, query: &str) -> Answer {
    let url = app.url(&format!("/api/v1/chains/checkout/runs{query}"));
    let req = app.http.post(&url).bearer_auth(token);
    app.raw(
        req.header("Idempotency-Key", "run-a")
            .json(&example(CHECKOUT_RUN_A)),
    )
    .await
}

async fn a_dry_run_stores_nothing(app: &TestApp) {
    let p = app.people().await;
    app.apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    assert_eq!(stored(app).await, (0, 0, 0, 0));

    // Run A as a dry run, under an Idempotency-Key: what the first run would open.
    let dry = run_a_with_key(app, &p.uploader, "?dry_run=true")
        .await
        .expect(200)
        .json();
    assert_eq!(
        (
            &dry["dry_run"],
            &dry["run_id"],
            &dry["baseline_id"],
            &dry["reason"]
        ),
        (
            &Value::Bool(true),
            &Value::from(""),
            &Value::Null,
            &Value::from("first_run")
        )
    );
    let preview = &dry["preview"];
    assert_eq!(preview["state"], "draft");
    for (id, timeout, budget) in [
        ("order->inventory", 44, 208),
        ("order->payment", 390, 390),
        ("order->user", 9, 9),
    ] {
        let s = segment(preview, id);
        assert_eq!(
            (s["timeout_ms"].as_u64(), s["budget_ms"].as_u64()),
            (Some(timeout), Some(budget))
        );
    }
    assert_eq!(dry["findings"], preview["findings"]);
    assert_eq!(dry["segments"].as_array().unwrap().len(), 4);

    // Nothing was stored: no run, no draft, no audit entry, no archive object.
    assert_eq!(stored(app).await, (0, 0, 0, 0));
    let chains = app
        .get("/api/v1/chains", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (&chains["chains"][0]["runs"], &chains["chains"][0]["drafts"]),
        (&0.into(), &0.into())
    );

    // Nor was the key: the real upload under it runs afresh, and is still the chain's first run.
    let real = run_a_with_key(app, &p.uploader, "").await.expect(201);
    assert!(real.headers.get("idempotent-replayed").is_none());
    let real = real.json();
    assert_eq!(real["reason"], "first_run");
    assert!(
        real.get("dry_run").is_none() && real.get("preview").is_none(),
        "{real}"
    );
    let draft = real["baseline_id"].as_str().unwrap().to_owned();
    let (runs, baselines, uploads, _) = stored(app).await;
    assert_eq!((runs, baselines, uploads), (1, 1, 1));

    // A load-tool file through budgetctl: the label mapping, the segments, the draft it would
    // open, and still nothing stored.
    let csv = format!(
        "{}/tests/fixtures/locust/shop_stats.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = budgetctl(
        app,
        &p.uploader,
        &[
            "run",
            "upload",
            "--dry-run",
            "--chain",
            "checkout",
            "--format",
            "locust",
            "--map",
            "inventory=order->inventory",
            "--map",
            "payment=order->payment",
            "--map",
            "user=order->user",
            &csv,
        ],
    )
    .await
    .expect(0);
    for expect in [
        "dry run:       nothing stored (no run, no draft)\n",
        "  inventory → order->inventory\n",
        "  ignored: Aggregated\n",
        "would open a draft (reason: no_approved_baseline) holding:\n",
        // The fixture's payment failed 18 of 419 requests: the draft would say so.
        "│ warning  ┆ failure_rate ┆ order->payment ┆",
    ] {
        assert!(
            out.stdout.contains(expect),
            "{expect:?} missing from:\n{}",
            out.stdout
        );
    }
    assert!(
        out.stdout.contains(
            "│ order->payment   ┆ volatile ┆ p999_plus30 ┆     419 ┆       18 ┆  68 ┆   81 ┆     106 ┆    106 ┆"
        ),
        "{}",
        out.stdout
    );
    let (runs, baselines, uploads, _) = stored(app).await;
    assert_eq!((runs, baselines, uploads), (1, 1, 1));

    // A dry run on the inverted topology (example B) shows the error the draft would have.
    app.apply_topology(
        &p.uploader,
        "checkout",
        include_str!("../../schemas/examples/checkout-topology-b-inverted.json"),
    )
    .await
    .expect(201);
    let run_a = format!(
        "{}/schemas/examples/checkout-run-a.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = budgetctl(
        app,
        &p.uploader,
        &["run", "upload", "--dry-run", "--chain", "checkout", &run_a],
    )
    .await
    .expect(0);
    assert!(
        out.stdout
            .contains("findings: 1, 1 error(s): cannot be approved")
            && out
                .stdout
                .contains("┆ inversion ┆ gateway->order ┆ children of gateway->order need 909 ms"),
        "{}",
        out.stdout
    );
    let (runs, baselines, uploads, _) = stored(app).await;
    assert_eq!((runs, baselines, uploads), (1, 1, 1));
    assert_eq!(
        app.baseline(&draft).await["state"],
        "draft",
        "nothing superseded it"
    );

    // A bad dry run is refused as the upload would be, and stores nothing either.
    let url = app.url("/api/v1/chains/checkout/runs?dry_run=maybe");
    let bad = app
        .raw(
            app.http
                .post(&url)
                .bearer_auth(&p.uploader)
                .json(&example(CHECKOUT_RUN_A)),
        )
        .await
        .expect(400);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("dry_run=\"maybe\" must be true or false"));
}

crate::on_both_backends!(a_dry_run_stores_nothing);
