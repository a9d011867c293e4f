//! SPEC §4's `checkout` chain, shipped for the demo, the quickstart and tests.

use crate::baseline::{BaselineDocument, BaselineReason, BaselineState};
use crate::intake::{self, DraftOf};
use crate::live::LiveChain;
use crate::run::{RunData, RunUpload};
use crate::topology::Topology;

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

/// A topology JSON document (such as [`CHECKOUT_TOPOLOGY`]), parsed and validated.
pub fn parse_topology(src: &str) -> Result<Topology, String> {
    let t: Topology = serde_json::from_str(src).map_err(|e| e.to_string())?;
    t.validate().map_err(|e| format!("{e:?}"))?;
    Ok(t)
}

/// A run JSON document (such as [`CHECKOUT_RUN_A`]) on topology `t`.
pub fn parse_run(t: &Topology, src: &str) -> Result<RunData, String> {
    serde_json::from_str::<RunUpload>(src)
        .map_err(|e| e.to_string())?
        .into_run(t)
        .map_err(|e| format!("{e:?}"))
}

/// `run` (a run JSON document) computed on `topology` (a topology JSON document) as the
/// first-run draft of chain `checkout`: topology version 1, run `run-20261130-001`, created by
/// `uma` on 2026-11-30; its id is left empty.
pub fn checkout_draft(topology: &str, run: &str) -> Result<BaselineDocument, String> {
    let t = parse_topology(topology)?;
    let run = parse_run(&t, run)?;
    let of = DraftOf {
        chain: "checkout",
        topology_version: 1,
        topology: &t,
        run_id: "run-20261130-001",
        run: &run,
        // The example runs hold no distribution.
        tails: &crate::distribution::NoDistributions,
        created_by: "uma",
        created_at: "2026-11-30T00:00:00.000Z",
    };
    intake::draft(&of, BaselineReason::FirstRun, Vec::new(), None).map_err(|e| format!("{e:?}"))
}

/// Run A computed on `topology` (a topology JSON document such as [`CHECKOUT_TOPOLOGY`] or
/// [`CHECKOUT_TOPOLOGY_B`]) and published as baseline `bl-20261130-001` at `revision`: the live
/// config an agent would receive. For tests and examples.
pub fn checkout_live(topology: &str, revision: i64) -> Result<LiveChain, String> {
    let mut doc = checkout_draft(topology, CHECKOUT_RUN_A)?;
    doc.id = "bl-20261130-001".into();
    doc.state = BaselineState::Approved;
    Ok(LiveChain::from_baseline(
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

    fn topology(src: &str) -> Topology {
        parse_topology(src).unwrap()
    }

    fn run(t: &Topology, src: &str) -> RunData {
        parse_run(t, src).unwrap()
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
        let c = crate::compute(
            &t,
            &run(&t, CHECKOUT_RUN_A),
            &crate::distribution::NoDistributions,
        )
        .unwrap();
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
        let c = crate::compute(
            &t,
            &run(&t, CHECKOUT_RUN_A),
            &crate::distribution::NoDistributions,
        )
        .unwrap();
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
        let a = crate::compute(
            &t,
            &run(&t, CHECKOUT_RUN_A),
            &crate::distribution::NoDistributions,
        )
        .unwrap();

        let c_run = run(&t, CHECKOUT_RUN_C);
        let entries = drift::compare(&t, &a.segments, &c_run);
        let drifted: Vec<_> = entries.iter().filter(|e| e.drift).collect();
        assert_eq!(drifted.len(), 1);
        assert_eq!(drifted[0].segment, "order->payment");
        assert_eq!(drifted[0].change_pct, Some(30.0));
        let c = crate::compute(&t, &c_run, &crate::distribution::NoDistributions).unwrap();
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
