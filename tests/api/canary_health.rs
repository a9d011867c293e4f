//! What ends a canary from what its agents do (issue 16, SPEC §9): a NACK of its revision,
//! and SPEC §8's rules — amplification, kill rate, drift — on canary agents' reports, over the
//! rules' windows and over the bake so far.

use std::collections::BTreeMap;
use std::time::Duration;

use budget_core::canary::{Rollout, Selector};
use budget_proto::v1::{ReportRequest, SegmentWindow};
use serde_json::json;

use crate::canary::{
    a_live_and_c_drafted, all_run, approve_with, eventually, rollout, start_agents,
};
use crate::grpc::{authed, client, watch_req};
use crate::helpers::{draft_a, spawn_app, Backend, TestApp, TestDb};

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
                ..Default::default()
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
    // The last complete minute holds the window only once its minute has ended: a judgement
    // made after that boundary names it first.
    let reason = |span: &str| {
        format!("amplification on order->inventory: 3.000 > 2 on canary agents {span} (10 calls, 30 attempts)")
    };
    assert!(
        [
            reason("over the bake so far"),
            reason("over the last minute")
        ]
        .iter()
        .any(|expected| r["reason"] == expected.as_str()),
        "{}",
        r["reason"]
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
    // The last five complete minutes hold the windows only once their minute has ended.
    let figures = "(p99 480255 µs, p999 480255 µs, 1000 samples)";
    assert!(
        reason.starts_with("drift on order->payment: +")
            && ["over the bake so far", "over the last 5 minutes"]
                .iter()
                .any(|span| reason.ends_with(&format!(
                    "from the canary's baseline on canary agents {span} {figures}"
                ))),
        "{reason}"
    );
    drop(streams);
    app.stop().await;
}

/// A Report whose batch fails to commit stores nothing, rollups nor canary health, whichever
/// of the two writes fails: the agent sends the windows again and both count them once. (The
/// health rows used to be written before the batch, on their own: when the rollups failed,
/// the resend counted the canary's health a second time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_whose_batch_fails_counts_for_the_canary_once_resent() {
    for failing in ["report_rollups", "canary_health"] {
        let (app, token, _, c, streams) = canary_with_two_watchers().await;
        let start = chrono::Utc::now().timestamp_millis() + 1000;
        let mut healthy = amplified_window(start);
        (healthy.calls, healthy.attempts) = (10, 10);
        healthy.retries = Default::default();
        let send = || {
            let healthy = healthy.clone();
            let app = &app;
            let token = &token;
            async move {
                client(app)
                    .await
                    .report(authed(
                        token,
                        ReportRequest {
                            agent_id: "in".into(),
                            windows: vec![healthy],
                            ..Default::default()
                        },
                    ))
                    .await
            }
        };
        // Writes to one of the two tables are refused: the batch cannot commit.
        sqlx::any::install_default_drivers();
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&app.db_url)
            .await
            .unwrap();
        sqlx::query(&format!(
            "CREATE TRIGGER refused BEFORE INSERT ON {failing} \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
        let refused = send().await.unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::Unavailable,
            "{failing}: {refused:?}"
        );
        sqlx::query("DROP TRIGGER refused")
            .execute(&mut conn)
            .await
            .unwrap();
        // The agent's resend.
        assert_eq!(send().await.unwrap().into_inner().accepted_windows, 1);
        let r = rollout(&app, &c).await["canary"].clone();
        let h = &r["health"][0];
        assert_eq!(
            (&h["segment"], &h["calls"], &h["attempts"]),
            (&json!("order->inventory"), &json!(10), &json!(10)),
            "{failing}: {r:#}"
        );
        let store = budgetd::store::connect(&app.db_url).await.unwrap();
        let rollups = store.read_rollups("checkout", 0, i64::MAX).await.unwrap();
        let calls: u64 = rollups.iter().map(|r| r.counts.calls).sum();
        assert_eq!(calls, 10, "{failing}: {rollups:?}");
        drop(streams);
        app.stop().await;
    }
}
