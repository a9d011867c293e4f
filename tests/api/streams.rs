//! Watch streams on the wire: a raw HTTP/2 client against the real binary, for what a tonic
//! client never does (a window too small for an update, a reset while blocked).

use std::time::Duration;

use budget_proto::codec::{frame, unframe};
use budget_proto::v1::BudgetUpdate;
use budget_proto::wire::WatchRequest;
use bytes::Bytes;
use serde_json::{json, Value};

use crate::helpers::{cpu_ticks, ServerProcess, ADMIN_TOKEN};

/// Streams opened in the test.
const STREAMS: usize = 20;

/// A new agent token `name` on `server`.
pub async fn agent_token(server: &ServerProcess, http: &reqwest::Client, name: &str) -> String {
    let created: Value = http
        .post(server.url("/api/v1/tokens"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({"name": name, "role": "agent"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    created["token"].as_str().expect("a token").to_owned()
}

/// Whether every agent `blocked-*` is listed with `connected == want` (and all are listed).
async fn all_connected(server: &ServerProcess, http: &reqwest::Client, want: bool) -> bool {
    let page: Value = http
        .get(server.url("/api/v1/agents?limit=100"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ours: Vec<&Value> = page["agents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| {
            a["agent_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("blocked-"))
        })
        .collect();
    ours.len() == STREAMS && ours.iter().all(|a| a["connected"] == want)
}

async fn eventually(server: &ServerProcess, http: &reqwest::Client, want: bool) -> bool {
    for _ in 0..100 {
        if all_connected(server, http, want).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// `fut`, or a failure naming `step` after 20 s.
async fn within<T>(step: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("{step}: no answer within 20 s"))
}

/// An HTTP/2 connection to the gRPC port at `addr`, its streams' windows `window` bytes
/// (HTTP/2's default of 65,535 when `None`); the connection is the caller's to drive.
pub async fn connect(
    addr: std::net::SocketAddr,
    window: Option<u32>,
) -> (
    h2::client::SendRequest<Bytes>,
    h2::client::Connection<tokio::net::TcpStream, Bytes>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut builder = h2::client::Builder::new();
    if let Some(window) = window {
        builder.initial_window_size(window);
    }
    builder.handshake::<_, Bytes>(tcp).await.unwrap()
}

/// A connection whose streams' windows are closed (0 bytes): no update fits.
async fn small_window(
    server: &ServerProcess,
) -> (
    h2::client::SendRequest<Bytes>,
    h2::client::Connection<tokio::net::TcpStream, Bytes>,
) {
    connect(server.grpc, Some(0)).await
}

/// Opens a Watch of `checkout` as `agent_id` on a connection with closed windows; returns its
/// request half, its body and what arrived of the body within 300 ms (nothing).
async fn open_watch(
    client: h2::client::SendRequest<Bytes>,
    token: &str,
    agent_id: &str,
) -> (h2::SendStream<Bytes>, h2::RecvStream, Vec<u8>) {
    let (send, mut body) = watch_on(client, token, agent_id, &["checkout"]).await;
    let mut got = Vec::new();
    if let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_millis(300), body.data()).await
    {
        got.extend_from_slice(&chunk);
    }
    assert!(got.is_empty(), "{} bytes past a closed window", got.len());
    (send, body, got)
}

/// Opens a Watch of `chains` as `agent_id` on `client`: its request half and its body.
pub async fn watch_on(
    client: h2::client::SendRequest<Bytes>,
    token: &str,
    agent_id: &str,
    chains: &[&str],
) -> (h2::SendStream<Bytes>, h2::RecvStream) {
    let mut client = within("HTTP/2 ready", client.ready()).await.unwrap();
    let req = http::Request::post("/budget.v1.BudgetControl/Watch")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {token}"))
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(req, false).unwrap();
    let watch = WatchRequest {
        agent_id: agent_id.into(),
        chains: chains.iter().map(|c| c.to_string()).collect(),
        ..Default::default()
    };
    send.send_data(frame(&watch), true).unwrap();
    let response = within("Watch response headers", response).await.unwrap();
    assert_eq!(response.status(), 200);
    (send, response.into_body())
}

/// The first whole update on `body` (after the bytes already in `got`), the window given back
/// as it is read.
pub async fn read_update(body: &mut h2::RecvStream, mut got: Vec<u8>) -> BudgetUpdate {
    within("the whole update", async {
        loop {
            if got.len() >= 5 {
                let len = u32::from_be_bytes(got[1..5].try_into().unwrap()) as usize;
                if got.len() >= 5 + len {
                    break unframe(&got[..5 + len], "BudgetUpdate").unwrap();
                }
            }
            let chunk = body.data().await.expect("stream open").unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            got.extend_from_slice(&chunk);
        }
    })
    .await
}

/// Agents whose stream window (closed) cannot take the demo chain's snapshot: the server
/// holds it until the window opens. When the agents then reset their streams, the server
/// forgets them (they show as disconnected) and stays idle. Before, the connection's task
/// polled each reset stream's window in a loop until its once-a-second sweep: a core busy for
/// up to a second after every such reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_streams_reset_by_their_agents_are_forgotten_without_spinning() {
    let server = tokio::task::spawn_blocking(|| ServerProcess::start_with_args(&["--demo"]))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let token = agent_token(&server, &http, "blocked-agents").await;

    let (client, connection) = small_window(&server).await;
    tokio::spawn(connection);
    let mut streams = Vec::new();
    for i in 0..STREAMS {
        let (send, body, _) = open_watch(client.clone(), &token, &format!("blocked-{i}")).await;
        streams.push((send, body));
    }
    assert!(
        eventually(&server, &http, true).await,
        "the blocked agents are connected"
    );

    let before = cpu_ticks(server.pid());
    for (send, _) in &mut streams {
        send.send_reset(h2::Reason::CANCEL);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(server.pid()) - before;
    assert!(
        eventually(&server, &http, false).await,
        "reset streams are forgotten: their agents show as disconnected"
    );
    // Idle, the server uses a tick or two in 2 s; spinning, a whole core (~100 ticks).
    assert!(
        used < 30,
        "the server used {used} ticks of CPU in the 2 s after the resets"
    );
    drop(streams);
}

/// A stream whose window is too small for its update is sent nothing, and the whole update
/// once the window opens (the stream's waker, muted while its capacity is reserved, is armed
/// again for the window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_stream_is_sent_its_update_when_the_window_opens() {
    let server = tokio::task::spawn_blocking(|| ServerProcess::start_with_args(&["--demo"]))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let token = agent_token(&server, &http, "blocked-agents").await;

    let (client, mut connection) = small_window(&server).await;
    let (open_tx, mut open_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut opened = false;
        loop {
            tokio::select! {
                _ = &mut connection => break,
                _ = &mut open_rx, if !opened => {
                    opened = true;
                    connection.set_initial_window_size(1 << 20).unwrap();
                }
            }
        }
    });
    let (send, mut body, got) = open_watch(client, &token, "opened-1").await;

    open_tx.send(()).unwrap();
    let update = read_update(&mut body, got).await;
    assert_eq!(update.chains.len(), 1);
    assert_eq!(update.chains[0].chain, "checkout");
    assert!(update.revision > 0);
    drop(send);
}
