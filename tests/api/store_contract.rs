//! One contract suite for the `Store` trait, run on SQLite and on PostgreSQL.

use std::collections::BTreeSet;
use std::sync::Arc;

use budget_core::baseline::{BaselineDocument, BaselineReason, BaselineState};
use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
use budget_core::run::RunUpload;
use budget_core::Topology;
use budgetd::auth::Role;
use budgetd::store::{self, Audit, IdemBegin, IdemResponse, NewRun, Store, StoreError, Verdict};
use serde_json::json;

use crate::helpers::{Backend, TestDb};

fn audit(actor: &str) -> Audit {
    Audit {
        actor: actor.into(),
        action: "test",
        chain: Some("checkout".into()),
        subject: None,
        detail: json!({}),
        at: budgetd::service::now(),
    }
}

fn topology() -> Topology {
    serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap()
}

fn new_run(by: &str) -> NewRun {
    let data = serde_json::from_str::<RunUpload>(CHECKOUT_RUN_A)
        .unwrap()
        .into_run(&topology())
        .unwrap();
    NewRun {
        chain: "checkout".into(),
        topology_version: 1,
        format: "native".into(),
        tool: None,
        note: None,
        source_sha256: "00".into(),
        source_size: 1,
        sources: vec![],
        mapping: None,
        data,
        uploaded_by: by.into(),
        created_at: budgetd::service::now(),
    }
}

fn draft(run_id: &str) -> BaselineDocument {
    let t = topology();
    let data = serde_json::from_str::<RunUpload>(CHECKOUT_RUN_A)
        .unwrap()
        .into_run(&t)
        .unwrap();
    let c = budget_core::compute(&t, &data).unwrap();
    BaselineDocument {
        id: String::new(),
        chain: "checkout".into(),
        state: BaselineState::Draft,
        reason: BaselineReason::Recompute,
        run_id: run_id.into(),
        topology_version: 1,
        created_at: budgetd::service::now(),
        created_by: "uma".into(),
        entry_budget_ms: t.entry_budget_ms,
        breaker_window_ms: t.breaker_window_ms,
        max_recovery: t.max_recovery,
        segments: c.segments,
        findings: c.findings,
        drift: vec![],
        drift_baseline_id: None,
        decision: None,
    }
}

/// Two independent connections pools on one database: two processes, as far as the DB knows.
async fn two_stores(backend: Backend) -> Option<(TestDb, Arc<dyn Store>, Arc<dyn Store>)> {
    let db = TestDb::new(backend).await?;
    let a = store::connect(&db.url).await.unwrap();
    let b = store::connect(&db.url).await.unwrap();
    Some((db, a, b))
}

async fn contract(backend: Backend) {
    let Some((_db, a, b)) = two_stores(backend).await else {
        return;
    };

    // Topology versions: same content is the same version.
    let (v1, created) = a
        .put_topology("checkout", &topology(), audit("uma"))
        .await
        .unwrap();
    assert_eq!((v1.version, created), (1, true));
    let (again, created) = b
        .put_topology("checkout", &topology(), audit("uma"))
        .await
        .unwrap();
    assert_eq!((again.version, created), (1, false));
    assert!(matches!(
        a.get_topology("nowhere", None).await,
        Err(StoreError::NotFound(_))
    ));

    // A run checked against a stale "current" writes nothing.
    let stale = a
        .insert_run(new_run("uma"), None, Some("bl-x".into()), audit("uma"))
        .await;
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    assert_eq!(a.run_count("checkout").await.unwrap(), 0);
    let (run, none) = a
        .insert_run(new_run("uma"), None, None, audit("uma"))
        .await
        .unwrap();
    assert!(none.is_none());
    assert!(run.id.starts_with("run-"));

    // Baseline ids stay unique when two processes create baselines at the same instant.
    let mut tasks = Vec::new();
    for i in 0..24 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        let run_id = run.id.clone();
        tasks.push(tokio::spawn(async move {
            s.insert_baseline(draft(&run_id), audit("uma"))
                .await
                .unwrap()
                .doc
                .id
        }));
    }
    let mut ids = BTreeSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    assert_eq!(ids.len(), 24, "{ids:?}");
    let day = chrono::Utc::now().format("%Y%m%d").to_string();
    let expected: BTreeSet<String> = (1..=24).map(|n| format!("bl-{day}-{n:03}")).collect();
    assert_eq!(ids, expected);

    // Concurrent approvals from both processes: one approved at the end, revisions distinct.
    let ids: Vec<String> = ids.into_iter().collect();
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().take(6).enumerate() {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            s.decide(&id, Verdict::Approve, None, audit("abe"))
                .await
                .unwrap()
                .1
                .unwrap()
                .revision
        }));
    }
    let mut revisions = BTreeSet::new();
    for t in tasks {
        revisions.insert(t.await.unwrap());
    }
    assert_eq!(revisions, (1..=6).collect());
    let approved = a
        .list_baselines("checkout", Some(BaselineState::Approved))
        .await
        .unwrap();
    assert_eq!(approved.len(), 1);
    assert_eq!(
        a.list_baselines("checkout", Some(BaselineState::Superseded))
            .await
            .unwrap()
            .len(),
        5
    );
    let latest = a.latest_publication("checkout").await.unwrap().unwrap();
    assert_eq!(
        (latest.revision, latest.baseline_id.as_str()),
        (6, approved[0].id.as_str())
    );
    // Deciding a non-draft is a conflict; the document follows the state.
    assert!(matches!(
        b.decide(&ids[0], Verdict::Reject, Some("no".into()), audit("abe"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    let doc = a.get_baseline(&approved[0].id).await.unwrap();
    assert_eq!(doc.doc.state, BaselineState::Approved);
    assert_eq!(doc.doc.decision.as_ref().unwrap().by, "abe");
    assert!(doc.bytes.contains("\"state\": \"approved\""));
    assert_eq!(doc.run_uploaded_by, "uma");

    // Idempotency records.
    let now = budgetd::service::now();
    assert!(matches!(
        a.idem_begin("uma", "k1", "h1", &now).await.unwrap(),
        IdemBegin::Started
    ));
    assert!(matches!(
        b.idem_begin("uma", "k1", "h1", &now).await.unwrap(),
        IdemBegin::InFlight
    ));
    assert!(matches!(
        b.idem_begin("uma", "k1", "h2", &now).await.unwrap(),
        IdemBegin::Mismatch
    ));
    assert!(matches!(
        b.idem_begin("abe", "k1", "h2", &now).await.unwrap(),
        IdemBegin::Started
    ));
    let resp = IdemResponse {
        status: 201,
        content_type: "application/json".into(),
        body: "{\"a\":1}".into(),
    };
    a.idem_finish("uma", "k1", &resp).await.unwrap();
    match b.idem_begin("uma", "k1", "h1", &now).await.unwrap() {
        IdemBegin::Done(r) => assert_eq!((r.status, r.body.as_str()), (201, "{\"a\":1}")),
        other => panic!("expected Done, got {other:?}"),
    }
    a.idem_abort("abe", "k1").await.unwrap();
    assert!(matches!(
        a.idem_begin("abe", "k1", "h3", &now).await.unwrap(),
        IdemBegin::Started
    ));
    assert_eq!(a.idem_expire("9999").await.unwrap(), 2);

    // Tokens.
    a.create_token("rita", Role::Reader, "hash-rita", audit("admin"))
        .await
        .unwrap();
    assert!(matches!(
        b.create_token("rita", Role::Admin, "hash-2", audit("admin"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        b.find_token("hash-rita").await.unwrap().unwrap().role,
        Role::Reader
    );
    b.revoke_token("rita", audit("admin")).await.unwrap();
    assert!(a.find_token("hash-rita").await.unwrap().is_none());
    assert!(matches!(
        a.revoke_token("rita", audit("admin")).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(!a.audit_log(None, 10, None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_contract() {
    contract(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_contract() {
    contract(Backend::Postgres).await;
}
