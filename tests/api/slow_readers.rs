//! HTTP peers that do not take what the server sends them hold neither a connection nor its
//! answers for long (docs/limits.md, "What this bounds"): an HTTP/2 peer that never opens a
//! stream, one that opens no flow-control window while it answers pings, and an HTTP/1.1 peer
//! that never reads its answers; and a slow reader that reads keeps its download.

use std::time::{Duration, Instant};

use budgetd::config::HttpLimits;
use budgetd::http::serve::CLOSE_GRACE;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::limits::{app_with, closed_within};

/// Found by attacking the server: an HTTP/2 connection that sent its preface and settings
/// and then nothing (not even a ping's answer) got a GOAWAY at the header-read timeout but
/// stayed open until the keep-alive gave up on it, 30 s in; it is closed at the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_http2_connection_is_closed_at_the_header_read_timeout() {
    let app = app_with(HttpLimits {
        header_read_timeout_secs: 1,
        idle_timeout_secs: 30,
        ..HttpLimits::default()
    })
    .await;
    let mut tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    // The client preface, then an empty SETTINGS frame.
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let after = closed_within(&mut tcp, Duration::from_secs(8)).await;
    let after = after.expect("the silent HTTP/2 connection is closed within 8 s");
    assert!(
        after < Duration::from_secs(4),
        "closed after {after:?}, well past the 1 s header-read timeout"
    );
    app.stop().await;
}

/// Found by attacking the server: an HTTP/2 peer that opens no flow-control window for the
/// answers it asked for, while it answers the server's pings, held its connection and the
/// answers waiting in it for ever (100 such connections of 100 streams each grew the server
/// by about 130 MB). With an answer not moving for the idle timeout, the connection is closed,
/// however many requests the peer makes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_peer_that_takes_no_answer_is_closed_after_the_idle_timeout() {
    let app = app_with(HttpLimits {
        header_read_timeout_secs: 1,
        idle_timeout_secs: 2,
        ..HttpLimits::default()
    })
    .await;
    // Windows of 0 bytes: no DATA frame can be sent; the driver answers pings.
    let (mut client, driver) = crate::streams::connect(app.addr, Some(0)).await;
    let driver = tokio::spawn(driver);
    let mut answers = Vec::new();
    for _ in 0..10 {
        let request = http::Request::get(format!("http://{}/openapi.json", app.addr))
            .body(())
            .unwrap();
        let (answer, _) = client.send_request(request, true).unwrap();
        answers.push(answer);
    }
    // The answers' bodies are kept: a body dropped resets its stream.
    let mut bodies = Vec::new();
    for head in futures_util::future::join_all(answers).await {
        let head = head.expect("an answer's head");
        assert_eq!(head.status(), 200);
        bodies.push(head.into_body());
    }
    // New requests all the while (each reset at once) do not keep the old answers' connection.
    let addr = app.addr;
    let asking = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let request = http::Request::get(format!("http://{addr}/healthz"))
                .body(())
                .unwrap();
            if client.send_request(request, true).is_err() {
                break;
            }
        }
    });
    let waiting = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(10), driver).await;
    asking.abort();
    let after = waiting.elapsed();
    ended
        .expect("the connection is closed within 10 s")
        .unwrap()
        .ok();
    assert!(
        after >= Duration::from_millis(1500),
        "closed after {after:?}, before the 2 s idle timeout"
    );
    app.stop().await;
}

/// Found by attacking the server: HTTP/1.1 peers that send requests and never read the
/// answers held their connections for ever, so that at `max_connections` nobody else was
/// served. At a limit of one connection, such a peer's connection is closed within the idle
/// timeout and [`CLOSE_GRACE`], and the next client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_peer_that_reads_no_answer_gives_its_connection_back() {
    let app = app_with(HttpLimits {
        max_connections: 1,
        header_read_timeout_secs: 1,
        idle_timeout_secs: 2,
        ..HttpLimits::default()
    })
    .await;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stuck = socket.connect(app.addr).await.unwrap();
    let request = format!("GET /openapi.json HTTP/1.1\r\nhost: {}\r\n\r\n", app.addr);
    stuck
        .write_all(request.repeat(20).as_bytes())
        .await
        .unwrap();
    let started = Instant::now();
    let limit = Duration::from_secs(2) + CLOSE_GRACE + Duration::from_secs(6);
    let served = tokio::time::timeout(limit, async {
        let mut next = tokio::net::TcpStream::connect(app.addr).await.unwrap();
        let request = format!(
            "GET /healthz HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
            app.addr
        );
        next.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        next.read_to_end(&mut answer).await.unwrap();
        answer
    })
    .await;
    let after = started.elapsed();
    let answer = served.unwrap_or_else(|_| panic!("no other client served within {limit:?}"));
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    assert!(
        after >= Duration::from_millis(1500),
        "served after {after:?}, before the stuck connection's idle timeout"
    );
    drop(stuck);
    app.stop().await;
}

/// The other side of the two tests above: a client that takes its answer slowly, but takes
/// it, keeps its download however long it takes. An HTTP/2 client whose stream window is
/// 8 KiB, that gives back what it read every 150 ms, reads the OpenAPI document (about 175
/// KiB) for about three times the 1 s idle timeout and gets all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_that_reads_keeps_its_download() {
    let app = app_with(HttpLimits {
        header_read_timeout_secs: 1,
        idle_timeout_secs: 1,
        ..HttpLimits::default()
    })
    .await;
    let whole = app.http.get(app.url("/openapi.json")).send().await.unwrap();
    assert_eq!(whole.status(), 200);
    let whole = whole.bytes().await.unwrap();
    let (mut client, driver) = crate::streams::connect(app.addr, Some(8192)).await;
    let driver = tokio::spawn(driver);
    let request = http::Request::get(format!("http://{}/openapi.json", app.addr))
        .body(())
        .unwrap();
    let (answer, _) = client.send_request(request, true).unwrap();
    let started = Instant::now();
    let head = answer.await.expect("the answer's head");
    assert_eq!(head.status(), 200);
    let mut body = head.into_body();
    let mut read = Vec::new();
    while let Some(data) = body.data().await {
        let data = data.unwrap_or_else(|e| {
            panic!(
                "cut off after {:?} and {} bytes: {e}",
                started.elapsed(),
                read.len()
            )
        });
        read.extend_from_slice(&data);
        tokio::time::sleep(Duration::from_millis(150)).await;
        body.flow_control().release_capacity(data.len()).unwrap();
    }
    let took = started.elapsed();
    assert!(
        read == whole,
        "{} bytes after {took:?}, not the {} of the document",
        read.len(),
        whole.len()
    );
    assert!(
        took > Duration::from_secs(2),
        "read in {took:?}: not for twice the idle timeout"
    );
    drop(client);
    driver.abort();
    app.stop().await;
}

/// Found in review: once the server was stopping, a connection whose request was still in
/// flight [`CLOSE_GRACE`] after the stop spun its task (a core busy until the request ended)
/// and could drop the answer it had just finished. The real binary, stopped while an upload
/// goes on for 4 s longer than that: the server uses less than a second of CPU in the 3 s
/// past the grace, and the upload is answered 201.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_an_upload_longer_than_the_close_grace_finish() {
    use budget_core::example::CHECKOUT_RUN_A;
    let (server, _http, uploader) = crate::hardening::process_with_checkout().await;
    let head = format!(
        "POST /api/v1/chains/checkout/runs HTTP/1.1\r\nhost: x\r\n\
         authorization: Bearer {uploader}\r\ncontent-type: application/json"
    );
    // A piece a second (the body-read timeout is 30 s): the last arrives CLOSE_GRACE + 4 s
    // after the stop.
    let pieces = CLOSE_GRACE.as_secs() as usize + 5;
    let upload = crate::limits::trickle(
        server.http,
        &head,
        CHECKOUT_RUN_A.as_bytes(),
        pieces,
        Duration::from_secs(1),
    );
    let pid = server.pid();
    let stop = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
        tokio::time::sleep(CLOSE_GRACE + Duration::from_millis(500)).await;
        let before = crate::helpers::cpu_ticks(pid);
        tokio::time::sleep(Duration::from_secs(3)).await;
        crate::helpers::cpu_ticks(pid) - before
    };
    let ((status, took), ticks) = tokio::join!(upload, stop);
    assert!(
        ticks < 100,
        "the stopping server used {ticks} ticks of CPU (10 ms each) in 3 s while it waited"
    );
    assert_eq!(
        status, 201,
        "the upload in flight was answered (after {took:?})"
    );
    assert!(took > CLOSE_GRACE, "{took:?}");
    drop(server);
}
