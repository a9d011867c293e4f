//! Segment-by-segment comparison of two baselines, for reviewers.

use serde::{Deserialize, Serialize};

use crate::baseline::{BaselineDocument, BaselineSegment};
use crate::checks::Finding;
use crate::drift::DRIFT_THRESHOLD_PCT;
use crate::ms_to_us;

/// A value in the old and the new baseline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Change<T> {
    pub from: Option<T>,
    pub to: Option<T>,
    /// Percent change, one decimal; `None` when either side is missing or `from` is zero.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_pct: Option<f64>,
    /// Whether the value moved more than the R-drift threshold (20 %) either way; false when
    /// there is no `change_pct`.
    pub drift: bool,
}

/// `|to − from| > 20 % of from`, in integers (as R-drift compares); never for `from` = 0.
fn beyond_threshold(from: u64, to: u64) -> bool {
    from != 0 && to.abs_diff(from) * 100 > DRIFT_THRESHOLD_PCT * from
}

fn pct(from: f64, to: f64) -> Option<f64> {
    (from != 0.0).then(|| ((to - from) * 1000.0 / from).round() / 10.0)
}

/// A change of milliseconds as measured (fractional): compared in whole microseconds.
fn change<T: Copy + Into<f64>>(from: Option<T>, to: Option<T>) -> Change<T> {
    let (change_pct, drift) = match (from, to) {
        (Some(f), Some(t)) => {
            let (f, t) = (f.into(), t.into());
            (pct(f, t), beyond_threshold(ms_to_us(f), ms_to_us(t)))
        }
        _ => (None, false),
    };
    Change {
        from,
        to,
        change_pct,
        drift,
    }
}

fn change_u64(from: Option<u64>, to: Option<u64>) -> Change<u64> {
    let (change_pct, drift) = match (from, to) {
        (Some(f), Some(t)) => (pct(f as f64, t as f64), beyond_threshold(f, t)),
        _ => (None, false),
    };
    Change {
        from,
        to,
        change_pct,
        drift,
    }
}

/// One segment of a diff.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SegmentDiff {
    pub id: String,
    /// `added`, `removed`, `changed` or `same`.
    pub status: String,
    pub p99_ms: Change<f64>,
    pub p999_ms: Change<f64>,
    pub timeout_ms: Change<u64>,
    pub budget_ms: Change<u64>,
}

/// What changes from one baseline to another (OpenAPI `BaselineDiff`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BaselineDiff {
    pub from: String,
    pub to: String,
    /// The threshold of every change's `drift` flag, in percent.
    pub drift_threshold_pct: u64,
    pub segments: Vec<SegmentDiff>,
    /// Findings of `to` that `from` did not have.
    pub findings_added: Vec<Finding>,
    /// Findings of `from` that `to` no longer has.
    pub findings_resolved: Vec<Finding>,
}

fn same_finding(a: &Finding, b: &Finding) -> bool {
    a.segment == b.segment && a.kind.check_name() == b.kind.check_name() && a.severity == b.severity
}

/// What changes from `from` to `to`: segments in `to`'s order, then segments only `from` had.
pub fn diff(from: &BaselineDocument, to: &BaselineDocument) -> BaselineDiff {
    let seg_diff = |id: &str, a: Option<&BaselineSegment>, b: Option<&BaselineSegment>| {
        let timeout_ms = change_u64(a.map(|s| s.timeout_ms), b.map(|s| s.timeout_ms));
        let budget_ms = change_u64(a.map(|s| s.budget_ms), b.map(|s| s.budget_ms));
        let status = match (a, b) {
            (None, _) => "added",
            (_, None) => "removed",
            _ if timeout_ms.from == timeout_ms.to && budget_ms.from == budget_ms.to => "same",
            _ => "changed",
        };
        SegmentDiff {
            id: id.to_owned(),
            status: status.to_owned(),
            p99_ms: change(a.and_then(|s| s.p99_ms), b.and_then(|s| s.p99_ms)),
            p999_ms: change(a.and_then(|s| s.p999_ms), b.and_then(|s| s.p999_ms)),
            timeout_ms,
            budget_ms,
        }
    };
    let mut segments: Vec<SegmentDiff> = to
        .segments
        .iter()
        .map(|b| seg_diff(&b.id, from.segment(&b.id), Some(b)))
        .collect();
    segments.extend(
        from.segments
            .iter()
            .filter(|a| to.segment(&a.id).is_none())
            .map(|a| seg_diff(&a.id, Some(a), None)),
    );
    BaselineDiff {
        from: from.id.clone(),
        to: to.id.clone(),
        drift_threshold_pct: DRIFT_THRESHOLD_PCT,
        segments,
        findings_added: to
            .findings
            .iter()
            .filter(|f| !from.findings.iter().any(|g| same_finding(f, g)))
            .cloned()
            .collect(),
        findings_resolved: from
            .findings
            .iter()
            .filter(|f| !to.findings.iter().any(|g| same_finding(f, g)))
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::example::{
        checkout_draft, CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY, CHECKOUT_TOPOLOGY_B,
    };

    /// A baseline document `id` computed from a topology and a run (both JSON).
    fn doc(id: &str, topology: Value, run: Value) -> BaselineDocument {
        let mut doc = checkout_draft(&topology.to_string(), &run.to_string()).unwrap();
        doc.id = id.into();
        doc
    }

    fn parse(src: &str) -> Value {
        serde_json::from_str(src).unwrap()
    }

    fn a() -> BaselineDocument {
        doc("A", parse(CHECKOUT_TOPOLOGY), parse(CHECKOUT_RUN_A))
    }

    type Numbers = (Option<u64>, Option<u64>, Option<f64>);

    /// `(from, to)`; `expect`: per segment in diff order, id, status, and the timeout and budget
    /// changes as `(from, to, change_pct)`.
    fn check(
        input: (&BaselineDocument, &BaselineDocument),
        expect: &[(&str, &str, Numbers, Numbers)],
    ) {
        let d = diff(input.0, input.1);
        assert_eq!(
            (d.from.as_str(), d.to.as_str()),
            (input.0.id.as_str(), input.1.id.as_str())
        );
        let got: Vec<_> = d
            .segments
            .iter()
            .map(|s| {
                let n = |c: &Change<u64>| (c.from, c.to, c.change_pct);
                (
                    s.id.as_str(),
                    s.status.as_str(),
                    n(&s.timeout_ms),
                    n(&s.budget_ms),
                )
            })
            .collect();
        assert_eq!(got, expect);
    }

    fn same(v: u64) -> Numbers {
        (Some(v), Some(v), Some(0.0))
    }

    #[test]
    fn identical_baselines_are_all_same() {
        let a = a();
        check(
            (&a, &a),
            &[
                ("gateway->order", "same", same(800), same(800)),
                ("order->inventory", "same", same(44), same(208)),
                ("order->payment", "same", same(390), same(390)),
                ("order->user", "same", same(9), same(9)),
            ],
        );
        let d = diff(&a, &a);
        assert!(d.findings_added.is_empty() && d.findings_resolved.is_empty());
    }

    #[test]
    fn drift_changes_payment_by_30_percent() {
        let (a, c) = (
            a(),
            doc("C", parse(CHECKOUT_TOPOLOGY), parse(CHECKOUT_RUN_C)),
        );
        let payment = (Some(390), Some(507), Some(30.0));
        check(
            (&a, &c),
            &[
                ("gateway->order", "same", same(800), same(800)),
                ("order->inventory", "same", same(44), same(208)),
                ("order->payment", "changed", payment, payment),
                ("order->user", "same", same(9), same(9)),
            ],
        );
        let d = diff(&a, &c);
        assert_eq!(
            d.segments[2].p999_ms,
            Change {
                from: Some(300.0),
                to: Some(390.0),
                change_pct: Some(30.0),
                drift: true,
            }
        );
        assert_eq!(
            d.segments[2].p99_ms,
            Change {
                from: Some(210.0),
                to: Some(210.0),
                change_pct: Some(0.0),
                drift: false,
            }
        );
        // Back down: −117 / 507 = −23.08 % → −23.1, one decimal.
        let back = (Some(507), Some(390), Some(-23.1));
        check(
            (&c, &a),
            &[
                ("gateway->order", "same", same(800), same(800)),
                ("order->inventory", "same", same(44), same(208)),
                ("order->payment", "changed", back, back),
                ("order->user", "same", same(9), same(9)),
            ],
        );
        assert_eq!(diff(&c, &a).segments[2].p999_ms.change_pct, Some(-23.1));
    }

    #[test]
    fn pinning_changes_budgets_and_adds_the_inversion() {
        let (a, b) = (
            a(),
            doc("B", parse(CHECKOUT_TOPOLOGY_B), parse(CHECKOUT_RUN_A)),
        );
        check(
            (&a, &b),
            &[
                ("gateway->order", "same", same(800), same(800)),
                // 44 → 500: +1036.4 %; the budget 208 (retry on deadline) → 500: +140.4 %.
                (
                    "order->inventory",
                    "changed",
                    (Some(44), Some(500), Some(1036.4)),
                    (Some(208), Some(500), Some(140.4)),
                ),
                (
                    "order->payment",
                    "changed",
                    (Some(390), Some(400), Some(2.6)),
                    (Some(390), Some(400), Some(2.6)),
                ),
                ("order->user", "same", same(9), same(9)),
            ],
        );
        let d = diff(&a, &b);
        let added: Vec<_> = d
            .findings_added
            .iter()
            .map(|f| (f.segment.as_str(), f.kind.check_name()))
            .collect();
        assert_eq!(added, [("gateway->order", "inversion")]);
        assert!(d.findings_resolved.is_empty());
        let back = diff(&b, &a);
        assert!(back.findings_added.is_empty());
        let resolved: Vec<_> = back
            .findings_resolved
            .iter()
            .map(|f| (f.segment.as_str(), f.kind.check_name()))
            .collect();
        assert_eq!(resolved, [("gateway->order", "inversion")]);
    }

    #[test]
    fn added_and_removed_segments() {
        let a = a();
        // Drop order->user, add order->audit (pinned 50).
        let mut topology = parse(CHECKOUT_TOPOLOGY);
        let segments = topology["segments"].as_array_mut().unwrap();
        segments.retain(|s| s["id"] != "order->user");
        segments.push(json!({"id": "order->audit", "caller": "order", "callee": "audit",
                             "parent": "gateway->order", "class": "stable", "pinned_timeout_ms": 50}));
        let mut run = parse(CHECKOUT_RUN_A);
        let rows = run["segments"].as_array_mut().unwrap();
        rows.retain(|s| s["id"] != "order->user");
        rows.push(json!({"id": "order->audit", "samples": 10, "p99_ms": 12.5, "p999_ms": 30}));
        let b = doc("B", topology, run);
        // `to`'s segments in order, then those only `from` had.
        check(
            (&a, &b),
            &[
                ("gateway->order", "same", same(800), same(800)),
                ("order->inventory", "same", same(44), same(208)),
                ("order->payment", "same", same(390), same(390)),
                (
                    "order->audit",
                    "added",
                    (None, Some(50), None),
                    (None, Some(50), None),
                ),
                (
                    "order->user",
                    "removed",
                    (Some(9), None, None),
                    (Some(9), None, None),
                ),
            ],
        );
        let d = diff(&a, &b);
        assert_eq!(
            d.segments[3].p99_ms,
            Change {
                from: None,
                to: Some(12.5),
                change_pct: None,
                drift: false,
            }
        );
        assert_eq!(
            d.segments[4].p999_ms,
            Change {
                from: Some(20.0),
                to: None,
                change_pct: None,
                drift: false,
            }
        );
        check(
            (&b, &a),
            &[
                ("gateway->order", "same", same(800), same(800)),
                ("order->inventory", "same", same(44), same(208)),
                ("order->payment", "same", same(390), same(390)),
                (
                    "order->user",
                    "added",
                    (None, Some(9), None),
                    (None, Some(9), None),
                ),
                (
                    "order->audit",
                    "removed",
                    (Some(50), None, None),
                    (Some(50), None, None),
                ),
            ],
        );
    }

    #[test]
    fn status_follows_timeout_and_budget_only() {
        // Payment is volatile: its p99 moving does not move its timeout, so it stays "same".
        let a = a();
        let mut run = parse(CHECKOUT_RUN_A);
        run["segments"][2]["p99_ms"] = json!(250);
        let b = doc("B", parse(CHECKOUT_TOPOLOGY), run);
        let d = diff(&a, &b);
        assert_eq!(d.segments[2].status, "same");
        assert_eq!(d.segments[2].p99_ms.change_pct, Some(19.0));
    }

    #[test]
    fn a_budget_change_alone_is_a_change() {
        // Inventory stops retrying on deadline: timeout 44 stays, budget 208 → 44.
        let a = a();
        let mut topology = parse(CHECKOUT_TOPOLOGY);
        topology["segments"][1]["retry"] = json!({"on_deadline": false});
        let b = doc("B", topology, parse(CHECKOUT_RUN_A));
        check(
            (&a, &b),
            &[
                ("gateway->order", "same", same(800), same(800)),
                (
                    "order->inventory",
                    "changed",
                    same(44),
                    (Some(208), Some(44), Some(-78.8)),
                ),
                ("order->payment", "same", same(390), same(390)),
                ("order->user", "same", same(9), same(9)),
            ],
        );
    }

    #[test]
    fn change_pct_from_zero_is_none() {
        let c = change(Some(0.0), Some(5.0));
        assert_eq!(c.change_pct, None);
        assert_eq!(change(Some(5.0), Some(0.0)).change_pct, Some(-100.0));
        assert_eq!(change::<f64>(None, Some(5.0)).change_pct, None);
        assert_eq!(change_u64(Some(3), Some(4)).change_pct, Some(33.3));
        assert_eq!(change_u64(Some(3), Some(2)).change_pct, Some(-33.3));
        assert_eq!(change_u64(Some(0), Some(2)).change_pct, None);
        // Serialized without the percentage when there is none.
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"from": 0.0, "to": 5.0, "drift": false})
        );
    }

    #[test]
    fn drift_is_more_than_20_percent_either_way() {
        let check = |(from, to): (u64, u64), expect: bool| {
            assert_eq!(
                change_u64(Some(from), Some(to)).drift,
                expect,
                "{from} → {to}"
            );
            let ms = |v: u64| Some(v as f64 / 10.0);
            assert_eq!(
                change(ms(from), ms(to)).drift,
                expect,
                "{from} → {to} (÷ 10 ms)"
            );
        };
        check((300, 390), true);
        check((300, 360), false);
        check((300, 361), true);
        check((300, 240), false);
        check((300, 239), true);
        check((300, 300), false);
        check((0, 5), false);
        check((5, 0), true);
        assert!(!change_u64(None, Some(5)).drift);
    }
}
