//! Tests of the checks: one group per check, each from a topology and a run written inline.

use serde_json::{json, Value};

use super::*;
use crate::run::RunUpload;

/// A segment `caller->callee` under `parent`, with `extra` fields merged in.
fn seg(caller: &str, callee: &str, parent: Option<&str>, extra: Value) -> Value {
    let mut s = json!({"id": format!("{caller}->{callee}"), "caller": caller, "callee": callee,
                       "parent": parent, "class": "stable"});
    for (k, v) in extra.as_object().unwrap() {
        s[k] = v.clone();
    }
    s
}

/// Validates `topology`, gives every non-root segment p99 10 / p999 20 unless `run` has it,
/// computes, and returns the findings of check `name`.
fn findings_of(name: &str, topology: Value, run: &[Value]) -> Vec<Finding> {
    let t: Topology = serde_json::from_value(topology).unwrap();
    t.validate().unwrap();
    let mut segments = run.to_vec();
    for s in t.segments.iter().filter(|s| !s.is_root()) {
        if !run.iter().any(|r| r["id"] == s.id.as_str()) {
            segments.push(json!({"id": s.id, "samples": 1000, "p99_ms": 10, "p999_ms": 20}));
        }
    }
    let upload: RunUpload = serde_json::from_value(json!({ "segments": segments })).unwrap();
    let run = upload.into_run(&t).unwrap();
    let c = crate::compute(&t, &run, &crate::distribution::NoDistributions).unwrap();
    c.findings
        .into_iter()
        .filter(|f| f.kind.check_name() == name)
        .collect()
}

mod breaker_window {
    use super::*;

    /// `window` ms against an idempotent `order->inventory` with `retry` flags (`null`:
    /// defaults); `expect`: severity, worst-case backoff and ratio of the one finding.
    fn check(input: (u64, Value), expect: Option<(Severity, u64, f64)>) {
        let (window, retry) = input;
        let mut child = seg(
            "order",
            "inventory",
            Some("gateway->order"),
            json!({"idempotency": {"key": "order_id", "ttl": "24h"}}),
        );
        if !retry.is_null() {
            child["retry"] = retry.clone();
        }
        let topology = json!({"entry_budget_ms": 800, "breaker_window_ms": window,
                              "segments": [seg("gateway", "order", None, json!({})), child]});
        let got = findings_of("breaker_window", topology, &[]);
        let want: Vec<(String, Severity, FindingKind)> = expect
            .into_iter()
            .map(|(severity, worst, ratio)| {
                let kind = FindingKind::BreakerWindow {
                    breaker_window_ms: window,
                    worst_case_backoff_ms: worst,
                    ratio,
                };
                ("order->inventory".to_owned(), severity, kind)
            })
            .collect();
        let got_numbers: Vec<_> = got
            .iter()
            .map(|f| (f.segment.clone(), f.severity, f.kind.clone()))
            .collect();
        assert_eq!(got_numbers, want, "window {window}, retry {retry}");
        for f in &got {
            if let FindingKind::BreakerWindow {
                ratio,
                worst_case_backoff_ms,
                ..
            } = f.kind
            {
                let text = format!("{window} ms is {ratio}× the worst-case retry backoff {worst_case_backoff_ms} ms");
                assert!(
                    f.message.contains(&text),
                    "{:?} should contain {text:?}",
                    f.message
                );
            }
        }
    }

    #[test]
    fn unavailable_retries_worst_case_480() {
        // 5000 / 480 = 10.41×: not under 10, no finding (SPEC §4 example A).
        check((5_000, Value::Null), None);
        // Exactly 10× is not "under 10".
        check((4_800, Value::Null), None);
        check((4_799, Value::Null), Some((Severity::Warning, 480, 9.99)));
        check((4_000, Value::Null), Some((Severity::Warning, 480, 8.33)));
        check((481, Value::Null), Some((Severity::Warning, 480, 1.0)));
        // window ≤ worst case: the breaker opens before the retries finish.
        check((480, Value::Null), Some((Severity::Error, 480, 1.0)));
        check((400, Value::Null), Some((Severity::Error, 480, 0.83)));
        check((1, Value::Null), Some((Severity::Error, 480, 0.0)));
        // Retrying on unavailable only: the same 480.
        check(
            (4_000, json!({"on_deadline": false})),
            Some((Severity::Warning, 480, 8.33)),
        );
        check(
            (4_000, json!({"on_deadline": false, "on_unavailable": true})),
            Some((Severity::Warning, 480, 8.33)),
        );
    }

    #[test]
    fn deadline_only_retries_worst_case_120() {
        // One retry after 100 ms × 1.2 = 120 ms.
        let deadline_only = json!({"on_unavailable": false});
        check((5_000, deadline_only.clone()), None);
        check((1_200, deadline_only.clone()), None);
        check(
            (1_000, deadline_only.clone()),
            Some((Severity::Warning, 120, 8.33)),
        );
        check(
            (480, deadline_only.clone()),
            Some((Severity::Warning, 120, 4.0)),
        );
        check(
            (121, deadline_only.clone()),
            Some((Severity::Warning, 120, 1.0)),
        );
        check(
            (120, deadline_only.clone()),
            Some((Severity::Error, 120, 1.0)),
        );
        check((100, deadline_only), Some((Severity::Error, 120, 0.83)));
    }

    #[test]
    fn segments_that_never_retry_have_no_finding() {
        check(
            (1, json!({"on_deadline": false, "on_unavailable": false})),
            None,
        );
        // Not idempotent: never retries, whatever the window.
        let topology = json!({"entry_budget_ms": 800, "breaker_window_ms": 1, "segments": [
            seg("gateway", "order", None, json!({})),
            seg("order", "user", Some("gateway->order"), json!({})),
        ]});
        assert_eq!(findings_of("breaker_window", topology, &[]), vec![]);
    }
}

mod idempotency_ttl {
    use super::*;

    /// `(ttl, max_recovery)` (`None`: the 18h default) for `order->inventory` keyed by
    /// `order_id`; `expect`: `(ttl_ms, max_recovery_ms)` of the error finding.
    fn check(input: (&str, Option<&str>), expect: Option<(u64, u64)>) {
        let (ttl, recovery) = input;
        let mut topology = json!({"entry_budget_ms": 800, "segments": [
            seg("gateway", "order", None, json!({})),
            seg("order", "inventory", Some("gateway->order"),
                json!({"idempotency": {"key": "order_id", "ttl": ttl}})),
        ]});
        if let Some(r) = recovery {
            topology["max_recovery"] = json!(r);
        }
        let got = findings_of("idempotency_ttl", topology, &[]);
        let want: Vec<_> = expect
            .into_iter()
            .map(|(ttl_ms, max_recovery_ms)| {
                let kind = FindingKind::IdempotencyTtl {
                    key: "order_id".into(),
                    ttl_ms,
                    max_recovery_ms,
                };
                ("order->inventory".to_owned(), Severity::Error, kind)
            })
            .collect();
        let got_numbers: Vec<_> = got
            .iter()
            .map(|f| (f.segment.clone(), f.severity, f.kind.clone()))
            .collect();
        assert_eq!(got_numbers, want, "ttl {ttl}, max_recovery {recovery:?}");
        for f in &got {
            assert!(
                f.message
                    .contains(&format!("lives {ttl} but the longest recovery is")),
                "{}",
                f.message
            );
        }
    }

    #[test]
    fn ttl_must_cover_the_longest_recovery() {
        check(("24h", None), None);
        check(("7d", None), None);
        // Equal is enough: the check is ttl < max_recovery.
        check(("18h", None), None);
        check(("12h", None), Some((43_200_000, 64_800_000)));
        check(("64799999ms", None), Some((64_799_999, 64_800_000)));
        check(("7d", Some("30d")), Some((604_800_000, 2_592_000_000)));
        check(("1h", Some("30m")), None);
    }
}

mod entry_headroom {
    use super::*;

    /// `(entry_budget_ms, root p999 in ms)` (`None`: no root data); `expect`: the p999 of
    /// the warning.
    fn check(input: (u64, Option<f64>), expect: Option<f64>) {
        let (entry, p999) = input;
        let topology = json!({"entry_budget_ms": entry, "segments": [
            seg("gateway", "order", None, json!({})),
            seg("order", "user", Some("gateway->order"), json!({"pinned_timeout_ms": 10})),
        ]});
        let run: Vec<Value> = p999
            .map(|p999| json!({"id": "gateway->order", "samples": 1000, "p99_ms": 420, "p999_ms": p999}))
            .into_iter()
            .collect();
        let got: Vec<_> = findings_of("entry_headroom", topology, &run)
            .into_iter()
            .map(|f| (f.segment, f.severity, f.kind))
            .collect();
        let want: Vec<_> = expect
            .into_iter()
            .map(|p999_ms| {
                let kind = FindingKind::EntryHeadroom {
                    p999_ms,
                    entry_budget_ms: entry,
                };
                ("gateway->order".to_owned(), Severity::Warning, kind)
            })
            .collect();
        assert_eq!(got, want, "entry {entry}, root p999 {p999:?}");
    }

    #[test]
    fn root_p999_above_entry_budget_warns() {
        check((800, Some(810.0)), Some(810.0));
        check((800, Some(800.0)), None);
        check((800, Some(800.001)), Some(800.001));
        check((800, Some(610.0)), None);
        check((800, None), None);
        check((1_000, Some(999.999)), None);
    }
}

mod inversion;

#[test]
fn summarize_counts_by_severity() {
    let topology = json!({"entry_budget_ms": 800, "breaker_window_ms": 4000, "segments": [
        seg("gateway", "order", None, json!({})),
        seg("order", "inventory", Some("gateway->order"),
            json!({"idempotency": {"key": "order_id", "ttl": "12h"}, "pinned_timeout_ms": 500})),
    ]});
    let t: Topology = serde_json::from_value(topology).unwrap();
    let run: RunUpload = serde_json::from_value(json!({"segments": [
        {"id": "gateway->order", "samples": 1, "p99_ms": 700, "p999_ms": 900},
        {"id": "order->inventory", "samples": 1, "p99_ms": 1, "p999_ms": 2},
    ]}))
    .unwrap();
    let c = crate::compute(
        &t,
        &run.into_run(&t).unwrap(),
        &crate::distribution::NoDistributions,
    )
    .unwrap();
    let names: Vec<_> = c
        .findings
        .iter()
        .map(|f| (f.kind.check_name(), f.severity))
        .collect();
    assert_eq!(
        names,
        [
            ("inversion", Severity::Error),
            ("breaker_window", Severity::Warning),
            ("idempotency_ttl", Severity::Error),
            ("entry_headroom", Severity::Warning),
        ]
    );
    assert_eq!(
        summarize(&c.findings),
        BTreeMap::from([(Severity::Error, 2), (Severity::Warning, 2)])
    );
    assert!(has_errors(&c.findings));
    assert!(!has_errors(&c.findings[1..2]));
}

/// A received config may carry any numbers (an agent checks what arrives before trusting it):
/// retry waits of 0 ms or durations near `u64::MAX` give findings — never a panic (the
/// breaker ratio used to divide by the worst case, and deadlines add budgets to the clock).
#[test]
fn hostile_numbers_in_a_received_config_never_panic() {
    let checks = |live: &crate::live::LiveChain| -> Vec<(String, String)> {
        live.findings()
            .into_iter()
            .map(|f| (f.kind.check_name().to_owned(), f.message))
            .collect()
    };
    let example = || crate::example::checkout_live(crate::example::CHECKOUT_TOPOLOGY, 1).unwrap();

    let mut huge = example();
    huge.breaker_window_ms = u64::MAX;
    huge.segments[1].budget_ms = crate::live::MAX_CONFIG_MS + 1;
    assert_eq!(
        checks(&huge),
        [
            (
                "structure",
                "/breaker_window_ms: must be at most 1000000000000 ms"
            ),
            (
                "structure",
                "/segments/1/budget_ms: must be at most 1000000000000 ms"
            ),
        ]
        .map(|(c, m)| (c.to_owned(), m.to_owned()))
    );
    huge.breaker_window_ms = crate::live::MAX_CONFIG_MS;
    huge.segments[1].budget_ms = crate::live::MAX_CONFIG_MS;
    assert!(
        checks(&huge).iter().all(|(c, _)| c != "structure"),
        "the bound itself is allowed"
    );

    let mut zero = example();
    zero.breaker_window_ms = 400;
    let rules = zero.segments.iter_mut().flat_map(|s| {
        [&mut s.retry.on_deadline, &mut s.retry.on_unavailable]
            .into_iter()
            .flatten()
    });
    for rule in rules {
        rule.worst_case_backoff_ms = 0;
    }
    assert_eq!(checks(&zero), vec![], "waits of 0 ms fit in any window");
}

/// The findings of a hostile config grow with it at most linearly: past 1000 segments (the
/// topology schema's limit) one finding alone; below it, each extra root names the first root
/// only (listing every root on each extra one took 461 MB for 3 000 roots).
#[test]
fn hostile_shapes_give_bounded_findings() {
    let roots = |n: usize| {
        let mut live = crate::example::checkout_live(crate::example::CHECKOUT_TOPOLOGY, 1).unwrap();
        let root = live.segments[0].clone();
        live.segments = (0..n)
            .map(|i| {
                let mut s = root.clone();
                s.caller = format!("edge{i}");
                s.id = format!("edge{i}->order");
                s
            })
            .collect();
        live.findings()
    };
    let past = roots(crate::topology::MAX_SEGMENTS + 2000);
    assert_eq!(past.len(), 1, "{past:?}");
    assert_eq!(
        past[0].message,
        "/segments: a chain has at most 1000 segments"
    );

    let at = roots(crate::topology::MAX_SEGMENTS);
    assert_eq!(at.len(), crate::topology::MAX_SEGMENTS - 1);
    assert!(at.iter().all(|f| f.message.len() < 200), "{:?}", at[0]);
}
