//! Property tests: invariants of the rules and checks over generated valid topologies and runs.
//!
//! A generated topology is a random tree of 1..=12 segments: the root (`gateway->svc0`) comes
//! first, every other segment `k` calls `svc{k}` from its parent's callee, and the non-root
//! segments appear in a random document order. Classes, stages, reserves, idempotency, retry
//! flags and pins are random but always valid. A generated run has whole-microsecond
//! percentiles with `p50 ≤ p99 ≤ p999`, data for every non-root segment and optionally the root.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::sample::Index;

use crate::baseline::{compute, Computation};
use crate::checks::{FindingKind, Severity};
use crate::drift::{self, Metric};
use crate::duration::HumanDuration;
use crate::run::{RunData, RunUpload, SegmentStats, SegmentUpload};
use crate::topology::{Idempotency, RetryFlags, Segment, SegmentClass, Topology};
use crate::us_to_ms;

const MAX_SEGMENTS: usize = 12;

#[derive(Debug, Clone)]
struct SegSpec {
    /// Picks the parent among the segments generated before this one.
    parent: Index,
    volatile: bool,
    stage: Option<u32>,
    reserve_ms: u64,
    /// Idempotency TTL in hours.
    ttl_h: Option<u64>,
    retry: Option<(Option<bool>, Option<bool>)>,
    pinned: Option<u64>,
}

fn seg_spec() -> impl Strategy<Value = SegSpec> {
    (
        any::<Index>(),
        any::<bool>(),
        prop::option::of(0u32..3),
        prop_oneof![3 => Just(0u64), 1 => 1u64..300],
        prop::option::of(1u64..=72),
        prop::option::of((
            prop::option::of(any::<bool>()),
            prop::option::of(any::<bool>()),
        )),
        prop::option::weighted(0.25, 1u64..700),
    )
        .prop_map(
            |(parent, volatile, stage, reserve_ms, ttl_h, retry, pinned)| SegSpec {
                parent,
                volatile,
                stage,
                reserve_ms,
                ttl_h,
                retry,
                pinned,
            },
        )
}

/// Builds a valid tree from specs; `order` is a permutation of `1..specs.len()`.
fn build(specs: &[SegSpec], order: &[usize], entry: u64, window: u64, recovery_h: u64) -> Topology {
    let mut tree: Vec<Segment> = Vec::with_capacity(specs.len());
    for (k, spec) in specs.iter().enumerate() {
        let root = k == 0;
        let (caller, parent) = if root {
            ("gateway".to_owned(), None)
        } else {
            let p = &tree[spec.parent.index(k)];
            (p.callee.clone(), Some(p.id.clone()))
        };
        let callee = format!("svc{k}");
        let idempotency = spec.ttl_h.map(|h| Idempotency {
            key: format!("key{k}"),
            ttl: HumanDuration::from_ms(h * 3_600_000),
        });
        let retry = match (&idempotency, spec.retry) {
            (Some(_), r) => r.map(|(d, u)| RetryFlags {
                on_deadline: d,
                on_unavailable: u,
            }),
            // Without an idempotency key only an explicit "never retry" is valid.
            (None, Some(_)) => Some(RetryFlags {
                on_deadline: Some(false),
                on_unavailable: Some(false),
            }),
            (None, None) => None,
        };
        tree.push(Segment {
            id: format!("{caller}->{callee}"),
            caller,
            callee,
            parent,
            class: if spec.volatile {
                SegmentClass::Volatile
            } else {
                SegmentClass::Stable
            },
            idempotency,
            retry,
            pinned_timeout_ms: if root { None } else { spec.pinned },
            reserve_ms: spec.reserve_ms,
            stage: if root { None } else { spec.stage },
            labels: Vec::new(),
        });
    }
    Topology {
        entry_budget_ms: entry,
        breaker_window_ms: window,
        max_recovery: HumanDuration::from_ms(recovery_h * 3_600_000),
        kill_rate: None,
        segments: std::iter::once(0)
            .chain(order.iter().copied())
            .map(|k| tree[k].clone())
            .collect(),
    }
}

fn topology() -> impl Strategy<Value = Topology> {
    (1usize..=MAX_SEGMENTS)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(seg_spec(), n),
                Just((1..n).collect::<Vec<usize>>()).prop_shuffle(),
                100u64..2_000,
                1u64..20_000,
                1u64..=48,
            )
        })
        .prop_map(|(specs, order, entry, window, recovery_h)| {
            build(&specs, &order, entry, window, recovery_h)
        })
}

#[derive(Debug, Clone)]
struct StatSpec {
    samples: u64,
    failures_pct: Option<u64>,
    p50_pct: Option<u64>,
    p99_us: u64,
    extra_us: u64,
}

fn stat_spec() -> impl Strategy<Value = StatSpec> {
    (
        1u64..1_000_000,
        prop::option::of(0u64..=100),
        prop::option::of(0u64..=100),
        prop_oneof![1 => Just(0u64), 4 => 0u64..10_000, 8 => 0u64..400_000],
        prop_oneof![1 => Just(0u64), 4 => 0u64..500_000],
    )
        .prop_map(
            |(samples, failures_pct, p50_pct, p99_us, extra_us)| StatSpec {
                samples,
                failures_pct,
                p50_pct,
                p99_us,
                extra_us,
            },
        )
}

/// A valid topology, a valid run upload for it, and the run that upload must convert to.
#[derive(Debug, Clone)]
struct Case {
    topology: Topology,
    upload: RunUpload,
    run: RunData,
}

fn case() -> impl Strategy<Value = Case> {
    (
        topology(),
        prop::collection::vec(stat_spec(), MAX_SEGMENTS),
        any::<bool>(),
    )
        .prop_map(|(topology, stats, root_measured)| {
            let mut upload = RunUpload {
                tool: None,
                note: None,
                segments: Vec::new(),
            };
            let mut run = RunData::default();
            for (seg, spec) in topology.segments.iter().zip(&stats) {
                if seg.is_root() && !root_measured {
                    continue;
                }
                let s = SegmentStats {
                    samples: spec.samples,
                    failures: spec.failures_pct.map(|p| spec.samples * p / 100),
                    p50_us: spec.p50_pct.map(|p| spec.p99_us * p / 100),
                    p99_us: spec.p99_us,
                    p999_us: spec.p99_us + spec.extra_us,
                };
                upload.segments.push(SegmentUpload {
                    id: seg.id.clone(),
                    samples: s.samples,
                    failures: s.failures,
                    p50_ms: s.p50_us.map(us_to_ms),
                    p99_ms: us_to_ms(s.p99_us),
                    p999_ms: us_to_ms(s.p999_us),
                    distribution: None,
                });
                run.segments.insert(seg.id.clone(), s);
            }
            Case {
                topology,
                upload,
                run,
            }
        })
}

fn computed(t: &Topology, run: &RunData) -> Result<Computation, TestCaseError> {
    compute(t, run, &crate::distribution::NoDistributions)
        .map_err(|e| TestCaseError::fail(format!("compute failed: {e:?}")))
}

/// The children's need of `parent`, computed independently of `checks::stages_of`: children
/// without a stage are sequential, children sharing a stage number count once, at their max.
fn need_of(t: &Topology, c: &Computation, parent: &str) -> Option<u64> {
    let budget = |id: &str| c.segments.iter().find(|s| s.id == id).unwrap().budget_ms;
    let mut any = false;
    let mut sequential = 0;
    let mut staged: BTreeMap<u32, u64> = BTreeMap::new();
    for child in t
        .segments
        .iter()
        .filter(|s| s.parent.as_deref() == Some(parent))
    {
        any = true;
        let b = budget(&child.id);
        match child.stage {
            None => sequential += b,
            Some(n) => {
                let m = staged.entry(n).or_insert(0);
                *m = (*m).max(b);
            }
        }
    }
    any.then(|| sequential + staged.values().sum::<u64>())
}

#[derive(Debug, Clone, Copy)]
enum Mutation {
    /// Point a non-root segment's parent at an id that is not in the chain.
    DanglingParent,
    /// Append a copy of an existing segment.
    DuplicateId,
    /// Make a non-root segment a second root.
    SecondRoot,
    /// Change a non-root segment's caller, so it no longer matches its id nor its parent.
    ForeignCaller,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::DanglingParent),
        Just(Mutation::DuplicateId),
        Just(Mutation::SecondRoot),
        Just(Mutation::ForeignCaller),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_cases_are_valid(case in case()) {
        prop_assert_eq!(case.topology.validate(), Ok(()));
        let run = case.upload.clone().into_run(&case.topology);
        prop_assert_eq!(run, Ok(case.run.clone()));
        prop_assert!(compute(&case.topology, &case.run, &crate::distribution::NoDistributions).is_ok());
    }

    #[test]
    fn inversion_findings_match_the_rule(case in case()) {
        let t = &case.topology;
        let c = computed(t, &case.run)?;
        let mut inverted = 0;
        for parent in &c.segments {
            let findings: Vec<_> = c
                .findings
                .iter()
                .filter(|f| f.segment == parent.id && matches!(f.kind, FindingKind::Inversion { .. }))
                .collect();
            let Some(need) = need_of(t, &c, &parent.id) else {
                prop_assert!(findings.is_empty(), "leaf {} has an inversion finding", parent.id);
                continue;
            };
            let available = parent.timeout_ms as i64 - parent.reserve_ms as i64;
            if (need as i64) <= available {
                prop_assert!(findings.is_empty(), "{} fits ({need} ≤ {available}) but: {findings:?}", parent.id);
            } else {
                inverted += 1;
                prop_assert!(c.has_errors());
                prop_assert_eq!(findings.len(), 1, "{} needs {} > {}", parent.id, need, available);
                let f = findings[0];
                prop_assert_eq!(f.severity, Severity::Error);
                let FindingKind::Inversion { need_ms, available_ms, excess_ms, stages } = &f.kind else {
                    unreachable!()
                };
                prop_assert_eq!(*need_ms, need);
                prop_assert_eq!(*available_ms, available);
                prop_assert_eq!(*excess_ms, need as i64 - available);
                prop_assert_eq!(*excess_ms, *need_ms as i64 - *available_ms);
                prop_assert!(*excess_ms > 0);
                prop_assert_eq!(stages.iter().map(|s| s.max_budget_ms).sum::<u64>(), need);
            }
        }
        let count = c.findings.iter().filter(|f| matches!(f.kind, FindingKind::Inversion { .. })).count();
        prop_assert_eq!(count, inverted);
        // No error finding at all ⇒ every parent's children fit.
        if !c.has_errors() {
            prop_assert_eq!(inverted, 0);
        }
    }

    #[test]
    fn raising_a_percentile_never_lowers_a_budget(
        case in case(),
        pick in any::<Index>(),
        raise_p999 in any::<bool>(),
        by in 1u64..500_000,
    ) {
        let t = &case.topology;
        let before = computed(t, &case.run)?;
        let mut run = case.run.clone();
        let ids: Vec<String> = run.segments.keys().cloned().collect();
        prop_assume!(!ids.is_empty());
        let id = pick.get(&ids);
        let s = run.segments.get_mut(id).unwrap();
        if raise_p999 {
            s.p999_us += by;
        } else {
            // Keep the run valid: p999 follows p99 up when it would fall below it.
            s.p99_us += by;
            s.p999_us = s.p999_us.max(s.p99_us);
        }
        let after = computed(t, &run)?;
        for (a, b) in before.segments.iter().zip(&after.segments) {
            prop_assert_eq!(&a.id, &b.id);
            prop_assert!(b.timeout_ms >= a.timeout_ms, "{}: timeout {} → {}", a.id, a.timeout_ms, b.timeout_ms);
            prop_assert!(b.budget_ms >= a.budget_ms, "{}: budget {} → {}", a.id, a.budget_ms, b.budget_ms);
        }
    }

    #[test]
    fn timeouts_follow_r_margin(case in case()) {
        let t = &case.topology;
        let c = computed(t, &case.run)?;
        for (seg, b) in t.segments.iter().zip(&c.segments) {
            let expect = if seg.is_root() {
                t.entry_budget_ms
            } else if let Some(pinned) = seg.pinned_timeout_ms {
                pinned
            } else {
                // ceil(p × 1.30) or ceil(p × 1.10) in whole ms, from microseconds, at least 1.
                let s = &case.run.segments[&seg.id];
                let (p, tenths) = match seg.class {
                    SegmentClass::Volatile => (s.p999_us, 13),
                    SegmentClass::Stable => (s.p99_us, 11),
                };
                (p * tenths).div_ceil(10_000).max(1)
            };
            prop_assert_eq!(b.timeout_ms, expect, "{}", b.id);
        }
    }

    #[test]
    fn budget_is_timeout_or_retry_budget(case in case()) {
        let t = &case.topology;
        let c = computed(t, &case.run)?;
        prop_assert_eq!(c.segments.len(), t.segments.len());
        for (seg, b) in t.segments.iter().zip(&c.segments) {
            prop_assert_eq!(&seg.id, &b.id);
            prop_assert!(b.budget_ms >= b.timeout_ms);
            prop_assert!(b.timeout_ms >= 1);
            prop_assert_eq!(
                b.budget_ms == 2 * b.timeout_ms + 120,
                seg.retries_on_deadline(),
                "{}: timeout {} budget {}", b.id, b.timeout_ms, b.budget_ms
            );
            if !seg.retries_on_deadline() {
                prop_assert_eq!(b.budget_ms, b.timeout_ms);
            }
        }
    }

    #[test]
    fn mutations_fail_validation_at_the_mutated_segment(
        t in topology(),
        m in mutation(),
        pick in any::<Index>(),
    ) {
        prop_assert_eq!(t.validate(), Ok(()));
        let n = t.segments.len();
        let mut bad = t.clone();
        // Mutations of a non-root segment need one; a lone root gets a duplicate instead.
        let m = if n == 1 { Mutation::DuplicateId } else { m };
        let (i, expect) = match m {
            Mutation::DuplicateId => {
                let copy = bad.segments[pick.index(n)].clone();
                bad.segments.push(copy);
                (n, "duplicate segment id")
            }
            Mutation::DanglingParent => {
                let i = 1 + pick.index(n - 1);
                bad.segments[i].parent = Some("nowhere->nothing".into());
                (i, "is not a segment of this chain")
            }
            Mutation::SecondRoot => {
                let i = 1 + pick.index(n - 1);
                bad.segments[i].parent = None;
                (i, "more than one root segment")
            }
            Mutation::ForeignCaller => {
                let i = 1 + pick.index(n - 1);
                bad.segments[i].caller = "stranger".into();
                (i, "does not match caller->callee")
            }
        };
        let errors = bad.validate().expect_err("a mutated topology must fail validation");
        let prefix = format!("/segments/{i}/");
        for e in &errors {
            prop_assert!(e.pointer.starts_with(&prefix), "{m:?}: {e} does not name {prefix}; all: {errors:?}");
        }
        prop_assert!(errors.iter().any(|e| e.message.contains(expect)), "{m:?}: {errors:?}");
    }

    #[test]
    fn a_run_does_not_drift_from_itself(case in case()) {
        let t = &case.topology;
        let c = computed(t, &case.run)?;
        let entries = drift::compare(t, &c.segments, &case.run);
        prop_assert!(!drift::drifted(&entries), "{entries:#?}");
        for e in &entries {
            prop_assert!(matches!(e.change_pct, None | Some(0.0)), "{e:?}");
        }
    }

    #[test]
    fn scaling_one_p999_beyond_20_percent_is_drift(
        case in case(),
        pick in any::<Index>(),
        permille in 1_201u64..3_000,
        up in any::<bool>(),
    ) {
        let t = &case.topology;
        let c = computed(t, &case.run)?;
        let ids: Vec<String> =
            case.run.segments.iter().filter(|(_, s)| s.p999_us > 0).map(|(id, _)| id.clone()).collect();
        prop_assume!(!ids.is_empty());
        let id = pick.get(&ids);
        let mut run = case.run.clone();
        let s = run.segments.get_mut(id).unwrap();
        let old = s.p999_us;
        if up {
            // × factor in whole microseconds, and at least the smallest value strictly over +20 %.
            s.p999_us = (old * permille / 1000).max(old + old / 5 + 1);
        } else {
            // Strictly under −20 %; p99 follows down so the run stays valid.
            s.p999_us = (old * 1000 / permille).min((old - old / 5).saturating_sub(1));
            s.p99_us = s.p99_us.min(s.p999_us);
        }
        let new = s.p999_us;
        prop_assert!(new.abs_diff(old) * 100 > 20 * old);
        let entries = drift::compare(t, &c.segments, &run);
        for e in &entries {
            if e.segment == *id && e.metric == Metric::P999 {
                prop_assert!(e.drift, "{old} → {new} µs must drift: {e:?}");
                let pct = e.change_pct.unwrap();
                prop_assert!(if up { pct >= 20.0 } else { pct <= -20.0 }, "{e:?}");
            } else if e.segment != *id {
                prop_assert!(!e.drift, "only {id} changed: {e:?}");
            }
        }
    }

    #[test]
    fn scaling_one_p999_within_20_percent_is_not_drift(
        case in case(),
        pick in any::<Index>(),
        permille in 0u64..=200,
        up in any::<bool>(),
    ) {
        let t = &case.topology;
        let c = computed(t, &case.run)?;
        let ids: Vec<String> = case.run.segments.keys().cloned().collect();
        prop_assume!(!ids.is_empty());
        let id = pick.get(&ids);
        let mut run = case.run.clone();
        let s = run.segments.get_mut(id).unwrap();
        let old = s.p999_us;
        let delta = old * permille / 1000;
        if up {
            s.p999_us = old + delta;
        } else {
            // Only p999 moves; it may not fall below p99.
            s.p999_us = (old - delta).max(s.p99_us);
        }
        let entries = drift::compare(t, &c.segments, &run);
        prop_assert!(!drift::drifted(&entries), "{old} → {} µs: {entries:#?}", run.segments[id].p999_us);
    }
}
