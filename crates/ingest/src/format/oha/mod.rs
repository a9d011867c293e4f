//! oha JSON output (`oha --output-format json`; `--json` in older oha releases): one endpoint per
//! file.
//!
//! What is read (checked against oha 1.16.0, `src/printer.rs::print_json`):
//!
//! * `latencyPercentiles`: `{"p10": …, "p50": …, "p99": …, "p99.9": …, "p99.99": …}`, values in
//!   **seconds** (oha's `Duration::as_secs_f64`), computed by oha over every request that got an
//!   HTTP response, whatever its status. `p99` and `p99.9` are required (an IngestError names the
//!   missing key); `p50` is taken when present. oha writes `null` for them when no request got a
//!   response: that is an error too. `latencyPercentilesSuccessful` (from
//!   `--stats-success-breakdown`) is not used, so the percentiles are those oha prints by default.
//! * `statusCodeDistribution`: `{"200": n, "500": m}`, the requests that got a response (required).
//! * `errorDistribution`: `{"<message>": n}`, the requests that got no response (connection error,
//!   `timeout` under `-t`, …). Optional (treated as empty). `aborted due to deadline` (requests cut
//!   off by the end of a `-z` run) is left out of both counts, as oha leaves it out of its success
//!   rate. A status code or message repeated inside its object (oha never repeats one) counts
//!   every time.
//!
//! **Samples and failures.** `samples` = responses + errors; `failures` = errors + responses whose
//! status is not 2xx. The percentiles cover the responses only (oha records no latency for a
//! request that got none), so with errors `samples` is larger than the population of the
//! percentiles: budgetd counts every request sent, and an error is a failure of the call.
//!
//! **Distribution.** The label's percentile points are every `latencyPercentiles` key `p<N>`
//! (N in 0–100: `p10` … `p99.99`) with a number, plus `summary.fastest` as 0 and
//! `summary.slowest` as 100 (seconds, like the percentiles). oha's `responseTimeHistogram` is
//! a coarse fixed-bucket histogram, not an HDR one: it is not used. A value that is not a
//! plausible latency gives no point (and no error).
//!
//! **Label.** [`Options::label`] (the multipart part's name) when given; otherwise a top-level
//! `"url"` string if the file has one (oha up to 1.16 does not write the URL), otherwise an error
//! asking for a label.
//!
//! **Units.** oha always writes seconds: [`Options::unit`] is ignored. A file whose values were
//! converted to milliseconds (or written by something else) is caught two ways: a percentile over
//! one hour (3600 "s") is rejected as implausible, and when the file also carries
//! `metrics.latency_ms` (written by oha 1.16, not by 1.12), its `p50`/`p99` must equal `latencyPercentiles` × 1000
//! (within the µs oha rounds them to).
//!
//! **Tool.** oha's JSON carries no version: `tool` is `"oha"`.
//!
//! **Size and memory.** The input is buffered up to
//! [`MAX_JSON_SUMMARY_BYTES`](crate::MAX_JSON_SUMMARY_BYTES) (4 MiB; oha writes a few KiB): the
//! push that would cross it is refused with an error naming the limit. In `finish` the text is
//! read member by member into the few values above (the distributions are summed as they are
//! read, the percentiles keep one key each, the points at most
//! [`MAX_POINTS`] keys), everything else is validated and
//! dropped: beyond the text, what is kept does not grow with the input. A syntax error answers with its line and
//! column (and the last key before it), a semantic one with the JSON pointer of the field at
//! fault (e.g. `/latencyPercentiles/p99.9`) and the line of that key in the text (of its parent
//! when the key is missing).

use serde::de::MapAccess;

use budget_core::distribution::MAX_POINTS;

use crate::format::percentile_points;
use crate::framing::json::{
    contains, count, field_error, first_in_key_order, json_object_start, skip, Fold, JsonBuffer,
    Obj, Scalar,
};
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Longest plausible latency: one hour, in seconds.
const MAX_LATENCY_S: f64 = 3600.0;

/// Whether the start of an input looks like this format: a JSON object with oha's keys
/// (`"latencyPercentiles"`, or `"summary"` with oha's `"successRate"`) and none of k6's.
pub fn sniff(head: &[u8]) -> bool {
    if json_object_start(head).is_none() || contains(head, b"\"http_req_duration") {
        return false;
    }
    contains(head, b"\"latencyPercentiles\"")
        || (contains(head, b"\"summary\"") && contains(head, b"\"successRate\""))
}

pub fn parser(options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    let label = options
        .label
        .as_deref()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned);
    Ok(Box::new(OhaParser {
        buf: JsonBuffer::new("oha"),
        label,
    }))
}

struct OhaParser {
    buf: JsonBuffer,
    label: Option<String>,
}

impl Ingest for OhaParser {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.buf.push(chunk)
    }

    fn finish(self: Box<Self>) -> Result<Extracted, IngestError> {
        let doc = self.buf.parse::<OhaDoc>()?;
        extract(doc, self.label).map_err(|e| self.buf.locate(e))
    }
}

// ---- What is read ----------------------------------------------------------------------------

/// The members of oha's JSON that are read; the others are validated and dropped. A member
/// repeated at the top level keeps its last value (as a JSON object map does).
#[derive(Debug, Default)]
struct OhaDoc {
    /// `latencyPercentiles`.
    percentiles: Option<Obj<Percentiles>>,
    /// `summary` (only `fastest` and `slowest` are read).
    summary: Option<Obj<Summary>>,
    /// `url` (used as the label when a string and no label is given).
    url: Option<Scalar>,
    /// `metrics` (only its `latency_ms` is read).
    metrics: Option<Obj<Metrics>>,
    /// `statusCodeDistribution`.
    status: Option<Obj<StatusCounts>>,
    /// `errorDistribution`.
    errors: Option<Obj<ErrorCounts>>,
}

impl Fold for OhaDoc {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "latencyPercentiles" => self.percentiles = Some(map.next_value()?),
            "summary" => self.summary = Some(map.next_value()?),
            "url" => self.url = Some(map.next_value()?),
            "metrics" => self.metrics = Some(map.next_value()?),
            "statusCodeDistribution" => self.status = Some(map.next_value()?),
            "errorDistribution" => self.errors = Some(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// The percentiles read from `latencyPercentiles`, in this order.
const PERCENTILES: [f64; 3] = [50.0, 99.0, 99.9];

/// `latencyPercentiles`: for each of [`PERCENTILES`], the first key in key order that names it
/// (`"p99.9"`; any spelling whose number equals it), with its value; and every key naming a
/// percentile 0–100 whose value is a number, as a point. Other keys are dropped.
#[derive(Debug, Default)]
struct Percentiles {
    found: [Option<(String, Scalar)>; 3],
    /// (key, percentile, seconds), at most [`MAX_POINTS`]; a repeated key keeps its last value.
    points: Vec<(String, f64, f64)>,
}

impl Fold for Percentiles {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        let Some(n) = key.strip_prefix('p').and_then(|n| n.parse::<f64>().ok()) else {
            return skip(map);
        };
        let take: [bool; 3] = std::array::from_fn(|i| {
            // Written so that a NaN key (`pNaN`) names every percentile, as it always has.
            let apart = (n - PERCENTILES[i]).abs() > 1e-9;
            !apart && first_in_key_order(&self.found[i], &key)
        });
        let point = n.is_finite() && (0.0..=100.0).contains(&n);
        if !take.contains(&true) && !point {
            return skip(map);
        }
        let value: Scalar = map.next_value()?;
        if point {
            self.points.retain(|(k, _, _)| *k != key);
            if let Some(secs) = value.as_f64() {
                if self.points.len() < MAX_POINTS {
                    self.points.push((key.clone(), n, secs));
                }
            }
        }
        for (slot, take) in self.found.iter_mut().zip(take) {
            if take {
                *slot = Some((key.clone(), value.clone()));
            }
        }
        Ok(())
    }
}

/// `summary`: only `fastest` and `slowest` (seconds) are read, as percentile points 0 and 100.
#[derive(Debug, Default)]
struct Summary {
    fastest: Option<Scalar>,
    slowest: Option<Scalar>,
}

impl Fold for Summary {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "fastest" => self.fastest = Some(map.next_value()?),
            "slowest" => self.slowest = Some(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `metrics` of oha 1.16: only `latency_ms` is read.
#[derive(Debug, Default)]
struct Metrics {
    latency_ms: Option<Obj<LatencyMs>>,
}

impl Fold for Metrics {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "latency_ms" => self.latency_ms = Some(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `metrics.latency_ms`: p50 and p99 in milliseconds.
#[derive(Debug, Default)]
struct LatencyMs {
    p50: Option<Scalar>,
    p99: Option<Scalar>,
}

impl Fold for LatencyMs {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "p50" => self.p50 = Some(map.next_value()?),
            "p99" => self.p99 = Some(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `statusCodeDistribution`, summed as it is read.
#[derive(Debug, Default)]
struct StatusCounts {
    responses: u64,
    /// Responses whose status is not 2xx.
    non_2xx: u64,
    /// The error of the first member in key order that is not `"<status>": <count>`.
    error: Option<(String, IngestError)>,
}

impl Fold for StatusCounts {
    fn member<'de, A: MapAccess<'de>>(
        &mut self,
        code: String,
        map: &mut A,
    ) -> Result<(), A::Error> {
        let n: Scalar = map.next_value()?;
        let path = ["statusCodeDistribution", code.as_str()];
        let status = code
            .parse::<u16>()
            .ok()
            .filter(|s| (100..=999).contains(s))
            .ok_or_else(|| field_error(&path, "is not an HTTP status code"));
        match status.and_then(|status| Ok((status, count(&n, &path)?))) {
            Ok((status, n)) => {
                self.responses = self.responses.saturating_add(n);
                if !(200..300).contains(&status) {
                    self.non_2xx = self.non_2xx.saturating_add(n);
                }
            }
            Err(e) => {
                if first_in_key_order(&self.error, &code) {
                    self.error = Some((code, e));
                }
            }
        }
        Ok(())
    }
}

/// `errorDistribution`, summed as it is read (deadline aborts of `-z` left out).
#[derive(Debug, Default)]
struct ErrorCounts {
    errors: u64,
    /// The error of the first member in key order whose value is not a count.
    error: Option<(String, IngestError)>,
}

impl Fold for ErrorCounts {
    fn member<'de, A: MapAccess<'de>>(
        &mut self,
        message: String,
        map: &mut A,
    ) -> Result<(), A::Error> {
        let n: Scalar = map.next_value()?;
        match count(&n, &["errorDistribution", message.as_str()]) {
            Ok(n) => {
                if message != "aborted due to deadline" {
                    self.errors = self.errors.saturating_add(n);
                }
            }
            Err(e) => {
                if first_in_key_order(&self.error, &message) {
                    self.error = Some((message, e));
                }
            }
        }
        Ok(())
    }
}

// ---- Checks ----------------------------------------------------------------------------------

fn extract(doc: OhaDoc, label: Option<String>) -> Result<Extracted, IngestError> {
    let percentiles = match doc.percentiles {
        Some(Obj::Object(p)) => p,
        Some(_) => return Err(field_error(&["latencyPercentiles"], "must be an object")),
        None => {
            return Err(field_error(
                &["latencyPercentiles"],
                "missing: this is not oha `--output-format json` (`--json`) output",
            ))
        }
    };
    let label = match label {
        Some(l) => l,
        None => match &doc.url {
            Some(Scalar::Str(u)) if !u.trim().is_empty() => u.trim().to_owned(),
            _ => return Err(IngestError::new(
                "oha output names no endpoint: give this file a label (the upload part's name, \
                     e.g. the segment or endpoint it measured)",
            )),
        },
    };

    let [p50, p99, p999] = percentiles.found;
    let p50 = percentile(p50)?;
    let p99 = percentile(p99)?;
    let p999 = percentile(p999)?;
    let (k99, p99, k999, p999) = match (p99, p999) {
        (Some((k99, p99)), Some((k999, p999))) => (k99, p99, k999, p999),
        (p99, _) => {
            let missing = if p99.is_none() { "p99" } else { "p99.9" };
            return Err(field_error(
                &["latencyPercentiles", missing],
                "missing: oha writes p10…p99.99 in `latencyPercentiles`; was the file edited or cut?",
            ));
        }
    };
    let p50_us = p50.as_ref().map(|(k, v)| micros(k, *v)).transpose()?;
    let (p99_us, p999_us) = (micros(&k99, p99)?, micros(&k999, p999)?);
    if p50_us.is_some_and(|p50| p50 > p99_us) || p99_us > p999_us {
        return Err(field_error(
            &["latencyPercentiles"],
            "percentiles are not increasing (p50 ≤ p99 ≤ p99.9)",
        ));
    }
    cross_check_ms(doc.metrics, p50.map(|(_, v)| v), p99)?;

    let (responses, non_2xx) = status_counts(doc.status)?;
    let errors = error_count(doc.errors)?;
    if responses == 0 {
        return Err(field_error(
            &["statusCodeDistribution"],
            "no request got a response, so oha has no latency to report",
        ));
    }
    let samples = responses
        .checked_add(errors)
        .ok_or_else(|| IngestError::new("request counts overflow"))?;
    let (fastest, slowest) = match doc.summary {
        Some(Obj::Object(s)) => (s.fastest, s.slowest),
        _ => (None, None),
    };
    let extremes = [(fastest, 0.0), (slowest, 100.0)]
        .into_iter()
        .filter_map(|(v, percentile)| Some((percentile, v?.as_f64()?)));
    let points = percentiles
        .points
        .into_iter()
        .map(|(_, percentile, secs)| (percentile, secs))
        .chain(extremes)
        .filter_map(|(percentile, secs)| Some((percentile, micros("", secs).ok()?)));
    let distributions = percentile_points(points)
        .map(|d| (label.clone(), d))
        .into_iter()
        .collect();
    Ok(Extracted {
        distributions,
        format: Format::Oha,
        tool: Some("oha".to_owned()),
        labels: vec![LabelStats {
            label,
            samples,
            failures: Some(errors + non_2xx),
            p50_us,
            p99_us,
            p999_us,
        }],
        notes: Vec::new(),
    })
}

/// The value of the `latencyPercentiles` key found for a percentile, checked, with its key.
fn percentile(found: Option<(String, Scalar)>) -> Result<Option<(String, f64)>, IngestError> {
    let Some((key, v)) = found else {
        return Ok(None);
    };
    match v {
        Scalar::Number(x) => x
            .as_f64()
            .map(|x| Some((key.clone(), x)))
            .ok_or_else(|| field_error(&["latencyPercentiles", &key], "is not a number")),
        Scalar::Null => Err(field_error(
            &["latencyPercentiles", &key],
            "is null: oha writes null when no request got a response",
        )),
        _ => Err(field_error(
            &["latencyPercentiles", &key],
            "must be a number of seconds",
        )),
    }
}

/// A latency in seconds (`latencyPercentiles[key]`), checked, in microseconds (rounded).
fn micros(key: &str, v: f64) -> Result<u64, IngestError> {
    if !v.is_finite() || v < 0.0 {
        return Err(field_error(
            &["latencyPercentiles", key],
            format!("{v} is not a latency"),
        ));
    }
    if v > MAX_LATENCY_S {
        return Err(field_error(
            &["latencyPercentiles", key],
            format!(
                "{v} s is over one hour: oha writes seconds — was this file converted to \
                 milliseconds?"
            ),
        ));
    }
    Ok((v * 1e6).round() as u64)
}

/// `metrics.latency_ms` (recent oha, e.g. 1.16) repeats p50/p99 in milliseconds: they must agree.
fn cross_check_ms(
    metrics: Option<Obj<Metrics>>,
    p50_s: Option<f64>,
    p99_s: f64,
) -> Result<(), IngestError> {
    let Some(Obj::Object(Metrics {
        latency_ms: Some(Obj::Object(ms)),
    })) = metrics
    else {
        return Ok(());
    };
    for (key, secs, ms_v) in [("p50", p50_s, ms.p50), ("p99", Some(p99_s), ms.p99)] {
        let (Some(secs), Some(ms_v)) = (secs, ms_v.as_ref().and_then(Scalar::as_f64)) else {
            continue;
        };
        let want = secs * 1000.0;
        // oha rounds these to the µs (3 decimals of ms).
        if (ms_v - want).abs() > 0.001 + 1e-9 * want.abs() {
            return Err(field_error(
                &["metrics", "latency_ms", key],
                format!(
                    "{ms_v} ms disagrees with latencyPercentiles ({secs} s): the units of this file \
                     were changed (oha writes latencyPercentiles in seconds)"
                ),
            ));
        }
    }
    Ok(())
}

/// (responses, responses whose status is not 2xx) from `statusCodeDistribution`.
fn status_counts(dist: Option<Obj<StatusCounts>>) -> Result<(u64, u64), IngestError> {
    match dist {
        Some(Obj::Object(StatusCounts {
            error: Some((_, e)),
            ..
        })) => Err(e),
        Some(Obj::Object(d)) => Ok((d.responses, d.non_2xx)),
        Some(_) => Err(field_error(
            &["statusCodeDistribution"],
            "must be an object",
        )),
        None => Err(field_error(
            &["statusCodeDistribution"],
            "missing: oha writes the responses per status code there",
        )),
    }
}

/// Requests without a response, from `errorDistribution` (deadline aborts of `-z` left out).
fn error_count(dist: Option<Obj<ErrorCounts>>) -> Result<u64, IngestError> {
    match dist {
        Some(Obj::Object(ErrorCounts {
            error: Some((_, e)),
            ..
        })) => Err(e),
        Some(Obj::Object(d)) => Ok(d.errors),
        None | Some(Obj::Null) => Ok(0),
        Some(Obj::Other) => Err(field_error(&["errorDistribution"], "must be an object")),
    }
}

#[cfg(test)]
mod tests;
