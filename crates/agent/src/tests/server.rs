//! `Agent::start` against an in-process fake `BudgetControl` (real gRPC on 127.0.0.1:0) and
//! against nothing at all (cache fallback). Real time, short timeouts.

use std::time::Duration;

use super::fake::{closed_port, config, eventually, update, Fake};
use crate::test_support::{example_a, example_b};
use crate::{cache, Agent, AgentError, Snapshot, Source};

#[tokio::test]
async fn watches_acks_nacks_and_reconnects() {
    let fake = Fake::default();
    fake.publish(update(7, &example_a()));
    let addr = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let cache_path = dir.path().join("budgets.json");

    let agent = Agent::start(config(format!("http://{addr}"), Some(&cache_path)))
        .await
        .unwrap();
    assert_eq!(agent.source(), Source::ControlPlane);
    assert_eq!(agent.revision(), 7);
    assert_eq!(
        agent.budget("order->inventory"),
        Some(Duration::from_millis(208))
    );
    assert_eq!(cache::read(&cache_path).unwrap().revision, 7);
    assert_eq!(fake.acks(), [(7, true, String::new())]);
    let (watch, auth) = &fake.watches()[0];
    assert_eq!(auth, "Bearer s3cret-agent-token");
    assert_eq!(
        (
            watch.agent_id.as_str(),
            watch.service.as_str(),
            watch.known_revision
        ),
        ("order-1", "order", 0)
    );
    assert!(watch.chains.is_empty() && watch.known_chains.is_empty());
    assert_eq!(watch.labels.get("host").map(String::as_str), Some("test"));
    assert!(!format!("{:?}", config(String::new(), None)).contains("s3cret"));

    // An inverted config is NACKed with its numbers; the agent keeps revision 7.
    let mut rx = agent.subscribe();
    fake.publish(update(8, &example_b()));
    eventually("the NACK", || async { fake.acks().len() == 2 }).await;
    let (revision, accepted, error) = fake.acks()[1].clone();
    assert_eq!((revision, accepted), (8, false));
    assert!(error.contains("909") && error.contains("109"), "{error}");
    assert_eq!(agent.revision(), 7);
    assert_eq!(agent.last_refusal().unwrap().0, 8);
    assert_eq!(cache::read(&cache_path).unwrap().revision, 7);
    assert!(!rx.has_changed().unwrap());

    // A good one is ACKed, applied, seen by subscribers and cached.
    let mut next = example_a();
    let user = next
        .segments
        .iter_mut()
        .find(|s| s.id == "order->user")
        .unwrap();
    user.timeout_ms = 12;
    user.budget_ms = 12;
    fake.publish(update(9, &next));
    rx.changed().await.unwrap();
    assert_eq!(rx.borrow_and_update().revision, 9);
    assert_eq!(agent.budget("order->user"), Some(Duration::from_millis(12)));
    eventually("the ACK", || async { fake.acks().len() == 3 }).await;
    assert_eq!(fake.acks()[2], (9, true, String::new()));
    eventually("the cache", || async {
        cache::read(&cache_path).is_ok_and(|s| s.revision == 9)
    })
    .await;
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "no temporary file left: {files:?}");

    // The stream breaks: the agent reconnects, resuming from what it has.
    fake.drop_streams();
    eventually("a second watch", || async { fake.watches().len() == 2 }).await;
    // With the chains its config holds: a chain it lacks would be sent whatever its revision.
    let resumed = &fake.watches()[1].0;
    assert_eq!(
        (resumed.known_revision, resumed.known_chains.as_slice()),
        (9, ["checkout".to_string()].as_slice())
    );
    assert_eq!(fake.acks().len(), 3, "nothing re-sent, nothing re-acked");

    // Shutdown stops the task: its stream goes away.
    eventually("the new stream", || async { fake.open_streams() == 1 }).await;
    agent.shutdown();
    eventually("the stream to close", || async { fake.open_streams() == 0 }).await;
}

#[tokio::test]
async fn start_refuses_an_inverted_first_config() {
    let fake = Fake::default();
    fake.publish(update(8, &example_b()));
    let addr = fake.serve().await;
    let err = Agent::start(config(format!("http://{addr}"), None))
        .await
        .unwrap_err();
    match &err {
        AgentError::Refused {
            chain,
            segment,
            message,
        } => {
            assert_eq!(
                (chain.as_str(), segment.as_str()),
                ("checkout", "gateway->order")
            );
            assert!(
                message.contains("909") && message.contains("109"),
                "{message}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(fake.acks()[0].0, 8);
    assert!(!fake.acks()[0].1);
}

#[tokio::test]
async fn without_a_first_config_in_time_the_cache_is_used_then_updated() {
    let fake = Fake::default(); // accepts watches, sends nothing
    let addr = fake.serve().await;
    let dir = tempfile::tempdir().unwrap();
    let cache_path = dir.path().join("budgets.json");
    cache::write(&cache_path, &Snapshot::from_chains([example_a()])).unwrap();

    let agent = Agent::start(config(format!("http://{addr}"), Some(&cache_path)))
        .await
        .unwrap();
    assert_eq!(agent.source(), Source::Cache);
    assert_eq!(agent.revision(), 7);

    // The background task keeps watching, from the cached revision.
    eventually("a watch from revision 7", || async {
        fake.watches().iter().any(|(w, _)| w.known_revision == 7)
    })
    .await;
    eventually("an open stream", || async { fake.open_streams() >= 1 }).await;
    fake.publish(update(9, &example_a()));
    eventually("revision 9", || async { agent.revision() == 9 }).await;
    eventually("the cache at 9", || async {
        cache::read(&cache_path).is_ok_and(|s| s.revision == 9)
    })
    .await;
}

#[tokio::test]
async fn unreachable_control_plane_starts_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache_path = dir.path().join("budgets.json");
    cache::write(&cache_path, &Snapshot::from_chains([example_a()])).unwrap();
    let agent = Agent::start(config(closed_port().await, Some(&cache_path)))
        .await
        .unwrap();
    assert_eq!(agent.source(), Source::Cache);
    assert_eq!(agent.revision(), 7);
    assert_eq!(
        agent.budget("order->payment"),
        Some(Duration::from_millis(390))
    );
}

#[tokio::test]
async fn an_inverted_cached_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cache_path = dir.path().join("budgets.json");
    cache::write(&cache_path, &Snapshot::from_chains([example_b()])).unwrap();
    let err = Agent::start(config(closed_port().await, Some(&cache_path)))
        .await
        .unwrap_err();
    match &err {
        AgentError::Refused {
            segment, message, ..
        } => {
            assert_eq!(segment, "gateway->order");
            assert!(
                message.contains("909") && message.contains("109"),
                "{message}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn neither_control_plane_nor_cache_is_unavailable() {
    let err = Agent::start(config(closed_port().await, None))
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("failed to connect"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let err = Agent::start(config(closed_port().await, Some(&missing)))
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("missing.json"), "{err}");
}

#[tokio::test]
async fn a_bad_endpoint_is_a_config_error() {
    let err = Agent::start(config("not a uri".into(), None))
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::Config(_)), "{err}");
}

/// A replica that stops asks its agents to spread their reconnects (issue 14): agents told a
/// minute come back over that minute, not at once as they do when a stream merely breaks.
#[tokio::test]
async fn agents_spread_their_reconnect_when_the_replica_asks() {
    const AGENTS: usize = 20;
    let fake = Fake::default();
    fake.publish(update(7, &example_a()));
    let addr = fake.serve().await;
    let mut agents = Vec::new();
    for i in 0..AGENTS {
        let mut c = config(format!("http://{addr}"), None);
        c.agent_id = format!("order-{i}");
        agents.push(Agent::start(c).await.unwrap());
    }
    eventually("every stream", || async { fake.open_streams() == AGENTS }).await;

    // A broken stream, no spread asked: every agent is back within its 100 ms ceiling.
    fake.drop_streams();
    eventually("every agent back", || async {
        fake.watches().len() == 2 * AGENTS && fake.open_streams() == AGENTS
    })
    .await;

    // Ended with a 60 s spread asked: each waits uniformly up to a minute, so a few at most
    // are back after a second (20 × 1/60 expected; 10 or more has a chance below 1e-12).
    fake.end_streams_asking_spread(60_000);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let back = fake.watches().len() - 2 * AGENTS;
    assert!(
        back < AGENTS / 2,
        "{back} of {AGENTS} reconnected within 1 s"
    );
    for a in agents {
        a.shutdown();
    }
}
