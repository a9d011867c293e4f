//! Data-quality checks of a run, as warnings on the draft computed from it: a percentile from too
//! few samples (one or two requests decide the timeout), a failure rate that makes the
//! percentiles mislead, and a latency no real call has (a unit mix-up). None blocks approval;
//! each says what to do.

use crate::baseline::BaselineSegment;
use crate::checks::{Finding, FindingKind, Severity};
use crate::rules::TimeoutRule;
use crate::run::RunData;
use crate::topology::Topology;
use crate::us_to_ms;

/// Fewest samples for a p999-based (volatile) timeout: below, the slowest one or two requests
/// decide it.
pub const MIN_SAMPLES_P999: u64 = 1_000;
/// Fewest samples for a p99-based (stable) timeout.
pub const MIN_SAMPLES_P99: u64 = 100;
/// Failure rate above which a segment's percentiles are flagged (1 %).
pub const FAILURE_RATE_WARN: f64 = 0.01;
/// A p999 above the entry budget × this is taken for a unit mix-up.
pub const IMPLAUSIBLE_FACTOR: u64 = 10;

/// The data-quality findings of `run` on the computed `segments`, in topology order: for each
/// segment, `sample_size`, `failure_rate`, then `implausible_latency`.
pub fn quality_checks(
    topology: &Topology,
    segments: &[BaselineSegment],
    run: &RunData,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let limit_ms = topology.entry_budget_ms.saturating_mul(IMPLAUSIBLE_FACTOR);
    for seg in segments {
        let Some(stats) = run.segments.get(&seg.id) else {
            continue;
        };
        let basis = match seg.rule {
            TimeoutRule::P999Plus30 => Some(("p999", MIN_SAMPLES_P999)),
            TimeoutRule::P99Plus10 => Some(("p99", MIN_SAMPLES_P99)),
            // The root's and pinned timeouts are not derived from the run.
            TimeoutRule::Entry | TimeoutRule::Pinned => None,
        };
        if let Some((percentile, min)) = basis.filter(|&(_, min)| stats.samples < min) {
            out.push(Finding {
                message: format!(
                    "{}: the timeout comes from the {percentile} of {} samples, fewer than {min}: \
                     one or two requests decide it; run the load test longer",
                    seg.id, stats.samples
                ),
                kind: FindingKind::SampleSize {
                    samples: stats.samples,
                    min_samples: min,
                    percentile: percentile.to_owned(),
                },
                segment: seg.id.clone(),
                severity: Severity::Warning,
            });
        }
        if let Some(failures) = stats.failures.filter(|_| stats.samples > 0) {
            let rate = failures as f64 / stats.samples as f64;
            if rate > FAILURE_RATE_WARN {
                let shown = (rate * 10_000.0).round() / 100.0;
                out.push(Finding {
                    message: format!(
                        "{}: {failures} of {} requests failed ({shown} %), above {} %: the \
                         percentiles of a failing endpoint mislead (fast errors, or timeouts at \
                         the tool's limit)",
                        seg.id,
                        stats.samples,
                        FAILURE_RATE_WARN * 100.0
                    ),
                    kind: FindingKind::FailureRate {
                        failures,
                        samples: stats.samples,
                        rate: (rate * 1_000_000.0).round() / 1_000_000.0,
                        threshold: FAILURE_RATE_WARN,
                    },
                    segment: seg.id.clone(),
                    severity: Severity::Warning,
                });
            }
        }
        if stats.p999_us > limit_ms.saturating_mul(1000) {
            let p999_ms = us_to_ms(stats.p999_us);
            out.push(Finding {
                message: format!(
                    "{}: p999 {p999_ms} ms is over {IMPLAUSIBLE_FACTOR} × the entry budget \
                     ({limit_ms} ms): are the units right? (e.g. an HdrHistogram log in µs \
                     uploaded with --unit ms reads 1000 × too slow)",
                    seg.id
                ),
                kind: FindingKind::ImplausibleLatency {
                    p999_ms,
                    limit_ms,
                    entry_budget_ms: topology.entry_budget_ms,
                },
                segment: seg.id.clone(),
                severity: Severity::Warning,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::example::{CHECKOUT_RUN_A, CHECKOUT_TOPOLOGY};
    use crate::run::RunUpload;

    /// The quality findings of run A with `edit` applied: (check, segment, message start).
    fn check(edit: impl FnOnce(&mut serde_json::Value), expect: &[(&str, &str, &str)]) {
        let t: Topology = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
        let mut run: serde_json::Value = serde_json::from_str(CHECKOUT_RUN_A).unwrap();
        edit(&mut run);
        let upload: RunUpload = serde_json::from_value(run).unwrap();
        let run = upload.into_run(&t).unwrap();
        let c = crate::compute(&t, &run, &crate::distribution::NoDistributions).unwrap();
        let got: Vec<(String, String, String)> = quality_checks(&t, &c.segments, &run)
            .into_iter()
            .map(|f| {
                assert_eq!(f.severity, Severity::Warning);
                (f.kind.check_name().to_owned(), f.segment, f.message)
            })
            .collect();
        assert_eq!(got.len(), expect.len(), "{got:#?}");
        for ((check, seg, msg), (want_check, want_seg, want_msg)) in got.iter().zip(expect) {
            assert_eq!((check.as_str(), seg.as_str()), (*want_check, *want_seg));
            assert!(msg.starts_with(want_msg), "{msg}");
        }
        // They are on the draft: `compute` runs them.
        assert_eq!(
            c.findings
                .iter()
                .filter(|f| matches!(
                    f.kind,
                    FindingKind::SampleSize { .. }
                        | FindingKind::FailureRate { .. }
                        | FindingKind::ImplausibleLatency { .. }
                ))
                .count(),
            expect.len()
        );
    }

    #[test]
    fn run_a_is_clean() {
        check(|_| {}, &[]);
    }

    #[test]
    fn sample_sizes_by_the_percentile_the_timeout_comes_from() {
        // payment is volatile (p999 × 1.3): 999 is too few, 1000 is enough.
        check(
            |r| r["segments"][2]["samples"] = json!(388),
            &[(
                "sample_size",
                "order->payment",
                "order->payment: the timeout comes from the p999 of 388 samples, fewer than 1000",
            )],
        );
        check(|r| r["segments"][2]["samples"] = json!(1000), &[]);
        // inventory is stable (p99 × 1.1): 99 is too few, 100 is enough.
        check(
            |r| r["segments"][1]["samples"] = json!(99),
            &[(
                "sample_size",
                "order->inventory",
                "order->inventory: the timeout comes from the p99 of 99",
            )],
        );
        check(|r| r["segments"][1]["samples"] = json!(100), &[]);
        // The root's timeout is policy: its samples do not matter.
        check(|r| r["segments"][0]["samples"] = json!(1), &[]);
    }

    #[test]
    fn failure_rates_above_one_percent() {
        check(|r| r["segments"][2]["failures"] = json!(1000), &[]);
        check(
            |r| r["segments"][2]["failures"] = json!(1001),
            &[(
                "failure_rate",
                "order->payment",
                "order->payment: 1001 of 100000 requests failed (1 %)",
            )],
        );
        check(
            |r| {
                r["segments"][3]["samples"] = json!(1200);
                r["segments"][3]["failures"] = json!(27);
            },
            &[(
                "failure_rate",
                "order->user",
                "order->user: 27 of 1200 requests failed (2.25 %), above 1 %",
            )],
        );
        // Unknown failures: nothing to say.
        check(
            |r| {
                r["segments"][2]
                    .as_object_mut()
                    .unwrap()
                    .remove("failures")
                    .map_or((), drop)
            },
            &[],
        );
    }

    #[test]
    fn latencies_over_ten_entry_budgets_are_implausible() {
        check(|r| r["segments"][2]["p999_ms"] = json!(8000), &[]);
        check(
            |r| r["segments"][2]["p999_ms"] = json!(888000),
            &[(
                "implausible_latency",
                "order->payment",
                "order->payment: p999 888000 ms is over 10 × the entry budget (8000 ms): are the units right?",
            )],
        );
        // The root too (its own headroom finding is apart).
        check(
            |r| r["segments"][0]["p999_ms"] = json!(8000.001),
            &[(
                "implausible_latency",
                "gateway->order",
                "gateway->order: p999 8000.001 ms",
            )],
        );
    }
}
