//! The gRPC listener's bounds on clients before they hold a stream (docs/limits.md, "gRPC
//! agents"): a call is refused from its headers unless it carries an agent token, before any
//! of its request is read; a Watch takes one of its token's streams before its request is
//! read; a request must arrive in full within a time; connections are limited in number.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use budgetd::config::Settings;
use bytes::Bytes;

use crate::helpers::{settings_for, spawn_app_on, Backend, TestApp, TestDb};

const WATCH: &str = "/budget.v1.BudgetControl/Watch";
const ACK: &str = "/budget.v1.BudgetControl/Ack";
const REPORT: &str = "/budget.v1.BudgetControl/Report";

async fn app_with(tune: impl FnOnce(&mut Settings)) -> TestApp {
    let db = TestDb::new(Backend::Sqlite).await.expect("SQLite");
    spawn_app_on(db, |url| {
        let mut s = settings_for(url);
        tune(&mut s);
        s
    })
    .await
}

fn grpc_addr(app: &TestApp) -> SocketAddr {
    app.grpc_addr
}

/// The headers of a gRPC call to `path`, with `token` if any.
fn grpc_request(path: &str, token: Option<&str>) -> http::Request<()> {
    let mut req = http::Request::post(path)
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    req.body(()).unwrap()
}

/// Opens a call to `path` with `token` (if any) and sends `body` without ending the request:
/// the request never arrives in full.
async fn open_call(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (h2::SendStream<Bytes>, h2::client::ResponseFuture) {
    let (client, connection) = crate::streams::connect(addr, None).await;
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let req = grpc_request(path, token);
    let (response, mut send) = client.send_request(req, false).unwrap();
    if !body.is_empty() {
        // A call refused from its headers may be answered, and its stream closed, before its
        // body is sent (this thread preempted meanwhile): its answer says so.
        let _ = send.send_data(Bytes::copy_from_slice(body), false);
    }
    (send, response)
}

/// The gRPC status of a call's answer (trailers-only, or in its trailers), waiting at most
/// `limit`; `None` if nothing came.
pub async fn status_within(
    response: h2::client::ResponseFuture,
    limit: Duration,
) -> Option<(i32, String)> {
    tokio::time::timeout(limit, async {
        let response = response.await.unwrap();
        let headers = response.headers().clone();
        let status = match headers.get("grpc-status") {
            Some(_) => headers,
            None => {
                let mut body = response.into_body();
                while body.data().await.is_some() {}
                body.trailers().await.unwrap().unwrap_or_default()
            }
        };
        let status = tonic::Status::from_header_map(&status).expect("a grpc-status");
        (status.code() as i32, status.message().to_owned())
    })
    .await
    .ok()
}

/// Watch, Ack and Report without an agent token are answered from their headers: the server
/// reads none of the request (which here never ends). Before, the request was read (a Watch's
/// up to 256 KiB on each of 8,192 streams per connection, without any token) before the token
/// was looked at, and a request that never ended was never answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_refused_from_their_headers_before_their_request_is_read() {
    let app = app_with(|_| {}).await;
    let reader = app.token("reader", "dashboards").await;
    let addr = grpc_addr(&app);
    for path in [WATCH, ACK, REPORT] {
        for (who, token, code) in [
            ("no token", None, 16),
            ("an unknown token", Some("not-a-token"), 16),
            ("a reader token", Some(reader.as_str()), 7),
        ] {
            let (_send, response) = open_call(addr, path, token, b"\0\0\0").await;
            let (got, message) = status_within(response, Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("{path} with {who}: not answered before its end"));
            assert_eq!(got, code, "{path} with {who}: {message}");
        }
    }
}

/// A request whose bytes are not a protobuf message is the caller's fault: answered
/// `INVALID_ARGUMENT` naming it, on every call. Before, Ack and Report answered `INTERNAL`
/// (tonic's code for a message its codec cannot decode), which reads as a server fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_is_not_protobuf_is_invalid_argument() {
    let app = app_with(|_| {}).await;
    let agent = app.token("agent", "order-agent").await;
    let addr = grpc_addr(&app);
    // Field 1, wire type 7 (none such), then a varint cut short.
    let garbage = [0u8, 0, 0, 0, 3, 0x0f, 0xff, 0xff];
    for path in [WATCH, ACK, REPORT] {
        let (mut send, response) = open_call(addr, path, Some(&agent), &garbage).await;
        send.send_data(Bytes::new(), true).unwrap();
        let (got, message) = status_within(response, Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("{path}: not answered"));
        assert_eq!(got, 3, "{path}: {message}");
        assert!(message.contains("not a valid"), "{path}: {message}");
    }
}

/// A Watch takes one of its token's streams before its request is read: a token at its limit
/// is refused at once, however many of its requests are still arriving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_takes_its_tokens_stream_before_its_request_is_read() {
    let app = app_with(|s| s.agents.max_streams_per_token = 2).await;
    let agent = app.token("agent", "order-agent").await;
    let addr = grpc_addr(&app);
    let mut pending = Vec::new();
    for _ in 0..2 {
        let (send, response) = open_call(addr, WATCH, Some(&agent), b"\0\0\0").await;
        let answer = status_within(response, Duration::from_millis(500)).await;
        assert_eq!(
            answer, None,
            "a Watch whose request is arriving is not answered"
        );
        pending.push(send);
    }
    let (_send, third) = open_call(addr, WATCH, Some(&agent), b"\0\0\0").await;
    let (code, message) = status_within(third, Duration::from_secs(5))
        .await
        .expect("the third Watch is answered before its request ends");
    assert_eq!(code, 8, "RESOURCE_EXHAUSTED: {message}");
    assert!(message.contains("max_streams_per_token"), "{message}");
}

/// A request that does not arrive in full in time is answered DEADLINE_EXCEEDED: a Watch's
/// within 10 s, an Ack's or Report's within 30 s. Before, it was waited for forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_does_not_end_is_answered_deadline_exceeded() {
    let app = app_with(|_| {}).await;
    let agent = app.token("agent", "order-agent").await;
    let addr = grpc_addr(&app);
    let cases = [(WATCH, 10), (REPORT, 30), (ACK, 30)].map(|(path, secs)| {
        let agent = agent.clone();
        async move {
            let started = Instant::now();
            let (_send, response) = open_call(addr, path, Some(&agent), b"\0\0\0").await;
            let answer = status_within(response, Duration::from_secs(secs + 15)).await;
            (path, secs, answer, started.elapsed())
        }
    });
    let [a, b, c] = cases;
    let (a, b, c) = tokio::join!(a, b, c);
    for (path, secs, answer, took) in [a, b, c] {
        let (code, message) = answer.unwrap_or_else(|| panic!("{path}: never answered"));
        assert_eq!(code, 4, "{path}: DEADLINE_EXCEEDED: {message}");
        assert!(
            message.contains(&format!("within {secs} s")),
            "{path}: {message}"
        );
        assert!(
            took >= Duration::from_secs(secs),
            "{path}: answered after {took:?}"
        );
    }
}

/// An Ack or Report is answered once its one message is in, whether or not the peer ends its
/// request. Before, the server decoded the message and then waited for the end of the request
/// (up to 30 s) holding the decoded Report uncharged: 1,309 such Reports of 4,096 small
/// windows (196 KB sent, about 4 MiB decoded each) took the server to 5.3 GiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_call_is_answered_once_its_message_is_in() {
    let app = app_with(|_| {}).await;
    let agent = app.token("agent", "order-agent").await;
    let addr = grpc_addr(&app);
    let report = budget_proto::codec::frame(&budget_proto::v1::ReportRequest {
        agent_id: "order-1".into(),
        windows: Vec::new(),
        ..Default::default()
    });
    // The message arrives in two parts, the prefix split, and the request is never ended.
    let (mut send, response) = open_call(addr, REPORT, Some(&agent), &report[..3]).await;
    send.send_data(report.slice(3..), false).unwrap();
    let answer = status_within(response, Duration::from_secs(10)).await;
    assert_eq!(
        answer,
        Some((0, String::new())),
        "answered OK before the request ends"
    );
    drop(send);
    app.stop().await;
}

/// A unary call carries one request message: one that carries a second (in the data that has
/// arrived with the first) fails `INTERNAL`, as grpc-go's servers answer. Before, tonic
/// decoded a whole second message and dropped it, and the call was handled for the first
/// (here `FAILED_PRECONDITION`, the revision never sent); part of one failed `INTERNAL`
/// "Unexpected EOF decoding stream". (A second message in a DATA frame of its own:
/// `grpc::pipe::tests`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_call_with_a_second_message_fails() {
    let app = app_with(|_| {}).await;
    let agent = app.token("agent", "order-agent").await;
    let addr = grpc_addr(&app);
    let ack = budget_proto::codec::frame(&budget_proto::v1::AckRequest {
        agent_id: "order-1".into(),
        revision: 1,
        accepted: true,
        ..Default::default()
    });
    let want = Some((
        13,
        "a unary call carries one request message; this one carries more".to_owned(),
    ));
    // Both messages in one piece, and the first whole with the second's first bytes.
    let two = [ack.as_ref(), ack.as_ref()].concat();
    for data in [&two[..], &two[..ack.len() + 3]] {
        let (send, response) = open_call(addr, ACK, Some(&agent), data).await;
        let answer = status_within(response, Duration::from_secs(10)).await;
        assert_eq!(answer, want, "{} bytes", data.len());
        drop(send);
    }
    // One message alone: answered as before (this revision was never sent to the agent).
    let (send, response) = open_call(addr, ACK, Some(&agent), &ack).await;
    let answer = status_within(response, Duration::from_secs(10)).await;
    assert_eq!(answer.map(|(code, _)| code), Some(9), "FAILED_PRECONDITION");
    drop(send);
    app.stop().await;
}

/// At `agents.max_connections` the listener accepts no more connections until one closes:
/// the next client's HTTP/2 handshake waits, then completes once a connection is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_limited() {
    let app = app_with(|s| s.agents.max_connections = 2).await;
    let addr = grpc_addr(&app);
    let first = crate::streams::connect(addr, None).await;
    let second = crate::streams::connect(addr, None).await;
    let (first_client, first_conn) = first;
    let first_task = tokio::spawn(first_conn);
    tokio::spawn(second.1);
    // The client's side of a handshake needs nothing from the server: a call tells whether
    // the server serves the connection (a Watch without a token is answered at once).
    let (_send, third) = open_call(addr, WATCH, None, b"").await;
    let third = tokio::spawn(status_within(third, Duration::from_secs(30)));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !third.is_finished(),
        "a third connection was served at a limit of two"
    );
    drop(first_client);
    first_task.abort();
    let (code, _) = third
        .await
        .unwrap()
        .expect("the third connection is served once the first is gone");
    assert_eq!(code, 16, "UNAUTHENTICATED");
}

const HEALTH: &str = "/grpc.health.v1.Health/Check";

/// Opens `n` calls to `path` on one connection, each sending `sent` bytes of a message that
/// claims `claimed` bytes (so none ends); returns the connection's task and each call's
/// status within `wait` (`None`: not answered, still held by the server).
async fn hold_calls(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    n: usize,
    (sent, claimed): (usize, u32),
    wait: Duration,
) -> (
    tokio::task::JoinHandle<()>,
    Vec<h2::SendStream<Bytes>>,
    Vec<Option<(i32, String)>>,
) {
    let (client, connection) = crate::streams::connect(addr, None).await;
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut message = vec![0u8];
    message.extend_from_slice(&claimed.to_be_bytes());
    message.resize(sent, b'a');
    let message = Bytes::from(message);
    let (mut sends, mut answers) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let mut client = client.clone().ready().await.unwrap();
        let req = grpc_request(path, token);
        let (response, mut send) = client.send_request(req, false).unwrap();
        // A call refused from its headers may be answered, and its stream closed, before its
        // data is sent (this thread preempted meanwhile): its answer says so.
        let _ = send.send_data(message.clone(), false);
        sends.push(send);
        answers.push(tokio::spawn(status_within(response, wait)));
    }
    let mut statuses = Vec::new();
    for answer in answers {
        statuses.push(answer.await.unwrap());
    }
    (task, sends, statuses)
}

/// How many calls were answered RESOURCE_EXHAUSTED naming `what`, and how many were not
/// answered; any other answer fails.
fn refused_and_held(statuses: &[Option<(i32, String)>], what: &str) -> (usize, usize) {
    let (mut refused, mut held) = (0, 0);
    for status in statuses {
        match status {
            None => held += 1,
            Some((8, message)) if message.contains(what) => refused += 1,
            Some(other) => panic!("unexpected answer {other:?}"),
        }
    }
    (refused, held)
}

/// A health check (a whole request) answered SERVING within `limit`.
pub async fn healthy_within(addr: SocketAddr, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let (_send, response) = {
            let (client, connection) = crate::streams::connect(addr, None).await;
            tokio::spawn(connection);
            let mut client = client.ready().await.unwrap();
            let req = grpc_request(HEALTH, None);
            let (response, mut send) = client.send_request(req, false).unwrap();
            send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
                .unwrap();
            (send, response)
        };
        if let Some((0, _)) = status_within(response, Duration::from_secs(2)).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Health and reflection calls, which need no token, hold at most 4 MiB together: 400 checks
/// whose requests never end, 15,000 bytes read of each (charged with 8 KiB and their headers,
/// 23,294 bytes), are held as far as that goes (at most 180 of them) and the rest refused
/// RESOURCE_EXHAUSTED at once; the bytes come back when the calls end. Before, every one was
/// held: 4 connections of 2,000 such calls took the server from 20 to 259 MiB, without a
/// token, for 30 s each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_a_token_hold_a_bounded_number_of_bytes() {
    let app = app_with(|_| {}).await;
    let addr = grpc_addr(&app);
    let wait = Duration::from_secs(3);
    let (task, sends, statuses) = hold_calls(addr, HEALTH, None, 400, (15_000, 16_000), wait).await;
    let (refused, held) = refused_and_held(&statuses, "health and reflection calls");
    assert!(
        (150..=(4 << 20) / 23_294).contains(&held),
        "{held} calls held, {refused} refused"
    );
    assert_eq!(held + refused, 400);
    drop(sends);
    task.abort();
    assert!(
        healthy_within(addr, Duration::from_secs(10)).await,
        "the calls' bytes came back once they ended"
    );
}

/// Ack and Report calls hold at most `agents.max_call_bytes` together (a separate budget from
/// the calls without a token): at 1 MiB, Reports whose 200,000 bytes were read (charged with
/// 8 KiB and their headers), one from each of ten tokens, are held five at most, the others
/// refused RESOURCE_EXHAUSTED naming the setting; health checks are still answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_calls_hold_at_most_max_call_bytes() {
    let app = app_with(|s| s.agents.max_call_bytes = 1 << 20).await;
    let addr = grpc_addr(&app);
    let wait = Duration::from_secs(3);
    let (mut held_open, mut statuses) = (Vec::new(), Vec::new());
    for k in 0..10 {
        let agent = app.token("agent", &format!("agent-{k}")).await;
        let (task, sends, answers) =
            hold_calls(addr, REPORT, Some(&agent), 1, (200_000, 300_000), wait).await;
        held_open.push((task, sends));
        statuses.extend(answers);
    }
    let (refused, held) = refused_and_held(&statuses, "agents.max_call_bytes");
    assert!(
        (3..=5).contains(&held) && refused == 10 - held,
        "{held} Reports held, {refused} refused"
    );
    assert!(
        healthy_within(addr, Duration::from_secs(5)).await,
        "a health check is answered while the agents' budget is full"
    );
}

/// A Report of no window from `agent` with `token`: what the listener lets through.
async fn empty_report(
    client: &mut budget_proto::v1::budget_control_client::BudgetControlClient<
        tonic::transport::Channel,
    >,
    token: &str,
    agent: &str,
) -> Result<tonic::Response<budget_proto::v1::ReportResponse>, tonic::Status> {
    let req = budget_proto::v1::ReportRequest {
        agent_id: agent.into(),
        windows: Vec::new(),
        ..Default::default()
    };
    client.report(crate::grpc::authed(token, req)).await
}

/// One agent token has at most 2 × `agents.max_streams_per_token` Ack and Report calls in
/// flight on a replica: at 4 streams, 8 Reports whose requests never end are held and the
/// others refused RESOURCE_EXHAUSTED at once, naming the limit, while another token's Report is
/// stored. Before, one token's calls that sent their headers and nothing more took the whole of
/// `agents.max_call_bytes` (36,000 of them: 74 of 103 other agents' Reports refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_holds_a_bounded_share_of_agent_calls() {
    let app = app_with(|s| s.agents.max_streams_per_token = 4).await;
    let greedy = app.token("agent", "greedy-agent").await;
    let other = app.token("agent", "order-agent").await;
    let addr = grpc_addr(&app);
    let wait = Duration::from_secs(2);
    let (task, sends, statuses) =
        hold_calls(addr, REPORT, Some(&greedy), 40, (100, 1_000), wait).await;
    let (refused, held) = refused_and_held(&statuses, "2 × agents.max_streams_per_token");
    assert_eq!((held, refused), (8, 32), "{statuses:?}");
    let mut client = crate::grpc::client(&app).await;
    let answer = empty_report(&mut client, &other, "order-1").await;
    assert!(answer.is_ok(), "another token's Report: {answer:?}");
    // The places come back when the calls end.
    drop(sends);
    task.abort();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = empty_report(&mut client, &greedy, "greedy-1").await;
        match answer {
            Ok(_) => break,
            Err(status) if Instant::now() < deadline => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("the token's places did not come back: {status:?}"),
        }
    }
}

/// One agent token's calls hold at most a quarter of `agents.max_call_bytes`: at 1 MiB,
/// Reports of one token whose 100,000 bytes were read are held two at most (256 KiB), the
/// others refused RESOURCE_EXHAUSTED naming the token's share, while another token's Report
/// is stored. Before, 65 calls of one token that sent most of a 4 MiB request filled the
/// default 256 MiB, and every other token's Report was refused until they timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_holds_a_quarter_of_max_call_bytes() {
    let app = app_with(|s| s.agents.max_call_bytes = 1 << 20).await;
    let greedy = app.token("agent", "greedy-agent").await;
    let other = app.token("agent", "order-agent").await;
    let addr = grpc_addr(&app);
    let wait = Duration::from_secs(2);
    let (_task, _sends, statuses) =
        hold_calls(addr, REPORT, Some(&greedy), 10, (100_000, 200_000), wait).await;
    let (refused, held) = refused_and_held(&statuses, "one agent token's Ack and Report calls");
    // Two fit in 256 KiB; one only when the calls' data arrived interleaved and a second call
    // was refused part-way.
    assert!(
        (1..=2).contains(&held) && refused == 10 - held,
        "{held} Reports held, {refused} refused: {statuses:?}"
    );
    let mut client = crate::grpc::client(&app).await;
    let answer = empty_report(&mut client, &other, "order-1").await;
    assert!(answer.is_ok(), "another token's Report: {answer:?}");
}

/// A call ends within 40 s however its peer reads: a health check whose answer the peer's
/// window (0 bytes) never lets through is reset then, and its bytes come back. Before, it was
/// held as long as the connection, and enough of them kept every health check refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_answer_is_not_taken_is_reset() {
    let app = app_with(|_| {}).await;
    let addr = grpc_addr(&app);
    let (client, connection) = crate::streams::connect(addr, Some(0)).await;
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let started = Instant::now();
    let (response, mut send) = client
        .send_request(grpc_request(HEALTH, None), false)
        .unwrap();
    send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        let mut body = response.await.expect("the answer's headers").into_body();
        match body.data().await {
            Some(Ok(_)) => panic!("no data fits a window of 0 bytes"),
            Some(Err(e)) => e,
            None => panic!("the answer cannot end without its data"),
        }
    })
    .await
    .expect("the call is reset within 60 s");
    let took = started.elapsed();
    assert_eq!(ended.reason(), Some(h2::Reason::CANCEL), "{ended}");
    assert!(took >= Duration::from_secs(39), "reset after {took:?}");
}
