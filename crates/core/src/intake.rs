//! Intake: what a new run means for its chain, and the draft it opens (SPEC §2–3).
//!
//! A chain's first run always opens a draft; so does a run uploaded while the chain has no
//! approved baseline; otherwise the run is compared with the approved baseline (R-drift) and
//! opens a draft only when it drifted. An explicit recompute always opens one. The caller loads
//! the approved baseline and whether the chain has runs, passes the time and the actor, and
//! stores what comes back; nothing here reads a clock or a database.

use serde::Serialize;

use crate::baseline::{compute, BaselineDocument, BaselineReason, BaselineState, ComputeError};
use crate::distribution::Tails;
use crate::drift::{self, DriftEntry};
use crate::run::RunData;
use crate::topology::Topology;

/// What the chain holds when a run arrives.
#[derive(Debug, Clone, Copy)]
pub struct ChainBefore<'a> {
    /// The chain's approved baseline, if it has one.
    pub approved: Option<&'a BaselineDocument>,
    /// Whether the chain has no run yet.
    pub first_run: bool,
}

/// The draft decision for one run: what it was compared with, and why a draft opens (if one
/// does).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assessment {
    /// Every compared percentile, drifted or not (empty without an approved baseline).
    pub comparison: Vec<DriftEntry>,
    /// The approved baseline the run was compared with.
    pub compared_to: Option<String>,
    /// Why a draft opens; `None`: the run is stored without one.
    pub reason: Option<BaselineReason>,
}

/// Decides whether `run` opens a draft: first run → `first_run`; no approved baseline →
/// `no_approved_baseline`; a percentile moved more than 20 % from the approved baseline →
/// `drift`; else no draft.
pub fn assess(topology: &Topology, run: &RunData, chain: ChainBefore<'_>) -> Assessment {
    let comparison = chain
        .approved
        .map(|b| drift::compare(topology, &b.segments, run))
        .unwrap_or_default();
    let reason = match chain.approved {
        None if chain.first_run => Some(BaselineReason::FirstRun),
        None => Some(BaselineReason::NoApprovedBaseline),
        Some(_) if drift::drifted(&comparison) => Some(BaselineReason::Drift),
        Some(_) => None,
    };
    Assessment {
        comparison,
        compared_to: chain.approved.map(|b| b.id.clone()),
        reason,
    }
}

impl Assessment {
    /// The compared percentiles that drifted.
    pub fn drift(&self) -> Vec<DriftEntry> {
        self.comparison
            .iter()
            .filter(|e| e.drift)
            .cloned()
            .collect()
    }

    /// The draft this run opens, if any. A drift draft records the drift and the baseline it
    /// drifted from; other drafts record none.
    pub fn draft(&self, of: &DraftOf<'_>) -> Result<Option<BaselineDocument>, Vec<ComputeError>> {
        let Some(reason) = self.reason else {
            return Ok(None);
        };
        let (drift, from) = if reason == BaselineReason::Drift {
            (self.drift(), self.compared_to.clone())
        } else {
            (Vec::new(), None)
        };
        draft(of, reason, drift, from).map(Some)
    }
}

/// What a draft is computed from, by whom and when.
#[derive(Clone, Copy)]
pub struct DraftOf<'a> {
    pub chain: &'a str,
    pub topology_version: i64,
    pub topology: &'a Topology,
    /// The run's id; empty for a run not stored yet (the store fills it in).
    pub run_id: &'a str,
    pub run: &'a RunData,
    /// The run's distributions ([`crate::distribution`]): what kill rates come from.
    pub tails: &'a (dyn Tails + Sync),
    /// The actor (token name) creating the draft.
    pub created_by: &'a str,
    /// RFC 3339 UTC, as stored.
    pub created_at: &'a str,
}

/// A draft baseline computed on demand (reason `recompute`), without drift.
pub fn recompute(of: &DraftOf<'_>) -> Result<BaselineDocument, Vec<ComputeError>> {
    draft(of, BaselineReason::Recompute, Vec::new(), None)
}

/// The draft document: the run's budgets and findings on one topology version (R-margin,
/// R-retry, R-budget and every check). Its id is left empty for the store to assign.
pub fn draft(
    of: &DraftOf<'_>,
    reason: BaselineReason,
    drift: Vec<DriftEntry>,
    drift_baseline_id: Option<String>,
) -> Result<BaselineDocument, Vec<ComputeError>> {
    let computation = compute(of.topology, of.run, of.tails)?;
    Ok(BaselineDocument {
        id: String::new(),
        chain: of.chain.to_owned(),
        state: BaselineState::Draft,
        reason,
        run_id: of.run_id.to_owned(),
        topology_version: of.topology_version,
        created_at: of.created_at.to_owned(),
        created_by: of.created_by.to_owned(),
        entry_budget_ms: of.topology.entry_budget_ms,
        breaker_window_ms: of.topology.breaker_window_ms,
        max_recovery: of.topology.max_recovery,
        segments: computation.segments,
        findings: computation.findings,
        drift,
        drift_baseline_id,
        decision: None,
        superseded_by: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::{
        parse_run, parse_topology, CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY,
    };
    use crate::run::RunUpload;

    const AT: &str = "2026-11-30T09:15:02.123Z";

    fn topology() -> Topology {
        parse_topology(CHECKOUT_TOPOLOGY).unwrap()
    }

    fn run(t: &Topology, src: &str) -> RunData {
        parse_run(t, src).unwrap()
    }

    /// Run A with one percentile of one segment replaced.
    fn run_a_with(t: &Topology, segment: &str, p999_ms: f64) -> RunData {
        let mut upload: RunUpload = serde_json::from_str(CHECKOUT_RUN_A).unwrap();
        for s in upload.segments.iter_mut().filter(|s| s.id == segment) {
            s.p999_ms = p999_ms;
        }
        upload.into_run(t).unwrap()
    }

    fn of<'a>(t: &'a Topology, run: &'a RunData) -> DraftOf<'a> {
        DraftOf {
            chain: "checkout",
            topology_version: 1,
            topology: t,
            run_id: "",
            run,
            tails: &crate::distribution::NoDistributions,
            created_by: "uma",
            created_at: AT,
        }
    }

    /// Example A, approved as `bl-20261130-001`.
    fn approved_a(t: &Topology) -> BaselineDocument {
        let a = run(t, CHECKOUT_RUN_A);
        let mut doc = draft(&of(t, &a), BaselineReason::FirstRun, Vec::new(), None).unwrap();
        doc.id = "bl-20261130-001".into();
        doc.state = BaselineState::Approved;
        doc
    }

    /// The chain before the run: whether it has an approved baseline (example A) and runs.
    #[derive(Debug, Clone, Copy)]
    struct Before {
        approved: bool,
        first_run: bool,
    }

    /// `(reason, drifted "segment metric" entries, compared_to)`.
    type Expect<'a> = (Option<BaselineReason>, &'a [&'a str], Option<&'a str>);

    fn check(before: Before, run: RunData, expect: Expect<'_>) {
        let t = topology();
        let approved = approved_a(&t);
        let chain = ChainBefore {
            approved: before.approved.then_some(&approved),
            first_run: before.first_run,
        };
        let a = assess(&t, &run, chain);
        let drifted: Vec<String> = a
            .drift()
            .iter()
            .map(|e| format!("{} {:?}", e.segment, e.metric))
            .collect();
        assert_eq!(
            (a.reason, drifted.as_slice(), a.compared_to.as_deref()),
            (
                expect.0,
                expect
                    .1
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .as_slice(),
                expect.2
            ),
            "{before:?}"
        );
        // The draft follows the decision: one exactly when there is a reason; drift recorded
        // only on a drift draft.
        let doc = a.draft(&of(&t, &run)).unwrap();
        assert_eq!(doc.as_ref().map(|d| d.reason), a.reason);
        if let Some(doc) = doc {
            assert_eq!(doc.state, BaselineState::Draft);
            assert_eq!(
                (doc.created_at.as_str(), doc.created_by.as_str()),
                (AT, "uma")
            );
            let is_drift = doc.reason == BaselineReason::Drift;
            assert_eq!(doc.drift.len(), if is_drift { drifted.len() } else { 0 });
            assert_eq!(doc.drift_baseline_id.is_some(), is_drift);
        }
    }

    #[test]
    fn the_draft_decision() {
        let t = topology();
        let (first, later) = (
            Before {
                approved: false,
                first_run: true,
            },
            Before {
                approved: false,
                first_run: false,
            },
        );
        let approved = Before {
            approved: true,
            first_run: false,
        };
        check(
            first,
            run(&t, CHECKOUT_RUN_A),
            (Some(BaselineReason::FirstRun), &[], None),
        );
        check(
            later,
            run(&t, CHECKOUT_RUN_A),
            (Some(BaselineReason::NoApprovedBaseline), &[], None),
        );
        // no approved baseline: a run that would drift is still no drift (nothing to compare)
        check(
            later,
            run(&t, CHECKOUT_RUN_C),
            (Some(BaselineReason::NoApprovedBaseline), &[], None),
        );
        // SPEC example C: payment p999 300 → 390 (+30 %) drifts
        check(
            approved,
            run(&t, CHECKOUT_RUN_C),
            (
                Some(BaselineReason::Drift),
                &["order->payment P999"],
                Some("bl-20261130-001"),
            ),
        );
        // +10 % is no drift: stored without a draft
        check(
            approved,
            run_a_with(&t, "order->payment", 330.0),
            (None, &[], Some("bl-20261130-001")),
        );
        // exactly +20 % is not "more than 20 %"; 20.1 % is
        check(
            approved,
            run_a_with(&t, "order->payment", 360.0),
            (None, &[], Some("bl-20261130-001")),
        );
        check(
            approved,
            run_a_with(&t, "order->payment", 360.3),
            (
                Some(BaselineReason::Drift),
                &["order->payment P999"],
                Some("bl-20261130-001"),
            ),
        );
        // either way: −30 % drifts too
        check(
            approved,
            run_a_with(&t, "order->payment", 210.0),
            (
                Some(BaselineReason::Drift),
                &["order->payment P999"],
                Some("bl-20261130-001"),
            ),
        );
        // the root's measurement never changes a timeout, but is compared like the others
        check(
            approved,
            run_a_with(&t, "gateway->order", 900.0),
            (
                Some(BaselineReason::Drift),
                &["gateway->order P999"],
                Some("bl-20261130-001"),
            ),
        );
        // a run identical to the approved one: compared, no draft
        check(
            approved,
            run(&t, CHECKOUT_RUN_A),
            (None, &[], Some("bl-20261130-001")),
        );
    }

    #[test]
    fn example_c_draft_numbers() {
        let t = topology();
        let approved = approved_a(&t);
        let c = run(&t, CHECKOUT_RUN_C);
        let chain = ChainBefore {
            approved: Some(&approved),
            first_run: false,
        };
        let doc = assess(&t, &c, chain).draft(&of(&t, &c)).unwrap().unwrap();
        let payment = doc.segment("order->payment").unwrap();
        assert_eq!((payment.timeout_ms, payment.budget_ms), (507, 507));
        assert_eq!(doc.drift_baseline_id.as_deref(), Some("bl-20261130-001"));
        assert_eq!(doc.drift[0].change_pct, Some(30.0));
        assert!(doc.findings.is_empty(), "{:#?}", doc.findings);
    }

    #[test]
    fn a_recompute_is_a_draft_without_drift() {
        let t = topology();
        let a = run(&t, CHECKOUT_RUN_A);
        let doc = recompute(&DraftOf {
            run_id: "run-1",
            ..of(&t, &a)
        })
        .unwrap();
        assert_eq!(
            (doc.reason, doc.run_id.as_str()),
            (BaselineReason::Recompute, "run-1")
        );
        assert!(doc.drift.is_empty() && doc.drift_baseline_id.is_none());
        assert_eq!(doc.entry_budget_ms, 800);
    }

    #[test]
    fn a_run_missing_a_segment_has_no_draft_but_every_error() {
        let t = topology();
        let mut a = run(&t, CHECKOUT_RUN_A);
        a.segments.remove("order->user");
        a.segments.remove("order->inventory");
        let errors = recompute(&of(&t, &a)).unwrap_err();
        let segments: Vec<&str> = errors.iter().map(|e| e.segment.as_str()).collect();
        assert_eq!(segments, ["order->inventory", "order->user"]);
    }
}
