//! SPEC §4 examples A, B and C, number for number, through the HTTP API.

use budget_core::example::{
    CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY, CHECKOUT_TOPOLOGY_B,
};
use budgetd::schemas::Schema;
use serde_json::{json, Value};

use crate::helpers::{draft_a, example, TestApp, ADMIN_TOKEN};

fn numbers(doc: &Value) -> Vec<(String, u64, u64)> {
    doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["timeout_ms"].as_u64().unwrap(),
                s["budget_ms"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn owned(v: &[(&str, u64, u64)]) -> Vec<(String, u64, u64)> {
    v.iter().map(|(a, b, c)| (a.to_string(), *b, *c)).collect()
}

/// Σ over the root's children (each its own stage) of budget_ms.
fn root_need(doc: &Value) -> u64 {
    doc["segments"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["parent"] == "gateway->order")
        .map(|s| s["budget_ms"].as_u64().unwrap())
        .sum()
}

async fn example_a(app: &TestApp) {
    let p = app.people().await;
    let t = app
        .apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY)
        .await
        .expect(201)
        .json();
    assert_eq!(t["version"], 1);
    let up = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_A))
        .await
        .expect(201)
        .json();
    assert_eq!(up["reason"], "first_run");
    assert_eq!(up["drift"], json!([]));
    let id = up["baseline_id"].as_str().unwrap().to_owned();
    let today = chrono::Utc::now().format("%Y%m%d").to_string();
    assert!(id.starts_with(&format!("bl-{today}-")), "{id}");

    let doc = app.baseline(&id).await;
    assert_eq!(doc["state"], "draft");
    assert_eq!(doc["run_id"], up["run_id"]);
    assert_eq!(doc["topology_version"], 1);
    assert_eq!(
        numbers(&doc),
        owned(&[
            ("gateway->order", 800, 800),
            ("order->inventory", 44, 208),
            ("order->payment", 390, 390),
            ("order->user", 9, 9)
        ])
    );
    assert_eq!(root_need(&doc), 607);
    assert_eq!(doc["findings"], json!([]));
    assert_eq!(
        doc["segments"][1]["retry"]["on_unavailable"]["worst_case_backoff_ms"],
        480
    );
    assert_eq!(doc["segments"][2]["retry"]["on_deadline"], Value::Null);
    assert_eq!(doc["segments"][3]["retry"], json!({"idempotent": false}));
    assert_eq!(Schema::Baseline.violations(&doc), Vec::<Value>::new());

    let approved = app.approve(&p.approver, &id).await.expect(200).json();
    assert_eq!(approved["baseline"]["state"], "approved");
    let revision = approved["revision"].as_i64().unwrap();
    let live = app
        .get("/api/v1/chains/checkout/budgets", &p.uploader)
        .await
        .expect(200)
        .json();
    assert_eq!(live["baseline_id"], id.as_str());
    assert_eq!(live["revision"], revision);
    assert_eq!(live["segments"][1]["budget_ms"], 208);
    assert_eq!(live["segments"][2]["timeout_ms"], 390);
    assert_eq!(live["segments"][3]["timeout_ms"], 9);
}

async fn example_b_inversion(app: &TestApp) {
    let p = app.people().await;
    app.apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY_B)
        .await
        .expect(201);
    let up = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_A))
        .await
        .expect(201)
        .json();
    let id = up["baseline_id"].as_str().unwrap().to_owned();
    let f = &up["findings"][0];
    assert_eq!(f["check"], "inversion");
    assert_eq!(f["segment"], "gateway->order");
    assert_eq!(f["severity"], "error");
    assert_eq!(
        (
            f["need_ms"].as_i64(),
            f["available_ms"].as_i64(),
            f["excess_ms"].as_i64()
        ),
        (Some(909), Some(800), Some(109))
    );

    let doc = app.baseline(&id).await;
    assert_eq!(
        numbers(&doc)[1..],
        owned(&[
            ("order->inventory", 500, 500),
            ("order->payment", 400, 400),
            ("order->user", 9, 9)
        ])
    );
    let refused = app.approve(&p.approver, &id).await.expect(422);
    assert_eq!(refused.code(), "validation_failed");
    assert_eq!(
        refused.json()["error"]["details"]["findings"][0]["excess_ms"],
        109
    );
    assert_eq!(app.baseline(&id).await["state"], "draft");
    app.get("/api/v1/chains/checkout/budgets", &p.uploader)
        .await
        .expect(404);
}

async fn example_c_drift(app: &TestApp) {
    let p = app.people().await;
    let a_id = draft_a(app, &p).await;
    app.approve(&p.approver, &a_id).await.expect(200);

    // +10 %: stored, no draft.
    let mut small = example(CHECKOUT_RUN_C);
    small["segments"][2]["p999_ms"] = json!(330);
    let s = app
        .upload(&p.uploader, "checkout", small)
        .await
        .expect(201)
        .json();
    assert_eq!(s["baseline_id"], Value::Null);
    assert_eq!(s["drift"], json!([]));
    assert_eq!(s["compared_to"], a_id.as_str());
    let run = app
        .get(
            &format!(
                "/api/v1/chains/checkout/runs/{}",
                s["run_id"].as_str().unwrap()
            ),
            &p.uploader,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(run["segments"].as_array().unwrap().len(), 4);

    // +30 %: drift → draft with payment 507, need 724.
    let c = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    assert_eq!(c["reason"], "drift");
    assert_eq!(c["drift"].as_array().unwrap().len(), 1);
    assert_eq!(c["drift"][0]["segment"], "order->payment");
    assert_eq!(c["drift"][0]["change_pct"], 30.0);
    let c_id = c["baseline_id"].as_str().unwrap();
    let doc = app.baseline(c_id).await;
    assert_eq!(doc["reason"], "drift");
    assert_eq!(doc["drift_baseline_id"], a_id.as_str());
    assert_eq!(doc["segments"][2]["timeout_ms"], 507);
    assert_eq!(root_need(&doc), 724);

    let diff = app
        .get(
            &format!("/api/v1/baselines/{c_id}/diff?against=current"),
            &p.uploader,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(diff["from"], a_id.as_str());
    let pay = diff["segments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "order->payment")
        .unwrap()
        .clone();
    assert_eq!(
        (
            pay["timeout_ms"]["from"].as_u64(),
            pay["timeout_ms"]["to"].as_u64()
        ),
        (Some(390), Some(507))
    );
    assert_eq!(pay["status"], "changed");
    let _ = ADMIN_TOKEN;
}

/// The numbers the console draws, computed by the server: the call tree (`/tree`), the
/// diff's drift flags and a run's comparison with the live baseline (`vs_live`).
async fn numbers_for_the_console(app: &TestApp) {
    let p = app.people().await;
    let a_id = draft_a(app, &p).await;
    let uploader = p.uploader.as_str();
    let tree = |id: String| async move {
        app.get(&format!("/api/v1/baselines/{id}/tree"), uploader)
            .await
            .expect(200)
            .json()
    };
    let a = tree(a_id.clone()).await;
    let root = &a["parents"][0];
    assert_eq!(root["segment"], "gateway->order");
    assert_eq!(
        (
            root["need_ms"].as_i64(),
            root["available_ms"].as_i64(),
            root["excess_ms"].as_i64()
        ),
        (Some(607), Some(800), Some(-193))
    );
    assert_eq!(root["stages"].as_array().unwrap().len(), 3);
    assert_eq!(
        a["segments"][1],
        json!({"segment": "order->inventory", "timeout_ms": 44, "attempts": 2, "backoff_ms": 120, "budget_ms": 208})
    );
    app.get("/api/v1/baselines/bl-20000101-001/tree", &p.uploader)
        .await
        .expect(404);
    app.approve(&p.approver, &a_id).await.expect(200);

    // Example C drifts: the diff flags payment, the run's vs_live says so too.
    let c = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    assert_eq!(c["drift_threshold_pct"], 20);
    let c_id = c["baseline_id"].as_str().unwrap();
    let diff = app
        .get(
            &format!("/api/v1/baselines/{c_id}/diff?against=current"),
            &p.uploader,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(diff["drift_threshold_pct"], 20);
    let flags: Vec<(String, bool)> = diff["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_owned(),
                s["budget_ms"]["drift"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            ("gateway->order".to_owned(), false),
            ("order->inventory".to_owned(), false),
            ("order->payment".to_owned(), true),
            ("order->user".to_owned(), false),
        ]
    );
    let runs = app
        .get("/api/v1/chains/checkout/runs?limit=1", &p.uploader)
        .await
        .expect(200)
        .json();
    let live = &runs["runs"][0]["vs_live"];
    assert_eq!(live["baseline_id"], a_id.as_str());
    assert_eq!(live["drift"], true);
    let drifted: Vec<&Value> = live["comparison"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["drift"] == true)
        .collect();
    assert_eq!(drifted.len(), 1);
    assert_eq!(
        (&drifted[0]["segment"], &drifted[0]["change_pct"]),
        (&json!("order->payment"), &json!(30.0))
    );

    // Example B: the tree shows the inversion's numbers.
    app.apply_topology(&p.uploader, "checkout", CHECKOUT_TOPOLOGY_B)
        .await
        .expect(201);
    let b = app
        .post(
            "/api/v1/chains/checkout/baselines",
            &p.uploader,
            json!({"run_id": c["run_id"]}),
        )
        .await
        .expect(201)
        .json();
    let b = tree(b["id"].as_str().unwrap().to_owned()).await;
    assert_eq!(
        (
            b["parents"][0]["need_ms"].as_i64(),
            b["parents"][0]["excess_ms"].as_i64()
        ),
        (Some(909), Some(109))
    );
}

crate::on_both_backends!(
    example_a,
    example_b_inversion,
    example_c_drift,
    numbers_for_the_console
);
