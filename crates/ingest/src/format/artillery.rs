//! Artillery's JSON report (`artillery run --output report.json`, checked against Artillery
//! 2.0.21):
//!
//! ```text
//! {"aggregate": {"counters": {"http.codes.200": 594, "plugins.metrics-by-endpoint./payment.codes.500": 4, …},
//!                "summaries": {"http.response_time": {"min": 0, "max": 65, "count": 600, "p50": 7, "p99": 40.9, "p999": 63.4, …},
//!                              "plugins.metrics-by-endpoint.response_time./payment": {"count": 200, "p99": 62.2, "p999": 63.4, …}},
//!                "histograms": {…}, …},
//!  "intermediate": [ … one such object per reporting period … ]}
//! ```
//!
//! **Labels.** With the `metrics-by-endpoint` plugin, each
//! `plugins.metrics-by-endpoint.response_time.<name>` summary is one label, `<name>` (the URL
//! path, or the request's `name` with `useOnlyRequestNames`); without it, the whole run's
//! `http.response_time` is the one label `http.response_time`. Only `aggregate` is read;
//! `intermediate` is validated and dropped.
//!
//! **Percentiles** `p50` (or `median`), `p99`, `p999` in milliseconds, as Artillery reports them:
//! from a DDSketch of 1 % relative accuracy, rounded to 0.1 ms; `p99` and `p999` are required.
//! Artillery times a response to its first byte (`firstByte`).
//!
//! **Distribution.** The label's percentile points are the summary's `min` (0), `p50` (or
//! `median`), `p75`, `p90`, `p95`, `p99`, `p999` (99.9) and `max` (100), those it holds with a
//! plausible number of ms.
//!
//! **Samples** = the summary's `count` (responses) + the label's `…errors.<code>` counters
//! (requests without a response). **Failures** = responses with status 400 and above (the
//! `…codes.<status>` counters) + those errors. For the whole run the counters are
//! `http.codes.<status>` and `errors.<code>`.
//!
//! Size and memory as every JSON summary ([`MAX_JSON_SUMMARY_BYTES`](crate::MAX_JSON_SUMMARY_BYTES));
//! at most [`MAX_METRICS`] summaries and counters are kept.

use std::collections::BTreeMap;

use serde::de::MapAccess;

use crate::format::percentile_points;
use crate::framing::json::{
    contains, count, field_error, json_object_start, pointer, skip, Fold, JsonBuffer, Obj, Scalar,
};
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Most summaries and counters kept (a few per endpoint).
pub const MAX_METRICS: usize = 10_000;
/// Longest plausible latency: one hour, in milliseconds.
const MAX_LATENCY_MS: f64 = 3_600_000.0;

const BY_ENDPOINT: &str = "plugins.metrics-by-endpoint.";
const ENDPOINT_TIME: &str = "plugins.metrics-by-endpoint.response_time.";
const WHOLE: &str = "http.response_time";

/// Whether the start of an input looks like an Artillery report: a JSON object whose
/// `aggregate` has Artillery's `counters`, `summaries` or `http.` metrics.
pub fn sniff(head: &[u8]) -> bool {
    json_object_start(head).is_some()
        && contains(head, b"\"aggregate\"")
        && (contains(head, b"\"counters\"")
            || contains(head, b"\"summaries\"")
            || contains(head, b"\"vusers.created\""))
}

pub fn parser(_options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Ok(Box::new(Parser {
        buf: JsonBuffer::new("Artillery"),
    }))
}

struct Parser {
    buf: JsonBuffer,
}

impl Ingest for Parser {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.buf.push(chunk)
    }

    fn finish(self: Box<Self>) -> Result<Extracted, IngestError> {
        let doc = self.buf.parse::<Report>()?;
        extract(doc).map_err(|e| self.buf.locate(e))
    }
}

#[derive(Debug, Default)]
struct Report {
    aggregate: Option<Obj<Aggregate>>,
}

impl Fold for Report {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "aggregate" => self.aggregate = Some(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Aggregate {
    counters: Option<Obj<Counters>>,
    summaries: Option<Obj<Summaries>>,
}

impl Fold for Aggregate {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        match key.as_str() {
            "counters" => self.counters = Some(map.next_value()?),
            "summaries" => self.summaries = Some(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// The counters that count responses by status or errors, by key.
#[derive(Debug, Default)]
struct Counters {
    kept: BTreeMap<String, Scalar>,
    too_many: bool,
}

impl Fold for Counters {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        let read = key.starts_with("http.codes.")
            || key.starts_with("errors.")
            || (key.starts_with(BY_ENDPOINT)
                && (key.contains(".codes.") || key.contains(".errors.")));
        if !read {
            return skip(map);
        }
        if self.kept.len() >= MAX_METRICS && !self.kept.contains_key(&key) {
            self.too_many = true;
            return skip(map);
        }
        self.kept.insert(key, map.next_value()?);
        Ok(())
    }
}

/// The response-time summaries, by key.
#[derive(Debug, Default)]
struct Summaries {
    kept: BTreeMap<String, Obj<Summary>>,
    too_many: bool,
}

impl Fold for Summaries {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        if key != WHOLE && !key.starts_with(ENDPOINT_TIME) {
            return skip(map);
        }
        if self.kept.len() >= MAX_METRICS && !self.kept.contains_key(&key) {
            self.too_many = true;
            return skip(map);
        }
        self.kept.insert(key, map.next_value()?);
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Summary {
    count: Option<Scalar>,
    p50: Option<Scalar>,
    median: Option<Scalar>,
    p99: Option<Scalar>,
    p999: Option<Scalar>,
    /// `min`, `p75`, `p90`, `p95` and `max`: only percentile points.
    others: [Option<Scalar>; 5],
}

/// The stats of [`Summary::others`], with their percentiles.
const OTHERS: [(&str, f64); 5] = [
    ("min", 0.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("max", 100.0),
];

impl Summary {
    /// The percentile points the summary holds: each stat with a plausible number of ms.
    fn points(&self) -> Option<budget_core::distribution::Distribution> {
        let median = self.p50.as_ref().or(self.median.as_ref());
        let named = [
            (median, 50.0),
            (self.p99.as_ref(), 99.0),
            (self.p999.as_ref(), 99.9),
        ];
        let others = OTHERS
            .iter()
            .zip(&self.others)
            .map(|(&(_, percentile), v)| (v.as_ref(), percentile));
        percentile_points(
            named
                .into_iter()
                .chain(others)
                .filter_map(|(v, percentile)| Some((percentile, micros(&[], v?).ok()?))),
        )
    }
}

impl Fold for Summary {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        let slot = match key.as_str() {
            "count" => &mut self.count,
            "p50" => &mut self.p50,
            "median" => &mut self.median,
            "p99" => &mut self.p99,
            "p999" => &mut self.p999,
            _ => match OTHERS.iter().position(|(k, _)| *k == key) {
                Some(i) => &mut self.others[i],
                None => return skip(map),
            },
        };
        *slot = Some(map.next_value()?);
        Ok(())
    }
}

fn micros(path: &[&str], v: &Scalar) -> Result<u64, IngestError> {
    let ms = match v {
        Scalar::Number(n) => n
            .as_f64()
            .ok_or_else(|| field_error(path, "is not a number"))?,
        _ => return Err(field_error(path, "must be a number of milliseconds")),
    };
    if !ms.is_finite() || ms < 0.0 {
        return Err(field_error(path, format!("{ms} is not a latency")));
    }
    if ms > MAX_LATENCY_MS {
        return Err(field_error(
            path,
            format!("{ms} ms is over one hour: Artillery reports milliseconds"),
        ));
    }
    Ok((ms * 1000.0).round() as u64)
}

fn required<'a>(v: &'a Option<Scalar>, path: &[&str]) -> Result<&'a Scalar, IngestError> {
    v.as_ref().ok_or_else(|| {
        field_error(
            path,
            "missing: Artillery writes min…p999 in every summary; was the file edited?",
        )
    })
}

fn extract(doc: Report) -> Result<Extracted, IngestError> {
    let aggregate = match doc.aggregate {
        Some(Obj::Object(a)) => a,
        Some(_) => return Err(field_error(&["aggregate"], "must be an object")),
        None => {
            return Err(field_error(
                &["aggregate"],
                "missing: this is not an Artillery report (artillery run --output report.json)",
            ))
        }
    };
    let summaries = match aggregate.summaries {
        Some(Obj::Object(s)) => s,
        Some(_) => {
            return Err(field_error(
                &["aggregate", "summaries"],
                "must be an object",
            ))
        }
        None => {
            return Err(field_error(
                &["aggregate", "summaries"],
                "missing: the report has no response-time summaries (did the test make HTTP \
                 requests?)",
            ))
        }
    };
    let counters = match aggregate.counters {
        Some(Obj::Object(c)) => c,
        Some(_) => return Err(field_error(&["aggregate", "counters"], "must be an object")),
        None => Counters::default(),
    };
    if summaries.too_many || counters.too_many {
        return Err(field_error(
            &["aggregate"],
            format!("more than {MAX_METRICS} summaries or counters: not the report of a load test"),
        ));
    }
    let by_endpoint = summaries.kept.keys().any(|k| k.starts_with(ENDPOINT_TIME));
    let mut labels = Vec::new();
    let mut distributions = BTreeMap::new();
    for (key, summary) in &summaries.kept {
        let (label, codes, errors) = match key.strip_prefix(ENDPOINT_TIME) {
            Some(name) => (
                name.to_owned(),
                format!("{BY_ENDPOINT}{name}.codes."),
                format!("{BY_ENDPOINT}{name}.errors."),
            ),
            None if by_endpoint => continue,
            None => (
                WHOLE.to_owned(),
                "http.codes.".to_owned(),
                "errors.".to_owned(),
            ),
        };
        let at = |stat: &'static str| vec!["aggregate", "summaries", key.as_str(), stat];
        let s = match summary {
            Obj::Object(s) => s,
            _ => {
                return Err(field_error(
                    &["aggregate", "summaries", key.as_str()],
                    "must be an object",
                ))
            }
        };
        let required = |v, stat| required(v, &at(stat));
        let p50_us = match (&s.p50, &s.median) {
            (Some(v), _) => Some(micros(&at("p50"), v)?),
            (None, Some(v)) => Some(micros(&at("median"), v)?),
            (None, None) => None,
        };
        let p99_us = micros(&at("p99"), required(&s.p99, "p99")?)?;
        let p999_us = micros(&at("p999"), required(&s.p999, "p999")?)?;
        if p50_us.is_some_and(|p| p > p99_us) || p99_us > p999_us {
            return Err(field_error(
                &["aggregate", "summaries", key.as_str()],
                "percentiles are not increasing (p50 ≤ p99 ≤ p999)",
            ));
        }
        let responses = count(required(&s.count, "count")?, &at("count"))?;
        let (mut failed, mut errored) = (0u64, 0u64);
        for (name, v) in &counters.kept {
            let path = ["aggregate", "counters", name.as_str()];
            if let Some(status) = name.strip_prefix(codes.as_str()) {
                let n = count(v, &path)?;
                if status.parse::<u16>().map_or(true, |s| s >= 400) {
                    failed = failed.saturating_add(n);
                }
            } else if name.starts_with(errors.as_str()) {
                errored = errored.saturating_add(count(v, &path)?);
            }
        }
        if responses == 0 {
            continue;
        }
        let samples = responses.saturating_add(errored);
        let failures = failed.saturating_add(errored);
        if failures > samples {
            return Err(IngestError::new(format!(
                "{failures} failed requests but only {samples} requests for {label:?}"
            ))
            .field(pointer(&["aggregate", "counters"])));
        }
        if let Some(d) = s.points() {
            distributions.insert(label.clone(), d);
        }
        labels.push(LabelStats {
            label,
            samples,
            failures: Some(failures),
            p50_us,
            p99_us,
            p999_us,
        });
    }
    if labels.is_empty() {
        return Err(field_error(
            &["aggregate", "summaries"],
            "no response-time summary with responses: http.response_time (or the \
             metrics-by-endpoint plugin's) is missing or empty",
        ));
    }
    Ok(Extracted {
        distributions,
        format: Format::Artillery,
        tool: Some("Artillery".to_owned()),
        labels,
        notes: vec![
            "Artillery times each response to its first byte (its firstByte timing)".to_owned(),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, kit_tests, points};

    const REPORT: &[u8] = include_bytes!("../../../../tests/fixtures/artillery/report.json");

    fn read(input: &[u8]) -> Result<Extracted, IngestError> {
        testkit::read_in_every_chunking(Format::Artillery, &Options::default(), input)
    }

    fn row(l: &LabelStats) -> (&str, u64, Option<u64>, Option<u64>, u64, u64) {
        (
            l.label.as_str(),
            l.samples,
            l.failures,
            l.p50_us,
            l.p99_us,
            l.p999_us,
        )
    }

    /// The fixture gives the numbers Artillery printed at the end of the run (`report.txt`).
    #[test]
    fn fixture_gives_what_artillery_printed() {
        let e = read(REPORT).unwrap();
        assert_eq!(e.tool.as_deref(), Some("Artillery"));
        let got: Vec<_> = e.labels.iter().map(row).collect();
        assert_eq!(
            got,
            [
                ("/inventory", 200, Some(0), Some(6_000), 32_100, 32_100),
                ("/payment", 200, Some(4), Some(16_900), 63_400, 63_400),
                ("/user", 200, Some(2), Some(4_000), 10_900, 13_100),
            ]
        );
        assert_eq!(crate::detect(REPORT), Some(Format::Artillery));
    }

    /// `report.json`, `plugins.metrics-by-endpoint.response_time./payment`: min 13, p50 16.9,
    /// p75 18, p90 19.9, p95 22, p99 63.4, p999 63.4, max 81 (ms).
    #[test]
    fn fixture_summary_gives_the_percentile_points() {
        let e = read(REPORT).unwrap();
        assert_eq!(
            points(&e, "/payment"),
            [
                (0.0, 13_000),
                (50.0, 16_900),
                (75.0, 18_000),
                (90.0, 19_900),
                (95.0, 22_000),
                (99.0, 63_400),
                (99.9, 63_400),
                (100.0, 81_000),
            ]
        );
        assert_eq!(
            e.distributions.keys().collect::<Vec<_>>(),
            ["/inventory", "/payment", "/user"]
        );
    }

    /// A DDSketch median below the exact min (Artillery's `http.response_time.4xx` of the
    /// fixture: min 11, p50 10.9) is raised to it; `median` stands for `p50`; stats that are
    /// missing or not numbers give no point.
    #[test]
    fn summary_points_are_monotone_and_partial() {
        let d = br#"{"aggregate": {"summaries": {"http.response_time":
            {"count": 2, "min": 11, "median": 10.9, "p75": "x", "p99": 10.9, "p999": 10.9, "max": 11}}}}"#;
        assert_eq!(
            points(&read(d).unwrap(), "http.response_time"),
            [
                (0.0, 11_000),
                (50.0, 11_000),
                (99.0, 11_000),
                (99.9, 11_000),
                (100.0, 11_000)
            ]
        );
    }

    #[test]
    fn whole_run_without_the_plugin_and_errors() {
        let d = br#"{"aggregate": {"counters": {"http.codes.200": 9, "http.codes.503": 1, "errors.ETIMEDOUT": 2},
            "summaries": {"http.response_time": {"count": 10, "median": 4, "p99": 9.5, "p999": 12.1},
                          "vusers.session_length": {"count": 3, "p99": 1, "p999": 2}}},
            "intermediate": [{"counters": {}}]}"#;
        let e = read(d).unwrap();
        assert_eq!(
            e.labels.iter().map(row).collect::<Vec<_>>(),
            [(
                "http.response_time",
                12,
                Some(3),
                Some(4_000),
                9_500,
                12_100
            )]
        );
    }

    #[test]
    fn bad_input_names_the_field() {
        let key = "/aggregate/summaries/plugins.metrics-by-endpoint.response_time.~1payment";
        let cases: Vec<(String, String, &str)> = vec![
            (
                r#"{"aggregate": {"summaries": {"http.response_time": {"count": 1, "p99": 5, "p999": 1}}}}"#.into(),
                "/aggregate/summaries/http.response_time".into(),
                "increasing",
            ),
            (r#"{"aggregate": {"counters": {}}}"#.into(), "/aggregate/summaries".into(), "missing"),
            (r#"{"aggregate": 1}"#.into(), "/aggregate".into(), "object"),
            (
                r#"{"aggregate": {"summaries": {"plugins.metrics-by-endpoint.response_time./payment": {"count": 1, "p99": "x", "p999": 2}}}}"#.into(),
                format!("{key}/p99"),
                "number",
            ),
            (
                r#"{"aggregate": {"summaries": {"plugins.metrics-by-endpoint.response_time./payment": {"count": 1, "p99": 1}}}}"#.into(),
                format!("{key}/p999"),
                "missing",
            ),
        ];
        for (input, field, msg) in cases {
            let err = read(input.as_bytes()).unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field.as_str()), "{err}");
            assert!(err.message.contains(msg), "{err}");
        }
    }

    kit_tests!(Format::Artillery);
}
