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
    let store = store_with_token(&dir).await;
    let fleet = Fleet::new(store.clone(), "r1".into(), &AgentSettings::default());
    let streams = attach(&fleet, 3).await;
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

/// A store on SQLite in `dir`, with the agent token `hash-fleet`.
async fn store_with_token(dir: &tempfile::TempDir) -> Arc<dyn Store> {
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
    store
}

/// `n` agents of the token `hash-fleet`, `agent-0` on.
async fn attach(fleet: &Fleet, n: usize) -> Vec<Attached> {
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
    streams
}

/// A replica that has seen no other replica process alive for twice `replica_silence` checks
/// each cohort once after the last sign of one, not after every publication: an entry
/// rewritten then (by no live process: as a test) is left as it is. Once another process is
/// seen, the next publication checks again, finds the entry, and writes it whole again.
#[tokio::test]
async fn a_replica_alone_checks_its_cohorts_once_after_another_was_seen() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_token(&dir).await;
    let fleet = Fleet::new(store.clone(), "r1".into(), &AgentSettings::default());
    let streams = attach(&fleet, 3).await;
    let publish = |revision: i64, chains: &[String]| {
        for stream in &streams {
            stream.delivered(revision, chains);
        }
        fleet.flush()
    };
    let agent_0 = || async {
        let listed = store.list_agents("", None, 10).await.unwrap();
        let a = listed
            .into_iter()
            .find(|a| a.agent_id == "agent-0")
            .unwrap();
        (a.delivered, a.replica)
    };
    // The chain is new to the agents (written whole), then a cohort forms and is checked.
    publish(1, &["checkout".into()]).await;
    *lock(&fleet.others_seen) = Instant::now() - Duration::from_secs(3600);
    publish(2, &[]).await;
    assert_eq!(agent_0().await, (2, "r1".to_owned()));
    let mut rewritten = store
        .list_agents("", None, 10)
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.agent_id == "agent-0")
        .unwrap();
    (rewritten.delivered, rewritten.replica) = (1, "elsewhere".into());
    store.upsert_agents(&[rewritten]).await.unwrap();
    publish(3, &[]).await;
    fleet.flush().await;
    assert_eq!(
        agent_0().await,
        (1, "elsewhere".to_owned()),
        "checked again though alone"
    );
    *lock(&fleet.others_seen) = Instant::now();
    publish(4, &[]).await;
    fleet.flush().await;
    assert_eq!(agent_0().await, (4, "r1".to_owned()));
}

/// The beats look whether another replica process is alive: this replica's own beats do not
/// count, another process's beat does, at the next look.
#[tokio::test]
async fn the_beats_see_another_replica_alive() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_token(&dir).await;
    let settings = AgentSettings {
        replica_silence_secs: 3,
        ..AgentSettings::default()
    };
    let fleet = Fleet::new(store.clone(), "r1".into(), &settings);
    let long_ago = Instant::now() - Duration::from_secs(3600);
    *lock(&fleet.others_seen) = long_ago;
    let beats = fleet.spawn_beats();
    // Beats every 0.5 s: three of this replica's own.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        fleet.others_seen(),
        long_ago,
        "its own beats taken for another's"
    );
    store
        .beat_replica(
            "r2#other",
            "r2",
            &now(),
            &crate::clock::before(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let seen = Instant::now();
    while fleet.others_seen() < seen {
        assert!(
            seen.elapsed() < Duration::from_secs(20),
            "another process's beat not seen in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    beats.abort();
}
