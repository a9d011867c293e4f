//! Runs' latency distributions: decoding them for the rules (kill rates, `timeout_kill_rate`),
//! what-if answers for any timeout, and the cumulative curve the console draws.
//!
//! A histogram is decoded within the bounds of `feedback::hdr` (64 KiB compressed, 1 MiB
//! inflated, values up to an hour), whoever sent it: the native upload's, or one budgetd
//! wrote from a load tool's samples.

use base64::Engine as _;
use budget_api::baselines::{SegmentDistribution, WhatIf, MAX_CURVE_POINTS};
use budget_core::baseline::BaselineSegment;
use budget_core::distribution::{
    attempts_per_call, kill_buckets, kill_points, Bucket, Cdf, Kill, RunTails, Tails,
};
use budget_core::RunData;

use super::violation;
use crate::error::{ApiError, ApiResult};
use crate::feedback::hdr;
use crate::state::AppState;

/// Longest timeout a what-if takes: an hour, the longest latency a histogram holds (longer
/// samples are recorded as an hour).
pub const MAX_WHATIF_TIMEOUT_MS: i64 = 3_600_000;

/// One stored histogram (base64 of V2 compressed bytes) as buckets.
fn decode(base64: &str) -> Result<Vec<Bucket>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64)
        .map_err(|e| format!("the histogram is not base64: {e}"))?;
    if bytes.is_empty() {
        return Err("the histogram is empty".into());
    }
    let sparse = hdr::decode_named(&bytes, "the histogram")?;
    Ok(sparse
        .buckets
        .into_iter()
        .map(|(lowest_us, count)| Bucket { lowest_us, count })
        .collect())
}

/// The distributions of a stored run for the rules, each histogram decoded when asked and
/// dropped after (one at a time: at most [`hdr::MAX_INFLATED`] of counts, whatever the chain).
/// A stored histogram that does not decode gives no kill rate, and says so in the log.
pub fn tails(run: &RunData) -> impl Tails + Sync + '_ {
    RunTails::new(run, |base64: &str| {
        decode(base64).inspect_err(|e| {
            tracing::warn!(error = %e, "a stored histogram does not decode: no kill rate from it")
        })
    })
}

/// The distributions of an upload, decoded once each: for the draft's kill rates as
/// [`tails`] does, and checked on the way — a histogram must decode and hold its segment's
/// `samples` (the kill rate is a share of them; one of other calls would say what the timeout
/// kills of another load test). [`UploadTails::finish`] checks those the draft did not ask for
/// (no draft opened) and answers the first problem as a 422 at
/// `/segments/{i}/distribution/hdr`, before anything is stored.
pub struct UploadTails<'a> {
    run: &'a RunData,
    state: std::sync::Mutex<Checked>,
}

#[derive(Default)]
struct Checked {
    /// Segments whose histogram was decoded and found good.
    good: std::collections::BTreeSet<String>,
    /// The first histogram found bad: segment and why.
    bad: Option<(String, String)>,
}

impl<'a> UploadTails<'a> {
    pub fn new(run: &'a RunData) -> Self {
        Self {
            run,
            state: Default::default(),
        }
    }

    /// `segment`'s histogram, decoded and checked against its samples.
    fn decode_checked(&self, segment: &str, base64: &str) -> Result<Vec<Bucket>, String> {
        let buckets = decode(base64)?;
        let held = buckets.iter().fold(0u64, |n, b| n.saturating_add(b.count));
        let declared = self.run.segments.get(segment).map_or(0, |s| s.samples);
        if held != declared {
            return Err(format!(
                "the histogram holds {held} samples, the segment's samples say {declared}"
            ));
        }
        Ok(buckets)
    }

    fn record(&self, segment: &str, outcome: &Result<Vec<Bucket>, String>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(_) => {
                state.good.insert(segment.to_owned());
            }
            Err(why) => {
                state
                    .bad
                    .get_or_insert_with(|| (segment.to_owned(), why.clone()));
            }
        }
    }

    /// Checks the histograms not decoded yet; the first problem found, as a 422 (`ids`: the
    /// upload's segment ids in order, for the pointer).
    pub fn finish(&self, ids: &[String]) -> ApiResult<()> {
        for (segment, d) in &self.run.distributions {
            let budget_core::Distribution::Histogram { hdr } = d else {
                continue;
            };
            let done = {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.bad.is_some() || state.good.contains(segment)
            };
            if !done {
                let outcome = self.decode_checked(segment, hdr);
                self.record(segment, &outcome);
            }
        }
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &state.bad {
            None => Ok(()),
            Some((segment, why)) => {
                let i = ids.iter().position(|id| id == segment).unwrap_or(0);
                Err(violation(
                    &format!("/segments/{i}/distribution/hdr"),
                    format!("segment {segment:?}: {why}"),
                    why.clone(),
                ))
            }
        }
    }
}

impl Tails for UploadTails<'_> {
    fn kill(&self, segment: &str, timeout_us: u64) -> Option<Kill> {
        match self.run.distributions.get(segment)? {
            budget_core::Distribution::Histogram { hdr } => {
                let outcome = self.decode_checked(segment, hdr);
                self.record(segment, &outcome);
                outcome.ok().map(|b| kill_buckets(&b, timeout_us))
            }
            budget_core::Distribution::Percentiles { points } => {
                Some(kill_points(points, timeout_us))
            }
        }
    }
}

/// A baseline's segment and the decoded distribution its run holds for it.
struct Loaded {
    baseline_id: String,
    run_id: String,
    segment: BaselineSegment,
    cdf: Cdf,
}

async fn load(state: &AppState, id: &str, segment: Option<&str>) -> ApiResult<Loaded> {
    let segment = segment.filter(|s| !s.is_empty()).ok_or_else(|| {
        ApiError::bad_request("the query needs segment=ID, a segment of the baseline")
    })?;
    let baseline = state.store.get_baseline(id).await?;
    let seg = baseline
        .doc
        .segments
        .iter()
        .find(|s| s.id == segment)
        .cloned()
        .ok_or_else(|| {
            let segments = &baseline.doc.segments;
            let mut named: Vec<&str> = segments.iter().take(20).map(|s| s.id.as_str()).collect();
            if segments.len() > named.len() {
                named.push("…");
            }
            ApiError::not_found(format!(
                "baseline {id} has no segment {segment:?} (its {} segments: {})",
                segments.len(),
                named.join(", ")
            ))
        })?;
    let run = state
        .store
        .get_run(&baseline.doc.chain, &baseline.doc.run_id)
        .await?;
    let stored = run.data.distributions.get(segment).ok_or_else(|| {
        ApiError::not_found(format!(
            "run {} holds no latency distribution for {segment:?}: its file gave percentiles \
             only without points, or it was uploaded before runs kept distributions",
            run.id
        ))
    })?;
    let cdf = match stored {
        budget_core::Distribution::Histogram { hdr } => Cdf::Buckets(
            decode(hdr).map_err(|e| ApiError::internal(anyhow::anyhow!("{segment}: {e}")))?,
        ),
        budget_core::Distribution::Percentiles { points } => Cdf::Points(points.clone()),
    };
    Ok(Loaded {
        baseline_id: baseline.doc.id.clone(),
        run_id: run.id,
        segment: seg,
        cdf,
    })
}

/// What `timeout_ms` would kill of segment `segment` in baseline `id`'s run.
pub async fn whatif(
    state: &AppState,
    id: &str,
    segment: Option<&str>,
    timeout_ms: Option<i64>,
) -> ApiResult<WhatIf> {
    let timeout_ms = match timeout_ms {
        Some(t) if (1..=MAX_WHATIF_TIMEOUT_MS).contains(&t) => t as u64,
        Some(t) => {
            return Err(ApiError::bad_request(format!(
                "timeout_ms={t}: a timeout is 1 to {MAX_WHATIF_TIMEOUT_MS} ms"
            )))
        }
        None => {
            return Err(ApiError::bad_request(
                "the query needs timeout_ms=N, the timeout to try in whole milliseconds",
            ))
        }
    };
    let l = load(state, id, segment).await?;
    let kill = l.cdf.kill(timeout_ms * 1000);
    let retries = l.segment.retry.on_deadline.is_some();
    Ok(WhatIf {
        baseline_id: l.baseline_id,
        run_id: l.run_id,
        segment: l.segment.id,
        timeout_ms,
        baseline_timeout_ms: l.segment.timeout_ms,
        source: kill.source,
        kill_rate: kill.rate(),
        kill_rate_bounds: kill
            .rate()
            .is_none()
            .then_some([kill.at_least, kill.at_most]),
        killed: kill.killed,
        samples: kill.samples,
        retries_on_deadline: retries,
        attempts_per_call: kill
            .rate()
            .map(|r| if retries { attempts_per_call(r) } else { 1.0 }),
    })
}

/// Segment `segment`'s distribution in baseline `id`'s run, as a cumulative curve.
pub async fn distribution(
    state: &AppState,
    id: &str,
    segment: Option<&str>,
) -> ApiResult<SegmentDistribution> {
    let l = load(state, id, segment).await?;
    let kill = l.cdf.kill(l.segment.timeout_ms * 1000);
    Ok(SegmentDistribution {
        baseline_id: l.baseline_id,
        run_id: l.run_id,
        source: kill.source,
        samples: l.cdf.samples(),
        timeout_ms: l.segment.timeout_ms,
        p99_ms: l.segment.p99_ms,
        p999_ms: l.segment.p999_ms,
        kill_rate: kill.rate(),
        kill_rate_bounds: kill
            .rate()
            .is_none()
            .then_some([kill.at_least, kill.at_most]),
        cdf: l
            .cdf
            .curve(MAX_CURVE_POINTS)
            .into_iter()
            .map(|(us, share)| [budget_core::us_to_ms(us), share])
            .collect(),
        segment: l.segment.id,
    })
}
