//! Windows of Reports whose callers gave up after the windows had joined a batch (the call
//! reset while it waited for the commit): the batch stores them, and their agent, never
//! answered, sends them again. The resend must not count them a second time, so each such
//! window is remembered, with its batch's commit, by (agent, chain, segment, start); a resend
//! of it waits for that commit and skips the window if the commit stored it.
//!
//! Memory: at most [`MOST_REMEMBERED`] windows, each for [`REMEMBERED_FOR`] (after that its
//! resend would be refused as late anyway): a table of at most 524,288 slots of 33 bytes, about
//! 17 MiB, plus a few hundred bytes per batch still referred to. A window that does not fit is
//! not remembered, and its resend counts it again.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::rollup::{Commit, Window};

/// Most windows remembered at once.
pub const MOST_REMEMBERED: usize = 262_144;

/// How long a window is remembered: the 10 minutes a window may arrive late, and one more.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(11 * 60);

/// The remembered windows of unanswered Reports.
#[derive(Default)]
pub struct Resent {
    /// A hash of (agent, chain, segment, start) → (forgotten at, unix ms; the batch's commit).
    windows: Mutex<HashMap<u64, (i64, Commit)>>,
    /// `windows.len()`, read without the lock: most Reports find nothing remembered.
    len: AtomicUsize,
    hasher: RandomState,
}

impl Resent {
    fn key(&self, agent: &str, chain: &str, segment: &str, start_ms: i64) -> u64 {
        self.hasher.hash_one((agent, chain, segment, start_ms))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (i64, Commit)>> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers `windows` of `agent`, merged into the batch of `commit` and not answered;
    /// how many did not fit.
    pub fn remember(
        &self,
        agent: &str,
        windows: &[WindowKey],
        commit: &Commit,
        now_ms: i64,
    ) -> usize {
        let until = now_ms.saturating_add(REMEMBERED_FOR.as_millis() as i64);
        let mut map = self.lock();
        if map.len() + windows.len() > MOST_REMEMBERED {
            map.retain(|_, (forget_at, _)| *forget_at > now_ms);
        }
        let mut left_out = 0;
        for w in windows {
            if map.len() >= MOST_REMEMBERED {
                left_out += 1;
                continue;
            }
            let key = self.key(agent, &w.chain, &w.segment, w.start_ms);
            map.insert(key, (until, commit.clone()));
        }
        self.len.store(map.len(), Ordering::Relaxed);
        left_out
    }

    /// The commit of the batch that holds `agent`'s window, if it is remembered.
    pub fn pending(
        &self,
        agent: &str,
        chain: &str,
        segment: &str,
        start_ms: i64,
    ) -> Option<Commit> {
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let key = self.key(agent, chain, segment, start_ms);
        self.lock().get(&key).map(|(_, commit)| commit.clone())
    }

    /// Forgets `agent`'s window: its resend has been answered (a window is sent again once).
    pub fn forget(&self, agent: &str, chain: &str, segment: &str, start_ms: i64) {
        let key = self.key(agent, chain, segment, start_ms);
        let mut map = self.lock();
        map.remove(&key);
        self.len.store(map.len(), Ordering::Relaxed);
    }

    /// Whether no window is remembered.
    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Relaxed) == 0
    }
}

/// What identifies one window of one agent.
#[derive(Debug, Clone)]
pub struct WindowKey {
    pub chain: String,
    pub segment: String,
    pub start_ms: i64,
}

impl WindowKey {
    pub fn of(w: &Window) -> Self {
        Self {
            chain: w.chain.clone(),
            segment: w.segment.clone(),
            start_ms: w.start_ms,
        }
    }
}

/// A Report's windows merged into a batch, until the Report is answered: dropped before
/// [`Unanswered::answered`] (its call reset while it waits), they are remembered in
/// `resent`.
pub struct Unanswered<'a> {
    resent: &'a Resent,
    agent: &'a str,
    windows: Vec<WindowKey>,
    commit: Option<Commit>,
}

impl<'a> Unanswered<'a> {
    pub fn new(
        resent: &'a Resent,
        agent: &'a str,
        windows: Vec<WindowKey>,
        commit: &Commit,
    ) -> Self {
        Self {
            resent,
            agent,
            windows,
            commit: Some(commit.clone()),
        }
    }

    /// The Report is answered: nothing to remember.
    pub fn answered(mut self) {
        self.commit = None;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        let Some(commit) = self.commit.take() else {
            return;
        };
        if self.windows.is_empty() {
            return;
        }
        let left_out =
            self.resent
                .remember(self.agent, &self.windows, &commit, crate::clock::now_ms());
        tracing::debug!(agent = %self.agent, windows = self.windows.len(), "a Report was reset after its windows joined a batch; remembered for the resend");
        if left_out > 0 {
            tracing::warn!(agent = %self.agent, windows = left_out, "windows of a Report reset after joining a batch not remembered (the table is full): their resend counts them again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(start_ms: i64) -> WindowKey {
        WindowKey {
            chain: "checkout".into(),
            segment: "order->inventory".into(),
            start_ms,
        }
    }

    #[test]
    fn a_window_is_found_for_its_agent_until_forgotten() {
        let r = Resent::default();
        assert!(r.is_empty());
        assert_eq!(r.remember("a", &[key(1), key(2)], &Commit::nothing(), 0), 0);
        assert!(r.pending("a", "checkout", "order->inventory", 1).is_some());
        assert!(r.pending("b", "checkout", "order->inventory", 1).is_none());
        assert!(r.pending("a", "checkout", "order->user", 1).is_none());
        assert!(r.pending("a", "checkout", "order->inventory", 3).is_none());
        r.forget("a", "checkout", "order->inventory", 1);
        assert!(r.pending("a", "checkout", "order->inventory", 1).is_none());
        r.forget("a", "checkout", "order->inventory", 2);
        assert!(r.is_empty());
    }

    #[test]
    fn the_table_is_bounded_and_expired_windows_make_room() {
        let r = Resent::default();
        let all: Vec<WindowKey> = (0..MOST_REMEMBERED as i64).map(key).collect();
        assert_eq!(r.remember("a", &all, &Commit::nothing(), 0), 0);
        // Full: a window more is left out while the others are remembered.
        assert_eq!(r.remember("b", &[key(0)], &Commit::nothing(), 1_000), 1);
        assert!(r.pending("b", "checkout", "order->inventory", 0).is_none());
        // Once the first ones are forgotten by age, there is room again.
        let later = REMEMBERED_FOR.as_millis() as i64 + 1;
        assert_eq!(r.remember("b", &[key(0)], &Commit::nothing(), later), 0);
        assert!(r.pending("b", "checkout", "order->inventory", 0).is_some());
        assert!(r.pending("a", "checkout", "order->inventory", 0).is_none());
    }
}
