//! `budgetd export` / `budgetd import`: a store built on SQLite, exported with the real binary,
//! imported into a fresh PostgreSQL and a fresh SQLite database, and served from there.

use std::process::Output;

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C};
use budgetd::store::{Export, EXPORT_FORMAT, EXPORT_TABLES};
use serde_json::{json, Value};

use crate::helpers::draft_a;
use crate::helpers::{
    example, settings_for, spawn_app, spawn_app_on, Backend, TestApp, TestDb, ADMIN_TOKEN,
};

fn budgetd(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_budgetd"))
        .args(args)
        .env_remove("BUDGETD_DATABASE_URL")
        .env_remove("BUDGETD_ADMIN_TOKEN")
        .output()
        .expect("budgetd runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What the source store answers, to compare the imported one with.
struct Seen {
    /// Baseline id, state, raw document bytes.
    baselines: Vec<(String, String, bytes::Bytes)>,
    runs: Value,
    budgets: Value,
    releases: Value,
    topology: bytes::Bytes,
}

async fn seen(app: &TestApp, ids: &[&str]) -> Seen {
    let mut baselines = Vec::new();
    for id in ids {
        let a = app
            .get(&format!("/api/v1/baselines/{id}"), ADMIN_TOKEN)
            .await
            .expect(200);
        let state = a.json()["state"].as_str().unwrap().to_owned();
        baselines.push(((*id).to_owned(), state, a.body));
    }
    Seen {
        baselines,
        runs: app
            .get("/api/v1/chains/checkout/runs", ADMIN_TOKEN)
            .await
            .expect(200)
            .json(),
        budgets: app
            .get("/api/v1/chains/checkout/budgets", ADMIN_TOKEN)
            .await
            .expect(200)
            .json(),
        releases: app
            .get("/api/v1/releases", ADMIN_TOKEN)
            .await
            .expect(200)
            .json(),
        topology: app
            .get("/api/v1/chains/checkout/topology", ADMIN_TOKEN)
            .await
            .expect(200)
            .body,
    }
}

fn release(baseline_id: &str, version: &str) -> Value {
    json!({"service": "order", "version": version, "baseline_id": baseline_id, "ticket": "CHG-7"})
}

/// `bl-20261130-004` → (`bl-20261130`, 4).
fn split_id(id: &str) -> (&str, u32) {
    let (prefix, n) = id.rsplit_once('-').unwrap();
    (prefix, n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_and_import_between_backends() {
    // A store with every kind of row: topology, runs, baselines in all four states,
    // publications, a release, tokens, agents' fleet rows are optional.
    let src = spawn_app(Backend::Sqlite).await.unwrap();
    let p = src.people().await;
    src.token("agent", "order-agent").await;
    let a_id = draft_a(&src, &p).await;
    src.approve(&p.approver, &a_id).await.expect(200);
    let upload = |run: &'static str| {
        let src = &src;
        let token = p.uploader.clone();
        async move {
            src.upload(&token, "checkout", example(run))
                .await
                .expect(201)
                .json()["baseline_id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let c_id = upload(CHECKOUT_RUN_C).await;
    src.approve(&p.approver, &c_id).await.expect(200);
    let d_id = upload(CHECKOUT_RUN_A).await;
    src.post(
        &format!("/api/v1/baselines/{d_id}/reject"),
        &p.approver,
        json!({"comment": "not this one"}),
    )
    .await
    .expect(200);
    // The last run carries inventory's histogram (the seed's incident): exported with it.
    let e_id = upload(include_str!(
        "../../schemas/examples/checkout-run-seed.json"
    ))
    .await;
    let r1 = src
        .post("/api/v1/releases", &p.uploader, release(&c_id, "1.0.0"))
        .await
        .expect(201)
        .json();
    let ids = [a_id.as_str(), c_id.as_str(), d_id.as_str(), e_id.as_str()];
    let before = seen(&src, &ids).await;
    let states: Vec<&str> = before.baselines.iter().map(|b| b.1.as_str()).collect();
    assert_eq!(states, ["superseded", "approved", "rejected", "draft"]);
    let revision = before.budgets["revision"].as_i64().unwrap();

    // Export with the real binary, while the server runs.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("budgetd-export.json");
    let file_s = file.to_str().unwrap();
    let out = budgetd(&["export", "--database-url", &src.db_url, "--output", file_s]);
    assert!(out.status.success(), "export failed: {}", stderr(&out));
    assert!(
        stderr(&out).contains("budgetd: exported baselines: 4 row(s)"),
        "progress on stderr: {}",
        stderr(&out)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        !text.contains(ADMIN_TOKEN),
        "token secrets are never exported"
    );
    assert!(
        !text.contains(&p.uploader),
        "token secrets are never exported"
    );
    let export: Export = serde_json::from_str(&text).unwrap();
    assert_eq!(export.format, EXPORT_FORMAT);
    assert_eq!(export.backend, "sqlite");
    assert!(export.schema_version >= 4, "{}", export.schema_version);
    let names: Vec<&str> = export.tables.keys().map(String::as_str).collect();
    let mut expected: Vec<&str> = EXPORT_TABLES.iter().map(|t| t.name).collect();
    expected.sort_unstable();
    assert_eq!(names, expected);
    assert!(!export.tables.contains_key("idempotency_keys"));
    assert_eq!(export.tables["baselines"].rows.len(), 4);
    assert_eq!(export.tables["runs"].rows.len(), 4);
    assert_eq!(export.tables["publications"].rows.len(), 2);
    assert_eq!(export.tables["releases"].rows.len(), 1);
    let tokens = &export.tables["api_tokens"];
    assert_eq!(tokens.rows.len(), 4, "admin, uma, abe, order-agent");
    assert!(tokens.columns.iter().any(|c| c == "token_hash"));
    src.stop().await;

    for backend in [Backend::Postgres, Backend::Sqlite] {
        let Some(db) = TestDb::new(backend).await else {
            continue;
        };
        let out = budgetd(&["import", "--input", file_s, "--database-url", &db.url]);
        assert!(
            out.status.success(),
            "{backend:?} import failed: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("budgetd: imported baselines: 4 row(s)"),
            "{}",
            stderr(&out)
        );
        // A second import into the now non-empty store is refused, and changes nothing.
        let again = budgetd(&["import", "--input", file_s, "--database-url", &db.url]);
        assert!(
            !again.status.success(),
            "{backend:?}: second import succeeded"
        );
        assert!(
            stderr(&again).contains("not empty"),
            "{backend:?}: {}",
            stderr(&again)
        );
        // Exported again from the imported store: the same rows, whatever the backend.
        let file2 = dir.path().join(format!("again-{backend:?}.json"));
        let out = budgetd(&[
            "export",
            "--database-url",
            &db.url,
            "--output",
            file2.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{backend:?}: {}", stderr(&out));
        let again: Export =
            serde_json::from_str(&std::fs::read_to_string(&file2).unwrap()).unwrap();
        assert_eq!(again.tables, export.tables, "{backend:?} round trip");
        assert_eq!(again.schema_version, export.schema_version);
        check_imported(db, &before, &p.uploader, &p.approver, revision, &e_id, &r1).await;
    }
}

async fn check_imported(
    db: TestDb,
    before: &Seen,
    uploader: &str,
    approver: &str,
    revision: i64,
    last_id: &str,
    r1: &Value,
) {
    let app = spawn_app_on(db, settings_for).await;
    let ids: Vec<&str> = before.baselines.iter().map(|b| b.0.as_str()).collect();
    let after = seen(&app, &ids).await;
    for (b, a) in before.baselines.iter().zip(&after.baselines) {
        assert_eq!((&b.0, &b.1), (&a.0, &a.1), "same id and state");
        assert_eq!(b.2, a.2, "{}: the document bytes, byte for byte", b.0);
    }
    assert_eq!(before.runs, after.runs);
    assert_eq!(before.budgets, after.budgets);
    assert_eq!(before.releases, after.releases);
    assert_eq!(before.topology, after.topology);
    // The run's distributions came along: what-if answers from the imported histogram.
    let whatif = app
        .get(
            &format!("/api/v1/baselines/{last_id}/whatif?segment=order->inventory&timeout_ms=100"),
            ADMIN_TOKEN,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(whatif["kill_rate"].as_f64(), Some(0.25), "{whatif}");

    // The imported tokens work (hashes kept); new ids continue after the imported ones.
    let drift = app
        .upload(uploader, "checkout", example(CHECKOUT_RUN_A))
        .await
        .expect(201)
        .json();
    let new_id = drift["baseline_id"].as_str().unwrap().to_owned();
    let (prefix, n) = split_id(last_id);
    let (new_prefix, new_n) = split_id(&new_id);
    if prefix == new_prefix {
        assert_eq!(new_n, n + 1, "{new_id} follows {last_id}");
    }
    let run_ids: Vec<&str> = before.runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(
        !run_ids.contains(&drift["run_id"].as_str().unwrap()),
        "a new run id"
    );
    let approved = app.approve(approver, &new_id).await.expect(200).json();
    assert_eq!(approved["revision"].as_i64(), Some(revision + 1));
    // Identity columns continue too (PostgreSQL: the sequences were moved past the ids).
    let r2 = app
        .post("/api/v1/releases", uploader, release(&new_id, "1.1.0"))
        .await
        .expect(201)
        .json();
    assert_eq!(r2["id"].as_i64(), Some(r1["id"].as_i64().unwrap() + 1));
    let audit = app
        .get("/api/v1/audit?limit=1", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(audit["entries"][0]["action"], "release.record");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_refuses_a_non_empty_store_and_bad_documents() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let store = budgetd::store::connect(&db.url).await.unwrap();
    let mut buf = Vec::new();
    store.export_all(&mut buf, &|_, _| {}).await.unwrap();
    let mut export: Export = serde_json::from_slice(&buf).unwrap();
    assert!(export.tables.values().all(|t| t.rows.is_empty()));

    // A wrong value type names the table, row and column.
    let mut bad = export.clone();
    bad.tables.get_mut("counters").unwrap().rows = vec![vec![json!("bl-20260101"), json!("x")]];
    let e = store.import_all(&bad, &|_, _| {}).await.unwrap_err();
    assert!(e.to_string().contains("column \"n\""), "{e}");
    let mut newer = export.clone();
    newer.schema_version += 1;
    let e = store.import_all(&newer, &|_, _| {}).await.unwrap_err();
    assert!(e.to_string().contains("newer budgetd"), "{e}");

    // The canary tables came with schema version 11: an export from before imports without
    // them; one from after must hold them.
    let mut older = export.clone();
    older.tables.remove("rollouts");
    older.tables.remove("canary_nacks");
    let e = store.import_all(&older, &|_, _| {}).await.unwrap_err();
    assert!(
        e.to_string().contains("table \"rollouts\" is missing"),
        "{e}"
    );
    older.schema_version = 10;
    // Before schema version 13 a baseline's document was a column of its row.
    older.tables.remove("baseline_documents");
    let baselines = older.tables.get_mut("baselines").unwrap();
    baselines.columns.retain(|c| c != "document_behind");
    baselines.columns.push("document".into());
    let fresh = TestDb::new(Backend::Sqlite).await.unwrap();
    let other = budgetd::store::connect(&fresh.url).await.unwrap();
    let counts = other.import_all(&older, &|_, _| {}).await.unwrap();
    assert!(counts.contains(&("rollouts", 0)), "{counts:?}");

    export.tables.get_mut("counters").unwrap().rows = vec![vec![json!("publication"), json!(7)]];
    store.import_all(&export, &|_, _| {}).await.unwrap();
    let e = store.import_all(&export, &|_, _| {}).await.unwrap_err();
    assert!(e.to_string().contains("not empty"), "{e}");
}
