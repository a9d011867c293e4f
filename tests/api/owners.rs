//! People, not token names (SPEC §7, issue 10): tokens have owners, four eyes compares owners
//! whatever token is used (admin included), rotation keeps the owner, and approvals and
//! rollbacks record both token and owner in the audit log.

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY};
use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{example, TestApp, ADMIN_TOKEN};
use crate::releases::budgetctl;

/// Creates a token with an explicit owner; returns the whole answer.
async fn token_of(app: &TestApp, role: &str, name: &str, owner: &str) -> Value {
    app.post(
        "/api/v1/tokens",
        ADMIN_TOKEN,
        json!({"role": role, "name": name, "owner": owner}),
    )
    .await
    .expect(201)
    .json()
}

fn secret(v: &Value) -> String {
    v["token"].as_str().unwrap().to_owned()
}

async fn draft_of(app: &TestApp, token: &str, run: &str) -> String {
    app.upload(token, "checkout", example(run))
        .await
        .expect(201)
        .json()["baseline_id"]
        .as_str()
        .expect("the run opened a draft")
        .to_owned()
}

/// The newest audit entry with `action`.
async fn last_audit(app: &TestApp, action: &str) -> Value {
    let log = app
        .get("/api/v1/audit?chain=checkout&limit=100", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == action)
        .unwrap_or_else(|| panic!("no {action} entry in {log}"))
        .clone()
}

async fn four_eyes_compares_owners(app: &TestApp) {
    // Owners default to the name, are listed, and shown by whoami.
    let uma = app.token("uploader", "uma").await;
    let abe = app.token("approver", "abe").await;
    let me = app.get("/api/v1/whoami", &uma).await.expect(200).json();
    assert_eq!(
        (me["name"].as_str(), me["owner"].as_str()),
        (Some("uma"), Some("uma"))
    );
    let me = app
        .get("/api/v1/whoami", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(me["owner"], "admin", "the bootstrap admin token's owner");
    app.post(
        "/api/v1/tokens",
        ADMIN_TOKEN,
        json!({"role": "approver", "name": "x", "owner": "has space"}),
    )
    .await
    .expect(422);

    // uma's second token, an approver one: same owner, so it may not approve uma's upload.
    let uma_approves = token_of(app, "approver", "uma-approves", "uma").await;
    assert_eq!(uma_approves["owner"], "uma");
    let uma_approves = secret(&uma_approves);
    app.apply_topology(&uma, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let a_id = draft_of(app, &uma, CHECKOUT_RUN_A).await;
    let refused = app.approve(&uma_approves, &a_id).await.expect(403);
    assert!(refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("four eyes"));
    // The run records its uploader's owner.
    let run_id = app.baseline(&a_id).await["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = app
        .get(&format!("/api/v1/chains/checkout/runs/{run_id}"), &abe)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (
            run["uploaded_by"].as_str(),
            run["uploaded_by_owner"].as_str()
        ),
        (Some("uma"), Some("uma"))
    );

    // Rotated under a new name, the token is still uma's.
    let rotated = app
        .post(
            "/api/v1/tokens/uma-approves/rotate",
            ADMIN_TOKEN,
            json!({"name": "uma-approves-q4"}),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(
        (
            rotated["name"].as_str(),
            rotated["role"].as_str(),
            rotated["owner"].as_str()
        ),
        (Some("uma-approves-q4"), Some("approver"), Some("uma"))
    );
    app.approve(&secret(&rotated), &a_id).await.expect(403);
    app.post(
        "/api/v1/tokens/nobody/rotate",
        ADMIN_TOKEN,
        json!({"name": "nobody-2"}),
    )
    .await
    .expect(404);
    app.post("/api/v1/tokens/uma/rotate", &abe, json!({"name": "mine"}))
        .await
        .expect(403);

    // Another person approves: the audit log names token and owner.
    let approved = app.approve(&abe, &a_id).await.expect(200).json();
    assert!(approved["revision"].as_i64().is_some());
    let entry = last_audit(app, "baseline.approve").await;
    assert_eq!(entry["actor"], "abe");
    assert_eq!(
        (
            entry["detail"]["token"].as_str(),
            entry["detail"]["owner"].as_str()
        ),
        (Some("abe"), Some("abe"))
    );

    // Admin included: the admin's own second admin token may not approve the admin's upload.
    let root2 = secret(&token_of(app, "admin", "root-2", "admin").await);
    let c_id = draft_of(app, ADMIN_TOKEN, CHECKOUT_RUN_C).await;
    app.approve(ADMIN_TOKEN, &c_id).await.expect(403);
    app.approve(&root2, &c_id).await.expect(403);
    // A token of another owner may, and a rollback by it is recorded with its owner.
    let ann = secret(&token_of(app, "approver", "ann-laptop", "ann").await);
    app.approve(&ann, &c_id).await.expect(200);
    app.post(
        "/api/v1/chains/checkout/rollback",
        &ann,
        json!({"baseline_id": a_id}),
    )
    .await
    .expect(200);
    let entry = last_audit(app, "chain.rollback").await;
    assert_eq!(entry["actor"], "ann-laptop");
    assert_eq!(
        (
            entry["detail"]["token"].as_str(),
            entry["detail"]["owner"].as_str()
        ),
        (Some("ann-laptop"), Some("ann"))
    );

    // Listed with owners, never secrets.
    let list = app
        .get("/api/v1/tokens", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    let owner_of = |name: &str| {
        list["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["owner"].as_str().unwrap().to_owned())
    };
    assert_eq!(owner_of("uma-approves-q4").as_deref(), Some("uma"));
    assert_eq!(owner_of("abe").as_deref(), Some("abe"));
    app.send(
        Method::DELETE,
        "/api/v1/tokens/uma-approves",
        ADMIN_TOKEN,
        None,
    )
    .await
    .expect(204);

    // budgetctl: token create --owner and token rotate.
    let made = budgetctl(
        app,
        ADMIN_TOKEN,
        &[
            "token", "create", "--role", "approver", "--name", "uma-cli", "--owner", "uma",
            "--json",
        ],
    )
    .await
    .expect(0)
    .json();
    assert_eq!(made["owner"], "uma");
    let rotated = budgetctl(
        app,
        ADMIN_TOKEN,
        &["token", "rotate", "uma-cli", "--new-name", "uma-cli-2"],
    )
    .await
    .expect(0);
    let cli_secret = rotated.stdout.trim().to_owned();
    assert!(cli_secret.starts_with("bgt_"), "{rotated:?}");
    // A draft recomputed from uma's run is still uma's upload.
    let d = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &uma,
            json!({"run_id": run_id}),
        )
        .await
        .expect(201)
        .json();
    app.approve(&cli_secret, d["id"].as_str().unwrap())
        .await
        .expect(403);
    let listed = budgetctl(app, ADMIN_TOKEN, &["token", "list"])
        .await
        .expect(0);
    assert!(listed.stdout.contains("owner"), "{listed:?}");
}

crate::on_both_backends!(four_eyes_compares_owners);
