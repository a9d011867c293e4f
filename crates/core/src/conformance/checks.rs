//! `checks.json`: a received config → its findings, computed by [`LiveChain::findings`].

use serde::Serialize;

use super::{failed, CorpusError, File};
use crate::checks::{has_errors, Finding};
use serde_json::json;

use crate::example::{
    checkout_draft, checkout_live, CHECKOUT_RUN_A, CHECKOUT_RUN_C, CHECKOUT_TOPOLOGY,
    CHECKOUT_TOPOLOGY_B,
};
use crate::live::{LiveChain, LiveSegment, MAX_CONFIG_MS};
use crate::topology::{Idempotency, Segment, SegmentClass, Topology};
use crate::HumanDuration;

#[derive(Serialize)]
pub(super) struct CheckVector {
    name: &'static str,
    description: &'static str,
    config: LiveChain,
    accept: bool,
    findings: Vec<Finding>,
}

const COMMENT: &str = "A chain's live config, as GET /api/v1/chains/{chain}/budgets serves it, \
    and the findings a client must produce when it validates it: same order, same fields, same \
    numbers, same message. accept is false when a finding has severity error.";

fn vector(name: &'static str, description: &'static str, config: LiveChain) -> CheckVector {
    let findings = config.findings();
    CheckVector {
        name,
        description,
        accept: !has_errors(&findings),
        config,
        findings,
    }
}

const HOUR_MS: u64 = 3_600_000;

pub(super) fn file() -> Result<File<CheckVector>, CorpusError> {
    let mut vectors = spec_examples()?;
    vectors.extend(breaker_windows()?);
    vectors.extend(budget_variants()?);
    vectors.extend(structure_errors()?);
    vectors.extend(hostile_numbers()?);
    Ok(File {
        comment: COMMENT,
        vectors,
    })
}

fn spec_examples() -> Result<Vec<CheckVector>, CorpusError> {
    // Example C's draft, as an agent would receive it once approved.
    let mut c = checkout_draft(CHECKOUT_TOPOLOGY, CHECKOUT_RUN_C).map_err(failed)?;
    c.id = "bl-20261130-002".into();
    let c = LiveChain::from_baseline(&c, 8, "2026-11-30T00:00:02.000Z");
    Ok(vec![
        vector(
            "spec-example-a",
            "SPEC §4 example A: inventory 44/208, payment 390/390, user 9/9; the root's \
             children need 607 of 800 ms, windows 5000/480 = 10.41, TTLs cover 18h: no finding",
            example_a()?,
        ),
        vector(
            "spec-example-b-inversion",
            "SPEC §4 example B: inventory pinned 500 without deadline retry, payment pinned 400: \
             need 909 (500 + 400 + 9), available 800, excess 109: an inversion, refused",
            checkout_live(CHECKOUT_TOPOLOGY_B, 8).map_err(failed)?,
        ),
        vector(
            "spec-example-c-draft",
            "SPEC §4 example C's draft: payment p999 390 gives timeout 507, need 724 of 800: \
             accepted",
            c,
        ),
    ])
}

fn breaker_windows() -> Result<Vec<CheckVector>, CorpusError> {
    let cases: [(&str, &str, u64); 6] = [
        (
            "breaker-window-below-backoff",
            "window 400 ms is under the worst-case retry backoff (100 + 300) × 1.2 = 480 ms of \
             inventory and payment: an error on each, ratio 0.83",
            400,
        ),
        (
            "breaker-window-equal-backoff",
            "window 480 ms equals the worst-case backoff: still an error (the window must be \
             longer), ratio 1",
            480,
        ),
        (
            "breaker-window-just-above-backoff",
            "window 481 ms: no longer an error but a warning; the ratio 481 / 480 is rounded \
             down to two decimals, 1",
            481,
        ),
        (
            "breaker-window-ratio-8",
            "window 4000 ms: ratio 8.33 (rounded down to two decimals) is under 10: a warning \
             on inventory and payment, accepted",
            4000,
        ),
        (
            "breaker-window-ratio-just-under-10",
            "window 4799 ms: ratio 9.99 is still under 10: a warning",
            4799,
        ),
        (
            "breaker-window-ratio-10",
            "window 4800 ms: ratio exactly 10 is not under 10: no finding",
            4800,
        ),
    ];
    cases
        .into_iter()
        .map(|(name, description, window)| {
            let config = from_topology(CHECKOUT_TOPOLOGY, |t| t.breaker_window_ms = window)?;
            Ok(vector(name, description, config))
        })
        .collect()
}

/// Valid configs the derivation rules compute from edited topologies.
fn budget_variants() -> Result<Vec<CheckVector>, CorpusError> {
    let ttl = |hours: u64| {
        move |t: &mut Topology| {
            if let Some(idem) = &mut segment(t, "order->inventory").idempotency {
                idem.ttl = HumanDuration::from_ms(hours * HOUR_MS);
            }
        }
    };
    let stages = |stages: [Option<u32>; 3]| {
        move |t: &mut Topology| {
            for (id, stage) in ["order->inventory", "order->payment", "order->user"]
                .into_iter()
                .zip(stages)
            {
                segment(t, id).stage = stage;
            }
        }
    };
    let reserve = |ms: u64| move |t: &mut Topology| segment(t, "gateway->order").reserve_ms = ms;
    let sku = Idempotency {
        key: "sku".into(),
        ttl: HumanDuration::from_ms(24 * HOUR_MS),
    };
    let several = |t: &mut Topology| {
        t.breaker_window_ms = 1000;
        ttl(12)(t);
    };
    Ok(vec![
        vector(
            "idempotency-ttl-below-max-recovery",
            "inventory's key order_id lives 12h but the longest recovery is 18h: an error",
            from_topology(CHECKOUT_TOPOLOGY, ttl(12))?,
        ),
        vector(
            "idempotency-ttl-equal-max-recovery",
            "inventory's key lives exactly max_recovery (18h): enough, no finding",
            from_topology(CHECKOUT_TOPOLOGY, ttl(18))?,
        ),
        vector(
            "stages-parallel",
            "inventory and payment run in parallel (both stage 1): their stage needs the larger \
             budget, not the sum: max(208, 390) + 9 = 399 of 800",
            from_topology(CHECKOUT_TOPOLOGY, stages([Some(1), Some(1), None]))?,
        ),
        vector(
            "stages-parallel-resolve-example-b",
            "example B with inventory and payment in one stage: max(500, 400) + 9 = 509 of \
             800: no inversion",
            from_topology(CHECKOUT_TOPOLOGY_B, stages([Some(1), Some(1), None]))?,
        ),
        vector(
            "stages-distinct-numbers-add-up",
            "example B with inventory in stage 1 and payment in stage 2: two stages, still \
             500 + 400 + 9 = 909 of 800",
            from_topology(CHECKOUT_TOPOLOGY_B, stages([Some(1), Some(2), None]))?,
        ),
        vector(
            "stages-grouped-by-number-in-order-of-appearance",
            "example B with inventory and user in stage 1 and payment (listed between them) in \
             stage 2: stages come in order of first appearance, max(500, 9) + 400 = 900 of \
             800, excess 100 (the seed's 500 + 400 = 900 > 800)",
            from_topology(CHECKOUT_TOPOLOGY_B, stages([Some(1), Some(2), Some(1)]))?,
        ),
        vector(
            "reserve-ms-inverts",
            "the root reserves 200 ms for its own work: available 800 − 200 = 600 < need 607, \
             excess 7",
            from_topology(CHECKOUT_TOPOLOGY, reserve(200))?,
        ),
        vector(
            "reserve-ms-boundary",
            "the root reserves 193 ms: available 607 equals need 607, which fits: no finding",
            from_topology(CHECKOUT_TOPOLOGY, reserve(193))?,
        ),
        vector(
            "nested-grandchild-fits",
            "inventory calls stock (stable, p99 36 ms: timeout and budget 40, not idempotent): \
             inventory's own timeout 44 covers it",
            with_stock(None)?,
        ),
        vector(
            "nested-grandchild-inverted",
            "inventory calls stock (timeout 40, idempotent, so budget 2 × 40 + 120 = 200): the \
             inversion is on inventory (need 200, available 44, excess 156); each parent is \
             checked against its own children only, so the root is fine",
            with_stock(Some(sku))?,
        ),
        vector(
            "several-findings-in-order",
            "example B with a 1000 ms window and inventory's TTL 12h: the inversion, then a \
             breaker_window warning on inventory and on payment (ratio 2.08), then the TTL \
             error: check by check, each in segment order",
            from_topology(CHECKOUT_TOPOLOGY_B, several)?,
        ),
    ])
}

/// Configs that are not a valid call tree: only `structure` findings, in the order found.
fn structure_errors() -> Result<Vec<CheckVector>, CorpusError> {
    let a = example_a()?;
    let broken = |name, description, edit: &dyn Fn(&mut LiveChain)| {
        let mut config = a.clone();
        edit(&mut config);
        vector(name, description, config)
    };
    Ok(vec![
        broken(
            "structure-duplicate-id",
            "order->user appears twice: the second is reported, pointing at the first",
            &|c| {
                let user = live_segment(c, "order->user").clone();
                c.segments.push(user);
            },
        ),
        broken(
            "structure-id-not-caller-callee",
            "inventory's id is order->stock but its caller->callee is order->inventory",
            &|c| live_segment(c, "order->inventory").id = "order->stock".into(),
        ),
        broken(
            "structure-no-root",
            "the root has a parent edge->gateway that does not exist: no root, and an unknown \
             parent (reported in that order)",
            &|c| live_segment(c, "gateway->order").parent = Some("edge->gateway".into()),
        ),
        broken(
            "structure-two-roots",
            "order->user has no parent: a second root",
            &|c| live_segment(c, "order->user").parent = None,
        ),
        broken(
            "structure-unknown-parent",
            "order->user's parent order->nowhere is not a segment of the chain",
            &|c| live_segment(c, "order->user").parent = Some("order->nowhere".into()),
        ),
        broken(
            "structure-caller-not-parents-callee",
            "gateway->user hangs under gateway->order, whose handler is order, not gateway",
            &|c| {
                let user = live_segment(c, "order->user");
                user.id = "gateway->user".into();
                user.caller = "gateway".into();
            },
        ),
        broken(
            "structure-cycle",
            "x->y and y->x are each other's parent: each is its own ancestor",
            &|c| {
                for (caller, callee) in [("x", "y"), ("y", "x")] {
                    let mut s = live_segment(c, "order->user").clone();
                    s.id = format!("{caller}->{callee}");
                    s.caller = caller.into();
                    s.callee = callee.into();
                    s.parent = Some(format!("{callee}->{caller}"));
                    c.segments.push(s);
                }
            },
        ),
        broken(
            "structure-retry-without-idempotency",
            "order->user has an UNAVAILABLE retry rule but no idempotency key: only idempotent \
             calls may retry",
            &|c| {
                let rule = live_segment(c, "order->inventory")
                    .retry
                    .on_unavailable
                    .clone();
                live_segment(c, "order->user").retry.on_unavailable = rule;
            },
        ),
        broken(
            "structure-empty-key",
            "inventory's idempotency key is empty",
            &|c| set_idempotency(c, "", 24 * HOUR_MS),
        ),
        broken(
            "structure-blank-key",
            "inventory's idempotency key is only spaces: as empty",
            &|c| set_idempotency(c, "  ", 24 * HOUR_MS),
        ),
        broken(
            "structure-zero-ttl",
            "inventory's idempotency TTL is 0s (only the structure error: the TTL check does \
             not run on a broken tree)",
            &|c| set_idempotency(c, "order_id", 0),
        ),
        broken(
            "structure-entry-zero",
            "entry_budget_ms 0: no call could ever succeed",
            &|c| c.entry_budget_ms = 0,
        ),
        broken("structure-window-zero", "breaker_window_ms 0", &|c| {
            c.breaker_window_ms = 0
        }),
        broken(
            "structure-no-segments",
            "no segments at all: a chain needs at least its root",
            &|c| c.segments.clear(),
        ),
        broken(
            "structure-root-with-stage",
            "the root has a stage: it has no siblings, so a stage does not apply",
            &|c| live_segment(c, "gateway->order").stage = Some(1),
        ),
        broken(
            "structure-several-errors-in-order",
            "window 0, a duplicate id and an unknown parent at once: every error is reported, \
             chain fields first, then per segment, then the parents",
            &|c| {
                c.breaker_window_ms = 0;
                live_segment(c, "order->payment").parent = Some("order->nowhere".into());
                let user = live_segment(c, "order->user").clone();
                c.segments.push(user);
            },
        ),
    ])
}

/// Numbers no server computes but a received config (or a hand-edited cache) may carry: a
/// client must give these findings, never overflow or divide by zero.
fn hostile_numbers() -> Result<Vec<CheckVector>, CorpusError> {
    let a = example_a()?;
    let edited = |name, description, edit: &dyn Fn(&mut LiveChain)| {
        let mut config = a.clone();
        edit(&mut config);
        vector(name, description, config)
    };
    Ok(vec![
        edited(
            "retry-waits-of-zero",
            "every retry rule waits 0 ms (worst case 0): no breaker finding, whatever the window",
            &|c| {
                c.breaker_window_ms = 1;
                for s in &mut c.segments {
                    for rule in [&mut s.retry.on_deadline, &mut s.retry.on_unavailable]
                        .into_iter()
                        .flatten()
                    {
                        rule.backoffs_ms = vec![0; rule.backoffs_ms.len()];
                        rule.worst_case_backoff_ms = 0;
                    }
                }
            },
        ),
        edited(
            "timeout-zero-and-budget-below-timeout",
            "user's timeout is 0 ms and inventory's budget 40 ms is below its 44 ms timeout: \
             structure errors (no server derives either)",
            &|c| {
                live_segment(c, "order->user").timeout_ms = 0;
                live_segment(c, "order->inventory").budget_ms = 40;
            },
        ),
        edited(
            "retry-rule-past-the-retry-bound",
            "inventory may retry 11 times on UNAVAILABLE with 0 ms waits: more than 10 retries \
             of one cause is refused (a retry storm, not an R-retry plan)",
            &|c| {
                let rule = live_segment(c, "order->inventory")
                    .retry
                    .on_unavailable
                    .as_mut()
                    .expect("inventory retries on UNAVAILABLE");
                rule.max_retries = 11;
                rule.backoffs_ms = vec![0];
                rule.worst_case_backoff_ms = 0;
            },
        ),
        edited(
            "durations-above-the-bound",
            "a window of 2^64 - 1 ms and a budget one over 10^12 ms (about 31.7 years): \
             structure errors, refused before any arithmetic on them",
            &|c| {
                c.breaker_window_ms = u64::MAX;
                live_segment(c, "order->inventory").budget_ms = MAX_CONFIG_MS + 1;
            },
        ),
        edited(
            "durations-at-the-bound",
            "entry budget, root timeout, budget and window of exactly 10^12 ms: allowed, and \
             the checks' sums and ratios stay exact (no finding)",
            &|c| {
                c.entry_budget_ms = MAX_CONFIG_MS;
                c.breaker_window_ms = MAX_CONFIG_MS;
                let root = live_segment(c, "gateway->order");
                root.timeout_ms = MAX_CONFIG_MS;
                root.budget_ms = MAX_CONFIG_MS;
            },
        ),
    ])
}

fn example_a() -> Result<LiveChain, CorpusError> {
    checkout_live(CHECKOUT_TOPOLOGY, 7).map_err(failed)
}

/// The live config of `topology` (a topology JSON document) after `edit`, computed from run A
/// exactly as [`checkout_live`] computes the SPEC examples.
fn from_topology(
    topology: &str,
    edit: impl FnOnce(&mut Topology),
) -> Result<LiveChain, CorpusError> {
    let mut t: Topology = serde_json::from_str(topology).map_err(failed)?;
    edit(&mut t);
    let edited = serde_json::to_string(&t).map_err(failed)?;
    checkout_live(&edited, 7).map_err(failed)
}

/// Example A with `inventory->stock` under inventory (stable, p99 36 ms: timeout 40) and run
/// A extended with its measurements.
fn with_stock(idempotency: Option<Idempotency>) -> Result<LiveChain, CorpusError> {
    let mut t: Topology = serde_json::from_str(CHECKOUT_TOPOLOGY).map_err(failed)?;
    t.segments.push(Segment {
        parent: Some("order->inventory".into()),
        idempotency,
        ..new_segment("inventory", "stock")
    });
    let mut run: serde_json::Value = serde_json::from_str(CHECKOUT_RUN_A).map_err(failed)?;
    if let Some(rows) = run["segments"].as_array_mut() {
        rows.push(
            json!({"id": "inventory->stock", "samples": 100_000, "p99_ms": 36, "p999_ms": 50}),
        );
    }
    let topology = serde_json::to_string(&t).map_err(failed)?;
    let mut doc = checkout_draft(&topology, &run.to_string()).map_err(failed)?;
    doc.id = "bl-20261130-001".into();
    Ok(LiveChain::from_baseline(
        &doc,
        7,
        "2026-11-30T00:00:01.000Z",
    ))
}

fn new_segment(caller: &str, callee: &str) -> Segment {
    Segment {
        id: format!("{caller}->{callee}"),
        caller: caller.into(),
        callee: callee.into(),
        parent: None,
        class: SegmentClass::Stable,
        idempotency: None,
        retry: None,
        pinned_timeout_ms: None,
        reserve_ms: 0,
        stage: None,
        labels: Vec::new(),
    }
}

/// The vectors edit the SPEC's `checkout` chain, whose segments are fixed.
fn segment<'a>(t: &'a mut Topology, id: &str) -> &'a mut Segment {
    let found = t.segments.iter_mut().find(|s| s.id == id);
    found.unwrap_or_else(|| panic!("the checkout example has no segment {id}"))
}

fn live_segment<'a>(c: &'a mut LiveChain, id: &str) -> &'a mut LiveSegment {
    let found = c.segments.iter_mut().find(|s| s.id == id);
    found.unwrap_or_else(|| panic!("the checkout example has no segment {id}"))
}

fn set_idempotency(c: &mut LiveChain, key: &str, ttl_ms: u64) {
    live_segment(c, "order->inventory").idempotency = Some(Idempotency {
        key: key.into(),
        ttl: HumanDuration::from_ms(ttl_ms),
    });
}
