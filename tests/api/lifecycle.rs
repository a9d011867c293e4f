//! Approval workflow: four eyes, states, reject, rollback, recompute, audit.

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY};
use serde_json::{json, Value};

use crate::helpers::{draft_a, example, TestApp, ADMIN_TOKEN};

async fn setup_approved(app: &TestApp) -> (crate::helpers::People, String) {
    let p = app.people().await;
    let id = draft_a(app, &p).await;
    app.approve(&p.approver, &id).await.expect(200);
    (p, id)
}

async fn four_eyes(app: &TestApp) {
    // An admin uploads and tries to approve its own run.
    app.apply_topology(ADMIN_TOKEN, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let a = app
        .upload(ADMIN_TOKEN, "checkout", example(CHECKOUT_RUN_A))
        .await
        .expect(201)
        .json();
    let id = a["baseline_id"].as_str().unwrap();
    let refused = app.approve(ADMIN_TOKEN, id).await.expect(403);
    assert!(refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("four eyes"));
    // Someone else may.
    let other = app.token("approver", "carol").await;
    app.approve(&other, id).await.expect(200);
    // An uploader may not approve at all.
    let up = app.token("uploader", "dave").await;
    app.approve(&up, id).await.expect(403);
}

async fn states_reject_and_conflicts(app: &TestApp) {
    let (p, a_id) = setup_approved(app).await;
    // Approving a non-draft: 409.
    assert_eq!(
        app.approve(&p.approver, &a_id).await.expect(409).code(),
        "conflict"
    );
    let c = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    let c_id = c["baseline_id"].as_str().unwrap().to_owned();
    // Rejecting needs a comment.
    let path = format!("/api/v1/baselines/{c_id}/reject");
    app.post(&path, &p.approver, json!({})).await.expect(422);
    let r = app
        .post(
            &path,
            &p.approver,
            json!({"comment": "payment gateway was degraded during the test"}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(r["baseline"]["state"], "rejected");
    assert_eq!(r["baseline"]["decision"]["by"], "abe");
    app.approve(&p.approver, &c_id).await.expect(409);
    app.post(&path, &p.approver, json!({"comment": "again"}))
        .await
        .expect(409);

    let list = app
        .get(
            "/api/v1/chains/checkout/baselines?state=rejected",
            &p.uploader,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(list["baselines"].as_array().unwrap().len(), 1);
    assert_eq!(list["baselines"][0]["id"], c_id.as_str());
    app.get("/api/v1/chains/checkout/baselines?state=bogus", &p.uploader)
        .await
        .expect(400);
    // The approved one is still live.
    assert_eq!(
        app.get("/api/v1/chains/checkout/budgets", &p.uploader)
            .await
            .json()["baseline_id"],
        a_id.as_str()
    );
}

async fn rollback_and_supersede(app: &TestApp) {
    let (p, a_id) = setup_approved(app).await;
    let c = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    let c_id = c["baseline_id"].as_str().unwrap().to_owned();
    let approved = app.approve(&p.approver, &c_id).await.expect(200).json();
    let rev_c = approved["revision"].as_i64().unwrap();
    assert_eq!(approved["superseded"], a_id.as_str());
    assert_eq!(app.baseline(&a_id).await["state"], "superseded");

    let rb = app
        .post(
            "/api/v1/chains/checkout/rollback",
            &p.approver,
            json!({"baseline_id": a_id}),
        )
        .await
        .expect(200)
        .json();
    let rev_rb = rb["revision"].as_i64().unwrap();
    assert!(
        rev_rb > rev_c,
        "revisions strictly increase: {rev_rb} > {rev_c}"
    );
    assert_eq!(rb["superseded"], c_id.as_str());
    let live = app
        .get("/api/v1/chains/checkout/budgets", &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (live["baseline_id"].as_str(), live["revision"].as_i64()),
        (Some(a_id.as_str()), Some(rev_rb))
    );
    assert_eq!(live["segments"][2]["timeout_ms"], 390);
    assert_eq!(app.baseline(&c_id).await["state"], "superseded");
    // Rolling back to the current one, a draft or an unknown one.
    app.post(
        "/api/v1/chains/checkout/rollback",
        &p.approver,
        json!({"baseline_id": a_id}),
    )
    .await
    .expect(409);
    app.post(
        "/api/v1/chains/checkout/rollback",
        &p.approver,
        json!({"baseline_id": "bl-20000101-001"}),
    )
    .await
    .expect(404);
    app.post(
        "/api/v1/chains/checkout/rollback",
        &p.uploader,
        json!({"baseline_id": c_id}),
    )
    .await
    .expect(403);

    let chains = app
        .get("/api/v1/chains", &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(chains["chains"][0]["current_baseline"], a_id.as_str());
    assert_eq!(chains["chains"][0]["revision"], rev_rb);

    let audit = app
        .get("/api/v1/audit?chain=checkout&limit=50", &p.uploader)
        .await
        .expect(200)
        .json();
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions[0], "chain.rollback");
    for action in ["baseline.approve", "run.upload", "topology.put"] {
        assert!(actions.contains(&action), "{actions:?}");
    }
}

async fn recompute_and_topology_versions(app: &TestApp) {
    let (p, _) = setup_approved(app).await;
    // Same topology again: same version, 200.
    let same = app
        .apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(200)
        .json();
    assert_eq!(same["version"], 1);
    let mut pinned: Value = example(CHECKOUT_TOPOLOGY);
    pinned["segments"][3]["pinned_timeout_ms"] = json!(50);
    let v2 = app
        .put("/api/v1/chains/checkout/topology", &p.uploader, pinned)
        .await
        .expect(201)
        .json();
    assert_eq!(v2["version"], 2);
    let runs = app
        .get("/api/v1/chains/checkout/runs", &p.uploader)
        .await
        .expect(200)
        .json();
    let run_id = runs["runs"][0]["id"].as_str().unwrap().to_owned();
    let doc = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &p.uploader,
            json!({"run_id": run_id}),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(doc["reason"], "recompute");
    assert_eq!(doc["topology_version"], 2);
    assert_eq!(doc["segments"][3]["timeout_ms"], 50);
    assert_eq!(doc["segments"][3]["rule"], "pinned");
    let old = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &p.uploader,
            json!({"run_id": run_id, "topology_version": 1}),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(old["segments"][3]["timeout_ms"], 9);
    app.post(
        "/api/v1/chains/checkout/baselines",
        &p.uploader,
        json!({"run_id": "run-20000101-001"}),
    )
    .await
    .expect(404);
    let t1 = app
        .get("/api/v1/chains/checkout/topology?version=1", &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(t1["topology"]["segments"][3].get("pinned_timeout_ms"), None);
}

crate::on_both_backends!(
    four_eyes,
    states_reject_and_conflicts,
    rollback_and_supersede,
    recompute_and_topology_versions
);
