//! SPEC §4's `checkout` chain, shipped for the demo, the quickstart and tests.

/// Topology of example A: entry 800, window 5000, max_recovery 18h.
pub const CHECKOUT_TOPOLOGY: &str =
    include_str!("../../../schemas/examples/checkout-topology.json");
/// Example B: inventory pinned 500 without deadline retry, payment pinned 400.
pub const CHECKOUT_TOPOLOGY_B: &str =
    include_str!("../../../schemas/examples/checkout-topology-b-inverted.json");
/// Run A.
pub const CHECKOUT_RUN_A: &str = include_str!("../../../schemas/examples/checkout-run-a.json");
/// Example C: run A with payment p999 390 (+30 %).
pub const CHECKOUT_RUN_C: &str =
    include_str!("../../../schemas/examples/checkout-run-c-drift.json");

/// Run A computed on `topology` (a topology JSON document such as [`CHECKOUT_TOPOLOGY`] or
/// [`CHECKOUT_TOPOLOGY_B`]) and published as baseline `bl-20261130-001` at `revision`: the live
/// config an agent would receive. For tests and examples.
pub fn checkout_live(topology: &str, revision: i64) -> Result<crate::live::LiveChain, String> {
    use crate::baseline::{BaselineDocument, BaselineReason, BaselineState};
    let t: crate::Topology = serde_json::from_str(topology).map_err(|e| e.to_string())?;
    t.validate().map_err(|e| format!("{e:?}"))?;
    let run = serde_json::from_str::<crate::run::RunUpload>(CHECKOUT_RUN_A)
        .map_err(|e| e.to_string())?
        .into_run(&t)
        .map_err(|e| format!("{e:?}"))?;
    let c = crate::compute(&t, &run).map_err(|e| format!("{e:?}"))?;
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
    Ok(crate::live::LiveChain::from_baseline(
        &doc,
        revision,
        "2026-11-30T00:00:01.000Z",
    ))
}

#[cfg(test)]
mod tests {
    //! SPEC §4 number for number.
    use super::*;
    use crate::checks::{FindingKind, Severity};
    use crate::drift;
    use crate::run::{RunData, RunUpload};
    use crate::topology::Topology;

    fn topology(src: &str) -> Topology {
        let t: Topology = serde_json::from_str(src).unwrap();
        t.validate().unwrap();
        t
    }

    fn run(t: &Topology, src: &str) -> RunData {
        serde_json::from_str::<RunUpload>(src)
            .unwrap()
            .into_run(t)
            .unwrap()
    }

    fn numbers(c: &crate::Computation) -> Vec<(&str, u64, u64)> {
        c.segments
            .iter()
            .map(|s| (s.id.as_str(), s.timeout_ms, s.budget_ms))
            .collect()
    }

    #[test]
    fn example_a() {
        let t = topology(CHECKOUT_TOPOLOGY);
        let c = crate::compute(&t, &run(&t, CHECKOUT_RUN_A)).unwrap();
        assert_eq!(
            numbers(&c),
            [
                ("gateway->order", 800, 800),
                ("order->inventory", 44, 208),
                ("order->payment", 390, 390),
                ("order->user", 9, 9)
            ]
        );
        assert!(c.findings.is_empty(), "{:#?}", c.findings);
        let stages = crate::checks::stages_of(&t, &c.segments, "gateway->order");
        assert_eq!(stages.iter().map(|s| s.max_budget_ms).sum::<u64>(), 607);
        assert_eq!(c.segments[1].retry.worst_case_backoff_ms(), Some(480));
    }

    #[test]
    fn example_b_inversion() {
        let t = topology(CHECKOUT_TOPOLOGY_B);
        let c = crate::compute(&t, &run(&t, CHECKOUT_RUN_A)).unwrap();
        assert_eq!(
            numbers(&c)[1..],
            [
                ("order->inventory", 500, 500),
                ("order->payment", 400, 400),
                ("order->user", 9, 9)
            ]
        );
        assert!(c.has_errors());
        let f = &c.findings[0];
        assert_eq!(
            (f.segment.as_str(), f.severity),
            ("gateway->order", Severity::Error)
        );
        match &f.kind {
            FindingKind::Inversion {
                need_ms,
                available_ms,
                excess_ms,
                ..
            } => {
                assert_eq!((*need_ms, *available_ms, *excess_ms), (909, 800, 109));
            }
            other => panic!("expected inversion, got {other:?}"),
        }
        assert!(
            f.message.contains("909") && f.message.contains("109"),
            "{}",
            f.message
        );
    }

    #[test]
    fn example_c_drift() {
        let t = topology(CHECKOUT_TOPOLOGY);
        let a = crate::compute(&t, &run(&t, CHECKOUT_RUN_A)).unwrap();

        let c_run = run(&t, CHECKOUT_RUN_C);
        let entries = drift::compare(&t, &a.segments, &c_run);
        let drifted: Vec<_> = entries.iter().filter(|e| e.drift).collect();
        assert_eq!(drifted.len(), 1);
        assert_eq!(drifted[0].segment, "order->payment");
        assert_eq!(drifted[0].change_pct, Some(30.0));
        let c = crate::compute(&t, &c_run).unwrap();
        assert_eq!(c.segments[2].timeout_ms, 507);
        let stages = crate::checks::stages_of(&t, &c.segments, "gateway->order");
        assert_eq!(stages.iter().map(|s| s.max_budget_ms).sum::<u64>(), 724);

        // +10 %: no drift.
        let mut small = c_run.clone();
        small.segments.get_mut("order->payment").unwrap().p999_us = 330_000;
        assert!(!drift::drifted(&drift::compare(&t, &a.segments, &small)));
        // exactly +20 % is not "more than 20 %"; -21 % is.
        small.segments.get_mut("order->payment").unwrap().p999_us = 360_000;
        assert!(!drift::drifted(&drift::compare(&t, &a.segments, &small)));
        small.segments.get_mut("order->payment").unwrap().p999_us = 237_000;
        assert!(drift::drifted(&drift::compare(&t, &a.segments, &small)));
    }
}
