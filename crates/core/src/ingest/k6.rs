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
//! **Samples** of a label, first found of: the `count` of `http_reqs` with the same tags (a
//! sub-metric exists only when a threshold names it, e.g. `'http_reqs{name:inventory}': ['count>0']`);
//! the trend's own `count` stat (`--summary-trend-stats` with `count`); `passes + fails` of
//! `http_req_failed` with the same tags. None of them → IngestError naming the three ways.
//! **Failures**: `passes` of `http_req_failed` with the same tags — for that rate metric a "pass" is
//! a non-zero sample, i.e. a *failed* request (k6's text summary shows it as `✓`); 0 when the file
//! has no such (sub-)metric. A label with 0 samples is left out (nothing was measured); a file
//! where every label has 0 is an error.
//!
//! **Tool.** The summary carries no k6 version: `tool` is `"k6"`. [`Options`] are not used.
//!
//! **Size and memory.** The input is buffered up to
//! [`MAX_JSON_SUMMARY_BYTES`](super::MAX_JSON_SUMMARY_BYTES) (4 MiB; k6 writes a few KiB): the
//! push that would cross it is refused with an error naming the limit. In `finish` the text is
//! read member by member: of each `http_req_duration`, `http_reqs` and `http_req_failed`
//! (sub-)metric only `type`, `contains`, the percentiles read (one key each) and `count`,
//! `passes`, `fails` are kept, for at most 10 000 such metrics (more is an error: a summary has
//! three per endpoint); every other metric and member (`root_group`, `options`, `state`,
//! thresholds, other stats) is validated and dropped. Errors carry the line (and column) of a
//! syntax error, or the JSON pointer of the field at fault (e.g.
//! `/metrics/http_req_duration{name:inventory}/values/p(99.9)`) and the line of that key.

use std::collections::BTreeMap;

use serde::de::MapAccess;

use super::json::{
    contains, count, field_error, first_in_key_order, json_object_start, pointer, skip, Fold,
    JsonBuffer, Obj, Scalar,
};
use super::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

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
/// its `root_group`, and not oha's `latencyPercentiles`.
pub fn sniff(head: &[u8]) -> bool {
    if json_object_start(head).is_none() || contains(head, b"\"latencyPercentiles\"") {
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

/// The stats of a metric that are read.
#[derive(Debug, Default)]
struct Stats {
    /// For each of [`PERCENTILES`]: the first stat in key order naming it (`med` for 50, `p(N)`
    /// matched by number), with its value.
    percentiles: [Option<(String, Scalar)>; 3],
    count: Option<Scalar>,
    passes: Option<Scalar>,
    fails: Option<Scalar>,
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
            _ => {
                let Some(n) = stat_percentile(&key) else {
                    return skip(map);
                };
                let Some(i) = PERCENTILES.iter().position(|p| (n - p).abs() < 1e-9) else {
                    return skip(map);
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

// ---- Checks ----------------------------------------------------------------------------------

/// One metric of the document: its key, tags and stats (either shape).
struct Metric<'a> {
    key: &'a str,
    /// The metric's name without the selector (`http_req_duration`).
    base: &'a str,
    tags: Option<Tags>,
    data: &'a MetricData,
    values: &'a Stats,
    /// The JSON path of `values`.
    path: Vec<&'a str>,
}

impl Metric<'_> {
    fn at(&self, stat: &str) -> String {
        let mut p: Vec<&str> = self.path.clone();
        p.push(stat);
        pointer(&p)
    }

    fn err(&self, stat: &str, message: impl Into<String>) -> IngestError {
        IngestError::new(message).field(self.at(stat))
    }

    /// Checks the `type` (and `contains`) of the handleSummary shape.
    fn check_type(&self, want: &str, contains: Option<&str>) -> Result<(), IngestError> {
        let mut base = self.path.clone();
        if base.last() == Some(&"values") {
            base.pop();
        }
        for (field, want, got) in [
            ("type", Some(want), &self.data.kind),
            ("contains", contains, &self.data.contains),
        ] {
            let (Some(want), Some(got)) = (want, got) else {
                continue;
            };
            if got.as_str() != Some(want) {
                let mut p = base.clone();
                p.push(field);
                return Err(field_error(
                    &p,
                    format!("is {got}, expected \"{want}\" for k6's {}", self.key),
                ));
            }
        }
        Ok(())
    }

    fn count(&self, stat: &str) -> Result<Option<u64>, IngestError> {
        match self.values.get(stat) {
            None => Ok(None),
            Some(v) => {
                let mut p = self.path.clone();
                p.push(stat);
                count(v, &p).map(Some)
            }
        }
    }

    /// The trend stat found for `PERCENTILES[i]` (`med` for 50, `p(N)` matched by number): key
    /// and value.
    fn percentile(&self, i: usize) -> Result<Option<(&str, f64)>, IngestError> {
        let Some((key, v)) = &self.values.percentiles[i] else {
            return Ok(None);
        };
        match v {
            Scalar::Number(n) => n
                .as_f64()
                .map(|v| Some((key.as_str(), v)))
                .ok_or_else(|| self.err(key, "is not a number")),
            Scalar::Null => Err(self.err(key, "is null")),
            _ => Err(self.err(key, "must be a number")),
        }
    }

    /// A required percentile, in µs.
    fn required_us(&self, i: usize, name: &str) -> Result<u64, IngestError> {
        match self.percentile(i)? {
            Some((key, ms)) => self.micros(key, ms),
            None => Err(self.err(
                name,
                format!(
                    "missing from the summary of {}: {TREND_STATS_HINT}",
                    self.key
                ),
            )),
        }
    }

    fn micros(&self, stat: &str, ms: f64) -> Result<u64, IngestError> {
        if !ms.is_finite() || ms < 0.0 {
            return Err(self.err(stat, format!("{ms} is not a latency")));
        }
        if ms > MAX_LATENCY_MS {
            return Err(self.err(
                stat,
                format!("{ms} ms is over one hour: k6 writes trend values in milliseconds"),
            ));
        }
        Ok((ms * 1000.0).round() as u64)
    }
}

fn extract(doc: &K6Doc) -> Result<Extracted, IngestError> {
    if doc.oha {
        return Err(field_error(
            &["latencyPercentiles"],
            "this is oha output, not a k6 summary: upload it as format oha",
        ));
    }
    let (metrics, root): (&Metrics, Vec<&str>) =
        match &doc.metrics {
            Some(Obj::Object(m)) => (m, vec!["metrics"]),
            Some(_) => return Err(field_error(&["metrics"], "must be an object")),
            None if doc.top_duration => (&doc.top, vec![]),
            None => return Err(field_error(
                &["metrics"],
                "missing: this is not a k6 summary (`--summary-export` or `handleSummary()` JSON)",
            )),
        };

    if metrics.too_many {
        let message = format!(
            "more than {MAX_METRICS} {DURATION}, {REQS} and {FAILED} (sub-)metrics: this is not \
             the summary of a load test"
        );
        return Err(if root.is_empty() {
            IngestError::new(message)
        } else {
            field_error(&root, message)
        });
    }

    let mut all: Vec<Metric<'_>> = Vec::new();
    for (key, entry) in &metrics.entries {
        let mut path = root.clone();
        path.push(key.as_str());
        let data = match entry {
            Entry::Malformed => {
                return Err(field_error(
                    &path,
                    "malformed sub-metric name (expected `metric{tag:value}`)",
                ))
            }
            Entry::NotObject => return Err(field_error(&path, "must be an object")),
            Entry::ValuesNotObject => {
                path.push("values");
                return Err(field_error(&path, "must be an object"));
            }
            Entry::Metric(data) => data,
        };
        let Some((base, tags)) = split_key(key) else {
            continue; // Only `Malformed` entries have such keys.
        };
        if data.values == Values::Object {
            path.push("values");
        }
        all.push(Metric {
            key: key.as_str(),
            base,
            tags,
            data,
            values: &data.stats,
            path,
        });
    }

    let find =
        |base: &str, tags: &Option<Tags>| all.iter().find(|m| m.base == base && &m.tags == tags);

    // The trends that are labels.
    let durations: Vec<&Metric<'_>> = all.iter().filter(|m| m.base == DURATION).collect();
    let subs: Vec<&Metric<'_>> = durations
        .iter()
        .copied()
        .filter(|m| {
            m.tags
                .as_ref()
                .is_some_and(|t| t.keys().any(|k| k != "expected_response"))
        })
        .collect();
    let chosen: Vec<(String, &Metric<'_>)> = if subs.is_empty() {
        match durations.iter().find(|m| m.tags.is_none()) {
            Some(plain) => vec![(DURATION.to_owned(), *plain)],
            None => {
                let mut p = root.clone();
                p.push(DURATION);
                return Err(field_error(
                    &p,
                    "missing: the k6 summary has no http_req_duration (did the script make HTTP \
                     requests?)",
                ));
            }
        }
    } else {
        let mut by_label: BTreeMap<String, &Metric<'_>> = BTreeMap::new();
        for m in subs {
            let tags = m.tags.as_ref().expect("sub-metric has tags");
            let label = label_of(tags);
            match by_label.get(&label) {
                Some(other) => {
                    let (n, o) = (tags.len(), other.tags.as_ref().map_or(0, Tags::len));
                    if n == o {
                        return Err(field_error(
                            &m.path[..m.path.len().min(root.len() + 1)],
                            format!(
                                "gives the same label \"{label}\" as {}: name the sub-metrics apart",
                                other.key
                            ),
                        ));
                    }
                    if n < o {
                        by_label.insert(label, m);
                    }
                }
                None => {
                    by_label.insert(label, m);
                }
            }
        }
        by_label.into_iter().collect()
    };

    let mut labels = Vec::with_capacity(chosen.len());
    for (label, trend) in chosen {
        trend.check_type("trend", Some("time"))?;
        let p50_us = match trend.percentile(0)? {
            Some((key, ms)) => Some(trend.micros(key, ms)?),
            None => None,
        };
        let p99_us = trend.required_us(1, "p(99)")?;
        let p999_us = trend.required_us(2, "p(99.9)")?;
        if p50_us.is_some_and(|p| p > p99_us) || p99_us > p999_us {
            return Err(trend.err(
                "p(99.9)",
                "percentiles are not increasing (med ≤ p(99) ≤ p(99.9))",
            ));
        }

        let reqs = find(REQS, &trend.tags);
        let failed = find(FAILED, &trend.tags);
        if let Some(r) = reqs {
            r.check_type("counter", None)?;
        }
        if let Some(f) = failed {
            f.check_type("rate", None)?;
        }
        let fail_counts = match failed {
            Some(f) => Some((
                f.count("passes")?
                    .ok_or_else(|| f.err("passes", "missing (failed requests)"))?,
                f.count("fails")?,
            )),
            None => None,
        };
        let samples = match (
            reqs.map(|r| r.count("count")).transpose()?.flatten(),
            trend.count("count")?,
        ) {
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => match fail_counts {
                Some((passes, Some(fails))) => passes.saturating_add(fails),
                _ => {
                    return Err(trend.err(
                        "count",
                        format!(
                            "cannot tell how many requests {} measured: export `count` in \
                             `--summary-trend-stats`, or add a threshold on `http_reqs{}` \
                             or `http_req_failed{}` so k6 writes that sub-metric",
                            trend.key,
                            selector(&trend.tags),
                            selector(&trend.tags),
                        ),
                    ))
                }
            },
        };
        let failures = fail_counts.map_or(0, |(passes, _)| passes);
        if failures > samples {
            let f = failed.expect("failures come from http_req_failed");
            return Err(f.err(
                "passes",
                format!("{failures} failed requests but only {samples} requests for \"{label}\""),
            ));
        }
        if samples == 0 {
            continue;
        }
        labels.push(LabelStats {
            label,
            samples,
            failures,
            p50_us,
            p99_us,
            p999_us,
        });
    }
    if labels.is_empty() {
        return Err(IngestError::new(
            "the k6 summary has no request in any http_req_duration label",
        ));
    }
    Ok(Extracted {
        format: Format::K6,
        tool: Some("k6".to_owned()),
        labels,
    })
}

fn selector(tags: &Option<Tags>) -> String {
    match tags {
        None => String::new(),
        Some(t) => format!(
            "{{{}}}",
            t.iter()
                .map(|(k, v)| format!("{k}:{v}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{detect, read_all, MAX_JSON_SUMMARY_BYTES};
    use proptest::prelude::*;

    const HANDLE_SUMMARY: &[u8] =
        include_bytes!("../../../../tests/fixtures/k6/handle-summary.json");
    const SUMMARY_EXPORT: &[u8] =
        include_bytes!("../../../../tests/fixtures/k6/summary-export.json");
    const DEFAULT_STATS: &[u8] =
        include_bytes!("../../../../tests/fixtures/k6/default-trend-stats.json");
    const OHA: &[u8] = include_bytes!("../../../../tests/fixtures/oha/inventory.json");

    fn read(input: &[u8], chunk: usize) -> Result<Extracted, IngestError> {
        read_all(parser(&Options::default()).unwrap(), input, chunk)
    }

    fn stats(
        label: &str,
        samples: u64,
        failures: u64,
        p50: Option<u64>,
        p99: u64,
        p999: u64,
    ) -> LabelStats {
        LabelStats {
            label: label.to_owned(),
            samples,
            failures,
            p50_us: p50,
            p99_us: p99,
            p999_us: p999,
        }
    }

    /// A handleSummary document with the given metrics (JSON members).
    fn hs(metrics: &str) -> String {
        format!(
            r#"{{"root_group": {{"name": "", "path": "", "id": "d41d8cd98f00b204e9800998ecf8427e", "groups": [], "checks": []}}, "metrics": {{{metrics}}}}}"#
        )
    }

    fn trend(key: &str, values: &str) -> String {
        format!(r#""{key}": {{"type": "trend", "contains": "time", "values": {{{values}}}}}"#)
    }

    #[test]
    fn handle_summary_shape_with_sub_metrics() {
        let d = hs(&[
            trend("http_req_duration", r#""avg": 9, "med": 4.5, "p(99)": 40, "p(99.9)": 90"#),
            trend("http_req_duration{expected_response:true}", r#""med": 4, "p(99)": 30, "p(99.9)": 80"#),
            trend("http_req_duration{name:inventory}", r#""med": 4.2501, "p(99)": 30.1, "p(99.9)": 80.0004"#),
            trend("http_req_duration{ name : 'payment' }", r#""p(50)": 16, "p(99)": 61, "p(99.9)": 151, "count": 600"#),
            r#""http_reqs": {"type": "counter", "contains": "default", "values": {"count": 1200, "rate": 10}}"#.into(),
            r#""http_reqs{name:inventory}": {"type": "counter", "contains": "default", "values": {"count": 600, "rate": 5}}"#.into(),
            r#""http_req_failed{name:payment}": {"type": "rate", "contains": "default", "values": {"rate": 0.02, "passes": 12, "fails": 588}}"#.into(),
            r#""http_req_failed{name:inventory}": {"type": "rate", "contains": "default", "values": {"rate": 0, "passes": 0, "fails": 600}}"#.into(),
        ]
        .join(","));
        let e = read(d.as_bytes(), 4096).unwrap();
        assert_eq!(e.format, Format::K6);
        assert_eq!(e.tool.as_deref(), Some("k6"));
        assert_eq!(
            e.labels,
            vec![
                stats("inventory", 600, 0, Some(4250), 30_100, 80_000),
                stats("payment", 600, 12, Some(16_000), 61_000, 151_000),
            ]
        );
    }

    #[test]
    fn summary_export_shape() {
        let d = r#"{
    "root_group": {"name": "", "path": "", "id": "d41d8cd98f00b204e9800998ecf8427e", "groups": {}, "checks": {}},
    "metrics": {
        "http_req_duration": {"avg": 5.1, "min": 1.2, "med": 4.9, "max": 120.5, "p(90)": 7.7, "p(95)": 9.3, "p(99)": 33.33, "p(99.9)": 99.999},
        "http_req_duration{expected_response:true}": {"avg": 5.0, "med": 4.8, "p(99)": 30, "p(99.9)": 90},
        "http_reqs": {"count": 2000, "rate": 66.6},
        "http_req_failed": {"passes": 20, "fails": 1980, "value": 0.01, "thresholds": {"rate<0.05": false}}
    }
}"#;
        let e = read(d.as_bytes(), 7).unwrap();
        assert_eq!(
            e.labels,
            vec![stats(
                "http_req_duration",
                2000,
                20,
                Some(4900),
                33_330,
                99_999
            )]
        );
    }

    #[test]
    fn label_rules() {
        let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
            // A tag other than name: the whole (normalised) expression.
            (
                vec![trend(
                    "http_req_duration{scenario: browse}",
                    r#""p(99)": 1, "p(99.9)": 2, "count": 3"#,
                )],
                vec!["scenario:browse"],
            ),
            (
                vec![trend(
                    "http_req_duration{url:http://127.0.0.1:1/a,method:GET}",
                    r#""p(99)": 1, "p(99.9)": 2, "count": 3"#,
                )],
                vec!["method:GET,url:http://127.0.0.1:1/a"],
            ),
            // name wins among several tags; the narrower selector of the same name is dropped.
            (
                vec![
                    trend(
                        "http_req_duration{name:x,status:200}",
                        r#""p(99)": 1, "p(99.9)": 2, "count": 3"#,
                    ),
                    trend(
                        "http_req_duration{name:x}",
                        r#""p(99)": 5, "p(99.9)": 6, "count": 7"#,
                    ),
                    trend(
                        "http_req_duration{name:'y',status:200}",
                        r#""p(99)": 1, "p(99.9)": 2, "count": 3"#,
                    ),
                ],
                vec!["x", "y"],
            ),
            // The plain metric is ignored when there are sub-metrics.
            (
                vec![
                    trend(
                        "http_req_duration",
                        r#""p(99)": 1, "p(99.9)": 2, "count": 3"#,
                    ),
                    trend(
                        "http_req_duration{name:z}",
                        r#""p(99)": 1, "p(99.9)": 2, "count": 3"#,
                    ),
                ],
                vec!["z"],
            ),
        ];
        for (metrics, want) in cases {
            let e = read(hs(&metrics.join(",")).as_bytes(), 64).unwrap();
            let got: Vec<&str> = e.labels.iter().map(|l| l.label.as_str()).collect();
            assert_eq!(got, want, "{metrics:?}");
        }
        let e = read(
            hs(&[
                trend(
                    "http_req_duration{name:x,status:200}",
                    r#""p(99)": 1, "p(99.9)": 2, "count": 3"#,
                ),
                trend(
                    "http_req_duration{name:x}",
                    r#""p(99)": 5, "p(99.9)": 6, "count": 7"#,
                ),
            ]
            .join(","))
            .as_bytes(),
            64,
        )
        .unwrap();
        assert_eq!(e.labels, vec![stats("x", 7, 0, None, 5000, 6000)]);
    }

    #[test]
    fn sample_sources_in_order() {
        let t = trend(
            "http_req_duration{name:a}",
            r#""p(99)": 1, "p(99.9)": 2, "count": 50"#,
        );
        let reqs = r#""http_reqs{name:a}": {"values": {"count": 60}}"#;
        let failed = r#""http_req_failed{name:a}": {"values": {"passes": 3, "fails": 67}}"#;
        let no_count = trend("http_req_duration{name:a}", r#""p(99)": 1, "p(99.9)": 2"#);
        for (metrics, samples, failures) in [
            (vec![t.as_str(), reqs, failed], 60, 3),
            (vec![t.as_str(), failed], 50, 3),
            (vec![no_count.as_str(), failed], 70, 3),
            (vec![t.as_str()], 50, 0),
        ] {
            let e = read(hs(&metrics.join(",")).as_bytes(), 64).unwrap();
            assert_eq!(
                (e.labels[0].samples, e.labels[0].failures),
                (samples, failures),
                "{metrics:?}"
            );
        }
        // Zero-sample labels are left out; all zero is an error.
        let zero = trend(
            "http_req_duration{name:b}",
            r#""p(99)": 0, "p(99.9)": 0, "count": 0"#,
        );
        let e = read(hs(&[t.as_str(), zero.as_str()].join(",")).as_bytes(), 64).unwrap();
        assert_eq!(e.labels.len(), 1);
        let err = read(hs(&zero).as_bytes(), 64).unwrap_err();
        assert!(err.message.contains("no request"), "{err}");
    }

    /// (metrics, expected field, part of the message).
    #[test]
    fn errors_name_the_field() {
        let hint = "--summary-trend-stats";
        let cases: Vec<(String, &str, &str)> = vec![
            (trend("http_req_duration{name:a}", r#""med": 1, "p(99)": 2, "count": 3"#), "/metrics/http_req_duration{name:a}/values/p(99.9)", hint),
            (trend("http_req_duration{name:a}", r#""med": 1, "p(99.9)": 2, "count": 3"#), "/metrics/http_req_duration{name:a}/values/p(99)", hint),
            (trend("http_req_duration{name:a}", r#""p(99)": 2, "p(99.9)": 3"#), "/metrics/http_req_duration{name:a}/values/count", "how many requests"),
            (trend("http_req_duration{name:a}", r#""p(99)": 2, "p(99.9)": null, "count": 3"#), "/metrics/http_req_duration{name:a}/values/p(99.9)", "null"),
            (trend("http_req_duration{name:a}", r#""p(99)": "2", "p(99.9)": 3, "count": 3"#), "/metrics/http_req_duration{name:a}/values/p(99)", "number"),
            (trend("http_req_duration{name:a}", r#""p(99)": 2, "p(99.9)": 4000000, "count": 3"#), "/metrics/http_req_duration{name:a}/values/p(99.9)", "milliseconds"),
            (trend("http_req_duration{name:a}", r#""p(99)": -2, "p(99.9)": 4, "count": 3"#), "/metrics/http_req_duration{name:a}/values/p(99)", "not a latency"),
            (trend("http_req_duration{name:a}", r#""p(99)": 5, "p(99.9)": 4, "count": 3"#), "/metrics/http_req_duration{name:a}/values/p(99.9)", "increasing"),
            (trend("http_req_duration{name:a}", r#""p(99)": 2, "p(99.9)": 3, "count": 2.5"#), "/metrics/http_req_duration{name:a}/values/count", "whole number"),
            (
                r#""http_req_duration{name:a}": {"type": "counter", "values": {"p(99)": 1, "p(99.9)": 2, "count": 3}}"#.into(),
                "/metrics/http_req_duration{name:a}/type",
                "trend",
            ),
            (
                r#""http_req_duration{name:a}": {"type": "trend", "contains": "default", "values": {"p(99)": 1, "p(99.9)": 2, "count": 3}}"#.into(),
                "/metrics/http_req_duration{name:a}/contains",
                "time",
            ),
            (r#""http_req_duration{name:a": {"p(99)": 1}"#.into(), "/metrics/http_req_duration{name:a", "malformed"),
            (r#""http_req_duration": 5"#.into(), "/metrics/http_req_duration", "object"),
            (r#""http_req_duration": {"values": []}"#.into(), "/metrics/http_req_duration/values", "object"),
            (r#""http_reqs": {"count": 5}"#.into(), "/metrics/http_req_duration", "missing"),
            (
                format!(
                    "{},{}",
                    trend("http_req_duration{name:a}", r#""p(99)": 2, "p(99.9)": 3, "count": 3"#),
                    r#""http_req_failed{name:a}": {"values": {"passes": 9, "fails": 0}}"#
                ),
                "/metrics/http_req_failed{name:a}/values/passes",
                "only 3",
            ),
            (
                format!(
                    "{},{}",
                    trend("http_req_duration{name:a,x:1}", r#""p(99)": 2, "p(99.9)": 3, "count": 3"#),
                    trend("http_req_duration{name:a,y:1}", r#""p(99)": 2, "p(99.9)": 3, "count": 3"#)
                ),
                "/metrics/http_req_duration{name:a,y:1}",
                "same label",
            ),
            (
                format!(
                    "{},{}",
                    trend("http_req_duration{name:a/b}", r#""p(99)": 2, "p(99.9)": 3, "count": 3"#),
                    r#""http_reqs{name:a/b}": {"values": {"count": -1}}"#
                ),
                "/metrics/http_reqs{name:a~1b}/values/count",
                "whole number",
            ),
        ];
        for (metrics, field, msg) in cases {
            let input = hs(&metrics);
            let err = read(input.as_bytes(), 5).unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{input}\n{err}");
            assert!(err.message.contains(msg), "{input}\n{err}");
        }
        let err = read(br#"{"root_group": {}}"#, 3).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("/metrics"));
        let err = read(br#"{"metrics": []}"#, 3).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("/metrics"));
    }

    #[test]
    fn metrics_at_the_top_level() {
        let d = r#"{"http_req_duration": {"med": 1, "p(99)": 2, "p(99.9)": 3}, "http_reqs": {"count": 10}}"#;
        assert_eq!(
            read(d.as_bytes(), 3).unwrap().labels,
            vec![stats("http_req_duration", 10, 0, Some(1000), 2000, 3000)]
        );
    }

    #[test]
    fn malformed_truncated_empty_and_foreign_inputs() {
        let truncated = &HANDLE_SUMMARY[..HANDLE_SUMMARY.len() * 2 / 3];
        let cases: Vec<(&[u8], &str, bool)> = vec![
            (b"", "empty", false),
            (b"\n \n", "empty", false),
            (truncated, "truncated", true),
            (
                b"{\n\"metrics\": {\n\"http_req_duration\": {\"p(99)\": 1 \"p(99.9)\": 2}}}",
                "invalid JSON",
                true,
            ),
            (b"Name,# requests\n", "expected a JSON object", true),
            (
                b"     data_received..................: 1.2 MB\n",
                "expected a JSON object",
                true,
            ),
            (OHA, "not a k6 summary", true),
        ];
        for (input, msg, has_line) in cases {
            for chunk in [1, 7, input.len().max(1)] {
                let err = read(input, chunk).unwrap_err();
                assert!(err.message.contains(msg), "{err}");
                assert_eq!(err.line.is_some(), has_line, "{err}");
            }
        }
        let err = read(
            b"{\n\"metrics\": {\n\"http_req_duration\": {\"p(99)\": 1 \"p(99.9)\": 2}}}",
            4096,
        )
        .unwrap_err();
        assert_eq!(err.line, Some(3));
        assert_eq!(err.field.as_deref(), Some("near key \"p(99)\""));
    }

    /// Semantic errors carry the line of the field (found in the text), not only its pointer.
    #[test]
    fn semantic_errors_have_the_line_of_the_field() {
        let text = String::from_utf8(HANDLE_SUMMARY.to_vec()).unwrap();
        let bad = text.replacen("\"p(99.9)\": 81.021187", "\"p(99.9)\": -1", 1);
        let err = read(bad.as_bytes(), 7).unwrap_err();
        assert_eq!(
            err.field.as_deref(),
            Some("/metrics/http_req_duration{name:inventory}/values/p(99.9)")
        );
        assert_eq!(err.line, Some(148), "{err}");
        // A missing stat: the line of its parent (`values`).
        let missing = text.replacen("\"p(99.9)\": 81.021187,", "", 1);
        let err = read(missing.as_bytes(), 7).unwrap_err();
        assert!(err.message.contains("--summary-trend-stats"), "{err}");
        assert_eq!(err.line, Some(140), "{err}");
        assert!(missing.lines().nth(139).unwrap().contains("\"values\""));
    }

    #[test]
    fn chunk_boundaries_do_not_matter() {
        for input in [HANDLE_SUMMARY, SUMMARY_EXPORT] {
            let whole = read(input, input.len()).unwrap();
            for chunk in [1, 7] {
                assert_eq!(read(input, chunk).unwrap(), whole, "chunk {chunk}");
            }
        }
    }

    /// An input of exactly the cap is read; one byte more is refused by the push that crosses
    /// the cap (not at `finish`), with the limit in the message.
    #[test]
    fn input_one_byte_over_the_cap_is_refused_at_the_push_that_crosses_it() {
        let mut at_cap = HANDLE_SUMMARY.to_vec();
        at_cap.resize(MAX_JSON_SUMMARY_BYTES, b'\n');
        assert_eq!(
            read(&at_cap, 1 << 16).unwrap(),
            read(HANDLE_SUMMARY, 4096).unwrap()
        );

        let mut over = at_cap;
        over.push(b'\n');
        let chunks: Vec<&[u8]> = over.chunks(1 << 16).collect();
        assert_eq!(chunks.last().unwrap().len(), 1);
        let mut p = parser(&Options::default()).unwrap();
        for (i, chunk) in chunks.iter().enumerate() {
            let pushed = p.push(chunk);
            if i + 1 < chunks.len() {
                pushed.unwrap();
                continue;
            }
            let err = pushed.unwrap_err();
            assert!(err.message.starts_with("k6 JSON"), "{err}");
            assert!(
                err.message.contains("limit of 4 MiB (4194304 bytes)"),
                "{err}"
            );
            assert_eq!(p.finish().unwrap_err(), err);
            return;
        }
        unreachable!("the last push was refused");
    }

    /// Members that are not read cost nothing but their text: a 1 MiB string in `root_group`,
    /// metrics that are not read, thresholds and stats that are not read.
    #[test]
    fn big_members_that_are_not_read_are_dropped() {
        let big = "x".repeat(1 << 20);
        let numbers = vec!["1.5"; 100_000].join(",");
        let text = std::str::from_utf8(HANDLE_SUMMARY).unwrap();
        let d = text
            .replacen(r#""name": "","#, &format!(r#""name": "{big}","#), 1)
            .replacen(
                r#""metrics": {"#,
                &format!(
                    r#""metrics": {{"data_received": {{"type": "counter", "values": {{"count": "{big}", "all": [{numbers}]}}}},"#
                ),
                1,
            )
            .replacen(
                r#""thresholds": {"#,
                &format!(r#""thresholds": {{"{big}": {{"ok": true}}, "#),
                1,
            )
            .replacen(
                r#""values": {"#,
                &format!(r#""values": {{"avg": [{numbers}], "#),
                1,
            );
        assert!(d.len() > 3 << 20 && d.len() < MAX_JSON_SUMMARY_BYTES);
        assert_eq!(
            read(d.as_bytes(), 1 << 16).unwrap(),
            read(HANDLE_SUMMARY, 4096).unwrap()
        );
    }

    /// The typed reading gives what reading a JSON tree gave: a metric (or `metrics`, or a stat)
    /// repeated keeps its last value; percentiles and faults are found in key order.
    #[test]
    fn repeated_members_and_key_order() {
        let t = trend(
            "http_req_duration{name:a}",
            r#""p(99)": 1, "p(99.9)": 2, "count": 3"#,
        );
        let t2 = trend(
            "http_req_duration{name:a}",
            r#""p(99)": 5, "p(99.9)": 6, "count": 3, "count": 7"#,
        );
        let e = read(hs(&format!("{t},{t2}")).as_bytes(), 64).unwrap();
        assert_eq!(e.labels, vec![stats("a", 7, 0, None, 5000, 6000)]);
        let d = format!(r#"{{"metrics": {{"x": 1}}, {}"#, &hs(&t)[1..]);
        assert_eq!(read(d.as_bytes(), 64).unwrap().labels[0].p99_us, 1000);
        // `med` comes before `p(50)` in key order, wherever it is written.
        let t = trend(
            "http_req_duration{name:a}",
            r#""p(50)": 0.5, "p(99)": 1, "p(99.9)": 2, "count": 3, "med": 0.25"#,
        );
        let e = read(hs(&t).as_bytes(), 64).unwrap();
        assert_eq!(e.labels[0].p50_us, Some(250));
        // Two faults: the one of the first key in key order is reported.
        let d = hs(&[
            r#""http_req_duration{name:b": {}"#.to_owned(),
            r#""http_req_duration": 5"#.to_owned(),
        ]
        .join(","));
        let err = read(d.as_bytes(), 64).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("/metrics/http_req_duration"));
        // A trend with `values` and stats of its own: `values` is read.
        let d = hs(
            r#""http_req_duration": {"p(99)": 9, "values": {"p(99)": 1, "p(99.9)": 2, "count": 3}}"#,
        );
        assert_eq!(read(d.as_bytes(), 64).unwrap().labels[0].p99_us, 1000);
    }

    /// What is kept from a summary is bounded by a number of metrics, not only by its size.
    #[test]
    fn at_most_max_metrics_are_read() {
        let metrics = |n: usize| {
            (0..n)
                .map(|i| {
                    trend(
                        &format!("http_req_duration{{name:e{i}}}"),
                        r#""p(99)": 1, "p(99.9)": 2, "count": 1"#,
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        let e = read(hs(&metrics(MAX_METRICS)).as_bytes(), 1 << 16).unwrap();
        assert_eq!(e.labels.len(), MAX_METRICS);
        // A repeated metric is not counted twice.
        let again = format!(
            "{},{}",
            metrics(MAX_METRICS),
            trend(
                "http_req_duration{name:e0}",
                r#""p(99)": 1, "p(99.9)": 2, "count": 5"#
            )
        );
        let e = read(hs(&again).as_bytes(), 1 << 16).unwrap();
        assert_eq!(e.labels.len(), MAX_METRICS);
        let err = read(hs(&metrics(MAX_METRICS + 1)).as_bytes(), 1 << 16).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("/metrics"), "{err}");
        assert!(err.message.contains("more than 10000"), "{err}");
        let top = format!("{{{}}}", metrics(MAX_METRICS + 1));
        let err = read(top.as_bytes(), 1 << 16).unwrap_err();
        assert!(err.message.contains("more than 10000"), "{err}");
    }

    #[test]
    fn sniff_is_unambiguous() {
        for f in [HANDLE_SUMMARY, SUMMARY_EXPORT, DEFAULT_STATS] {
            assert!(sniff(f));
            assert!(sniff(&f[..256]), "root_group comes first");
            assert_eq!(detect(f), Some(Format::K6));
        }
        assert!(sniff(br#"{"metrics": {"http_req_duration": {}}}"#));
        assert!(sniff(br#"  {"metrics": {"http_reqs": {"count": 1}}}"#));
        for other in [
            OHA,
            &b"Name,# requests,Median Response Time\n"[..],
            b"timeStamp,elapsed,label,responseCode\n",
            b"Running 30s test @ http://127.0.0.1:8080\n",
            b"#[StartTime: 1.0 (seconds since epoch)]\n",
            b"     http_req_duration..............: avg=1ms\n",
            b"[{\"metrics\": {\"http_req_duration\": 1}}]",
            b"",
        ] {
            assert!(!sniff(other), "{}", String::from_utf8_lossy(other));
        }
    }

    /// The fixtures: the numbers the files hold (written by hand after k6's documented shapes, one
    /// run exported both ways), identical from both shapes.
    #[test]
    fn fixtures_give_the_numbers_they_hold() {
        let want = vec![
            stats("inventory", 600, 0, Some(4_712), 30_934, 81_021),
            stats("payment", 600, 13, Some(16_204), 61_377, 150_864),
            stats("user", 600, 6, Some(2_583), 4_106, 601_893),
        ];
        let a = read(HANDLE_SUMMARY, 4096).unwrap();
        let b = read(SUMMARY_EXPORT, 4096).unwrap();
        assert_eq!(a.labels, want);
        assert_eq!(b.labels, want);
    }

    #[test]
    fn default_trend_stats_fixture_explains_the_option() {
        let err = read(DEFAULT_STATS, 4096).unwrap_err();
        assert!(err.message.contains("--summary-trend-stats"), "{err}");
        assert!(err.message.contains("summaryTrendStats"), "{err}");
        assert!(err.field.as_deref().unwrap().ends_with("/p(99)"), "{err:?}");
    }

    #[test]
    fn tag_parsing_follows_k6() {
        let (base, tags) = split_key("http_req_duration{ name : \"a b\" , method:GET,}").unwrap();
        assert_eq!(base, "http_req_duration");
        let tags = tags.unwrap();
        assert_eq!(tags.get("name").map(String::as_str), Some("a b"));
        assert_eq!(label_of(&tags), "a b");
        assert!(split_key("x{}").is_none());
        assert!(split_key("x{a:b").is_none());
        assert_eq!(
            split_key("x{flag}")
                .unwrap()
                .1
                .unwrap()
                .get("flag")
                .map(String::as_str),
            Some("")
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Mutated fixtures (bytes replaced, input cut) never panic the parser.
        #[test]
        fn mutated_fixtures_never_panic(
            which in 0usize..3,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
            cut in any::<usize>(),
            chunk in 1usize..64,
        ) {
            let mut input = [HANDLE_SUMMARY, SUMMARY_EXPORT, DEFAULT_STATS][which].to_vec();
            for (at, byte) in edits {
                let i = at % input.len();
                input[i] = byte;
            }
            input.truncate(cut % (input.len() + 1));
            let _ = sniff(&input);
            let _ = read(&input, chunk);
        }

        /// Mutations inside metric names and numbers (JSON stays valid more often).
        #[test]
        fn mutated_names_and_numbers_never_panic(
            which in 0usize..3,
            edits in proptest::collection::vec((any::<usize>(), prop::sample::select(b"0123456789.-e{}:,\"'pn ".to_vec())), 1..6),
        ) {
            let mut input = [HANDLE_SUMMARY, SUMMARY_EXPORT, DEFAULT_STATS][which].to_vec();
            for (at, byte) in edits {
                let i = at % input.len();
                if input[i].is_ascii_alphanumeric() || b"{}:(),.".contains(&input[i]) {
                    input[i] = byte;
                }
            }
            let _ = read(&input, 4096);
        }
    }
}
