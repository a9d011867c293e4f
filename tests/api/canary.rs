//! Canary rollouts (issue 16, SPEC §9) with real agents on real gRPC: percent and label
//! selection, stable across reconnects; promotion by a person and on a clean bake; abort by a
//! person and by a rollback; a restart mid-bake; two replicas; bad rollouts. What ends a canary
//! from what its agents do (NACKs, SPEC §8's rules) is in `canary_health.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use budget_agent::{Agent, AgentConfig};
use budget_core::canary::bucket;
use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C};
use serde_json::{json, Value};

use crate::helpers::{
    draft_a, example, spawn_app, spawn_replica, Backend, People, TestApp, TestDb, ADMIN_TOKEN,
};

/// Polls `check` every 100 ms for up to 20 s; panics with `what` if it never holds.
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
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

pub(crate) async fn rollout(app: &TestApp, id: &str) -> Value {
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

/// The newest entry of `checkout`'s audit log with `action`.
async fn audit_entry(app: &TestApp, action: &str) -> Value {
    let audit = app
        .get("/api/v1/audit?chain=checkout", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == action)
        .cloned()
        .unwrap_or_else(|| panic!("no {action} in {audit:#}"))
}

/// Uploads `run` to `checkout` as `token`; the draft it opened.
async fn drafted(app: &TestApp, token: &str, run: &str) -> String {
    app.upload(token, "checkout", example(run))
        .await
        .expect(201)
        .json()["baseline_id"]
        .as_str()
        .expect("the upload opened a draft")
        .to_owned()
}

/// Run A approved for everyone, then run C's drift draft: (A's id, its revision, C's id).
pub(crate) async fn a_live_and_c_drafted(app: &TestApp, p: &People) -> (String, i64, String) {
    let a = draft_a(app, p).await;
    let rev_a = app.approve(&p.approver, &a).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let c = drafted(app, &p.uploader, CHECKOUT_RUN_C).await;
    (a, rev_a, c)
}

pub(crate) async fn approve_with(
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
pub(crate) async fn start_agents(
    app: &TestApp,
    token: &str,
    ids: &[String],
    zone_a: &[&str],
) -> Vec<Agent> {
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
pub(crate) async fn all_run(
    agents: &[Agent],
    ids: &[String],
    want: impl Fn(&str) -> (String, i64),
) {
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
    let again = drafted(app, &p.uploader, CHECKOUT_RUN_A).await;
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
    let abort = audit_entry(app, "rollout.abort").await;
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
    let d = drafted(app, &p.uploader, CHECKOUT_RUN_A).await;
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
    let ended = audit_entry(app, "rollout.abort").await;
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
