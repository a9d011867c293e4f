//! The fleet's own tests: what a flush writes whoever waits for it.

use futures_util::FutureExt as _;

use super::*;
use crate::auth::Role;
use crate::store::{Audit, NewToken};

/// A fleet on a new SQLite store, with `n` agents of one token attached (`agent-0`, ...).
async fn fleet_with_agents(n: usize) -> (tempfile::TempDir, Arc<dyn Store>, Fleet, Vec<Attached>) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("budgetd.db").display());
    let store = crate::store::connect(&url).await.unwrap();
    let token = NewToken {
        name: "fleet".into(),
        role: Role::Agent,
        owner: "fleet".into(),
        hash: "hash-fleet".into(),
    };
    let audit = Audit {
        actor: "admin".into(),
        action: "token.create",
        chain: None,
        subject: None,
        detail: serde_json::Value::Null,
        at: now(),
    };
    store.create_token(&token, audit).await.unwrap();
    let fleet = Fleet::new(store.clone(), "r1".into(), &AgentSettings::default());
    let mut streams = Vec::new();
    for i in 0..n {
        let agent = format!("agent-{i}");
        let attached = fleet
            .connected(
                &agent,
                "hash-fleet",
                "fleet",
                "svc",
                "rust",
                BTreeMap::new(),
                0,
            )
            .await
            .unwrap_or_else(|_| panic!("{agent} not attached"));
        streams.push(attached);
    }
    (dir, store, fleet, streams)
}

/// A flush whose caller goes away at its first wait (an HTTP request whose client left,
/// `GET /agents`) still writes what it took: the agents' entries say they left. Before, the
/// news was taken off the slots and the write dropped, so the entries said "connected"
/// until the agents changed again.
#[tokio::test]
async fn a_flush_whose_caller_goes_away_still_writes_what_it_took() {
    let (_dir, store, fleet, streams) = fleet_with_agents(3).await;
    fleet.flush().await;
    drop(streams);
    // Polled once, then dropped: it has taken the news and waits for the store.
    assert!(fleet.flush().now_or_never().is_none());
    // The next flush waits for the one under way, and has nothing of its own to write.
    fleet.flush().await;
    let listed = store.list_agents("", None, 10).await.unwrap();
    assert_eq!(listed.len(), 3);
    let connected: Vec<&str> = listed
        .iter()
        .filter(|a| a.connected)
        .map(|a| a.agent_id.as_str())
        .collect();
    assert!(connected.is_empty(), "still connected: {connected:?}");
}

/// The flushes after publications write the cohort's row and read nothing of the fleet; the
/// periodic check counts a cohort's followers once, [`cohorts::CHECK_AFTER`] after it moved,
/// however many publications moved it, and rewrites an entry another writer took out of the
/// cohort. Before, every flush that moved a cohort counted its followers (a read of every
/// agent's entry): here the entry rewritten before five publications was found and written
/// again by the second flush.
#[tokio::test]
async fn a_cohort_is_checked_once_after_it_moves_and_not_by_the_publications() {
    let (_dir, store, fleet, streams) = fleet_with_agents(3).await;
    fleet.flush_now(true).await;
    let stored = |id: &'static str| {
        let store = store.clone();
        async move {
            let all = store.list_agents("", None, 10).await.unwrap();
            all.into_iter().find(|a| a.agent_id == id).unwrap()
        }
    };
    let publish = |revision: i64| {
        for s in &streams {
            s.delivered(revision, &[]);
        }
    };
    publish(1);
    fleet.flush_now(true).await;
    assert_eq!(
        stored("agent-1").await.delivered,
        1,
        "the cohort's revision"
    );
    // A writer of an older version rewrites agent-1's entry whole: it follows no cohort.
    let mut other = stored("agent-1").await;
    other.connected = false;
    store.upsert_agents(&[other]).await.unwrap();
    for revision in 2..=6 {
        publish(revision);
        fleet.flush_now(true).await;
    }
    assert_eq!(stored("agent-0").await.delivered, 6);
    assert_eq!(
        stored("agent-1").await.delivered,
        1,
        "the publications' flushes read nothing of the fleet"
    );
    assert_eq!(fleet.check_cohorts().await, 0, "not due yet");
    fleet.flushing.lock().await.check_after = Duration::ZERO;
    assert_eq!(fleet.check_cohorts().await, 1, "one count for six moves");
    assert_eq!(fleet.check_cohorts().await, 0, "counted already");
    fleet.flush_now(true).await;
    let again = stored("agent-1").await;
    assert_eq!((again.delivered, again.connected), (6, true));
    publish(7);
    fleet.flush_now(true).await;
    assert_eq!(
        stored("agent-1").await.delivered,
        7,
        "it follows the cohort again"
    );
    assert_eq!(fleet.check_cohorts().await, 1);
}
