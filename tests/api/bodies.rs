//! Request bodies read whole (JSON) hold a bounded part of the server's memory all together
//! (docs/limits.md, "What this bounds"), however many requests send them at once.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use budget_core::example::CHECKOUT_TOPOLOGY;
use budgetd::http::extract::BODIES_HELD;

use crate::helpers::{example, settings_for, spawn_app_on, Backend, TestApp, TestDb};

/// Found by attacking the server: each JSON body was held to `max_body_bytes` (8 MiB), but
/// nothing bounded them together (one HTTP/2 connection of 60 such bodies grew the server by
/// about 630 MB). Eight topology bodies of 8 MiB stalled just before their end hold the 64
/// MiB: the next request with a body is answered 503 at once; once their clients are gone,
/// it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_being_read_are_bounded_together() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let app = spawn_app_on(db, |url| budgetd::Settings {
        max_body_bytes: 8 * 1024 * 1024,
        ..settings_for(url)
    })
    .await;
    let p = app.people().await;
    let body = 8 * 1024 * 1024 - 1;
    // Each sends all of its body but its last byte, and holds its connection until aborted.
    // One refused because a probe below held part of the pool at its first bytes (its
    // connection answered or closed) sends again.
    let stalled: Vec<_> = (0..BODIES_HELD / (8 * 1024 * 1024))
        .map(|i| {
            let head = format!(
                "PUT /api/v1/chains/held-{i}/topology HTTP/1.1\r\nhost: {}\r\n\
                 authorization: Bearer {}\r\ncontent-type: application/json\r\n\
                 content-length: {body}\r\n\r\n{{\"pad\": \"",
                app.addr, p.uploader
            );
            let addr = app.addr;
            tokio::spawn(async move {
                let pad = vec![b'a'; body - 10];
                loop {
                    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                    if tcp.write_all(head.as_bytes()).await.is_ok()
                        && tcp.write_all(&pad).await.is_ok()
                    {
                        // Held until the server answers or closes, or the task is aborted.
                        let _ = tcp.read(&mut [0; 1]).await;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        })
        .collect();
    let topology = example(CHECKOUT_TOPOLOGY);
    let refused = put_until(&app, &p.uploader, &topology, 30, |status| status == 503).await;
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
    for held in stalled {
        held.abort();
    }
    let served = put_until(&app, &p.uploader, &topology, 15, |status| status < 300).await;
    if let Err(status) = served {
        panic!("not served within 15 s of the stalled bodies' clients going: {status}");
    }
    app.stop().await;
}

/// Puts `topology` on `checkout` every 50 ms until its answer's status is `wanted`: that
/// answer, or after `secs` seconds the last status.
async fn put_until(
    app: &TestApp,
    token: &str,
    topology: &serde_json::Value,
    secs: u64,
    wanted: impl Fn(u16) -> bool,
) -> Result<crate::helpers::Answer, u16> {
    let started = Instant::now();
    loop {
        let answer = app
            .put("/api/v1/chains/checkout/topology", token, topology.clone())
            .await;
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
