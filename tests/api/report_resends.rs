//! A Report sent again after its answer was lost (`ReportRequest.report_id` and `resend`):
//! counted once whichever replica it reaches, in the same batch or a later one, and counted
//! when the first send was never stored.

use budget_proto::v1::{ReportRequest, SegmentWindow};
use tonic::Code;

use crate::feedback::{
    fast_app, now_ms, production, published_with_agent, segment, window, SEGMENT,
};
use crate::grpc::{authed, client};
use crate::observe::{metrics, sample};
use budgetd::store::feedback::{LastReport, Rollup};
use budgetd::store::StoreError;

use crate::helpers::{spawn_replica_with, Backend, ServerProcess, TestApp, TestDb};
use budget_proto::v1::budget_control_client::BudgetControlClient;

async fn send(
    app: &TestApp,
    token: &str,
    id: &[u8],
    resend: bool,
    windows: Vec<SegmentWindow>,
) -> Result<i64, tonic::Status> {
    send_as(app, token, "order-1", id, resend, windows).await
}

pub(crate) async fn send_as(
    app: &TestApp,
    token: &str,
    agent: &str,
    id: &[u8],
    resend: bool,
    windows: Vec<SegmentWindow>,
) -> Result<i64, tonic::Status> {
    client(app)
        .await
        .report(authed(
            token,
            ReportRequest {
                agent_id: agent.into(),
                windows,
                report_id: id.to_vec(),
                resend,
            },
        ))
        .await
        .map(|r| r.into_inner().accepted_windows)
}

fn calls_window(start: i64, calls: u64) -> SegmentWindow {
    window(
        start,
        calls,
        calls,
        "deadline",
        &[("ok", calls)],
        &vec![180_000; calls as usize],
    )
}

/// The calls of the segment in the last hour, as every replica reads them.
async fn calls(apps: &[&TestApp]) -> Vec<u64> {
    let mut all = Vec::new();
    for app in apps {
        let view = production(app, "1h").await;
        all.push(segment(&view, SEGMENT)["calls"].as_u64().unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_sent_again_is_counted_once() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(a) = fast_app(backend).await else {
            continue;
        };
        let b = spawn_replica_with(&a, crate::feedback::fast).await;
        let token = published_with_agent(&a, "order-1").await;
        let stored_before = || async {
            let text = metrics(&a).await;
            sample(
                &text,
                "budgetd_report_resends_total{result=\"stored_before\"}",
            )
            .unwrap()
        };
        let before = stored_before().await;
        let start = now_ms() - 5_000;

        // Stored on replica a, its answer lost: the agent sends it again, to a and then,
        // failed over, to b. Each answers as if it stored it now.
        let x = [1u8; 16];
        let first = vec![calls_window(start, 1000)];
        assert_eq!(send(&a, &token, &x, false, first.clone()).await.unwrap(), 1);
        assert_eq!(send(&a, &token, &x, true, first.clone()).await.unwrap(), 1);
        assert_eq!(send(&b, &token, &x, true, first.clone()).await.unwrap(), 1);
        assert_eq!(calls(&[&a, &b]).await, [1000, 1000], "{backend:?}");

        // Sent again while the first send waits for its commit (the agent gave up waiting):
        // the two land in one batch, or the second in the next.
        let y = [2u8; 16];
        let second = vec![calls_window(start + 100, 300)];
        let (one, two) = tokio::join!(send(&a, &token, &y, false, second.clone()), async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            send(&a, &token, &y, true, second.clone()).await
        });
        assert_eq!((one.unwrap(), two.unwrap()), (1, 1));
        assert_eq!(calls(&[&a, &b]).await, [1300, 1300], "{backend:?}");

        // A resend whose first send never reached a store is counted.
        let z = [3u8; 16];
        let third = vec![calls_window(start + 200, 50)];
        assert_eq!(send(&b, &token, &z, true, third.clone()).await.unwrap(), 1);
        assert_eq!(send(&a, &token, &z, true, third).await.unwrap(), 1);
        assert_eq!(calls(&[&a, &b]).await, [1350, 1350], "{backend:?}");

        // A first send that reaches its batch's commit after its resend was counted on the
        // other replica (the agent gave up waiting on a and failed over): its windows are in
        // a's batch, so that batch is dropped, and its agents send again, as resends. Another
        // agent's report sent at the same time (in that batch, or the next) is counted once.
        let w = [4u8; 16];
        let late = vec![calls_window(start + 250, 20)];
        assert_eq!(send(&b, &token, &w, true, late.clone()).await.unwrap(), 1);
        assert_eq!(calls(&[&a, &b]).await, [1370, 1370], "{backend:?}");
        let other = vec![calls_window(start + 250, 5)];
        let v = [5u8; 16];
        let (dropped, beside) = tokio::join!(
            send(&a, &token, &w, false, late.clone()),
            send_as(&a, &token, "order-2", &v, false, other.clone())
        );
        let dropped = dropped.unwrap_err();
        assert_eq!(dropped.code(), Code::Unavailable, "{backend:?}");
        assert!(
            dropped
                .message()
                .contains("a report sent as new was stored already"),
            "{backend:?}: {dropped:?}"
        );
        if let Err(e) = beside {
            assert_eq!(e.code(), Code::Unavailable, "{backend:?}: {e:?}");
            let again = send_as(&a, &token, "order-2", &v, true, other).await;
            assert_eq!(again.unwrap(), 1);
        }
        assert_eq!(calls(&[&a, &b]).await, [1375, 1375], "{backend:?}");
        // The agent's reports are looked for as resends from now on: the same report sent
        // as new once more is not counted and fails no batch, nor does its next report sent
        // as new twice (a client that repeats reports without `resend`).
        assert_eq!(send(&a, &token, &w, false, late.clone()).await.unwrap(), 1);
        assert_eq!(send(&a, &token, &w, true, late).await.unwrap(), 1);
        let u = [6u8; 16];
        let next = vec![calls_window(start + 260, 2)];
        for _ in 0..2 {
            assert_eq!(send(&a, &token, &u, false, next.clone()).await.unwrap(), 1);
        }
        assert_eq!(calls(&[&a, &b]).await, [1377, 1377], "{backend:?}");

        // A report without an id is counted each time it comes (as before ids).
        let fourth = vec![calls_window(start + 300, 7)];
        for _ in 0..2 {
            assert_eq!(
                send(&a, &token, &[], false, fourth.clone()).await.unwrap(),
                1
            );
        }
        assert_eq!(calls(&[&a, &b]).await, [1391, 1391], "{backend:?}");

        // x twice, y once, z once, w twice, u once. The counter is the test process's (b's too, and other tests'
        // agents that send again).
        let again = stored_before().await - before;
        assert!(again >= 7.0, "{backend:?}: {again}");
        b.stop().await;
        a.stop().await;
    }
}

/// Found by attacking the server: `budgetd_report_windows_total{result="accepted"}` counted
/// a report's windows again each time it was sent again and found stored before, though the
/// rollups counted them once. A real process, so that no other test's reports move its
/// counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_stored_before_adds_no_accepted_windows() {
    let server = ServerProcess::start_with_args(&["--demo"]);
    let http = reqwest::Client::new();
    let token = crate::streams::agent_token(&server, &http, "order-agent").await;
    let mut grpc = BudgetControlClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let mut watch = grpc
        .watch(authed(
            &token,
            crate::grpc::watch_req("order-1", &["checkout"], "order", 0),
        ))
        .await
        .unwrap()
        .into_inner();
    watch.message().await.unwrap().expect("the demo's config");
    let counters = || async {
        let text = http
            .get(server.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let value = |series: &str| sample(&text, series).unwrap_or(0.0);
        (
            value("budgetd_report_windows_total{result=\"accepted\"}"),
            value("budgetd_report_resends_total{result=\"stored_before\"}"),
        )
    };
    let windows = vec![
        calls_window(now_ms() - 5_000, 100),
        calls_window(now_ms() - 4_000, 50),
    ];
    for resend in [false, true, true, true] {
        let answer = grpc
            .report(authed(
                &token,
                ReportRequest {
                    agent_id: "order-1".into(),
                    windows: windows.clone(),
                    report_id: vec![9; 16],
                    resend,
                },
            ))
            .await
            .unwrap_or_else(|e| panic!("resend {resend}: {e:?}"));
        assert_eq!(answer.into_inner().accepted_windows, 2);
    }
    assert_eq!(
        counters().await,
        (2.0, 3.0),
        "(accepted windows, resends stored before)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_ids_are_checked() {
    let Some(a) = fast_app(Backend::Sqlite).await else {
        unreachable!("SQLite is always there")
    };
    let token = published_with_agent(&a, "order-1").await;
    let w = vec![calls_window(now_ms() - 5_000, 10)];
    let short = send(&a, &token, &[7; 5], false, w.clone())
        .await
        .unwrap_err();
    assert_eq!(short.code(), Code::InvalidArgument);
    assert_eq!(
        short.message(),
        "report_id holds 5 bytes; it is 16 random bytes, or empty"
    );
    let bare = send(&a, &token, &[], true, w.clone()).await.unwrap_err();
    assert_eq!(bare.code(), Code::InvalidArgument);
    assert_eq!(
        bare.message(),
        "resend is set without a report_id: a resend names the report it repeats"
    );
    let view = production(&a, "1h").await;
    assert_eq!(
        view["segments"],
        serde_json::json!([]),
        "nothing stored: {view}"
    );

    // An agent id that never watched (bound to no token) has its windows counted but its
    // report id not kept: made-up ids add no row.
    let made_up = send_as(&a, &token, "made-up-7", &[9; 16], false, w.clone());
    assert_eq!(made_up.await.unwrap(), 1);
    let store = budgetd::store::connect(&a.db_url).await.unwrap();
    let kept = store
        .last_reports(&["made-up-7".to_owned(), "order-1".to_owned()])
        .await
        .unwrap();
    assert!(kept.is_empty(), "{kept:?}");
    send(&a, &token, &[8; 16], false, w.clone()).await.unwrap();
    let kept = store.last_reports(&["order-1".to_owned()]).await.unwrap();
    assert_eq!(kept["order-1"], "08".repeat(16));
    a.stop().await;
}

/// The store keeps one last report per agent, written with rollups in batches of any size,
/// replaced by the next, and gone with the rollups' retention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_each_agents_last_report() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::new(backend).await else {
            continue;
        };
        let store = budgetd::store::connect(&db.url).await.unwrap();
        let last = |agent: String, id: &str, stored_ms| LastReport {
            agent_id: agent,
            report_id: id.to_owned(),
            stored_ms,
            resent: false,
        };
        // More agents than one statement takes.
        let many: Vec<LastReport> = (0..2_500)
            .map(|i| last(format!("agent-{i}"), "aa", 1_000))
            .collect();
        store.write_rollups(&[], &[], &many).await.unwrap();
        let agents: Vec<String> = ["agent-0", "agent-2499", "agent-9999"]
            .map(String::from)
            .to_vec();
        let found = store.last_reports(&agents).await.unwrap();
        assert_eq!(found.len(), 2, "{backend:?}: {found:?}");
        assert_eq!(found["agent-2499"], "aa");

        // The next report replaces the last; an agent reporting later is kept past a
        // retention that removes the others.
        store
            .write_rollups(&[], &[], &[last("agent-0".into(), "bb", 5_000)])
            .await
            .unwrap();
        store.expire_rollups(2_000).await.unwrap();
        let found = store.last_reports(&agents).await.unwrap();
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            [("agent-0".to_owned(), "bb".to_owned())],
            "{backend:?}"
        );
        assert!(store.last_reports(&[]).await.unwrap().is_empty());

        // A resend counted by a batch whose agent stored it meanwhile (another replica): the
        // batch writes nothing, and its agents send again.
        let rollup = Rollup {
            chain: "checkout".into(),
            segment: SEGMENT.into(),
            minute: 60_000,
            writer: "w".into(),
            counts: Default::default(),
            latency_hdr: Vec::new(),
            agent_count: 1,
            agents: vec!["agent-0".into()],
            updated_at: budgetd::service::now(),
        };
        let again = |id: &str| LastReport {
            resent: true,
            ..last("agent-0".into(), id, 6_000)
        };
        let refused = store
            .write_rollups(std::slice::from_ref(&rollup), &[], &[again("bb")])
            .await
            .unwrap_err();
        assert!(
            matches!(refused, StoreError::ReportStored { ref first_sends } if first_sends.is_empty()),
            "{backend:?}: {refused}"
        );
        let rollups = store.read_rollups("checkout", 0, i64::MAX).await.unwrap();
        assert!(rollups.is_empty(), "{backend:?}: {rollups:?}");
        // Likewise a report sent once whose resend another replica stored meanwhile: its
        // windows are in the batch's sums.
        let late = store
            .write_rollups(
                std::slice::from_ref(&rollup),
                &[],
                &[last("agent-0".into(), "bb", 6_000)],
            )
            .await
            .unwrap_err();
        assert!(
            matches!(late, StoreError::ReportStored { ref first_sends }
                if first_sends == &["agent-0".to_owned()]),
            "{backend:?}: {late}"
        );
        let rollups = store.read_rollups("checkout", 0, i64::MAX).await.unwrap();
        assert!(rollups.is_empty(), "{backend:?}: {rollups:?}");
        // In a batch of many agents, a resend stored in its first statement and a report
        // sent once stored in its last: both told, nothing written.
        store
            .write_rollups(&[], &[], &[last("agent-999".into(), "aa", 7_000)])
            .await
            .unwrap();
        let mut batch: Vec<LastReport> = (1..2_500)
            .map(|i| last(format!("agent-{i}"), "dd", 7_000))
            .collect();
        batch.push(again("bb"));
        batch
            .iter_mut()
            .find(|r| r.agent_id == "agent-999")
            .unwrap()
            .report_id = "aa".into();
        batch.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
        let both = store.write_rollups(&[], &[], &batch).await.unwrap_err();
        assert!(
            matches!(both, StoreError::ReportStored { ref first_sends }
                if first_sends == &["agent-999".to_owned()]),
            "{backend:?}: {both}"
        );
        let some = ["agent-1", "agent-999"].map(String::from).to_vec();
        let found = store.last_reports(&some).await.unwrap();
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            [("agent-999".to_owned(), "aa".to_owned())],
            "{backend:?}: rolled back"
        );
        // One not stored yet is written with its rollups.
        store
            .write_rollups(&[rollup], &[], &[again("cc")])
            .await
            .unwrap();
        assert_eq!(
            store
                .read_rollups("checkout", 0, i64::MAX)
                .await
                .unwrap()
                .len(),
            1
        );
        let found = store.last_reports(&agents).await.unwrap();
        assert_eq!(found["agent-0"], "cc", "{backend:?}");
    }
}
