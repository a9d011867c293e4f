//! Turns at decoding Reports, shared among agent tokens in rotation.
//!
//! A Report holds its turn while its histograms are decoded and merged; a few run at once
//! ([`super::DECODING_PER_CORE`] per core). When every place is taken, waiting Reports queue
//! per token, and a place that comes free goes to the next token in rotation, not to the
//! oldest Report: one token's queue of heavy Reports delays another token's Report by at most
//! one turn per waiting token, not by the whole queue. No place is ever left idle while a
//! Report waits, so a fleet whose tokens all report alike goes as fast as first-come turns.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

pub struct Turns {
    places: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    running: usize,
    waiting: usize,
    /// Tokens with Reports waiting, in the order their next turn comes.
    rotation: VecDeque<Arc<str>>,
    /// Each such token's waiting Reports, oldest first.
    queues: HashMap<Arc<str>, VecDeque<oneshot::Sender<()>>>,
}

/// A Report's turn, given to the next waiting Report when dropped.
pub struct Turn<'a> {
    turns: &'a Turns,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turns.pass(self.turns.lock());
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
        Self {
            places: places.max(1),
            state: Mutex::default(),
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
        let receiver = {
            let mut s = self.lock();
            if s.running < self.places {
                s.running += 1;
                return Turn { turns: self };
            }
            let (sender, receiver) = oneshot::channel();
            match s.queues.get_mut(token) {
                Some(queue) => queue.push_back(sender),
                None => {
                    let token: Arc<str> = token.into();
                    s.rotation.push_back(token.clone());
                    s.queues.insert(token, VecDeque::from([sender]));
                }
            }
            s.waiting += 1;
            receiver
        };
        let mut waiter = Waiter {
            turns: self,
            token,
            receiver: Some(receiver),
        };
        let given = match waiter.receiver.as_mut() {
            Some(receiver) => receiver.await.is_ok(),
            None => false,
        };
        waiter.receiver = None;
        if !given {
            // Unreachable: a sender is only dropped unsent by its waiter's own drop. Should it
            // happen, the Report runs anyway, counted, so the counts stay right.
            self.lock().running += 1;
        }
        Turn { turns: self }
    }

    /// Gives a place that came free to the next token's oldest waiting Report, or frees it.
    fn pass(&self, mut s: MutexGuard<'_, State>) {
        while let Some(token) = s.rotation.pop_front() {
            let Some(queue) = s.queues.get_mut(&token) else {
                continue;
            };
            let next = queue.pop_front();
            if queue.is_empty() {
                s.queues.remove(&token);
            } else {
                s.rotation.push_back(token);
            }
            if let Some(next) = next {
                s.waiting -= 1;
                if next.send(()).is_ok() {
                    return;
                }
            }
        }
        s.running -= 1;
    }
}

/// A Report waiting for its turn; dropped before the turn came (the call was cancelled), it
/// leaves its token's queue, or passes the turn on if it was given meanwhile.
struct Waiter<'a, 't> {
    turns: &'a Turns,
    token: &'t str,
    receiver: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiter<'_, '_> {
    fn drop(&mut self) {
        let Some(mut receiver) = self.receiver.take() else {
            return;
        };
        // Under the lock, the turn was either given already or is still to be.
        let mut s = self.turns.lock();
        receiver.close();
        if receiver.try_recv().is_ok() {
            self.turns.pass(s);
            return;
        }
        let Some(queue) = s.queues.get_mut(self.token) else {
            return;
        };
        let before = queue.len();
        queue.retain(|sender| !sender.is_closed());
        let gone = before - queue.len();
        let empty = queue.is_empty();
        s.waiting -= gone;
        if empty {
            s.queues.remove(self.token);
            s.rotation.retain(|t| &**t != self.token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future as _;
    use std::task::{Context, Waker};
    use std::time::Duration;

    type Order = Arc<Mutex<Vec<&'static str>>>;

    /// A Report of `token` that takes its turn, records `name` once it has it, and holds the
    /// turn until `end` is sent.
    fn report(
        turns: &Arc<Turns>,
        token: &'static str,
        name: &'static str,
        order: &Order,
    ) -> (tokio::task::JoinHandle<()>, oneshot::Sender<()>) {
        let (end, ended) = oneshot::channel::<()>();
        let (turns, order) = (turns.clone(), order.clone());
        let task = tokio::spawn(async move {
            let _turn = turns.take(token).await;
            order.lock().unwrap().push(name);
            let _ = ended.await;
        });
        (task, end)
    }

    /// Lets the spawned tasks run as far as they can (the runtime has one thread).
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_token_waits_one_turn_behind_another_tokens_queue_not_all_of_it() {
        let turns = Arc::new(Turns::new(1));
        let order = Order::default();
        let mut reports = HashMap::new();
        // Token a takes the place and queues five more; then b and c queue one each.
        for (token, name) in [
            ("a", "a0"),
            ("a", "a1"),
            ("a", "a2"),
            ("a", "a3"),
            ("a", "a4"),
            ("a", "a5"),
            ("b", "b0"),
            ("c", "c0"),
        ] {
            reports.insert(name, report(&turns, token, name, &order));
            settle().await;
        }
        assert_eq!(
            turns.load(),
            Load {
                running: 1,
                waiting: 7
            }
        );
        // End the running Report, one at a time.
        for i in 0..8 {
            let running = order.lock().unwrap()[i];
            let (task, end) = reports.remove(running).unwrap();
            end.send(()).unwrap();
            task.await.unwrap();
            settle().await;
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["a0", "a1", "b0", "c0", "a2", "a3", "a4", "a5"],
            "b's and c's Reports came after a's queue, and wait one turn of a's, not all"
        );
        assert_eq!(
            turns.load(),
            Load {
                running: 0,
                waiting: 0
            }
        );
    }

    #[tokio::test]
    async fn a_cancelled_wait_leaves_the_queue_and_a_given_turn_passes_on() {
        let turns = Arc::new(Turns::new(1));
        let first = turns.take("a").await;
        // A waiting Report whose call is cancelled leaves its token's queue.
        let waited = tokio::time::timeout(Duration::from_millis(10), turns.take("b")).await;
        assert!(waited.is_err());
        assert_eq!(
            turns.load(),
            Load {
                running: 1,
                waiting: 0
            }
        );
        // A Report given its turn just as it is cancelled passes the turn on.
        let mut given = Box::pin(turns.take("c"));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(given.as_mut().poll(&mut cx).is_pending());
        let next = tokio::spawn({
            let turns = turns.clone();
            async move {
                let _turn = turns.take("d").await;
            }
        });
        settle().await;
        assert_eq!(
            turns.load(),
            Load {
                running: 1,
                waiting: 2
            }
        );
        drop(first); // the turn goes to c, which is never polled again
        drop(given);
        tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .expect("d gets the turn c was given")
            .unwrap();
        assert_eq!(
            turns.load(),
            Load {
                running: 0,
                waiting: 0
            }
        );
    }

    #[tokio::test]
    async fn every_place_is_used_before_a_report_waits() {
        let turns = Turns::new(3);
        let held = [
            turns.take("a").await,
            turns.take("a").await,
            turns.take("a").await,
        ];
        assert_eq!(
            turns.load(),
            Load {
                running: 3,
                waiting: 0
            }
        );
        drop(held);
        assert_eq!(
            turns.load(),
            Load {
                running: 0,
                waiting: 0
            }
        );
    }
}
