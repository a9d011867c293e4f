//! Tests of the k6 parser: both summary shapes, sub-metrics, the fixtures, bad and oversized
//! inputs.

use super::*;
use crate::testkit::{kit_tests, points};
use crate::{detect, read_all, MAX_JSON_SUMMARY_BYTES};
use proptest::prelude::*;

mod fixtures;
mod points;

const HANDLE_SUMMARY: &[u8] =
    include_bytes!("../../../../../tests/fixtures/k6/handle-summary.json");
const SUMMARY_EXPORT: &[u8] =
    include_bytes!("../../../../../tests/fixtures/k6/summary-export.json");
const DEFAULT_STATS: &[u8] =
    include_bytes!("../../../../../tests/fixtures/k6/default-trend-stats.json");
const NO_FAILED: &[u8] =
    include_bytes!("../../../../../tests/fixtures/k6/summary-export-no-failed.json");
const SUMMARY_TXT: &str = include_str!("../../../../../tests/fixtures/k6/summary.txt");
const NO_FAILED_TXT: &str = include_str!("../../../../../tests/fixtures/k6/summary-no-failed.txt");
const OHA: &[u8] = include_bytes!("../../../../../tests/fixtures/oha/inventory.json");

fn read(input: &[u8], chunk: usize) -> Result<Extracted, IngestError> {
    read_all(parser(&Options::default()).unwrap(), input, chunk)
}

fn stats(
    label: &str,
    samples: u64,
    failures: Option<u64>,
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
            stats("inventory", 600, Some(0), Some(4250), 30_100, 80_000),
            stats("payment", 600, Some(12), Some(16_000), 61_000, 151_000),
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
            Some(20),
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
    assert_eq!(e.labels, vec![stats("x", 7, None, None, 5000, 6000)]);
    assert!(
        e.notes[0].starts_with("failures: unknown for x — "),
        "{:?}",
        e.notes
    );
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
        (vec![t.as_str(), reqs, failed], 60, Some(3)),
        (vec![t.as_str(), failed], 50, Some(3)),
        (vec![no_count.as_str(), failed], 70, Some(3)),
        // No http_req_failed{name:a}: failures unknown, not 0.
        (vec![t.as_str()], 50, None),
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
        vec![stats("http_req_duration", 10, None, Some(1000), 2000, 3000)]
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
    let lines: Vec<&str> = text.lines().collect();
    // The line of inventory's p(99.9), in whatever order k6 wrote the keys.
    let metric = lines
        .iter()
        .position(|l| l.contains("\"http_req_duration{name:inventory}\""))
        .unwrap();
    let values = metric
        + lines[metric..]
            .iter()
            .position(|l| l.contains("\"values\""))
            .unwrap();
    let at = values
        + lines[values..]
            .iter()
            .position(|l| l.contains("\"p(99.9)\""))
            .unwrap();
    let original = lines[at];
    let bad = text.replacen(
        original,
        &original.replace("p(99.9)\": ", "p(99.9)\": -"),
        1,
    );
    let err = read(bad.as_bytes(), 7).unwrap_err();
    assert_eq!(
        err.field.as_deref(),
        Some("/metrics/http_req_duration{name:inventory}/values/p(99.9)")
    );
    assert_eq!(err.line, Some(at as u64 + 1), "{err}");
    // A missing stat: the line of its parent (`values`).
    let missing: String = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != at)
        .map(|(_, l)| format!("{l}\n"))
        .collect::<String>()
        .replace(",\n    }", "\n    }")
        .replace(",\n      }", "\n      }");
    let err = read(missing.as_bytes(), 7).unwrap_err();
    assert!(err.message.contains("--summary-trend-stats"), "{err}");
    assert_eq!(err.line, Some(values as u64 + 1), "{err}");
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
    assert_eq!(e.labels, vec![stats("a", 7, None, None, 5000, 6000)]);
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
    for f in [HANDLE_SUMMARY, SUMMARY_EXPORT, DEFAULT_STATS, NO_FAILED] {
        assert!(sniff(f));
        // Real k6 files put `metrics` or `root_group` first, keys shuffled: the reader's head.
        assert_eq!(
            detect(&f[..crate::reader::SNIFF_BYTES.min(f.len())]),
            Some(Format::K6)
        );
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

kit_tests!(Format::K6);
