//! What a reviewer is told before acting (the console shows it): whether they may approve a
//! baseline and every reason not (`GET /baselines/{id}/approval`), the draft each run opened
//! (`GET /chains/{chain}/runs`), and how the live baseline became live (`GET
//! /baselines/{id}/rollout`: on approval, or by a rollback).

use budget_core::example::CHECKOUT_RUN_C;
use serde_json::{json, Value};

use crate::helpers::{draft_a, example, TestApp, ADMIN_TOKEN};

async fn approval(app: &TestApp, token: &str, id: &str) -> Value {
    app.get(&format!("/api/v1/baselines/{id}/approval"), token)
        .await
        .expect(200)
        .json()
}

async fn runs_of(app: &TestApp, token: &str) -> Value {
    app.get("/api/v1/chains/checkout/runs", token)
        .await
        .expect(200)
        .json()
}

fn codes(check: &Value) -> Vec<String> {
    check["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["code"].as_str().unwrap().to_owned())
        .collect()
}

async fn a_reviewer_is_told_before_acting(app: &TestApp) {
    let p = app.people().await;
    let reader = app.token("reader", "rita").await;
    let a = draft_a(app, &p).await;

    // The run's uploader may not (four eyes), whatever their role; the approver may.
    let own = approval(app, &p.uploader, &a).await;
    assert_eq!(
        (&own["may_approve"], &own["newest_baseline"]),
        (&json!(false), &json!(a))
    );
    assert_eq!(codes(&own), ["four_eyes"]);
    assert!(own["blockers"][0]["message"]
        .as_str()
        .unwrap()
        .contains("four eyes"));
    let other = approval(app, &p.approver, &a).await;
    assert_eq!(
        (&other["may_approve"], codes(&other).len()),
        (&json!(true), 0)
    );
    assert_eq!(approval(app, &reader, &a).await["may_approve"], true);
    app.get("/api/v1/baselines/bl-20000101-999/approval", &reader)
        .await
        .expect(404);

    // Every run names the draft its upload opened, with its state now.
    let runs = runs_of(app, &reader).await;
    assert_eq!(
        (
            &runs["runs"][0]["draft_id"],
            &runs["runs"][0]["draft_state"]
        ),
        (&json!(a), &json!("draft"))
    );

    // Approved: no longer approvable; its rollout says it went live on approval.
    app.approve(&p.approver, &a).await.expect(200);
    assert_eq!(codes(&approval(app, &p.approver, &a).await), ["not_draft"]);
    let rollout = app
        .get(&format!("/api/v1/baselines/{a}/rollout"), &reader)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (&rollout["kind"], &rollout["published_by"]),
        (&json!("approve"), &json!("abe"))
    );

    // A drift draft, then a recompute superseding it: the reasons follow.
    let c = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json()["baseline_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run_c = app.baseline(&c).await["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let runs = runs_of(app, &reader).await;
    assert_eq!(runs["runs"][0]["draft_id"], c.as_str());
    assert_eq!(runs["runs"][1]["draft_state"], "approved");
    let newer = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &p.uploader,
            json!({ "run_id": run_c }),
        )
        .await
        .expect(201)
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let replaced = approval(app, &p.approver, &c).await;
    assert_eq!(codes(&replaced), ["superseded"]);
    assert!(replaced["blockers"][0]["message"]
        .as_str()
        .unwrap()
        .contains(&newer));
    // The recompute is no draft the run's upload opened: the run still names c, superseded.
    let runs = runs_of(app, &reader).await;
    assert_eq!(
        (
            &runs["runs"][0]["draft_id"],
            &runs["runs"][0]["draft_state"]
        ),
        (&json!(c), &json!("superseded"))
    );

    // Approve the newer one, roll back to a: live again by a rollback, when and by whom.
    app.approve(&p.approver, &newer).await.expect(200);
    app.post(
        "/api/v1/chains/checkout/rollback",
        &p.approver,
        json!({ "baseline_id": a }),
    )
    .await
    .expect(200);
    let rollout = app
        .get(&format!("/api/v1/baselines/{a}/rollout"), ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (&rollout["kind"], &rollout["published_by"]),
        (&json!("rollback"), &json!("abe"))
    );
    assert!(rollout["published_at"].is_string());
}

crate::on_both_backends!(a_reviewer_is_told_before_acting);
