//! Request bodies read whole (JSON) hold a bounded part of the server's memory all together
//! (docs/limits.md, "What this bounds"), however many requests send them at once.

use std::time::{Duration, Instant};

use budget_core::example::CHECKOUT_TOPOLOGY;
use budgetd::http::extract::BODIES_HELD;

use crate::helpers::{example, raw_request, settings_for, spawn_app_on, Backend, RawBody, TestDb};

/// Found by attacking the server: each JSON body was held to `max_body_bytes` (8 MiB), but
/// nothing bounded them together (one HTTP/2 connection of 60 such bodies grew the server by
/// about 630 MB). Eight topology bodies of 8 MiB stalled just before their end hold the 64
/// MiB: the next request with a body is answered 503 at once; once they are gone (aborted at
/// the body-read timeout, 4 s here), it is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_being_read_are_bounded_together() {
    let db = TestDb::new(Backend::Sqlite).await.unwrap();
    let app = spawn_app_on(db, |url| budgetd::Settings {
        max_body_bytes: 8 * 1024 * 1024,
        http_limits: budgetd::config::HttpLimits {
            body_read_timeout_secs: 4,
            ..Default::default()
        },
        ..settings_for(url)
    })
    .await;
    let p = app.people().await;
    let body = 8 * 1024 * 1024 - 1;
    let stalled: Vec<_> = (0..BODIES_HELD / (8 * 1024 * 1024))
        .map(|i| {
            let head = format!(
                "PUT /api/v1/chains/held-{i}/topology HTTP/1.1\r\nhost: {}\r\n\
                 authorization: Bearer {}\r\ncontent-type: application/json",
                app.addr, p.uploader
            );
            let addr = app.addr;
            tokio::spawn(async move {
                let body = RawBody {
                    prefix: b"{\"pad\": \"".to_vec(),
                    fill: b'a',
                    fill_len: body - 9,
                    suffix: Vec::new(),
                    stall_after: Some(body - 1),
                };
                raw_request(addr, &head, body, Duration::from_secs(25)).await
            })
        })
        .collect();
    let topology = example(CHECKOUT_TOPOLOGY);
    tokio::time::sleep(Duration::from_secs(3)).await;
    for held in &stalled {
        assert!(!held.is_finished(), "a stalled body was answered");
    }
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
            started.elapsed() < Duration::from_secs(15),
            "still served after 15 s with {} MiB of bodies being read: {}",
            BODIES_HELD >> 20,
            answer.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
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
            "not served within 15 s, the stalled bodies timed out: {}",
            answer.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.stop().await;
}
