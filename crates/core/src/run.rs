//! One load test's results for a chain: per segment, sample count and latency percentiles.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};

use crate::distribution::{check_points, Distribution};
use crate::ms_to_us;
use crate::topology::{Topology, TopologyError};

/// Longest base64 HdrHistogram accepted per segment: 64 KiB of V2 compressed bytes, the
/// server's cap on any histogram it decodes (a load test's 3-digit histogram is a few KiB).
pub const MAX_HISTOGRAM_BASE64: usize = 87_384;

/// The native run upload (`schemas/run.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunUpload {
    /// Free text naming the load tool, e.g. `"locust 2.31"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub segments: Vec<SegmentUpload>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentUpload {
    pub id: String,
    pub samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// The latency distribution the percentiles come from: an HdrHistogram (V2 compressed,
    /// base64, µs) or percentile points. Kill rates and the `timeout_kill_rate` check need it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<Distribution>,
}

/// Percentiles of one segment in whole microseconds (SPEC §3: converted before any arithmetic).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentStats {
    pub samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<u64>,
    pub p99_us: u64,
    pub p999_us: u64,
}

/// A validated run: stats per segment id, and the distribution of each segment that has one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunData {
    pub segments: BTreeMap<String, SegmentStats>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub distributions: BTreeMap<String, Distribution>,
}

fn valid_ms(v: f64) -> bool {
    v.is_finite() && (0.0..1e12).contains(&v)
}

impl RunUpload {
    /// Checks the upload against the chain's topology and converts it to microseconds.
    /// Every problem is reported, located by a JSON pointer into the upload.
    pub fn into_run(self, topology: &Topology) -> Result<RunData, Vec<TopologyError>> {
        let mut errors = Vec::new();
        let mut push =
            |pointer: String, message: String| errors.push(TopologyError { pointer, message });
        let mut segments = BTreeMap::new();
        let mut distributions = BTreeMap::new();
        let mut seen = BTreeSet::new();
        // Looked up once per row: a scan of the topology per row is quadratic in the chain.
        let known: HashSet<&str> = topology.segments.iter().map(|s| s.id.as_str()).collect();
        for (i, s) in self.segments.iter().enumerate() {
            let at = |f: &str| format!("/segments/{i}/{f}");
            if !known.contains(s.id.as_str()) {
                push(
                    at("id"),
                    format!("{:?} is not a segment of this chain", s.id),
                );
                continue;
            }
            // Checked before the row's own fields, so it is reported even when they are bad.
            if !seen.insert(s.id.as_str()) {
                push(at("id"), format!("segment {:?} appears twice", s.id));
            }
            let mut ok = true;
            for (field, v) in [
                ("p50_ms", s.p50_ms),
                ("p99_ms", Some(s.p99_ms)),
                ("p999_ms", Some(s.p999_ms)),
            ] {
                if let Some(v) = v {
                    if !valid_ms(v) {
                        push(
                            at(field),
                            format!("{v} is not a valid latency in milliseconds"),
                        );
                        ok = false;
                    }
                }
            }
            if s.samples == 0 {
                push(at("samples"), "a segment needs at least one sample".into());
                ok = false;
            }
            if s.failures.is_some_and(|f| f > s.samples) {
                push(at("failures"), "failures exceed samples".into());
                ok = false;
            }
            match &s.distribution {
                Some(Distribution::Histogram { hdr }) if hdr.is_empty() => {
                    push(at("distribution/hdr"), "the histogram is empty".into());
                    ok = false;
                }
                Some(Distribution::Histogram { hdr }) if hdr.len() > MAX_HISTOGRAM_BASE64 => {
                    push(
                        at("distribution/hdr"),
                        format!(
                            "{} bytes of base64, more than {MAX_HISTOGRAM_BASE64}",
                            hdr.len()
                        ),
                    );
                    ok = false;
                }
                Some(Distribution::Percentiles { points }) => {
                    if let Err((j, why)) = check_points(points) {
                        push(at(&format!("distribution/points/{j}")), why);
                        ok = false;
                    }
                }
                _ => {}
            }
            if !ok {
                continue;
            }
            let stats = SegmentStats {
                samples: s.samples,
                failures: s.failures,
                p50_us: s.p50_ms.map(ms_to_us),
                p99_us: ms_to_us(s.p99_ms),
                p999_us: ms_to_us(s.p999_ms),
            };
            if stats.p999_us < stats.p99_us {
                push(
                    at("p999_ms"),
                    format!("p999 {} ms is below p99 {} ms", s.p999_ms, s.p99_ms),
                );
                continue;
            }
            if stats.p50_us.is_some_and(|p50| p50 > stats.p99_us) {
                push(at("p50_ms"), "p50 is above p99".into());
                continue;
            }
            segments.insert(s.id.clone(), stats);
            if let Some(d) = &s.distribution {
                distributions.insert(s.id.clone(), d.clone());
            }
        }
        for seg in &topology.segments {
            // Every row naming a segment of the chain is in `seen`, valid or not.
            let covered = seen.contains(seg.id.as_str());
            if !seg.is_root() && !covered {
                push(
                    "/segments".into(),
                    format!(
                        "no data for segment {:?}: every non-root segment needs p99 and p999",
                        seg.id
                    ),
                );
            }
        }
        if errors.is_empty() {
            Ok(RunData {
                segments,
                distributions,
            })
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::CHECKOUT_TOPOLOGY;

    fn row(id: &str, samples: u64, p99_ms: f64, p999_ms: f64) -> SegmentUpload {
        SegmentUpload {
            id: id.into(),
            samples,
            failures: None,
            p50_ms: None,
            p99_ms,
            p999_ms,
            distribution: None,
        }
    }

    /// Run A of SPEC §4, root first.
    fn run_a() -> Vec<SegmentUpload> {
        vec![
            row("gateway->order", 100_000, 420.0, 610.0),
            row("order->inventory", 100_000, 40.0, 150.0),
            row("order->payment", 100_000, 210.0, 300.0),
            row("order->user", 100_000, 8.0, 20.0),
        ]
    }

    /// Converts `input` against the checkout topology; `expect`: one fragment per error, in
    /// order, each `"pointer: message"`-ish as `TopologyError` displays it.
    fn check(input: Vec<SegmentUpload>, expect: &[&str]) -> Option<RunData> {
        let topology: Topology = serde_json::from_str(CHECKOUT_TOPOLOGY).unwrap();
        let upload = RunUpload {
            tool: Some("test".into()),
            note: None,
            segments: input,
        };
        match upload.into_run(&topology) {
            Ok(run) => {
                assert!(expect.is_empty(), "expected errors {expect:?}, got {run:?}");
                Some(run)
            }
            Err(errors) => {
                let got: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                assert_eq!(got.len(), expect.len(), "got {got:#?}");
                for (g, e) in got.iter().zip(expect) {
                    assert!(g.contains(e), "{g:?} should contain {e:?}");
                }
                None
            }
        }
    }

    /// Run A with `f` applied.
    fn a_with(f: impl FnOnce(&mut Vec<SegmentUpload>)) -> Vec<SegmentUpload> {
        let mut rows = run_a();
        f(&mut rows);
        rows
    }

    #[test]
    fn valid_run_converts_to_microseconds() {
        let run = check(run_a(), &[]).unwrap();
        assert_eq!(run.segments.len(), 4);
        assert_eq!(
            run.segments["order->payment"],
            SegmentStats {
                samples: 100_000,
                failures: None,
                p50_us: None,
                p99_us: 210_000,
                p999_us: 300_000
            }
        );
        // Rounded to the nearest microsecond before anything else.
        let run = check(
            a_with(|r| {
                r[1].p50_ms = Some(12.3456);
                r[1].p99_ms = 40.0004;
                r[1].p999_ms = 40.0006;
                r[1].failures = Some(100_000);
            }),
            &[],
        )
        .unwrap();
        let inv = run.segments["order->inventory"];
        assert_eq!(
            (inv.p50_us, inv.p99_us, inv.p999_us, inv.failures),
            (Some(12_346), 40_000, 40_001, Some(100_000))
        );
        // p999 == p99 and zero latencies are fine.
        check(a_with(|r| r[3] = row("order->user", 1, 0.0, 0.0)), &[]).unwrap();
    }

    #[test]
    fn root_data_is_optional() {
        let run = check(a_with(|r| drop(r.remove(0))), &[]).unwrap();
        assert_eq!(run.segments.len(), 3);
        assert!(!run.segments.contains_key("gateway->order"));
        // Order does not matter.
        check(a_with(|r| r.reverse()), &[]).unwrap();
    }

    #[test]
    fn unknown_and_missing_segments() {
        check(
            a_with(|r| r.push(row("order->nowhere", 1, 1.0, 2.0))),
            &["/segments/4/id: \"order->nowhere\" is not a segment of this chain"],
        );
        check(
            a_with(|r| drop(r.remove(3))),
            &["/segments: no data for segment \"order->user\": every non-root segment needs p99 and p999"],
        );
        // A misspelt id is both unknown and leaves its segment without data.
        check(
            a_with(|r| r[2].id = "order->paymnet".into()),
            &[
                "/segments/2/id: \"order->paymnet\" is not a segment",
                "/segments: no data for segment \"order->payment\"",
            ],
        );
        check(
            vec![],
            &[
                "/segments: no data for segment \"order->inventory\"",
                "/segments: no data for segment \"order->payment\"",
                "/segments: no data for segment \"order->user\"",
            ],
        );
    }

    #[test]
    fn percentiles_must_be_ordered() {
        check(
            a_with(|r| r[1].p999_ms = 39.9),
            &["/segments/1/p999_ms: p999 39.9 ms is below p99 40 ms"],
        );
        // The root's data is checked too when present.
        check(
            a_with(|r| r[0].p999_ms = 400.0),
            &["/segments/0/p999_ms: p999 400 ms is below p99 420 ms"],
        );
        check(
            a_with(|r| r[1].p50_ms = Some(40.001)),
            &["/segments/1/p50_ms: p50 is above p99"],
        );
        check(a_with(|r| r[1].p50_ms = Some(40.0)), &[]);
    }

    #[test]
    fn samples_and_failures() {
        check(
            a_with(|r| r[2].samples = 0),
            &["/segments/2/samples: a segment needs at least one sample"],
        );
        check(
            a_with(|r| r[2].failures = Some(100_001)),
            &["/segments/2/failures: failures exceed samples"],
        );
        check(
            a_with(|r| {
                r[2].samples = 0;
                r[2].failures = Some(1);
            }),
            &["/segments/2/samples", "/segments/2/failures"],
        );
    }

    #[test]
    fn non_finite_or_out_of_range_latencies() {
        check(
            a_with(|r| r[1].p99_ms = f64::NAN),
            &["/segments/1/p99_ms: NaN is not a valid latency in milliseconds"],
        );
        check(
            a_with(|r| r[1].p999_ms = f64::INFINITY),
            &["/segments/1/p999_ms: inf is not a valid latency"],
        );
        check(
            a_with(|r| r[3].p50_ms = Some(f64::NEG_INFINITY)),
            &["/segments/3/p50_ms: -inf is not a valid latency"],
        );
        check(
            a_with(|r| r[3].p99_ms = -1.0),
            &["/segments/3/p99_ms: -1 is not a valid latency"],
        );
        check(
            a_with(|r| r[3].p999_ms = 1e12),
            &["/segments/3/p999_ms: 1000000000000 is not a valid latency"],
        );
        // Every bad field of a row is reported.
        check(
            a_with(|r| {
                r[1].p99_ms = f64::NAN;
                r[1].p999_ms = f64::NAN;
            }),
            &["/segments/1/p99_ms: NaN", "/segments/1/p999_ms: NaN"],
        );
    }

    #[test]
    fn duplicate_ids() {
        check(
            a_with(|r| r.push(row("order->inventory", 1, 40.0, 150.0))),
            &["/segments/4/id: segment \"order->inventory\" appears twice"],
        );
        // The duplicate is reported even when the first occurrence is itself invalid.
        check(
            a_with(|r| {
                r[1].samples = 0;
                r.push(row("order->inventory", 1, 40.0, 150.0));
            }),
            &[
                "/segments/1/samples",
                "/segments/4/id: segment \"order->inventory\" appears twice",
            ],
        );
        check(
            a_with(|r| r.push(row("gateway->order", 1, 40.0, 10.0))),
            &[
                "/segments/4/id: segment \"gateway->order\" appears twice",
                "/segments/4/p999_ms",
            ],
        );
    }

    #[test]
    fn every_problem_is_reported() {
        check(
            a_with(|r| {
                r[0].p999_ms = 1.0;
                r[1].samples = 0;
                r[2].id = "x->y".into();
                r[3].p99_ms = f64::NAN;
            }),
            &[
                "/segments/0/p999_ms",
                "/segments/1/samples",
                "/segments/2/id: \"x->y\"",
                "/segments/3/p99_ms",
                "/segments: no data for segment \"order->payment\"",
            ],
        );
    }
}
