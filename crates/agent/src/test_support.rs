//! Fixtures: SPEC §4's `checkout` chain as live configs, computed by budget-core.

use budget_core::example::{checkout_live, CHECKOUT_TOPOLOGY, CHECKOUT_TOPOLOGY_B};
use budget_core::live::LiveChain;

fn live(topology: &str, revision: i64) -> LiveChain {
    checkout_live(topology, revision).expect("the SPEC example computes")
}

/// Example A at revision 7: inventory 44/208, payment 390/390 (no deadline retry), user 9/9.
pub(crate) fn example_a() -> LiveChain {
    live(CHECKOUT_TOPOLOGY, 7)
}

/// Example B (inverted: need 909 of 800, 109 over) at revision 8.
pub(crate) fn example_b() -> LiveChain {
    live(CHECKOUT_TOPOLOGY_B, 8)
}

/// Example A with a roomier inventory (timeout 300, budget 2 × 300 + 120 = 720) under a
/// 1200 ms entry, so both UNAVAILABLE retries (100 + 300 ms) fit in the budget.
pub(crate) fn roomy() -> LiveChain {
    let mut c = example_a();
    c.entry_budget_ms = 1200;
    let root = c.segments.iter_mut().find(|s| s.parent.is_none()).unwrap();
    root.timeout_ms = 1200;
    root.budget_ms = 1200;
    let inv = c
        .segments
        .iter_mut()
        .find(|s| s.id == "order->inventory")
        .unwrap();
    inv.timeout_ms = 300;
    inv.budget_ms = 720;
    c
}
