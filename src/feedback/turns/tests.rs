//! The turns on a clock the tests move: who gets the place, in which order.

use super::*;
use std::future::Future as _;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::task::{Context, Waker};
use std::time::Duration;

type Order = Arc<Mutex<Vec<String>>>;

/// Turns on a clock the test moves (milliseconds, as nanoseconds).
fn turns(places: usize) -> (Arc<Turns>, Arc<AtomicU64>) {
    let clock = Arc::new(AtomicU64::new(0));
    let read = clock.clone();
    let turns = Turns::with_clock(places, Box::new(move || read.load(SeqCst)));
    (Arc::new(turns), clock)
}

/// A Report of `token` that takes its turn, records `name` once it has it, and holds the
/// turn until `end` is sent.
fn report(
    turns: &Arc<Turns>,
    token: &'static str,
    name: String,
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

/// A Report of `token` that waits for its turn and ends as soon as it has it.
fn take_then_end(turns: &Arc<Turns>, token: &'static str) -> tokio::task::JoinHandle<()> {
    let turns = turns.clone();
    tokio::spawn(async move {
        let _turn = turns.take(token).await;
    })
}

/// Nothing runs or waits, and no token is kept.
fn assert_idle(turns: &Turns) {
    assert_eq!(
        turns.load(),
        Load {
            running: 0,
            waiting: 0
        }
    );
    assert!(turns.lock().tokens.is_empty(), "no token kept once idle");
}

/// Queues `reports` (token, name, milliseconds its turn takes) in that order behind a
/// single place, then ends each running Report in turn after its time on `clock`; the
/// order in which they had their turns.
async fn run(reports: &[(&'static str, String, u64)]) -> Vec<String> {
    run_then(reports, |_| Vec::new()).await
}

type Reports = Vec<(&'static str, String, u64)>;

/// [`run`], queueing `then(name)` as soon as the Report `name` has ended.
async fn run_then(
    reports: &[(&'static str, String, u64)],
    then: impl Fn(&str) -> Reports,
) -> Vec<String> {
    let (turns, clock) = turns(1);
    let order = Order::default();
    let mut running = HashMap::new();
    let mut lengths = HashMap::new();
    let queue = |running: &mut HashMap<_, _>,
                 lengths: &mut HashMap<String, u64>,
                 (token, name, ms): &(&'static str, String, u64)| {
        lengths.insert(name.clone(), *ms);
        running.insert(name.clone(), report(&turns, token, name.clone(), &order));
    };
    for r in reports {
        queue(&mut running, &mut lengths, r);
        settle().await;
    }
    assert_eq!(
        turns.load(),
        Load {
            running: 1,
            waiting: reports.len() - 1
        }
    );
    let mut i = 0;
    while !running.is_empty() {
        let name = order.lock().unwrap()[i].clone();
        clock.fetch_add(lengths[&name] * 1_000_000, SeqCst);
        let (task, end) = running.remove(&name).unwrap();
        end.send(()).unwrap();
        task.await.unwrap();
        for r in then(&name) {
            queue(&mut running, &mut lengths, &r);
            settle().await;
        }
        settle().await;
        i += 1;
    }
    assert_eq!(
        turns.load(),
        Load {
            running: 0,
            waiting: 0
        }
    );
    let order = order.lock().unwrap().clone();
    order
}

/// Found by review: a token that went idle between its bursts had its tally forgotten, and
/// came back as new at the front, taking nearly all the time from a token always waiting.
#[tokio::test]
async fn a_token_that_goes_idle_keeps_its_debt() {
    // a sends one 100 ms Report at a time, the next once the last has ended; b keeps 300
    // of 1 ms waiting. b has about 100 turns between two of a's.
    let reports = [named("b", 300, 1), named("a", 1, 100)].concat();
    let order = run_then(&reports, |ended| match ended {
        "a0" => vec![("a", "a1".to_owned(), 100)],
        "a1" => vec![("a", "a2".to_owned(), 100)],
        _ => Vec::new(),
    })
    .await;
    let at = |name: &str| order.iter().position(|n| n == name).unwrap();
    for (earlier, later) in [("a0", "a1"), ("a1", "a2")] {
        let between = at(later) - at(earlier) - 1;
        assert!(
            (90..=110).contains(&between),
            "{between} of b's between {earlier} and {later}: {order:?}"
        );
    }
}

fn named(token: &'static str, n: usize, ms: u64) -> Vec<(&'static str, String, u64)> {
    (0..n).map(|i| (token, format!("{token}{i}"), ms)).collect()
}

#[tokio::test]
async fn a_tokens_queue_does_not_hold_up_another_tokens_report() {
    // b's and c's Reports come after a's queue: they wait for a's running turn only.
    let reports = [named("a", 6, 10), named("b", 1, 10), named("c", 1, 10)].concat();
    assert_eq!(
        run(&reports).await,
        ["a0", "b0", "c0", "a1", "a2", "a3", "a4", "a5"]
    );
    // Turns of equal tallies go to the waiting tokens in rotation.
    let reports = [named("a", 3, 0), named("b", 2, 0), named("c", 2, 0)].concat();
    assert_eq!(
        run(&reports).await,
        ["a0", "a1", "b0", "c0", "a2", "b1", "c1"]
    );
}

#[tokio::test]
async fn a_token_of_light_reports_gets_as_much_time_as_a_heavy_one_not_as_many_turns() {
    // a's turns take 100 ms, b's 1 ms: b's twenty all pass before a's second.
    let reports = [named("a", 4, 100), named("b", 20, 1)].concat();
    let order = run(&reports).await;
    let b_last = order.iter().position(|n| n == "b19").unwrap();
    let a1 = order.iter().position(|n| n == "a1").unwrap();
    assert!(b_last < a1, "{order:?}");
    // Then a's queue has the place.
    assert_eq!(order[21..], ["a1", "a2", "a3"], "{order:?}");
}

#[tokio::test]
async fn a_token_that_starts_waiting_gets_no_credit_for_its_idle_time() {
    // a and b take turns of 1 s; c comes once each has had one. It joins at their tally
    // and takes its turns in rotation with them, rather than having the place until it
    // has used as much time as they have.
    let (turns, clock) = turns(1);
    let order = Order::default();
    let mut running = HashMap::new();
    let queue = |running: &mut HashMap<_, _>, token: &'static str, name: &str| {
        running.insert(name.to_owned(), report(&turns, token, name.into(), &order));
    };
    for (token, name) in [
        ("a", "a0"),
        ("b", "b0"),
        ("a", "a1"),
        ("b", "b1"),
        ("a", "a2"),
        ("b", "b2"),
    ] {
        queue(&mut running, token, name);
        settle().await;
    }
    let late = [false, false, true, false, false, false, false, false, false];
    for (ended, late) in late.into_iter().enumerate() {
        if late {
            for name in ["c0", "c1", "c2"] {
                queue(&mut running, "c", name);
                settle().await;
            }
        }
        let name = order.lock().unwrap()[ended].clone();
        clock.fetch_add(1_000_000_000, SeqCst);
        let (task, end) = running.remove(&name).unwrap();
        end.send(()).unwrap();
        task.await.unwrap();
        settle().await;
    }
    assert_eq!(
        *order.lock().unwrap(),
        ["a0", "b0", "a1", "b1", "c0", "a2", "b2", "c1", "c2"]
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
    let (turns, _) = turns(1);
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
    let next = take_then_end(&turns, "d");
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
    assert_idle(&turns);
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

#[tokio::test]
async fn cancelled_waits_cost_no_scan_of_their_queue() {
    // Thousands of one token's Reports wait, then their calls are cancelled (their agents
    // gave up): each leaves in constant time, not by scanning the rest of the queue.
    const N: usize = 5_000;
    let (turns, _) = turns(1);
    let first = turns.take("a").await;
    let mut cx = Context::from_waker(Waker::noop());
    let mut waits: Vec<_> = (0..N).map(|_| Box::pin(turns.take("a"))).collect();
    for wait in &mut waits {
        assert!(wait.as_mut().poll(&mut cx).is_pending());
    }
    let last = take_then_end(&turns, "a");
    settle().await;
    assert_eq!(
        turns.load(),
        Load {
            running: 1,
            waiting: N + 1
        }
    );
    // Oldest first, then the rest from the newest: both ends of the queue.
    let rest = waits.split_off(N / 2);
    drop(waits);
    for wait in rest.into_iter().rev() {
        drop(wait);
    }
    assert_eq!(
        turns.load(),
        Load {
            running: 1,
            waiting: 1
        }
    );
    let (looked_at, queued) = {
        let s = turns.lock();
        (s.looked_at, s.tokens["a"].queue.len())
    };
    assert!(
        looked_at <= 3 * N as u64,
        "{N} cancelled waits looked at {looked_at} queued senders"
    );
    // ... and the closed senders they leave are swept: the queue stays near what waits.
    assert!(
        queued <= 2 + 16,
        "{queued} senders queued for one waiting Report"
    );
    drop(first);
    tokio::time::timeout(Duration::from_secs(5), last)
        .await
        .expect("the Report still waiting gets the turn")
        .unwrap();
    assert_idle(&turns);
}
