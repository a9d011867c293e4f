//! The fleet's own tests: what a flush writes whoever waits for it.

use futures_util::FutureExt as _;

use super::*;
use crate::auth::Role;
use crate::store::{Audit, NewToken};

/// A flush whose caller goes away at its first wait (an HTTP request whose client left,
/// `GET /agents`) still writes what it took: the agents' entries say they left. Before, the
/// news was taken off the slots and the write dropped, so the entries said "connected"
/// until the agents changed again.
#[tokio::test]
async fn a_flush_whose_caller_goes_away_still_writes_what_it_took() {
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
    for i in 0..3 {
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
