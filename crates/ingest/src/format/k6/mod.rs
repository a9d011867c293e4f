//! k6 end-of-test summary JSON, both shapes:
//!
//! * `handleSummary(data)` returning `JSON.stringify(data)`: `{"root_group": …, "options": …,
//!   "state": …, "metrics": {"<metric>": {"type": "trend", "contains": "time", "values": {"avg": …,
//!   "med": …, "p(99)": …}, "thresholds": …}}}`;
//! * `k6 run --summary-export=out.json` (the legacy shape, made from the same data by k6's
//!   `oldJSONSummary`): `{"root_group": …, "metrics": {"<metric>": {"avg": …, "med": …, "p(99)": …}}}`
//!   — the values directly in the metric object, no `type`/`contains`, and a rate's `rate` renamed
//!   `value`.
//!
//! The shape is told per metric (an object with a `values` object is the `handleSummary` one). A
//! document whose metrics sit at the top level (no `metrics` key) is read too.
//!
//! **Labels.** Each sub-metric of `http_req_duration` is one label: `http_req_duration{name:inventory}`
//! → `inventory` (the `name` tag's value when the selector has one), any other selector → the
//! whole tag expression normalised as k6 does (trimmed, quotes dropped, sorted by key:
//! `{scenario: browse}` → `scenario:browse`). k6's built-in `http_req_duration{expected_response:true}`
//! is a filter, not an endpoint, and is skipped. The plain `http_req_duration` becomes the label
//! `http_req_duration` only when there is no other sub-metric. Two selectors giving the same label
//! (`{name:x}` and `{name:x,method:GET}`): the one with fewer tags wins; a tie is an error. Labels
//! come out sorted.
//!
//! **Percentiles.** Trend values are milliseconds (k6's `time` trends; `--summary-time-unit`
//! changes only the text summary). `p(99)` and `p(99.9)` are required (matched by number, so
//! `p(99.90)` works too), `med` or `p(50)` is taken when present. k6 exports only the stats listed in
//! `--summary-trend-stats` / `summaryTrendStats` (default `avg,min,med,max,p(90),p(95)`): a missing
//! one is an IngestError saying so. A value over one hour (3 600 000 ms) is rejected as implausible
//! (k6 writes milliseconds: such a value means other units or a broken file).
//!
//! **Distribution.** A label's percentile points are the stats above (`med`, `p(99)`,
//! `p(99.9)`), every other `p(N)` of the trend (N in 0–100, the first 32), `min` as 0 and `max`
//! as 100, each when a plausible number of ms; the label's p50 / p99 / p99.9 come only from
//! `med` (or `p(50)`), `p(99)` and `p(99.9)`.
//!
//! **Samples** of a label, first found of: the `count` of `http_reqs` with the same tags (a
//! sub-metric exists only when a threshold names it, e.g. `'http_reqs{name:inventory}': ['count>0']`);
//! the trend's own `count` stat (`--summary-trend-stats` with `count`); `passes + fails` of
//! `http_req_failed` with the same tags. None of them → IngestError naming the three ways.
//! **Failures**: `passes` of `http_req_failed` with the same tags — for that rate metric a "pass" is
//! a non-zero sample, i.e. a *failed* request (k6's text summary shows it as `✓`). k6 writes a
//! per-endpoint `http_req_failed{name:…}` only when a threshold names it: without one the label's
//! failures are **unknown** (`None`, never 0) and the extracted notes say so. A label with 0 samples is left out (nothing was measured); a file
//! where every label has 0 is an error.
//!
//! **Tool.** The summary carries no k6 version: `tool` is `"k6"`. [`Options`] are not used.
//!
//! **Size and memory.** The input is buffered up to
//! [`MAX_JSON_SUMMARY_BYTES`](crate::MAX_JSON_SUMMARY_BYTES) (4 MiB; k6 writes a few KiB): the
//! push that would cross it is refused with an error naming the limit. In `finish` the text is
//! read member by member: of each `http_req_duration`, `http_reqs` and `http_req_failed`
//! (sub-)metric only `type`, `contains`, the percentiles read (one key each), `count`,
//! `passes`, `fails`, and for the percentile points `min`, `max` and at most 32 other `p(N)`
//! (16 bytes each) are kept, for at most 10 000 such metrics (more is an error: a summary has
//! three per endpoint); every other metric and member (`root_group`, `options`, `state`,
//! thresholds, other stats) is validated and dropped. Errors carry the line (and column) of a
//! syntax error, or the JSON pointer of the field at fault (e.g.
//! `/metrics/http_req_duration{name:inventory}/values/p(99.9)`) and the line of that key.

mod extract;
pub mod points;

use std::collections::BTreeMap;

use serde::de::MapAccess;

use self::extract::extract;
use crate::framing::json::{
    contains, count, field_error, first_in_key_order, json_object_start, pointer, skip, Fold,
    JsonBuffer, Obj, Scalar,
};
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Longest plausible latency: one hour, in milliseconds.
const MAX_LATENCY_MS: f64 = 3_600_000.0;

/// Most `http_req_duration`, `http_reqs` and `http_req_failed` (sub-)metrics read from one
/// summary: three per endpoint for over 3 000 endpoints. It bounds what is kept from a summary of
/// tiny metrics, which the size cap alone would not.
const MAX_METRICS: usize = 10_000;

const DURATION: &str = "http_req_duration";
const REQS: &str = "http_reqs";
const FAILED: &str = "http_req_failed";

const TREND_STATS_HINT: &str = "k6 exports only the trend stats configured by \
    `--summary-trend-stats` (CLI) / `summaryTrendStats` (options), default \
    `avg,min,med,max,p(90),p(95)`: run k6 with e.g. `--summary-trend-stats=\"med,p(99),p(99.9),count\"`";

/// Whether the start of an input looks like this format: a JSON object with k6's metric names or
/// its `root_group`, and neither oha's `latencyPercentiles` nor a line of k6's raw points.
pub fn sniff(head: &[u8]) -> bool {
    if json_object_start(head).is_none()
        || contains(head, b"\"latencyPercentiles\"")
        || points::sniff(head)
    {
        return false;
    }
    contains(head, b"\"http_req_duration")
        || contains(head, b"\"root_group\"")
        || (contains(head, b"\"metrics\"") && contains(head, b"\"http_reqs"))
}

pub fn parser(_options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Ok(Box::new(K6Parser {
        buf: JsonBuffer::new("k6"),
    }))
}

struct K6Parser {
    buf: JsonBuffer,
}

impl Ingest for K6Parser {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.buf.push(chunk)
    }

    fn finish(self: Box<Self>) -> Result<Extracted, IngestError> {
        let doc = self.buf.parse::<K6Doc>()?;
        extract(&doc).map_err(|e| self.buf.locate(e))
    }
}

/// Tags of a sub-metric selector, normalised like k6's `AddSubmetric` (sorted by key).
type Tags = BTreeMap<String, String>;

/// `metric{k:v,…}` → (`metric`, tags); `None` tags for the plain metric; `None` when malformed.
fn split_key(key: &str) -> Option<(&str, Option<Tags>)> {
    let Some(open) = key.find('{') else {
        return Some((key.trim(), None));
    };
    let inner = key[open + 1..].trim_end().strip_suffix('}')?;
    let mut tags = Tags::new();
    for kv in inner.split(',').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once(':').unwrap_or((kv, ""));
        let k = k.trim().trim_matches(|c| c == '"' || c == '\'');
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
        tags.insert(k.to_owned(), v.to_owned());
    }
    if tags.is_empty() {
        return None;
    }
    Some((key[..open].trim(), Some(tags)))
}

fn label_of(tags: &Tags) -> String {
    match tags.get("name") {
        Some(name) if !name.is_empty() => name.clone(),
        _ => tags
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

// ---- What is read ----------------------------------------------------------------------------

/// The members of a k6 summary that are read; the others are validated and dropped. A member
/// repeated in an object keeps its last value (as a JSON object map does).
#[derive(Debug, Default)]
struct K6Doc {
    /// Whether the document has oha's `latencyPercentiles`.
    oha: bool,
    /// `metrics`.
    metrics: Option<Obj<Metrics>>,
    /// The metrics among the document's own members (used when it has no `metrics`).
    top: Metrics,
    /// Whether a member of the document is named `http_req_duration…`.
    top_duration: bool,
}

impl Fold for K6Doc {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "latencyPercentiles" => {
                self.oha = true;
                skip(map)
            }
            "metrics" => {
                self.metrics = Some(map.next_value()?);
                Ok(())
            }
            _ => {
                self.top_duration |= key.starts_with(DURATION);
                self.top.member(key, map)
            }
        }
    }
}

/// The metrics read (`http_req_duration`, `http_reqs`, `http_req_failed` and their sub-metrics),
/// by key, and the keys that are wrong: at most [`MAX_METRICS`].
#[derive(Debug, Default)]
struct Metrics {
    entries: BTreeMap<String, Entry>,
    /// Whether metrics were left out because there were more than [`MAX_METRICS`].
    too_many: bool,
}

#[derive(Debug)]
enum Entry {
    /// `http_req_duration{…` whose selector cannot be read.
    Malformed,
    /// Not an object.
    NotObject,
    /// An object whose `values` is not an object.
    ValuesNotObject,
    Metric(Box<MetricData>),
}

impl Fold for Metrics {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        let read = match split_key(&key) {
            None => key.starts_with(DURATION),
            Some((base, _)) => [DURATION, REQS, FAILED].contains(&base),
        };
        if !read {
            return skip(map);
        }
        if self.entries.len() >= MAX_METRICS && !self.entries.contains_key(&key) {
            self.too_many = true;
            return skip(map);
        }
        let entry = if split_key(&key).is_none() {
            skip(map)?;
            Entry::Malformed
        } else {
            match map.next_value::<Obj<MetricData>>()? {
                Obj::Object(m) if m.values == Values::NotObject => Entry::ValuesNotObject,
                Obj::Object(m) => Entry::Metric(Box::new(m)),
                Obj::Null | Obj::Other => Entry::NotObject,
            }
        };
        self.entries.insert(key, entry);
        Ok(())
    }
}

/// One metric object, either shape.
#[derive(Debug, Default)]
struct MetricData {
    /// `type` (`handleSummary` shape).
    kind: Option<Scalar>,
    /// `contains` (`handleSummary` shape).
    contains: Option<Scalar>,
    /// What the metric's (last) `values` member is.
    values: Values,
    /// The stats of `values` when it is an object (`handleSummary` shape), else those among the
    /// metric's own members (`--summary-export` shape).
    stats: Stats,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Values {
    #[default]
    Absent,
    Object,
    NotObject,
}

impl Fold for MetricData {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "type" => self.kind = Some(map.next_value()?),
            "contains" => self.contains = Some(map.next_value()?),
            "values" => match map.next_value::<Obj<Stats>>()? {
                Obj::Object(stats) => {
                    // The stats of `values` win over the metric's own, read before or after.
                    self.stats = stats;
                    self.values = Values::Object;
                }
                Obj::Null | Obj::Other => self.values = Values::NotObject,
            },
            _ if self.values == Values::Object => skip(map)?,
            _ => self.stats.member(key, map)?,
        }
        Ok(())
    }
}

/// The percentiles read from a trend, in this order.
const PERCENTILES: [f64; 3] = [50.0, 99.0, 99.9];

/// Most other `p(N)` stats of one metric kept as percentile points (k6 writes those of
/// `--summary-trend-stats`, a handful): with [`MAX_METRICS`], this bounds what is kept.
const MAX_OTHER_PERCENTILES: usize = 32;

/// The stats of a metric that are read.
#[derive(Debug, Default)]
struct Stats {
    /// For each of [`PERCENTILES`]: the first stat in key order naming it (`med` for 50, `p(N)`
    /// matched by number), with its value.
    percentiles: [Option<(String, Scalar)>; 3],
    count: Option<Scalar>,
    passes: Option<Scalar>,
    fails: Option<Scalar>,
    /// `min` and `max` when numbers (percentile points 0 and 100 of a trend).
    min: Option<f64>,
    max: Option<f64>,
    /// Every other `p(N)` (N in 0–100, not one of [`PERCENTILES`]) whose value is a number, as
    /// (N, value), the first [`MAX_OTHER_PERCENTILES`] in document order; a stat naming the same
    /// N again replaces the earlier one (as a repeated key does in a JSON object).
    other_percentiles: Vec<(f64, f64)>,
}

impl Stats {
    fn get(&self, stat: &str) -> Option<&Scalar> {
        match stat {
            "count" => self.count.as_ref(),
            "passes" => self.passes.as_ref(),
            "fails" => self.fails.as_ref(),
            _ => None,
        }
    }
}

/// The percentile a trend stat names: `med` is 50, `p(N)` is N.
fn stat_percentile(key: &str) -> Option<f64> {
    if key == "med" {
        return Some(50.0);
    }
    key.strip_prefix("p(")
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|n| n.trim().parse::<f64>().ok())
}

impl Fold for Stats {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        let slot = match key.as_str() {
            "count" => &mut self.count,
            "passes" => &mut self.passes,
            "fails" => &mut self.fails,
            "min" => {
                self.min = map.next_value::<Scalar>()?.as_f64();
                return Ok(());
            }
            "max" => {
                self.max = map.next_value::<Scalar>()?.as_f64();
                return Ok(());
            }
            _ => {
                let Some(n) = stat_percentile(&key) else {
                    return skip(map);
                };
                let Some(i) = PERCENTILES.iter().position(|p| (n - p).abs() < 1e-9) else {
                    return self.other_percentile(n, map);
                };
                if !first_in_key_order(&self.percentiles[i], &key) {
                    return skip(map);
                }
                self.percentiles[i] = Some((key, map.next_value()?));
                return Ok(());
            }
        };
        *slot = Some(map.next_value()?);
        Ok(())
    }
}

impl Stats {
    /// Reads `p(N)` for an N not in [`PERCENTILES`] into [`Stats::other_percentiles`].
    fn other_percentile<'de, A: MapAccess<'de>>(
        &mut self,
        n: f64,
        map: &mut A,
    ) -> Result<(), A::Error> {
        if !(n.is_finite() && (0.0..=100.0).contains(&n)) {
            return skip(map);
        }
        let known = self.other_percentiles.iter().position(|&(p, _)| p == n);
        if known.is_none() && self.other_percentiles.len() >= MAX_OTHER_PERCENTILES {
            return skip(map);
        }
        let value = map.next_value::<Scalar>()?.as_f64();
        match (known, value) {
            (Some(i), Some(v)) => self.other_percentiles[i].1 = v,
            (Some(i), None) => {
                self.other_percentiles.remove(i);
            }
            (None, Some(v)) => self.other_percentiles.push((n, v)),
            (None, None) => {}
        }
        Ok(())
    }
}

// ---- Checks ----------------------------------------------------------------------------------

#[cfg(test)]
mod tests;
