//! Canary rollouts (issue 16, SPEC §9) with real agents on real gRPC: percent and label
//! selection, stable across reconnects; promotion by a person and on a clean bake; abort by a
//! person, on a NACK and on canary agents' amplification; a restart mid-bake; two replicas.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use budget_agent::{Agent, AgentConfig};
use budget_core::canary::{bucket, Rollout, Selector};
use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C};
use budget_proto::v1::{ReportRequest, SegmentWindow};
use serde_json::{json, Value};

use crate::grpc::{authed, client, watch_req};
use crate::helpers::{
    draft_a, example, spawn_app, spawn_replica, Backend, People, TestApp, TestDb, ADMIN_TOKEN,
};

/// Polls `check` every 100 ms for up to 20 s; panics with `what` if it never holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never: {what}");
}

fn agent_config(app: &TestApp, token: &str, id: &str, zone: &str) -> AgentConfig {
    let mut c = AgentConfig::new(app.grpc_url(), token, id, "order");
    c.connect_timeout = Duration::from_secs(1);
    c.first_config_timeout = Duration::from_secs(5);
    c.labels = BTreeMap::from([("zone".to_owned(), zone.to_owned())]);
    c
}

/// The baseline an agent runs for `checkout`, and at which revision.
fn running(agent: &Agent) -> (String, i64) {
    let s = agent.snapshot();
    (s.chains["checkout"].baseline_id.clone(), s.revision)
}

async fn rollout(app: &TestApp, id: &str) -> Value {
    app.get(&format!("/api/v1/baselines/{id}/rollout"), ADMIN_TOKEN)
        .await
        .expect(200)
        .json()
}

/// `POST /baselines/{id}/{verb}` (promote or abort) as `token`, expecting `status`; the answer.
async fn end_canary(
    app: &TestApp,
    token: &str,
    id: &str,
    verb: &str,
    body: Value,
    status: u16,
) -> Value {
    app.post(&format!("/api/v1/baselines/{id}/{verb}"), token, body)
        .await
        .expect(status)
        .json()
}

/// Registers a webhook for the canary events (at a closed port: the deliveries are queued
/// and logged whatever the receiver does); its id.
async fn canary_hook(app: &TestApp) -> String {
    let body = json!({"url": "http://127.0.0.1:9/hook", "secret": "0123456789abcdef",
                      "events": ["rollout.promoted", "rollout.aborted"]});
    app.post("/api/v1/webhooks", ADMIN_TOKEN, body)
        .await
        .expect(201)
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits until the webhook `hook` has a delivery of `event`.
async fn delivered(app: &TestApp, hook: &str, event: &str) {
    eventually(&format!("a {event} delivery"), || async {
        let log = app
            .get(&format!("/api/v1/webhooks/{hook}/deliveries"), ADMIN_TOKEN)
            .await
            .expect(200)
            .json();
        log["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["event"] == event)
    })
    .await;
}

/// Run A approved for everyone, then run C's drift draft: (A's id, its revision, C's id).
async fn a_live_and_c_drafted(app: &TestApp, p: &People) -> (String, i64, String) {
    let a = draft_a(app, p).await;
    let rev_a = app.approve(&p.approver, &a).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let c = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json()["baseline_id"]
        .as_str()
        .unwrap()
        .to_owned();
    (a, rev_a, c)
}

async fn approve_with(
    app: &TestApp,
    token: &str,
    id: &str,
    rollout: Value,
) -> crate::helpers::Answer {
    app.post(
        &format!("/api/v1/baselines/{id}/approve"),
        token,
        json!({"comment": "canary first", "rollout": rollout}),
    )
    .await
}

/// Starts one agent per id (zone `a` for ids in `zone_a`, `b` otherwise), each on its
/// first config.
async fn start_agents(app: &TestApp, token: &str, ids: &[String], zone_a: &[&str]) -> Vec<Agent> {
    let mut agents = Vec::new();
    for id in ids {
        let zone = if zone_a.contains(&id.as_str()) {
            "a"
        } else {
            "b"
        };
        agents.push(
            Agent::start(agent_config(app, token, id, zone))
                .await
                .unwrap(),
        );
    }
    agents
}

/// Waits until every agent runs the baseline `want` says for its id.
async fn all_run(agents: &[Agent], ids: &[String], want: impl Fn(&str) -> (String, i64)) {
    for (agent, id) in agents.iter().zip(ids) {
        let expected = want(id);
        eventually(&format!("{id} runs {expected:?}"), || {
            let now = running(agent);
            let expected = expected.clone();
            async move { now == expected }
        })
        .await;
    }
}

/// Percent selection: `hash(agent_id) mod 100 < N` gets the canary, the rest keep the live
/// baseline, the same agents after they reconnect; the budgets view and the rollout say who
/// gets what; no other draft is approved meanwhile; a person promotes it.
async fn a_percent_canary_reaches_the_same_agents_until_promoted(app: &TestApp) {
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let (a, rev_a, c) = a_live_and_c_drafted(app, &p).await;
    let ids: Vec<String> = (0..12).map(|i| format!("order-{i}")).collect();
    let members: BTreeSet<String> = ids.iter().filter(|id| bucket(id) < 40).cloned().collect();
    assert!(
        !members.is_empty() && members.len() < ids.len(),
        "the ids must split: {members:?}"
    );
    let mut agents = start_agents(app, &token, &ids, &[]).await;

    let rollout_body = json!({"canary": {"percent": 40}, "bake_s": 600, "auto": false});
    let approved = approve_with(app, &p.approver, &c, rollout_body)
        .await
        .expect(200)
        .json();
    let rev_c = approved["revision"].as_i64().unwrap();
    assert_eq!(approved["superseded"], json!(a));
    let want = |id: &str| {
        if members.contains(id) {
            (c.clone(), rev_c)
        } else {
            (a.clone(), rev_a)
        }
    };
    all_run(&agents, &ids, want).await;

    // Who gets what, from the API.
    let live = app
        .get("/api/v1/chains/checkout/budgets", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (live["revision"].as_i64(), live["baseline_id"].as_str()),
        (Some(rev_a), Some(a.as_str()))
    );
    assert_eq!(live["canary"]["selector"], json!({"percent": 40}));
    assert_eq!(live["canary"]["budgets"]["revision"], json!(rev_c));
    assert_eq!(live["canary"]["budgets"]["baseline_id"], json!(c));
    eventually("every member ACKed the canary", || async {
        rollout(app, &c).await["canary"]["acked"] == json!(members.len())
    })
    .await;
    let r = rollout(app, &c).await;
    let listed: BTreeSet<String> = serde_json::from_value(r["canary"]["members"].clone()).unwrap();
    assert_eq!(listed, members);
    assert_eq!(r["kind"], "canary");
    assert_eq!(r["canary"]["state"], "baking");
    assert_eq!(r["canary"]["previous_baseline_id"], json!(a));
    assert_eq!(r["canary"]["nacked"], 0);

    // Reconnects keep the selection: every agent stopped and started again.
    for agent in agents.drain(..) {
        agent.shutdown();
    }
    let agents = start_agents(app, &token, &ids, &[]).await;
    all_run(&agents, &ids, want).await;

    // While it bakes, no other draft of the chain is approved.
    let again = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_A))
        .await
        .expect(201)
        .json()["baseline_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let check = app
        .get(&format!("/api/v1/baselines/{again}/approval"), &p.approver)
        .await
        .expect(200)
        .json();
    assert_eq!(check["may_approve"], false, "{check:#}");
    assert_eq!(check["blockers"][0]["code"], "canary_baking", "{check:#}");
    let refused = app.approve(&p.approver, &again).await.expect(409);
    assert!(refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("canary baking"));
    app.post(
        &format!("/api/v1/baselines/{again}/reject"),
        &p.approver,
        json!({"comment": "not now"}),
    )
    .await
    .expect(200);

    // An uploader may not promote; an approver does.
    end_canary(app, &p.uploader, &c, "promote", json!({}), 403).await;
    let looks_good = json!({"comment": "looks good"});
    let ended = end_canary(app, &p.approver, &c, "promote", looks_good, 200).await;
    assert_eq!(ended["state"], "promoted");
    assert_eq!(ended["reason"], "promoted by abe: looks good");
    let rev_p = ended["end_revision"].as_i64().unwrap();
    assert!(rev_p > rev_c);
    all_run(&agents, &ids, |_| (c.clone(), rev_p)).await;
    let live = app
        .get("/api/v1/chains/checkout/budgets", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(live["canary"], Value::Null);
    assert_eq!(live["revision"], json!(rev_p));
    // Ended once.
    app.post(
        &format!("/api/v1/baselines/{c}/abort"),
        &p.approver,
        json!({}),
    )
    .await
    .expect(409);
    for agent in agents {
        agent.shutdown();
    }
}

/// Label selection; an abort gives canary agents the previous baseline back as a new
/// revision, approved again, the canary's superseded by it; audited.
async fn a_label_canary_aborted_by_a_person(app: &TestApp) {
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let (a, rev_a, c) = a_live_and_c_drafted(app, &p).await;
    let ids: Vec<String> = ["web-1", "web-2", "web-3"].map(String::from).to_vec();
    let agents = start_agents(app, &token, &ids, &["web-2"]).await;
    let body = json!({"canary": {"labels": {"zone": "a"}}, "bake_s": 600, "auto": false});
    let rev_c = approve_with(app, &p.approver, &c, body)
        .await
        .expect(200)
        .json()["revision"]
        .as_i64()
        .unwrap();
    let want = |id: &str| {
        if id == "web-2" {
            (c.clone(), rev_c)
        } else {
            (a.clone(), rev_a)
        }
    };
    all_run(&agents, &ids, want).await;
    assert_eq!(
        rollout(app, &c).await["canary"]["members"],
        json!(["web-2"])
    );

    let hook = canary_hook(app).await;
    let why = json!({"comment": "p99 up on zone a"});
    let ended = end_canary(app, &p.approver, &c, "abort", why, 200).await;
    assert_eq!(ended["state"], "aborted");
    assert_eq!(ended["reason"], "aborted by abe: p99 up on zone a");
    let rev_x = ended["end_revision"].as_i64().unwrap();
    all_run(&agents, &ids, |_| (a.clone(), rev_x)).await;
    assert_eq!(app.baseline(&a).await["state"], "approved");
    let canary = app.baseline(&c).await;
    assert_eq!(
        (canary["state"].as_str(), canary["superseded_by"].as_str()),
        (Some("superseded"), Some(a.as_str()))
    );
    let r = rollout(app, &a).await;
    assert_eq!(
        (r["kind"].as_str(), r["revision"].as_i64()),
        (Some("abort"), Some(rev_x))
    );
    let audit = app
        .get("/api/v1/audit?chain=checkout", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    let abort = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "rollout.abort")
        .unwrap_or_else(|| panic!("no rollout.abort in {audit:#}"));
    assert_eq!(
        (abort["actor"].as_str(), abort["subject"].as_str()),
        (Some("abe"), Some(c.as_str()))
    );
    delivered(app, &hook, "rollout.aborted").await;
    for agent in agents {
        agent.shutdown();
    }
}

/// With `auto`, a bake that ends with every canary agent ACKed and nothing broken promotes.
async fn a_clean_bake_is_promoted(app: &TestApp) {
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let (_, _, c) = a_live_and_c_drafted(app, &p).await;
    let ids: Vec<String> = ["svc-1", "svc-2"].map(String::from).to_vec();
    let agents = start_agents(app, &token, &ids, &["svc-1", "svc-2"]).await;
    let hook = canary_hook(app).await;
    let body = json!({"canary": {"labels": {"zone": "a"}}, "bake_s": 2});
    approve_with(app, &p.approver, &c, body).await.expect(200);
    eventually("the bake promotes", || async {
        rollout(app, &c).await["canary"]["state"] == "promoted"
    })
    .await;
    let r = rollout(app, &c).await["canary"].clone();
    assert_eq!(
        r["reason"],
        "the bake ended: all 2 canary agents ACKed, no rule broken"
    );
    assert_eq!(r["ended_by"], "budgetd (canary evaluator)");
    let rev_p = r["end_revision"].as_i64().unwrap();
    all_run(&agents, &ids, |_| (c.clone(), rev_p)).await;
    delivered(app, &hook, "rollout.promoted").await;
    for agent in agents {
        agent.shutdown();
    }
}

/// A rollback during a canary ends it (aborted, saying so) and its revision reaches every
/// agent, canary or not.
async fn a_rollback_ends_a_canary(app: &TestApp) {
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let (a, _, c) = a_live_and_c_drafted(app, &p).await;
    // A third baseline, D (run A again, a drift from C), approved for everyone: A and C are
    // both older approved baselines to roll back to.
    let c_rev = app.approve(&p.approver, &c).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let d = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_A))
        .await
        .expect(201)
        .json()["baseline_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ids: Vec<String> = ["rb-1", "rb-2"].map(String::from).to_vec();
    let agents = start_agents(app, &token, &ids, &["rb-1"]).await;
    all_run(&agents, &ids, |_| (c.clone(), c_rev)).await;
    let body = json!({"canary": {"labels": {"zone": "a"}}, "bake_s": 600});
    approve_with(app, &p.approver, &d, body).await.expect(200);
    let rolled = app
        .post(
            "/api/v1/chains/checkout/rollback",
            &p.approver,
            json!({"baseline_id": a}),
        )
        .await
        .expect(200)
        .json();
    let rev_r = rolled["revision"].as_i64().unwrap();
    let r = rollout(app, &d).await["canary"].clone();
    assert_eq!(
        (
            r["state"].as_str(),
            r["reason"].as_str(),
            r["end_revision"].as_i64()
        ),
        (
            Some("aborted"),
            Some(format!("rolled back to {a} by abe").as_str()),
            Some(rev_r)
        ),
        "{r:#}"
    );
    all_run(&agents, &ids, |_| (a.clone(), rev_r)).await;
    // Nothing bakes any more: the budgets view has no canary, and a promote finds it ended.
    let live = app
        .get("/api/v1/chains/checkout/budgets", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (live["canary"].clone(), live["baseline_id"].clone()),
        (Value::Null, json!(a))
    );
    end_canary(app, &p.approver, &d, "promote", json!({}), 409).await;
    // Audited as the canary's end too.
    let audit = app
        .get("/api/v1/audit?chain=checkout", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    let ended = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "rollout.abort")
        .unwrap_or_else(|| panic!("no rollout.abort in {audit:#}"));
    assert_eq!(ended["subject"], json!(d));
    for agent in agents {
        agent.shutdown();
    }
}

crate::on_both_backends!(
    a_rollback_ends_a_canary,
    a_percent_canary_reaches_the_same_agents_until_promoted,
    a_label_canary_aborted_by_a_person,
    a_clean_bake_is_promoted,
);

/// A forged inverted draft approved as a canary straight in the store (the API would refuse
/// it): canary agents NACK it and the evaluator aborts at once, long before the bake ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nack_aborts_the_canary() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let a = draft_a(&app, &p).await;
    app.approve(&p.approver, &a).await.expect(200);
    let ids: Vec<String> = ["n-1", "n-2"].map(String::from).to_vec();
    let agents = start_agents(&app, &token, &ids, &["n-1"]).await;
    let run_id = app.baseline(&a).await["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let forged = crate::agent::insert_inverted(&app, &run_id).await;
    let store = budgetd::store::connect(&app.db_url).await.unwrap();
    let rollout_req = Rollout {
        canary: Selector::Labels(BTreeMap::from([("zone".into(), "a".into())])),
        bake_s: 600,
        auto: true,
    };
    let (_, published) = store
        .approve_canary(
            &forged,
            None,
            &rollout_req,
            &budgetd::clock::after(Duration::from_secs(600)),
            crate::agent::forger_audit(),
        )
        .await
        .unwrap();
    eventually("the NACK aborts the canary", || async {
        rollout(&app, &forged).await["canary"]["state"] == "aborted"
    })
    .await;
    let r = rollout(&app, &forged).await["canary"].clone();
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("1 canary agent(s) refused the config (NACK); first: n-1:"),
        "{reason}"
    );
    let rev_x = r["end_revision"].as_i64().unwrap();
    assert!(rev_x > published.revision);
    // Both agents run A at the abort's revision: n-1 had kept A (it refused the canary).
    all_run(&agents, &ids, |_| (a.clone(), rev_x)).await;
    // n-1 accepted the abort's revision since; its refusal of the canary stays on record.
    eventually("n-1's ACK of the abort is stored", || async {
        let r = rollout(&app, &forged).await;
        r["acked"] == 2 && r["canary"]["nacked"] == 1
    })
    .await;
    for agent in agents {
        agent.shutdown();
    }
    app.stop().await;
}

/// 10 calls of `order->inventory` in 30 attempts: amplification 3.
fn amplified_window(start_ms: i64) -> SegmentWindow {
    SegmentWindow {
        chain: "checkout".into(),
        segment: "order->inventory".into(),
        start_unix_ms: start_ms,
        end_unix_ms: start_ms + 1000,
        calls: 10,
        attempts: 30,
        retries: [("unavailable".to_owned(), 20)].into(),
        outcomes: [("ok".to_owned(), 10)].into(),
        latency_hdr: crate::feedback::hdr(&[20_000; 10]),
    }
}

async fn report(app: &TestApp, token: &str, agent: &str, window: SegmentWindow) {
    let accepted = client(app)
        .await
        .report(authed(
            token,
            ReportRequest {
                agent_id: agent.into(),
                windows: vec![window],
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .accepted_windows;
    assert_eq!(accepted, 1);
}

/// Canary agents reporting attempts / calls above 2 abort the canary; the same figures from
/// an agent outside it count for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_agents_amplification_aborts_it() {
    let (app, token, a, c, streams) = canary_with_two_watchers().await;
    let start = chrono::Utc::now().timestamp_millis() + 1000;

    report(&app, &token, "out", amplified_window(start)).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = rollout(&app, &c).await["canary"].clone();
    assert_eq!(
        (r["state"].as_str(), r["health"].as_array().map(Vec::len)),
        (Some("baking"), Some(0)),
        "{r:#}"
    );

    report(&app, &token, "in", amplified_window(start)).await;
    eventually("the amplification aborts the canary", || async {
        rollout(&app, &c).await["canary"]["state"] == "aborted"
    })
    .await;
    let r = rollout(&app, &c).await["canary"].clone();
    assert_eq!(
        r["reason"],
        "amplification on order->inventory: 3.000 > 2 on canary agents over the bake so far (10 calls, 30 attempts)"
    );
    let h = &r["health"][0];
    assert_eq!(
        (
            &h["segment"],
            &h["calls"],
            &h["attempts"],
            &h["amplification"],
            &h["kill_rate"],
            &h["samples"]
        ),
        (
            &json!("order->inventory"),
            &json!(10),
            &json!(30),
            &json!(3.0),
            &json!(0.0),
            &json!(10)
        ),
        "{r:#}"
    );
    // 20 ms as HdrHistogram keeps it (3 significant digits), nearest rank.
    let p99 = h["p99_ms"].as_f64().unwrap();
    assert!((20.0..20.02).contains(&p99), "{p99}");
    assert_eq!(app.baseline(&a).await["state"], "approved");
    drop(streams);
    app.stop().await;
}

/// A canary (agents labelled zone=a) over C, with two raw Watch streams: `in` (zone a) and
/// `out`; the app, the agent token, A's and C's ids, the streams.
async fn canary_with_two_watchers() -> (
    TestApp,
    String,
    String,
    String,
    Vec<tonic::Streaming<budget_proto::v1::BudgetUpdate>>,
) {
    canary_on(spawn_app(Backend::Sqlite).await.unwrap()).await
}

/// [`canary_with_two_watchers`] on `app`.
async fn canary_on(
    app: TestApp,
) -> (
    TestApp,
    String,
    String,
    String,
    Vec<tonic::Streaming<budget_proto::v1::BudgetUpdate>>,
) {
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let (a, _, c) = a_live_and_c_drafted(&app, &p).await;
    let mut member = watch_req("in", &["checkout"], "order", 0);
    member.labels = [("zone".to_owned(), "a".to_owned())].into();
    let outsider = watch_req("out", &["checkout"], "order", 0);
    let mut streams = Vec::new();
    for req in [member, outsider] {
        let mut s = client(&app)
            .await
            .watch(authed(&token, req))
            .await
            .unwrap()
            .into_inner();
        crate::grpc::next(&mut s).await;
        streams.push(s);
    }
    let body = json!({"canary": {"labels": {"zone": "a"}}, "bake_s": 600});
    approve_with(&app, &p.approver, &c, body).await.expect(200);
    (app, token, a, c, streams)
}

/// SPEC §8's windows, not only the bake's totals: a canary healthy over its bake so far whose
/// last complete rollup amplifies 3× is aborted, naming the window. (Rollups of one second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_regression_aborts_over_the_last_window() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let app = crate::helpers::spawn_app_on(db, |url| {
        let mut s = crate::helpers::settings_for(url);
        s.feedback.rollup_ms = 1000;
        s
    })
    .await;
    let (app, token, _, c, streams) = canary_on(app).await;
    let start = (chrono::Utc::now().timestamp_millis() / 1000 + 1) * 1000;
    let mut healthy = amplified_window(start);
    (healthy.calls, healthy.attempts) = (1000, 1000);
    healthy.retries = Default::default();
    healthy.outcomes = [("ok".to_owned(), 1000)].into();
    report(&app, &token, "in", healthy).await;
    report(&app, &token, "in", amplified_window(start + 1000)).await;
    eventually(
        "the last rollup's amplification aborts the canary",
        || async { rollout(&app, &c).await["canary"]["state"] == "aborted" },
    )
    .await;
    let r = rollout(&app, &c).await["canary"].clone();
    assert_eq!(
        r["reason"],
        "amplification on order->inventory: 3.000 > 2 on canary agents over the last minute (10 calls, 30 attempts)"
    );
    // Over the whole bake: 1,010 calls in 1,030 attempts.
    assert_eq!(
        (&r["health"][0]["calls"], &r["health"][0]["attempts"]),
        (&json!(1010), &json!(1030))
    );
    drop(streams);
    app.stop().await;
}

/// Canary agents whose payment latencies drift more than 20 % from the canary's baseline,
/// with the drift rule's 1,000 samples, abort it; 999 samples are not enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_agents_drift_aborts_it() {
    let (app, token, _, c, streams) = canary_with_two_watchers().await;
    let start = chrono::Utc::now().timestamp_millis() + 1000;
    // C's payment: p99 210 ms, p999 390 ms, timeout 507 ms; these calls take 480 ms.
    let slow = |n: u64, start_ms: i64| SegmentWindow {
        chain: "checkout".into(),
        segment: "order->payment".into(),
        start_unix_ms: start_ms,
        end_unix_ms: start_ms + 1000,
        calls: n,
        attempts: n,
        retries: Default::default(),
        outcomes: [("ok".to_owned(), n)].into(),
        latency_hdr: crate::feedback::hdr(&vec![480_000; n as usize]),
    };
    report(&app, &token, "in", slow(999, start)).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = rollout(&app, &c).await["canary"].clone();
    assert_eq!(r["state"], "baking", "{r:#}");
    assert_eq!(r["health"][0]["samples"], 999);
    assert!(
        r["health"][0]["drift_pct"].as_f64().unwrap() > 20.0,
        "{r:#}"
    );

    report(&app, &token, "in", slow(1, start + 1000)).await;
    eventually("the drift aborts the canary", || async {
        rollout(&app, &c).await["canary"]["state"] == "aborted"
    })
    .await;
    let r = rollout(&app, &c).await["canary"].clone();
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("drift on order->payment: +")
            && reason.ends_with("from the canary's baseline on canary agents over the bake so far (p99 480255 µs, p999 480255 µs, 1000 samples)"),
        "{reason}"
    );
    drop(streams);
    app.stop().await;
}

/// The control plane stops mid-bake and starts again after the bake's end: the bake resumes
/// from the database and promotes, and the agent that reconnects gets the promotion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_bake_resumes_it() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let p = app.people().await;
    let token = app.token("agent", "order-agent").await;
    let (_, _, c) = a_live_and_c_drafted(&app, &p).await;
    let ids = vec!["r-1".to_owned()];
    let agents = start_agents(&app, &token, &ids, &["r-1"]).await;
    let body = json!({"canary": {"labels": {"zone": "a"}}, "bake_s": 3});
    let rev_c = approve_with(&app, &p.approver, &c, body)
        .await
        .expect(200)
        .json()["revision"]
        .as_i64()
        .unwrap();
    all_run(&agents, &ids, |_| (c.clone(), rev_c)).await;
    eventually("the member's ACK is stored", || async {
        rollout(&app, &c).await["canary"]["acked"] == 1
    })
    .await;
    let stopped = app.pause().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let app = stopped.start().await;
    eventually("the resumed bake promotes", || async {
        rollout(&app, &c).await["canary"]["state"] == "promoted"
    })
    .await;
    let rev_p = rollout(&app, &c).await["canary"]["end_revision"]
        .as_i64()
        .unwrap();
    all_run(&agents, &ids, |_| (c.clone(), rev_p)).await;
    for agent in agents {
        agent.shutdown();
    }
    app.stop().await;
}

/// Two replicas on PostgreSQL: a canary started on one reaches the agents of the other that
/// it selects, both list the same members, and a promotion on the second reaches all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_on_the_canary() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let one = crate::helpers::spawn_app_on(db, crate::helpers::settings_for).await;
    let two = spawn_replica(&one).await;
    let p = one.people().await;
    let token = one.token("agent", "order-agent").await;
    let (a, rev_a, c) = a_live_and_c_drafted(&one, &p).await;
    let ids: Vec<String> = ["pg-1", "pg-2", "pg-3", "pg-4"].map(String::from).to_vec();
    let mut agents = start_agents(&two, &token, &ids[..2], &["pg-1"]).await;
    agents.extend(start_agents(&one, &token, &ids[2..], &["pg-3"]).await);
    let body = json!({"canary": {"labels": {"zone": "a"}}, "bake_s": 600, "auto": false});
    let rev_c = approve_with(&one, &p.approver, &c, body)
        .await
        .expect(200)
        .json()["revision"]
        .as_i64()
        .unwrap();
    let want = |id: &str| {
        if id == "pg-1" || id == "pg-3" {
            (c.clone(), rev_c)
        } else {
            (a.clone(), rev_a)
        }
    };
    all_run(&agents, &ids, want).await;
    for app in [&one, &two] {
        eventually("both members ACKed, seen from either replica", || async {
            let r = rollout(app, &c).await["canary"].clone();
            r["members"] == json!(["pg-1", "pg-3"]) && r["acked"] == 2
        })
        .await;
    }
    let rev_p = two
        .post(
            &format!("/api/v1/baselines/{c}/promote"),
            &p.approver,
            json!({}),
        )
        .await
        .expect(200)
        .json()["end_revision"]
        .as_i64()
        .unwrap();
    all_run(&agents, &ids, |_| (c.clone(), rev_p)).await;
    for agent in agents {
        agent.shutdown();
    }
    two.stop().await;
    one.stop().await;
}

/// Bad rollouts are refused with the field that is wrong, before anything moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rollouts_name_the_field() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    let p = app.people().await;
    let a = draft_a(&app, &p).await;
    // The chain's first baseline: nothing for the other agents to keep.
    let first = approve_with(
        &app,
        &p.approver,
        &a,
        json!({"canary": {"percent": 10}, "bake_s": 60}),
    )
    .await
    .expect(409);
    assert!(
        first.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no approved baseline"),
        "{}",
        first.json()
    );
    assert_eq!(app.baseline(&a).await["state"], "draft", "nothing moved");
    for (rollout, pointer) in [
        (
            json!({"canary": {"percent": 0}, "bake_s": 60}),
            "/rollout/canary/percent",
        ),
        (
            json!({"canary": {"percent": 100}, "bake_s": 60}),
            "/rollout/canary/percent",
        ),
        (
            json!({"canary": {"labels": {}}, "bake_s": 60}),
            "/rollout/canary/labels",
        ),
        (
            json!({"canary": {"percent": 5}, "bake_s": 0}),
            "/rollout/bake_s",
        ),
        (json!({"canary": {"percent": 5}}), "/rollout"),
        (json!({"canary": {"share": 5}, "bake_s": 60}), "/rollout"),
        (json!("10%"), "/rollout"),
        // Never read as "no rollout", which would publish to every agent.
        (json!(null), "/rollout"),
    ] {
        let e = approve_with(&app, &p.approver, &a, rollout.clone())
            .await
            .expect(422)
            .json();
        assert_eq!(
            e["error"]["details"]["violations"][0]["pointer"], pointer,
            "{rollout}: {e}"
        );
    }
    // A misspelt `rollout` is refused, not ignored.
    let typo = app
        .post(
            &format!("/api/v1/baselines/{a}/approve"),
            &p.approver,
            json!({"rolout": {"canary": {"percent": 10}, "bake_s": 60}}),
        )
        .await
        .expect(422)
        .json();
    let message = typo["error"]["message"].as_str().unwrap();
    assert!(message.contains("unknown field `rolout`"), "{typo}");
    assert_eq!(app.baseline(&a).await["state"], "draft");
    app.post(
        &format!("/api/v1/baselines/{a}/promote"),
        &p.approver,
        json!({}),
    )
    .await
    .expect(404);
    app.stop().await;
}
