//! Cohorts: the agents of one token watching the same chains, on this replica, that were
//! sent and accepted the same revisions follow one stored row, so a publication to all of
//! them writes that row alone ([`Fleet::flush`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{lock, Fleet, Slot};
use crate::store::{AgentProgress, CohortProgress};

/// How long the revisions of a cohort whose agents are at different revisions may wait for
/// the publication on its way to reach them all (and their ACKs to come).
const MAX_WAIT: Duration = Duration::from_secs(2);

/// How long after a cohort moves its followers are counted ([`Fleet::check_cohorts`]): at
/// most one count (of every cohort that moved) in that time, however many publications move
/// them, and none on the way of a publication.
pub(super) const CHECK_AFTER: Duration = Duration::from_secs(10);

/// This replica's cohorts, one per token and chains watched, as stored by the last flush.
#[derive(Debug)]
pub(super) struct Cohorts {
    /// Unique to this process: the cohort ids of another replica, or of this replica before a
    /// restart, never collide with them.
    prefix: String,
    /// Cohort ids made so far (the last one's number).
    made: u64,
    /// Cohort keys whose revisions are waiting, since when.
    waiting: HashMap<Arc<str>, Instant>,
    /// By token and chains watched (one line each).
    by_key: HashMap<Arc<str>, Cohort>,
    /// Cohort keys that moved since their followers were last counted, since when.
    unchecked: HashMap<Arc<str>, Instant>,
    /// [`CHECK_AFTER`]; shorter in tests.
    pub(super) check_after: Duration,
}

#[derive(Debug, Clone)]
struct Cohort {
    id: String,
    delivered: i64,
    acked: i64,
}

/// A slot's revisions as the flush found them.
struct Found {
    slot: Arc<Slot>,
    delivered: i64,
    acked: i64,
    /// The slot progressed (or is due for a heartbeat); else an idle cohort member.
    news: bool,
}

impl Cohorts {
    /// No cohort yet; ids start with `prefix`, unique to this process.
    pub(super) fn new(prefix: String) -> Self {
        Self {
            prefix,
            made: 0,
            waiting: HashMap::new(),
            by_key: HashMap::new(),
            unchecked: HashMap::new(),
            check_after: CHECK_AFTER,
        }
    }

    /// How many cohorts this replica remembers.
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Forgets the cohorts no slot here can follow any more (their tokens and chains are no
    /// longer watched here). Their rows stay until expiry removes them.
    pub(super) fn forget_unfollowed<'a>(&mut self, slots: impl Iterator<Item = &'a Arc<Slot>>) {
        let keys: HashSet<Arc<str>> = slots
            .filter_map(|slot| lock(&slot.cohort_key).clone())
            .collect();
        self.by_key.retain(|key, _| keys.contains(key));
        self.waiting.retain(|key, _| keys.contains(key));
        self.unchecked.retain(|key, _| keys.contains(key));
    }

    /// The cohorts due for a count of their followers, taken off the list: once one of them
    /// moved [`Self::check_after`] ago or more, every cohort that moved since its last count,
    /// so that one read of the fleet counts them all.
    fn due(&mut self, now: Instant) -> Vec<(Arc<str>, String)> {
        let check_after = self.check_after;
        if !self
            .unchecked
            .values()
            .any(|since| now.duration_since(*since) >= check_after)
        {
            return Vec::new();
        }
        self.unchecked
            .drain()
            .filter_map(|(key, _)| {
                let id = self.by_key.get(&key)?.id.clone();
                Some((key, id))
            })
            .collect()
    }
}

impl Fleet {
    /// Records the revisions of the `progressed` slots (and, with `seen`, that they were seen
    /// then). For each token and chains watched, the revisions most of those slots and of the
    /// cohort's idle `members` are at become the cohort's: the slots at them join it, the
    /// others (members left behind or ahead among them) are written with their own revisions,
    /// grouped by (delivered, acked). With `may_wait`, a cohort whose agents are at different
    /// revisions waits for a later flush, up to [`MAX_WAIT`]. False when the store failed:
    /// the slots will be written again, whole.
    pub(super) async fn progress(
        &self,
        cohorts: &mut Cohorts,
        seen: Option<&str>,
        may_wait: bool,
        progressed: &[Arc<Slot>],
        members: Vec<Arc<Slot>>,
    ) -> bool {
        // Agents watching other chains are sent other revisions: a cohort per token and
        // chains watched. Idle members matter only where the cohort may move.
        let mut by_key: HashMap<Arc<str>, (String, Vec<Found>)> = HashMap::new();
        let found = |slot: Arc<Slot>, news: bool| {
            let s = lock(&slot.status);
            let delivered = s.delivered.max(slot.delivered.load(Ordering::Acquire));
            let acked = s.acked;
            drop(s);
            Found {
                delivered,
                acked,
                news,
                slot,
            }
        };
        for slot in progressed {
            let f = found(slot.clone(), true);
            by_key
                .entry(slot.cohort_key())
                .or_insert_with(|| (slot.token_id.clone(), Vec::new()))
                .1
                .push(f);
        }
        for slot in members {
            if let Some((_, v)) = by_key.get_mut(&slot.cohort_key()) {
                v.push(found(slot, false));
            }
        }
        let mut joined: Vec<(Arc<str>, Cohort, Vec<Arc<Slot>>)> = Vec::new();
        let mut left: Vec<Arc<Slot>> = Vec::new();
        let mut stored_cohorts = Vec::new();
        let mut groups: Vec<AgentProgress> = Vec::new();
        let mut waiting = HashMap::new();
        let mut moved_keys: Vec<Arc<str>> = Vec::new();
        let now = Instant::now();
        for (key, (token_id, found)) in &by_key {
            let mut counts: HashMap<(i64, i64), usize> = HashMap::new();
            for f in found {
                *counts.entry((f.delivered, f.acked)).or_default() += 1;
            }
            let since = cohorts.waiting.get(key).copied().unwrap_or(now);
            if may_wait && counts.len() > 1 && now.duration_since(since) < MAX_WAIT {
                // Told again: the next flush finds them.
                found
                    .iter()
                    .filter(|f| f.news)
                    .for_each(|f| f.slot.progress());
                waiting.insert(key.clone(), since);
                continue;
            }
            let Some((&(delivered, acked), _)) =
                counts.iter().max_by_key(|&(&revisions, &n)| (n, revisions))
            else {
                continue;
            };
            let id = match cohorts.by_key.get(key) {
                Some(c) => c.id.clone(),
                None => {
                    cohorts.made += 1;
                    format!("{}/{}", cohorts.prefix, cohorts.made)
                }
            };
            let mut joining = Vec::new();
            let mut own: HashMap<(i64, i64), Vec<String>> = HashMap::new();
            let mut joiners = Vec::new();
            for f in found {
                let member = f.slot.in_cohort.load(Ordering::Acquire);
                if (f.delivered, f.acked) == (delivered, acked) {
                    if !member || seen.is_some() {
                        joining.push(lock(&f.slot.status).agent_id.clone());
                        joiners.push(f.slot.clone());
                    }
                } else {
                    own.entry((f.delivered, f.acked))
                        .or_default()
                        .push(lock(&f.slot.status).agent_id.clone());
                    left.push(f.slot.clone());
                }
            }
            let cohort = Cohort {
                id: id.clone(),
                delivered,
                acked,
            };
            let moved = cohorts
                .by_key
                .get(key)
                .is_none_or(|c| (c.delivered, c.acked) != (delivered, acked));
            if moved {
                moved_keys.push(key.clone());
            }
            if moved || !joining.is_empty() {
                stored_cohorts.push(CohortProgress {
                    id,
                    token_id: token_id.clone(),
                    delivered,
                    acked,
                    joining,
                });
            }
            joined.push((key.clone(), cohort, joiners));
            groups.extend(
                own.into_iter()
                    .map(|((delivered, acked), agent_ids)| AgentProgress {
                        token_id: token_id.clone(),
                        delivered,
                        acked,
                        agent_ids,
                    }),
            );
        }
        cohorts.waiting = waiting;
        if let Err(e) = self
            .store
            .record_progress(&self.process, seen, &stored_cohorts, &groups)
            .await
        {
            tracing::warn!(error = %e, agents = progressed.len(), "failed to record fleet progress; will retry");
            // Rewritten whole, they follow no cohort, whatever this attempt left stored.
            by_key
                .values()
                .flat_map(|(_, found)| found)
                .for_each(|f| f.slot.touch());
            return false;
        }
        for slot in &left {
            slot.in_cohort.store(false, Ordering::Release);
        }
        for (key, cohort, joiners) in joined {
            for slot in joiners {
                slot.in_cohort.store(true, Ordering::Release);
            }
            cohorts.by_key.insert(key, cohort);
        }
        for key in moved_keys {
            cohorts.unchecked.entry(key).or_insert(now);
        }
        true
    }

    /// Counts the followers of each cohort that moved [`CHECK_AFTER`] ago or more, and
    /// returns how many cohorts were counted. Another replica may rewrite an agent's entry
    /// whole, so that it follows no cohort: one whose binary predates the entries' owners
    /// (migration 0015) during a rolling upgrade, when the agent's stream there ends after it
    /// opened one here. The agent would then keep the revisions that replica wrote while this
    /// one believes it follows the cohort. An entry found rewritten is rewritten whole from
    /// this replica's slot at the next flush.
    ///
    /// A count reads the whole fleet (an agent's cohort is not indexed, migration 0014), so it
    /// runs in the periodic flusher, not in the flush after a publication: one read counts
    /// every cohort that moved, at most once every [`CHECK_AFTER`], however many publications
    /// move them.
    pub(super) async fn check_cohorts(&self) -> usize {
        let mut cohorts = self.flushing.lock().await;
        let due = cohorts.due(Instant::now());
        if due.is_empty() {
            return 0;
        }
        // The flushes that moved these cohorts have committed (the lock is held), and a slot
        // joined its cohort with them: its entry was written following the cohort, unless it
        // was owned by another process then (the join wrote nothing), and then the count says
        // so. A slot whose chains changed since has no key, and will be written whole.
        let mut members: HashMap<Arc<str>, Vec<Arc<Slot>>> = due
            .iter()
            .map(|(key, _)| (key.clone(), Vec::new()))
            .collect();
        for slot in lock(&self.agents).values() {
            if !slot.in_cohort.load(Ordering::Acquire) {
                continue;
            }
            let key = lock(&slot.cohort_key).clone();
            if let Some(v) = key.and_then(|key| members.get_mut(&key)) {
                v.push(slot.clone());
            }
        }
        let ids: Vec<String> = due.iter().map(|(_, id)| id.clone()).collect();
        let sizes = match self.store.cohort_sizes(&ids).await {
            Ok(sizes) => sizes,
            Err(e) => {
                tracing::warn!(error = %e, "failed to count the agents following cohorts; will count again");
                let again = Instant::now();
                for (key, _) in due {
                    cohorts.unchecked.entry(key).or_insert(again);
                }
                return 0;
            }
        };
        for (key, id) in &due {
            let slots = members.remove(key).unwrap_or_default();
            let size = sizes.get(id).copied().unwrap_or(0);
            if usize::try_from(size).is_ok_and(|n| n >= slots.len()) {
                continue;
            }
            let by_id: HashMap<String, &Arc<Slot>> = slots
                .iter()
                .map(|slot| (lock(&slot.status).agent_id.clone(), slot))
                .collect();
            let agent_ids: Vec<String> = by_id.keys().cloned().collect();
            match self.store.not_following(id, &agent_ids).await {
                Ok(lost) => {
                    tracing::info!(
                        cohort = %id,
                        agents = lost.len(),
                        "agents of a cohort were rewritten by another replica; writing them again"
                    );
                    for agent_id in lost {
                        if let Some(slot) = by_id.get(&agent_id) {
                            slot.in_cohort.store(false, Ordering::Release);
                            slot.touch();
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "failed to check the agents following a cohort; will check again");
                    cohorts
                        .unchecked
                        .entry(key.clone())
                        .or_insert(Instant::now());
                }
            }
        }
        due.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize};
    use std::sync::Mutex;

    use super::*;
    use crate::store::AgentStatus;

    fn slot(key: Option<&str>) -> Arc<Slot> {
        Arc::new(Slot {
            token_id: "t".into(),
            status: Mutex::new(AgentStatus {
                agent_id: "a".into(),
                service: "order".into(),
                client: String::new(),
                labels: Default::default(),
                chains: vec!["checkout".into()],
                replica: "r".into(),
                connected: true,
                delivered: 0,
                acked: 0,
                nack_revision: None,
                nack_error: None,
                first_seen: String::new(),
                last_seen: String::new(),
                token: None,
                token_id: "t".into(),
                process: String::new(),
            }),
            delivered: AtomicI64::new(0),
            dirty: AtomicBool::new(false),
            progressed: AtomicBool::new(false),
            streams: AtomicUsize::new(1),
            news: Arc::new(AtomicBool::new(false)),
            in_cohort: AtomicBool::new(true),
            cohort_key: Mutex::new(key.map(Arc::from)),
        })
    }

    #[test]
    fn cohorts_no_slot_can_follow_are_forgotten() {
        let mut cohorts = Cohorts::new("r#1".into());
        for (n, key) in ["t\ncheckout", "t\nsearch", "u\ncheckout"]
            .into_iter()
            .enumerate()
        {
            let cohort = Cohort {
                id: format!("r#1/{n}"),
                delivered: 1,
                acked: 1,
            };
            cohorts.by_key.insert(key.into(), cohort);
            cohorts.waiting.insert(key.into(), Instant::now());
            cohorts.unchecked.insert(key.into(), Instant::now());
        }
        let slots = [
            slot(Some("t\ncheckout")),
            slot(None),
            slot(Some("u\ncheckout")),
        ];
        cohorts.forget_unfollowed(slots.iter());
        let mut kept: Vec<_> = cohorts.by_key.keys().map(|k| k.to_string()).collect();
        kept.sort();
        assert_eq!(kept, ["t\ncheckout", "u\ncheckout"]);
        assert_eq!(cohorts.waiting.len(), 2);
        assert!(!cohorts.waiting.contains_key("t\nsearch"));
        assert_eq!(cohorts.unchecked.len(), 2);
        assert!(!cohorts.unchecked.contains_key("t\nsearch"));
        cohorts.forget_unfollowed([].iter());
        assert!(cohorts.by_key.is_empty() && cohorts.waiting.is_empty());
        assert!(cohorts.unchecked.is_empty());
    }
}
