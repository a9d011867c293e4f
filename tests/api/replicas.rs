//! Two budgetd processes' worth of state on one PostgreSQL database: a publication made on
//! one replica reaches agents streaming from the other (LISTEN/NOTIFY + catch-up read).

use crate::grpc::{authed, next, watch_req};
use crate::helpers::{draft_a, example};
use crate::helpers::{spawn_app, spawn_replica, Backend};
use budget_proto::v1::budget_control_client::BudgetControlClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_on_one_replica_reaches_agents_on_the_other() {
    let Some(a) = spawn_app(Backend::Postgres).await else {
        return;
    };
    let b = spawn_replica(&a).await;
    let p = a.people().await;
    let agent = a.token("agent", "order-agent").await;
    let id = draft_a(&a, &p).await;

    let mut on_b = BudgetControlClient::connect(b.grpc_url()).await.unwrap();
    let mut stream = on_b
        .watch(authed(
            &agent,
            watch_req("order-1", &["checkout"], "order", 0),
        ))
        .await
        .unwrap()
        .into_inner();
    let rev = a.approve(&p.approver, &id).await.expect(200).json()["revision"]
        .as_i64()
        .unwrap();
    let u = next(&mut stream).await;
    assert_eq!(
        (u.revision, u.chains[0].baseline_id.as_str()),
        (rev, id.as_str())
    );

    // Fleet status written by B is visible through A.
    let mut seen = false;
    for _ in 0..50 {
        let agents = a
            .get("/api/v1/agents", &p.uploader)
            .await
            .expect(200)
            .json();
        if agents["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["agent_id"] == "order-1" && x["delivered"] == rev)
        {
            seen = true;
            assert!(agents["agents"][0]["replica"]
                .as_str()
                .unwrap()
                .ends_with(&b.grpc_addr.port().to_string()));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(seen, "B's agent shows in A's fleet view");
    b.stop().await;
    a.stop().await;
}

/// Each replica keeps the approved baseline it compared with last: an approval on the other
/// replica must count at its next upload (the store's id and SHA-256 decide, not the copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_compares_with_the_baseline_approved_on_the_other_replica() {
    use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_RUN_C};
    let Some(a) = spawn_app(Backend::Postgres).await else {
        return;
    };
    let b = spawn_replica(&a).await;
    let p = a.people().await;
    let first = draft_a(&a, &p).await;
    a.approve(&p.approver, &first).await.expect(200);

    // B compares run A with the first baseline (and keeps it): no drift, no draft.
    let on_b = b
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_A))
        .await;
    let on_b = on_b.expect(201).json();
    assert_eq!(on_b["compared_to"], first.as_str());
    assert!(on_b["baseline_id"].is_null(), "{on_b}");

    // A approves run C's draft.
    let on_a = a
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await;
    let second = on_a.expect(201).json()["baseline_id"]
        .as_str()
        .unwrap()
        .to_owned();
    a.approve(&p.approver, &second).await.expect(200);

    // B's next upload of run C compares with the second baseline: nothing drifted.
    let on_b = b
        .upload(&p.uploader, "checkout", example(CHECKOUT_RUN_C))
        .await;
    let on_b = on_b.expect(201).json();
    assert_eq!(on_b["compared_to"], second.as_str(), "{on_b}");
    assert!(on_b["baseline_id"].is_null(), "{on_b}");
    assert_eq!(on_b["drift"], serde_json::json!([]));
    b.stop().await;
    a.stop().await;
}
