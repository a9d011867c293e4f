//! Bad input gets a precise 4xx in our error format, never a 5xx.

use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
use reqwest::header::CONTENT_TYPE;
use serde_json::{json, Value};

use crate::helpers::{example, spawn_app, Backend, TestApp, ADMIN_TOKEN};

fn pointers(answer: &crate::helpers::Answer) -> Vec<String> {
    answer.json()["error"]["details"]["violations"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|v| v["pointer"].as_str().unwrap().to_owned())
        .collect()
}

async fn precise_errors(app: &TestApp) {
    let t = ADMIN_TOKEN;
    let topo_path = "/api/v1/chains/checkout/topology";
    // Malformed JSON: 400 with the position.
    let bad = app
        .raw(
            app.http
                .put(app.url(topo_path))
                .bearer_auth(t)
                .header(CONTENT_TYPE, "application/json")
                .body("{\"entry_budget_ms\": 800,"),
        )
        .await
        .expect(400);
    assert_eq!(bad.code(), "malformed_json");
    assert_eq!(bad.json()["error"]["details"]["line"], 1);
    // Wrong content type: 415.
    let ct = app
        .raw(
            app.http
                .put(app.url(topo_path))
                .bearer_auth(t)
                .header(CONTENT_TYPE, "text/plain")
                .body(CHECKOUT_TOPOLOGY),
        )
        .await
        .expect(415);
    assert_eq!(ct.code(), "unsupported_media_type");
    // Huge body: 413.
    let huge = format!("{{\"x\": \"{}\"}}", "a".repeat(300 * 1024));
    let big = app
        .raw(
            app.http
                .put(app.url(topo_path))
                .bearer_auth(t)
                .header(CONTENT_TYPE, "application/json")
                .body(huge),
        )
        .await
        .expect(413);
    assert_eq!(big.code(), "payload_too_large");
    // Schema violations: 422, every one with its pointer.
    let v = app
        .put(topo_path, t, json!({"entry_budget_ms": "800", "segments": [{"id": "a->b", "caller": "a", "callee": "b", "class": "wobbly", "colour": 1}]}))
        .await
        .expect(422);
    let ps = pointers(&v);
    for p in ["/entry_budget_ms", "/segments/0/class", "/segments/0"] {
        assert!(ps.contains(&p.to_owned()), "{ps:?}");
    }
    // Structurally invalid: cycle, two roots, retry without idempotency.
    let mut cyclic: Value = example(CHECKOUT_TOPOLOGY);
    cyclic["segments"][0]["parent"] = json!("order->user");
    cyclic["segments"][0]["caller"] = json!("user");
    cyclic["segments"][0]["id"] = json!("user->order");
    cyclic["segments"][1]["parent"] = json!("user->order");
    cyclic["segments"][2]["parent"] = json!("user->order");
    cyclic["segments"][3]["parent"] = json!("user->order");
    cyclic["segments"][3]["retry"] = json!({"on_deadline": true});
    let c = app.put(topo_path, t, cyclic).await.expect(422);
    let msg = String::from_utf8_lossy(&c.body).to_string();
    assert!(msg.contains("cycle"), "{msg}");
    assert!(msg.contains("no root segment"), "{msg}");
    assert!(
        pointers(&c).contains(&"/segments/3/retry".to_owned()),
        "{msg}"
    );
    // Bad chain name.
    app.put(
        "/api/v1/chains/Check%20Out/topology",
        t,
        example(CHECKOUT_TOPOLOGY),
    )
    .await
    .expect(400);

    // Unknown chain: 404 for runs, topology, budgets, baselines.
    assert_eq!(
        app.upload(t, "nowhere", example(CHECKOUT_RUN_A))
            .await
            .expect(404)
            .code(),
        "not_found"
    );
    app.get("/api/v1/chains/nowhere/topology", t)
        .await
        .expect(404);
    app.get("/api/v1/chains/nowhere/budgets", t)
        .await
        .expect(404);
    app.get("/api/v1/baselines/bl-20000101-001", t)
        .await
        .expect(404);
    app.get("/api/v1/baselines/bl-20000101-001/diff", t)
        .await
        .expect(404);

    // Runs that do not fit the topology.
    app.apply_topology(t, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201);
    let mut missing = example(CHECKOUT_RUN_A);
    missing["segments"].as_array_mut().unwrap().remove(3);
    let m = app.upload(t, "checkout", missing).await.expect(422);
    assert!(String::from_utf8_lossy(&m.body).contains("order->user"));
    let mut inverted = example(CHECKOUT_RUN_A);
    inverted["segments"][1]["p999_ms"] = json!(1);
    inverted["segments"][2]["id"] = json!("order->bank");
    let i = app.upload(t, "checkout", inverted).await.expect(422);
    let ps = pointers(&i);
    assert!(
        ps.contains(&"/segments/1/p999_ms".to_owned()) && ps.contains(&"/segments/2/id".to_owned()),
        "{ps:?}"
    );
    let n = app
        .upload(
            t,
            "checkout",
            json!({"segments": [{"id": "order->user", "samples": 1, "p99_ms": -1, "p999_ms": 2}]}),
        )
        .await
        .expect(422);
    assert!(pointers(&n).contains(&"/segments/0/p99_ms".to_owned()));
    // The wrong format: 422 naming the line and field.
    let wrong = app
        .raw(
            app.http
                .post(app.url("/api/v1/chains/checkout/runs?format=jmeter"))
                .bearer_auth(t)
                .json(&example(CHECKOUT_RUN_A)),
        )
        .await
        .expect(422);
    assert_eq!(wrong.json()["error"]["details"]["line"], 1);
    app.raw(
        app.http
            .post(app.url("/api/v1/chains/checkout/runs?format=gatling"))
            .bearer_auth(t)
            .json(&example(CHECKOUT_RUN_A)),
    )
    .await
    .expect(400);
    // Nothing half-written: no run stored by any of the refused uploads.
    let runs = app
        .get("/api/v1/chains/checkout/runs", t)
        .await
        .expect(200)
        .json();
    assert_eq!(runs["runs"], json!([]));

    // Query parameters and unknown routes.
    app.get("/api/v1/audit?limit=0", t).await.expect(400);
    app.get("/api/v1/audit?limit=abc", t).await.expect(400);
    assert_eq!(
        app.get("/api/v1/nope", t).await.expect(404).code(),
        "not_found"
    );
    assert_eq!(
        app.raw(app.http.delete(app.url("/api/v1/chains")).bearer_auth(t))
            .await
            .expect(405)
            .code(),
        "method_not_allowed"
    );
    // Approve with a non-object body, an over-long comment.
    app.post("/api/v1/baselines/bl-20000101-001/approve", t, json!([1]))
        .await
        .expect(422);
}

crate::on_both_backends!(precise_errors);

/// Found while bounding what bodies take parsed: a schema's answer listed every violation, and
/// a message names the value that violates, which may be the whole body: a topology of 1 MB
/// of one-key segments was answered with 614,401 violations, its first message the body again.
/// An answer now lists the first 100, each message at most 500 characters, and says how many
/// there are; of a document of more than 20,000 values, the first alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn violations_are_listed_within_bounds() {
    let app = spawn_app(Backend::Sqlite).await.unwrap();
    // The error of a topology of `n` times `segment`.
    let refused = |segment: Value, n: usize| {
        let body = json!({"entry_budget_ms": 1000, "segments": vec![segment; n]});
        let app = &app;
        async move {
            let answer = app
                .put("/api/v1/chains/checkout/topology", ADMIN_TOKEN, body)
                .await
                .expect(422);
            answer.json()["error"].clone()
        }
    };
    let error = &refused(json!({"a": 1}), 5000).await;
    // Too many segments, and five for each: four absent fields and one unknown.
    assert_eq!(
        error["message"],
        "the document does not match the topology schema (25001 violations; the first 100 listed)"
    );
    let listed = error["details"]["violations"].as_array().unwrap();
    assert_eq!(listed.len(), 100);
    for v in listed {
        let message = v["message"].as_str().unwrap();
        assert!(message.chars().count() <= 501, "{}", message.len());
    }
    assert!(
        listed
            .iter()
            .any(|v| v["message"].as_str().unwrap().ends_with('…')),
        "the too-many-segments message, which names them all, is shortened"
    );

    // Found by attacking the server: the validator gathers every violation before it gives
    // the first, so 2^20 empty segments (3 MB) took 1.6 GB to list 4 million. A document of
    // more than 20,000 values is checked up to its first violation.
    let error = &refused(json!({}), 60_000).await;
    assert_eq!(
        error["message"],
        "the document does not match the topology schema (the first violation; a document of \
         more than 20000 values is checked up to its first)"
    );
    assert_eq!(error["details"]["violations"].as_array().unwrap().len(), 1);
    app.stop().await;
}
