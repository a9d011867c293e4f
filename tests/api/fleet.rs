//! The agents' side of issue 10, through the real gRPC and HTTP stack: Watch streams limited
//! per token (item 6), gone agents expire and `GET /agents` and baseline lists are paginated
//! (6), an agent id is bound to the token that first watched it, across replicas (11), and
//! what agents send is validated, bounded and escaped in logs (12).

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use budget_proto::v1::{AckRequest, BudgetUpdate, WatchRequest};
use budgetd::Settings;
use reqwest::Method;
use serde_json::{json, Value};
use tonic::{Code, Streaming};

use crate::grpc::{authed, client, watch_req};
use crate::helpers::{
    draft_a, publish_run, settings_for, spawn_app_on, spawn_replica, Backend, TestApp, TestDb,
    ADMIN_TOKEN,
};

async fn app_with(backend: Backend, tune: impl FnOnce(&mut Settings)) -> Option<TestApp> {
    let db = TestDb::new(backend).await?;
    Some(
        spawn_app_on(db, |url| {
            let mut s = settings_for(url);
            tune(&mut s);
            s
        })
        .await,
    )
}

async fn watch(
    app: &TestApp,
    token: &str,
    req: WatchRequest,
) -> Result<Streaming<BudgetUpdate>, tonic::Status> {
    client(app)
        .await
        .watch(authed(token, req))
        .await
        .map(tonic::Response::into_inner)
}

async fn ack(
    app: &TestApp,
    token: &str,
    agent_id: &str,
    accepted: bool,
    error: &str,
) -> Result<(), tonic::Status> {
    client(app)
        .await
        .ack(authed(
            token,
            AckRequest {
                agent_id: agent_id.into(),
                revision: 1,
                accepted,
                error: error.into(),
            },
        ))
        .await
        .map(|_| ())
}

/// A call opened by hand on a raw HTTP/2 connection to the gRPC listener, its request not
/// yet ended: for tests that choose which frames the server sees, and when.
struct RawCall {
    /// Drives the connection; aborting it closes the connection.
    driver: tokio::task::JoinHandle<Result<(), h2::Error>>,
    /// Answered once the server has read every frame sent before the ping.
    ping: h2::PingPong,
    answer: h2::client::ResponseFuture,
    request: h2::SendStream<bytes::Bytes>,
}

/// Opens `budget.v1.BudgetControl/{method}` with the agent token `token` on a connection of
/// its own.
async fn raw_call(app: &TestApp, token: &str, method: &str) -> RawCall {
    let tcp = tokio::net::TcpStream::connect(app.grpc_addr).await.unwrap();
    let (sender, mut connection) = h2::client::handshake(tcp).await.unwrap();
    let ping = connection.ping_pong().unwrap();
    let driver = tokio::spawn(connection);
    let mut sender = sender.ready().await.unwrap();
    let request = http::Request::post(format!(
        "http://{}/budget.v1.BudgetControl/{method}",
        app.grpc_addr
    ))
    .header("content-type", "application/grpc")
    .header("authorization", format!("Bearer {token}"))
    .body(())
    .unwrap();
    let (answer, request) = sender.send_request(request, false).unwrap();
    RawCall {
        driver,
        ping,
        answer,
        request,
    }
}

/// Every agent of `GET /agents`, following `next_cursor`.
async fn all_agents(app: &TestApp, token: &str, limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/agents?limit={limit}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page = app.get(&path, token).await.expect(200).json();
        let items = page["agents"].as_array().unwrap().clone();
        assert!(items.len() <= limit, "a page holds at most limit items");
        all.extend(items);
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return all,
        }
    }
}

async fn agent_ids(app: &TestApp) -> Vec<String> {
    all_agents(app, ADMIN_TOKEN, 1000)
        .await
        .iter()
        .map(|a| a["agent_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Polls `check` every 100 ms for up to `secs`.
async fn eventually<F, Fut>(secs: u64, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

// ---- item 6: streams per token, retention, pages ------------------------------------------

async fn watch_streams_are_limited_per_token(backend: Backend) {
    let Some(app) = app_with(backend, |s| s.agents.max_streams_per_token = 3).await else {
        return;
    };
    let a = app.token("agent", "fleet-a").await;
    let b = app.token("agent", "fleet-b").await;
    let mut held = Vec::new();
    for i in 0..3 {
        let id = format!("a-{i}");
        held.push(
            watch(&app, &a, watch_req(&id, &["checkout"], "order", 0))
                .await
                .unwrap(),
        );
    }
    let refused = watch(&app, &a, watch_req("a-3", &["checkout"], "order", 0))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("max_streams_per_token"),
        "{refused:?}"
    );
    // The same agent id counts too: a reconnect storm cannot go past the limit.
    let again = watch(&app, &a, watch_req("a-0", &["checkout"], "order", 0))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::ResourceExhausted);
    // Other tokens are not affected.
    let _b = watch(&app, &b, watch_req("b-0", &["checkout"], "order", 0))
        .await
        .unwrap();
    // A stream that ends gives its place back.
    drop(held.pop());
    assert!(
        eventually(5, || async {
            watch(&app, &a, watch_req("a-3", &["checkout"], "order", 0))
                .await
                .is_ok()
        })
        .await,
        "the closed stream's place was given back"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_watch_streams_are_limited_per_token() {
    watch_streams_are_limited_per_token(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_watch_streams_are_limited_per_token() {
    watch_streams_are_limited_per_token(Backend::Postgres).await;
}

/// A counter or gauge of `/metrics`.
pub(crate) async fn counter(app: &TestApp, name: &str) -> u64 {
    let answer = app.get("/metrics", ADMIN_TOKEN).await.expect(200);
    String::from_utf8_lossy(&answer.body)
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// Opens `n` Watch streams at once over `connections` connections; the ids that opened.
async fn open_at_once(
    app: &TestApp,
    token: &str,
    n: usize,
    connections: usize,
) -> (Vec<Streaming<BudgetUpdate>>, Vec<tonic::Status>) {
    let mut clients = Vec::new();
    for _ in 0..connections {
        clients.push(client(app).await);
    }
    let opening: Vec<_> = (0..n)
        .map(|i| {
            let mut c = clients[i % connections].clone();
            let req = authed(
                token,
                watch_req(&format!("storm-{i}"), &["checkout"], "order", 0),
            );
            tokio::spawn(async move { c.watch(req).await.map(tonic::Response::into_inner) })
        })
        .collect();
    let (mut open, mut refused) = (Vec::new(), Vec::new());
    for o in opening {
        match o.await.unwrap() {
            Ok(stream) => open.push(stream),
            Err(status) => refused.push(status),
        }
    }
    (open, refused)
}

/// A fleet opening its streams at once — its first start, or every agent reconnecting after
/// a restart — is bound in batches: each Watch opens, with a few store round trips for all
/// of them (before, one to three statements per stream competed for four SQLite connections,
/// and at 10 000 streams Watch calls failed with `internal error` on the pool's timeout).
async fn a_fleet_opening_at_once_is_claimed_in_batches(backend: Backend) {
    const N: usize = 1500;
    let Some(app) = app_with(backend, |s| s.agents.max_streams_per_token = 2 * N).await else {
        return;
    };
    let token = app.token("agent", "storm").await;
    let (claims, batches) = (
        counter(&app, "budgetd_agent_claims_total").await,
        counter(&app, "budgetd_agent_claim_batches_total").await,
    );
    let (open, refused) = open_at_once(&app, &token, N, 8).await;
    assert!(refused.is_empty(), "refused: {:?}", refused.first());
    assert_eq!(open.len(), N);
    let claimed = counter(&app, "budgetd_agent_claims_total").await - claims;
    let trips = counter(&app, "budgetd_agent_claim_batches_total").await - batches;
    // Other tests of this binary claim a few agents of their own meanwhile.
    assert!(claimed >= N as u64, "{claimed} claims counted");
    assert!(
        trips * 10 <= claimed,
        "{claimed} claims took {trips} store round trips"
    );
    let ids = agent_ids(&app).await;
    assert_eq!(ids.iter().filter(|i| i.starts_with("storm-")).count(), N);
    // Every agent reconnecting at once (the first streams end, as at a restart).
    drop(open);
    let (open, refused) = open_at_once(&app, &token, N, 8).await;
    assert!(
        refused.is_empty(),
        "refused on reconnect: {:?}",
        refused.first()
    );
    assert_eq!(open.len(), N);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_fleet_opening_at_once_is_claimed_in_batches() {
    a_fleet_opening_at_once_is_claimed_in_batches(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_fleet_opening_at_once_is_claimed_in_batches() {
    a_fleet_opening_at_once_is_claimed_in_batches(Backend::Postgres).await;
}

async fn gone_agents_expire(backend: Backend) {
    let Some(app) = app_with(backend, |s| s.agents.retention_secs = 2).await else {
        return;
    };
    let token = app.token("agent", "fleet").await;
    let gone = watch(&app, &token, watch_req("gone-1", &["checkout"], "order", 0))
        .await
        .unwrap();
    let _stays = watch(
        &app,
        &token,
        watch_req("stays-1", &["checkout"], "order", 0),
    )
    .await
    .unwrap();
    assert!(
        eventually(5, || async {
            let ids = agent_ids(&app).await;
            ids.contains(&"gone-1".to_owned()) && ids.contains(&"stays-1".to_owned())
        })
        .await
    );
    drop(gone);
    // Gone longer than the retention period: out of GET /agents and out of the database.
    assert!(
        eventually(10, || async {
            !agent_ids(&app).await.contains(&"gone-1".to_owned())
        })
        .await,
        "gone-1 expired"
    );
    let store = budgetd::store::connect(&app.db_url).await.unwrap();
    assert!(
        eventually(5, || async {
            let rows = store.list_agents("", None, 1000).await.unwrap();
            !rows.iter().any(|a| a.agent_id == "gone-1")
        })
        .await,
        "gone-1's row was deleted"
    );
    // A connected agent stays, however long it has been connected.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let agents = all_agents(&app, ADMIN_TOKEN, 100).await;
    let stays = agents
        .iter()
        .find(|a| a["agent_id"] == "stays-1")
        .expect("a connected agent is kept");
    assert_eq!(stays["connected"], true);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_gone_agents_expire() {
    gone_agents_expire(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_gone_agents_expire() {
    gone_agents_expire(Backend::Postgres).await;
}

async fn agents_and_baselines_are_paginated(app: &TestApp) {
    let token = app.token("agent", "fleet").await;
    let mut streams = Vec::new();
    for (service, id) in [
        ("pay", "p-2"),
        ("order", "o-1"),
        ("pay", "p-1"),
        ("order", "o-2"),
        ("cart", "c-1"),
    ] {
        streams.push(
            watch(app, &token, watch_req(id, &[], service, 0))
                .await
                .unwrap(),
        );
    }
    assert!(eventually(5, || async { agent_ids(app).await.len() == 5 }).await);
    let first = app
        .get("/api/v1/agents?limit=2", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(first["agents"].as_array().unwrap().len(), 2);
    assert!(first["next_cursor"].is_string(), "{first}");
    let paged: Vec<String> = all_agents(app, ADMIN_TOKEN, 2)
        .await
        .iter()
        .map(|a| a["agent_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        paged,
        ["c-1", "o-1", "o-2", "p-1", "p-2"],
        "by service, then id"
    );
    let whole = app
        .get("/api/v1/agents", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(whole["agents"].as_array().unwrap().len(), 5);
    assert_eq!(whole["next_cursor"], Value::Null);
    for bad in ["limit=0", "limit=1001", "limit=x", "cursor=zz", "cursor=00"] {
        app.get(&format!("/api/v1/agents?{bad}"), ADMIN_TOKEN)
            .await
            .expect(400);
    }

    // Baselines of a chain, newest first, page by page.
    let p = app.people().await;
    let first_id = draft_a(app, &p).await;
    let run_id = app.baseline(&first_id).await["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut ids = vec![first_id];
    for _ in 0..4 {
        let d = app
            .post(
                "/api/v1/chains/checkout/baselines",
                &p.uploader,
                json!({"run_id": run_id}),
            )
            .await
            .expect(201)
            .json();
        ids.push(d["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/chains/checkout/baselines?limit=2&cursor={c}"),
            None => "/api/v1/chains/checkout/baselines?limit=2".to_owned(),
        };
        let page = app.get(&path, &p.uploader).await.expect(200).json();
        let items = page["baselines"].as_array().unwrap();
        assert!(items.len() <= 2);
        paged.extend(items.iter().map(|b| b["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(paged, ids, "every baseline once, newest first");
    // Each new draft superseded the one before: one pending, four replaced.
    let uploader = &p.uploader;
    let of_state = |state: &'static str| {
        let path = format!("/api/v1/chains/checkout/baselines?state={state}&limit=1000");
        async move { app.get(&path, uploader).await.expect(200).json() }
    };
    let drafts = of_state("draft").await;
    assert_eq!(drafts["baselines"].as_array().unwrap().len(), 1);
    assert_eq!(drafts["baselines"][0]["id"], ids[0]);
    assert_eq!(drafts["next_cursor"], Value::Null);
    let replaced = of_state("superseded").await;
    assert_eq!(replaced["baselines"].as_array().unwrap().len(), 4);
    app.get("/api/v1/chains/checkout/baselines?cursor=nope", &p.uploader)
        .await
        .expect(400);
    // budgetctl follows the pages.
    let listed = crate::releases::budgetctl(
        app,
        &p.uploader,
        &["baseline", "list", "--chain", "checkout", "--json"],
    )
    .await
    .expect(0)
    .json();
    assert_eq!(listed["baselines"].as_array().unwrap().len(), 5);
    let listed = crate::releases::budgetctl(app, &p.uploader, &["agents", "--json"])
        .await
        .expect(0)
        .json();
    assert_eq!(listed["agents"].as_array().unwrap().len(), 5);
}

// ---- item 11: an agent id belongs to its token --------------------------------------------

async fn agent_ids_are_bound_to_their_token(backend: Backend) {
    let Some(app) = app_with(backend, |_| {}).await else {
        return;
    };
    let a = app.token("agent", "team-a").await;
    let b = app.token("agent", "team-b").await;
    // Revision 1, which order-1's stream is sent and ACKs.
    let p = app.people().await;
    let first = draft_a(&app, &p).await;
    app.approve(&p.approver, &first).await.expect(200);
    let stream = watch(&app, &a, watch_req("order-1", &["checkout"], "order", 0))
        .await
        .unwrap();
    // Another token can neither watch, ACK nor NACK as order-1.
    let e = watch(&app, &b, watch_req("order-1", &["checkout"], "evil", 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = ack(&app, &b, "order-1", false, "forged refusal")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = ack(&app, &b, "order-1", true, "").await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    ack(&app, &a, "order-1", true, "").await.unwrap();
    let entry = |agents: Vec<Value>| agents.into_iter().find(|x| x["agent_id"] == "order-1");
    assert!(
        eventually(5, || async {
            entry(all_agents(&app, ADMIN_TOKEN, 100).await)
                .is_some_and(|x| x["acked"] == 1 && x["token"] == "team-a")
        })
        .await
    );
    let order_1 = entry(all_agents(&app, ADMIN_TOKEN, 100).await).unwrap();
    assert_eq!(
        (order_1["service"].as_str(), &order_1["nack_error"]),
        (Some("order"), &Value::Null)
    );

    // The binding is in the database: it holds after the stream ends, on another replica,
    // and after a restart.
    drop(stream);
    assert!(
        eventually(5, || async {
            entry(all_agents(&app, ADMIN_TOKEN, 100).await).is_some_and(|x| x["connected"] == false)
        })
        .await
    );
    let e = watch(&app, &b, watch_req("order-1", &["checkout"], "evil", 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let replica = spawn_replica(&app).await;
    let e = watch(&replica, &b, watch_req("order-1", &["checkout"], "evil", 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let e = ack(&replica, &b, "order-1", false, "forged")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    // Its own token moves to the other replica freely.
    let moved = watch(
        &replica,
        &a,
        watch_req("order-1", &["checkout"], "order", 0),
    )
    .await
    .unwrap();
    drop(moved);
    replica.stop().await;
    let app = app.pause().await.start().await;
    let e = watch(&app, &b, watch_req("order-1", &["checkout"], "evil", 0))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let order_1 = entry(all_agents(&app, ADMIN_TOKEN, 100).await).unwrap();
    assert_eq!(
        (order_1["service"].as_str(), &order_1["nack_error"]),
        (Some("order"), &Value::Null)
    );

    // Once its token is revoked, the id may be taken by another token.
    app.send(Method::DELETE, "/api/v1/tokens/team-a", ADMIN_TOKEN, None)
        .await
        .expect(204);
    let _taken = watch(&app, &b, watch_req("order-1", &["checkout"], "order", 0))
        .await
        .unwrap();
    app.stop().await;
}

/// A Watch whose connection ends while the server is still opening it (the agent gave up, or
/// the network dropped it) leaves its agent disconnected. Before, the opened stream was
/// dropped unserved and the agent read as connected for good.
async fn a_watch_whose_connection_ends_while_it_opens_leaves_its_agent_disconnected(
    backend: Backend,
) {
    let Some(app) = app_with(backend, |_| {}).await else {
        return;
    };
    let agent = app.token("agent", "order-agent").await;
    let p = app.people().await;
    let first = draft_a(&app, &p).await;
    app.approve(&p.approver, &first).await.expect(200);
    const AGENTS: usize = 20;
    for i in 0..AGENTS {
        let RawCall {
            driver,
            mut ping,
            mut request,
            ..
        } = raw_call(&app, &agent, "Watch").await;
        let watch = watch_req(&format!("gone-{i}"), &["checkout"], "order", 0);
        request
            .send_data(budget_proto::codec::frame(&watch), true)
            .unwrap();
        // The server has read the whole request once it answers a ping sent after it; the
        // connection closes then, while the server looks the agent up and claims its id.
        ping.ping(h2::Ping::opaque()).await.unwrap();
        driver.abort();
        let _ = driver.await;
    }
    let gone = |agents: Vec<Value>| {
        agents
            .into_iter()
            .filter(|a| {
                a["agent_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("gone-"))
            })
            .collect::<Vec<_>>()
    };
    // Every opener has ended by then (a request the server had not read in full when its
    // connection closed is dropped unanswered, its agent never listed).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let all_disconnected = eventually(5, || async {
        let gone = gone(all_agents(&app, ADMIN_TOKEN, 100).await);
        !gone.is_empty() && gone.iter().all(|a| a["connected"] == false)
    })
    .await;
    let listed = gone(all_agents(&app, ADMIN_TOKEN, 100).await);
    let connected: Vec<&Value> = listed
        .iter()
        .filter(|a| a["connected"] != false)
        .map(|a| &a["agent_id"])
        .collect();
    assert!(
        all_disconnected,
        "of {} agents whose connection closed, these still read as connected: {connected:?}",
        listed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_watch_whose_connection_ends_while_it_opens_leaves_its_agent_disconnected() {
    a_watch_whose_connection_ends_while_it_opens_leaves_its_agent_disconnected(Backend::Sqlite)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_watch_whose_connection_ends_while_it_opens_leaves_its_agent_disconnected() {
    a_watch_whose_connection_ends_while_it_opens_leaves_its_agent_disconnected(Backend::Postgres)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_agent_ids_are_bound_to_their_token() {
    agent_ids_are_bound_to_their_token(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_agent_ids_are_bound_to_their_token() {
    agent_ids_are_bound_to_their_token(Backend::Postgres).await;
}

// ---- item 12: what agents send is validated and bounded -----------------------------------

async fn agent_input_is_validated_and_bounded(app: &TestApp) {
    let token = app.token("agent", "fleet").await;
    let mut with_label = watch_req("l-1", &["checkout"], "order", 0);
    with_label.labels.insert("host".into(), "a\nb".into());
    let many_chains: Vec<String> = (0..300).map(|i| format!("c{i}")).collect();
    let many_chains: Vec<&str> = many_chains.iter().map(String::as_str).collect();
    let huge_chain = "c".repeat(20_000);
    let mut forged_client = watch_req("k-1", &["checkout"], "order", 0);
    forged_client.client = "go/1.0\nFORGED".into();
    let mut long_client = watch_req("k-2", &["checkout"], "order", 0);
    long_client.client = "go/".repeat(100);
    for (what, bad) in [
        (
            "service with a newline",
            watch_req("s-1", &["checkout"], "order\nFORGED", 0),
        ),
        (
            "agent id with a control character",
            watch_req("s\u{1b}[31m", &["checkout"], "order", 0),
        ),
        (
            "129-character agent id",
            watch_req(&"a".repeat(129), &["checkout"], "order", 0),
        ),
        ("label with a newline", with_label),
        ("client with a newline", forged_client),
        ("300-byte client", long_client),
        ("300 chains", watch_req("s-3", &many_chains, "order", 0)),
        (
            "huge chain name",
            watch_req("s-4", &[huge_chain.as_str()], "order", 0),
        ),
    ] {
        let e = watch(app, &token, bad).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{what}: {e:?}");
        assert!(
            e.message().len() < 512,
            "{what}: the error does not echo the input"
        );
    }
    // A request past the bound is refused before it is decoded (nor held beyond the bound).
    let e = watch(
        app,
        &token,
        watch_req("s-2", &["checkout"], &"s".repeat(3 << 20), 0),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "3 MiB service: {e:?}");
    assert!(e.message().contains("at most 65536 bytes"), "{e:?}");
    // A NACK's error is kept, cut to 4 KiB at a character boundary (of revision 1, which the
    // stream is sent).
    let p = app.people().await;
    let first = draft_a(app, &p).await;
    app.approve(&p.approver, &first).await.expect(200);
    let _s = watch(app, &token, watch_req("n-1", &["checkout"], "order", 0))
        .await
        .unwrap();
    let long = "é".repeat(5000);
    ack(app, &token, "n-1", false, &long).await.unwrap();
    let nack_error = || async {
        let agents = all_agents(app, ADMIN_TOKEN, 100).await;
        agents
            .iter()
            .find(|a| a["agent_id"] == "n-1")
            .and_then(|a| a["nack_error"].as_str().map(str::to_owned))
    };
    assert!(eventually(5, || async { nack_error().await.is_some() }).await);
    let kept = nack_error().await.unwrap();
    assert!(
        kept.len() <= 4096 && kept.len() > 4000,
        "{} bytes kept",
        kept.len()
    );
    assert!(long.starts_with(&kept));
}

/// A `budgetd serve` child process whose log (stderr) is collected.
struct LoggingServer {
    child: std::process::Child,
    http: String,
    grpc: String,
    log: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl LoggingServer {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_budgetd"))
            // The demo publishes `checkout`: its streams are sent a revision to NACK.
            .args([
                "serve",
                "--demo",
                "--http",
                "127.0.0.1:0",
                "--grpc",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.path())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("BUDGETD_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("budgetd starts");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (sink, stderr) = (log.clone(), child.stderr.take().unwrap());
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                sink.lock().unwrap().push(line.unwrap_or_default());
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut http, mut grpc) = (None, None);
        while http.is_none() || grpc.is_none() {
            let line = lines
                .next()
                .expect("budgetd printed its addresses")
                .unwrap();
            if let Some(rest) = line.strip_prefix("budgetd: HTTP API on ") {
                http = Some(rest.trim_end_matches("/api/v1").to_owned());
            } else if let Some(rest) =
                line.strip_prefix("budgetd: gRPC (budget.v1.BudgetControl) on ")
            {
                grpc = Some(format!("http://{rest}"));
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Self {
            child,
            http: http.unwrap(),
            grpc: grpc.unwrap(),
            log,
            reader: Some(reader),
            _dir: dir,
        }
    }

    /// SIGTERM, wait, and the whole log.
    fn stop(mut self) -> Vec<String> {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.log.lock().unwrap().clone()
    }
}

impl Drop for LoggingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Without ANSI escapes (in case colours are on).
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_text_cannot_forge_log_lines() {
    let server = tokio::task::spawn_blocking(LoggingServer::start)
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{}/api/v1/tokens", server.http))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"role": "agent", "name": "fleet"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = created["token"].as_str().unwrap().to_owned();
    let mut c =
        budget_proto::v1::budget_control_client::BudgetControlClient::connect(server.grpc.clone())
            .await
            .unwrap();
    let forged = "\n2099-01-01T00:00:00.000000Z ERROR FORGED-LINE: approved by nobody";
    let e = c
        .watch(authed(
            &token,
            watch_req("log-1", &["checkout"], &format!("order{forged}"), 0),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let _stream = c
        .watch(authed(
            &token,
            watch_req("log-1", &["checkout"], "order", 0),
        ))
        .await
        .unwrap()
        .into_inner();
    c.ack(authed(
        &token,
        AckRequest {
            agent_id: "log-1".into(),
            revision: 1,
            accepted: false,
            error: format!("bad config{forged}"),
        },
    ))
    .await
    .unwrap();
    drop(_stream);
    let log = tokio::task::spawn_blocking(move || server.stop())
        .await
        .unwrap();
    let lines: Vec<String> = log.iter().map(|l| plain(l)).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("NACK") && l.contains("FORGED-LINE")),
        "the NACK is logged, its error escaped on the same line:\n{}",
        lines.join("\n")
    );
    for l in &lines {
        assert!(
            !l.trim_start().starts_with("2099"),
            "a forged log line: {l:?}\n{}",
            lines.join("\n")
        );
    }
}

crate::on_both_backends!(
    agents_and_baselines_are_paginated,
    agent_input_is_validated_and_bounded
);

// ---- issue 14: streams counted, reconnects spread ------------------------------------------

/// `budgetd_watch_streams` counts Watch streams, not connections; each stream is told in its
/// headers to spread its reconnect over (open streams / `agents.reconnect_per_second`), and a
/// stopping server tells every stream it ends the same in its trailers.
async fn streams_are_counted_and_told_to_spread_their_reconnect(backend: Backend) {
    let Some(app) = app_with(backend, |s| s.agents.reconnect_per_second = 4).await else {
        return;
    };
    let token = app.token("agent", "fleet-a").await;
    // A connection without a Watch stream (a health check, an ACK) holds no stream.
    let _no_watch = client(&app).await;
    let shared = client(&app).await;
    let mut streams = Vec::new();
    let mut spreads = Vec::new();
    for i in 0..3 {
        let opened = shared
            .clone()
            .watch(authed(
                &token,
                watch_req(&format!("m-{i}"), &["checkout"], "order", 0),
            ))
            .await
            .unwrap();
        let spread = opened.metadata().get("budget-reconnect-spread-ms").cloned();
        spreads.push(spread.map(|v| v.to_str().unwrap().to_owned()));
        streams.push(opened.into_inner());
    }
    // 1, 2 and 3 streams open, reopened at 4 a second: 250, 500 and 750 ms.
    let ms = |v: &str| Some(v.to_owned());
    assert_eq!(spreads, [ms("250"), ms("500"), ms("750")]);
    assert_eq!(counter(&app, "budgetd_watch_streams").await, 3);
    drop(streams.pop());
    assert!(
        eventually(5, || async {
            counter(&app, "budgetd_watch_streams").await == 2
        })
        .await,
        "a closed stream is no longer counted"
    );
    app.stop().await;
    for mut s in streams {
        let end = tokio::time::timeout(Duration::from_secs(10), s.message()).await;
        assert!(matches!(end, Ok(Ok(None))), "{end:?}");
        let trailers = s.trailers().await.unwrap().expect("trailers");
        assert_eq!(
            trailers.get("budget-reconnect-spread-ms").unwrap(),
            "500",
            "{trailers:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_streams_are_counted_and_told_to_spread_their_reconnect() {
    streams_are_counted_and_told_to_spread_their_reconnect(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_streams_are_counted_and_told_to_spread_their_reconnect() {
    streams_are_counted_and_told_to_spread_their_reconnect(Backend::Postgres).await;
}

/// A stopping server closes its gRPC listener at once: while a connection with a call in
/// flight drains (up to 10 s), a new connection is refused, so an agent goes to another
/// replica at once instead of waiting in the backlog until the process exits.
async fn a_stopping_server_refuses_new_connections_while_it_drains(backend: Backend) {
    let Some(mut app) = app_with(backend, |_| {}).await else {
        return;
    };
    // A call in flight that never finishes its request keeps its connection draining (an
    // agent's: a call without one is refused from its headers).
    let agent = app.token("agent", "order-agent").await;
    let RawCall {
        driver,
        mut ping,
        answer: _answer,
        request: _unfinished,
    } = raw_call(&app, &agent, "Report").await;
    // The server has read the request once it answers a ping sent after it; a moment later its
    // connection task has taken the call (a stream still unread when the stop begins is
    // refused, and the connection would end at once).
    ping.ping(h2::Ping::opaque()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    app.begin_stop();
    let refused = async {
        loop {
            match tokio::net::TcpStream::connect(app.grpc_addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    };
    let in_time = tokio::time::timeout(Duration::from_secs(3), refused).await;
    if driver.is_finished() {
        panic!(
            "the connection with a call in flight ended: {:?}",
            driver.await
        );
    }
    assert!(
        in_time.is_ok(),
        "new connections were still accepted 3 s into the stop"
    );
    driver.abort();
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_stopping_server_refuses_new_connections_while_it_drains() {
    a_stopping_server_refuses_new_connections_while_it_drains(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_stopping_server_refuses_new_connections_while_it_drains() {
    a_stopping_server_refuses_new_connections_while_it_drains(Backend::Postgres).await;
}

/// How one Watch of a storm ended when the server stopped under it.
#[derive(Debug, PartialEq)]
enum StormEnd {
    /// Not opened (a request sent after the GOAWAY is refused).
    Refused(Code),
    /// Ended with status OK; whether the trailers asked for a spread.
    Ended { spread: bool },
    /// Broke with an error status.
    Failed(Code),
    /// Neither opened nor ended 5 s after the stop began (a stop drains for up to 10 s).
    Hung,
}

/// Watches still being accepted when the server begins to stop are answered and ended like
/// the others (status OK, the spread asked), not cancelled or left hanging (found by a helper
/// attacking the build: 200 of 300 streams opening at the stop were reset with CANCEL; before
/// that, they waited for the end of the drain).
async fn watches_opening_at_the_stop_end_like_the_others(backend: Backend) {
    const STREAMS: usize = 600;
    let Some(mut app) = app_with(backend, |s| s.agents.max_streams_per_token = 2 * STREAMS).await
    else {
        return;
    };
    let token = app.token("agent", "storm").await;
    let channels = [client(&app).await, client(&app).await, client(&app).await];
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut storm = Vec::new();
    for i in 0..STREAMS {
        let (mut c, token, opened) = (channels[i % 3].clone(), token.clone(), opened.clone());
        storm.push(tokio::spawn(async move {
            let req = watch_req(&format!("storm-{i}"), &["checkout"], "order", 0);
            let mut s = match c.watch(authed(&token, req)).await {
                Ok(answer) => answer.into_inner(),
                Err(status) => return StormEnd::Refused(status.code()),
            };
            opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            loop {
                match s.message().await {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        let trailers = s.trailers().await.ok().flatten();
                        let spread =
                            trailers.is_some_and(|t| t.get("budget-reconnect-spread-ms").is_some());
                        return StormEnd::Ended { spread };
                    }
                    Err(status) => return StormEnd::Failed(status.code()),
                }
            }
        }));
    }
    // The stop begins with most of the storm still being accepted.
    let opened_some = eventually(10, || async {
        opened.load(std::sync::atomic::Ordering::SeqCst) >= 1
    })
    .await;
    assert!(opened_some, "a stream of the storm opened");
    app.begin_stop();
    let settled = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut ends = Vec::new();
    for task in storm {
        ends.push(match tokio::time::timeout_at(settled, task).await {
            Ok(end) => end.unwrap(),
            Err(_) => StormEnd::Hung,
        });
    }
    let wrong: Vec<&StormEnd> = ends
        .iter()
        .filter(|e| {
            !matches!(e, StormEnd::Ended { spread: true })
                && !matches!(e, StormEnd::Refused(c) if *c != Code::Cancelled)
        })
        .collect();
    let ended = ends
        .iter()
        .filter(|e| matches!(e, StormEnd::Ended { .. }))
        .count();
    assert!(
        wrong.is_empty(),
        "{} of {STREAMS} streams ended wrongly ({ended} ended well), e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_watches_opening_at_the_stop_end_like_the_others() {
    watches_opening_at_the_stop_end_like_the_others(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_watches_opening_at_the_stop_end_like_the_others() {
    watches_opening_at_the_stop_end_like_the_others(Backend::Postgres).await;
}

// ---- issue 14: a publication writes no agent's entry ---------------------------------------

/// Counts the rows of `agents` updated from now on (a trigger into a table of the test's own).
async fn count_agent_writes(app: &TestApp, backend: Backend) -> sqlx::AnyConnection {
    sqlx::any::install_default_drivers();
    let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&app.db_url)
        .await
        .unwrap();
    let trigger = match backend {
        Backend::Sqlite => vec![
            "CREATE TRIGGER test_agent_writes AFTER UPDATE ON agents \
             BEGIN UPDATE test_agent_writes SET n = n + 1; END",
        ],
        Backend::Postgres => vec![
            "CREATE FUNCTION test_agent_write() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN UPDATE test_agent_writes SET n = n + 1; RETURN NULL; END $$",
            "CREATE TRIGGER test_agent_writes AFTER UPDATE ON agents \
             FOR EACH ROW EXECUTE FUNCTION test_agent_write()",
        ],
    };
    let setup = [
        "CREATE TABLE test_agent_writes (n BIGINT NOT NULL)",
        "INSERT INTO test_agent_writes VALUES (0)",
    ];
    for sql in setup.into_iter().chain(trigger) {
        sqlx::query(sql).execute(&mut conn).await.unwrap();
    }
    conn
}

async fn agent_writes(conn: &mut sqlx::AnyConnection) -> i64 {
    sqlx::query_scalar("SELECT n FROM test_agent_writes")
        .fetch_one(conn)
        .await
        .unwrap()
}

/// The fleet status after a publication: every agent shows the revision it was sent (and
/// accepted), an agent gone before it keeps the revision it had, and the publication writes
/// one row for the fleet, not one per agent (before: 300 agents, 300 rows rewritten).
async fn a_publication_writes_the_fleet_status_once(backend: Backend) {
    const N: usize = 300;
    let Some(app) = app_with(backend, |s| s.agents.max_streams_per_token = 2 * N).await else {
        return;
    };
    let p = app.people().await;
    let token = app.token("agent", "fleet-w").await;
    let (mut open, refused) = open_at_once(&app, &token, N, 4).await;
    assert!(refused.is_empty(), "refused: {:?}", refused.first());
    let first = draft_a(&app, &p).await;
    let rev0 = app.approve(&p.approver, &first).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let revisions = || async {
        let all = all_agents(&app, ADMIN_TOKEN, 1000).await;
        all.into_iter()
            .filter(|a| a["agent_id"].as_str().unwrap().starts_with("storm-"))
            .map(|a| {
                let id = a["agent_id"].as_str().unwrap().to_owned();
                let of = |k: &str| a[k].as_i64().unwrap();
                (
                    id,
                    (of("delivered"), of("acked"), a["connected"] == json!(true)),
                )
            })
            .collect::<std::collections::HashMap<_, _>>()
    };
    let all_at = |rev: i64| async move {
        let r = revisions().await;
        r.len() == N && r.values().all(|&(d, _, _)| d == rev)
    };
    // The first publication brings each agent a chain it had not received: the entries are
    // written whole. The second is the first with revisions alone to record.
    assert!(
        eventually(10, || all_at(rev0)).await,
        "every agent shows revision {rev0}"
    );
    let (_, rev1) = publish_run(&app, &p, budget_core::example::CHECKOUT_RUN_C).await;
    assert!(
        eventually(10, || all_at(rev1)).await,
        "every agent shows revision {rev1}"
    );
    let mut writes = count_agent_writes(&app, backend).await;
    // storm-1 goes before the next publication.
    drop(open.remove(1));
    assert!(
        eventually(10, || async { !revisions().await["storm-1"].2 }).await,
        "storm-1 shows disconnected"
    );
    let gone = agent_writes(&mut writes).await;
    let (_, rev2) = publish_run(&app, &p, budget_core::example::CHECKOUT_RUN_A).await;
    // Every stream has it before anything reads the fleet status: `GET /agents` records what
    // it finds at once, and a publication caught half-way costs writes of the agents behind.
    for stream in &mut open {
        while crate::grpc::next(stream).await.revision < rev2 {}
    }
    // storm-0 accepts it.
    client(&app)
        .await
        .ack(authed(
            &token,
            AckRequest {
                agent_id: "storm-0".into(),
                revision: rev2,
                accepted: true,
                error: String::new(),
            },
        ))
        .await
        .unwrap();
    let expected = |id: &str| match id {
        "storm-0" => (rev2, rev2, true),
        "storm-1" => (rev1, 0, false),
        _ => (rev2, 0, true),
    };
    assert!(
        eventually(10, || async {
            revisions().await.iter().all(|(id, &r)| r == expected(id))
        })
        .await,
        "every agent shows what it was sent and accepted: {:?}",
        revisions()
            .await
            .into_iter()
            .filter(|(id, r)| *r != expected(id))
            .take(5)
            .collect::<Vec<_>>()
    );
    let published = agent_writes(&mut writes).await - gone;
    // A few writes at most: the ACK's agent, the cohort joined by an agent that was slow.
    assert!(
        published <= 5,
        "the publication to {N} agents rewrote {published} agent rows"
    );

    // Another replica rewrites storm-2's entry whole, as one of a version before the entries'
    // owners (migration 0015) does when the agent's stream there ends after it opened one
    // here: the entry no longer follows this replica's cohort, and the next publications
    // must still show what storm-2 is sent here, once the periodic check has counted the
    // cohort (10 s after it moved).
    let store = budgetd::store::connect(&app.db_url).await.unwrap();
    let mut other = store
        .list_agents("2000-01-01T00:00:00.000Z", None, 1000)
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.agent_id == "storm-2")
        .unwrap();
    (other.delivered, other.connected, other.replica) = (rev0, false, "elsewhere".into());
    store.upsert_agents(&[other]).await.unwrap();
    let (_, rev3) = publish_run(&app, &p, budget_core::example::CHECKOUT_RUN_C).await;
    let (_, rev4) = publish_run(&app, &p, budget_core::example::CHECKOUT_RUN_A).await;
    let storm2 = || async {
        let all = all_agents(&app, ADMIN_TOKEN, 1000).await;
        let a = all
            .into_iter()
            .find(|a| a["agent_id"] == "storm-2")
            .unwrap();
        (
            a["delivered"].as_i64().unwrap(),
            a["connected"].clone(),
            a["replica"].clone(),
        )
    };
    assert!(
        eventually(30, || async { storm2().await.0 == rev4 }).await,
        "storm-2 shows {:?}, not revision {rev4} (after {rev3})",
        storm2().await
    );
    assert_eq!(storm2().await.1, json!(true), "storm-2 streams here");
    drop(open);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_publication_writes_the_fleet_status_once() {
    a_publication_writes_the_fleet_status_once(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_publication_writes_the_fleet_status_once() {
    a_publication_writes_the_fleet_status_once(Backend::Postgres).await;
}

// ---- agents of a killed replica ------------------------------------------------------------

/// The agents streaming from a replica that was killed (no graceful stop wrote them as
/// disconnected) read as disconnected once it has been silent for
/// `agents.replica_silence_secs`; those of a live replica stay connected however long they
/// stream. A real process, kill -9, restarted on the same SQLite database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_of_a_killed_replica_read_as_disconnected() {
    use crate::helpers::ServerProcess;
    let dir = tempfile::tempdir().unwrap();
    let env = [("BUDGETD_AGENTS__REPLICA_SILENCE_SECS", "3")];
    let http = reqwest::Client::new();
    let connected = |server: &ServerProcess, agent_id: &'static str| {
        let (http, url) = (http.clone(), server.url("/api/v1/agents?limit=1000"));
        async move {
            let answer: Value = http
                .get(url)
                .bearer_auth(ADMIN_TOKEN)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            answer["agents"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["agent_id"] == agent_id)
                .map(|a| a["connected"].clone())
        }
    };
    let open = |server: &ServerProcess, token: String, agent_id: &'static str| {
        let url = format!("http://{}", server.grpc);
        async move {
            let mut c = budget_proto::v1::budget_control_client::BudgetControlClient::connect(url)
                .await
                .unwrap();
            let mut s = c
                .watch(authed(
                    &token,
                    watch_req(agent_id, &["checkout"], "order", 0),
                ))
                .await
                .unwrap()
                .into_inner();
            s.message().await.unwrap().expect("the demo's config");
            s
        }
    };

    let mut first = ServerProcess::start_in_with(dir.path(), &["--demo"], &env);
    let token = crate::streams::agent_token(&first, &http, "order-agent").await;
    let _gone = open(&first, token.clone(), "order-1").await;
    assert!(
        eventually(5, || async {
            connected(&first, "order-1").await == Some(json!(true))
        })
        .await,
        "order-1 never showed connected"
    );
    let _ = first.child.kill(); // SIGKILL: nothing marks order-1 disconnected
    let _ = first.child.wait();

    let second = ServerProcess::start_in_with(dir.path(), &[], &env);
    let _live = open(&second, token, "order-2").await;
    assert!(
        eventually(15, || async {
            connected(&second, "order-1").await == Some(json!(false))
        })
        .await,
        "order-1 still shows {:?} after its replica was killed",
        connected(&second, "order-1").await
    );
    // Streaming longer than the silence: still connected (its replica beats).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(connected(&second, "order-2").await, Some(json!(true)));
}
