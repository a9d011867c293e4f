//! autocannon JSON output (`autocannon -j URL`, checked against autocannon 9.0.0): one endpoint
//! per file.
//!
//! ```text
//! {"url":"http://127.0.0.1:18080/inventory","connections":10,…,"errors":0,"timeouts":0,
//!  "non2xx":0,"1xx":0,"2xx":2000,"3xx":0,"4xx":0,"5xx":0,"statusCodeStats":{"200":{"count":2000}},
//!  "latency":{"average":6.85,…,"p50":5,…,"p99":32,"p99_9":81,…,"totalCount":2000},"requests":{…}}
//! ```
//!
//! * `latency.p50`, `p99`, `p99_9`: milliseconds, as autocannon reads them off its HdrHistogram
//!   (hdr-histogram-js) of whole-ms latencies; `p99` and `p99_9` are required. autocannon
//!   records the latency of every response (of the 2xx ones only with `--excludeErrorStats`),
//!   none for a request without a response.
//! * **Samples** = every request with an outcome: `1xx` + `2xx` + `3xx` + `4xx` + `5xx` +
//!   `errors` (no response; `timeouts` are among them). **Failures** = `non2xx` + `errors`.
//! * **Coordinated omission.** With a rate (`-R`/`--overallRate`, `--connectionRate`) autocannon
//!   records each latency with the expected interval between requests, adding the requests a
//!   stalled connection could not send (HdrHistogram's `recordValueWithExpectedInterval`), so
//!   `latency.totalCount` exceeds the responses. The file does not name the flags: a
//!   `totalCount` above the responses is how such a run is told, and the evidence then says that
//!   its latencies are corrected for coordinated omission.
//! * **Distribution**: the label's percentile points are every `latency.p<N>` key (`p0_001` is
//!   0.001 %, `p2_5` 2.5 %, … `p99_999`), with `min` as 0 and `max` as 100; a value that is not
//!   a plausible number of ms gives no point.
//! * **Label**: [`Options::label`] (the upload part's name), else the file's `url`.
//! * Size and memory as every JSON summary ([`MAX_JSON_SUMMARY_BYTES`](crate::MAX_JSON_SUMMARY_BYTES)).

use serde::de::MapAccess;

use budget_core::distribution::MAX_POINTS;

use crate::format::percentile_points;
use crate::framing::json::{
    contains, count, field_error, json_object_start, skip, Fold, JsonBuffer, Obj, Scalar,
};
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Longest plausible latency: one hour, in milliseconds.
const MAX_LATENCY_MS: f64 = 3_600_000.0;

/// Whether the start of an input looks like autocannon's JSON: an object with its `latency`,
/// `requests` and `throughput` histograms, or its `"2xx"` and `"non2xx"` counts.
pub fn sniff(head: &[u8]) -> bool {
    json_object_start(head).is_some()
        && ((contains(head, b"\"non2xx\"") && contains(head, b"\"2xx\""))
            || (contains(head, b"\"latency\"")
                && contains(head, b"\"throughput\"")
                && contains(head, b"\"p99_9\"")))
}

pub fn parser(options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Ok(Box::new(Parser {
        buf: JsonBuffer::new("autocannon"),
        label: options
            .label
            .as_deref()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned),
    }))
}

struct Parser {
    buf: JsonBuffer,
    label: Option<String>,
}

impl Ingest for Parser {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.buf.push(chunk)
    }

    fn finish(self: Box<Self>) -> Result<Extracted, IngestError> {
        let doc = self.buf.parse::<Doc>()?;
        extract(doc, self.label).map_err(|e| self.buf.locate(e))
    }
}

/// The counts read at the top level, by key.
const COUNTS: [&str; 7] = ["1xx", "2xx", "3xx", "4xx", "5xx", "non2xx", "errors"];

#[derive(Debug, Default)]
struct Doc {
    url: Option<Scalar>,
    latency: Option<Obj<Latency>>,
    counts: [Option<Scalar>; 7],
}

impl Fold for Doc {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        if let Some(i) = COUNTS.iter().position(|c| *c == key) {
            self.counts[i] = Some(map.next_value()?);
            return Ok(());
        }
        match key.as_str() {
            "url" => self.url = Some(map.next_value()?),
            "latency" => self.latency = Some(map.next_value()?),
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `latency`: the percentiles read and `totalCount`.
#[derive(Debug, Default)]
struct Latency {
    p50: Option<Scalar>,
    p99: Option<Scalar>,
    p999: Option<Scalar>,
    total: Option<Scalar>,
    /// Every `p<N>`, `min` (0) and `max` (100) whose value is a number: (key, percentile, ms),
    /// at most [`MAX_POINTS`].
    points: Vec<(String, f64, Scalar)>,
}

impl Fold for Latency {
    fn member<'de, A: MapAccess<'de>>(&mut self, key: String, map: &mut A) -> Result<(), A::Error> {
        let percentile = point_percentile(&key);
        let named = matches!(key.as_str(), "p50" | "p99" | "p99_9" | "totalCount");
        if percentile.is_none() && !named {
            return skip(map);
        }
        let v: Scalar = map.next_value()?;
        if let Some(percentile) = percentile {
            self.point(&key, percentile, &v);
        }
        match key.as_str() {
            "p50" => self.p50 = Some(v),
            "p99" => self.p99 = Some(v),
            "p99_9" => self.p999 = Some(v),
            "totalCount" => self.total = Some(v),
            _ => {}
        }
        Ok(())
    }
}

impl Latency {
    /// Keeps `key` as a point when its value is a number (a repeated key keeps its last value).
    fn point(&mut self, key: &str, percentile: f64, v: &Scalar) {
        self.points.retain(|(k, _, _)| k != key);
        if matches!(v, Scalar::Number(_)) && self.points.len() < MAX_POINTS {
            self.points.push((key.to_owned(), percentile, v.clone()));
        }
    }
}

/// The percentile a `latency` key names: `p99_9` is 99.9, `min` 0, `max` 100.
fn point_percentile(key: &str) -> Option<f64> {
    match key {
        "min" => Some(0.0),
        "max" => Some(100.0),
        _ => {
            let n = key.strip_prefix('p')?;
            if !n.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
                return None;
            }
            n.replace('_', ".").parse().ok()
        }
    }
}

fn micros(key: &str, v: &Scalar) -> Result<u64, IngestError> {
    let path = ["latency", key];
    let ms = match v {
        Scalar::Number(n) => n
            .as_f64()
            .ok_or_else(|| field_error(&path, "is not a number"))?,
        Scalar::Null => {
            return Err(field_error(
                &path,
                "is null: autocannon recorded no 2xx response",
            ))
        }
        _ => return Err(field_error(&path, "must be a number of milliseconds")),
    };
    if !ms.is_finite() || ms < 0.0 {
        return Err(field_error(&path, format!("{ms} is not a latency")));
    }
    if ms > MAX_LATENCY_MS {
        return Err(field_error(
            &path,
            format!("{ms} ms is over one hour: autocannon writes milliseconds"),
        ));
    }
    Ok((ms * 1000.0).round() as u64)
}

fn need<'a>(v: &'a Option<Scalar>, key: &str) -> Result<&'a Scalar, IngestError> {
    v.as_ref().ok_or_else(|| {
        field_error(
            &["latency", key],
            "missing: autocannon -j writes p50…p99_999 in `latency`; was the file edited?",
        )
    })
}

fn extract(doc: Doc, label: Option<String>) -> Result<Extracted, IngestError> {
    let latency = match doc.latency {
        Some(Obj::Object(l)) => l,
        Some(_) => return Err(field_error(&["latency"], "must be an object")),
        None => {
            return Err(field_error(
                &["latency"],
                "missing: this is not autocannon --json (-j) output",
            ))
        }
    };
    let label = match label {
        Some(l) => l,
        None => match &doc.url {
            Some(Scalar::Str(u)) if !u.trim().is_empty() => u.trim().to_owned(),
            _ => {
                return Err(IngestError::new(
                    "autocannon output names no endpoint: give this file a label (the upload \
                     part's name)",
                ))
            }
        },
    };
    let p50_us = latency.p50.as_ref().map(|v| micros("p50", v)).transpose()?;
    let p99_us = micros("p99", need(&latency.p99, "p99")?)?;
    let p999_us = micros("p99_9", need(&latency.p999, "p99_9")?)?;
    if p50_us.is_some_and(|p| p > p99_us) || p99_us > p999_us {
        return Err(field_error(
            &["latency"],
            "percentiles are not increasing (p50 ≤ p99 ≤ p99_9)",
        ));
    }
    let mut counts = [0u64; 7];
    for (i, key) in COUNTS.iter().enumerate() {
        counts[i] =
            match &doc.counts[i] {
                Some(v) => count(v, &[*key])?,
                None => return Err(field_error(
                    &[*key],
                    "missing: autocannon -j writes the responses per status class and the errors",
                )),
            };
    }
    let [c1, c2, c3, c4, c5, non2xx, errors] = counts;
    let samples = [c1, c2, c3, c4, c5, errors]
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(b))
        .ok_or_else(|| IngestError::new("request counts overflow"))?;
    if c2 == 0 {
        return Err(field_error(
            &["2xx"],
            "no 2xx response, so autocannon recorded no latency",
        ));
    }
    let failures = non2xx
        .checked_add(errors)
        .filter(|&f| f <= samples)
        .ok_or_else(|| field_error(&["non2xx"], "more failures than requests"))?;
    let recorded = match &latency.total {
        Some(v) => Some(count(v, &["latency", "totalCount"])?),
        None => None,
    };
    let responses = samples - errors;
    let note = match recorded {
        Some(n) if n > responses => format!(
            "latencies corrected for coordinated omission: autocannon ran at a fixed rate (-R) \
             and recorded {n} latencies for {responses} responses, counting the requests a \
             stalled connection could not send"
        ),
        Some(n) if n == c2 && c2 < responses => {
            "latencies of the 2xx responses only (autocannon --excludeErrorStats)".to_owned()
        }
        _ => "latencies of every response (autocannon records none for a request without one)"
            .to_owned(),
    };
    let points = percentile_points(
        latency
            .points
            .iter()
            .filter_map(|(key, percentile, ms)| Some((*percentile, micros(key, ms).ok()?))),
    );
    Ok(Extracted {
        distributions: points.map(|d| (label.clone(), d)).into_iter().collect(),
        format: Format::Autocannon,
        tool: Some("autocannon".to_owned()),
        labels: vec![LabelStats {
            label,
            samples,
            failures: Some(failures),
            p50_us,
            p99_us,
            p999_us,
        }],
        notes: vec![note],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, kit_tests};
    use budget_core::distribution::Distribution;

    const INVENTORY: &[u8] = include_bytes!("../../../../tests/fixtures/autocannon/inventory.json");
    const PAYMENT_RATE: &[u8] =
        include_bytes!("../../../../tests/fixtures/autocannon/payment-rate.json");
    const PAYMENT: &[u8] = include_bytes!("../../../../tests/fixtures/autocannon/payment.json");
    const USER: &[u8] = include_bytes!("../../../../tests/fixtures/autocannon/user.json");

    fn read(input: &[u8]) -> Result<Extracted, IngestError> {
        testkit::read_in_every_chunking(Format::Autocannon, &Options::default(), input)
    }

    /// The fixtures give the p50/p99/p99.9 autocannon printed in them, and its counts.
    #[test]
    fn fixtures_give_what_autocannon_wrote() {
        let e = read(INVENTORY).unwrap();
        let l = &e.labels[0];
        assert_eq!(l.label, "http://127.0.0.1:18080/inventory");
        assert_eq!(
            (l.samples, l.failures, l.p50_us, l.p99_us, l.p999_us),
            (2000, Some(0), Some(5_000), 32_000, 82_000)
        );
        assert!(
            e.notes[0].starts_with("latencies of every response"),
            "{:?}",
            e.notes
        );
        let e = read(PAYMENT_RATE).unwrap();
        let l = &e.labels[0];
        assert_eq!(
            (l.samples, l.failures, l.p99_us, l.p999_us),
            (1000, Some(23), 58_000, 134_000)
        );
        assert!(
            e.notes[0].starts_with("latencies corrected for coordinated omission"),
            "{:?}",
            e.notes
        );
        // The other two runs of the fixture README's table: samples are responses + errors,
        // failures the non-2xx responses and errors (user: 16 × 404 and 4 timeouts).
        for (file, want) in [
            (PAYMENT, (2000, Some(46), 62_000, 68_000)),
            (USER, (2000, Some(20), 12_000, 29_000)),
        ] {
            let l = read(file).unwrap().labels.remove(0);
            assert_eq!((l.samples, l.failures, l.p99_us, l.p999_us), want);
        }
        assert!(sniff(INVENTORY) && sniff(PAYMENT_RATE));
        assert_eq!(crate::detect(INVENTORY), Some(Format::Autocannon));
    }

    /// `inventory.json`'s `latency`: `min` 4 as 0, `p0_001` 4 … `p99_999` 87, `max` 87 as 100
    /// (whole ms). A repeated key keeps its last value; a value that is not a number of ms
    /// gives no point.
    #[test]
    fn fixture_latency_gives_the_percentile_points() {
        let points = |e: &Extracted| -> Vec<(f64, u64)> {
            let Some(Distribution::Percentiles { points }) =
                e.distributions.get("http://127.0.0.1:18080/inventory")
            else {
                panic!("no points: {:?}", e.distributions)
            };
            assert_eq!(budget_core::distribution::check_points(points), Ok(()));
            points.iter().map(|p| (p.percentile, p.us)).collect()
        };
        assert_eq!(
            points(&read(INVENTORY).unwrap()),
            [
                (0.0, 4_000),
                (0.001, 4_000),
                (0.01, 4_000),
                (0.1, 4_000),
                (1.0, 4_000),
                (2.5, 4_000),
                (10.0, 4_000),
                (25.0, 5_000),
                (50.0, 5_000),
                (75.0, 6_000),
                (90.0, 8_000),
                (97.5, 20_000),
                (99.0, 32_000),
                (99.9, 82_000),
                (99.99, 87_000),
                (99.999, 87_000),
                (100.0, 87_000),
            ]
        );
        let text = std::str::from_utf8(INVENTORY).unwrap();
        let edited = text
            .replace("\"p10\":4,", "\"p10\":4,\"p10\":4.5,")
            .replace("\"p25\":5,", "\"p25\":\"5\",")
            .replace("\"max\":87,", "\"max\":9000000,");
        let got = points(&read(edited.as_bytes()).unwrap());
        assert_eq!(got.len(), 15, "{got:?}");
        assert!(got.contains(&(10.0, 4_500)), "{got:?}");
        assert_eq!(got.last(), Some(&(99.999, 87_000)));
    }

    #[test]
    fn bad_input_names_the_field() {
        let text = std::str::from_utf8(INVENTORY).unwrap();
        let cases = [
            (
                text.replace("\"p99_9\":82,", ""),
                "/latency/p99_9",
                "missing",
            ),
            (
                text.replace("\"p99\":32,", "\"p99\":\"32\","),
                "/latency/p99",
                "number",
            ),
            (
                text.replace("\"p99_9\":82,", "\"p99_9\":4000000,"),
                "/latency/p99_9",
                "one hour",
            ),
            (
                text.replace("\"p99\":32,", "\"p99\":90,"),
                "/latency",
                "increasing",
            ),
            (
                text.replace("\"2xx\":2000,", "\"2xx\":0,"),
                "/2xx",
                "no 2xx",
            ),
            (
                text.replace("\"errors\":0,", "\"errors\":-1,"),
                "/errors",
                "whole number",
            ),
            (
                text.replace("\"non2xx\":0,", "\"non2xx\":9999,"),
                "/non2xx",
                "more failures",
            ),
        ];
        for (input, field, msg) in cases {
            let err = read(input.as_bytes()).unwrap_err();
            assert_eq!(err.field.as_deref(), Some(field), "{err}");
            assert!(err.message.contains(msg), "{err}");
        }
        let err = read(b"{\"latency\": {}}").unwrap_err();
        assert!(err.message.contains("names no endpoint"), "{err}");
    }

    kit_tests!(Format::Autocannon);
}
