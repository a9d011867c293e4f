//! The counting state of an agent: one [`Cell`] per segment of the live config, found by
//! segment id without a global lock on the hot path (a read-mostly `RwLock`, written only when
//! a segment is first counted or cells are pruned).
//!
//! Memory is bounded whatever the traffic: calls can only count on segments of a config the
//! agent applied, cells are made for the config in force ([`Counts::install`]) or on the first
//! call of a segment, and at each take the cells of segments no longer in the config are
//! dropped once drained. Each cell's histograms are capped by the one-hour latency clamp.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock};

use crate::cell::{self, Cell, Record};
use crate::snapshot::Snapshot;
use crate::window::Window;

/// Every segment's counts for the window in progress.
#[derive(Default)]
pub(crate) struct Counts {
    /// Segment id → the cells of that id, one per chain counted (almost always one).
    cells: RwLock<HashMap<String, Vec<Cell>>>,
}

impl Counts {
    /// Counts for `snapshot`, with a cell (and its metric series) for each of its segments.
    pub(crate) fn new(snapshot: &Snapshot) -> Self {
        cell::describe_metrics();
        let counts = Self::default();
        counts.install(snapshot);
        counts
    }

    /// Makes the cells of every segment of `snapshot` that has none yet.
    pub(crate) fn install(&self, snapshot: &Snapshot) {
        let mut cells = self.cells.write().unwrap_or_else(PoisonError::into_inner);
        for (chain, live) in &snapshot.chains {
            for segment in &live.segments {
                let of_id = cells.entry(segment.id.clone()).or_default();
                if !of_id.iter().any(|c| c.chain == *chain) {
                    of_id.push(Cell::new(chain, &segment.id));
                }
            }
        }
    }

    /// Adds one finished call of `segment` (of `chain`). The first call of a segment the cells
    /// do not have yet makes its cell.
    pub(crate) fn record(&self, chain: &str, segment: &str, call: &Record) {
        {
            let cells = self.cells.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(cell) = find(&cells, chain, segment) {
                cell.record(call);
                return;
            }
        }
        let mut cells = self.cells.write().unwrap_or_else(PoisonError::into_inner);
        let of_id = cells.entry(segment.to_owned()).or_default();
        match of_id.iter().position(|c| c.chain == chain) {
            Some(i) => of_id[i].record(call),
            None => {
                let cell = Cell::new(chain, segment);
                cell.record(call);
                of_id.push(cell);
            }
        }
    }

    /// Drains every cell into windows spanning `[start_ms, end_ms]` (cells without calls give
    /// none), then drops the cells of segments not in `live` (the config in force), draining
    /// them once more. Calls keep recording while cells are drained (each waits at most for
    /// its own shard); a call still running on a dropped segment makes its cell again.
    pub(crate) fn take(&self, start_ms: i64, end_ms: i64, live: &Snapshot) -> Vec<Window> {
        let in_live = |c: &Cell| {
            live.chains
                .get(&c.chain)
                .is_some_and(|chain| chain.segment(&c.segment).is_some())
        };
        let mut windows = Vec::new();
        let mut stale = false;
        {
            let cells = self.cells.read().unwrap_or_else(PoisonError::into_inner);
            for c in cells.values().flatten() {
                windows.extend(c.take(start_ms, end_ms));
                stale |= !in_live(c);
            }
        }
        if stale {
            let mut cells = self.cells.write().unwrap_or_else(PoisonError::into_inner);
            cells.retain(|_, of_id| {
                of_id.retain(|c| {
                    let keep = in_live(c);
                    if !keep {
                        windows.extend(c.take(start_ms, end_ms));
                    }
                    keep
                });
                !of_id.is_empty()
            });
        }
        windows
    }

    /// How many cells there are, and the bytes they hold (for the memory figures).
    pub(crate) fn footprint(&self) -> (usize, usize) {
        let cells = self.cells.read().unwrap_or_else(PoisonError::into_inner);
        let map = cells.capacity() * std::mem::size_of::<(String, Vec<Cell>)>();
        cells.iter().fold((0, map), |(n, bytes), (id, of_id)| {
            let own: usize = of_id.iter().map(Cell::memory_bytes).sum();
            (n + of_id.len(), bytes + id.capacity() + own)
        })
    }
}

fn find<'a>(cells: &'a HashMap<String, Vec<Cell>>, chain: &str, segment: &str) -> Option<&'a Cell> {
    cells.get(segment)?.iter().find(|c| c.chain == chain)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use crate::test_support::example_a;

    fn call(outcome: Outcome) -> Record {
        Record::first_attempt(outcome, None)
    }

    #[test]
    fn cells_follow_the_config_and_stay_bounded() {
        let a = Snapshot::from_chains([example_a()]);
        let counts = Counts::new(&a);
        let segments = example_a().segments.len();
        assert_eq!(counts.footprint().0, segments);

        counts.record("checkout", "order->inventory", &call(Outcome::Ok));
        counts.record("checkout", "order->inventory", &call(Outcome::Ok));
        let windows = counts.take(0, 10_000, &a);
        assert_eq!(windows.len(), 1, "only segments with calls give a window");
        assert_eq!(windows[0].calls, 2);

        // A new config without inventory: its cell goes at the next take, once drained.
        let mut smaller = example_a();
        smaller.segments.retain(|s| s.id != "order->inventory");
        let b = Snapshot::from_chains([smaller]);
        counts.record("checkout", "order->inventory", &call(Outcome::Unavailable));
        let windows = counts.take(10_000, 20_000, &b);
        assert_eq!(
            windows.len(),
            1,
            "the last counts of a removed segment are kept"
        );
        assert_eq!(windows[0].outcomes[Outcome::Unavailable.index()], 1);
        assert_eq!(counts.footprint().0, segments - 1);

        // A call that was running with the old config still counts, on a cell made again.
        counts.record("checkout", "order->inventory", &call(Outcome::Ok));
        assert_eq!(counts.footprint().0, segments);
        assert_eq!(counts.take(20_000, 30_000, &b).len(), 1);
        assert_eq!(counts.footprint().0, segments - 1);
    }
}
