//! Request bodies read whole (JSON), and load-tool uploads, hold a bounded part of the
//! server's memory all together (docs/limits.md, "What this bounds"), however many requests
//! send them at once.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use budget_core::example::CHECKOUT_TOPOLOGY;
use budgetd::http::api::upload::{UPLOADS_AT_ONCE, UPLOADS_PER_TOKEN};
use budgetd::http::bodies::BODIES_HELD;

use crate::formats::{fixture, put_labelled_checkout, send, Upload};
use crate::helpers::{
    example, settings_for, spawn_app_on, Answer, Backend, People, TestApp, TestDb,
};

/// Found by attacking the server: each JSON body was held to `max_body_bytes` (8 MiB), but
/// nothing bounded them together (one HTTP/2 connection of 60 such bodies grew the server by
/// about 630 MB), and then one token could take all of the bound. Two topology bodies of 8
/// MiB stalled just before their end hold a token's share (16 MiB): its next body is answered
/// 503 at once, another token's is served. Eight, of four tokens, hold the 64 MiB: the next
/// request with a body is answered 503 at once; once their clients are gone, it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_being_read_are_bounded_together() {
    let app = sqlite_app(|s| s.max_body_bytes = 8 * 1024 * 1024).await;
    let p = app.people().await;
    let share = BODIES_HELD / 4 / BODY;
    let mut writers = vec![p.uploader.clone()];
    for i in 1..BODIES_HELD / BODY / share {
        writers.push(app.token("uploader", &format!("writer-{i}")).await);
    }
    let prober = app.token("uploader", "prober").await;
    let topology = example(CHECKOUT_TOPOLOGY);
    let mut stalled: Vec<_> = (0..share)
        .map(|i| stall_body(&app, &writers[0], i))
        .collect();
    let own = answer_until(
        30,
        |status| status == 503,
        || put(&app, &writers[0], &topology),
    )
    .await
    .unwrap_or_else(|status| {
        panic!("a token still served after 30 s with {share} of its bodies being read: {status}")
    });
    let message = own.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains(&format!(
            "its share of the server's ({} MiB of",
            BODIES_HELD >> 22
        )),
        "{message}"
    );
    let other = put(&app, &writers[1], &topology).await;
    assert!(other.status.is_success(), "{}", other.status);
    for (i, token) in writers.iter().enumerate().skip(1) {
        stalled.extend((0..share).map(|j| stall_body(&app, token, i * share + j)));
    }
    let refused = answer_until(30, |status| status == 503, || put(&app, &prober, &topology)).await;
    let refused = refused.unwrap_or_else(|status| {
        panic!(
            "still served after 30 s with {} MiB of bodies being read: {status}",
            BODIES_HELD >> 20
        )
    });
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains(&format!("({} MiB together)", BODIES_HELD >> 20)),
        "{message}"
    );
    assert_eq!(refused.headers["retry-after"], "1");
    for held in stalled {
        held.abort();
    }
    let served = answer_until(15, |status| status < 300, || put(&app, &prober, &topology)).await;
    if let Err(status) = served {
        panic!("not served within 15 s of the stalled bodies' clients going: {status}");
    }
    app.stop().await;
}

/// Found in review: a token's share was a quarter of the pool, or `max_body_bytes` if larger,
/// but a body without a length grows by doubling: at a `max_body_bytes` of 24 MiB, one chunked
/// body of 16 MiB, alone, was answered 503 (its token's share), and sending it again could
/// never succeed. It is read (and refused as a topology, 422).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_body_without_a_length_fits_its_tokens_share() {
    let app = sqlite_app(|s| s.max_body_bytes = 24 * 1024 * 1024).await;
    let p = app.people().await;
    let mut body = b"{\"pad\": \"".to_vec();
    body.resize(16 * 1024 * 1024 - 2, b'a');
    body.extend_from_slice(b"\"}");
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = body
        .chunks(64 * 1024)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    let stream = futures_util::stream::iter(chunks);
    let answer = put_raw(&app, &p.uploader, reqwest::Body::wrap_stream(stream)).await;
    assert_eq!(answer.status, 422, "a chunked body of 16 MiB alone");
    app.stop().await;
}

/// What a JSON body takes parsed was not bounded: every JSON body is parsed whole, and 1 MB of
/// one-key objects grows the server by about 84 MB (`examples/json_memory.rs`), so the bodies
/// the pool's 64 MiB admits could take gigabytes parsed. Now what a body takes parsed is
/// estimated and charged before it is parsed: a body of 1 MB whose estimate is more than a
/// token's share (64 MiB) is answered 413 at once, saying why (it was parsed, and answered 422
/// as a topology); a topology of 1,000 segments, the most a chain may have, is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_would_take_too_much_parsed_is_refused_before_parsing() {
    let app = sqlite_app(|s| s.max_body_bytes = 2 * 1024 * 1024).await;
    let p = app.people().await;
    let objects = vec![r#"{"a":1}"#; 120 * 1024].join(",");
    let body = format!(r#"{{"entry_budget_ms": 1000, "segments": [{objects}]}}"#);
    assert!(body.len() < 1024 * 1024);
    let answer = put_raw(&app, &p.uploader, body.into()).await;
    assert_eq!(answer.status, 413, "{}", answer.json()["error"]["message"]);
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("more than the 64 MiB one request's JSON may take"),
        "{message}"
    );
    let estimate = answer.json()["error"]["details"]["parsed_bytes"]
        .as_u64()
        .unwrap();
    assert!(estimate > 80 * 1024 * 1024, "{estimate}");

    let root = serde_json::json!({"id": "edge->api", "caller": "edge", "callee": "api",
        "class": "volatile"});
    let mut segments = vec![root];
    segments.extend((1..1000).map(|i| {
        serde_json::json!({"id": format!("api->s{i}"), "caller": "api", "callee": format!("s{i}"),
            "parent": "edge->api", "class": "stable", "stage": 1})
    }));
    let wide = serde_json::json!({"entry_budget_ms": 60000, "segments": segments});
    let answer = app
        .put("/api/v1/chains/wide/topology", &p.uploader, wide)
        .await;
    assert!(
        answer.status.is_success(),
        "{} {:?}",
        answer.status,
        answer.json()
    );
    app.stop().await;
}

/// `body` PUT as chain `checkout`'s topology by `token`, as JSON.
async fn put_raw(app: &TestApp, token: &str, body: reqwest::Body) -> Answer {
    let request = app
        .http
        .put(app.url("/api/v1/chains/checkout/topology"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body);
    app.raw(request).await
}

async fn put(app: &TestApp, token: &str, topology: &serde_json::Value) -> Answer {
    app.put("/api/v1/chains/checkout/topology", token, topology.clone())
        .await
}

/// The stalled bodies' size: `max_body_bytes`.
const BODY: usize = 8 * 1024 * 1024;

/// A topology body of `token`, of [`BODY`] bytes, that sends all but its last byte and holds
/// its connection until aborted. One refused because a probe held part of the pool at its
/// first bytes (its connection answered or closed) is sent again.
fn stall_body(app: &TestApp, token: &str, i: usize) -> tokio::task::JoinHandle<()> {
    let body = BODY - 1;
    let head = format!(
        "PUT /api/v1/chains/held-{i}/topology HTTP/1.1\r\nhost: {}\r\n\
         authorization: Bearer {token}\r\ncontent-type: application/json\r\n\
         content-length: {body}\r\n\r\n{{\"pad\": \"",
        app.addr
    );
    let addr = app.addr;
    tokio::spawn(async move {
        let pad = vec![b'a'; body - 10];
        loop {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            if tcp.write_all(head.as_bytes()).await.is_ok() && tcp.write_all(&pad).await.is_ok() {
                let _ = tcp.read(&mut [0; 1]).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// Found by reading the limits: a load-tool upload holds a latency histogram per label
/// (about 190 KiB; 256 labels: about 50 MB) while it is read, and nothing bounded uploads
/// together. Four uploads stalled halfway, two of one token and two of another, hold every
/// turn: a third token's upload waits `request_timeout_secs` (2 s here), then is answered 503;
/// once one of them is gone it is served. The first token's third upload waits for one of its
/// own two turns, though one of all is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_tool_uploads_take_turns() {
    assert_eq!(
        (UPLOADS_AT_ONCE, UPLOADS_PER_TOKEN),
        (4, 2),
        "the test's arithmetic"
    );
    let (app, p) = labelled_checkout(2, 300).await;
    let (first, second, third) = (
        p.uploader.clone(),
        app.token("uploader", "bo").await,
        app.token("uploader", "cy").await,
    );
    let stalled: Vec<_> = [&first, &first, &second, &second]
        .into_iter()
        .map(|token| stall_upload(&app, token))
        .collect();
    let jtl = Upload::Raw {
        query: "?format=jmeter&dry_run=true",
        body: fixture("jmeter/shop_2x_default.jtl"),
    };
    let refused = answer_until(
        30,
        |status| status == 503,
        || send(&app, &third, "checkout", &jtl),
    )
    .await
    .unwrap_or_else(|status| panic!("an upload still served after 30 s: {status}"));
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("at most 4 load-tool uploads at once, 2 per token")
            && message.contains("turn of all tokens'"),
        "{message}"
    );
    stalled[3].abort();
    served_within_15_s(&app, &third, &jtl, "a stalled upload going").await;
    let own = send(&app, &first, "checkout", &jtl).await.expect(503);
    let message = own.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("turn of this token's"), "{message}");
    for upload in stalled {
        upload.abort();
    }
    served_within_15_s(&app, &first, &jtl, "its stalled uploads going").await;
    app.stop().await;
}

/// Found by reading the limits: an upload holding a turn was cut off only when no byte came
/// within the body-read timeout, so uploads that dribbled (two tokens', a line every 300 ms)
/// held every turn, and another upload waited `request_timeout_secs` (30 s here) for nothing,
/// then was answered 503. While another upload waits, one holding a turn must move 64 KiB in
/// each body-read timeout (2 s here), or it is answered 408 and loses its turn: the waiting
/// upload is served, and dribbling ones are answered 408, raw and multipart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dribbling_uploads_lose_their_turns_to_waiting_ones() {
    let (app, p) = labelled_checkout(30, 2).await;
    let (first, second, third) = (
        p.uploader.clone(),
        app.token("uploader", "bo").await,
        app.token("uploader", "cy").await,
    );
    let answers = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let dribbling: Vec<_> = [
        (&first, false),
        (&first, true),
        (&second, false),
        (&second, true),
    ]
    .into_iter()
    .map(|(token, multipart)| dribble_upload(&app, token, multipart, answers.clone()))
    .collect();
    let one = fixture("jmeter/shop_2x_default.jtl");
    let url = app.url("/api/v1/chains/checkout/runs?format=jmeter&dry_run=true");
    // Every turn is taken once an upload over HTTP/2 (which does not wait) finds none free.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let started = Instant::now();
    loop {
        let status = h2
            .post(&url)
            .bearer_auth(&third)
            .header("content-type", "application/octet-stream")
            .body(one.clone())
            .send()
            .await
            .unwrap()
            .status();
        if status == 503 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let jtl = Upload::Raw {
        query: "?format=jmeter&dry_run=true",
        body: one,
    };
    // Each upload of the third token waits until a dribbling one loses its turn; until both
    // kinds of dribbling upload, raw and multipart, have lost one.
    let lost = |multipart: bool| {
        answers.lock().unwrap().iter().any(|(m, a)| {
            *m == multipart && a.starts_with("HTTP/1.1 408") && a.contains("lost its turn")
        })
    };
    let started = Instant::now();
    while !(lost(false) && lost(true)) {
        let served = send(&app, &third, "checkout", &jtl).await;
        assert_eq!(
            served.status,
            200,
            "an upload waiting while four dribbled: {}",
            served.json()["error"]["message"]
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{:?}",
            answers.lock().unwrap()
        );
    }
    for upload in dribbling {
        upload.abort();
    }
    app.stop().await;
}

/// Found by attacking the server: a multipart upload whose body stopped arriving was
/// answered 400 "invalid multipart body: failed to read stream" (the reason was lost on the
/// way through the multipart parser); it is answered 408 like a raw one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_upload_that_stops_is_answered_408() {
    let (app, p) = labelled_checkout(30, 1).await;
    let part =
        "--drip\r\ncontent-disposition: form-data; name=\"shop\"; filename=\"shop.jtl\"\r\n\r\n\
                1796023253086,72,inventory,200,OK,Shop 1-1,text,true,176,2,2,72\n";
    let head = format!(
        "POST /api/v1/chains/checkout/runs?format=jmeter HTTP/1.1\r\nhost: {}\r\n\
         authorization: Bearer {}\r\ncontent-type: multipart/form-data; boundary=drip\r\n\
         content-length: 100000\r\n\r\n{part}",
        app.addr, p.uploader
    );
    let mut tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(30), rest_of_answer(&mut tcp, b""))
        .await
        .expect("answered within 30 s");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("stopped arriving"), "{answer}");
    app.stop().await;
}

/// A JMeter upload of `token` (a raw body, or a `multipart` one's file part) that sends a
/// line every 300 ms, well within the body-read timeout, and keeps each answer's start in
/// `answers`; one answered is sent again.
fn dribble_upload(
    app: &TestApp,
    token: &str,
    multipart: bool,
    answers: std::sync::Arc<std::sync::Mutex<Vec<(bool, String)>>>,
) -> tokio::task::JoinHandle<()> {
    let line = "1796023253086,72,inventory,200,OK,Shop 1-1,text,true,176,2,2,72\n";
    let chunk = |data: &str| format!("{:x}\r\n{data}\r\n", data.len());
    let (content_type, first) = if multipart {
        (
            "multipart/form-data; boundary=drip",
            format!(
                "--drip\r\ncontent-disposition: form-data; name=\"shop\"; \
                 filename=\"shop.jtl\"\r\n\r\n{line}"
            ),
        )
    } else {
        ("application/octet-stream", line.to_owned())
    };
    let head = format!(
        "POST /api/v1/chains/checkout/runs?format=jmeter HTTP/1.1\r\nhost: {}\r\n\
         authorization: Bearer {token}\r\ncontent-type: {content_type}\r\n\
         transfer-encoding: chunked\r\n\r\n{}",
        app.addr,
        chunk(&first)
    );
    let chunk = chunk(line);
    let addr = app.addr;
    tokio::spawn(async move {
        loop {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut answer = vec![0; 4096];
            if tcp.write_all(head.as_bytes()).await.is_ok() {
                loop {
                    tokio::select! {
                        read = tcp.read(&mut answer) => {
                            let n = read.unwrap_or(0);
                            let answer = rest_of_answer(&mut tcp, &answer[..n]).await;
                            answers.lock().unwrap().push((multipart, answer));
                            break;
                        }
                        () = tokio::time::sleep(Duration::from_millis(300)) => {
                            if tcp.write_all(chunk.as_bytes()).await.is_err() {
                                break;
                            }
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// Sends `upload` of `token` until it is served (200), for at most 15 s after `what`.
async fn served_within_15_s(app: &TestApp, token: &str, upload: &Upload, what: &str) {
    let served = answer_until(
        15,
        |status| status == 200,
        || send(app, token, "checkout", upload),
    );
    if let Err(status) = served.await {
        panic!("not served within 15 s of {what}: {status}");
    }
}

/// Found by attacking the server: uploads waiting for a turn on an HTTP/2 connection held part
/// of its flow-control window (their data not read) from the uploads that had their turns,
/// which stalled until the body-read timeout (408). Four uploads of one token at once on one
/// HTTP/2 connection: each is answered 200 (a dry run) or 503 at once, none 408.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_uploads_are_not_kept_waiting() {
    let (app, p) = labelled_checkout(30, 3).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let one = fixture("jmeter/shop_2x_default.jtl");
    let jtl = one.repeat(4 * 1024 * 1024 / one.len());
    let url = app.url("/api/v1/chains/checkout/runs?format=jmeter&dry_run=true");
    let uploads = (0..4).map(|_| {
        h2.post(&url)
            .bearer_auth(&p.uploader)
            .header("content-type", "application/octet-stream")
            .body(jtl.clone())
            .send()
    });
    let answers = tokio::time::timeout(
        Duration::from_secs(60),
        futures_util::future::join_all(uploads),
    )
    .await
    .expect("four uploads answered within 60 s");
    let mut statuses = Vec::new();
    for answer in answers {
        let answer = answer.unwrap();
        assert_eq!(answer.version(), reqwest::Version::HTTP_2);
        let status = answer.status().as_u16();
        let body: serde_json::Value = answer.json().await.unwrap();
        if status == 503 {
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("over HTTP/2 is not kept waiting"),
                "{message}"
            );
        }
        statuses.push(status);
    }
    assert!(
        statuses.iter().all(|s| [200, 503].contains(s)) && statuses.contains(&200),
        "{statuses:?}"
    );
    app.stop().await;
}

/// An app on SQLite with the given request and body-read timeouts (seconds), and chain
/// `checkout` with the load tools' labels on its segments; its uploader and approver.
async fn labelled_checkout(
    request_timeout_secs: u64,
    body_read_timeout_secs: u64,
) -> (TestApp, People) {
    let app = sqlite_app(|s| {
        s.http_limits.request_timeout_secs = request_timeout_secs;
        s.http_limits.body_read_timeout_secs = body_read_timeout_secs;
    })
    .await;
    let p = app.people().await;
    put_labelled_checkout(&app, &p.uploader).await;
    (app, p)
}

/// An app on SQLite with the tests' settings, `tune`d.
async fn sqlite_app(tune: impl FnOnce(&mut budgetd::Settings)) -> TestApp {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    spawn_app_on(db, |url| {
        let mut settings = settings_for(url);
        tune(&mut settings);
        settings
    })
    .await
}

/// A JMeter upload of `token` that sends a few lines and holds its connection until aborted;
/// one refused (its connection answered or closed) is sent again.
fn stall_upload(app: &TestApp, token: &str) -> tokio::task::JoinHandle<()> {
    let lines = "1796023253086,72,inventory,200,OK,Shop 1-1,text,true,176,2,2,72\n";
    let head = format!(
        "POST /api/v1/chains/checkout/runs?format=jmeter HTTP/1.1\r\nhost: {}\r\n\
         authorization: Bearer {token}\r\ncontent-type: application/octet-stream\r\n\
         transfer-encoding: chunked\r\n\r\n{:x}\r\n{lines}\r\n",
        app.addr,
        lines.len()
    );
    let addr = app.addr;
    tokio::spawn(async move {
        loop {
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            if tcp.write_all(head.as_bytes()).await.is_ok() {
                let _ = tcp.read(&mut [0; 1]).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// An answer whose first bytes were `start`, read on until the server closes the connection
/// (it does after an answer to a body it did not read whole), or for at most 10 s.
async fn rest_of_answer(tcp: &mut tokio::net::TcpStream, start: &[u8]) -> String {
    let mut answer = start.to_vec();
    let mut buf = [0; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends a request every 50 ms until its answer's status is `wanted`: that answer, or after
/// `secs` seconds the last status.
async fn answer_until<F: std::future::Future<Output = Answer>>(
    secs: u64,
    wanted: impl Fn(u16) -> bool,
    request: impl Fn() -> F,
) -> Result<Answer, u16> {
    let started = Instant::now();
    loop {
        let answer = request().await;
        let status = answer.status.as_u16();
        if wanted(status) {
            return Ok(answer);
        }
        if started.elapsed() >= Duration::from_secs(secs) {
            return Err(status);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
