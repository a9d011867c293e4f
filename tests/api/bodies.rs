//! Request bodies read whole (JSON) hold a bounded part of the server's memory all together
//! (docs/limits.md, "What this bounds"), however many requests send them at once.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt as _;

use budget_core::example::CHECKOUT_TOPOLOGY;
use budgetd::http::extract::BODIES_HELD;

use crate::helpers::{example, settings_for, spawn_app_on, Backend, TestDb};

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
                let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                tcp.write_all(head.as_bytes()).await.unwrap();
                let pad = vec![b'a'; body - 10];
                tcp.write_all(&pad).await.unwrap();
                std::future::pending::<()>().await;
                drop(tcp);
            })
        })
        .collect();
    let topology = example(CHECKOUT_TOPOLOGY);
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "DEBUG finished: {:?}",
        stalled.iter().map(|h| h.is_finished()).collect::<Vec<_>>()
    );
    let started = Instant::now();
    let refused = loop {
        let answer = app
            .put(
                "/api/v1/chains/checkout/topology",
                &p.uploader,
                topology.clone(),
            )
            .await;
        if answer.status.as_u16() == 503 {
            break answer;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still served after 30 s with {} MiB of bodies being read: {}",
            BODIES_HELD >> 20,
            answer.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
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
    let started = Instant::now();
    loop {
        let answer = app
            .put(
                "/api/v1/chains/checkout/topology",
                &p.uploader,
                topology.clone(),
            )
            .await;
        if answer.status.is_success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "not served within 15 s of the stalled bodies' clients going: {}",
            answer.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.stop().await;
}
