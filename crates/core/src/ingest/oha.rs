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
//! [`MAX_JSON_SUMMARY_BYTES`](super::MAX_JSON_SUMMARY_BYTES) (4 MiB; oha writes a few KiB): the
//! push that would cross it is refused with an error naming the limit. In `finish` the text is
//! read member by member into the few values above (the distributions are summed as they are
//! read, the percentiles keep one key each), everything else is validated and dropped: beyond the
//! text, what is kept does not grow with the input. A syntax error answers with its line and
//! column (and the last key before it), a semantic one with the JSON pointer of the field at
//! fault (e.g. `/latencyPercentiles/p99.9`) and the line of that key in the text (of its parent
//! when the key is missing).

use serde::de::MapAccess;

use super::json::{
    contains, count, field_error, first_in_key_order, json_object_start, skip, Fold, JsonBuffer,
    Obj, Scalar,
};
use super::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

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
/// (`"p99.9"`; any spelling whose number equals it), with its value. Other keys are dropped.
#[derive(Debug, Default)]
struct Percentiles {
    found: [Option<(String, Scalar)>; 3],
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
        if !take.contains(&true) {
            return skip(map);
        }
        let value: Scalar = map.next_value()?;
        for (slot, take) in self.found.iter_mut().zip(take) {
            if take {
                *slot = Some((key.clone(), value.clone()));
            }
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
    Ok(Extracted {
        format: Format::Oha,
        tool: Some("oha".to_owned()),
        labels: vec![LabelStats {
            label,
            samples,
            failures: errors + non_2xx,
            p50_us,
            p99_us,
            p999_us,
        }],
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
mod tests {
    use super::*;
    use crate::ingest::{detect, read_all, MAX_JSON_SUMMARY_BYTES};
    use proptest::prelude::*;
    use serde_json::Value;

    const INVENTORY: &[u8] = include_bytes!("../../../../tests/fixtures/oha/inventory.json");
    const PAYMENT: &[u8] = include_bytes!("../../../../tests/fixtures/oha/payment.json");
    const USER: &[u8] = include_bytes!("../../../../tests/fixtures/oha/user.json");
    const INVENTORY_TXT: &str = include_str!("../../../../tests/fixtures/oha/inventory.txt");
    const PAYMENT_TXT: &str = include_str!("../../../../tests/fixtures/oha/payment.txt");
    const USER_TXT: &str = include_str!("../../../../tests/fixtures/oha/user.txt");

    fn opts(label: &str) -> Options {
        Options {
            unit: None,
            label: Some(label.to_owned()),
        }
    }

    fn read(input: &[u8], label: Option<&str>, chunk: usize) -> Result<Extracted, IngestError> {
        let options = Options {
            unit: None,
            label: label.map(str::to_owned),
        };
        read_all(parser(&options).unwrap(), input, chunk)
    }

    fn one(input: &[u8]) -> LabelStats {
        let mut e = read(input, Some("x"), 4096).unwrap();
        assert_eq!(e.format, Format::Oha);
        assert_eq!(e.tool.as_deref(), Some("oha"));
        assert_eq!(e.labels.len(), 1);
        e.labels.remove(0)
    }

    /// A small oha 1.16 document with the given percentiles and distributions.
    fn doc(p50: &str, p99: &str, p999: &str, status: &str, errors: &str) -> String {
        let errors = if errors == "-" {
            String::new()
        } else {
            format!(",\n  \"errorDistribution\": {{{errors}}}")
        };
        format!(
            r#"{{
  "summary": {{"successRate": 1.0, "total": 1.0, "slowest": 0.1, "fastest": 0.001, "average": 0.01}},
  "latencyPercentiles": {{
    "p10": 0.001, "p25": 0.002, "p50": {p50}, "p75": 0.02, "p90": 0.03, "p95": 0.04,
    "p99": {p99}, "p99.9": {p999}, "p99.99": 0.2
  }},
  "statusCodeDistribution": {{{status}}}{errors}
}}"#
        )
    }

    fn ok_doc() -> String {
        doc(
            "0.005",
            "0.05",
            "0.1",
            r#""200": 990, "500": 7, "404": 3"#,
            r#""timeout": 2"#,
        )
    }

    #[test]
    fn reads_percentiles_in_seconds_and_counts() {
        let s = one(ok_doc().as_bytes());
        assert_eq!(
            s,
            LabelStats {
                label: "x".into(),
                samples: 1002,
                failures: 12,
                p50_us: Some(5000),
                p99_us: 50_000,
                p999_us: 100_000
            }
        );
    }

    #[test]
    fn chunk_boundaries_do_not_matter() {
        for input in [
            ok_doc().into_bytes(),
            INVENTORY.to_vec(),
            PAYMENT.to_vec(),
            USER.to_vec(),
        ] {
            let whole = read(&input, Some("a"), input.len()).unwrap();
            for chunk in [1, 7] {
                assert_eq!(
                    read(&input, Some("a"), chunk).unwrap(),
                    whole,
                    "chunk {chunk}"
                );
            }
        }
    }

    #[test]
    fn label_rules() {
        let d = ok_doc();
        assert_eq!(
            read(d.as_bytes(), Some("  inventory "), 64).unwrap().labels[0].label,
            "inventory"
        );
        let err = read(d.as_bytes(), None, 64).unwrap_err();
        assert!(err.message.contains("label"), "{err}");
        let err = read(d.as_bytes(), Some("  "), 64).unwrap_err();
        assert!(err.message.contains("label"), "{err}");
        let with_url = d.replacen('{', r#"{"url": "http://127.0.0.1:18080/user","#, 1);
        assert_eq!(
            read(with_url.as_bytes(), None, 64).unwrap().labels[0].label,
            "http://127.0.0.1:18080/user"
        );
        // The option wins over the URL.
        assert_eq!(
            read(with_url.as_bytes(), Some("user"), 64).unwrap().labels[0].label,
            "user"
        );
    }

    #[test]
    fn deadline_aborts_are_not_requests() {
        let d = doc(
            "0.005",
            "0.05",
            "0.1",
            r#""200": 100"#,
            r#""aborted due to deadline": 9, "timeout": 1"#,
        );
        let s = one(d.as_bytes());
        assert_eq!((s.samples, s.failures), (101, 1));
    }

    #[test]
    fn missing_error_distribution_is_empty() {
        let d = doc(
            "0.005",
            "0.05",
            "0.1",
            r#""200": 990, "500": 7, "404": 3"#,
            "-",
        );
        assert!(!d.contains("errorDistribution"));
        let s = one(d.as_bytes());
        assert_eq!((s.samples, s.failures), (1000, 10));
    }

    /// (input, expected field, part of the message) → error.
    #[test]
    fn errors_name_the_field() {
        let cases: Vec<(String, Option<&str>, &str)> = vec![
            (
                doc("0.005", "0.05", "null", r#""200": 1"#, ""),
                Some("/latencyPercentiles/p99.9"),
                "null",
            ),
            (
                ok_doc().replace(r#""p99.9": 0.1, "#, ""),
                Some("/latencyPercentiles/p99.9"),
                "missing",
            ),
            (
                ok_doc().replace(r#""p99": 0.05, "#, ""),
                Some("/latencyPercentiles/p99"),
                "missing",
            ),
            (
                doc("0.005", "\"fast\"", "0.1", r#""200": 1"#, ""),
                Some("/latencyPercentiles/p99"),
                "number",
            ),
            (
                doc("0.005", "-0.05", "0.1", r#""200": 1"#, ""),
                Some("/latencyPercentiles/p99"),
                "not a latency",
            ),
            // Wrong unit: milliseconds where oha writes seconds.
            (
                doc("5.2", "52.0", "7300.5", r#""200": 1"#, ""),
                Some("/latencyPercentiles/p99.9"),
                "milliseconds",
            ),
            (
                doc("0.005", "0.2", "0.1", r#""200": 1"#, ""),
                Some("/latencyPercentiles"),
                "increasing",
            ),
            (
                doc("0.005", "0.05", "0.1", r#""OK": 1"#, ""),
                Some("/statusCodeDistribution/OK"),
                "status",
            ),
            (
                doc("0.005", "0.05", "0.1", r#""200": -1"#, ""),
                Some("/statusCodeDistribution/200"),
                "whole number",
            ),
            (
                doc("0.005", "0.05", "0.1", r#""200": 1.5"#, ""),
                Some("/statusCodeDistribution/200"),
                "whole number",
            ),
            (
                doc("0.005", "0.05", "0.1", "", r#""timeout": 3"#),
                Some("/statusCodeDistribution"),
                "no request",
            ),
            (
                doc("0.005", "0.05", "0.1", r#""200": 1"#, r#""x": "y""#),
                Some("/errorDistribution/x"),
                "whole",
            ),
            (
                ok_doc().replace("statusCodeDistribution", "statusCodes"),
                Some("/statusCodeDistribution"),
                "missing",
            ),
            (
                r#"{"summary": {}, "latencyPercentiles": [0.1]}"#.into(),
                Some("/latencyPercentiles"),
                "object",
            ),
            (
                r#"{"metrics": {"http_req_duration": {}}}"#.into(),
                Some("/latencyPercentiles"),
                "not oha",
            ),
        ];
        for (input, field, msg) in cases {
            let err = read(input.as_bytes(), Some("x"), 5).unwrap_err();
            assert_eq!(err.field.as_deref(), field, "{input}\n{err}");
            assert!(err.message.contains(msg), "{input}\n{err}");
        }
    }

    #[test]
    fn metrics_block_in_ms_must_agree() {
        let good = ok_doc().replacen(
            '{',
            r#"{"metrics": {"success_rate": 1.0, "latency_ms": {"min": 1, "mean": 9, "p50": 5.0, "p95": 40.0, "p99": 50.0, "max": 100}},"#,
            1,
        );
        assert_eq!(one(good.as_bytes()).p99_us, 50_000);
        // A file whose latencyPercentiles were "converted" to ms but metrics were not.
        let bad = good
            .replace(r#""p50": 0.005"#, r#""p50": 5.0"#)
            .replace(r#""p99": 0.05,"#, r#""p99": 50.0,"#)
            .replace(r#""p99.9": 0.1"#, r#""p99.9": 100.0"#);
        let err = read(bad.as_bytes(), Some("x"), 64).unwrap_err();
        assert_eq!(
            err.field.as_deref(),
            Some("/metrics/latency_ms/p50"),
            "{err}"
        );
        assert!(err.message.contains("seconds"), "{err}");
    }

    #[test]
    fn malformed_truncated_empty_and_foreign_inputs_have_a_line() {
        let truncated = &INVENTORY[..INVENTORY.len() / 2];
        let cases: Vec<(&[u8], &str)> = vec![
            (b"", "empty"),
            (b"  \n\t\n", "empty"),
            (b"\xEF\xBB\xBF", "empty"),
            (truncated, "truncated"),
            (
                b"{\n  \"latencyPercentiles\": {\n    \"p99\": 0.1,,\n  }\n}",
                "invalid JSON",
            ),
            (b"Name,# requests\n/x,10\n", "expected a JSON object"),
            (
                b"\n\nSummary:\n  Success rate:\t100.00%\n",
                "expected a JSON object",
            ),
            (b"[1, 2]", "expected a JSON object"),
            (b"{\"a\": \"\xff\"}", "invalid JSON"),
        ];
        for (input, msg) in cases {
            for chunk in [1, 7, 4096] {
                let err = read(input, Some("x"), chunk).unwrap_err();
                assert!(
                    err.message.contains(msg),
                    "{:?}: {err}",
                    String::from_utf8_lossy(input)
                );
                if !msg.contains("empty") {
                    assert!(err.line.is_some(), "{err}");
                }
            }
        }
        let err = read(b"\n\nSummary:\n", Some("x"), 3).unwrap_err();
        assert_eq!(err.line, Some(3));
        let err = read(
            b"{\n  \"latencyPercentiles\": {\n    \"p99\": 0.1,,\n",
            Some("x"),
            3,
        )
        .unwrap_err();
        assert_eq!(err.line, Some(3), "{err}");
        assert_eq!(err.field.as_deref(), Some("near key \"p99\""), "{err}");
    }

    /// Semantic errors carry the line of the field (found in the text), not only its pointer.
    #[test]
    fn semantic_errors_have_the_line_of_the_field() {
        let text = std::str::from_utf8(USER).unwrap();
        // The first "p99.9" of the file is latencyPercentiles' (line 46), not firstByte's.
        let bad = text.replacen("\"p99.9\": 0.023241981", "\"p99.9\": null", 1);
        let err = read(bad.as_bytes(), Some("user"), 7).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("/latencyPercentiles/p99.9"));
        assert_eq!(err.line, Some(46), "{err}");
        let bad = text.replacen("\"404\": 16", "\"404\": 1.5", 1);
        let err = read(bad.as_bytes(), Some("user"), 4096).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("/statusCodeDistribution/404"));
        assert_eq!(
            err.line
                .map(|l| text.lines().nth(l as usize - 1).unwrap().trim()),
            Some("\"404\": 16")
        );
    }

    #[test]
    fn input_over_the_limit_is_refused() {
        let mut p = parser(&opts("x")).unwrap();
        let chunk = vec![b' '; 1 << 20];
        let mut refused = false;
        for _ in 0..=(MAX_JSON_SUMMARY_BYTES >> 20) {
            if p.push(&chunk).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }

    /// An input of exactly the cap is read; one byte more is refused by the push that crosses
    /// the cap (not at `finish`), with the limit in the message.
    #[test]
    fn input_one_byte_over_the_cap_is_refused_at_the_push_that_crosses_it() {
        let mut at_cap = ok_doc().into_bytes();
        at_cap.resize(MAX_JSON_SUMMARY_BYTES, b' ');
        assert_eq!(one(&at_cap).p99_us, 50_000);

        let mut over = at_cap;
        over.push(b'\n');
        let chunks: Vec<&[u8]> = over.chunks(1 << 16).collect();
        assert_eq!(chunks.last().unwrap().len(), 1);
        let mut p = parser(&opts("x")).unwrap();
        for (i, chunk) in chunks.iter().enumerate() {
            let pushed = p.push(chunk);
            if i + 1 < chunks.len() {
                pushed.unwrap();
                continue;
            }
            let err = pushed.unwrap_err();
            assert!(err.message.starts_with("oha JSON"), "{err}");
            assert!(
                err.message.contains("limit of 4 MiB (4194304 bytes)"),
                "{err}"
            );
            assert_eq!((err.line, err.field.as_deref()), (None, None));
            assert_eq!(p.finish().unwrap_err(), err);
            return;
        }
        unreachable!("the last push was refused");
    }

    /// Members that are not read cost nothing but their text: a 1 MiB string, big arrays and
    /// objects, under the top level and inside the objects that are read.
    #[test]
    fn big_members_that_are_not_read_are_dropped() {
        let big = "x".repeat(1 << 20);
        let numbers = vec!["0.5"; 100_000].join(",");
        let d = ok_doc()
            .replacen(
                '{',
                &format!(
                    r#"{{"details": {{"note": "{big}", "samples": [{numbers}], "nested": {{"a": [{{"b": "{big}"}}]}}}},"#
                ),
                1,
            )
            .replacen(r#""p10": 0.001"#, &format!(r#""p10": "{big}""#), 1)
            .replacen(
                r#""summary": {"#,
                &format!(r#""summary": {{"histogram": [{numbers}], "#),
                1,
            );
        assert!(d.len() > 3 << 20 && d.len() < MAX_JSON_SUMMARY_BYTES);
        assert_eq!(one(d.as_bytes()), one(ok_doc().as_bytes()));
    }

    /// The typed reading gives what reading a JSON tree gave: a member repeated at the top level
    /// or among the percentiles keeps its last value, percentiles and errors are found in key
    /// order (not document order). A status code repeated in its distribution counts each time.
    #[test]
    fn repeated_members_and_key_order() {
        let d = format!(
            r#"{{"statusCodeDistribution": {{"500": 50}}, {}"#,
            &ok_doc()[1..]
        );
        assert_eq!(
            (one(d.as_bytes()).samples, one(d.as_bytes()).failures),
            (1002, 12)
        );
        let d = ok_doc().replacen(r#""p99": 0.05,"#, r#""p99": 7, "p99": 0.05,"#, 1);
        assert_eq!(one(d.as_bytes()).p99_us, 50_000);
        // `p99.0` names p99 too, but `p99` comes first in key order, wherever it is written.
        let d = ok_doc().replacen(r#""p10": 0.001,"#, r#""p99.0": 0.06,"#, 1);
        assert_eq!(one(d.as_bytes()).p99_us, 50_000);
        let d = ok_doc().replacen(r#""p99": 0.05,"#, r#""p99.0": 0.06,"#, 1);
        assert_eq!(one(d.as_bytes()).p99_us, 60_000);
        // Two faults: the one first in key order is reported.
        let d = doc("0.005", "0.05", "0.1", r#""500": 1.5, "200": "x""#, "");
        let err = read(d.as_bytes(), Some("x"), 64).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("/statusCodeDistribution/200"));
        let d = doc(
            "0.005",
            "0.05",
            "0.1",
            r#""200": 1"#,
            r#""z": -1, "a": 0.5"#,
        );
        let err = read(d.as_bytes(), Some("x"), 64).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("/errorDistribution/a"));
        let d = doc("0.005", "0.05", "0.1", r#""200": 3, "200": 4"#, "-");
        assert_eq!(one(d.as_bytes()).samples, 7);
    }

    #[test]
    fn sniff_is_unambiguous() {
        for f in [INVENTORY, PAYMENT, USER] {
            assert!(sniff(f));
            assert!(sniff(&f[..512]), "oha's first keys are enough");
            assert_eq!(detect(f), Some(Format::Oha));
        }
        assert!(sniff(ok_doc().as_bytes()));
        for other in [
            &b"Name,# requests,Median Response Time\n"[..],
            b"timeStamp,elapsed,label,responseCode\n",
            b"Running 30s test @ http://127.0.0.1:8080\n",
            b"#[StartTime: 1.0 (seconds since epoch)]\n",
            br#"{"metrics": {"http_req_duration": {"avg": 1}}, "latencyPercentiles": {}}"#,
            br#"{"root_group": {}, "metrics": {"http_reqs": {"count": 1}}}"#,
            b"",
            b"[{\"latencyPercentiles\": {}}]",
            INVENTORY_TXT.as_bytes(),
        ] {
            assert!(!sniff(other), "{}", String::from_utf8_lossy(other));
        }
    }

    /// oha's text summary line `  99.90% in 53.8013 ms` → µs.
    fn text_percentile(text: &str, pct: &str) -> f64 {
        let line = text
            .lines()
            .skip_while(|l| !l.starts_with("Response time distribution"))
            .find(|l| l.trim_start().starts_with(&format!("{pct}% in ")))
            .unwrap_or_else(|| panic!("no {pct}% line"));
        let mut words = line.split_whitespace().skip(2);
        let value: f64 = words.next().unwrap().parse().unwrap();
        let scale = match words.next().unwrap() {
            "ns" => 1e-3,
            "µs" | "us" => 1.0,
            "ms" => 1e3,
            "s" | "sec" | "secs" => 1e6,
            u => panic!("unit {u}"),
        };
        value * scale
    }

    /// `  [200] 1960 responses` and `  [4] timeout` lines of oha's text summary.
    fn text_counts(text: &str) -> (u64, u64) {
        let (mut all, mut bad) = (0, 0);
        let mut in_errors = false;
        for line in text.lines() {
            if line.starts_with("Error distribution") {
                in_errors = true;
            }
            let l = line.trim();
            if let Some(rest) = l.strip_prefix('[') {
                let (head, tail) = rest.split_once(']').unwrap();
                let n: u64;
                if in_errors {
                    n = head.parse().unwrap();
                    bad += n;
                } else if tail.trim_end().ends_with("responses") {
                    n = tail.split_whitespace().next().unwrap().parse().unwrap();
                    if !head.starts_with('2') {
                        bad += n;
                    }
                } else {
                    continue;
                }
                all += n;
            }
        }
        (all, bad)
    }

    /// What oha printed for each fixture run, rounded to the µs: `latencyPercentiles` (seconds,
    /// 9 decimals) and, independently, `metrics.latency_ms` (oha rounds it to 3 decimals of ms).
    #[test]
    fn fixtures_reproduce_the_json_oha_printed() {
        let expected = [
            (
                INVENTORY,
                stats("inventory", 2000, 0, 4_887, 31_007, 81_090),
            ),
            // 40 × 500 and 6 × 503 (oha's own success rate counts them as successes).
            (PAYMENT, stats("payment", 2000, 46, 15_919, 61_035, 150_669)),
            // 1996 responses (16 × 404) + 4 timeouts under `-t 1s`.
            (USER, stats("user", 2000, 20, 2_869, 10_860, 23_242)),
        ];
        for (json, want) in expected {
            let got = read(json, Some(&want.label), 4096)
                .unwrap()
                .labels
                .remove(0);
            assert_eq!(got, want);
            let v: Value = serde_json::from_slice(json).unwrap();
            let lp = &v["latencyPercentiles"];
            let ms = &v["metrics"]["latency_ms"];
            for (us, key) in [
                (got.p50_us.unwrap(), "p50"),
                (got.p99_us, "p99"),
                (got.p999_us, "p99.9"),
            ] {
                assert!(
                    (lp[key].as_f64().unwrap() * 1e6 - us as f64).abs() <= 0.5,
                    "{key}"
                );
            }
            assert_eq!(
                (ms["p50"].as_f64().unwrap() * 1000.0).round() as u64,
                got.p50_us.unwrap()
            );
            assert_eq!(
                (ms["p99"].as_f64().unwrap() * 1000.0).round() as u64,
                got.p99_us
            );
        }
    }

    /// oha prints one format per run, so each text summary comes from a second run with the
    /// same parameters against the same restarted server, whose delays and errors are
    /// deterministic: the counts match exactly, the percentiles within a few percent (measured:
    /// ≤ 0.5 %; see the fixtures' README).
    #[test]
    fn fixtures_agree_with_oha_text_summary_of_the_twin_run() {
        for (json, text, label) in [
            (INVENTORY, INVENTORY_TXT, "inventory"),
            (PAYMENT, PAYMENT_TXT, "payment"),
            (USER, USER_TXT, "user"),
        ] {
            let got = read(json, Some(label), 4096).unwrap().labels.remove(0);
            let (all, bad) = text_counts(text);
            assert_eq!(
                (got.samples, got.failures),
                (all, bad),
                "{label}: counts of the text run"
            );
            for (pct, us) in [
                ("50.00", got.p50_us.unwrap()),
                ("99.00", got.p99_us),
                ("99.90", got.p999_us),
            ] {
                let t = text_percentile(text, pct);
                let rel = (us as f64 - t).abs() / t;
                assert!(rel < 0.05, "{label} p{pct}: json {us} µs, text run {t} µs");
            }
        }
    }

    fn stats(
        label: &str,
        samples: u64,
        failures: u64,
        p50: u64,
        p99: u64,
        p999: u64,
    ) -> LabelStats {
        LabelStats {
            label: label.to_owned(),
            samples,
            failures,
            p50_us: Some(p50),
            p99_us: p99,
            p999_us: p999,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Mutated fixtures (bytes flipped, cut, spliced) never panic the parser.
        #[test]
        fn mutated_fixtures_never_panic(
            which in 0usize..3,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
            cut in any::<usize>(),
            chunk in 1usize..64,
        ) {
            let mut input = [INVENTORY, PAYMENT, USER][which].to_vec();
            for (at, byte) in edits {
                let i = at % input.len();
                input[i] = byte;
            }
            input.truncate(cut % (input.len() + 1));
            let _ = sniff(&input);
            let _ = read(&input, Some("x"), chunk);
            let _ = read(&input, None, chunk);
        }

        /// Digit-level mutations (keeping JSON valid more often) never panic either.
        #[test]
        fn mutated_numbers_never_panic(
            which in 0usize..3,
            edits in proptest::collection::vec((any::<usize>(), prop::sample::select(b"0123456789.-e\"".to_vec())), 1..6),
        ) {
            let mut input = [INVENTORY, PAYMENT, USER][which].to_vec();
            for (at, byte) in edits {
                let i = at % input.len();
                if input[i].is_ascii_digit() {
                    input[i] = byte;
                }
            }
            let _ = read(&input, Some("x"), 4096);
        }
    }
}
