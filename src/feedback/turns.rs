//! Turns at decoding Reports, shared fairly among agent tokens by the time they take.
//!
//! A Report holds its turn while its histograms are decoded and merged; a few run at once
//! ([`super::DECODING_PER_CORE`] per core). When every place is taken, waiting Reports queue
//! per token, and a place that comes free goes to the waiting token that has used the least
//! time (start-time fair queueing): each turn adds its length to its token's tally (an
//! estimate when it starts, the measured length when it ends), and a token that starts
//! waiting joins at the largest tally a turn started at, with no credit for its idle time. A
//! token that goes idle ahead of that keeps its tally until the others catch up, so a debt is
//! not wiped by pausing or cancelling between bursts; a new token's first turns are charged a
//! typical turn's length. So
//! one token's queue of heavy Reports delays another token's Report by about one heavy turn,
//! not by the whole queue, and a token of light Reports gets as much decoding time as the
//! heavy one, not merely as many turns. No place is left idle while a Report waits, so a fleet
//! whose tokens all report alike goes as fast as with first-come turns; equal tallies take
//! turns in rotation.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::oneshot;

pub struct Turns {
    places: usize,
    /// Nanoseconds on a monotonic clock (a fake one in tests).
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: usize,
    waiting: usize,
    /// The largest tally a turn started at: where a token that starts waiting joins.
    now: u64,
    /// Orders tokens of equal tallies by when they queued (rotation).
    seq: u64,
    /// What a turn takes, a moving average over every token: a new token's first estimate.
    typical: u64,
    /// Tokens with Reports running or waiting, and idle ones still ahead of `now` (their
    /// debt is kept until the others catch up, so going idle does not wipe it).
    tokens: HashMap<Arc<str>, Token>,
    /// Size of `tokens` past which idle tokens no longer ahead are swept out.
    sweep_at: usize,
    /// Queued senders looked at, to show that a cancelled wait costs no scan of its queue.
    #[cfg(test)]
    looked_at: u64,
    /// Tokens with Reports waiting, by (tally, seq): the first gets the next place.
    ready: BTreeMap<(u64, u64), Arc<str>>,
}

#[derive(Default)]
struct Token {
    /// Nanoseconds of turns taken (estimated for those still running).
    tally: u64,
    /// What its next turn is expected to take: a moving average of its turns.
    estimate: u64,
    running: usize,
    /// Its Reports still waiting.
    waiting: usize,
    /// Its waiting Reports, oldest first; each told, when given its turn, the turn's estimate
    /// and the time it was given (the turn is charged from then, not from when it wakes).
    /// Reports that stopped waiting leave their closed sender behind, skipped when reached
    /// (or swept once they are half the queue), so stopping costs no scan of the queue.
    queue: VecDeque<oneshot::Sender<(u64, u64)>>,
    /// Its key in `ready` while it has Reports waiting.
    ready: Option<(u64, u64)>,
}

/// A Report's turn, given to the next waiting Report when dropped.
pub struct Turn<'a> {
    turns: &'a Turns,
    token: Arc<str>,
    started: u64,
    estimate: u64,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let took = (self.turns.clock)().saturating_sub(self.started);
        let s = self.turns.lock();
        self.turns.end(s, &self.token, self.estimate, Some(took));
    }
}

/// Reports running and waiting now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub running: usize,
    pub waiting: usize,
}

impl Turns {
    /// `places` Reports at once (at least one).
    pub fn new(places: usize) -> Self {
        let origin = Instant::now();
        Self::with_clock(
            places,
            Box::new(move || u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)),
        )
    }

    fn with_clock(places: usize, clock: Box<dyn Fn() -> u64 + Send + Sync>) -> Self {
        Self {
            places: places.max(1),
            clock,
            state: Mutex::new(State {
                sweep_at: SWEEP_AT,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; a poisoned one still holds consistent counts.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn load(&self) -> Load {
        let s = self.lock();
        Load {
            running: s.running,
            waiting: s.waiting,
        }
    }

    /// Waits for a turn of `token` (the caller's token id). Cancel-safe: a Report that stops
    /// waiting leaves the queue, and a turn given to it as it stopped passes on.
    pub async fn take(&self, token: &str) -> Turn<'_> {
        let (token, receiver) = {
            let mut s = self.lock();
            let s = &mut *s;
            let now = s.now;
            let token: Arc<str> = match s.tokens.get_key_value(token) {
                Some((key, _)) => key.clone(),
                None => {
                    if s.tokens.len() >= s.sweep_at {
                        s.tokens.retain(|_, t| !t.idle() || t.tally > now);
                        s.sweep_at = (2 * s.tokens.len()).max(SWEEP_AT);
                    }
                    let key: Arc<str> = token.into();
                    let fresh = Token {
                        tally: now,
                        estimate: s.typical,
                        ..Token::default()
                    };
                    s.tokens.insert(key.clone(), fresh);
                    key
                }
            };
            let t = s.tokens.get_mut(&token).expect("inserted above");
            if t.waiting == 0 {
                // No credit for time it did not ask for: it joins where the others are.
                t.tally = t.tally.max(now);
            }
            if s.running < self.places {
                s.running += 1;
                let estimate = start(&mut s.now, t);
                return Turn {
                    turns: self,
                    token,
                    started: (self.clock)(),
                    estimate,
                };
            }
            let (sender, receiver) = oneshot::channel();
            t.queue.push_back(sender);
            t.waiting += 1;
            if t.ready.is_none() {
                let key = (t.tally, s.seq);
                s.seq += 1;
                t.ready = Some(key);
                s.ready.insert(key, token.clone());
            }
            s.waiting += 1;
            (token, receiver)
        };
        let mut waiter = Waiter {
            turns: self,
            token: token.clone(),
            receiver: Some(receiver),
        };
        let given = match waiter.receiver.as_mut() {
            Some(receiver) => receiver.await.ok(),
            None => None,
        };
        waiter.receiver = None;
        let (estimate, started) = given.unwrap_or_else(|| {
            // Unreachable: a sender is only dropped unsent by its waiter's own drop. Should it
            // happen, the Report runs anyway, counted, so the counts stay right.
            let mut s = self.lock();
            s.running += 1;
            if let Some(t) = s.tokens.get_mut(&token) {
                t.running += 1;
            }
            (0, (self.clock)())
        });
        Turn {
            turns: self,
            token,
            started,
            estimate,
        }
    }

    /// A turn of `token` that was expected to take `estimate` took `took` (`None`: it was
    /// given to a Report that had stopped waiting, and never ran): its tally is corrected,
    /// and its place goes to the next Report.
    fn end(
        &self,
        mut s: MutexGuard<'_, State>,
        token: &Arc<str>,
        estimate: u64,
        took: Option<u64>,
    ) {
        let s_ref = &mut *s;
        if let Some(took) = took {
            s_ref.typical = average(s_ref.typical, took);
        }
        if let Some(t) = s_ref.tokens.get_mut(token) {
            t.running = t.running.saturating_sub(1);
            t.tally = t
                .tally
                .saturating_sub(estimate)
                .saturating_add(took.unwrap_or(0));
            if let Some(took) = took {
                t.estimate = average(t.estimate, took);
            }
            if let Some(key) = t.ready {
                // Its place among the waiting tokens follows its tally.
                s_ref.ready.remove(&key);
                let key = (t.tally, key.1);
                t.ready = Some(key);
                s_ref.ready.insert(key, token.clone());
            }
            if t.idle() && t.tally <= s_ref.now {
                s_ref.tokens.remove(token);
            }
        }
        self.pass(s);
    }

    /// Gives a place that came free to the oldest waiting Report of the token with the least
    /// tally, or frees it.
    fn pass(&self, mut s: MutexGuard<'_, State>) {
        let s = &mut *s;
        while let Some((_, token)) = s.ready.pop_first() {
            let Some(t) = s.tokens.get_mut(&token) else {
                continue;
            };
            t.ready = None;
            // The oldest Report still waiting; those before it stopped waiting.
            let Some(next) = std::iter::from_fn(|| t.queue.pop_front()).find(|sender| {
                #[cfg(test)]
                {
                    s.looked_at += 1;
                }
                !sender.is_closed()
            }) else {
                continue;
            };
            t.waiting -= 1;
            s.waiting -= 1;
            if t.waiting == 0 {
                t.queue.clear();
            }
            let estimate = start(&mut s.now, t);
            if t.waiting > 0 {
                let key = (t.tally, s.seq);
                s.seq += 1;
                t.ready = Some(key);
                s.ready.insert(key, token.clone());
            }
            if next.send((estimate, (self.clock)())).is_ok() {
                return;
            }
            // Unreachable (a waiter that leaves takes its sender out first): undo the start.
            t.running -= 1;
            t.tally = t.tally.saturating_sub(estimate);
        }
        s.running -= 1;
    }
}

/// Idle tokens kept (with a debt) before the first sweep.
const SWEEP_AT: usize = 1024;

impl Token {
    fn idle(&self) -> bool {
        self.running == 0 && self.waiting == 0
    }
}

/// A moving average of turn lengths: three parts the old, one part the new.
fn average(old: u64, new: u64) -> u64 {
    old.saturating_mul(3).saturating_add(new) / 4
}

/// Starts a turn of `t`: its tally is charged the turn's estimate, and the tally it had is
/// where tokens that start waiting now join. Returns the estimate.
fn start(now: &mut u64, t: &mut Token) -> u64 {
    *now = (*now).max(t.tally);
    t.running += 1;
    t.tally = t.tally.saturating_add(t.estimate);
    t.estimate
}

/// A Report waiting for its turn; dropped before the turn came (the call was cancelled), it
/// leaves its token's queue, or passes the turn on if it was given meanwhile.
struct Waiter<'a> {
    turns: &'a Turns,
    token: Arc<str>,
    receiver: Option<oneshot::Receiver<(u64, u64)>>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let Some(mut receiver) = self.receiver.take() else {
            return;
        };
        // Under the lock, the turn was either given already or is still to be.
        let mut s = self.turns.lock();
        receiver.close();
        if let Ok((estimate, _)) = receiver.try_recv() {
            self.turns.end(s, &self.token, estimate, None);
            return;
        }
        let s = &mut *s;
        let Some(t) = s.tokens.get_mut(&self.token) else {
            return;
        };
        // Its closed sender stays queued until reached or swept.
        t.waiting -= 1;
        s.waiting -= 1;
        if t.queue.len() > 2 * t.waiting + 16 {
            #[cfg(test)]
            {
                s.looked_at += t.queue.len() as u64;
            }
            t.queue.retain(|sender| !sender.is_closed());
        }
        if t.waiting == 0 {
            t.queue.clear();
            if let Some(key) = t.ready.take() {
                s.ready.remove(&key);
            }
            if t.idle() && t.tally <= s.now {
                s.tokens.remove(&self.token);
            }
        }
    }
}

#[cfg(test)]
mod tests;
