//! Tests of the oha parser: units, counts, the size cap, error positions, and the fixtures
//! against what oha printed.

use super::*;
use crate::testkit::{self, kit_tests, points};
use crate::{detect, read_all, MAX_JSON_SUMMARY_BYTES};
use proptest::prelude::*;
use serde_json::Value;

mod points;

const INVENTORY: &[u8] = include_bytes!("../../../../../tests/fixtures/oha/inventory.json");
const PAYMENT: &[u8] = include_bytes!("../../../../../tests/fixtures/oha/payment.json");
const USER: &[u8] = include_bytes!("../../../../../tests/fixtures/oha/user.json");
const INVENTORY_TXT: &str = include_str!("../../../../../tests/fixtures/oha/inventory.txt");
const PAYMENT_TXT: &str = include_str!("../../../../../tests/fixtures/oha/payment.txt");
const USER_TXT: &str = include_str!("../../../../../tests/fixtures/oha/user.txt");

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
            failures: Some(12),
            p50_us: Some(5000),
            p99_us: 50_000,
            p999_us: 100_000
        }
    );
}

#[test]
fn chunk_boundaries_do_not_matter() {
    testkit::read_in_every_chunking(Format::Oha, &opts("a"), ok_doc().as_bytes()).unwrap();
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
    assert_eq!((s.samples, s.failures), (101, Some(1)));
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
    assert_eq!((s.samples, s.failures), (1000, Some(10)));
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
        (1002, Some(12))
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
            (all, Some(bad)),
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

fn stats(label: &str, samples: u64, failures: u64, p50: u64, p99: u64, p999: u64) -> LabelStats {
    LabelStats {
        label: label.to_owned(),
        samples,
        failures: Some(failures),
        p50_us: Some(p50),
        p99_us: p99,
        p999_us: p999,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

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

kit_tests!(Format::Oha);
