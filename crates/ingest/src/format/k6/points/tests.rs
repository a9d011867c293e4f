//! Tests of the k6 raw-points parser: the real files (NDJSON and CSV of one run) against the
//! exact nearest-rank percentiles of their own values, failure rules, bad input.

use super::*;
use crate::testkit::{self, gunzip, kit_tests};
use crate::{detect, LabelStats};

const JSON: &[u8] = include_bytes!("../../../../../../tests/fixtures/k6/points-small.json");
const CSV: &[u8] = include_bytes!("../../../../../../tests/fixtures/k6/points-small.csv");
const TEXT: &str = include_str!("../../../../../../tests/fixtures/k6/points-small-summary.txt");

fn read(input: &[u8]) -> Result<Extracted, IngestError> {
    testkit::read_in_every_chunking(Format::K6Points, &Options::default(), input)
}

/// Every `http_req_duration` value of a k6 NDJSON file, by name tag, in µs.
fn values(ndjson: &[u8]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in std::str::from_utf8(ndjson).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["type"] == "Point" && v["metric"] == "http_req_duration" {
            let name = v["data"]["tags"]["name"].as_str().unwrap().to_owned();
            let us = (v["data"]["value"].as_f64().unwrap() * 1000.0).round() as u64;
            out.entry(name).or_default().push(us);
        }
    }
    out
}

/// `l`'s p99 and p999 are the exact nearest-rank ones of `sorted` (its values, µs) within
/// HDR's 0.1 %.
fn assert_nearest_rank(l: &LabelStats, sorted: &[u64]) {
    for (q, got) in [(0.99, l.p99_us), (0.999, l.p999_us)] {
        let exact = sorted[((q * sorted.len() as f64).ceil() as usize).max(1) - 1];
        assert!(
            got.abs_diff(exact) as f64 <= exact as f64 * 0.001,
            "{}: {q}: {got} / {exact}",
            l.label
        );
    }
}

/// The same run read from its NDJSON and its CSV: the same labels, samples and failures as
/// k6 printed, and each percentile the exact nearest-rank one within HDR's 0.1 %.
#[test]
fn json_and_csv_of_one_run_agree_with_the_exact_percentiles() {
    let json = read(JSON).unwrap();
    let csv = read(CSV).unwrap();
    assert_eq!(json.labels, csv.labels);
    assert_eq!(
        (json.format, json.tool.as_deref()),
        (Format::K6Points, Some("k6"))
    );
    assert!(json.notes.is_empty());
    let values = values(JSON);
    for l in &json.labels {
        let mut v = values[&l.label].clone();
        v.sort_unstable();
        assert_eq!(l.samples, v.len() as u64);
        // k6 printed e.g. "{ name:inventory }...: avg=… count=20".
        let printed = TEXT
            .lines()
            .find(|t| t.contains(&format!("{{ name:{} }}", l.label)) && t.contains("count="))
            .unwrap();
        assert!(
            printed.trim_end().ends_with(&format!("count={}", v.len())),
            "{printed}"
        );
        assert_nearest_rank(l, &v);
        assert_eq!(l.failures, Some(0), "{}", l.label);
    }
    assert_eq!(
        json.labels
            .iter()
            .map(|l| l.label.as_str())
            .collect::<Vec<_>>(),
        ["inventory", "payment", "user"]
    );
    assert_eq!(detect(JSON), Some(Format::K6Points));
    assert_eq!(detect(CSV), Some(Format::K6Points));
    assert!(!super::super::sniff(JSON), "not a k6 summary");
}

const POINTS_JSON_GZ: &[u8] = include_bytes!("../../../../../../tests/fixtures/k6/points.json.gz");
const POINTS_CSV_GZ: &[u8] = include_bytes!("../../../../../../tests/fixtures/k6/points.csv.gz");
const POINTS_TEXT: &str = include_str!("../../../../../../tests/fixtures/k6/points-summary.txt");

/// The larger real run (110 requests per name, gzipped by k6): its NDJSON and CSV read to
/// the same figures, the ones `tests/fixtures/k6/README.md` shows beside k6's printed summary
/// (µs), each within HDR's 0.1 % of the exact nearest rank of the file's own values, with
/// k6's own request and failure counts.
#[test]
fn the_gzipped_run_gives_the_figures_the_fixture_readme_shows() {
    // Read whole (every-chunking reads are for the small files).
    let read = |input: &[u8]| {
        crate::read_all(parser(&Options::default()).unwrap(), input, 64 * 1024).unwrap()
    };
    let plain = gunzip(POINTS_JSON_GZ);
    let json = read(&plain);
    let csv = read(&gunzip(POINTS_CSV_GZ));
    assert_eq!(json.labels, csv.labels);
    let got: Vec<_> = json
        .labels
        .iter()
        .map(|l| (l.label.as_str(), l.samples, l.failures, l.p99_us, l.p999_us))
        .collect();
    assert_eq!(
        got,
        [
            ("inventory", 110, Some(0), 35_359, 42_367),
            ("payment", 110, Some(2), 60_799, 63_231),
            ("user", 110, Some(1), 12_991, 16_911),
        ]
    );
    let mut values = values(&plain);
    for l in &json.labels {
        let v = values.get_mut(&l.label).unwrap();
        v.sort_unstable();
        assert_nearest_rank(l, v);
        // k6 counted the same requests: "{ name:inventory }...: ... count=110".
        assert!(
            POINTS_TEXT
                .lines()
                .any(|t| t.contains(&format!("{{ name:{} }}", l.label))
                    && t.trim_end().ends_with("count=110")),
            "{}",
            l.label
        );
    }
}

fn point(value: &str, tags: &str) -> String {
    format!(
        "{{\"metric\":\"http_req_duration\",\"type\":\"Point\",\"data\":{{\"time\":\"2026-12-01T22:35:40Z\",\"value\":{value},\"tags\":{{{tags}}}}}}}\n"
    )
}

fn label(e: &Extracted, name: &str) -> LabelStats {
    e.labels.iter().find(|l| l.label == name).unwrap().clone()
}

#[test]
fn failures_from_expected_response_or_status() {
    let input = [
        point(
            "1",
            r#""name":"a","expected_response":"true","status":"500""#,
        ),
        point(
            "2",
            r#""name":"a","expected_response":"false","status":"200""#,
        ),
        point("3", r#""name":"b","status":"404""#),
        point("4", r#""name":"b","status":"0""#),
        point("5", r#""name":"b","status":"302""#),
        point("6", r#""name":"c""#),
        point("7", r#""url":"http://127.0.0.1/x","status":"200""#),
        point("8", ""),
        // Other metrics and declarations are dropped.
        r#"{"type":"Metric","data":{"name":"http_reqs","type":"counter"},"metric":"http_reqs"}"#
            .to_owned()
            + "\n",
        r#"{"metric":"http_reqs","type":"Point","data":{"value":1,"tags":{"name":"a"}}}"#
            .to_owned()
            + "\n",
    ]
    .concat();
    let e = read(input.as_bytes()).unwrap();
    assert_eq!(
        (label(&e, "a").samples, label(&e, "a").failures),
        (2, Some(1))
    );
    assert_eq!(
        (label(&e, "b").samples, label(&e, "b").failures),
        (3, Some(2))
    );
    assert_eq!(label(&e, "c").failures, None);
    assert_eq!(label(&e, "http://127.0.0.1/x").failures, Some(0));
    assert_eq!(label(&e, "http_req_duration").failures, None);
    assert!(
        e.notes[0].starts_with("failures: unknown for c, http_req_duration"),
        "{:?}",
        e.notes
    );
}

#[test]
fn bad_input_names_the_line() {
    let good = point("1", r#""name":"a","status":"200""#);
    let cases: Vec<(String, u64, &str)> = vec![
        (
            format!("{good}{{\"metric\":\"http_req_duration\",\"type\":\"Point\"\n"),
            2,
            "not a k6 point",
        ),
        (
            format!("{good}{}", point("\"x\"", r#""name":"a""#)),
            2,
            "not a k6 point",
        ),
        (
            format!("{good}{}", point("-1", r#""name":"a""#)),
            2,
            "not a latency",
        ),
        (
            format!("{good}{}", point("4000000", r#""name":"a""#)),
            2,
            "over one hour",
        ),
        (
            format!("{good}{}", point("1", r#""name":"a","status":"abc""#)),
            2,
            "not an HTTP status",
        ),
        (
            format!(
                "{good}{}",
                point("1", r#""name":"a","expected_response":"maybe""#)
            ),
            2,
            "true or false",
        ),
        (
            "metric_name,timestamp,metric_value,name\nhttp_req_duration,1,abc,a\n".to_owned(),
            2,
            "not a number",
        ),
    ];
    for (input, line, msg) in cases {
        let err = read(input.as_bytes()).unwrap_err();
        assert_eq!(err.line, Some(line), "{err}");
        assert!(err.message.contains(msg), "{err}");
    }
    let err = read(b"metric_name,timestamp\n").unwrap_err();
    assert!(err.message.contains("missing column"), "{err}");
    for empty in [&b""[..], b"\n\n"] {
        assert!(read(empty).unwrap_err().message.contains("empty input"));
    }
    let none = r#"{"type":"Metric","data":{"name":"http_reqs"},"metric":"http_reqs"}"#;
    assert!(read(none.as_bytes())
        .unwrap_err()
        .message
        .contains("no http_req_duration point"));
    let many: String = (0..=MAX_LABELS)
        .map(|i| point("1", &format!("\"name\":\"e{i}\"")))
        .collect();
    assert!(read(many.as_bytes())
        .unwrap_err()
        .message
        .contains("more than 256"));
}

kit_tests!(Format::K6Points);
