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

/// Every mapping error lists the labels found, mapped and unmapped, the segments without data
/// and the fix with a copy-pasteable example, whatever the format.
async fn mapping_errors_list_the_labels_and_the_fix(app: &TestApp) {
    let p = app.people().await;
    let bare: Value = serde_json::from_str(budget_core::example::CHECKOUT_TOPOLOGY).unwrap();
    chain(app, &p.uploader, "checkout", bare).await;
    let wrk2 = |names: [&'static str; 3]| Upload::Parts {
        query: "?format=wrk2",
        parts: names
            .iter()
            .map(|n| (*n, fixture(&format!("wrk2/{n}.txt"))))
            .collect(),
    };
    let k6_plain = br#"{"metrics": {"http_req_duration": {"med": 1, "p(99)": 2, "p(99.9)": 3},
        "http_reqs": {"count": 10}, "http_req_failed": {"passes": 0, "fails": 10}}}"#;
    let cases: Vec<(&str, Upload, &[&str], &str)> = vec![
        (
            "locust",
            raw("", fixture("locust/shop_stats.csv")),
            &["inventory", "payment", "user", "Aggregated"],
            "--map 'inventory=order->inventory'",
        ),
        (
            "wrk2 stems",
            wrk2(["checkout", "search-errors", "health-us"]),
            &["checkout", "search-errors", "health-us"],
            "'order->inventory=FILE'",
        ),
        (
            "k6 without sub-metrics",
            raw("", k6_plain.to_vec()),
            &["http_req_duration"],
            "thresholds",
        ),
        (
            "jmeter",
            raw("", fixture("jmeter/shop_header.jtl")),
            &["inventory", "payment", "user"],
            "--map 'inventory=order->inventory'",
        ),
    ];
    for (name, upload, found, hint) in cases {
        let r = send(app, &p.uploader, "checkout", &upload)
            .await
            .expect(422);
        let body = r.json();
        let e = &body["error"];
        let message = e["message"].as_str().unwrap();
        let details = &e["details"];
        let mut got: Vec<&str> = details["labels"]["found"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        let mut want = found.to_vec();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "{name}: {details}");
        assert!(
            message.contains("no data for order->inventory, order->payment, order->user"),
            "{name}: {message}"
        );
        assert!(message.contains("labels found: "), "{name}: {message}");
        assert!(message.contains("mapped: none"), "{name}: {message}");
        assert!(message.contains("fix: "), "{name}: {message}");
        assert!(message.contains(hint), "{name}: {message}");
        assert_eq!(
            details["missing"],
            json!(["order->inventory", "order->payment", "order->user"]),
            "{name}"
        );
        assert!(
            details["violations"].as_array().unwrap().len() >= 3,
            "{name}"
        );
    }

    // The suggested map is the fix: sent back as the upload's map, the same file is accepted.
    let r = send(
        app,
        &p.uploader,
        "checkout",
        &raw("", fixture("locust/shop_stats.csv")),
    )
    .await
    .expect(422)
    .json();
    let suggested = r["error"]["details"]["suggested_map"].to_string();
    assert_eq!(
        suggested,
        r#"{"inventory":"order->inventory","payment":"order->payment","user":"order->user"}"#
    );
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("shop_stats.csv");
    std::fs::write(&csv, fixture("locust/shop_stats.csv")).unwrap();
    let csv = csv.to_str().unwrap();
    // budgetctl, as the message says: `--map LABEL=SEGMENT` for each suggested pair.
    let refused = budgetctl(
        app,
        &p.uploader,
        &["run", "upload", "--chain", "checkout", csv],
    )
    .await;
    assert_ne!(refused.code, 0);
    assert!(
        refused
            .stderr
            .contains("labels found: inventory, payment, user, Aggregated"),
        "{refused:?}"
    );
    let ok = budgetctl(
        app,
        &p.uploader,
        &[
            "--json",
            "run",
            "upload",
            "--chain",
            "checkout",
            csv,
            "--map",
            "inventory=order->inventory",
            "--map",
            "payment=order->payment",
            "--map",
            "user=order->user",
        ],
    )
    .await
    .expect(0);
    assert_eq!(ok.json()["mapping"]["mapped"]["user"], "order->user");
}
crate::on_both_backends!(
    unknown_failures_are_null_and_said_so,
    mapping_errors_list_the_labels_and_the_fix,
);
