//! Runtime feedback (issue 12, SPEC §8) through the real gRPC and HTTP stack: Report windows
//! merged into rollups across replicas, the production view, refused input, alerts firing and
//! resolving once with signed webhook deliveries, and decisions sent to webhooks.
//!
//! Rollups are shortened to one second (`feedback.rollup_ms`), so "the last complete minute"
//! is the last complete second and the tests do not wait for wall-clock minutes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use budget_proto::v1::{ReportRequest, SegmentWindow};
use budgetd::Settings;
use hdrhistogram::serialization::{Serializer as _, V2DeflateSerializer};
use hdrhistogram::Histogram;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use tonic::Code;

use crate::grpc::{authed, client, watch_req};
use crate::helpers::{
    draft_a, settings_for, spawn_app_on, spawn_replica_with, Backend, TestApp, TestDb, ADMIN_TOKEN,
};

pub(crate) const SEGMENT: &str = "order->inventory";

pub(crate) fn fast(s: &mut Settings) {
    s.feedback.rollup_ms = 1000;
    s.feedback.evaluate_every_ms = 200;
}

pub(crate) async fn fast_app(backend: Backend) -> Option<TestApp> {
    let db = TestDb::new(backend).await?;
    Some(
        spawn_app_on(db, |url| {
            let mut s = settings_for(url);
            fast(&mut s);
            s
        })
        .await,
    )
}

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Latencies (µs) as an HdrHistogram V2 compressed, as agents send them.
pub fn hdr(values_us: &[u64]) -> Vec<u8> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    for v in values_us {
        h.record(*v).unwrap();
    }
    let mut out = Vec::new();
    V2DeflateSerializer::new().serialize(&h, &mut out).unwrap();
    out
}

/// A window of `calls` calls starting at `start`: `attempts` attempts, the extra ones retries
/// on `cause`, every call `ok` with `latencies` as its successful attempts' latencies.
pub(crate) fn window(
    start: i64,
    calls: u64,
    attempts: u64,
    cause: &str,
    outcomes: &[(&str, u64)],
    latencies: &[u64],
) -> SegmentWindow {
    SegmentWindow {
        chain: "checkout".into(),
        segment: SEGMENT.into(),
        start_unix_ms: start,
        end_unix_ms: start + 500,
        calls,
        attempts,
        retries: [(cause.to_owned(), attempts - calls)].into(),
        outcomes: outcomes.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        latency_hdr: hdr(latencies),
    }
}

async fn report(
    app: &TestApp,
    token: &str,
    agent: &str,
    windows: Vec<SegmentWindow>,
) -> Result<i64, tonic::Status> {
    crate::report_resends::send_as(app, token, agent, &[], false, windows).await
}

/// Publishes run A on `checkout` and returns an agent token whose agent `agent` has watched.
pub(crate) async fn published_with_agent(app: &TestApp, agent: &str) -> String {
    let p = app.people().await;
    let id = draft_a(app, &p).await;
    app.approve(&p.approver, &id).await.expect(200);
    let token = app.token("agent", "order-agent").await;
    let mut stream = client(app)
        .await
        .watch(authed(&token, watch_req(agent, &["checkout"], "order", 0)))
        .await
        .unwrap()
        .into_inner();
    crate::grpc::next(&mut stream).await;
    token
}

pub(crate) async fn production(app: &TestApp, window: &str) -> Value {
    app.get(
        &format!("/api/v1/chains/checkout/production?window={window}"),
        ADMIN_TOKEN,
    )
    .await
    .expect(200)
    .json()
}

pub(crate) fn segment<'a>(view: &'a Value, id: &str) -> &'a Value {
    view["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["segment"] == id)
        .unwrap_or_else(|| panic!("{id} missing in {view}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_from_two_replicas_add_up_exactly() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(a) = fast_app(backend).await else {
            continue;
        };
        let b = spawn_replica_with(&a, fast).await;
        let token = published_with_agent(&a, "order-1").await;
        // The same rollup receives windows on both replicas, from two agents.
        let start = now_ms() - 5_000;
        let w1 = window(
            start,
            1000,
            1300,
            "deadline",
            &[("ok", 990), ("deadline_exceeded", 10)],
            &vec![180_000; 990],
        );
        let w2 = window(
            start + 100,
            500,
            500,
            "deadline",
            &[("ok", 495), ("retry_refused_no_key", 5)],
            &vec![420_000; 495],
        );
        assert_eq!(report(&a, &token, "order-1", vec![w1]).await.unwrap(), 1);
        assert_eq!(report(&b, &token, "order-2", vec![w2]).await.unwrap(), 1);
        for app in [&a, &b] {
            let view = production(app, "1h").await;
            let s = segment(&view, SEGMENT);
            assert_eq!(s["calls"], 1500, "{backend:?} {s}");
            assert_eq!(s["attempts"], 1800);
            assert_eq!(s["amplification"], 1.2);
            // (300 deadline retries + 10 deadline_exceeded) / 1800 attempts.
            assert_eq!(s["kill_rate"], (310.0f64 / 1800.0 * 1e6).round() / 1e6);
            // 5 refused / (300 retries + 5 refused).
            assert_eq!(
                s["key_coverage"],
                (1e6f64 - 5.0 * 1e6 / 305.0).round() / 1e6
            );
            assert_eq!(s["samples"], 1485);
            assert_eq!(s["outcomes"]["retry_refused_no_key"], 5);
            assert_eq!(s["agents"], 2);
            assert!(
                (179.9..=180.1).contains(&s["p50_ms"].as_f64().unwrap()),
                "{s}"
            );
            assert!(
                (419.9..=420.5).contains(&s["p999_ms"].as_f64().unwrap()),
                "{s}"
            );
            assert!(s["timeout_ms"].as_u64().is_some());
            assert!(s["baseline_p999_ms"].as_f64().is_some());
            assert_eq!(s["drift"], true, "p999 420 ms against run A's");
            let last = s["distribution"]
                .as_array()
                .unwrap()
                .last()
                .unwrap()
                .clone();
            assert_eq!(last[1], 1.0);
        }
        // A window outside the last complete 1m window is not in it.
        let view = production(&a, "1m").await;
        assert!(view["segments"].as_array().unwrap().is_empty(), "{view}");
        b.stop().await;
        a.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_are_checked() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let token = published_with_agent(&app, "order-1").await;
    let uploader = app.token("uploader", "uma2").await;
    let good = || window(now_ms() - 3_000, 10, 10, "deadline", &[("ok", 10)], &[1000]);

    let err = report(&app, &uploader, "order-1", vec![good()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");

    let other = app.token("agent", "other-agent").await;
    let err = report(&app, &other, "order-1", vec![good()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("another token"), "{err:?}");

    // A start near i64::MIN must not wrap around into a short span (it did in a release build,
    // and each such window opened a rollup of its own that nothing bounded).
    for (start, end) in [(i64::MIN, now_ms() - 1_000), (i64::MIN + 1, i64::MAX)] {
        let mut w = good();
        (w.start_unix_ms, w.end_unix_ms) = (start, end);
        assert_eq!(
            report(&app, &token, "order-1", vec![w]).await.unwrap(),
            0,
            "start {start}, end {end}"
        );
    }

    let err = report(&app, &token, "order-1", vec![good(); 4097])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let mut unknown_segment = good();
    unknown_segment.segment = "order->nowhere".into();
    let mut unknown_chain = good();
    unknown_chain.chain = "nochain".into();
    let mut late = good();
    late.start_unix_ms = now_ms() - 11 * 60_000;
    late.end_unix_ms = late.start_unix_ms + 1000;
    let mut odd_outcome = good();
    odd_outcome.outcomes.insert("timeout".into(), 1);
    let mut garbage = good();
    garbage.latency_hdr = vec![0x1c, 0x84, 0x93, 0x04, 0, 0, 0, 9, 1, 2, 3];
    let accepted = report(
        &app,
        &token,
        "order-1",
        vec![
            good(),
            unknown_segment,
            unknown_chain,
            late,
            odd_outcome,
            garbage,
        ],
    )
    .await
    .unwrap();
    assert_eq!(accepted, 1, "only the good window is merged");
    let s = production(&app, "1h").await;
    assert_eq!(segment(&s, SEGMENT)["calls"], 10);

    let bad = app
        .get("/api/v1/chains/checkout/production?window=2m", ADMIN_TOKEN)
        .await
        .expect(400);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1m, 5m, 1h"));
    app.get("/api/v1/chains/nochain/production", ADMIN_TOKEN)
        .await
        .expect(404);
    app.stop().await;
}

/// A Report is counted on the wire before it is decoded: a window names each outcome and
/// each retry cause once. Before, a window of 1,000 outcome keys (387,644 fit in one Report)
/// was decoded whole and then skipped, and a Report of 144,628 tiny windows took about ten
/// times its bytes while it was decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_is_counted_on_the_wire_before_it_is_decoded() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let token = published_with_agent(&app, "order-1").await;
    let good = || window(now_ms() - 3_000, 10, 10, "deadline", &[("ok", 10)], &[1000]);

    let mut many = good();
    many.outcomes = (0..1000).map(|i| (format!("o{i}"), 1)).collect();
    let err = report(&app, &token, "order-1", vec![good(), many])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(
        err.message(),
        "window 1: outcomes has more than 6 entries; a window names each of the 6 outcomes once"
    );
    let tiny = SegmentWindow::default();
    let err = report(&app, &token, "order-1", vec![tiny; 144_628])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(
        err.message(),
        "a report holds at most 4096 windows; send the rest in another"
    );
    assert_eq!(
        report(&app, &token, "order-1", vec![good()]).await.unwrap(),
        1
    );
    app.stop().await;
}

/// What decoding makes of a Report, and its decoded histograms, are charged to
/// `agents.max_call_bytes` with its bytes: at 1 MiB (one token's share of 4 MiB), a Report of 4,096 windows (about 0.7 MiB
/// on the wire, about 3 MiB decoded), or of 20 windows with 4,500 latency buckets each, is
/// refused RESOURCE_EXHAUSTED naming the setting (the agent keeps its windows); smaller ones
/// are stored. Before, only its bytes were charged and both were stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reports_decoded_size_is_charged() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let app = spawn_app_on(db, |url| {
        let mut s = settings_for(url);
        fast(&mut s);
        // The token's share, a quarter of it: 1 MiB.
        s.agents.max_call_bytes = 4 << 20;
        s
    })
    .await;
    let token = published_with_agent(&app, "order-1").await;
    let full = || {
        let mut w = window(now_ms() - 3_000, 10, 12, "deadline", &[("ok", 10)], &[1000]);
        w.retries.insert("unavailable".into(), 1);
        for outcome in budget_core::feedback::OUTCOMES {
            w.outcomes.entry(outcome.into()).or_insert(0);
        }
        w
    };
    let windows = vec![full(); 4096];
    let wire = budget_proto::codec::frame(&ReportRequest {
        agent_id: "order-1".into(),
        windows: windows.clone(),
        ..Default::default()
    })
    .len();
    assert!(wire < (1 << 20) - 9 * 1024, "{wire} bytes on the wire");
    let err = report(&app, &token, "order-1", windows).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("agents.max_call_bytes"), "{err:?}");
    assert_eq!(
        report(&app, &token, "order-1", vec![full(); 100])
            .await
            .unwrap(),
        100
    );

    // Decoded histograms: 5,000 distinct latencies are about 4,500 buckets of 16 bytes, sent
    // in a few KiB. Twenty such windows do not fit in 1 MiB; five do, again and again (their
    // charge comes back once they are merged).
    let wide: Vec<u64> = (0..5000).map(|i| 1000 + i * 20).collect();
    let busy = window(now_ms() - 3_000, 10, 10, "deadline", &[("ok", 10)], &wide);
    assert!(
        busy.latency_hdr.len() < 16 * 1024,
        "{}",
        busy.latency_hdr.len()
    );
    let err = report(&app, &token, "order-1", vec![busy.clone(); 20])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("agents.max_call_bytes"), "{err:?}");
    for _ in 0..5 {
        assert_eq!(
            report(&app, &token, "order-1", vec![busy.clone(); 5])
                .await
                .unwrap(),
            5
        );
    }
    app.stop().await;
}

/// A fleet's Reports arrive together (within a quarter of the window). Each is decoded to the
/// end before more than a few others begin: with 8 MiB for the token (its quarter of
/// `agents.max_call_bytes`), a burst of 200 Reports of two busy windows each (about 150 KB
/// decoded per Report, 30 MB in all) is stored whole. Before, every Report of the burst was decoded a window at a time in turn,
/// all holding their decoded histograms together, and most were refused RESOURCE_EXHAUSTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_reports_is_decoded_a_few_at_a_time() {
    // What may be decoded at once grows with the cores: keep the token's share above it.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share =
        (8usize << 20).max(cores * budgetd::feedback::DECODING_PER_CORE * (200 << 10) + (6 << 20));
    let budget = share * budgetd::grpc::serve::TOKEN_SHARE;
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let app = spawn_app_on(db, |url| {
        let mut s = settings_for(url);
        fast(&mut s);
        s.agents.max_call_bytes = budget as u64;
        s
    })
    .await;
    let token = published_with_agent(&app, "order-1").await;
    let wide: Vec<u64> = (0..5000).map(|i| 1000 + i * 20).collect();
    let busy = window(now_ms() - 3_000, 10, 10, "deadline", &[("ok", 10)], &wide);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&app).await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(200));
    let mut calls = Vec::new();
    for i in 0..200 {
        let mut c = clients[i % 4].clone();
        let (token, busy, start) = (token.clone(), busy.clone(), start.clone());
        calls.push(tokio::spawn(async move {
            let req = authed(
                &token,
                ReportRequest {
                    agent_id: "order-1".into(),
                    windows: vec![busy; 2],
                    ..Default::default()
                },
            );
            start.wait().await;
            c.report(req).await.map(|r| r.into_inner().accepted_windows)
        }));
    }
    let mut refused = Vec::new();
    for call in calls {
        match call.await.unwrap() {
            Ok(n) => assert_eq!(n, 2),
            Err(status) => refused.push(status),
        }
    }
    assert!(
        refused.is_empty(),
        "{} of 200 Reports refused, the first: {:?}",
        refused.len(),
        refused.first()
    );
    let view = production(&app, "1h").await;
    assert_eq!(segment(&view, SEGMENT)["calls"], 200 * 2 * 10, "{view}");
    app.stop().await;
}

/// Windows of one heavy Report: 38 histograms inflating 8.4 MB together (about 8 KB sent),
/// one call each.
const HEAVY_WINDOWS: i64 = 38;

/// Heavy Reports of `agent` (of `token`) queued for their decoding turn: `places` decoding at
/// once and at least `queued` waiting when this returns. Each call is answered into the
/// returned counter.
struct Queue {
    places: usize,
    queued: usize,
    answered: Arc<std::sync::atomic::AtomicUsize>,
    calls: Vec<tokio::task::JoinHandle<Result<i64, tonic::Status>>>,
}

const WAITING: &str = "budgetd_reports_decoding{state=\"waiting\"}";

impl Queue {
    async fn fill(app: &TestApp, token: &str, agent: &str) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let places = cores * budgetd::feedback::DECODING_PER_CORE;
        let mut w = window(now_ms() - 3_000, 1, 1, "deadline", &[("ok", 1)], &[]);
        w.latency_hdr = zeros_hdr(MOST_COUNTS);
        let heavy = vec![w; HEAVY_WINDOWS as usize];
        // More queued than could ever pass in a few turns, whatever the cores.
        let queued = 6 * places;
        let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(client(app).await);
        }
        let mut calls = Vec::new();
        for i in 0..places + queued + 8 {
            let mut c = clients[i % 4].clone();
            let req = authed(
                token,
                ReportRequest {
                    agent_id: agent.into(),
                    windows: heavy.clone(),
                    ..Default::default()
                },
            );
            let answered = answered.clone();
            calls.push(tokio::spawn(async move {
                let answer = c.report(req).await;
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                answer.map(|r| r.into_inner().accepted_windows)
            }));
        }
        eventually("the heavy Reports queue", async || {
            (crate::fleet::counter(app, WAITING).await >= queued as u64).then_some(())
        })
        .await;
        Self {
            places,
            queued,
            answered,
            calls,
        }
    }

    fn answered(&self) -> usize {
        self.answered.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits for every heavy Report, each stored whole; their calls (one per window).
    async fn drain(self, app: &TestApp) -> i64 {
        let n = self.calls.len() as i64;
        for call in self.calls {
            assert_eq!(call.await.unwrap().unwrap(), HEAVY_WINDOWS);
        }
        assert_eq!(crate::fleet::counter(app, WAITING).await, 0);
        n * HEAVY_WINDOWS
    }
}

/// One token's queue of heavy Reports delays another token's Reports by about one heavy turn,
/// not by the whole queue: decoding turns are shared among the waiting tokens by the time
/// they take, so the other token's light Reports all pass while a few heavy ones do. Before,
/// turns were first-come, and another token's Report waited for every Report queued before it
/// (an attack helper measured 19-40 s behind one token's 2,048 calls); given in rotation, they
/// let one light Report pass per heavy one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tokens_queue_of_reports_does_not_hold_up_another_tokens() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let heavy = published_with_agent(&app, "order-1").await;
    let other = app.token("agent", "other-agent").await;
    let queue = Queue::fill(&app, &heavy, "order-1").await;
    let (places, queued) = (queue.places, queue.queued);
    let before = queue.answered();
    let light = window(
        now_ms() - 3_000,
        10,
        10,
        "deadline",
        &[("ok", 10)],
        &[1000; 10],
    );
    let n = 4 * places + 4;
    let mut lights = Vec::new();
    for i in 0..n {
        let (app, other, light) = (&app, &other, light.clone());
        lights.push(async move { report(app, other, &format!("other-{i}"), vec![light]).await });
    }
    for accepted in futures_util::future::join_all(lights).await {
        assert_eq!(accepted.unwrap(), 1);
    }
    let passed = queue.answered() - before;
    assert!(
        passed <= 2 * places + 2,
        "{passed} of the heavy token's Reports were answered while the other token's {n} \
         waited ({queued} or more queued before them, {places} decoding at once)"
    );
    let calls = queue.drain(&app).await;
    let view = production(&app, "1h").await;
    assert_eq!(
        segment(&view, SEGMENT)["calls"],
        calls + 10 * n as i64,
        "{view}"
    );
    app.stop().await;
}

/// A Report given up by its caller (the call reset) while it waits for its turn is not
/// decoded nor stored: the agent keeps the windows of a Report it gave up on and sends them
/// again, so storing them as well counted them twice. Before, the server went on with a reset
/// call until it had answered it (an attack helper saw 80 of 80 cancelled Reports stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_given_up_while_it_waits_is_not_stored() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let token = published_with_agent(&app, "order-1").await;
    let queue = Queue::fill(&app, &token, "order-1").await;
    // Behind its own token's queue, a Report of 1,000 calls waits; its caller gives up.
    let given_up = window(
        now_ms() - 3_000,
        1000,
        1000,
        "deadline",
        &[("ok", 1000)],
        &[1000],
    );
    let mut c = client(&app).await;
    let req = authed(
        &token,
        ReportRequest {
            agent_id: "order-1".into(),
            windows: vec![given_up],
            ..Default::default()
        },
    );
    let waited = tokio::time::timeout(Duration::from_millis(200), c.report(req)).await;
    assert!(
        waited.is_err(),
        "answered before its caller gave up: {waited:?}"
    );
    let calls = queue.drain(&app).await;
    let view = production(&app, "1h").await;
    assert_eq!(segment(&view, SEGMENT)["calls"], calls, "{view}");
    app.stop().await;
}

/// The longest counts a histogram of budgetd's range holds: 24,576 counts (3 significant
/// figures up to 2 h) of at most 9 bytes each.
const MOST_COUNTS: usize = 24_576 * 9;

/// A V2 compressed histogram whose counts are `n` zeros: a few hundred bytes sent, `40 + n`
/// inflated, no bucket decoded.
fn zeros_hdr(n: usize) -> Vec<u8> {
    use std::io::Write as _;
    let mut inflated = Vec::new();
    inflated.extend(0x1c84_9313u32.to_be_bytes());
    inflated.extend((n as u32).to_be_bytes());
    inflated.extend(0u32.to_be_bytes());
    inflated.extend(3u32.to_be_bytes());
    inflated.extend(1u64.to_be_bytes());
    inflated.extend(3_600_000_000u64.to_be_bytes());
    inflated.extend(1f64.to_bits().to_be_bytes());
    inflated.resize(40 + n, 0);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&inflated).unwrap();
    let body = z.finish().unwrap();
    let mut out = 0x1c84_9314u32.to_be_bytes().to_vec();
    out.extend((body.len() as u32).to_be_bytes());
    out.extend(body);
    out
}

/// A Report's histograms inflate to at most 64 MiB together: of 320 windows whose histograms
/// inflate as far as a histogram's range allows ([`MOST_COUNTS`], about 200 bytes each sent),
/// 304 are decoded and stored (304 × 221,224 bytes is the first past 64 MiB), the rest
/// skipped. Before, every one was inflated in one go on a worker thread: eight Reports of
/// 3,685 windows inflating to 1 MiB each stalled the server (`/readyz` over 30 s) and were
/// never answered. A window whose counts claim more than its range holds is skipped before
/// they are inflated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reports_histograms_inflate_to_a_bounded_size() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let token = published_with_agent(&app, "order-1").await;
    let mut w = window(now_ms() - 3_000, 1, 1, "deadline", &[("ok", 1)], &[]);
    w.latency_hdr = zeros_hdr(MOST_COUNTS);
    assert!(w.latency_hdr.len() < 1024, "{}", w.latency_hdr.len());
    let accepted = report(&app, &token, "order-1", vec![w.clone(); 320])
        .await
        .unwrap();
    assert_eq!(accepted, 304);
    let mut longer = w;
    longer.latency_hdr = zeros_hdr(MOST_COUNTS + 1);
    let accepted = report(&app, &token, "order-1", vec![longer; 10])
        .await
        .unwrap();
    assert_eq!(accepted, 0);
    app.stop().await;
}

/// A local webhook receiver: records every request; answers 500 to the first delivery of
/// the event in `fail_once`, 200 to everything else.
#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<(String, String, Value)>>>,
    fail_once: Arc<Mutex<Option<String>>>,
}

impl Receiver {
    async fn start(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let me = me.clone();
                    async move {
                        let sig = headers
                            .get("x-budgetd-signature")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .to_owned();
                        let raw = String::from_utf8(body.to_vec()).unwrap();
                        let value: Value = serde_json::from_str(&raw).unwrap();
                        let mut fail = me.fail_once.lock().unwrap();
                        let refuse = fail.as_deref() == value["event"].as_str();
                        if refuse {
                            *fail = None;
                        }
                        me.got.lock().unwrap().push((sig, raw, value));
                        if refuse {
                            axum::http::StatusCode::INTERNAL_SERVER_ERROR
                        } else {
                            axum::http::StatusCode::OK
                        }
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}/hook")
    }

    fn events(&self) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, v)| v.clone())
            .collect()
    }

    fn all_signed_with(&self, secret: &str) -> bool {
        self.got.lock().unwrap().iter().all(|(sig, raw, _)| {
            let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
            mac.update(raw.as_bytes());
            *sig == format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
        })
    }
}

async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amplification_fires_once_resolves_once_and_webhooks_get_signed_events() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(a) = fast_app(backend).await else {
            continue;
        };
        // Two replicas evaluate the rules: each alert still fires and resolves once.
        let b = spawn_replica_with(&a, fast).await;
        let receiver = Receiver::default();
        // The first delivery attempt is refused: it is tried again.
        *receiver.fail_once.lock().unwrap() = Some("alert.firing".into());
        let url = receiver.start().await;
        let secret = "s3cr3t-for-the-hook-0123";
        let hook = a
            .post(
                "/api/v1/webhooks",
                ADMIN_TOKEN,
                json!({"url": url, "secret": secret}),
            )
            .await
            .expect(201)
            .json();
        let hook_id = hook["id"].as_str().unwrap().to_owned();
        assert!(hook.get("secret").is_none());
        let token = published_with_agent(&a, "order-1").await;

        // 2.5 attempts a call in one rollup (unavailable retries: no kill rate).
        let rollup = |at: i64| at.div_euclid(1000) * 1000;
        let start = rollup(now_ms());
        let hot = window(start, 100, 250, "unavailable", &[("ok", 100)], &[1000]);
        assert_eq!(report(&a, &token, "order-1", vec![hot]).await.unwrap(), 1);
        let firing = eventually("the amplification alert fires", async || {
            let list = a
                .get("/api/v1/alerts?state=firing", ADMIN_TOKEN)
                .await
                .expect(200)
                .json();
            list["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["rule"] == "amplification")
                .cloned()
        })
        .await;
        assert_eq!(firing["chain"], "checkout");
        assert_eq!(firing["segment"], SEGMENT);
        assert_eq!(firing["value"], 2.5);
        assert_eq!(firing["threshold"], 2.0);
        assert_eq!(firing["detail"]["counts"]["attempts"], 250);

        // Healthy traffic in later rollups: resolved at the first one without the excess.
        let resolved = eventually("the alert resolves", async || {
            let calm = window(
                now_ms() - 200,
                100,
                100,
                "unavailable",
                &[("ok", 100)],
                &[1000],
            );
            report(&b, &token, "order-1", vec![calm]).await.unwrap();
            let list = a
                .get("/api/v1/alerts", ADMIN_TOKEN)
                .await
                .expect(200)
                .json();
            list["alerts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["rule"] == "amplification" && x["state"] == "resolved")
                .cloned()
        })
        .await;
        assert_eq!(resolved["id"], firing["id"]);
        assert!(resolved["resolved_at"].as_str().is_some());

        let events = eventually("both alert events delivered", async || {
            let alerts: Vec<Value> = receiver
                .events()
                .into_iter()
                .filter(|e| e["event"].as_str().unwrap().starts_with("alert."))
                .collect();
            let firing = alerts
                .iter()
                .filter(|e| e["event"] == "alert.firing")
                .count();
            let resolved = alerts.iter().any(|e| e["event"] == "alert.resolved");
            (resolved && firing == 2).then_some(alerts)
        })
        .await;
        // Deliveries: the firing event twice (refused, then accepted), the resolved once.
        let mut kinds: Vec<&str> = events
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        kinds.sort_unstable();
        assert_eq!(
            kinds,
            ["alert.firing", "alert.firing", "alert.resolved"],
            "{events:?}"
        );
        assert_eq!(events[0]["event"], "alert.firing");
        assert_eq!(events[0]["alert"]["value"], 2.5);
        assert!(events[0]["text"]
            .as_str()
            .unwrap()
            .contains("FIRING amplification"));
        assert!(receiver.all_signed_with(secret));
        let approved = receiver
            .events()
            .into_iter()
            .filter(|e| e["event"] == "baseline.approved")
            .count();
        assert_eq!(approved, 1, "the approval went to the webhook too");

        // The receiver answers before the deliverer records the answer: wait for the record.
        let firing_delivery = eventually("the firing delivery recorded as delivered", async || {
            let log = a
                .get(
                    &format!("/api/v1/webhooks/{hook_id}/deliveries"),
                    ADMIN_TOKEN,
                )
                .await
                .expect(200)
                .json();
            log["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["event"] == "alert.firing" && d["state"] != "pending")
                .cloned()
        })
        .await;
        assert_eq!(firing_delivery["state"], "delivered");
        assert_eq!(firing_delivery["attempts"], 2);
        assert_eq!(firing_delivery["last_status"], 200);
        let metrics = a.get("/metrics", ADMIN_TOKEN).await.expect(200);
        let text = String::from_utf8(metrics.body.to_vec()).unwrap();
        assert!(
            text.contains("budgetd_alerts_firing{rule=\"amplification\"} 0"),
            "{text}"
        );
        b.stop().await;
        a.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_are_admin_only_and_checked() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let approver = app.token("approver", "abe").await;
    let hook = json!({"url": "http://127.0.0.1:9/hook", "secret": "0123456789abcdef"});
    app.post("/api/v1/webhooks", &approver, hook.clone())
        .await
        .expect(403);
    app.get("/api/v1/webhooks", &approver).await.expect(403);
    for (body, why) in [
        (
            json!({"url": "ftp://x/y", "secret": "0123456789abcdef"}),
            "http",
        ),
        (
            json!({"url": "http://127.0.0.1/h", "secret": "short"}),
            "secret",
        ),
        (
            json!({"url": "http://127.0.0.1/h", "secret": "0123456789abcdef", "events": ["alert.fired"]}),
            "alert.firing",
        ),
    ] {
        let a = app
            .post("/api/v1/webhooks", ADMIN_TOKEN, body)
            .await
            .expect(400);
        assert!(
            a.json()["error"]["message"].as_str().unwrap().contains(why),
            "{}",
            a.json()
        );
    }
    // A repeat under the same Idempotency-Key answers the first webhook, and makes no other.
    let create = || {
        app.http
            .post(app.url("/api/v1/webhooks"))
            .bearer_auth(ADMIN_TOKEN)
            .header("idempotency-key", "hook-1")
            .json(&hook)
    };
    let created = app.raw(create()).await.expect(201).json();
    let again = app.raw(create()).await.expect(201).json();
    assert_eq!(again["id"], created["id"]);
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["events"], json!(["*"]));
    let list = app
        .get("/api/v1/webhooks", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    assert_eq!(list["webhooks"].as_array().unwrap().len(), 1);
    assert!(
        !list.to_string().contains("0123456789abcdef"),
        "the secret is never shown"
    );
    app.send(
        reqwest::Method::DELETE,
        &format!("/api/v1/webhooks/{id}"),
        ADMIN_TOKEN,
        None,
    )
    .await
    .expect(204);
    app.get(&format!("/api/v1/webhooks/{id}/deliveries"), ADMIN_TOKEN)
        .await
        .expect(404);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nack_fires_an_alert_and_an_agent_nack_event() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let receiver = Receiver::default();
    let url = receiver.start().await;
    app.post(
        "/api/v1/webhooks",
        ADMIN_TOKEN,
        json!({"url": url, "secret": "0123456789abcdef", "events": ["agent.nack", "alert.firing"]}),
    )
    .await
    .expect(201);
    let token = published_with_agent(&app, "order-1").await;
    let revision = app
        .get("/api/v1/chains/checkout/budgets", ADMIN_TOKEN)
        .await
        .expect(200)
        .json()["revision"]
        .as_i64()
        .unwrap();
    client(&app)
        .await
        .ack(authed(
            &token,
            budget_proto::v1::AckRequest {
                agent_id: "order-1".into(),
                revision,
                accepted: false,
                error: "inversion: order->inventory".into(),
            },
        ))
        .await
        .unwrap();
    let alert = eventually("the nack alert fires", async || {
        let list = app
            .get("/api/v1/alerts?state=firing", ADMIN_TOKEN)
            .await
            .expect(200)
            .json();
        list["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["rule"] == "nack")
            .cloned()
    })
    .await;
    assert_eq!(alert["chain"], "checkout");
    assert_eq!(alert["value"], 1.0);
    assert_eq!(alert["detail"]["agents"], json!(["order-1"]));
    let events = eventually("the agent.nack event", async || {
        let e = receiver.events();
        (e.iter().any(|e| e["event"] == "agent.nack") && e.len() == 2).then_some(e)
    })
    .await;
    let nack = events.iter().find(|e| e["event"] == "agent.nack").unwrap();
    assert!(
        nack["text"].as_str().unwrap().contains("inversion"),
        "{nack}"
    );
    assert!(
        events.iter().all(|e| e["event"] != "baseline.approved"),
        "not subscribed"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_from_production_names_its_window_and_agents() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let token = published_with_agent(&app, "order-1").await;
    let uploader = app.token("uploader", "uma2").await;
    let seg = |id: &str, n: usize, us: u64| {
        let mut w = window(
            now_ms() - 4_000,
            n as u64,
            n as u64,
            "deadline",
            &[("ok", n as u64)],
            &vec![us; n],
        );
        w.segment = id.into();
        w
    };
    // Too few samples for payment (volatile: p999-based, needs 1 000).
    report(
        &app,
        &token,
        "order-1",
        vec![
            seg("order->inventory", 200, 50_000),
            seg("order->payment", 999, 250_000),
            seg("order->user", 100, 9_000),
        ],
    )
    .await
    .unwrap();
    let refused = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &uploader,
            json!({"from": "production", "window": "1h"}),
        )
        .await
        .expect(422)
        .json();
    let short = refused["error"]["details"]["segments"].as_array().unwrap();
    assert_eq!(short.len(), 1, "{refused}");
    assert_eq!(short[0]["segment"], "order->payment");
    assert_eq!(short[0]["needed"], 1000);

    report(
        &app,
        &token,
        "order-1",
        vec![seg("order->payment", 1, 250_000)],
    )
    .await
    .unwrap();
    let draft = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &uploader,
            json!({"from": "production"}),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(draft["state"], "draft");
    let payment = draft["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "order->payment")
        .unwrap();
    assert_eq!(payment["samples"], 1000);
    assert!(
        (249.9..=250.2).contains(&payment["p999_ms"].as_f64().unwrap()),
        "{payment}"
    );
    // The draft keeps the fleet's merged histogram: its kill rates are production's own. Every
    // payment call took 250 ms, under its 325 ms timeout; what-if at 200 ms kills them all.
    assert_eq!(payment["kill_rate"].as_f64(), Some(0.0), "{payment}");
    let whatif = app
        .get(
            &format!(
                "/api/v1/baselines/{}/whatif?segment=order->payment&timeout_ms=200",
                draft["id"].as_str().unwrap()
            ),
            ADMIN_TOKEN,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        (whatif["kill_rate"].as_f64(), whatif["samples"].as_u64()),
        (Some(1.0), Some(1000)),
        "{whatif}"
    );
    let run_id = draft["run_id"].as_str().unwrap();
    let run = app
        .get(
            &format!("/api/v1/chains/checkout/runs/{run_id}"),
            ADMIN_TOKEN,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(run["tool"], "production");
    let source = run["sources"][0]["name"].as_str().unwrap();
    assert!(source.starts_with("production 1h "), "{source}");
    assert!(source.contains("order-1"), "{source}");
    assert_eq!(run["sources"][0]["format"], "production");
    let bad = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &uploader,
            json!({"from": "staging"}),
        )
        .await
        .expect(422);
    assert!(bad.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("production"));
    app.stop().await;
}

/// A Report's decoded histograms are bounded together: windows past 2^20 buckets are skipped
/// (and counted as not accepted, so the agent sends them again), where every window's buckets
/// were held until the merge — gigabytes from one agent token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_holds_a_bounded_number_of_buckets() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let token = published_with_agent(&app, "order-1").await;
    // Every bucket of a 3-digit histogram from 1 µs to about 17 minutes: ~21,000 buckets.
    let mut wide = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    let mut v = 1u64;
    while v < 1_000_000_000 {
        wide.record(v).unwrap();
        v = wide.next_non_equivalent(v);
    }
    let buckets = wide.distinct_values();
    assert!(buckets > 20_000, "{buckets}");
    let mut bytes = Vec::new();
    hdrhistogram::serialization::Serializer::serialize(
        &mut hdrhistogram::serialization::V2DeflateSerializer::new(),
        &wide,
        &mut bytes,
    )
    .unwrap();
    let start = now_ms() - 4_000;
    let windows: Vec<SegmentWindow> = (0..60)
        .map(|i| {
            let mut w = window(start + i, 1, 1, "deadline", &[("ok", 1)], &[1_000]);
            w.latency_hdr = bytes.clone();
            w
        })
        .collect();
    let accepted = report(&app, &token, "order-1", windows).await.unwrap() as usize;
    // About 2^20 / 21,500 = 48.8 windows fit (the decoder counts non-empty buckets, a few
    // fewer than the library's distinct values); the other 11 are left for the next report.
    assert!(
        (47..=50).contains(&accepted),
        "{accepted} windows of {buckets} buckets"
    );
    app.stop().await;
}

/// `budgetctl bench report` is what sizes `agents.max_call_bytes` for a fleet: its agents'
/// Reports must be real ones the server stores, counted as the server answered them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_report_sends_a_fleets_reports_and_they_are_stored() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let grpc = app.grpc_url();
    let args = [
        "--json",
        "bench",
        "report",
        "--agents",
        "20",
        "--connections",
        "2",
        "--windows",
        "2",
        "--window-secs",
        "2",
        "--latencies",
        "500",
        "--grpc",
        &grpc,
    ];
    let out = crate::releases::budgetctl(&app, ADMIN_TOKEN, &args)
        .await
        .expect(0)
        .json();
    assert_eq!(out["reports"]["sent"], 40, "{out}");
    assert_eq!(out["reports"]["by_code"], json!({"Ok": 40}), "{out}");
    assert_eq!(out["segments_per_report"], 4, "{out}");
    assert_eq!(out["windows_accepted"], 160, "{out}");
    // Each agent sent within a quarter of the 2 s window after its boundary.
    assert_eq!(out["spread_ms"], 500, "{out}");
    let chain = out["chain"].as_str().unwrap();
    let view = app
        .get(
            &format!("/api/v1/chains/{chain}/production?window=1h"),
            ADMIN_TOKEN,
        )
        .await
        .expect(200)
        .json();
    let segments = view["segments"].as_array().unwrap();
    assert_eq!(segments.len(), 4, "{view}");
    for s in segments {
        // 20 agents × 2 windows × 500 calls, each with 5 deadline retries per 500.
        assert_eq!(s["calls"], 20_000, "{s}");
        assert_eq!(s["attempts"], 20_200, "{s}");
        assert_eq!(s["agents"], 20, "{s}");
    }
}

/// `bench report` with a `--grpc` where nothing listens says it cannot connect there and names
/// `--grpc` (before, its hint named `--url`, the HTTP address that had worked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_report_names_grpc_when_it_cannot_connect() {
    let app = fast_app(Backend::Sqlite).await.unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let grpc = format!("http://127.0.0.1:{port}");
    let args = ["bench", "report", "--agents", "1", "--grpc", &grpc];
    let out = crate::releases::budgetctl(&app, ADMIN_TOKEN, &args)
        .await
        .expect(7);
    assert!(
        out.stderr.contains(&format!("cannot connect to {grpc}")),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("set --grpc"), "{}", out.stderr);
    assert!(!out.stderr.contains("--url"), "{}", out.stderr);
    // budgetd's HTTP address given as --grpc: named as not the gRPC listener, before any agent
    // fails on a protocol error.
    let http = app.url("").trim_end_matches('/').to_owned();
    let args = ["bench", "report", "--agents", "1", "--grpc", &http];
    let out = crate::releases::budgetctl(&app, ADMIN_TOKEN, &args)
        .await
        .expect(7);
    assert!(
        out.stderr.contains("not budgetd's gRPC listener") && out.stderr.contains("set --grpc"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("compression flag"), "{}", out.stderr);
    app.stop().await;
}
