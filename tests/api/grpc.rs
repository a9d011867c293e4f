//! Live budgets over gRPC: Watch snapshots and updates, resume, rollback, ACK/NACK, auth,
//! health and reflection — real server, real tonic client.

use std::time::Duration;

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY};
use budget_proto::v1::budget_control_client::BudgetControlClient;
use budget_proto::v1::{AckRequest, BudgetUpdate, WatchRequest};
use serde_json::json;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

use crate::helpers::{draft_a, example, publish_new_chain, TestApp};

pub async fn client(app: &TestApp) -> BudgetControlClient<Channel> {
    BudgetControlClient::connect(app.grpc_url()).await.unwrap()
}

pub fn authed<T>(token: &str, msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        "authorization",
        MetadataValue::try_from(format!("Bearer {token}")).unwrap(),
    );
    req
}

pub fn watch_req(agent_id: &str, chains: &[&str], service: &str, known: i64) -> WatchRequest {
    WatchRequest {
        agent_id: agent_id.into(),
        service: service.into(),
        chains: chains.iter().map(|c| c.to_string()).collect(),
        known_revision: known,
        labels: [("host".to_string(), "test-1".to_string())].into(),
        client: "rust/test".into(),
        known_chains: Vec::new(),
    }
}

pub async fn next(stream: &mut Streaming<BudgetUpdate>) -> BudgetUpdate {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("an update within 10 s")
        .unwrap()
        .expect("stream open")
}

pub async fn nothing_within(stream: &mut Streaming<BudgetUpdate>, ms: u64) {
    if let Ok(msg) = tokio::time::timeout(Duration::from_millis(ms), stream.message()).await {
        panic!("expected no update, got {msg:?}");
    }
}

async fn watch_snapshot_update_resume_rollback(app: &TestApp) {
    let p = app.people().await;
    let agent = app.token("agent", "order-agent").await;
    let mut c = client(app).await;
    let a_id = draft_a(app, &p).await;

    // Nothing published yet: the stream stays quiet.
    let mut s1 = c
        .watch(authed(
            &agent,
            watch_req("order-1", &["checkout"], "order", 0),
        ))
        .await
        .unwrap()
        .into_inner();
    nothing_within(&mut s1, 300).await;

    // Approve → update with example A's numbers.
    let rev_a = app.approve(&p.approver, &a_id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let u = next(&mut s1).await;
    assert_eq!(u.revision, rev_a);
    assert_eq!(u.chains.len(), 1);
    let chain = &u.chains[0];
    assert_eq!(
        (
            chain.chain.as_str(),
            chain.baseline_id.as_str(),
            chain.entry_budget_ms
        ),
        ("checkout", a_id.as_str(), 800)
    );
    let seg = |id: &str| chain.segments.iter().find(|s| s.id == id).unwrap().clone();
    assert_eq!(
        (
            seg("order->inventory").timeout_ms,
            seg("order->inventory").budget_ms
        ),
        (44, 208)
    );
    assert_eq!(seg("order->payment").timeout_ms, 390);
    assert_eq!(
        seg("order->inventory").idempotency.unwrap().ttl_ms,
        86_400_000
    );
    assert!(seg("order->payment").retry.unwrap().on_deadline.is_none());

    // By service, from scratch: the snapshot at once.
    let mut s2 = c
        .watch(authed(
            &agent,
            watch_req("inventory-1", &[], "inventory", 0),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut s2).await.revision, rev_a);
    // Resume at the current revision: nothing re-sent.
    let mut s3 = c
        .watch(authed(
            &agent,
            watch_req("order-2", &["checkout"], "order", rev_a),
        ))
        .await
        .unwrap()
        .into_inner();
    nothing_within(&mut s3, 300).await;

    // A drift draft approved → every stream gets the new revision.
    let cd = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    let c_id = cd["baseline_id"].as_str().unwrap().to_owned();
    let rev_c = app.approve(&p.approver, &c_id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    for s in [&mut s1, &mut s2, &mut s3] {
        let u = next(s).await;
        assert_eq!(u.revision, rev_c);
        assert!(u.revision > rev_a);
        assert_eq!(
            u.chains[0]
                .segments
                .iter()
                .find(|s| s.id == "order->payment")
                .unwrap()
                .timeout_ms,
            507
        );
    }

    // Rollback reaches agents with a newer revision and the old numbers.
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
    let u = next(&mut s1).await;
    assert_eq!(
        (u.revision, u.chains[0].baseline_id.as_str()),
        (rev_rb, a_id.as_str())
    );
    assert_eq!(
        u.chains[0]
            .segments
            .iter()
            .find(|s| s.id == "order->payment")
            .unwrap()
            .timeout_ms,
        390
    );

    // ACK and NACK are recorded and visible.
    c.ack(authed(
        &agent,
        AckRequest {
            agent_id: "order-1".into(),
            revision: rev_rb,
            accepted: true,
            error: String::new(),
        },
    ))
    .await
    .unwrap();
    c.ack(authed(
        &agent,
        AckRequest {
            agent_id: "inventory-1".into(),
            revision: rev_c,
            accepted: false,
            error: "inversion at gateway->order".into(),
        },
    ))
    .await
    .unwrap();
    let agents = app
        .get("/api/v1/agents", &p.uploader)
        .await
        .expect(200)
        .json();
    let find = |id: &str| {
        agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent_id"] == id)
            .unwrap()
            .clone()
    };
    let o1 = find("order-1");
    assert_eq!(
        (
            o1["acked"].as_i64(),
            o1["delivered"].as_i64(),
            o1["connected"].as_bool()
        ),
        (Some(rev_rb), Some(rev_rb), Some(true))
    );
    assert_eq!(o1["labels"]["host"], "test-1");
    // The client library the agent named in its Watch (`budgetctl agents` shows it).
    assert_eq!(o1["client"], "rust/test");
    assert_eq!(o1["chains"], json!(["checkout"]));
    let i1 = find("inventory-1");
    assert_eq!(
        (i1["nack_revision"].as_i64(), i1["nack_error"].as_str()),
        (Some(rev_c), Some("inversion at gateway->order"))
    );
    let rollout = app
        .get(&format!("/api/v1/baselines/{a_id}/rollout"), &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(
        (
            rollout["revision"].as_i64(),
            rollout["agents"].as_u64(),
            rollout["acked"].as_u64()
        ),
        (Some(rev_rb), Some(3), Some(1))
    );

    // A dropped stream shows as disconnected.
    drop(s1);
    let mut gone = false;
    for _ in 0..50 {
        let agents = app.get("/api/v1/agents", &p.uploader).await.json();
        if agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["agent_id"] == "order-1" && a["connected"] == false)
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "order-1 should be disconnected");
}

async fn grpc_auth_and_input(app: &TestApp) {
    let mut c = client(app).await;
    let none = c
        .watch(tonic::Request::new(watch_req(
            "a",
            &["checkout"],
            "order",
            0,
        )))
        .await
        .unwrap_err();
    assert_eq!(none.code(), Code::Unauthenticated);
    // Found by attacking the server: a value that holds no bearer token was told "missing".
    let mut basic = tonic::Request::new(watch_req("a", &["checkout"], "order", 0));
    basic
        .metadata_mut()
        .insert("authorization", "Basic YTpi".parse().unwrap());
    let basic = c.watch(basic).await.unwrap_err();
    assert_eq!(basic.code(), Code::Unauthenticated);
    assert_eq!(basic.message(), budgetd::auth::MALFORMED);
    let reader = app.token("reader", "rita").await;
    let denied = c
        .watch(authed(&reader, watch_req("a", &["checkout"], "order", 0)))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let agent = app.token("agent", "bot").await;
    for bad in [
        watch_req("", &["checkout"], "order", 0),
        watch_req("a", &["Bad Chain"], "order", 0),
        watch_req("a", &[], "", 0),
        watch_req("a", &["checkout"], "order", -1),
    ] {
        let e = c.watch(authed(&agent, bad)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    }
    let e = c
        .ack(authed(
            &agent,
            AckRequest {
                agent_id: "never-seen".into(),
                revision: 1,
                accepted: true,
                error: String::new(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    let e = c
        .ack(authed(
            &agent,
            AckRequest {
                agent_id: "x".into(),
                revision: 1,
                accepted: false,
                error: String::new(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    // Health and reflection are served.
    let channel = Channel::from_shared(app.grpc_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "budget.v1.BudgetControl".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

fn ack_req(agent_id: &str, revision: i64, accepted: bool) -> AckRequest {
    AckRequest {
        agent_id: agent_id.into(),
        revision,
        accepted,
        error: if accepted {
            String::new()
        } else {
            "refused".into()
        },
    }
}

/// An agent's fleet entry shows only revisions it was sent: an ACK or NACK of a revision never
/// sent is refused (it would count the agent in a canary it never took part in), and a Watch
/// resuming from a revision newer than any publication here gets the current config.
async fn revisions_are_only_those_sent(app: &TestApp) {
    let p = app.people().await;
    let agent = app.token("agent", "order-agent").await;
    let mut c = client(app).await;
    let a_id = draft_a(app, &p).await;
    let rev = app.approve(&p.approver, &a_id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let mut s1 = c
        .watch(authed(
            &agent,
            watch_req("order-1", &["checkout"], "order", 0),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut s1).await.revision, rev);

    for (revision, accepted) in [(rev + 1, true), (rev + 7, false)] {
        let e = c
            .ack(authed(&agent, ack_req("order-1", revision, accepted)))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(
            e.message().contains(&format!(
                "not sent revision {revision} on this replica (the newest it was sent is {rev})"
            )),
            "{e:?}"
        );
    }
    c.ack(authed(&agent, ack_req("order-1", rev, true)))
        .await
        .unwrap();

    // Resuming from a revision no publication here has: the current config, at once.
    let mut s2 = c
        .watch(authed(
            &agent,
            watch_req("order-2", &["checkout"], "order", rev + 100),
        ))
        .await
        .unwrap()
        .into_inner();
    let u = next(&mut s2).await;
    assert_eq!((u.revision, u.chains.len()), (rev, 1));
    let e = c
        .ack(authed(&agent, ack_req("order-2", rev + 100, true)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");

    let agents = app
        .get("/api/v1/agents", &p.uploader)
        .await
        .expect(200)
        .json();
    let shown = |id: &str| {
        let a = agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent_id"] == id)
            .unwrap()
            .clone();
        (
            a["delivered"].as_i64(),
            a["acked"].as_i64(),
            a["nack_revision"].as_i64(),
        )
    };
    assert_eq!(shown("order-1"), (Some(rev), Some(rev), None));
    assert_eq!(shown("order-2"), (Some(rev), Some(0), None));
}

/// An agent resuming with `known_chains` is sent, at once, every chain it selects and does not
/// hold, even one published before its `known_revision` (a chain added to its selection, or
/// missing from its cache); without `known_chains` (older clients) only newer publications.
async fn chains_not_held_are_sent_whatever_their_revision(app: &TestApp) {
    let p = app.people().await;
    let agent = app.token("agent", "order-agent").await;
    let mut c = client(app).await;
    let checkout = draft_a(app, &p).await;
    let rev_checkout = app.approve(&p.approver, &checkout).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let run_a = example(CHECKOUT_RUN_A);
    let rev_eu = publish_new_chain(app, &p, "checkout-eu", CHECKOUT_TOPOLOGY, run_a).await;
    assert!(rev_checkout < rev_eu);
    let both = ["checkout", "checkout-eu"];
    let resume = |id: &str, held: &[&str]| {
        let mut req = watch_req(id, &both, "order", rev_eu);
        req.known_chains = held.iter().map(|c| c.to_string()).collect();
        authed(&agent, req)
    };

    // The agent had only checkout-eu at rev_eu: checkout (older) comes at once, alone, at
    // the revision the agent is at.
    let mut s1 = c
        .watch(resume("order-1", &["checkout-eu"]))
        .await
        .unwrap()
        .into_inner();
    let u = next(&mut s1).await;
    let sent: Vec<(&str, i64)> = u
        .chains
        .iter()
        .map(|c| (c.chain.as_str(), c.revision))
        .collect();
    assert_eq!(
        (u.revision, sent),
        (rev_eu, vec![("checkout", rev_checkout)])
    );
    // Holding both, or saying nothing of them: nothing is re-sent.
    let mut s2 = c
        .watch(resume("order-2", &both))
        .await
        .unwrap()
        .into_inner();
    nothing_within(&mut s2, 300).await;
    let mut s3 = c.watch(resume("order-3", &[])).await.unwrap().into_inner();
    nothing_within(&mut s3, 300).await;
    // By service: the same rule.
    let mut by_service = watch_req("inventory-1", &[], "inventory", rev_eu);
    by_service.known_chains = vec!["checkout".into()];
    let mut s4 = c
        .watch(authed(&agent, by_service))
        .await
        .unwrap()
        .into_inner();
    let u = next(&mut s4).await;
    assert_eq!(
        (u.revision, u.chains.len(), u.chains[0].chain.as_str()),
        (rev_eu, 1, "checkout-eu")
    );

    // Repeats count once: 300 copies of one name are one chain held.
    let mut s5 = c
        .watch(resume("order-5", &["checkout-eu"; 300]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut s5).await.chains[0].chain, "checkout");

    // Fleet status shows each agent receiving both chains: those sent and those it holds.
    let agents = app
        .get("/api/v1/agents", &p.uploader)
        .await
        .expect(200)
        .json();
    for id in ["order-1", "order-2", "order-3", "inventory-1", "order-5"] {
        let a = agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent_id"] == id)
            .unwrap();
        assert_eq!(a["chains"], json!(both), "{id}");
    }

    // Names are checked like `chains`.
    for (held, expected) in [
        (
            vec!["Not A Chain".to_string()],
            "known_chains: invalid chain name",
        ),
        (
            (0..257).map(|i| format!("c{i}")).collect(),
            "known_chains: at most 256",
        ),
    ] {
        let mut req = watch_req("order-4", &both, "order", rev_eu);
        req.known_chains = held;
        let e = c.watch(authed(&agent, req)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(expected), "{e:?}");
        assert!(!e.message().contains("Not A Chain"), "echoed: {e:?}");
    }
}

/// An update larger than the peer's window and the stream's send buffer (both 64 KiB) is
/// sent: a chain of 900 segments, about 100 KB on the wire, to a client with HTTP/2's default
/// windows. Before, the stream waited for room for the whole update, which never came.
async fn an_update_larger_than_the_send_buffer_is_delivered(app: &TestApp) {
    let p = app.people().await;
    let agent = app.token("agent", "wide-agent").await;
    let mut segments = vec![json!({"id": "edge->api", "caller": "edge", "callee": "api",
        "class": "volatile"})];
    let mut measured = vec![json!({"id": "edge->api", "samples": 100000, "p99_ms": 400,
        "p999_ms": 600})];
    for i in 0..899 {
        let callee = format!("ledger-reconciliation-worker-{i:03}");
        let id = format!("api->{callee}");
        segments.push(json!({"id": id, "caller": "api", "callee": callee,
            "parent": "edge->api", "class": "stable", "stage": 1}));
        measured.push(json!({"id": id, "samples": 100000, "p99_ms": 20, "p999_ms": 40}));
    }
    let topology = json!({"entry_budget_ms": 60000, "segments": segments}).to_string();
    let run = json!({"tool": "test", "segments": measured});
    let revision = publish_new_chain(app, &p, "wide", &topology, run).await;
    // A client with HTTP/2's default windows (65,535 bytes), as grpc-go starts with.
    let addr = app
        .grpc_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let (h2, connection) = crate::streams::connect(addr, None).await;
    tokio::spawn(connection);
    let (_send, mut body) = crate::streams::watch_on(h2, &agent, "wide-1", &["wide"]).await;
    let u = crate::streams::read_update(&mut body, Vec::new()).await;
    assert_eq!((u.revision, u.chains[0].segments.len()), (revision, 900));
    let bytes = budget_proto::codec::frame(&u).len();
    assert!(
        bytes > 64 * 1024,
        "the update is {bytes} bytes: not over the send buffer"
    );
}

/// An agent resuming at or after a canary's revision may hold the canary or the chain's own
/// baseline (its labels may have changed since): it is sent the one it gets now.
async fn a_resume_after_a_canary_is_sent_what_the_agent_gets_now(app: &TestApp) {
    let p = app.people().await;
    let agent = app.token("agent", "order-agent").await;
    let (a, _, c) = crate::canary::a_live_and_c_drafted(app, &p).await;
    let canary = json!({"canary": {"labels": {"zone": "a"}}, "bake_s": 600, "auto": false});
    let rev_c = crate::canary::approve_with(app, &p.approver, &c, canary)
        .await
        .expect(200)
        .json()["revision"]
        .as_i64()
        .unwrap();
    let c_client = client(app).await;
    let watch = |zone: &str, known: i64| {
        let mut req = watch_req("cl-m", &["checkout"], "order", known);
        req.labels.insert("zone".into(), zone.into());
        if known > 0 {
            req.known_chains = vec!["checkout".into()];
        }
        let (mut c_client, req) = (c_client.clone(), authed(&agent, req));
        async move { c_client.watch(req).await.unwrap().into_inner() }
    };
    let mut first = watch("a", 0).await;
    let u = next(&mut first).await;
    assert_eq!(
        (u.revision, u.chains[0].baseline_id.as_str()),
        (rev_c, c.as_str())
    );
    drop(first);
    // Moved out of zone a: the chain's own baseline, at the revision it resumed at.
    let mut moved = watch("b", rev_c).await;
    let u = next(&mut moved).await;
    assert_eq!(
        (u.revision, u.chains[0].baseline_id.as_str()),
        (rev_c, a.as_str())
    );
    drop(moved);
    // Back in zone a: the canary again.
    let mut back = watch("a", rev_c).await;
    let u = next(&mut back).await;
    assert_eq!(
        (u.revision, u.chains[0].baseline_id.as_str()),
        (rev_c, c.as_str())
    );
}

/// An agent resuming with the chains it holds counts as having accepted them: it keeps only
/// accepted entries, and the replica it left may have taken its ACK without storing it before
/// it moved (it does not ACK again). Before, fleet status showed the agent one revision behind
/// (here: never acknowledged) until the next publication.
async fn a_resume_counts_the_held_entries_as_accepted(app: &TestApp) {
    let p = app.people().await;
    let agent = app.token("agent", "order-agent").await;
    let checkout = draft_a(app, &p).await;
    let revision = app.approve(&p.approver, &checkout).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let mut req = watch_req("moved-1", &["checkout"], "order", revision);
    req.known_chains = vec!["checkout".into()];
    let _stream = client(app)
        .await
        .watch(authed(&agent, req))
        .await
        .unwrap()
        .into_inner();
    let mut shown = serde_json::Value::Null;
    for _ in 0..100 {
        let agents = app
            .get("/api/v1/agents", crate::helpers::ADMIN_TOKEN)
            .await
            .expect(200)
            .json();
        shown = agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent_id"] == "moved-1")
            .cloned()
            .unwrap_or_default();
        if shown["connected"] == true && shown["delivered"] == revision {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        (&shown["delivered"], &shown["acked"]),
        (&json!(revision), &json!(revision)),
        "{shown}"
    );
}

crate::on_both_backends!(
    a_resume_counts_the_held_entries_as_accepted,
    a_resume_after_a_canary_is_sent_what_the_agent_gets_now,
    an_update_larger_than_the_send_buffer_is_delivered,
    watch_snapshot_update_resume_rollback,
    grpc_auth_and_input,
    revisions_are_only_those_sent,
    chains_not_held_are_sent_whatever_their_revision
);
