//! The budget-agent library against a real server: start, follow, ACK/NACK, disk cache,
//! refusal of inverted configs, reconnect after a restart.

use std::time::Duration;

use budget_agent::{Agent, AgentConfig, AgentError, Snapshot, Source};
use budget_core::baseline::{BaselineDocument, BaselineReason, BaselineState};
use budget_core::example::{
    CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY, CHECKOUT_TOPOLOGY_B,
};
use budget_core::run::RunUpload;
use budget_core::Topology;
use budgetd::store::{self, Audit, Verdict};
use serde_json::json;

use crate::helpers::{draft_a, publish_new_chain};
use crate::helpers::{example, spawn_app, Backend, TestApp};

fn config(app: &TestApp, token: &str, id: &str, cache: &std::path::Path) -> AgentConfig {
    let mut c = AgentConfig::new(app.grpc_url(), token, id, "order");
    c.cache_path = Some(cache.join(format!("{id}.json")));
    c.connect_timeout = Duration::from_secs(1);
    c.first_config_timeout = Duration::from_secs(3);
    c
}

async fn acked(app: &TestApp, token: &str, agent_id: &str) -> (i64, Option<i64>, Option<String>) {
    let agents = app.get("/api/v1/agents", token).await.expect(200).json();
    let a = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["agent_id"] == agent_id)
        .cloned()
        .unwrap_or(json!({}));
    (
        a["acked"].as_i64().unwrap_or(0),
        a["nack_revision"].as_i64(),
        a["nack_error"].as_str().map(str::to_owned),
    )
}

/// The actor of forged writes.
pub fn forger_audit() -> Audit {
    Audit {
        actor: "forger".into(),
        action: "test",
        chain: Some("checkout".into()),
        subject: None,
        detail: json!({}),
        at: budgetd::service::now(),
    }
}

/// Example B computed and written straight into the store as a draft, bypassing the
/// service's checks (its inversions are errors the API would refuse); its id.
pub async fn insert_inverted(app: &TestApp, run_id: &str) -> String {
    let store = store::connect(&app.db_url).await.unwrap();
    let t: Topology = serde_json::from_str(CHECKOUT_TOPOLOGY_B).unwrap();
    let run = serde_json::from_str::<RunUpload>(CHECKOUT_RUN_A)
        .unwrap()
        .into_run(&t)
        .unwrap();
    let c = budget_core::compute(&t, &run, &budget_core::distribution::NoDistributions).unwrap();
    let doc = BaselineDocument {
        id: String::new(),
        chain: "checkout".into(),
        state: BaselineState::Draft,
        reason: BaselineReason::Recompute,
        run_id: run_id.into(),
        topology_version: 1,
        created_at: budgetd::service::now(),
        created_by: "forger".into(),
        entry_budget_ms: t.entry_budget_ms,
        breaker_window_ms: t.breaker_window_ms,
        max_recovery: t.max_recovery,
        segments: c.segments,
        findings: vec![],
        drift: vec![],
        drift_baseline_id: None,
        decision: None,
        superseded_by: None,
    };
    store
        .insert_baseline(doc, forger_audit())
        .await
        .unwrap()
        .doc
        .id
}

/// [`insert_inverted`], then "approved" in the store: a forged publication the agent must
/// refuse.
async fn publish_inverted(app: &TestApp, run_id: &str) -> i64 {
    let id = insert_inverted(app, run_id).await;
    let store = store::connect(&app.db_url).await.unwrap();
    store
        .decide(&id, Verdict::Approve, None, forger_audit())
        .await
        .unwrap()
        .1
        .unwrap()
        .revision
}

async fn agent_follows_acks_and_nacks(app: &TestApp) {
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let cache = tempfile::tempdir().unwrap();
    let a_id = draft_a(app, &p).await;
    let rev_a = app.approve(&p.approver, &a_id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();

    let agent = Agent::start(config(app, &token, "order-1", cache.path()))
        .await
        .unwrap();
    assert_eq!(
        (agent.source(), agent.revision()),
        (Source::ControlPlane, rev_a)
    );
    assert_eq!(
        agent.budget("order->inventory"),
        Some(Duration::from_millis(208))
    );
    assert_eq!(
        agent.budget("order->payment"),
        Some(Duration::from_millis(390))
    );
    let inherited = tokio::time::Instant::now() + Duration::from_millis(100);
    assert_eq!(
        agent.deadline("order->inventory", Some(inherited)),
        Some(inherited)
    );
    let d = agent.deadline("order->user", None).unwrap();
    assert!(d <= tokio::time::Instant::now() + Duration::from_millis(9));
    assert!(cache.path().join("order-1.json").exists());
    // The fleet shows which client library the agent runs.
    let agents = app.get("/api/v1/agents", &token).await.expect(200).json();
    assert_eq!(
        agents["agents"][0]["client"],
        json!(budget_agent::CLIENT),
        "{agents:#}"
    );
    assert!(budget_agent::CLIENT.starts_with("rust/0."));

    // A drift approved → the agent follows and ACKs.
    let c = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    let rev_c = app
        .approve(&p.approver, c["baseline_id"].as_str().unwrap())
        .await
        .expect(200)
        .json()["revision"]
        .as_i64()
        .unwrap();
    let mut rx = agent.subscribe();
    tokio::time::timeout(
        Duration::from_secs(10),
        rx.wait_for(|s| s.revision == rev_c),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        agent
            .snapshot()
            .segment("order->payment")
            .unwrap()
            .timeout_ms,
        507
    );
    for _ in 0..100 {
        if acked(app, &p.uploader, "order-1").await.0 == rev_c {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(acked(app, &p.uploader, "order-1").await.0, rev_c);

    // A forged inverted publication: NACKed with the numbers, the old config kept.
    let run_id = c["run_id"].as_str().unwrap();
    let rev_bad = publish_inverted(app, run_id).await;
    let mut nack = (0, None, None);
    for _ in 0..200 {
        nack = acked(app, &p.uploader, "order-1").await;
        if nack.1 == Some(rev_bad) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(nack.1, Some(rev_bad), "the NACK reaches fleet status");
    let reason = nack.2.unwrap();
    assert!(reason.contains("909") && reason.contains("109"), "{reason}");
    assert_eq!(agent.revision(), rev_c);
    assert_eq!(
        agent
            .snapshot()
            .segment("order->payment")
            .unwrap()
            .timeout_ms,
        507
    );
    let (rev, refusal) = agent.last_refusal().unwrap();
    assert_eq!((rev, refusal.segment.as_str()), (rev_bad, "gateway->order"));
    agent.shutdown();
}

/// Server down: start from the cache; inverted cache: refuse; server back: reconnect.
async fn cache_refusal_and_reconnect(app: TestApp) {
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let cache = tempfile::tempdir().unwrap();
    let a_id = draft_a(&app, &p).await;
    let rev_a = app.approve(&p.approver, &a_id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let cfg = config(&app, &token, "order-1", cache.path());
    let first = Agent::start(cfg.clone()).await.unwrap();
    assert_eq!(first.source(), Source::ControlPlane);

    let app = {
        // Down: a new agent starts from the disk cache.
        let stopped = app.pause().await;
        let second = Agent::start(cfg.clone()).await.unwrap();
        assert_eq!((second.source(), second.revision()), (Source::Cache, rev_a));
        assert_eq!(
            second.budget("order->inventory"),
            Some(Duration::from_millis(208))
        );
        let app = stopped.start().await;
        // Back: both agents reconnect and receive the next publication.
        let c = app
            .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
            .await
            .expect(201)
            .json();
        let rev_c = app
            .approve(&p.approver, c["baseline_id"].as_str().unwrap())
            .await
            .expect(200)
            .json()["revision"]
            .as_i64()
            .unwrap();
        for agent in [&first, &second] {
            let mut rx = agent.subscribe();
            tokio::time::timeout(
                Duration::from_secs(20),
                rx.wait_for(|s| s.revision == rev_c),
            )
            .await
            .expect("reconnected")
            .unwrap();
        }
        app
    };

    // An inverted config in the cache and no server: the agent refuses to start, naming the numbers.
    let live = budget_core::example::checkout_live(CHECKOUT_TOPOLOGY_B, 99).unwrap();
    let bad_cache = cache.path().join("inverted.json");
    budget_agent::cache::write(&bad_cache, &Snapshot::from_chains([live])).unwrap();
    let mut offline = AgentConfig::new("http://127.0.0.1:1", &token, "order-9", "order");
    offline.cache_path = Some(bad_cache);
    offline.connect_timeout = Duration::from_millis(300);
    match Agent::start(offline).await {
        Err(AgentError::Refused {
            segment, message, ..
        }) => {
            assert_eq!(segment, "gateway->order");
            assert!(
                message.contains("909") && message.contains("109"),
                "{message}"
            );
        }
        Err(other) => panic!("expected a refusal, got {other}"),
        Ok(_) => panic!("expected a refusal, the agent started"),
    }
    // Neither server nor cache: unavailable.
    let mut nothing = AgentConfig::new("http://127.0.0.1:1", &token, "order-8", "order");
    nothing.connect_timeout = Duration::from_millis(300);
    assert!(matches!(
        Agent::start(nothing).await,
        Err(AgentError::Unavailable { .. })
    ));
    app.stop().await;
}

crate::on_both_backends!(agent_follows_acks_and_nacks);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_cache_refusal_and_reconnect() {
    cache_refusal_and_reconnect(spawn_app(Backend::Sqlite).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cache_refusal_and_reconnect() {
    let Some(app) = spawn_app(Backend::Postgres).await else {
        return;
    };
    cache_refusal_and_reconnect(app).await;
}

/// An agent started from a cache that lacks one of its chains (the chain was added to its
/// config since the cache was written) is sent that chain when the control plane is back,
/// although the chain's publication is older than the cache's revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_the_cache_lacks_is_sent_on_reconnect() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let a_id = draft_a(&app, &p).await;
    app.approve(&p.approver, &a_id).await.expect(200);
    let run_a = example(CHECKOUT_RUN_A);
    let rev_eu = publish_new_chain(&app, &p, "checkout-eu", CHECKOUT_TOPOLOGY, run_a).await;

    // The cache: checkout alone, at the newest revision (the agent watched only checkout).
    let cache = tempfile::tempdir().unwrap();
    let mut cfg = config(&app, &token, "order-1", cache.path());
    cfg.chains = vec!["checkout".into(), "checkout-eu".into()];
    let live = budget_core::example::checkout_live(CHECKOUT_TOPOLOGY, rev_eu - 1).unwrap();
    let mut cached = Snapshot::from_chains([live]);
    cached.revision = rev_eu;
    budget_agent::cache::write(cfg.cache_path.as_ref().unwrap(), &cached).unwrap();

    let stopped = app.pause().await;
    let agent = Agent::start(cfg).await.unwrap();
    assert_eq!((agent.source(), agent.revision()), (Source::Cache, rev_eu));
    let app = stopped.start().await;
    let mut rx = agent.subscribe();
    let got = tokio::time::timeout(
        Duration::from_secs(20),
        rx.wait_for(|s| s.chains.contains_key("checkout-eu")),
    )
    .await
    .expect("checkout-eu after the reconnect")
    .unwrap()
    .clone();
    assert_eq!(
        (
            got.revision,
            got.chains.keys().map(String::as_str).collect::<Vec<_>>()
        ),
        (rev_eu, vec!["checkout", "checkout-eu"])
    );
    agent.shutdown();
    app.stop().await;
}
