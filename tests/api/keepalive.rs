//! gRPC keepalive (docs/limits.md, "gRPC agents"): a connection whose peer does not answer a
//! ping within 10 s (pings every 30 s) is closed, unless streams are still being taken from it
//! meanwhile. A peer's answer is read after what it sent before it, so a connection with a
//! backlog of header blocks is read slower than its peer answers: before, such connections
//! were closed under load (`header_flood`, beside busy loops: connection reset), their calls
//! lost. The peers here are raw HTTP/2 that never answer a ping.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use budgetd::grpc::serve::IDLE_WITHOUT_STREAMS;
use budgetd::grpc::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT};

use crate::helpers::{settings_for, spawn_app_on, Backend, TestDb};

/// When the check of the kept connection is made: past the first ping (30 s) and its timeout
/// (10 s), before a connection without streams would be sent GOAWAY (60 s).
const CHECK_AT: Duration = KEEPALIVE_INTERVAL
    .saturating_add(KEEPALIVE_TIMEOUT)
    .saturating_add(Duration::from_secs(6));
/// The connections not kept must end between the first ping and this.
const CLOSED_BY: Duration = CHECK_AT.saturating_add(Duration::from_secs(10));

/// A frame: its 9-byte header, then `payload`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const HEADERS: u8 = 1;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const ACK: u8 = 1;

/// The client preface, empty settings, and the ack of the server's settings.
async fn open(addr: std::net::SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    hello.extend(frame(SETTINGS, ACK, 0, &[]));
    tcp.write_all(&hello).await.unwrap();
    tcp
}

/// A Watch request without a token, whole (END_HEADERS, END_STREAM), on `stream`; in HPACK
/// without Huffman coding nor indexing.
fn watch_headers(stream: u32) -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    let path = b"/budget.v1.BudgetControl/Watch";
    block.extend([0x04, path.len() as u8]);
    block.extend_from_slice(path);
    block.extend([0x01, 9]);
    block.extend_from_slice(b"localhost");
    block.extend([0x0f, 0x10, 16]); // content-type (static index 31)
    block.extend_from_slice(b"application/grpc");
    block.extend([0x00, 2]);
    block.extend_from_slice(b"te");
    block.extend([8]);
    block.extend_from_slice(b"trailers");
    frame(HEADERS, 0x4 | 0x1, stream, &block)
}

/// When the connection `tcp` ends (read to its end, or reset), from `start`.
fn ended_at(mut tcp: TcpStream, start: Instant) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let mut sink = vec![0u8; 4096];
        loop {
            match tcp.read(&mut sink).await {
                Ok(0) | Err(_) => return start.elapsed(),
                Ok(_) => {}
            }
        }
    })
}

/// Reads frames until the ack of a ping carrying `payload` (true) or the connection's end or
/// GOAWAY (false), for at most `limit`.
async fn ping_answered(tcp: &mut TcpStream, payload: [u8; 8], limit: Duration) -> bool {
    let read = async {
        loop {
            let mut head = [0u8; 9];
            if tcp.read_exact(&mut head).await.is_err() {
                return false;
            }
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut body = vec![0u8; len];
            if tcp.read_exact(&mut body).await.is_err() {
                return false;
            }
            match (head[3], head[4]) {
                (GOAWAY, _) => return false,
                (PING, ACK) if body == payload => return true,
                _ => {}
            }
        }
    };
    tokio::time::timeout(limit, read).await.unwrap_or(false)
}

/// Of three connections that never answer a ping, the one that sends nothing and the one in
/// the middle of a header block (which cannot answer one) are closed after the first ping's
/// 10 s (at 30–56 s), and the one that opens a stream every second is kept: past 46 s it
/// answers a ping of its own. Before, all three were closed at about 40 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_whose_streams_are_still_taken_is_kept_past_an_unanswered_ping() {
    assert!(
        CLOSED_BY < IDLE_WITHOUT_STREAMS,
        "checked before the idle GOAWAY"
    );
    let db = TestDb::new(Backend::Sqlite).await.expect("SQLite");
    let app = spawn_app_on(db, settings_for).await;
    let start = Instant::now();
    let quiet = open(app.grpc_addr).await;
    let mut stuck = open(app.grpc_addr).await;
    let mut busy = open(app.grpc_addr).await;
    // A header block begun and never ended: no END_HEADERS, no CONTINUATION.
    let mut begun = watch_headers(1);
    begun[4] = 0;
    stuck.write_all(&begun).await.unwrap();
    let ended = [
        ("quiet", ended_at(quiet, start)),
        ("stuck", ended_at(stuck, start)),
    ];
    let mut stream = 1;
    while start.elapsed() < CHECK_AT {
        busy.write_all(&watch_headers(stream))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the busy peer's stream {stream} not sent at {:?}: {e}",
                    start.elapsed()
                )
            });
        stream += 2;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let payload = *b"budgetd!";
    busy.write_all(&frame(PING, 0, 0, &payload))
        .await
        .expect("the busy peer's ping is sent");
    assert!(
        ping_answered(&mut busy, payload, Duration::from_secs(10)).await,
        "the connection that kept opening streams was closed by {:?}",
        start.elapsed()
    );
    for (which, end) in ended {
        let limit = CLOSED_BY.saturating_sub(start.elapsed());
        let at = tokio::time::timeout(limit, end)
            .await
            .unwrap_or_else(|_| panic!("the {which} connection still open at {CLOSED_BY:?}"))
            .unwrap();
        eprintln!(
            "keepalive: the {which} connection ended at {at:?}, {} streams opened on the kept one",
            stream / 2
        );
        assert!(
            (KEEPALIVE_INTERVAL..CLOSED_BY).contains(&at),
            "the {which} connection ended at {at:?}"
        );
    }
    drop(busy);
    app.stop().await;
}
