//! What an upload says about the file it read (issue 15): failures that are unknown, mapping
//! errors that list the labels and the fix, formats detected from the content whatever the
//! Content-Type, unsupported files named, and the evidence each run keeps.

use serde_json::{json, Value};

use crate::formats::{fixture, labelled_topology, send, Upload};
use crate::helpers::TestApp;
use crate::releases::budgetctl;

async fn chain(app: &TestApp, token: &str, name: &str, topology: Value) {
    app.put(&format!("/api/v1/chains/{name}/topology"), token, topology)
        .await
        .expect(201);
}

fn raw(query: &'static str, body: Vec<u8>) -> Upload {
    Upload::Raw { query, body }
}

/// A k6 summary without `http_req_failed{name:…}` sub-metrics: every label's failures are
/// unknown (null, never 0), the run's evidence says why, and budgetctl shows "unknown".
async fn unknown_failures_are_null_and_said_so(app: &TestApp) {
    let p = app.people().await;
    chain(app, &p.uploader, "checkout", labelled_topology()).await;
    let text = String::from_utf8(fixture("k6/handle-summary.json")).unwrap();
    assert!(
        text.contains("\"http_req_failed{name:"),
        "the fixture has them"
    );
    let stripped = text.replace("\"http_req_failed{name:", "\"x_req_failed{name:");
    let r = send(
        app,
        &p.uploader,
        "checkout",
        &raw("", stripped.into_bytes()),
    )
    .await
    .expect(201)
    .json();
    for s in r["segments"].as_array().unwrap() {
        assert!(s.get("failures").is_none_or(Value::is_null), "{s}");
    }
    let notes = &r["sources"][0]["notes"];
    assert!(
        notes[0].as_str().unwrap().starts_with(
            "failures: unknown for inventory, payment, user — k6 reports them per endpoint only \
             with a threshold on http_req_failed{name:…}"
        ),
        "{notes}"
    );
    let id = r["run_id"].as_str().unwrap();
    let run = app
        .get(&format!("/api/v1/chains/checkout/runs/{id}"), &p.uploader)
        .await
        .expect(200)
        .json();
    for s in run["segments"].as_array().unwrap() {
        if s["id"] != "gateway->order" {
            assert_eq!(s["failures"], Value::Null, "{s}");
        }
    }
    assert_eq!(run["sources"][0]["notes"], *notes);
    let shown = budgetctl(
        app,
        &p.uploader,
        &["run", "show", "--chain", "checkout", id],
    )
    .await;
    let row = shown
        .stdout
        .lines()
        .find(|l| l.contains("order->payment"))
        .unwrap_or_else(|| panic!("{shown:?}"));
    assert!(row.contains("unknown"), "{row}");
    assert!(
        shown
            .stdout
            .contains("failures: unknown for inventory, payment, user"),
        "{}",
        shown.stdout
    );

    // With the sub-metrics, the same file's failures are known (0 is a count, not a default).
    let r = send(
        app,
        &p.uploader,
        "checkout",
        &raw("", fixture("k6/handle-summary.json")),
    )
    .await
    .expect(201)
    .json();
    let inventory = r["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "order->inventory")
        .unwrap();
    assert_eq!(inventory["failures"], 0, "{inventory}");
    assert_eq!(r["sources"][0]["notes"], json!([]));

    // An HdrHistogram log records no failures at all.
    let r = send(
        app,
        &p.uploader,
        "checkout",
        &raw(
            "?format=hdrhistogram&unit=ns",
            fixture("hdrhistogram/tagged.hlog"),
        ),
    )
    .await
    .expect(201)
    .json();
    for s in r["segments"].as_array().unwrap() {
        assert!(s.get("failures").is_none_or(Value::is_null), "{s}");
    }
    assert!(
        r["sources"][0]["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("failures: unknown"),
        "{}",
        r["sources"][0]
    );
}

crate::on_both_backends!(unknown_failures_are_null_and_said_so);
