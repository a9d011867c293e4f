//! The inversion check: children's stage needs against the parent's timeout.

use super::*;

fn stage(stage: Option<u32>, segments: &[&str], max_budget_ms: u64) -> StageNeed {
    StageNeed {
        stage,
        segments: segments.iter().map(|s| s.to_string()).collect(),
        max_budget_ms,
    }
}

/// `(entry_budget_ms, segments)`; `expect`: per inverted parent, its id, need, available
/// and stages (excess must be need − available).
fn check(input: (u64, Vec<Value>), expect: &[(&str, u64, i64, Vec<StageNeed>)]) {
    let (entry, segments) = input;
    let topology = json!({"entry_budget_ms": entry, "segments": segments});
    let got: Vec<_> = findings_of("inversion", topology, &[])
        .into_iter()
        .map(|f| (f.segment, f.severity, f.kind))
        .collect();
    let want: Vec<_> = expect
        .iter()
        .map(|(id, need_ms, available_ms, stages)| {
            let kind = FindingKind::Inversion {
                need_ms: *need_ms,
                available_ms: *available_ms,
                excess_ms: *need_ms as i64 - available_ms,
                stages: stages.clone(),
            };
            (id.to_string(), Severity::Error, kind)
        })
        .collect();
    assert_eq!(got, want);
}

fn root(extra: Value) -> Value {
    seg("gateway", "order", None, extra)
}

/// A child of the root, pinned to `pinned` ms.
fn child(callee: &str, pinned: u64, extra: Value) -> Value {
    let mut s = seg("order", callee, Some("gateway->order"), extra);
    s["pinned_timeout_ms"] = json!(pinned);
    s
}

#[test]
fn sequential_children_add_up() {
    // The seed's inversion: 500 + 400 = 900 > 800.
    check(
        (
            800,
            vec![
                root(json!({})),
                child("inventory", 500, json!({})),
                child("payment", 400, json!({})),
            ],
        ),
        &[(
            "gateway->order",
            900,
            800,
            vec![
                stage(None, &["order->inventory"], 500),
                stage(None, &["order->payment"], 400),
            ],
        )],
    );
    // Exactly the available time is no inversion.
    check(
        (
            900,
            vec![
                root(json!({})),
                child("inventory", 500, json!({})),
                child("payment", 400, json!({})),
            ],
        ),
        &[],
    );
}

#[test]
fn children_of_one_stage_count_once_at_their_max() {
    let s1 = json!({"stage": 1});
    check(
        (
            800,
            vec![
                root(json!({})),
                child("inventory", 500, s1.clone()),
                child("payment", 400, s1.clone()),
            ],
        ),
        &[],
    );
    check(
        (
            800,
            vec![
                root(json!({})),
                child("inventory", 500, s1.clone()),
                child("payment", 400, s1.clone()),
                child("user", 350, json!({})),
            ],
        ),
        &[(
            "gateway->order",
            850,
            800,
            vec![
                stage(Some(1), &["order->inventory", "order->payment"], 500),
                stage(None, &["order->user"], 350),
            ],
        )],
    );
    // Different stage numbers are sequential; stages keep the order of first appearance.
    check(
        (
            800,
            vec![
                root(json!({})),
                child("inventory", 300, json!({"stage": 2})),
                child("user", 100, json!({})),
                child("payment", 450, json!({"stage": 2})),
                child("audit", 320, json!({"stage": 1})),
            ],
        ),
        &[(
            "gateway->order",
            870,
            800,
            vec![
                stage(Some(2), &["order->inventory", "order->payment"], 450),
                stage(None, &["order->user"], 100),
                stage(Some(1), &["order->audit"], 320),
            ],
        )],
    );
}

#[test]
fn a_retrying_child_needs_its_retry_budget() {
    // Idempotent, retries on deadline: 2 × 300 + 120 = 720.
    let idem = json!({"idempotency": {"key": "order_id", "ttl": "24h"}});
    check(
        (
            800,
            vec![root(json!({})), child("inventory", 300, idem.clone())],
        ),
        &[],
    );
    check(
        (
            800,
            vec![
                root(json!({"reserve_ms": 100})),
                child("inventory", 300, idem),
            ],
        ),
        &[(
            "gateway->order",
            720,
            700,
            vec![stage(None, &["order->inventory"], 720)],
        )],
    );
}

#[test]
fn reserve_reduces_available() {
    let kids = |reserve: u64| {
        vec![
            root(json!({"reserve_ms": reserve})),
            child("inventory", 500, json!({"stage": 1})),
            child("payment", 400, json!({"stage": 1})),
            child("user", 250, json!({})),
        ]
    };
    let stages = vec![
        stage(Some(1), &["order->inventory", "order->payment"], 500),
        stage(None, &["order->user"], 250),
    ];
    check((800, kids(0)), &[]);
    check((800, kids(50)), &[]);
    check(
        (800, kids(51)),
        &[("gateway->order", 750, 749, stages.clone())],
    );
    check(
        (800, kids(100)),
        &[("gateway->order", 750, 700, stages.clone())],
    );
    // A reserve beyond the timeout leaves negative time.
    check((800, kids(900)), &[("gateway->order", 750, -100, stages)]);
}

#[test]
fn grandchildren_are_checked_against_their_own_parent() {
    let grandchild = |callee: &str, pinned: u64, extra: Value| {
        let mut s = seg("inventory", callee, Some("order->inventory"), extra);
        s["pinned_timeout_ms"] = json!(pinned);
        s
    };
    // The root only needs its child's 300; the child's 300 is short of 200 + 150.
    check(
        (
            800,
            vec![
                root(json!({})),
                child("inventory", 300, json!({})),
                grandchild("stock", 200, json!({})),
                grandchild("pricing", 150, json!({})),
            ],
        ),
        &[(
            "order->inventory",
            350,
            300,
            vec![
                stage(None, &["inventory->stock"], 200),
                stage(None, &["inventory->pricing"], 150),
            ],
        )],
    );
    // Grandchildren in one stage fit in 300; the child's own reserve then breaks it.
    check(
        (
            800,
            vec![
                root(json!({})),
                child("inventory", 300, json!({})),
                grandchild("stock", 200, json!({"stage": 1})),
                grandchild("pricing", 150, json!({"stage": 1})),
            ],
        ),
        &[],
    );
    check(
        (
            800,
            vec![
                root(json!({})),
                child("inventory", 300, json!({"reserve_ms": 120})),
                grandchild("stock", 200, json!({"stage": 1})),
                grandchild("pricing", 150, json!({"stage": 1})),
            ],
        ),
        &[(
            "order->inventory",
            200,
            180,
            vec![stage(
                Some(1),
                &["inventory->stock", "inventory->pricing"],
                200,
            )],
        )],
    );
    // Stage numbers group siblings only: the root's stage-1 child and a grandchild's
    // stage 1 are unrelated. Both levels inverted, reported in topology order.
    check(
        (
            400,
            vec![
                root(json!({})),
                child("inventory", 300, json!({"stage": 1})),
                child("payment", 200, json!({})),
                grandchild("stock", 350, json!({"stage": 1})),
            ],
        ),
        &[
            (
                "gateway->order",
                500,
                400,
                vec![
                    stage(Some(1), &["order->inventory"], 300),
                    stage(None, &["order->payment"], 200),
                ],
            ),
            (
                "order->inventory",
                350,
                300,
                vec![stage(Some(1), &["inventory->stock"], 350)],
            ),
        ],
    );
}

#[test]
fn leaves_and_derived_timeouts() {
    // Derived, not pinned: stable p99 40 → 44; volatile p999 300 → 390; 44 + 390 = 434.
    let topology = json!({"entry_budget_ms": 430, "segments": [
        root(json!({})),
        seg("order", "inventory", Some("gateway->order"), json!({})),
        seg("order", "payment", Some("gateway->order"), json!({"class": "volatile"})),
    ]});
    let run = [
        json!({"id": "order->inventory", "samples": 10, "p99_ms": 40, "p999_ms": 150}),
        json!({"id": "order->payment", "samples": 10, "p99_ms": 210, "p999_ms": 300}),
    ];
    let got = findings_of("inversion", topology, &run);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(
        got[0].kind,
        FindingKind::Inversion {
            need_ms: 434,
            available_ms: 430,
            excess_ms: 4,
            stages: vec![
                stage(None, &["order->inventory"], 44),
                stage(None, &["order->payment"], 390)
            ],
        }
    );
    assert!(
        got[0]
            .message
            .contains("need 434 ms (44 + 390), only 430 ms available — 4 ms over"),
        "{}",
        got[0].message
    );
    // A chain of one root has nothing to check.
    let lone = json!({"entry_budget_ms": 1, "segments": [root(json!({}))]});
    assert_eq!(findings_of("inversion", lone, &[]), vec![]);
}
