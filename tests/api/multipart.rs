//! Multipart uploads hold a bounded part of the server's memory whatever the shape of their
//! parts (docs/limits.md): the `map` parts all together, and what the multipart parser holds
//! before a part's data (the preamble, a part's headers).

use std::time::{Duration, Instant};

use budgetd::http::api::upload::{MAX_MAP_BYTES, MAX_MULTIPART_AHEAD};
use serde_json::json;

use crate::formats::put_labelled_checkout;
use crate::hardening::{expect_status, oha_parts, post_multipart, process_with_checkout, BOUNDARY};
use crate::helpers::{multipart_body, raw_request, RawBody, RssSampler, TestApp};

/// Server memory growth allowed while one client streams 256 MiB that the parser would hold.
const AHEAD_RSS_BOUND_KIB: u64 = 64 * 1024;

/// Found by attacking the server: each `map` part was held to 64 KiB, but every one of them
/// was kept (500 parts of 60 KB grew the server by about 244 MiB). Three map parts of 30 KiB,
/// each under the limit, are refused together, and no run is stored.
async fn map_parts_are_bounded_together(app: &TestApp) {
    let p = app.people().await;
    put_labelled_checkout(app, &p.uploader).await;
    let mut parts: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| {
            let mut map = format!("{{\"pad-{i}\": \"").into_bytes();
            map.extend(std::iter::repeat_n(b'a', 30 * 1024));
            map.extend(b"\"}");
            ("map".to_owned(), map)
        })
        .collect();
    assert!(parts.iter().all(|(_, m)| m.len() < MAX_MAP_BYTES));
    parts.extend(oha_parts());
    let body = multipart_body(BOUNDARY, &parts);
    let answer = expect_status(
        post_multipart(app, &p.uploader, "?format=oha", body).await,
        413,
    );
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains(&format!("map parts exceed {MAX_MAP_BYTES} bytes together")),
        "{message}"
    );
    assert_eq!(
        answer.json()["error"]["details"]["limit_bytes"],
        MAX_MAP_BYTES
    );
    let runs = app.get("/api/v1/chains/checkout/runs", &p.uploader).await;
    assert_eq!(runs.expect(200).json()["runs"], json!([]));
}

crate::on_both_backends!(map_parts_are_bounded_together);

/// Streams `prefix`, 256 MiB of `a`, then `suffix` as an upload to the real binary: the
/// server answers 413 naming [`MAX_MULTIPART_AHEAD`] long before the 256 MiB are sent, its
/// memory grows by less than [`AHEAD_RSS_BOUND_KIB`], and it answers a health check after.
async fn held_ahead_is_refused(what: &str, prefix: String, suffix: String) {
    const FILL: u64 = 256 * 1024 * 1024;
    let (server, http, uploader) = process_with_checkout().await;
    let before = server.rss_kib();
    let sampler = RssSampler::start(server.pid());
    let head = format!(
        "POST /api/v1/chains/checkout/runs?format=oha HTTP/1.1\r\nhost: {}\r\n\
         authorization: Bearer {uploader}\r\n\
         content-type: multipart/form-data; boundary={BOUNDARY}",
        server.http
    );
    let started = Instant::now();
    let body = RawBody {
        prefix: prefix.into_bytes(),
        fill: b'a',
        fill_len: FILL,
        suffix: suffix.into_bytes(),
        stall_after: None,
    };
    let answer = raw_request(server.http, &head, body, Duration::from_secs(60)).await;
    let peak = sampler.finish();
    let growth = peak.saturating_sub(before);
    eprintln!(
        "{what}: RSS before {before} KiB, peak {peak} KiB, growth {growth} KiB; after {:?}: \
         (status, body bytes sent) {:?} of {FILL}",
        started.elapsed(),
        answer.as_ref().map(|a| (a.status, a.sent))
    );
    let answer = answer.unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    assert_eq!(
        answer.status,
        413,
        "{what}: {}",
        String::from_utf8_lossy(&answer.body)
    );
    let error = &answer.json()["error"];
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains(&format!("more than {MAX_MULTIPART_AHEAD} bytes outside")),
        "{what}: {error}"
    );
    assert_eq!(error["details"]["limit_bytes"], MAX_MULTIPART_AHEAD);
    assert!(
        answer.sent < FILL / 2,
        "{what}: {} bytes were read",
        answer.sent
    );
    assert!(
        growth < AHEAD_RSS_BOUND_KIB,
        "{what}: server RSS grew by {growth} KiB (bound {AHEAD_RSS_BOUND_KIB} KiB)"
    );
    let health = http.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

/// Found by attacking the server: a multipart body whose boundary never comes (its preamble,
/// before the first part) or whose part headers never end was held whole until the body
/// ended, past `max_upload_bytes` (which counted only parts' data), and scanned again at
/// every chunk: 200 MB took 56 s of CPU and grew the server by 262 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preamble_or_part_headers_that_never_end_are_refused() {
    held_ahead_is_refused("a preamble", String::new(), String::new()).await;
    let headers =
        format!("--{BOUNDARY}\r\ncontent-disposition: form-data; name=\"inventory\"\r\nx-pad: ");
    held_ahead_is_refused("a part header", headers, "\r\n\r\n{}".into()).await;
}
