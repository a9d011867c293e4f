//! Drafts supersede each other: a new draft of a chain replaces the chain's older pending drafts
//! (state `superseded`, linked to the newer one, no longer approvable), and an approval checks
//! in its transaction that the draft is the chain's newest baseline — also when two replicas
//! write one chain at the same moment.

use std::time::{Duration, Instant};

use budget_core::baseline::{BaselineDocument, BaselineState};
use budget_core::example::CHECKOUT_RUN_C;
use serde_json::{json, Value};
use sha2::Digest;

use crate::helpers::{draft_a, example, spawn_replica, Answer, People, TestApp, ADMIN_TOKEN};
use crate::releases::budgetctl;

/// `POST /chains/checkout/baselines {"run_id"}` as `token`.
async fn recompute(app: &TestApp, token: &str, run_id: &str) -> Answer {
    app.post(
        "/api/v1/chains/checkout/baselines",
        token,
        json!({ "run_id": run_id }),
    )
    .await
}

fn id_of(answer: Answer) -> String {
    answer.expect(201).json()["id"].as_str().unwrap().to_owned()
}

fn message(answer: &Answer) -> String {
    answer.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The chain's baselines of `state` (a summary each).
async fn of_state(app: &TestApp, state: &str) -> Vec<Value> {
    let path = format!("/api/v1/chains/checkout/baselines?state={state}&limit=1000");
    let list = app.get(&path, ADMIN_TOKEN).await.expect(200).json();
    list["baselines"].as_array().unwrap().clone()
}

/// Waits until the archived object of `id` holds the document as served now.
async fn archived_as_served(app: &TestApp, id: &str) {
    let served = app
        .get(&format!("/api/v1/baselines/{id}"), ADMIN_TOKEN)
        .await
        .expect(200);
    let sha = hex::encode(sha2::Sha256::digest(&served.body));
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = app
            .get(&format!("/api/v1/baselines/{id}/archive"), ADMIN_TOKEN)
            .await
            .expect(200)
            .json();
        if status["state"] == "archived" && status["sha256"] == sha.as_str() {
            return;
        }
        assert!(Instant::now() < deadline, "{id} not re-archived: {status}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run A's draft (the chain's first), then a recompute of run A: `(first, second)`.
async fn two_drafts(app: &TestApp, p: &People) -> (String, String) {
    let first = draft_a(app, p).await;
    let run_a = app.baseline(&first).await["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = id_of(recompute(app, &p.uploader, &run_a).await);
    (first, second)
}

async fn a_new_draft_supersedes_the_older_pending_ones(app: &TestApp) {
    let p = app.people().await;
    let (d1, d2) = two_drafts(app, &p).await;

    // d1 left review: superseded by d2, never decided, its document re-rendered and archived.
    let doc1 = app.baseline(&d1).await;
    assert_eq!(doc1["state"], "superseded");
    assert_eq!(doc1["superseded_by"], d2.as_str());
    assert!(doc1.get("decision").is_none(), "{doc1}");
    archived_as_served(app, &d1).await;
    assert_eq!(app.baseline(&d2).await["state"], "draft");
    assert!(app.baseline(&d2).await.get("superseded_by").is_none());

    // Neither approved nor rejected any more; the answer names the newer draft.
    let refused = app.approve(&p.approver, &d1).await.expect(409);
    assert_eq!(
        message(&refused),
        format!(
            "baseline {d1} was superseded by the newer draft {d2} before any decision; only a \
             pending draft can be approved: review {d2}"
        )
    );
    let path = format!("/api/v1/baselines/{d1}/reject");
    let refused = app
        .post(&path, &p.approver, json!({"comment": "old"}))
        .await
        .expect(409);
    assert!(message(&refused).contains(&format!("superseded by the newer draft {d2}")));
    assert_eq!(app.baseline(&d1).await["state"], "superseded");

    // The list links them; budgetctl says the same.
    let replaced = of_state(app, "superseded").await;
    assert_eq!(replaced.len(), 1);
    assert_eq!(
        (
            &replaced[0]["id"],
            &replaced[0]["superseded_by"],
            &replaced[0]["approved_at"]
        ),
        (&json!(d1), &json!(d2), &Value::Null)
    );
    let pending = of_state(app, "draft").await;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["id"], d2.as_str());
    let ctl = budgetctl(app, &p.approver, &["baseline", "approve", &d1])
        .await
        .expect(5);
    assert!(
        ctl.stderr
            .contains(&format!("superseded by the newer draft {d2}")),
        "{ctl:?}"
    );
    let listed = budgetctl(
        app,
        &p.approver,
        &["baseline", "list", "--chain", "checkout"],
    )
    .await
    .expect(0);
    assert!(
        listed.stdout.contains(&format!("superseded by {d2}")),
        "{}",
        listed.stdout
    );
    let shown = budgetctl(app, &p.approver, &["baseline", "show", &d1])
        .await
        .expect(0);
    assert!(
        shown.stdout.contains(&format!(
            "superseded by: {d2} (a newer draft, before any decision: it can no longer be approved)"
        )),
        "{}",
        shown.stdout
    );

    // The newest is approved. The replaced draft was never approved: no rollback to it, no
    // release may cite it.
    app.approve(&p.approver, &d2).await.expect(200);
    let refused = app
        .post(
            "/api/v1/chains/checkout/rollback",
            &p.approver,
            json!({ "baseline_id": d1 }),
        )
        .await
        .expect(409);
    assert!(
        message(&refused).contains("a superseded draft that was never approved"),
        "{}",
        message(&refused)
    );
    let release =
        json!({"service": "order", "version": "1.0.0", "baseline_id": d1, "ticket": "CHG-1"});
    let refused = app
        .post("/api/v1/releases", &p.uploader, release)
        .await
        .expect(422);
    assert!(message(&refused).contains("a superseded draft (never approved)"));

    // An approval supersedes the live baseline, linked too; a rollback clears the link.
    let up = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    let d3 = up["baseline_id"].as_str().unwrap().to_owned();
    app.approve(&p.approver, &d3).await.expect(200);
    let doc2 = app.baseline(&d2).await;
    assert_eq!(
        (&doc2["state"], &doc2["superseded_by"]),
        (&json!("superseded"), &json!(d3))
    );
    assert!(doc2["decision"].is_object());
    let summary2 = of_state(app, "superseded")
        .await
        .into_iter()
        .find(|b| b["id"] == d2.as_str())
        .unwrap();
    assert!(summary2["approved_at"].is_string(), "{summary2}");
    app.post(
        "/api/v1/chains/checkout/rollback",
        &p.approver,
        json!({ "baseline_id": d2 }),
    )
    .await
    .expect(200);
    let doc2 = app.baseline(&d2).await;
    assert_eq!(doc2["state"], "approved");
    assert!(doc2.get("superseded_by").is_none(), "{doc2}");
    assert_eq!(app.baseline(&d3).await["superseded_by"], d2.as_str());
    archived_as_served(app, &d2).await;
}

/// A store from before drafts superseded each other can hold several pending drafts of one
/// chain: `id` is made pending again, as such a store would hold it.
async fn reopen_as_legacy_draft(app: &TestApp, id: &str) {
    let mut doc: BaselineDocument = serde_json::from_value(app.baseline(id).await).unwrap();
    doc.state = BaselineState::Draft;
    doc.superseded_by = None;
    let bytes = String::from_utf8(doc.to_bytes()).unwrap();
    let sha = hex::encode(sha2::Sha256::digest(bytes.as_bytes()));
    sqlx::any::install_default_drivers();
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&app.db_url)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE baselines SET state = 'draft', superseded_by = NULL, chain_seq = NULL, \
         document_behind = NULL, sha256 = $1 WHERE id = $2",
    )
    .bind(sha)
    .bind(id)
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::query("UPDATE baseline_documents SET document = $1 WHERE baseline_id = $2")
        .bind(bytes)
        .bind(id)
        .execute(&mut conn)
        .await
        .unwrap();
}

async fn an_older_draft_is_never_approved(app: &TestApp) {
    let p = app.people().await;
    let (d1, d2) = two_drafts(app, &p).await;
    reopen_as_legacy_draft(app, &d1).await;
    assert_eq!(of_state(app, "draft").await.len(), 2);

    // d2 came after it: approving d1 would bring back older numbers, pending or approved d2.
    let expect = format!(
        "baseline {d1} is not the newest baseline of \"checkout\": {d2} came after it, and \
         approving {d1} would bring back older numbers"
    );
    let refused = app.approve(&p.approver, &d1).await.expect(409);
    assert_eq!(message(&refused), expect);
    app.approve(&p.approver, &d2).await.expect(200);
    let refused = app.approve(&p.approver, &d1).await.expect(409);
    assert_eq!(message(&refused), expect);
    assert_eq!(app.baseline(&d1).await["state"], "draft");
    // Rejecting it stays possible, and the next draft supersedes nothing else.
    app.post(
        &format!("/api/v1/baselines/{d1}/reject"),
        &p.approver,
        json!({"comment": "older than the live baseline"}),
    )
    .await
    .expect(200);
}

/// The id of the audit entry of `action` on `subject` (ids follow the chain's commit order).
async fn audit_id(app: &TestApp, action: &str, subject: &str) -> i64 {
    let log = app
        .get("/api/v1/audit?chain=checkout&limit=1000", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == action && e["subject"] == subject)
        .and_then(|e| e["id"].as_i64())
        .unwrap_or_else(|| panic!("no {action} of {subject} in the audit log"))
}

/// Replicas A and B on one database: round after round, one approves the pending draft while
/// the other opens a newer draft. Either the approval came first (the draft is approved, the
/// newer one pending) or the newer draft did (the draft is superseded by it and the approval
/// answered 409) — never an approval of a draft a newer one had replaced.
async fn approvals_race_new_drafts_across_replicas(app: &TestApp) {
    let b = spawn_replica(app).await;
    let p = app.people().await;
    let mut draft = draft_a(app, &p).await;
    let run_a = app.baseline(&draft).await["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (mut approved_first, mut replaced_first) = (0, 0);
    for round in 0..10 {
        let (approver, opener) = if round % 2 == 0 { (app, &b) } else { (&b, app) };
        let (approval, newer) = tokio::join!(
            approver.approve(&p.approver, &draft),
            recompute(opener, &p.uploader, &run_a)
        );
        let newer = id_of(newer);
        let doc = app.baseline(&draft).await;
        match approval.status.as_u16() {
            200 => {
                approved_first += 1;
                assert_eq!(doc["state"], "approved", "round {round}: {doc}");
                assert!(doc.get("superseded_by").is_none(), "round {round}: {doc}");
                // Both wrote under the chain's lock, so the audit log has them in commit order:
                // the approval must have committed before the newer draft existed.
                let (approved_at, opened_at) = (
                    audit_id(app, "baseline.approve", &draft).await,
                    audit_id(app, "baseline.recompute", &newer).await,
                );
                assert!(
                    approved_at < opened_at,
                    "round {round}: {draft} was approved after {newer} replaced it"
                );
            }
            409 => {
                replaced_first += 1;
                assert_eq!(
                    (&doc["state"], &doc["superseded_by"]),
                    (&json!("superseded"), &json!(newer)),
                    "round {round}"
                );
                assert!(
                    message(&approval).contains(&newer),
                    "{}",
                    message(&approval)
                );
            }
            other => panic!(
                "round {round}: approval answered {other}: {}",
                message(&approval)
            ),
        }
        let pending = of_state(&b, "draft").await;
        assert_eq!(pending.len(), 1, "round {round}: {pending:?}");
        assert_eq!(pending[0]["id"], newer.as_str());
        draft = newer;
    }
    eprintln!("approval first in {approved_first} rounds, newer draft first in {replaced_first}");
    app.approve(&p.approver, &draft).await.expect(200);
    assert_eq!(of_state(app, "approved").await.len(), 1);
    b.stop().await;
}

crate::on_both_backends!(
    a_new_draft_supersedes_the_older_pending_ones,
    an_older_draft_is_never_approved,
    approvals_race_new_drafts_across_replicas,
);
