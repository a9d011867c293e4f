//! Fixtures: SPEC §4's `checkout` chain as live configs, computed by budget-core.

use budget_core::baseline::{BaselineDocument, BaselineReason, BaselineState};
use budget_core::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY, CHECKOUT_TOPOLOGY_B};
use budget_core::live::LiveChain;
use budget_core::run::RunUpload;
use budget_core::Topology;

fn live(topology: &str, revision: i64) -> LiveChain {
    let t: Topology = serde_json::from_str(topology).unwrap();
    let run = serde_json::from_str::<RunUpload>(CHECKOUT_RUN_A)
        .unwrap()
        .into_run(&t)
        .unwrap();
    let c = budget_core::compute(&t, &run).unwrap();
    let doc = BaselineDocument {
        id: "bl-20261130-001".into(),
        chain: "checkout".into(),
        state: BaselineState::Approved,
        reason: BaselineReason::FirstRun,
        run_id: "run-20261130-001".into(),
        topology_version: 1,
        created_at: "2026-11-30T00:00:00.000Z".into(),
        created_by: "uma".into(),
        entry_budget_ms: t.entry_budget_ms,
        breaker_window_ms: t.breaker_window_ms,
        max_recovery: t.max_recovery,
        segments: c.segments,
        findings: c.findings,
        drift: vec![],
        drift_baseline_id: None,
        decision: None,
    };
    LiveChain::from_baseline(&doc, revision, "2026-11-30T00:00:01.000Z")
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
