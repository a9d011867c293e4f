//! One contract suite for the `Store` trait, run on SQLite and on PostgreSQL.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use budget_api::releases::ReleaseRequest;
use budget_core::baseline::{BaselineDocument, BaselineReason, BaselineState};
use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
use budget_core::run::RunUpload;
use budget_core::Topology;
use budgetd::auth::Role;
use budgetd::store::{
    self, AgentClaim, AgentProgress, AgentStatus, Audit, CohortProgress, IdemClaim, IdemLookup,
    IdemResponse, NewRun, NewToken, Store, StoreError, Verdict,
};
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
        uploaded_by_owner: format!("{by}-owner"),
        created_at: budgetd::service::now(),
    }
}

fn draft(run_id: &str) -> BaselineDocument {
    let t = topology();
    let data = serde_json::from_str::<RunUpload>(CHECKOUT_RUN_A)
        .unwrap()
        .into_run(&t)
        .unwrap();
    let c = budget_core::compute(&t, &data, &budget_core::distribution::NoDistributions).unwrap();
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
        superseded_by: None,
    }
}

/// Two independent connections pools on one database: two processes, as far as the DB knows.
/// The SHA-256 of the document the store serves for `id`, computed from its bytes.
async fn served_sha(store: &Arc<dyn Store>, id: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(
        store.get_baseline(id).await.unwrap().bytes.as_bytes(),
    ))
}

async fn two_stores(backend: Backend) -> Option<(TestDb, Arc<dyn Store>, Arc<dyn Store>)> {
    let db = TestDb::new(backend).await?;
    let a = store::connect(&db.url).await.unwrap();
    let b = store::connect(&db.url).await.unwrap();
    Some((db, a, b))
}

async fn contract(backend: Backend) {
    let Some((db, a, b)) = two_stores(backend).await else {
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

    // Each new draft superseded the drafts committed before it (in its transaction, the chain
    // locked): whatever the interleaving of the two processes, one draft is pending and every
    // other names a draft that replaced it.
    let ids: Vec<String> = ids.into_iter().collect();
    let pending = a
        .list_baselines("checkout", Some(BaselineState::Draft), None, 1000)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let replaced = a
        .list_baselines("checkout", Some(BaselineState::Superseded), None, 1000)
        .await
        .unwrap();
    assert_eq!(replaced.len(), 23);
    for r in &replaced {
        let by = r
            .superseded_by
            .as_deref()
            .expect("a superseded draft names the newer one");
        assert!(by != r.id && ids.iter().any(|i| i == by), "{r:?}");
        assert_eq!(r.approved_at, None, "{r:?}");
        let doc = b.get_baseline(&r.id).await.unwrap();
        assert_eq!(doc.doc.superseded_by.as_deref(), Some(by));
        assert!(doc.bytes.contains(&format!("\"superseded_by\": \"{by}\"")));
    }

    // A baseline's archive items hold no copy of its document (about a megabyte for a large
    // chain): a claim reads the baseline's current document, and an item whose baseline
    // changed after it was queued is superseded (the change queued a newer one).
    let at = |minutes: i64| {
        (chrono::Utc::now() + chrono::Duration::minutes(minutes))
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    let newest_draft = &pending[0].id;
    sqlx::any::install_default_drivers();
    let mut raw = <sqlx::AnyConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    sqlx::query("UPDATE baselines SET sha256 = 'changed' WHERE id = $1")
        .bind(newest_draft)
        .execute(&mut raw)
        .await
        .unwrap();
    let claimed = b.archive_claim(&at(0), &at(5), 1000).await.unwrap();
    assert_eq!(
        claimed.len(),
        23,
        "every superseded draft's newest item, not the changed one"
    );
    for item in &claimed {
        let id = item
            .key
            .rsplit('/')
            .next()
            .unwrap()
            .trim_end_matches(".json");
        assert_ne!(id, newest_draft);
        let served = a.get_baseline(id).await.unwrap();
        assert_eq!(item.body, served.bytes, "{id}");
        assert_eq!(item.sha256, served.sha256, "{id}");
    }
    a.archive_done(claimed[0].id, &at(0)).await.unwrap();
    let mut out = Vec::new();
    a.export_all(&mut out, &|_, _| {}).await.unwrap();
    let export: store::Export = serde_json::from_slice(&out).unwrap();
    let outbox = &export.tables["archive_outbox"];
    let column = |name: &str| outbox.columns.iter().position(|c| c == name).unwrap();
    let (state, body, baseline) = (column("state"), column("body"), column("baseline_id"));
    let mut states = BTreeSet::new();
    for row in &outbox.rows {
        let (s, b) = (row[state].as_str().unwrap(), row[body].as_str().unwrap());
        assert_eq!(b, "", "a {s} item holds {} bytes", b.len());
        if row[baseline] == json!(newest_draft) {
            assert_eq!(s, "superseded");
        }
        states.insert(s.to_owned());
    }
    assert_eq!(
        states,
        BTreeSet::from(["done", "pending", "superseded"].map(String::from))
    );
    let sha = served_sha(&a, newest_draft).await;
    sqlx::query("UPDATE baselines SET sha256 = $2 WHERE id = $1")
        .bind(newest_draft)
        .bind(sha)
        .execute(&mut raw)
        .await
        .unwrap();

    // Concurrent approvals of the newest draft from both processes: one wins, the other finds
    // it decided; one approved at the end, revisions distinct.
    let mut revisions = BTreeSet::new();
    let mut newest = pending[0].id.clone();
    for round in 0..6 {
        if round > 0 {
            let s = if round % 2 == 0 { &a } else { &b };
            newest = s
                .insert_baseline(draft(&run.id), audit("uma"))
                .await
                .unwrap()
                .doc
                .id;
        }
        let tasks: Vec<_> = [a.clone(), b.clone()]
            .into_iter()
            .map(|s| {
                let id = newest.clone();
                tokio::spawn(
                    async move { s.decide(&id, Verdict::Approve, None, audit("abe")).await },
                )
            })
            .collect();
        let mut won = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok((_, published)) => won.push(published.unwrap().revision),
                Err(StoreError::Conflict(_)) => {}
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(won.len(), 1, "one approval of {newest} wins");
        revisions.extend(won);
    }
    assert_eq!(revisions, (1..=6).collect());
    // An older draft, superseded, can no longer be approved.
    assert!(matches!(
        b.decide(&ids[0], Verdict::Approve, None, audit("abe"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    let approved = a
        .list_baselines("checkout", Some(BaselineState::Approved), None, 1000)
        .await
        .unwrap();
    assert_eq!(approved.len(), 1);
    assert!(approved[0].approved_at.is_some());
    let superseded = a
        .list_baselines("checkout", Some(BaselineState::Superseded), None, 1000)
        .await
        .unwrap();
    assert_eq!(
        superseded
            .iter()
            .filter(|x| x.approved_at.is_some())
            .count(),
        5,
        "approved, then replaced by the next approval"
    );
    assert_eq!(superseded.len(), 5 + 23);
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
    assert_eq!(doc.run_uploaded_by_owner, "uma-owner");
    // Baselines page newest first, by (created_at, id), whatever the page size.
    let all = a
        .list_baselines("checkout", None, None, 1000)
        .await
        .unwrap();
    assert!(all.len() > 4);
    let mut paged = Vec::new();
    let mut before = None;
    loop {
        let page = b
            .list_baselines("checkout", None, before.as_ref(), 4)
            .await
            .unwrap();
        before = page.last().map(|x| (x.created_at.clone(), x.id.clone()));
        let done = page.len() < 4;
        paged.extend(page.into_iter().map(|x| x.id));
        if done {
            break;
        }
    }
    assert_eq!(paged, all.iter().map(|x| x.id.clone()).collect::<Vec<_>>());

    // Idempotency: the key's record is written with the effect, in its transaction.
    assert!(matches!(
        a.idem_lookup("uma", "k1", "h1").await.unwrap(),
        IdemLookup::Absent
    ));
    let claim = || IdemClaim::new("uma".into(), "k1".into(), "h1".into());
    let first = store::with_idempotency(
        claim(),
        a.create_release(release(&approved[0].id), "sha", audit("uma")),
    )
    .await
    .unwrap();
    // The response was lost (the request died after its commit): the key says so, and the
    // same write under it answers the committed result, writing nothing.
    assert!(matches!(
        b.idem_lookup("uma", "k1", "h1").await.unwrap(),
        IdemLookup::Committed
    ));
    let again = store::with_idempotency(
        claim(),
        b.create_release(release(&approved[0].id), "sha", audit("uma")),
    )
    .await
    .unwrap();
    assert_eq!(
        again.id, first.id,
        "the committed release, not a second one"
    );
    assert_eq!(
        a.list_releases(Some(&approved[0].id), None, 100)
            .await
            .unwrap()
            .len(),
        1
    );
    // Same key, other request: refused by the lookup and by the store.
    assert!(matches!(
        b.idem_lookup("uma", "k1", "h2").await.unwrap(),
        IdemLookup::Mismatch
    ));
    assert!(matches!(
        store::with_idempotency(
            IdemClaim::new("uma".into(), "k1".into(), "h2".into()),
            b.create_release(release(&approved[0].id), "sha", audit("uma")),
        )
        .await,
        Err(StoreError::Conflict(_))
    ));
    // A failed write leaves no record: the key runs afresh.
    assert!(matches!(
        store::with_idempotency(
            IdemClaim::new("uma".into(), "k3".into(), "h1".into()),
            a.revoke_token("nobody", audit("admin")),
        )
        .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        a.idem_lookup("uma", "k3", "h1").await.unwrap(),
        IdemLookup::Absent
    ));
    // The response is kept once known; keys of other scopes are their own.
    let resp = IdemResponse {
        status: 201,
        content_type: "application/json".into(),
        body: "{\"a\":1}".into(),
    };
    a.idem_finish("uma", "k1", &resp).await.unwrap();
    match b.idem_lookup("uma", "k1", "h1").await.unwrap() {
        IdemLookup::Done(r) => assert_eq!((r.status, r.body.as_str()), (201, "{\"a\":1}")),
        other => panic!("expected Done, got {other:?}"),
    }
    assert!(matches!(
        b.idem_lookup("abe", "k1", "h2").await.unwrap(),
        IdemLookup::Absent
    ));
    assert_eq!(a.idem_expire("9999").await.unwrap(), 1);

    // Tokens.
    let token = |name: &str, role, owner: &str, hash: &str| NewToken {
        name: name.into(),
        role,
        owner: owner.into(),
        hash: hash.into(),
    };
    a.create_token(
        &token("rita", Role::Reader, "rita", "hash-rita"),
        audit("admin"),
    )
    .await
    .unwrap();
    assert!(matches!(
        b.create_token(
            &token("rita", Role::Admin, "rita", "hash-2"),
            audit("admin")
        )
        .await,
        Err(StoreError::Conflict(_))
    ));
    let rita = b.find_token("hash-rita").await.unwrap().unwrap();
    assert_eq!(
        (rita.role, rita.owner.as_str(), rita.token_id.as_str()),
        (Role::Reader, "rita", "hash-rita")
    );
    // Rotation keeps role and owner; the old token stays until revoked.
    a.create_token(
        &token("ann-ci", Role::Uploader, "ann", "hash-ann"),
        audit("admin"),
    )
    .await
    .unwrap();
    let rotated = b
        .rotate_token("ann-ci", "ann-ci-2", "hash-ann-2", audit("admin"))
        .await
        .unwrap();
    assert_eq!(
        (rotated.role, rotated.owner.as_str()),
        (Role::Uploader, "ann")
    );
    assert_eq!(
        a.find_token("hash-ann-2").await.unwrap().unwrap().owner,
        "ann"
    );
    assert!(a.find_token("hash-ann").await.unwrap().is_some());
    assert!(matches!(
        a.rotate_token("nobody", "x", "hash-x", audit("admin"))
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        a.rotate_token("ann-ci", "rita", "hash-x", audit("admin"))
            .await,
        Err(StoreError::Conflict(_))
    ));
    // The bootstrap token is its own owner.
    a.upsert_token("admin", Role::Admin, "hash-admin", audit("budgetd"))
        .await
        .unwrap();
    assert_eq!(
        a.find_token("hash-admin").await.unwrap().unwrap().owner,
        "admin"
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

fn agent(id: &str, service: &str, token_id: &str, last_seen: &str) -> AgentStatus {
    AgentStatus {
        agent_id: id.into(),
        service: service.into(),
        client: "go/0.1.0".into(),
        labels: Default::default(),
        chains: vec!["checkout".into()],
        replica: "r1".into(),
        connected: true,
        delivered: 1,
        acked: 1,
        nack_revision: None,
        nack_error: None,
        first_seen: last_seen.into(),
        last_seen: last_seen.into(),
        token: None,
        token_id: token_id.into(),
        process: "r1#0001".into(),
    }
}

/// The agent tokens `bot-a` and `bot-b` (hashes `hash-a` and `hash-b`).
async fn agent_tokens(store: &(impl budgetd::store::Access + ?Sized)) {
    for (name, hash) in [("bot-a", "hash-a"), ("bot-b", "hash-b")] {
        let t = NewToken {
            name: name.into(),
            role: Role::Agent,
            owner: name.into(),
            hash: hash.into(),
        };
        store.create_token(&t, audit("admin")).await.unwrap();
    }
}

/// Agents are bound to the token that first claimed them, entries of another token are never
/// overwritten, pages follow (service, agent_id), and gone agents expire.
async fn agents_contract(backend: Backend) {
    let Some((_db, a, b)) = two_stores(backend).await else {
        return;
    };
    agent_tokens(&*a).await;
    let t0 = "2026-01-01T00:00:00.000Z";
    let t1 = "2026-01-02T00:00:00.000Z";
    let bound = |c: AgentClaim| match c {
        AgentClaim::Bound(s) => *s,
        AgentClaim::Taken => panic!("expected the claim to succeed"),
    };
    let first = bound(
        a.claim_agent(&agent("order-1", "order", "hash-a", t0))
            .await
            .unwrap(),
    );
    assert_eq!(first.token.as_deref(), Some("bot-a"));
    assert_eq!(first.client, "go/0.1.0", "the client library is stored");
    // Another token, on another store (replica): refused, nothing changes.
    assert_eq!(
        b.claim_agent(&agent("order-1", "evil", "hash-b", t1))
            .await
            .unwrap(),
        AgentClaim::Taken
    );
    assert_eq!(
        b.agent_token("order-1").await.unwrap().as_deref(),
        Some("hash-a")
    );
    let mut forged = agent("order-1", "evil", "hash-b", t1);
    forged.nack_revision = Some(9);
    forged.nack_error = Some("forged".into());
    b.upsert_agents(&[forged]).await.unwrap();
    // The same token again: its stored status, which its own updates change.
    let mut update = agent("order-1", "order", "hash-a", t1);
    update.acked = 7;
    a.upsert_agents(&[update]).await.unwrap();
    let again = bound(
        b.claim_agent(&agent("order-1", "order", "hash-a", t1))
            .await
            .unwrap(),
    );
    assert_eq!(
        (
            again.service.as_str(),
            again.acked,
            again.nack_error,
            again.first_seen.as_str()
        ),
        ("order", 7, None, t0)
    );
    // Once its token is revoked, the id is free for another token.
    a.revoke_token("bot-a", audit("admin")).await.unwrap();
    assert_eq!(b.agent_token("order-1").await.unwrap(), None);
    let taken = bound(
        b.claim_agent(&agent("order-1", "order", "hash-b", t1))
            .await
            .unwrap(),
    );
    assert_eq!(taken.token.as_deref(), Some("bot-b"));

    // Pages by (service, agent_id), only agents seen since the cutoff.
    let mut batch = Vec::new();
    for service in ["a", "b", "c"] {
        for n in 0..3 {
            batch.push(agent(&format!("{service}-{n}"), service, "hash-b", t1));
        }
    }
    batch.push(agent("old-1", "a", "hash-b", t0));
    a.upsert_agents(&batch).await.unwrap();
    let since = "2026-01-01T12:00:00.000Z";
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = b.list_agents(since, after.as_ref(), 4).await.unwrap();
        after = page.last().map(|x| (x.service.clone(), x.agent_id.clone()));
        let done = page.len() < 4;
        seen.extend(page.into_iter().map(|x| x.agent_id));
        if done {
            break;
        }
    }
    assert_eq!(
        seen,
        ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2", "c-0", "c-1", "c-2", "order-1"]
    );
    assert_eq!(a.expire_agents(since).await.unwrap(), 1);
    assert_eq!(a.list_agents(t0, None, 100).await.unwrap().len(), 10);

    // Progress: one statement per (token, delivered, acked) group, whatever its size; only
    // entries bound to the group's token change, and nothing else in them.
    let t2 = "2026-01-03T00:00:00.000Z";
    let groups = [
        AgentProgress {
            token_id: "hash-b".into(),
            delivered: 12,
            acked: 11,
            agent_ids: vec!["a-0".into(), "a-1".into(), "c-2".into(), "gone".into()],
        },
        AgentProgress {
            token_id: "hash-b".into(),
            delivered: 12,
            acked: 12,
            agent_ids: vec!["b-0".into()],
        },
        // order-1 is bound to hash-b now: a group of another token leaves it alone.
        AgentProgress {
            token_id: "hash-a".into(),
            delivered: 99,
            acked: 99,
            agent_ids: vec!["order-1".into()],
        },
    ];
    b.record_progress("r1#0001", Some(t2), &[], &groups)
        .await
        .unwrap();
    let all = a.list_agents(t0, None, 100).await.unwrap();
    let of = |id: &str| all.iter().find(|x| x.agent_id == id).unwrap();
    for id in ["a-0", "a-1", "c-2"] {
        let x = of(id);
        assert_eq!((x.delivered, x.acked, x.last_seen.as_str()), (12, 11, t2));
        assert_eq!((x.service.as_str(), x.connected), (&id[..1], true));
    }
    assert_eq!((of("b-0").delivered, of("b-0").acked), (12, 12));
    let untouched = of("b-1");
    assert_eq!(
        (
            untouched.delivered,
            untouched.acked,
            untouched.last_seen.as_str()
        ),
        (1, 1, t1)
    );
    let other = of("order-1");
    assert_ne!(other.delivered, 99, "another token's group changed order-1");
    assert_eq!(all.len(), 10, "an unknown id in a group adds no entry");
    b.record_progress("r1#0001", Some(t2), &[], &[])
        .await
        .unwrap();
    // Without a heartbeat only the revisions change.
    let later = AgentProgress {
        token_id: "hash-b".into(),
        delivered: 13,
        acked: 13,
        agent_ids: vec!["a-0".into()],
    };
    b.record_progress("r1#0001", None, &[], &[later])
        .await
        .unwrap();
    let a0 = a.list_agents(t0, None, 100).await.unwrap();
    let a0 = a0.iter().find(|x| x.agent_id == "a-0").unwrap();
    assert_eq!(
        (a0.delivered, a0.acked, a0.last_seen.as_str()),
        (13, 13, t2)
    );

    // Claims in one batch: each answered in order, as one claim each would be.
    a.create_token(
        &NewToken {
            name: "bot-c".into(),
            role: Role::Agent,
            owner: "bot-c".into(),
            hash: "hash-c".into(),
        },
        audit("admin"),
    )
    .await
    .unwrap();
    let claims = a
        .claim_agents(&[
            agent("order-1", "order", "hash-c", t1),
            agent("new-1", "new", "hash-c", t1),
            agent("order-1-twin", "order", "hash-b", t1),
        ])
        .await
        .unwrap();
    assert_eq!(claims[0], AgentClaim::Taken, "order-1 is bot-b's");
    let tokens: Vec<Option<String>> = claims[1..].iter().map(|c| bound(c.clone()).token).collect();
    assert_eq!(tokens, [Some("bot-c".into()), Some("bot-b".into())]);
    // A fleet's worth at once, past one statement's chunk: every id bound, none twice.
    let fleet: Vec<AgentStatus> = (0..2500)
        .map(|i| agent(&format!("fleet-{i}"), "fleet", "hash-c", t1))
        .collect();
    let claims = b.claim_agents(&fleet).await.unwrap();
    assert_eq!(claims.len(), 2500);
    assert!(claims
        .iter()
        .all(|c| matches!(c, AgentClaim::Bound(s) if s.token_id == "hash-c")));
    // Claimed again (every agent reconnecting): the same answers, from one read.
    let again = a.claim_agents(&fleet).await.unwrap();
    assert_eq!(again, claims);
    assert!(a.claim_agents(&[]).await.unwrap().is_empty());
}

/// Agents that follow a cohort read its revisions, on every replica, until they are written
/// with their own; a cohort moves its followers in one write, and only its token's agents
/// join it.
async fn cohorts_contract(backend: Backend) {
    let Some((_db, a, b)) = two_stores(backend).await else {
        return;
    };
    agent_tokens(&*a).await;
    let t0 = "2026-01-01T00:00:00.000Z";
    let t1 = "2026-01-02T00:00:00.000Z";
    let mut fleet: Vec<AgentStatus> = (0..4)
        .map(|i| agent(&format!("b-{i}"), "b", "hash-b", t0))
        .collect();
    fleet.push(agent("a-0", "a", "hash-a", t0));
    // b-3 refused revision 5 and accepted none since.
    fleet[3].nack_revision = Some(5);
    fleet[3].nack_error = Some("invalid".into());
    a.upsert_agents(&fleet).await.unwrap();
    let revisions = |all: &[AgentStatus]| -> Vec<(String, i64, i64)> {
        all.iter()
            .map(|x| (x.agent_id.clone(), x.delivered, x.acked))
            .collect()
    };
    let cohort = |delivered, acked, joining: &[&str], token: &str| CohortProgress {
        id: "r1#00/1".into(),
        token_id: token.into(),
        delivered,
        acked,
        joining: joining.iter().map(|s| (*s).to_owned()).collect(),
    };
    // a-0 is bound to another token: it does not join.
    a.record_progress(
        "r1#0001",
        None,
        &[cohort(6, 6, &["b-0", "b-1", "b-3", "a-0"], "hash-b")],
        &[],
    )
    .await
    .unwrap();
    let all = b.list_agents(t0, None, 100).await.unwrap();
    assert_eq!(
        revisions(&all),
        [
            ("a-0".into(), 1, 1),
            ("b-0".into(), 6, 6),
            ("b-1".into(), 6, 6),
            ("b-2".into(), 1, 1),
            ("b-3".into(), 6, 6),
        ]
    );
    assert!(
        all.iter().all(|x| x.last_seen == t0),
        "no heartbeat: last_seen stays"
    );
    // b-3 accepted a revision after the one it refused: it is no longer listed as refusing.
    assert!(b.nacking_agents(10).await.unwrap().is_empty());
    // The cohort moves on; b-1 stays behind with its own revisions, b-2 joins, all seen at t1.
    a.record_progress(
        "r1#0001",
        Some(t1),
        &[cohort(7, 6, &["b-2"], "hash-b")],
        &[AgentProgress {
            token_id: "hash-b".into(),
            delivered: 6,
            acked: 6,
            agent_ids: vec!["b-1".into()],
        }],
    )
    .await
    .unwrap();
    let all = b.list_agents(t0, None, 100).await.unwrap();
    assert_eq!(
        revisions(&all),
        [
            ("a-0".into(), 1, 1),
            ("b-0".into(), 7, 6),
            ("b-1".into(), 6, 6),
            ("b-2".into(), 7, 6),
            ("b-3".into(), 7, 6),
        ]
    );
    let seen: Vec<&str> = all.iter().map(|x| x.last_seen.as_str()).collect();
    assert_eq!(seen, [t0, t0, t1, t1, t0]);
    // Written whole, an agent follows the cohort no more.
    let mut b0 = agent("b-0", "b", "hash-b", t1);
    (b0.delivered, b0.acked) = (7, 7);
    a.upsert_agents(&[b0]).await.unwrap();
    a.record_progress("r1#0001", None, &[cohort(8, 8, &[], "hash-b")], &[])
        .await
        .unwrap();
    let all = b.list_agents(t0, None, 100).await.unwrap();
    assert_eq!(
        revisions(&all)[1..],
        [
            ("b-0".into(), 7, 7),
            ("b-1".into(), 6, 6),
            ("b-2".into(), 8, 8),
            ("b-3".into(), 8, 8),
        ]
    );
    // Who follows the cohort, as a replica checks after moving it.
    let sizes = b
        .cohort_sizes(&["r1#00/1".into(), "r2#00/1".into()])
        .await
        .unwrap();
    assert_eq!(sizes, [("r1#00/1".to_owned(), 2)].into());
    let ids = ["b-0", "b-2", "b-3", "gone"].map(String::from);
    assert_eq!(b.not_following("r1#00/1", &ids).await.unwrap(), ["b-0"]);

    // The export takes an agent's revisions from its cohort.
    let mut out = Vec::new();
    a.export_all(&mut out, &|_, _| {}).await.unwrap();
    let export: store::Export = serde_json::from_slice(&out).unwrap();
    let table = &export.tables["agents"];
    let col = |name: &str| table.columns.iter().position(|c| c == name).unwrap();
    let exported: Vec<(String, i64, i64)> = table
        .rows
        .iter()
        .map(|r| {
            let id = r[col("agent_id")].as_str().unwrap().to_owned();
            (
                id,
                r[col("delivered")].as_i64().unwrap(),
                r[col("acked")].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        exported,
        revisions(&b.list_agents(t0, None, 100).await.unwrap())
    );

    // Expiry keeps a cohort that agents follow, however long it has not moved.
    let far = "2999-01-01T00:00:00.000Z";
    a.record_progress(
        "r1#0001",
        Some(far),
        &[cohort(8, 8, &["b-2", "b-3"], "hash-b")],
        &[],
    )
    .await
    .unwrap();
    assert_eq!(
        a.expire_agents("2998-01-01T00:00:00.000Z").await.unwrap(),
        3
    );
    let all = b.list_agents(t0, None, 100).await.unwrap();
    assert_eq!(
        revisions(&all),
        [("b-2".into(), 8, 8), ("b-3".into(), 8, 8)]
    );

    // An id taken over by another token (the old one revoked) keeps the revisions it showed
    // and follows the old token's cohort no more.
    a.revoke_token("bot-b", audit("admin")).await.unwrap();
    match b
        .claim_agent(&agent("b-2", "b", "hash-a", far))
        .await
        .unwrap()
    {
        AgentClaim::Bound(row) => assert_eq!((row.delivered, row.acked), (8, 8)),
        AgentClaim::Taken => panic!("b-2's token was revoked"),
    }
    a.record_progress("r1#0001", None, &[cohort(9, 9, &[], "hash-b")], &[])
        .await
        .unwrap();
    let all = b.list_agents(t0, None, 100).await.unwrap();
    assert_eq!(
        revisions(&all),
        [("b-2".into(), 8, 8), ("b-3".into(), 9, 9)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_cohorts_contract() {
    cohorts_contract(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cohorts_contract() {
    cohorts_contract(Backend::Postgres).await;
}

/// Replica beats: each process's latest beat is kept (on every replica's store), those silent
/// since before the cutoff are forgotten, and an entry keeps the process it was written with.
async fn replica_beats_contract(backend: Backend) {
    let Some((_db, a, b)) = two_stores(backend).await else {
        return;
    };
    let (t0, t1, t2) = (
        "2026-01-01T00:00:00.000Z",
        "2026-01-01T00:00:10.000Z",
        "2026-01-01T00:00:20.000Z",
    );
    let live = |store: &Arc<dyn Store>, since: &'static str| {
        let store = store.clone();
        async move {
            let mut l: Vec<String> = store
                .live_processes(since)
                .await
                .unwrap()
                .into_iter()
                .collect();
            l.sort();
            l
        }
    };
    a.beat_replica("r1#0001", "r1", t0, t0).await.unwrap();
    b.beat_replica("r1#0002", "r1", t1, t0).await.unwrap();
    assert_eq!(live(&b, t0).await, ["r1#0001", "r1#0002"]);
    assert_eq!(live(&a, t1).await, ["r1#0002"]);
    // A later beat moves the process's time; the cutoff forgets the silent one.
    a.beat_replica("r1#0002", "r1", t2, t1).await.unwrap();
    assert_eq!(live(&b, t0).await, ["r1#0002"]);
    assert_eq!(live(&b, t2).await, ["r1#0002"]);

    agent_tokens(&*a).await;
    let mut written = agent("order-1", "order", "hash-a", t0);
    written.process = "r1#0002".into();
    a.claim_agent(&written).await.unwrap();
    let listed = b.list_agents(t0, None, 10).await.unwrap();
    assert_eq!(listed[0].process, "r1#0002");
    // A new stream in another process: that process owns the entry from its claim on.
    written.process = "r1#0003".into();
    written.last_seen = t1.into();
    b.claim_agent(&written).await.unwrap();
    assert_eq!(
        b.list_agents(t0, None, 10).await.unwrap()[0].process,
        "r1#0003"
    );
    a.upsert_agents(std::slice::from_ref(&written))
        .await
        .unwrap();
    assert_eq!(
        b.list_agents(t0, None, 10).await.unwrap(),
        [AgentStatus {
            token: Some("bot-a".into()),
            ..written.clone()
        }]
    );
    // The process the agent left writes its stream's end (late): nothing changes.
    let mut left = written.clone();
    left.process = "r1#0002".into();
    left.replica = "r2".into();
    left.connected = false;
    left.acked = 0;
    left.last_seen = t2.into();
    a.upsert_agents(&[left]).await.unwrap();
    a.record_progress(
        "r1#0002",
        Some(t2),
        &[],
        &[AgentProgress {
            token_id: "hash-a".into(),
            delivered: 0,
            acked: 0,
            agent_ids: vec!["order-1".into()],
        }],
    )
    .await
    .unwrap();
    assert_eq!(
        b.list_agents(t0, None, 10).await.unwrap(),
        [AgentStatus {
            token: Some("bot-a".into()),
            ..written
        }],
        "a write of the process the agent left changed its entry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_replica_beats_contract() {
    replica_beats_contract(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replica_beats_contract() {
    replica_beats_contract(Backend::Postgres).await;
}

/// Two replicas writing the same agents at once, each in its own order (a replica's fleet
/// status is a map: its order is arbitrary), never deadlock: rows are locked in one order.
/// PostgreSQL ends one side of a deadlock with an error after a second (`deadlock detected`).
async fn replicas_write_the_same_agents_in_any_order(backend: Backend) {
    let Some((_db, a, b)) = two_stores(backend).await else {
        return;
    };
    agent_tokens(&*a).await;
    let t = "2026-01-01T00:00:00.000Z";
    let fleet: Vec<AgentStatus> = (0..400)
        .map(|n| agent(&format!("agent-{n:03}"), "order", "hash-a", t))
        .collect();
    let mut reversed = fleet.clone();
    reversed.reverse();
    let claims = a.claim_agents(&fleet).await.unwrap();
    assert!(claims.iter().all(|c| matches!(c, AgentClaim::Bound(_))));
    for round in 0..10 {
        let (x, y) = tokio::join!(a.upsert_agents(&fleet), b.upsert_agents(&reversed));
        x.unwrap_or_else(|e| panic!("round {round}, ascending: {e:#}"));
        y.unwrap_or_else(|e| panic!("round {round}, descending: {e:#}"));
        let (x, y) = tokio::join!(a.claim_agents(&fleet), b.claim_agents(&reversed));
        x.unwrap_or_else(|e| panic!("round {round}, claims ascending: {e:#}"));
        y.unwrap_or_else(|e| panic!("round {round}, claims descending: {e:#}"));
        let progress = |ids: Vec<String>| AgentProgress {
            token_id: "hash-a".into(),
            delivered: round,
            acked: round,
            agent_ids: ids,
        };
        let ids: Vec<String> = fleet.iter().map(|x| x.agent_id.clone()).collect();
        let (evens, odds): (Vec<String>, Vec<String>) = ids
            .iter()
            .cloned()
            .partition(|id| id.ends_with(['0', '2', '4', '6', '8']));
        let ascending = [progress(evens.clone()), progress(odds.clone())];
        let mut descending = [progress(odds), progress(evens)];
        descending.iter_mut().for_each(|g| g.agent_ids.reverse());
        let (x, y) = tokio::join!(
            a.record_progress("r1#0001", Some(t), &[], &ascending),
            b.record_progress("r1#0001", Some(t), &[], &descending)
        );
        x.unwrap_or_else(|e| panic!("round {round}, progress ascending: {e:#}"));
        y.unwrap_or_else(|e| panic!("round {round}, progress descending: {e:#}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_replicas_write_the_same_agents_in_any_order() {
    replicas_write_the_same_agents_in_any_order(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_write_the_same_agents_in_any_order() {
    replicas_write_the_same_agents_in_any_order(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_agents_contract() {
    agents_contract(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_agents_contract() {
    agents_contract(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_contract() {
    contract(Backend::Postgres).await;
}

fn release(baseline_id: &str) -> ReleaseRequest {
    ReleaseRequest {
        service: "order".into(),
        version: "1.2.3".into(),
        baseline_id: baseline_id.into(),
        ticket: "CHG-1".into(),
    }
}

/// Publications reach every process sharing the database through the store's listener
/// (PostgreSQL LISTEN/NOTIFY); SQLite, one process, offers none.
async fn publications_are_notified(backend: Backend) {
    let Some((_db, a, b)) = two_stores(backend).await else {
        return;
    };
    let listener = b.publication_listener().await.unwrap();
    let Some(mut listener) = listener else {
        assert_eq!(backend, Backend::Sqlite, "PostgreSQL notifies");
        return;
    };
    a.put_topology("checkout", &topology(), audit("uma"))
        .await
        .unwrap();
    let (_, draft) = a
        .insert_run(new_run("uma"), Some(draft("")), None, audit("uma"))
        .await
        .unwrap();
    let (_, published) = a
        .decide(&draft.unwrap().doc.id, Verdict::Approve, None, audit("abe"))
        .await
        .unwrap();
    let revision = tokio::time::timeout(std::time::Duration::from_secs(30), listener.next())
        .await
        .expect("a notification for the publication")
        .unwrap();
    assert_eq!(revision, published.unwrap().revision.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_publications_are_notified() {
    publications_are_notified(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_publications_are_notified() {
    publications_are_notified(Backend::Postgres).await;
}

/// Canary rollouts: approved for a selector while the previous baseline stays stable, ended
/// once whichever handle tries (the second finds it ended), and canary health summed by any
/// handle.
async fn rollouts_contract(backend: Backend) {
    use budget_core::canary::{CanaryState, Rollout, Selector};
    use budget_core::feedback::Counts;
    use budgetd::store::{CanaryEnd, CanaryHealthRow, WHOLE_BAKE};

    let Some((_db, a, b)) = two_stores(backend).await else {
        return;
    };
    a.put_topology("checkout", &topology(), audit("uma"))
        .await
        .unwrap();
    let draft_of = |store: Arc<dyn Store>, current: Option<&str>| {
        let current = current.map(str::to_owned);
        async move {
            let (run, _) = store
                .insert_run(new_run("uma"), None, current, audit("uma"))
                .await
                .unwrap();
            store
                .insert_baseline(draft(&run.id), audit("uma"))
                .await
                .unwrap()
                .doc
                .id
        }
    };
    let rollout = Rollout {
        canary: Selector::Percent(25),
        bake_s: 60,
        auto: true,
    };
    let ends = budgetd::clock::after(std::time::Duration::from_secs(60));
    // The chain's first baseline: no stable one for the others to keep.
    let first = draft_of(a.clone(), None).await;
    let none = a
        .approve_canary(&first, None, &rollout, &ends, audit("abe"))
        .await;
    assert!(matches!(none, Err(StoreError::Conflict(_))), "{none:?}");
    assert_eq!(
        a.get_baseline(&first).await.unwrap().doc.state,
        BaselineState::Draft
    );
    let (_, stable) = a
        .decide(&first, Verdict::Approve, None, audit("abe"))
        .await
        .unwrap();
    let stable_rev = stable.unwrap().revision;

    let second = draft_of(b.clone(), Some(&first)).await;
    let (_, canary) = b
        .approve_canary(&second, None, &rollout, &ends, audit("abe"))
        .await
        .unwrap();
    let r = a.get_rollout(&second).await.unwrap().unwrap();
    assert_eq!(
        (
            r.state,
            r.selector.clone(),
            r.revision,
            r.previous_baseline_id.as_str(),
            r.previous_revision
        ),
        (
            CanaryState::Baking,
            Selector::Percent(25),
            canary.revision,
            first.as_str(),
            stable_rev
        )
    );
    assert_eq!(a.baking_rollouts().await.unwrap(), vec![r]);
    let (p, held) = a
        .stable_publication("checkout", canary.revision)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (p.revision, held.doc.id.as_str()),
        (stable_rev, first.as_str())
    );
    assert_eq!(
        a.latest_publication("checkout")
            .await
            .unwrap()
            .unwrap()
            .kind,
        "canary"
    );
    // While it bakes, no other draft is approved.
    let third = draft_of(a.clone(), Some(&second)).await;
    let blocked = a.decide(&third, Verdict::Approve, None, audit("abe")).await;
    assert!(
        matches!(blocked, Err(StoreError::Conflict(ref m)) if m.contains("canary baking")),
        "{blocked:?}"
    );

    let counts = |calls, attempts| Counts {
        calls,
        attempts,
        ..Counts::default()
    };
    let row = |segment: &str, writer: &str, minute: i64, counts: Counts| CanaryHealthRow {
        baseline_id: second.clone(),
        segment: segment.into(),
        writer: writer.into(),
        minute,
        counts,
        latency_hdr: format!("{writer}@{minute}").into_bytes(),
        updated_at: budgetd::service::now(),
    };
    // Each writer rewrites its own rows (per rollup and for the whole bake); a reader gets
    // every writer's whole-bake rows and the rollups from a minute on.
    a.write_rollups(
        &[],
        &[
            row("order->inventory", "one", 60_000, counts(4, 4)),
            row("order->inventory", "one", WHOLE_BAKE, counts(10, 12)),
        ],
        &[],
    )
    .await
    .unwrap();
    b.write_rollups(
        &[],
        &[
            row("order->inventory", "two", 120_000, counts(5, 9)),
            row("order->inventory", "two", WHOLE_BAKE, counts(5, 9)),
            row("order->user", "two", WHOLE_BAKE, counts(1, 1)),
        ],
        &[],
    )
    .await
    .unwrap();
    a.write_rollups(
        &[],
        &[row("order->inventory", "one", WHOLE_BAKE, counts(11, 14))],
        &[],
    )
    .await
    .unwrap();
    let mut mine: Vec<(i64, Counts, Vec<u8>)> = b
        .writer_canary_health(&second, "one", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.minute, r.counts, r.latency_hdr))
        .collect();
    mine.sort_by_key(|m| m.0);
    assert_eq!(
        mine.iter().map(|m| (m.0, m.1)).collect::<Vec<_>>(),
        [(WHOLE_BAKE, counts(11, 14)), (60_000, counts(4, 4))]
    );
    assert!(mine.iter().any(|m| m.2 == b"one@-1"));
    let seen = |from| {
        let a = a.clone();
        let second = second.clone();
        async move {
            a.canary_health(&second, from)
                .await
                .unwrap()
                .into_iter()
                .map(|r| (r.segment, r.writer, r.minute, r.counts))
                .collect::<Vec<_>>()
        }
    };
    let inv = "order->inventory".to_owned();
    assert_eq!(
        seen(120_000).await,
        [
            (inv.clone(), "one".to_owned(), WHOLE_BAKE, counts(11, 14)),
            (inv.clone(), "two".to_owned(), WHOLE_BAKE, counts(5, 9)),
            (inv.clone(), "two".to_owned(), 120_000, counts(5, 9)),
            (
                "order->user".to_owned(),
                "two".to_owned(),
                WHOLE_BAKE,
                counts(1, 1)
            ),
        ]
    );
    assert_eq!(seen(0).await.len(), 5);
    // Rollups expire; the whole-bake rows stay.
    assert_eq!(a.expire_canary_health(120_000).await.unwrap(), 1);
    assert_eq!(seen(0).await.len(), 4);
    // A batch's rows are written however many they are (more than one statement can bind),
    // with rollups in the same transaction.
    let many: Vec<CanaryHealthRow> = (0..2_500)
        .map(|i| row("order->user", "three", 600_000 + i * 60_000, counts(1, 1)))
        .collect();
    a.write_rollups(&[], &many, &[]).await.unwrap();
    let three = b.writer_canary_health(&second, "three", 0).await.unwrap();
    assert_eq!(three.len(), 2_500);

    // Abort: the previous baseline is approved again and live for everyone; once only.
    let (ended, published) = a
        .end_rollout(
            &second,
            CanaryEnd::Abort,
            "a NACK",
            &json!({"acked": 1}),
            audit("budgetd"),
        )
        .await
        .unwrap();
    assert_eq!(
        (ended.state, ended.reason.as_deref(), ended.end_revision),
        (
            CanaryState::Aborted,
            Some("a NACK"),
            Some(published.revision)
        )
    );
    assert_eq!(published.baseline.doc.id, first);
    assert_eq!(ended.figures, Some(json!({"acked": 1})));
    assert_eq!(
        a.get_baseline(&first).await.unwrap().doc.state,
        BaselineState::Approved
    );
    let canary_doc = a.get_baseline(&second).await.unwrap().doc;
    assert_eq!(
        (canary_doc.state, canary_doc.superseded_by.as_deref()),
        (BaselineState::Superseded, Some(first.as_str()))
    );
    let again = b
        .end_rollout(
            &second,
            CanaryEnd::Promote,
            "late",
            &json!({}),
            audit("budgetd"),
        )
        .await;
    assert!(
        matches!(again, Err(StoreError::Conflict(ref m)) if m.contains("aborted already: a NACK")),
        "{again:?}"
    );
    assert!(a.baking_rollouts().await.unwrap().is_empty());
    let (p, _) = a
        .stable_publication("checkout", i64::MAX)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((p.revision, p.kind.as_str()), (published.revision, "abort"));
    // Before the canary's revision it is still the first approval.
    let (p, _) = a
        .stable_publication("checkout", canary.revision)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.revision, stable_rev);
    let missing = a
        .end_rollout(&first, CanaryEnd::Promote, "x", &json!({}), audit("abe"))
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rollouts_contract() {
    rollouts_contract(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rollouts_contract() {
    rollouts_contract(Backend::Postgres).await;
}

/// A write abandoned at any point (a request timed out, a client gone) leaves the store
/// usable: the next write on every pooled connection works. sqlx's `begin` is not cancel-safe
/// (a BEGIN sent but not yet answered when its future is dropped left the connection inside a
/// transaction, and every later write on it failed), so the store begins in a task of its own.
async fn abandoned_writes_leave_the_store_usable(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = store::connect(&db.url).await.unwrap();
    let mut cancelled = 0;
    for i in 0..400u64 {
        let mut t = topology();
        t.entry_budget_ms = 800 + i;
        // Dropped after 0–199 µs: before, during or after its BEGIN.
        let write = store.put_topology("checkout", &t, audit("uma"));
        if tokio::time::timeout(std::time::Duration::from_micros(i % 200), write)
            .await
            .is_err()
        {
            cancelled += 1;
        }
    }
    assert!(cancelled > 50, "only {cancelled} writes were abandoned");
    // Every connection of the pool takes a write again.
    for i in 0..32u64 {
        let mut t = topology();
        t.entry_budget_ms = 10_000 + i;
        store
            .put_topology("checkout", &t, audit("uma"))
            .await
            .unwrap_or_else(|e| panic!("write {i} after abandoned ones: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_abandoned_writes_leave_the_store_usable() {
    abandoned_writes_leave_the_store_usable(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_abandoned_writes_leave_the_store_usable() {
    abandoned_writes_leave_the_store_usable(Backend::Postgres).await;
}

/// The approved baselines uploads compare with, kept parsed (`service::approved`): the same
/// copy while the store's id and SHA-256 match, the new one after an approval, at most
/// `KEPT_CHAINS` chains.
async fn approved_baselines_are_kept_while_they_hold(backend: Backend) {
    use budgetd::service::approved::{ApprovedBaselines, KEPT_CHAINS};
    let Some((_db, store, _)) = two_stores(backend).await else {
        return;
    };
    let approve = |chain: String| {
        let store = store.clone();
        async move {
            let run = NewRun {
                chain: chain.clone(),
                ..new_run("uma")
            };
            let current = store
                .current_baseline_ref(&chain)
                .await
                .unwrap()
                .map(|r| r.0);
            let doc = BaselineDocument {
                chain: chain.clone(),
                ..draft("")
            };
            let (_, draft) = store
                .insert_run(run, Some(doc), current, audit("uma"))
                .await
                .unwrap();
            let id = draft.unwrap().doc.id;
            store
                .decide(&id, Verdict::Approve, None, audit("abe"))
                .await
                .unwrap();
            id
        }
    };
    let kept = ApprovedBaselines::default();
    assert!(kept.current(store.as_ref(), "c0").await.unwrap().is_none());
    let mut ids = Vec::new();
    for i in 0..=KEPT_CHAINS {
        let chain = format!("c{i}");
        store
            .put_topology(&chain, &topology(), audit("uma"))
            .await
            .unwrap();
        ids.push(approve(chain.clone()).await);
        let current = kept.current(store.as_ref(), &chain).await.unwrap().unwrap();
        assert_eq!(current.doc.id, ids[i]);
        assert!(kept.kept() <= KEPT_CHAINS, "{} kept", kept.kept());
    }
    let last = format!("c{KEPT_CHAINS}");
    let once = kept.current(store.as_ref(), &last).await.unwrap().unwrap();
    let again = kept.current(store.as_ref(), &last).await.unwrap().unwrap();
    assert!(Arc::ptr_eq(&once, &again), "the same copy while it holds");
    let newer = approve(last.clone()).await;
    let now = kept.current(store.as_ref(), &last).await.unwrap().unwrap();
    assert_eq!(now.doc.id, newer);
    assert_eq!(now.doc.state, BaselineState::Approved);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_approved_baselines_are_kept_while_they_hold() {
    approved_baselines_are_kept_while_they_hold(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_approved_baselines_are_kept_while_they_hold() {
    approved_baselines_are_kept_while_they_hold(Backend::Postgres).await;
}

/// The state written in `id`'s stored document, whether it holds a decision, and whether its
/// row says the document is behind it.
async fn stored(raw: &mut sqlx::AnyConnection, id: &str) -> (BaselineState, bool, bool) {
    let row = sqlx::query(
        "SELECT d.document, b.document_behind FROM baselines b \
         JOIN baseline_documents d ON d.baseline_id = b.id WHERE b.id = $1",
    )
    .bind(id)
    .fetch_one(raw)
    .await
    .unwrap();
    let document: String = sqlx::Row::get(&row, 0);
    let behind: Option<i64> = sqlx::Row::get(&row, 1);
    let doc: BaselineDocument = serde_json::from_str(&document).unwrap();
    (doc.state, doc.decision.is_some(), behind == Some(1))
}

/// On SQLite a baseline's document is written when it is created and when a decision is
/// recorded; a state change without one (the draft superseded by the next upload, the approved
/// baseline by the next approval, a rollback) changes the baseline's row alone, and the store
/// renders the document's state fields from it. On PostgreSQL every change writes the document
/// (replicas of the previous version read it from the row). Either way every read and archive
/// item gives the bytes `to_bytes` gives for the baseline as it is, with their SHA-256.
async fn documents_are_written_once_per_decision(backend: Backend) {
    let Some((db, store, other)) = two_stores(backend).await else {
        return;
    };
    // What the stored document says after a change without a decision: as it was (SQLite), or
    // the change (PostgreSQL).
    let apart = backend == Backend::Sqlite;
    let left = |before: BaselineState, after: BaselineState, decision: bool| {
        if apart {
            (before, decision, true)
        } else {
            (after, decision, false)
        }
    };
    store
        .put_topology("checkout", &topology(), audit("uma"))
        .await
        .unwrap();
    let upload = || {
        let store = store.clone();
        async move {
            let current = store
                .current_baseline_ref("checkout")
                .await
                .unwrap()
                .map(|r| r.0);
            let (_, draft) = store
                .insert_run(new_run("uma"), Some(draft("")), current, audit("uma"))
                .await
                .unwrap();
            draft.unwrap().doc.id
        }
    };
    sqlx::any::install_default_drivers();
    let mut raw = <sqlx::AnyConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    // What both stores serve for `id`: canonical bytes of its state, their SHA-256.
    let served = |id: String| {
        let (store, other) = (store.clone(), other.clone());
        async move {
            let a = store.get_baseline(&id).await.unwrap();
            let b = other.get_baseline(&id).await.unwrap();
            assert_eq!(a.bytes, b.bytes, "{id}");
            assert_eq!(
                a.bytes.as_bytes(),
                a.doc.to_bytes(),
                "{id}: canonical bytes"
            );
            assert_eq!(a.sha256, served_sha(&store, &id).await, "{id}");
            a.doc
        }
    };

    let d1 = upload().await;
    let d2 = upload().await;
    assert_eq!(
        stored(&mut raw, &d1).await,
        left(BaselineState::Draft, BaselineState::Superseded, false),
        "superseding a draft writes its document again only on PostgreSQL"
    );
    let doc = served(d1.clone()).await;
    assert_eq!(doc.state, BaselineState::Superseded);
    assert_eq!(doc.superseded_by.as_deref(), Some(d2.as_str()));

    store
        .decide(&d2, Verdict::Approve, None, audit("abe"))
        .await
        .unwrap();
    assert_eq!(
        stored(&mut raw, &d2).await,
        (BaselineState::Approved, true, false),
        "a decision is written into the document"
    );
    let d3 = upload().await;
    store
        .decide(&d3, Verdict::Approve, None, audit("abe"))
        .await
        .unwrap();
    assert_eq!(
        stored(&mut raw, &d2).await,
        left(BaselineState::Approved, BaselineState::Superseded, true)
    );
    let doc = served(d2.clone()).await;
    assert_eq!(doc.state, BaselineState::Superseded);
    assert_eq!(doc.superseded_by.as_deref(), Some(d3.as_str()));
    assert!(doc.decision.is_some(), "the decision is kept");
    assert_eq!(
        store
            .current_baseline("checkout")
            .await
            .unwrap()
            .unwrap()
            .doc
            .id,
        d3
    );

    // Back to d2: approved again, its link cleared, its decision kept; d3 superseded.
    store.rollback("checkout", &d2, audit("abe")).await.unwrap();
    let doc = served(d2.clone()).await;
    assert_eq!(
        (
            doc.state,
            doc.superseded_by.is_none(),
            doc.decision.is_some()
        ),
        (BaselineState::Approved, true, true)
    );
    assert_eq!(served(d3.clone()).await.state, BaselineState::Superseded);
    let current = other.current_baseline("checkout").await.unwrap().unwrap();
    assert_eq!(current.bytes.as_bytes(), doc.to_bytes());

    // The archive's newest item of each baseline holds what is served.
    let later = (chrono::Utc::now() + chrono::Duration::minutes(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let claimed = store.archive_claim(&later, &later, 1000).await.unwrap();
    for id in [&d1, &d2, &d3] {
        let key = format!("{id}.json");
        let item = claimed.iter().find(|i| i.key.ends_with(&key)).unwrap();
        let now = store.get_baseline(id).await.unwrap();
        assert_eq!(
            (&item.body, &item.sha256),
            (&now.bytes, &now.sha256),
            "{id}"
        );
    }
    let listed = store.baselines_created_on(None).await.unwrap();
    for baseline in &listed {
        let served = store.get_baseline(&baseline.doc.id).await.unwrap();
        assert_eq!(baseline.bytes, served.bytes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_documents_are_written_once_per_decision() {
    documents_are_written_once_per_decision(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_documents_are_written_once_per_decision() {
    documents_are_written_once_per_decision(Backend::Postgres).await;
}

/// A store from before migration 0013 held each document in its baseline's row; after it the
/// store serves the same bytes with the same SHA-256, whatever they hold (here a superseded
/// baseline from before `superseded_by` was a column). On PostgreSQL a replica of the previous
/// version, still running, reads and writes the documents in the rows as before.
async fn stores_from_before_0013_serve_the_same_documents(backend: Backend) {
    use budget_core::baseline::Decision;
    use sha2::Digest;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let folder = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(folder);
    let mut before = sqlx::migrate::Migrator::new(dir).await.unwrap();
    before.migrations = before
        .migrations
        .iter()
        .filter(|m| m.version < 13)
        .cloned()
        .collect();
    assert_eq!(before.migrations.len(), 12);
    sqlx::any::install_default_drivers();
    let url = match backend {
        Backend::Sqlite => format!("{}?mode=rwc", db.url),
        Backend::Postgres => db.url.clone(),
    };
    let mut raw = <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    before.run(&mut raw).await.unwrap();
    let at = budgetd::service::now();
    sqlx::query("INSERT INTO chains (name, created_at, updated_at) VALUES ('checkout', $1, $1)")
        .bind(&at)
        .execute(&mut raw)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO runs (id, chain, topology_version, format, source_sha256, source_size, data, uploaded_by, created_at) \
         VALUES ('run-20260101-001', 'checkout', 1, 'native', '00', 1, '{}', 'uma', $1)",
    )
    .bind(&at)
    .execute(&mut raw)
    .await
    .unwrap();
    let approved = BaselineDocument {
        id: "bl-20260101-002".into(),
        state: BaselineState::Approved,
        decision: Some(Decision {
            by: "abe".into(),
            at: at.clone(),
            comment: Some("looks right".into()),
        }),
        ..draft("run-20260101-001")
    };
    let superseded = BaselineDocument {
        id: "bl-20260101-001".into(),
        state: BaselineState::Superseded,
        superseded_by: Some(approved.id.clone()),
        ..draft("run-20260101-001")
    };
    let mut legacy = Vec::new();
    for doc in [&superseded, &approved] {
        let bytes = String::from_utf8(doc.to_bytes()).unwrap();
        let sha = hex::encode(sha2::Sha256::digest(bytes.as_bytes()));
        sqlx::query(
            "INSERT INTO baselines (id, chain, run_id, topology_version, state, reason, has_errors, document, sha256, created_at, created_by, updated_at) \
             VALUES ($1, 'checkout', 'run-20260101-001', 1, $2, 'recompute', 0, $3, $4, $5, 'uma', $5)",
        )
        .bind(&doc.id)
        .bind(doc.state.as_str())
        .bind(&bytes)
        .bind(&sha)
        .bind(&at)
        .execute(&mut raw)
        .await
        .unwrap();
        legacy.push((doc.id.clone(), bytes, sha));
    }
    drop(raw);

    let store = store::connect(&db.url).await.unwrap();
    for (id, bytes, sha) in &legacy {
        let served = store.get_baseline(id).await.unwrap();
        assert_eq!((&served.bytes, &served.sha256), (bytes, sha), "{id}");
    }
    // The migrated approved baseline is superseded by the next approval: its decision stays.
    let (_, next) = store
        .insert_run(
            new_run("uma"),
            Some(draft("")),
            Some(approved.id.clone()),
            audit("uma"),
        )
        .await
        .unwrap();
    let next = next.unwrap().doc.id;
    store
        .decide(&next, Verdict::Approve, None, audit("abe"))
        .await
        .unwrap();
    let now = store.get_baseline(&approved.id).await.unwrap();
    assert_eq!(now.doc.state, BaselineState::Superseded);
    assert_eq!(now.doc.superseded_by.as_deref(), Some(next.as_str()));
    assert_eq!(now.doc.decision, approved.decision);
    assert_eq!(now.bytes.as_bytes(), now.doc.to_bytes());
    assert_eq!(now.sha256, served_sha(&store, &approved.id).await);
    if backend == Backend::Sqlite {
        return;
    }
    // The previous version's reads and writes, on the migrated PostgreSQL database.
    let mut raw = <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    for id in [&approved.id, &next] {
        let row = sqlx::query("SELECT document, sha256 FROM baselines WHERE id = $1")
            .bind(id)
            .fetch_one(&mut raw)
            .await
            .unwrap();
        let served = store.get_baseline(id).await.unwrap();
        let (document, sha): (String, String) = (sqlx::Row::get(&row, 0), sqlx::Row::get(&row, 1));
        assert_eq!((document, sha), (served.bytes, served.sha256), "{id}");
    }
    let old_style = BaselineDocument {
        id: "bl-20260101-003".into(),
        ..draft("run-20260101-001")
    };
    let bytes = String::from_utf8(old_style.to_bytes()).unwrap();
    let sha = hex::encode(sha2::Sha256::digest(bytes.as_bytes()));
    sqlx::query(
        "INSERT INTO baselines (id, chain, run_id, topology_version, state, reason, has_errors, document, sha256, created_at, created_by, updated_at) \
         VALUES ($1, 'checkout', 'run-20260101-001', 1, 'draft', 'recompute', 0, $2, $3, $4, 'uma', $4)",
    )
    .bind(&old_style.id)
    .bind(&bytes)
    .bind(&sha)
    .bind(&at)
    .execute(&mut raw)
    .await
    .unwrap();
    let served = store.get_baseline(&old_style.id).await.unwrap();
    assert_eq!((served.bytes, served.sha256), (bytes, sha));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_stores_from_before_0013_serve_the_same_documents() {
    stores_from_before_0013_serve_the_same_documents(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stores_from_before_0013_serve_the_same_documents() {
    stores_from_before_0013_serve_the_same_documents(Backend::Postgres).await;
}

/// An export from before migration 0013 holds each document in the `document` column of
/// `baselines` (as the baseline is, state fields current); importing it fills the documents'
/// table, and the store serves the same bytes. An export from after must hold that table.
async fn exports_from_before_the_documents_table_import(backend: Backend) {
    let Some((_db, source, _)) = two_stores(Backend::Sqlite).await else {
        return;
    };
    source
        .put_topology("checkout", &topology(), audit("uma"))
        .await
        .unwrap();
    for _ in 0..2 {
        source
            .insert_run(new_run("uma"), Some(draft("")), None, audit("uma"))
            .await
            .unwrap();
    }
    let mut out = Vec::new();
    source.export_all(&mut out, &|_, _| {}).await.unwrap();
    let export: store::Export = serde_json::from_slice(&out).unwrap();
    assert_eq!(export.tables["baseline_documents"].rows.len(), 2);

    let mut old = export.clone();
    old.schema_version = 12;
    old.tables.remove("baseline_documents");
    let baselines = old.tables.get_mut("baselines").unwrap();
    let column = |name: &str| baselines.columns.iter().position(|c| c == name).unwrap();
    let (id_at, behind_at) = (column("id"), column("document_behind"));
    baselines.columns.remove(behind_at);
    baselines.columns.push("document".into());
    let mut served = Vec::new();
    for row in &mut baselines.rows {
        row.remove(behind_at);
        let id = row[id_at].as_str().unwrap().to_owned();
        let now = source.get_baseline(&id).await.unwrap();
        row.push(json!(now.bytes));
        served.push((id, now.bytes, now.sha256));
    }
    assert!(served
        .iter()
        .any(|(_, bytes, _)| bytes.contains("\"superseded\"")));

    let Some(target_db) = TestDb::new(backend).await else {
        return;
    };
    let target = store::connect(&target_db.url).await.unwrap();
    let mut newer = export.clone();
    newer.tables.remove("baseline_documents");
    let e = target.import_all(&newer, &|_, _| {}).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("table \"baseline_documents\" is missing"),
        "{e}"
    );
    // Documents that belong to no baseline, are not baseline documents, or hold another
    // baseline's id are refused by name (and leave the target empty).
    let documents = &export.tables["baseline_documents"];
    let hostile = |edit: &dyn Fn(&mut Vec<Vec<serde_json::Value>>)| {
        let mut bad = export.clone();
        edit(&mut bad.tables.get_mut("baseline_documents").unwrap().rows);
        bad
    };
    let edited = |document: &serde_json::Value| {
        let mut doc: serde_json::Value = serde_json::from_str(document.as_str().unwrap()).unwrap();
        doc["entry_budget_ms"] = json!(doc["entry_budget_ms"].as_u64().unwrap() + 100);
        json!(serde_json::to_string_pretty(&doc).unwrap())
    };
    let cases: [(store::Export, &str); 4] = [
        (
            hostile(&|rows| rows[0][0] = json!("bl-nope")),
            "baseline_id \"bl-nope\" is not a baseline of the export",
        ),
        (
            hostile(&|rows| rows[1][1] = json!("{\"x\": 1}")),
            "is not a baseline document",
        ),
        (
            hostile(&|rows| (rows[0][1], rows[1][1]) = (rows[1][1].clone(), rows[0][1].clone())),
            "holds the id",
        ),
        (
            hostile(&|rows| rows[0][1] = edited(&rows[0][1])),
            "does not match the baseline's SHA-256",
        ),
    ];
    assert_eq!(documents.columns, ["baseline_id", "document"]);
    for (bad, expected) in cases {
        let e = target.import_all(&bad, &|_, _| {}).await.unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }
    let counts = target.import_all(&old, &|_, _| {}).await.unwrap();
    assert!(counts.contains(&("baseline_documents", 2)), "{counts:?}");
    for (id, bytes, sha) in &served {
        let now = target.get_baseline(id).await.unwrap();
        assert_eq!((&now.bytes, &now.sha256), (bytes, sha), "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_exports_from_before_the_documents_table_import() {
    exports_from_before_the_documents_table_import(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_exports_from_before_the_documents_table_import() {
    exports_from_before_the_documents_table_import(Backend::Postgres).await;
}

/// An item the archive worker claims while an upload supersedes its baseline is let go at
/// once: no claim is left holding its key (which would hold back the newer item of the key
/// for the whole lease, 30 s in the server). Uploads and claims race on two connections pools.
async fn claims_of_changed_baselines_release_their_key(backend: Backend) {
    let Some((db, uploads, worker)) = two_stores(backend).await else {
        return;
    };
    uploads
        .put_topology("checkout", &topology(), audit("uma"))
        .await
        .unwrap();
    let far = (chrono::Utc::now() + chrono::Duration::hours(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    // At least 150 uploads, and more (up to 3,000) until the worker has claimed one: SQLite
    // serialises the two pools' writes, and a busy machine can starve the worker's for a while.
    let claimed = Arc::new(AtomicUsize::new(0));
    let uploading = tokio::spawn({
        let claimed = claimed.clone();
        async move {
            let mut n = 0;
            while n < 150 || (claimed.load(Ordering::Relaxed) == 0 && n < 3000) {
                uploads
                    .insert_run(new_run("uma"), Some(draft("")), None, audit("uma"))
                    .await
                    .unwrap();
                n += 1;
            }
            n
        }
    });
    while !uploading.is_finished() {
        let now = budgetd::service::now();
        for item in worker.archive_claim(&now, &far, 1000).await.unwrap() {
            worker.archive_done(item.id, &now).await.unwrap();
            claimed.fetch_add(1, Ordering::Relaxed);
        }
        tokio::task::yield_now().await;
    }
    let uploaded = uploading.await.unwrap();
    assert!(
        claimed.load(Ordering::Relaxed) > 0,
        "the worker claimed nothing during {uploaded} uploads"
    );
    sqlx::any::install_default_drivers();
    let mut raw = <sqlx::AnyConnection as sqlx::Connection>::connect(&db.url)
        .await
        .unwrap();
    let held: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, state FROM archive_outbox WHERE locked_until IS NOT NULL ORDER BY id",
    )
    .fetch_all(&mut raw)
    .await
    .unwrap();
    assert!(
        held.is_empty(),
        "claims still held after the worker let go: {held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_claims_of_changed_baselines_release_their_key() {
    claims_of_changed_baselines_release_their_key(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claims_of_changed_baselines_release_their_key() {
    claims_of_changed_baselines_release_their_key(Backend::Postgres).await;
}

/// Agents are claimed and written in multi-row statements whose text depends on the row
/// count; a connection keeps only a full chunk's prepared. Batches of every size (agents open
/// and flush in whatever groups arrive) kept one prepared statement per size on each
/// connection, with its compiled program: unbounded in practice. PostgreSQL lists a session's
/// prepared statements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_agent_batches_of_every_size_leave_no_statement_prepared_per_size() {
    use budgetd::store::Fleet as _;
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = budgetd::store::postgres::open(&db.url).await.unwrap();
    agent_tokens(&store).await;
    let t = "2026-01-01T00:00:00.000Z";
    let fleet: Vec<AgentStatus> = (0..1052)
        .map(|n| agent(&format!("agent-{n:04}"), "sizes", "hash-a", t))
        .collect();
    // Six sizes, then a full chunk of the store's 1,000 rows, whose statements are kept: the
    // count below sees them (so it looks where they would be).
    let sizes = [2, 3, 5, 8, 13, 21, 1000];
    let mut from = 0;
    for n in sizes {
        let batch = &fleet[from..from + n];
        from += n;
        let claims = store.claim_agents(batch).await.unwrap();
        assert!(claims.iter().all(|c| matches!(c, AgentClaim::Bound(_))));
        store.upsert_agents(batch).await.unwrap();
    }
    // Every connection of the pool, held at once: each lists its own prepared statements.
    // (One being given back as this starts is waited for, or the pool opens another.)
    let pool = store.pool();
    let mut connections = Vec::new();
    while connections.len() < pool.size() as usize {
        connections.push(pool.acquire().await.unwrap());
    }
    let open = connections.len();
    let mut prepared: Vec<String> = Vec::new();
    for c in &mut connections {
        let mine: Vec<String> = sqlx::query_scalar(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO agents%'",
        )
        .fetch_all(&mut **c)
        .await
        .unwrap();
        prepared.extend(mine);
    }
    let rows = |sql: &String| sql.matches("), (").count() + 1;
    let kept: Vec<usize> = prepared.iter().map(rows).collect();
    assert_eq!(
        kept,
        [1000, 1000],
        "agent writes kept prepared on {open} connections, by their rows: the full chunk's claim and flush only"
    );
}
