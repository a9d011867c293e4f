//! `Idempotency-Key`: same key and body → the first response byte for byte; other body → 409.
//! Seed: "同键重复提交 100 次结果唯一".

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
use serde_json::json;

use crate::helpers::{example, TestApp};

async fn hundred_concurrent_uploads_make_one_run(app: &TestApp) {
    let p = app.people().await;
    app.apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let body = serde_json::to_vec(&example(CHECKOUT_RUN_A)).unwrap();
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (http, url, token, body) = (
            app.http.clone(),
            app.url("/api/v1/chains/checkout/runs"),
            p.uploader.clone(),
            body.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let resp = http
                .post(url)
                .bearer_auth(token)
                .header("content-type", "application/json")
                .header("idempotency-key", "upload-2026-11-30-a")
                .body(body)
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.bytes().await.unwrap())
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let first = answers[0].clone();
    assert_eq!(first.0, 201, "{}", String::from_utf8_lossy(&first.1));
    for a in &answers {
        assert_eq!(a, &first, "every answer is the first one, byte for byte");
    }
    let runs = app
        .get("/api/v1/chains/checkout/runs", &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "exactly one run");
    let drafts = app
        .get("/api/v1/chains/checkout/baselines", &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(
        drafts["baselines"].as_array().unwrap().len(),
        1,
        "exactly one draft"
    );

    // Same key, other body: 409. Same key, other token: its own scope.
    let mut other = example(CHECKOUT_RUN_A);
    other["segments"][1]["p99_ms"] = json!(41);
    let resp = app
        .raw(
            app.http
                .post(app.url("/api/v1/chains/checkout/runs"))
                .bearer_auth(&p.uploader)
                .header("idempotency-key", "upload-2026-11-30-a")
                .json(&other),
        )
        .await
        .expect(409);
    assert_eq!(resp.code(), "conflict");
    // A replay says so.
    let replay = app
        .raw(
            app.http
                .post(app.url("/api/v1/chains/checkout/runs"))
                .bearer_auth(&p.uploader)
                .header("idempotency-key", "upload-2026-11-30-a")
                .header("content-type", "application/json")
                .body(body.clone()),
        )
        .await
        .expect(201);
    assert_eq!(replay.headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(replay.body, first.1);
    // Errors are replayed too; approvals with a key approve once.
    let id = first.1.clone();
    let id: serde_json::Value = serde_json::from_slice(&id).unwrap();
    let id = id["baseline_id"].as_str().unwrap();
    let approve = |key: &'static str| {
        app.http
            .post(app.url(&format!("/api/v1/baselines/{id}/approve")))
            .bearer_auth(&p.approver)
            .header("idempotency-key", key)
            .json(&json!({"comment": "ok"}))
    };
    let a1 = app.raw(approve("approve-1")).await.expect(200);
    let a2 = app.raw(approve("approve-1")).await.expect(200);
    assert_eq!(a1.body, a2.body);
    app.raw(approve("approve-2")).await.expect(409);
    app.raw(
        app.http
            .post(app.url("/api/v1/chains/checkout/runs"))
            .bearer_auth(&p.uploader)
            .header("idempotency-key", "")
            .json(&other),
    )
    .await
    .expect(400);
}

/// Forgets every kept response, as when a request died between its commit and its answer.
async fn lose_responses(app: &TestApp) {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&app.db_url).await.unwrap();
    sqlx::query("UPDATE idempotency_keys SET status = NULL, content_type = NULL, body = NULL")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

/// A key whose request committed but whose answer was lost is not stuck: a repeat answers
/// the committed result (same run, same draft, same revision) and writes nothing again.
async fn a_lost_answer_is_answered_from_the_commit(app: &TestApp) {
    let p = app.people().await;
    app.apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let upload = || {
        app.http
            .post(app.url("/api/v1/chains/checkout/runs"))
            .bearer_auth(&p.uploader)
            .header("idempotency-key", "lost-upload")
            .json(&example(CHECKOUT_RUN_A))
    };
    let first = app.raw(upload()).await.expect(201).json();
    lose_responses(app).await;
    let again = app.raw(upload()).await.expect(201).json();
    assert_eq!(again["run_id"], first["run_id"]);
    assert_eq!(again["baseline_id"], first["baseline_id"]);
    let runs = app
        .get("/api/v1/chains/checkout/runs", &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "one run");

    let id = first["baseline_id"].as_str().unwrap();
    let approve = || {
        app.http
            .post(app.url(&format!("/api/v1/baselines/{id}/approve")))
            .bearer_auth(&p.approver)
            .header("idempotency-key", "lost-approve")
            .json(&json!({"comment": "ok"}))
    };
    let first = app.raw(approve()).await.expect(200).json();
    lose_responses(app).await;
    let again = app.raw(approve()).await.expect(200).json();
    assert_eq!(again["revision"], first["revision"]);
    assert_eq!(again["baseline"]["state"], "approved");
    let live = app
        .get("/api/v1/chains/checkout/budgets", &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(live["revision"], first["revision"], "published once");
}

crate::on_both_backends!(
    hundred_concurrent_uploads_make_one_run,
    a_lost_answer_is_answered_from_the_commit,
    a_token_secret_is_never_kept_for_repeats,
    keyed_writes_at_once_all_commit
);

/// A token creation with a key: the secret is answered once and kept nowhere — not in the
/// idempotency record — and a repeat says so instead of inventing another secret.
async fn a_token_secret_is_never_kept_for_repeats(app: &TestApp) {
    let create = || {
        app.http
            .post(app.url("/api/v1/tokens"))
            .bearer_auth(crate::helpers::ADMIN_TOKEN)
            .header("idempotency-key", "new-reader")
            .json(&json!({"name": "rita", "role": "reader"}))
    };
    let first = app.raw(create()).await.expect(201).json();
    let secret = first["token"].as_str().unwrap().to_owned();
    let again = app.raw(create()).await.expect(200).json();
    assert_eq!(again["name"], "rita");
    assert!(again["token"].is_null(), "{again}");

    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&app.db_url).await.unwrap();
    let rows: Vec<(Option<String>, Option<String>)> =
        sqlx::query_as("SELECT body, result FROM idempotency_keys")
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    assert!(!rows.is_empty(), "the creation was recorded under its key");
    for (body, result) in rows {
        let stored = format!("{body:?} {result:?}");
        assert!(!stored.contains(&secret), "a secret was stored: {stored}");
    }
    // The one secret works.
    app.get("/api/v1/chains", &secret).await.expect(200);
}

/// Forty token creations at once, each under its own key: every one commits. A keyed write
/// reads its key's record before it writes; on SQLite a transaction that read first used to
/// fail (500) when another connection committed in between.
async fn keyed_writes_at_once_all_commit(app: &TestApp) {
    let mut tasks = Vec::new();
    for i in 0..40 {
        let (http, url) = (app.http.clone(), app.url("/api/v1/tokens"));
        tasks.push(tokio::spawn(async move {
            let resp = http
                .post(url)
                .bearer_auth(crate::helpers::ADMIN_TOKEN)
                .header("idempotency-key", format!("reader-{i}"))
                .json(&json!({"name": format!("reader-{i}"), "role": "reader"}))
                .send()
                .await
                .unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }));
    }
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, 201, "{body}");
    }
}
