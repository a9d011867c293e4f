//! Issue 10 ("Harden what exists"), proved through the real HTTP stack or the real binary:
//! bounded multipart `map` parts and file counts (item 1), roles checked before a body is read
//! (items 3 and 14), fixed `/metrics` method labels (4), durable SQLite and folder archive
//! (8), publication times that never go backwards (9) and security headers on every response
//! (15). Memory is measured as the spawned server's `VmRSS` (`/proc/<pid>/status`), sampled
//! every 5 ms; the bounds are the documented ones below.

use std::time::{Duration, Instant};

use budget_core::example::{CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY};
use budgetd::http::api::upload::{MAX_FILES, MAX_MAP_BYTES};
use budgetd::store::{Audit, Verdict};
use rand::{Rng as _, SeedableRng as _};
use reqwest::Method;
use serde_json::{json, Value};

use crate::formats::{labelled_topology, put_labelled_checkout};
use crate::helpers::{
    draft_a, example, fixture, multipart_body, raw_request, settings_for, spawn_app_on, Backend,
    RawAnswer, RawBody, RssSampler, ServerProcess, TestApp, TestDb, ADMIN_TOKEN,
};

/// Server memory growth allowed while one client streams a 256 MiB `map` part.
const MAP_STREAM_RSS_BOUND_KIB: u64 = 64 * 1024;
/// Server memory growth allowed while a `reader` holds 8 concurrent 8 MiB bodies open.
const READER_BODIES_RSS_BOUND_KIB: u64 = 32 * 1024;

pub(crate) const BOUNDARY: &str = "budgetd-hardening-boundary";

pub(crate) fn oha_parts() -> Vec<(String, Vec<u8>)> {
    ["inventory", "payment", "user"]
        .iter()
        .map(|l| (l.to_string(), fixture(&format!("oha/{l}.json"))))
        .collect()
}

/// Posts a multipart upload over a raw connection that reads the answer while it writes: a
/// server that refuses early (without reading the rest) may close the connection, and a
/// client that only reads after writing everything would see a reset instead of the answer.
pub(crate) async fn post_multipart(
    app: &TestApp,
    token: &str,
    query: &str,
    body: Vec<u8>,
) -> RawAnswer {
    let head = format!(
        "POST /api/v1/chains/checkout/runs{query} HTTP/1.1\r\nhost: {}\r\n\
         authorization: Bearer {token}\r\n\
         content-type: multipart/form-data; boundary={BOUNDARY}",
        app.addr
    );
    raw_request(
        app.addr,
        &head,
        RawBody::whole(body),
        Duration::from_secs(30),
    )
    .await
    .expect("an answer to the upload")
}

#[track_caller]
pub(crate) fn expect_status(a: RawAnswer, status: u16) -> RawAnswer {
    assert_eq!(
        a.status,
        status,
        "body: {}",
        String::from_utf8_lossy(&a.body)
    );
    a
}

// ---- Item 1: the multipart `map` part is bounded; at most MAX_FILES file parts ----

async fn multipart_map_and_files_are_bounded(app: &TestApp) {
    let p = app.people().await;
    put_labelled_checkout(app, &p.uploader).await;

    // A 1 MiB map part (a valid JSON object, so only its size is wrong): 413 with the limit.
    let mut map = b"{\"inventory\": \"".to_vec();
    map.extend(std::iter::repeat_n(b'a', 1024 * 1024));
    map.extend(b"\"}");
    let mut parts = vec![("map".to_owned(), map)];
    parts.extend(oha_parts());
    let big = post_multipart(
        app,
        &p.uploader,
        "?format=oha",
        multipart_body(BOUNDARY, &parts),
    )
    .await;
    let big = expect_status(big, 413);
    assert_eq!(big.json()["error"]["code"], "payload_too_large");
    let message = big.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains(&MAX_MAP_BYTES.to_string()),
        "the message names the limit: {message}"
    );
    assert_eq!(big.json()["error"]["details"]["limit_bytes"], MAX_MAP_BYTES);
    assert_eq!(
        app.get("/api/v1/chains/checkout/runs", &p.uploader)
            .await
            .expect(200)
            .json()["runs"],
        json!([])
    );

    // A small map still works.
    let mut parts = vec![(
        "map".to_owned(),
        br#"{"inventory": "order->inventory"}"#.to_vec(),
    )];
    parts.extend(oha_parts());
    let small = post_multipart(
        app,
        &p.uploader,
        "?format=oha",
        multipart_body(BOUNDARY, &parts),
    )
    .await;
    expect_status(small, 201);

    // MAX_FILES + 1 file parts (each a valid oha summary): refused, naming the limit.
    let one = fixture("oha/inventory.json");
    let parts: Vec<(String, Vec<u8>)> = (0..=MAX_FILES)
        .map(|i| (format!("part-{i}"), one.clone()))
        .collect();
    let many = post_multipart(
        app,
        &p.uploader,
        "?format=oha",
        multipart_body(BOUNDARY, &parts),
    )
    .await;
    let many = expect_status(many, 422);
    let message = many.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains(&format!("at most {MAX_FILES} files")),
        "{message}"
    );
    assert_eq!(many.json()["error"]["details"]["limit_files"], MAX_FILES);
}

/// The map part's bytes count against `max_upload_bytes`: a 44 KiB map and ~8 KiB of files
/// exceed a 48 KiB upload limit that neither exceeds alone.
async fn map_part_counts_against_the_upload_limit(backend: Backend) {
    const LIMIT: u64 = 48 * 1024;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let app = spawn_app_on(db, |url| budgetd::Settings {
        max_upload_bytes: LIMIT,
        ..settings_for(url)
    })
    .await;
    let p = app.people().await;
    put_labelled_checkout(&app, &p.uploader).await;
    let mut map = b"{\"pad\": \"".to_vec();
    map.extend(std::iter::repeat_n(b'a', 44 * 1024));
    map.extend(b"\"}");
    assert!((map.len() as u64) < LIMIT && map.len() < MAX_MAP_BYTES);
    let files = oha_parts();
    let files_len: usize = files.iter().map(|(_, b)| b.len()).sum();
    assert!((files_len as u64) < LIMIT);
    assert!((map.len() + files_len) as u64 > LIMIT);
    let mut parts = vec![("map".to_owned(), map)];
    parts.extend(files);
    let a = post_multipart(
        &app,
        &p.uploader,
        "?format=oha",
        multipart_body(BOUNDARY, &parts),
    )
    .await;
    let a = expect_status(a, 413);
    let message = a.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("max_upload_bytes"), "{message}");
    assert_eq!(a.json()["error"]["details"]["limit_bytes"], LIMIT);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_map_part_counts_against_the_upload_limit() {
    map_part_counts_against_the_upload_limit(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_map_part_counts_against_the_upload_limit() {
    map_part_counts_against_the_upload_limit(Backend::Postgres).await;
}

/// Starts the real binary (blocking work, off the async workers).
async fn start_process() -> ServerProcess {
    tokio::task::spawn_blocking(|| ServerProcess::start(&[]))
        .await
        .unwrap()
}

async fn process_call(
    http: &reqwest::Client,
    method: Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = http.request(method, &url).bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn process_token(
    server: &ServerProcess,
    http: &reqwest::Client,
    role: &str,
    name: &str,
) -> String {
    let (status, v) = process_call(
        http,
        Method::POST,
        server.url("/api/v1/tokens"),
        ADMIN_TOKEN,
        Some(json!({"role": role, "name": name})),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    v["token"].as_str().unwrap().to_owned()
}

/// The real binary with chain `checkout` (labelled topology) and an uploader's token.
pub(crate) async fn process_with_checkout() -> (ServerProcess, reqwest::Client, String) {
    let server = start_process().await;
    let http = reqwest::Client::new();
    let uploader = process_token(&server, &http, "uploader", "uma").await;
    let (status, v) = process_call(
        &http,
        Method::PUT,
        server.url("/api/v1/chains/checkout/topology"),
        &uploader,
        Some(labelled_topology()),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    (server, http, uploader)
}

/// Memory: one uploader streams a 256 MiB `map` part (generated as it is sent) to the real
/// binary. The server stops at 64 KiB (413) and its resident memory grows by less than
/// MAP_STREAM_RSS_BOUND_KIB; before the fix it read the whole part (+256 MiB and more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_map_part_stream_keeps_memory_bounded() {
    const PART: u64 = 256 * 1024 * 1024;
    let (server, http, uploader) = process_with_checkout().await;
    // Warm up the upload path (parser, allocator arenas) with a real multipart upload.
    let warm = http
        .post(server.url("/api/v1/chains/checkout/runs?format=oha"))
        .bearer_auth(&uploader)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(multipart_body(BOUNDARY, &oha_parts()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        warm.status().as_u16(),
        201,
        "{}",
        warm.text().await.unwrap()
    );

    let before = server.rss_kib();
    let sampler = RssSampler::start(server.pid());
    let prefix = format!(
        "--{BOUNDARY}\r\ncontent-disposition: form-data; name=\"map\"\r\n\
         content-type: application/json\r\n\r\n{{\"inventory\": \""
    );
    let mut suffix = format!(
        "\"}}\r\n--{BOUNDARY}\r\ncontent-disposition: form-data; name=\"inventory\"; \
         filename=\"inventory.json\"\r\n\r\n"
    )
    .into_bytes();
    suffix.extend(fixture("oha/inventory.json"));
    suffix.extend(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    let head = format!(
        "POST /api/v1/chains/checkout/runs?format=oha HTTP/1.1\r\nhost: {}\r\n\
         authorization: Bearer {uploader}\r\n\
         content-type: multipart/form-data; boundary={BOUNDARY}",
        server.http
    );
    let started = Instant::now();
    let answer = raw_request(
        server.http,
        &head,
        RawBody {
            prefix: prefix.into_bytes(),
            fill: b'a',
            fill_len: PART,
            suffix,
            stall_after: None,
        },
        Duration::from_secs(60),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let peak = sampler.finish();
    let growth = peak.saturating_sub(before);
    eprintln!(
        "map part stream: RSS before {before} KiB, peak {peak} KiB, growth {growth} KiB \
         (bound {MAP_STREAM_RSS_BOUND_KIB} KiB); after {:?}: (status, body bytes sent) {:?} of {PART}",
        started.elapsed(),
        answer.as_ref().map(|a| (a.status, a.sent))
    );
    let answer = answer.expect("an answer to the 256 MiB map part");
    assert_eq!(
        answer.status,
        413,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let message = answer.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains(&MAX_MAP_BYTES.to_string()), "{message}");
    assert!(
        growth < MAP_STREAM_RSS_BOUND_KIB,
        "server RSS grew by {growth} KiB (bound {MAP_STREAM_RSS_BOUND_KIB} KiB)"
    );
    // The server is fine afterwards.
    let (status, _) = process_call(&http, Method::GET, server.url("/healthz"), "", None).await;
    assert_eq!(status, 200);
}

// ---- Items 3 and 14: the role is checked before any body is read ----

/// A reader's write with an Idempotency-Key whose body sends one chunk and then stalls: the
/// 403 arrives anyway (before the fix the idempotency layer waited for the whole body first).
async fn reader_is_refused_before_its_body_is_read(app: &TestApp) {
    let reader = app.token("reader", "rita").await;
    let routes = [
        (
            "POST /api/v1/baselines/bl-20260101-001/approve",
            "application/json",
        ),
        ("PUT /api/v1/chains/checkout/topology", "application/json"),
        ("POST /api/v1/chains/checkout/runs", "application/json"),
        (
            "POST /api/v1/chains/checkout/runs?format=oha",
            "multipart/form-data; boundary=x",
        ),
        ("POST /api/v1/releases", "application/json"),
        ("POST /api/v1/tokens", "application/json"),
    ];
    for (i, (route, content_type)) in routes.into_iter().enumerate() {
        let head = format!(
            "{route} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {reader}\r\n\
             content-type: {content_type}\r\nidempotency-key: stalled-{i}",
            app.addr
        );
        let started = Instant::now();
        let answer = raw_request(
            app.addr,
            &head,
            RawBody {
                prefix: b"{\"comment\": \"".to_vec(),
                fill: b'a',
                fill_len: 8 * 1024 * 1024,
                suffix: b"\"}".to_vec(),
                stall_after: Some(16 * 1024),
            },
            Duration::from_secs(15),
        )
        .await
        .unwrap_or_else(|e| panic!("{route}: the reader got no answer while its body stalls: {e}"));
        let took = started.elapsed();
        assert_eq!(
            answer.status,
            403,
            "{route}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(answer.json()["error"]["code"], "forbidden", "{route}");
        assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
        assert!(took < Duration::from_secs(5), "{route}: 403 took {took:?}");
    }
}

/// Every write route of the OpenAPI document refuses `reader` and `agent` with 403 — also
/// with an Idempotency-Key and a body over `max_body_bytes` (before the fix: 413, the body
/// having been read first). `GET /archive/verify` is for approvers and admins only.
async fn write_routes_refuse_readers_and_verify_is_for_approvers(app: &TestApp) {
    let reader = app.token("reader", "rita").await;
    let agent = app.token("agent", "order-1").await;
    let uploader = app.token("uploader", "uma").await;
    let approver = app.token("approver", "abe").await;
    let openapi = app
        .get("/openapi.json", ADMIN_TOKEN)
        .await
        .expect(200)
        .json();
    // Over max_body_bytes (256 KiB in tests).
    let big = serde_json::to_vec(&json!({ "comment": "a".repeat(300 * 1024) })).unwrap();
    let mut writes = Vec::new();
    for (path, item) in openapi["paths"].as_object().unwrap() {
        let Some(api_path) = path.strip_prefix("/api/v1") else {
            continue;
        };
        for method in ["post", "put", "delete", "patch"] {
            if item.get(method).is_some() {
                writes.push((method.to_ascii_uppercase(), api_path.to_owned()));
            }
        }
    }
    for expected in [
        ("PUT", "/chains/{chain}/topology"),
        ("POST", "/chains/{chain}/runs"),
        ("POST", "/chains/{chain}/baselines"),
        ("POST", "/baselines/{id}/approve"),
        ("POST", "/baselines/{id}/reject"),
        ("POST", "/chains/{chain}/rollback"),
        ("POST", "/releases"),
        ("POST", "/tokens"),
        ("DELETE", "/tokens/{name}"),
    ] {
        assert!(
            writes
                .iter()
                .any(|(m, p)| m == expected.0 && p == expected.1),
            "{expected:?} missing from the OpenAPI document: {writes:?}"
        );
    }
    for (method, template) in &writes {
        let path = template
            .replace("{chain}", "checkout")
            .replace("{id}", "bl-20260101-001")
            .replace("{run_id}", "run-20260101-001")
            .replace("{name}", "somebody");
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        for (who, token) in [("reader", &reader), ("agent", &agent)] {
            let a = app
                .raw(
                    app.http
                        .request(method.clone(), app.url(&format!("/api/v1{path}")))
                        .bearer_auth(token)
                        .json(&json!({})),
                )
                .await;
            assert_eq!(
                (a.status.as_u16(), a.code().as_str()),
                (403, "forbidden"),
                "{who} {method} {path}: {}",
                String::from_utf8_lossy(&a.body)
            );
            // With a key and a body over max_body_bytes: still 403, not 413.
            let head = format!(
                "{method} /api/v1{path} HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {token}\r\n\
                 content-type: application/json\r\nidempotency-key: big-{who}-{method}-{path}",
                app.addr
            );
            let a = raw_request(
                app.addr,
                &head,
                RawBody::whole(big.clone()),
                Duration::from_secs(30),
            )
            .await
            .unwrap_or_else(|e| panic!("{who} {method} {path}: {e}"));
            assert_eq!(
                (a.status, a.json()["error"]["code"].as_str()),
                (403, Some("forbidden")),
                "{who} {method} {path} with a key and a big body: {}",
                String::from_utf8_lossy(&a.body)
            );
        }
    }
    // Item 14: verifying the archive reads every object: approvers and admins only.
    for (who, token, status) in [
        ("reader", &reader, 403),
        ("uploader", &uploader, 403),
        ("agent", &agent, 403),
        ("approver", &approver, 200),
        ("admin", &ADMIN_TOKEN.to_owned(), 200),
    ] {
        let a = app.get("/api/v1/archive/verify", token).await;
        assert_eq!(
            a.status.as_u16(),
            status,
            "{who}: {}",
            String::from_utf8_lossy(&a.body)
        );
    }
}

/// Memory: 8 concurrent 8 MiB JSON bodies with Idempotency-Keys from a `reader`, each held
/// open one byte short of its end. The real binary answers each with 403 without reading it;
/// its resident memory grows by less than READER_BODIES_RSS_BOUND_KIB (before the fix each
/// body was buffered up to `max_body_bytes` = 8 MiB first: +64 MiB and more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_reader_bodies_keep_memory_bounded() {
    const BODY: u64 = 8 * 1024 * 1024;
    let server = start_process().await;
    let http = reqwest::Client::new();
    let reader = process_token(&server, &http, "reader", "rita").await;
    let head = |i: usize| {
        format!(
            "POST /api/v1/baselines/bl-20260101-001/approve HTTP/1.1\r\nhost: {}\r\n\
             authorization: Bearer {reader}\r\ncontent-type: application/json\r\n\
             idempotency-key: reader-{i}",
            server.http
        )
    };
    let body = |stall: bool| RawBody {
        prefix: b"{\"comment\": \"".to_vec(),
        fill: b'a',
        fill_len: BODY - 15,
        suffix: b"\"}".to_vec(),
        stall_after: stall.then_some(BODY - 1),
    };
    // Warm-up: one small refused write.
    let warm = raw_request(
        server.http,
        &head(100),
        body(false),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    assert_eq!(warm.status, 403);

    let before = server.rss_kib();
    let sampler = RssSampler::start(server.pid());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (addr, head) = (server.http, head(i));
        let body = body(true);
        tasks.push(tokio::spawn(async move {
            raw_request(addr, &head, body, Duration::from_secs(20)).await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let peak = sampler.finish();
    let growth = peak.saturating_sub(before);
    eprintln!(
        "8 reader bodies: RSS before {before} KiB, peak {peak} KiB, growth {growth} KiB \
         (bound {READER_BODIES_RSS_BOUND_KIB} KiB); answered after {took:?}"
    );
    for a in answers {
        let a = a.expect("the reader is answered while its body is open");
        assert_eq!(a.status, 403, "{}", String::from_utf8_lossy(&a.body));
    }
    assert!(
        growth < READER_BODIES_RSS_BOUND_KIB,
        "server RSS grew by {growth} KiB (bound {READER_BODIES_RSS_BOUND_KIB} KiB)"
    );
    // Item 8 on the real binary: the database file is private.
    assert_private(&server.data_dir.join("budgetd.db"));
}

// ---- Item 4: /metrics method labels come from a fixed set ----

const METHOD_LABELS: [&str; 10] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "other",
];

fn method_labels(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter_map(|l| l.split_once("method=\"").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('"').map(|(m, _)| m.to_owned()))
        .collect()
}

/// On the real binary (its metrics are its own; the test binary's are shared by every test):
/// 200 made-up methods all count as `other`, none becomes a label, and `/metrics` grows by a
/// label set per route they hit, not one per name (before the fix: ~200 label sets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_metrics_method_labels_are_a_fixed_set() {
    let server = start_process().await;
    let http = reqwest::Client::new();
    let metrics = || async {
        let resp = http.get(server.url("/metrics")).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        resp.text().await.unwrap()
    };
    // Every label set the test's own reads and paths create exists before the baseline.
    metrics().await;
    let before = metrics().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let names: Vec<String> = (0..200)
        .map(|_| {
            let tail: String = (0..10)
                .map(|_| char::from(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[rng.gen_range(0..36)]))
                .collect();
            format!("ZQ{tail}")
        })
        .collect();
    for (i, name) in names.iter().enumerate() {
        let path = if i % 2 == 0 {
            "/healthz"
        } else {
            "/no-such-route"
        };
        let resp = http
            .request(
                Method::from_bytes(name.as_bytes()).unwrap(),
                server.url(path),
            )
            .send()
            .await
            .unwrap();
        assert!(
            resp.status().as_u16() < 500,
            "{name} {path}: {}",
            resp.status()
        );
    }
    let after = metrics().await;
    assert!(after.contains("method=\"other\""), "{after}");
    for name in &names {
        assert!(!after.contains(name.as_str()), "{name} became a label");
    }
    let unknown: Vec<String> = method_labels(&after)
        .into_iter()
        .filter(|m| !METHOD_LABELS.contains(&m.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "method labels outside the fixed set: {unknown:?}"
    );
    let other_routes: std::collections::BTreeSet<&str> = after
        .lines()
        .filter(|l| l.contains("method=\"other\""))
        .filter_map(|l| {
            l.split_once("route=\"")
                .and_then(|(_, r)| r.split_once('"'))
        })
        .map(|(route, _)| route)
        .collect();
    assert!(
        other_routes.len() <= 2,
        "method=\"other\" on {other_routes:?}"
    );
    let growth = after.len().saturating_sub(before.len());
    eprintln!(
        "/metrics: {} bytes before, {} after 200 made-up methods (growth {growth} bytes)",
        before.len(),
        after.len()
    );
    assert!(growth < 16 * 1024, "/metrics grew by {growth} bytes");
}

// ---- Item 8: SQLite synchronous = FULL, a private database file; the folder archive fsyncs ----

#[track_caller]
fn assert_private(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "{} has mode {mode:o}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_is_synchronous_full_and_private() {
    let app = crate::helpers::spawn_app(Backend::Sqlite).await.unwrap();
    // A write, so the WAL files exist too.
    app.token("reader", "rita").await;
    let file = std::path::PathBuf::from(app.db_url.strip_prefix("sqlite:").unwrap());
    // Before anything else opens the file (opening it tightens the mode).
    assert_private(&file);
    for suffix in ["-wal", "-shm"] {
        let side = std::path::PathBuf::from(format!("{}{suffix}", file.display()));
        if side.exists() {
            assert_private(&side);
        }
    }
    let store = budgetd::store::sqlite::open(&app.db_url).await.unwrap();
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(synchronous, 2, "PRAGMA synchronous (2 = FULL)");
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(journal, "wal");
    app.stop().await;
}

/// Runs `strace` attached to `pid`, tracing sync and rename calls with file paths (`-y`);
/// `None` (the fsync checks are skipped) when strace is missing or may not attach.
struct Strace {
    child: std::process::Child,
    out: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Strace {
    fn attach(pid: u32) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("trace.txt");
        let child = std::process::Command::new("strace")
            .args(["-f", "-qq", "-y", "-e"])
            .arg("trace=fsync,fdatasync,rename,renameat,renameat2")
            .arg("-o")
            .arg(&out)
            .arg("-p")
            .arg(pid.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                eprintln!("SKIPPED fsync checks: cannot run strace ({e})");
                return None;
            }
        };
        // Attached once the server's main thread names strace as its tracer.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                eprintln!("SKIPPED fsync checks: strace could not attach ({status})");
                return None;
            }
            let traced = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("TracerPid:"))
                .is_some_and(|v| v.trim() == child.id().to_string());
            if traced {
                // Give strace a moment to attach to the other threads as well.
                std::thread::sleep(Duration::from_millis(500));
                return Some(Self {
                    child,
                    out,
                    _dir: dir,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("SKIPPED fsync checks: strace did not attach within 10 s");
        None
    }

    /// The trace so far (strace writes each line as the call returns).
    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Strace {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// In `trace`: the object at `file` was written aside and fsynced, renamed into place, and
/// then its folder was fsynced.
fn assert_fsynced_then_renamed_then_folder_synced(trace: &[String], file: &std::path::Path) {
    let dir = file.parent().unwrap().display().to_string();
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let tmp = format!("<{dir}/.{name}.tmp-");
    let is_sync = |l: &str| l.contains("fsync(") || l.contains("fdatasync(");
    let renamed = trace
        .iter()
        .position(|l| l.contains("rename") && l.contains(&format!("\"{}\"", file.display())))
        .unwrap_or_else(|| panic!("no rename into {}:\n{}", file.display(), trace.join("\n")));
    let file_synced = trace[..renamed]
        .iter()
        .any(|l| is_sync(l) && l.contains(&tmp));
    assert!(
        file_synced,
        "{name}: no fsync of the written file before its rename:\n{}",
        trace.join("\n")
    );
    let folder_synced = trace[renamed..]
        .iter()
        .any(|l| is_sync(l) && l.contains(&format!("<{dir}>")));
    assert!(
        folder_synced,
        "{name}: no fsync of {dir} after the rename:\n{}",
        trace.join("\n")
    );
}

/// The folder archive: an approved baseline's objects are complete (byte for byte the stored
/// document), no `.tmp-` file is left behind, and — traced with strace on the real binary —
/// each object's file is fsynced before its rename and its folder after it; SQLite syncs its
/// WAL when a write commits (synchronous = FULL; with NORMAL it would not until a checkpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_folder_archive_and_sqlite_sync_before_acknowledging() {
    let mut server = start_process().await;
    let pid = server.pid();
    let strace = tokio::task::spawn_blocking(move || Strace::attach(pid))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let uploader = process_token(&server, &http, "uploader", "uma").await;
    let approver = process_token(&server, &http, "approver", "abe").await;
    let (status, _) = process_call(
        &http,
        Method::PUT,
        server.url("/api/v1/chains/checkout/topology"),
        &uploader,
        Some(serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap()),
    )
    .await;
    assert_eq!(status, 201);
    let (status, up) = process_call(
        &http,
        Method::POST,
        server.url("/api/v1/chains/checkout/runs"),
        &uploader,
        Some(example(budget_core::example::CHECKOUT_RUN_A)),
    )
    .await;
    assert_eq!(status, 201, "{up}");
    let id = up["baseline_id"].as_str().unwrap().to_owned();
    let (status, v) = process_call(
        &http,
        Method::POST,
        server.url(&format!("/api/v1/baselines/{id}/approve")),
        &approver,
        Some(json!({"comment": "ok"})),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    // Wait until every archive upload of the baseline is done.
    let mut status_doc = Value::Null;
    for _ in 0..200 {
        let (s, v) = process_call(
            &http,
            Method::GET,
            server.url(&format!("/api/v1/baselines/{id}/archive")),
            &approver,
            None,
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let uploads = v["uploads"].as_array().cloned().unwrap_or_default();
        if v["state"] == "archived"
            && uploads.len() >= 2
            && uploads.iter().all(|u| u["state"] != "pending")
        {
            status_doc = v;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ne!(status_doc, Value::Null, "the baseline was archived");
    let archive = server.data_dir.join("archive");
    let keys: Vec<String> = status_doc["uploads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["state"] == "done")
        .map(|u| u["key"].as_str().unwrap().to_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(keys.iter().any(|k| k.ends_with("/budget.json")), "{keys:?}");
    // Complete objects: the baseline's document byte for byte, budget.json valid JSON.
    let doc = http
        .get(server.url(&format!("/api/v1/baselines/{id}")))
        .bearer_auth(&approver)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let key = status_doc["key"].as_str().unwrap();
    assert_eq!(std::fs::read(archive.join(key)).unwrap(), doc.to_vec());
    for k in &keys {
        let bytes = std::fs::read(archive.join(k)).unwrap();
        serde_json::from_slice::<Value>(&bytes).unwrap_or_else(|e| panic!("{k}: {e}"));
    }
    let mut stack = vec![archive.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            assert!(
                !path.to_string_lossy().contains(".tmp-"),
                "left behind: {}",
                path.display()
            );
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    let server = tokio::task::spawn_blocking(move || {
        server.stop();
        server
    })
    .await
    .unwrap();
    let Some(strace) = strace else {
        return;
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if std::fs::metadata(&strace.out).is_ok() && !strace.lines().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let trace = strace.lines();
    for k in &keys {
        assert_fsynced_then_renamed_then_folder_synced(&trace, &archive.join(k));
    }
    // Commits synced SQLite's WAL before the archive was done (synchronous = FULL; with
    // NORMAL the WAL is synced only at a checkpoint, here not before the server stops).
    let wal = format!("<{}-wal>", server.data_dir.join("budgetd.db").display());
    let last_rename = trace
        .iter()
        .rposition(|l| l.contains("rename") && l.contains(&archive.display().to_string()))
        .expect("archive renames in the trace");
    let wal_synced = trace[..last_rename]
        .iter()
        .any(|l| (l.contains("fsync(") || l.contains("fdatasync(")) && l.contains(&wal));
    assert!(
        wal_synced,
        "no sync of the SQLite WAL while serving:\n{}",
        trace.join("\n")
    );
}

// ---- Item 9: publication times never go backwards while revisions increase ----

fn audit_at(actor: &str, action: &'static str, at: &str) -> Audit {
    Audit {
        actor: actor.into(),
        action,
        chain: Some("checkout".into()),
        subject: None,
        detail: json!({}),
        at: at.into(),
    }
}

/// Approving and rolling back through the store with a caller's clock far in the past: the
/// publications' `created_at` still never decreases with the revision (before the fix the
/// caller's time was stored).
async fn publication_times_never_go_backwards(app: &TestApp) {
    const PAST: &str = "2001-02-03T04:05:06.000Z";
    let p = app.people().await;
    let first = draft_a(app, &p).await;
    app.approve(&p.approver, &first).await.expect(200);
    let second = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json()["baseline_id"]
        .as_str()
        .expect("run C opens a draft")
        .to_owned();
    let store = budgetd::store::connect(&app.db_url).await.unwrap();
    let p1 = store.latest_publication("checkout").await.unwrap().unwrap();
    let (_, published) = store
        .decide(
            &second,
            Verdict::Approve,
            None,
            audit_at("abe", "approve", PAST),
        )
        .await
        .unwrap();
    let r2 = published.expect("approval publishes").revision;
    let r3 = store
        .rollback("checkout", &first, audit_at("abe", "rollback", PAST))
        .await
        .unwrap()
        .revision;
    let p2 = store.baseline_publication(&second).await.unwrap().unwrap();
    let p3 = store.baseline_publication(&first).await.unwrap().unwrap();
    assert_eq!((p2.revision, p3.revision), (r2, r3));
    let publications = [&p1, &p2, &p3];
    for w in publications.windows(2) {
        assert!(w[0].revision < w[1].revision, "{publications:?}");
        let (a, b) = (
            chrono::DateTime::parse_from_rfc3339(&w[0].created_at).unwrap(),
            chrono::DateTime::parse_from_rfc3339(&w[1].created_at).unwrap(),
        );
        assert!(
            a <= b,
            "revision {} at {} after revision {} at {}",
            w[1].revision,
            w[1].created_at,
            w[0].revision,
            w[0].created_at
        );
    }
    assert!(publications.iter().all(|p| p.created_at != PAST));
}

// ---- Item 15: security headers on every response ----

async fn security_headers_on_every_response(app: &TestApp) {
    let reader = app.token("reader", "rita").await;
    let check = |what: String, a: crate::helpers::Answer| {
        let h = |n: &str| {
            a.headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        assert_eq!(
            h("x-content-type-options").as_deref(),
            Some("nosniff"),
            "{what} ({})",
            a.status
        );
        assert_eq!(
            h("referrer-policy").as_deref(),
            Some("no-referrer"),
            "{what} ({})",
            a.status
        );
        a.status.as_u16()
    };
    let mut statuses = std::collections::BTreeSet::new();
    for path in [
        "/",
        "/console",
        "/assets/app.js",
        "/assets/js/router.js",
        "/assets/js/pages/baseline.js",
        "/assets/style.css",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/schemas/topology.json",
        "/schemas/nope.json",
        "/no-such-route",
        "/api/v1/chains",
        "/api/v1/chains/nowhere/topology",
        "/api/v1/archive/verify",
    ] {
        for token in [ADMIN_TOKEN, reader.as_str(), "", "wrong-token"] {
            statuses.insert(check(format!("GET {path}"), app.get(path, token).await));
        }
    }
    let cases: Vec<(&str, reqwest::RequestBuilder)> = vec![
        ("HEAD /healthz", app.http.head(app.url("/healthz"))),
        ("DELETE /healthz", app.http.delete(app.url("/healthz"))),
        (
            "reader PUT topology",
            app.http
                .put(app.url("/api/v1/chains/checkout/topology"))
                .bearer_auth(&reader)
                .json(&json!({})),
        ),
        (
            "malformed JSON",
            app.http
                .put(app.url("/api/v1/chains/checkout/topology"))
                .bearer_auth(ADMIN_TOKEN)
                .header("content-type", "application/json")
                .body("{"),
        ),
        (
            "schema violation",
            app.http
                .put(app.url("/api/v1/chains/checkout/topology"))
                .bearer_auth(ADMIN_TOKEN)
                .json(&json!({"segments": 1})),
        ),
        (
            "topology",
            app.http
                .put(app.url("/api/v1/chains/checkout/topology"))
                .bearer_auth(ADMIN_TOKEN)
                .json(&example(CHECKOUT_TOPOLOGY)),
        ),
    ];
    for (what, req) in cases {
        statuses.insert(check(what.to_owned(), app.raw(req).await));
    }
    // A stored idempotent answer, replayed.
    for _ in 0..2 {
        let req = app
            .http
            .post(app.url("/api/v1/tokens"))
            .bearer_auth(ADMIN_TOKEN)
            .header("idempotency-key", "headers-1")
            .json(&json!({"role": "reader", "name": "replayed"}));
        let a = app.raw(req).await;
        statuses.insert(check("idempotent replay".into(), a));
    }
    for s in [200, 201, 400, 401, 403, 404, 405, 422] {
        assert!(statuses.contains(&s), "no {s} among {statuses:?}");
    }
}

crate::on_both_backends!(
    multipart_map_and_files_are_bounded,
    reader_is_refused_before_its_body_is_read,
    write_routes_refuse_readers_and_verify_is_for_approvers,
    publication_times_never_go_backwards,
    security_headers_on_every_response,
);

/// Item 2: a 60 MiB oha or k6 "summary" is refused once it passes the 4 MiB cap for tool
/// summaries, without the server holding it (the old parser buffered it whole and built a
/// JSON tree of it: about 1 GiB of RSS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_tool_summaries_are_capped() {
    const BODY: u64 = 60 * 1024 * 1024;
    let (server, _, uploader) = process_with_checkout().await;
    for (format, prefix) in [
        (
            "oha",
            &b"{\"summary\": {\"successRate\": 1.0}, \"pad\": [\""[..],
        ),
        ("k6", &b"{\"metrics\": {}, \"pad\": [\""[..]),
    ] {
        let before = server.rss_kib();
        let sampler = RssSampler::start(server.pid());
        let head = format!(
            "POST /api/v1/chains/checkout/runs?format={format}&label=inventory HTTP/1.1\r\n\
             host: {}\r\nauthorization: Bearer {uploader}\r\ncontent-type: application/octet-stream",
            server.http
        );
        let answer = raw_request(
            server.http,
            &head,
            RawBody {
                prefix: prefix.to_vec(),
                fill: b'a',
                fill_len: BODY,
                suffix: b"\"]}".to_vec(),
                stall_after: None,
            },
            Duration::from_secs(60),
        )
        .await
        .expect("an answer to the 60 MiB summary");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let peak = sampler.finish();
        let growth = peak.saturating_sub(before);
        eprintln!(
            "{format} 60 MiB summary: RSS before {before} KiB, peak {peak} KiB, growth {growth} \
             KiB (bound {SUMMARY_RSS_BOUND_KIB} KiB); status {}, {} of {BODY} body bytes sent",
            answer.status, answer.sent
        );
        let text = String::from_utf8_lossy(&answer.body);
        assert_eq!(answer.status, 422, "{text}");
        assert!(text.contains("4 MiB"), "names the limit: {text}");
        assert!(
            growth < SUMMARY_RSS_BOUND_KIB,
            "server RSS grew by {growth} KiB (bound {SUMMARY_RSS_BOUND_KIB} KiB)"
        );
    }
}

/// What a capped tool summary may cost the server: the 4 MiB buffer and its growth.
const SUMMARY_RSS_BOUND_KIB: u64 = 32 * 1024;
