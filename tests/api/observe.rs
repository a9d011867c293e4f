//! Observability: `/metrics` counts drift uploads, ACKs/NACKs, publish-to-delivery latency,
//! request durations by route and the database pool. Counters are process-wide and other tests
//! run alongside in this binary, so checks compare before/after with "at least".

use budget_core::example::CHECKOUT_RUN_C;
use budget_proto::v1::AckRequest;

use crate::grpc::{authed, client, next, watch_req};
use crate::helpers::draft_a;
use crate::helpers::{example, TestApp};

pub(crate) async fn metrics(app: &TestApp) -> String {
    let a = app.raw(app.http.get(app.url("/metrics"))).await.expect(200);
    String::from_utf8(a.body.to_vec()).unwrap()
}

/// The value of the sample line starting with `series ` (name and labels, exactly).
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[track_caller]
fn value(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

async fn metrics_follow_drift_delivery_and_acks(app: &TestApp) {
    let p = app.people().await;
    let agent = app.token("agent", "order-agent").await;
    let a_id = draft_a(app, &p).await;
    let rev_a = app.approve(&p.approver, &a_id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();

    // A stream that holds the chain, then a drift upload and its approval.
    let mut c = client(app).await;
    let mut s = c
        .watch(authed(
            &agent,
            watch_req("order-1", &["checkout"], "order", 0),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut s).await.revision, rev_a);
    let before = metrics(app).await;
    let drift = app
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await
        .expect(201)
        .json();
    assert_eq!(drift["reason"], "drift");
    let c_id = drift["baseline_id"].as_str().unwrap().to_owned();
    let rev_c = app.approve(&p.approver, &c_id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    assert_eq!(next(&mut s).await.revision, rev_c);
    for accepted in [true, false] {
        c.ack(authed(
            &agent,
            AckRequest {
                agent_id: "order-1".into(),
                revision: rev_c,
                accepted,
                error: if accepted { "" } else { "refused for the test" }.into(),
            },
        ))
        .await
        .unwrap();
    }
    let after = metrics(app).await;

    let grew = |series: &str| value(&after, series) - value(&before, series);
    assert!(grew("budgetd_drift_events_total") >= 1.0);
    assert!(grew("budgetd_acks_total") >= 1.0);
    assert!(grew("budgetd_nacks_total") >= 1.0);
    let delivered = "budgetd_publish_delivery_seconds_count";
    assert!(grew(delivered) >= 1.0, "the update counted");
    // Delivered within 10 s: the update landed in a finite bucket, and the sum is sane.
    assert!(
        value(&after, "budgetd_publish_delivery_seconds_bucket{le=\"10\"}")
            > value(
                &before,
                "budgetd_publish_delivery_seconds_bucket{le=\"10\"}"
            )
    );
    assert_eq!(
        value(
            &after,
            "budgetd_publish_delivery_seconds_bucket{le=\"+Inf\"}"
        ),
        value(&after, delivered)
    );
    let sum = value(&after, "budgetd_publish_delivery_seconds_sum");
    assert!(sum >= 0.0 && sum < 10.0 * value(&after, delivered), "{sum}");
    assert!(after.contains("# TYPE budgetd_publish_delivery_seconds histogram"));
    // The process's own CPU time and memory (what `budgetctl bench watch` divides per delivery
    // and per stream): present, and CPU never runs backwards.
    let cpu = "process_cpu_seconds_total";
    assert!(after.contains("# TYPE process_cpu_seconds_total counter"));
    assert!(
        value(&after, cpu) > 0.0 && grew(cpu) >= 0.0,
        "{}",
        value(&after, cpu)
    );
    assert!(value(&after, "process_resident_memory_bytes") > 1e6);

    // Request durations by route template.
    let approve = "method=\"POST\",route=\"/api/v1/baselines/{id}/approve\"";
    assert!(
        value(
            &after,
            &format!("budgetd_http_request_duration_seconds_count{{{approve}}}")
        ) >= 2.0
    );
    assert!(
        value(
            &after,
            &format!("budgetd_http_request_duration_seconds_bucket{{{approve},le=\"+Inf\"}}")
        ) >= 2.0
    );
    assert!(after.contains("# TYPE budgetd_http_request_duration_seconds histogram"));

    // The database pool: at least one connection was opened; idle ≤ size.
    let idle = value(&after, "budgetd_db_pool_connections{state=\"idle\"}");
    let in_use = value(&after, "budgetd_db_pool_connections{state=\"in_use\"}");
    assert!(
        idle >= 0.0 && in_use >= 0.0 && idle + in_use >= 1.0,
        "{idle} {in_use}"
    );
    assert!(value(&after, "budgetd_watch_streams") >= 1.0);
}

crate::on_both_backends!(metrics_follow_drift_delivery_and_acks);
