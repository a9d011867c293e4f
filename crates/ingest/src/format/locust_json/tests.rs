//! Tests of the Locust JSON parser: the real `--json` output against numbers computed here from
//! its `response_times`, labels, errors with their pointers and lines, detection.

use base64::Engine as _;
use budget_core::distribution::Distribution;
use hdrhistogram::serialization::Deserializer as HdrDeserializer;
use hdrhistogram::Histogram;
use serde_json::Value;

use super::*;
use crate::testkit::{self, kit_tests, FIXTURES};
use crate::{detect, read_all, MAX_JSON_SUMMARY_BYTES};

const SHOP: &[u8] = include_bytes!("../../../../../tests/fixtures/locust/shop.json");
const SHOP_SUMMARY: &str =
    include_str!("../../../../../tests/fixtures/locust/shop_json_summary.txt");
const IDLE: &[u8] = include_bytes!("../../../../../tests/fixtures/locust/idle.json");

/// Parses `input` in one push and in chunks of every small size: all must agree.
fn parse(input: &[u8]) -> Result<Extracted, IngestError> {
    testkit::read_in_every_chunking(Format::LocustJson, &Options::default(), input)
}

fn error(input: &str) -> String {
    parse(input.as_bytes()).expect_err(input).to_string()
}

/// One entry as Locust writes it (the members the parser reads, and one it drops).
fn entry(name: &str, method: &str, requests: u64, failures: u64, times: &str) -> String {
    format!(
        r#"{{"name": {name:?}, "method": {method:?}, "num_requests": {requests},
        "num_none_requests": 0, "num_failures": {failures}, "response_times": {{{times}}},
        "num_reqs_per_sec": {{"1796320348": {requests}}}}}"#
    )
}

/// The `response_times` of each entry of a Locust JSON, read independently of the parser:
/// (name, num_requests, num_failures, [(ms, count)] sorted by ms).
/// An entry of the file: name, num_requests, num_failures, response times (ms, count).
type FileEntry = (String, u64, u64, Vec<(f64, u64)>);

fn response_times(input: &[u8]) -> Vec<FileEntry> {
    let doc: Value = serde_json::from_slice(input).unwrap();
    doc.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let mut times: Vec<(f64, u64)> = e["response_times"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.parse().unwrap(), v.as_u64().unwrap()))
                .collect();
            times.sort_by(|a, b| a.0.total_cmp(&b.0));
            (
                e["name"].as_str().unwrap().to_owned(),
                e["num_requests"].as_u64().unwrap(),
                e["num_failures"].as_u64().unwrap(),
                times,
            )
        })
        .collect()
}

/// Nearest rank: the smallest response time with at least ⌈p/1000 × n⌉ requests at or below it
/// (p in thousandths: 990 for p99), in exact integer arithmetic.
fn nearest_rank(times: &[(f64, u64)], per_mille: u64) -> f64 {
    let n: u64 = times.iter().map(|t| t.1).sum();
    let rank = (per_mille * n).div_ceil(1000).max(1);
    let mut below = 0;
    for &(ms, count) in times {
        below += count;
        if below >= rank {
            return ms;
        }
    }
    unreachable!("rank {rank} of {n}")
}

fn histogram(e: &Extracted, label: &str) -> Histogram<u64> {
    let Some(Distribution::Histogram { hdr }) = e.distributions.get(label) else {
        panic!("no histogram for {label}: {:?}", e.distributions)
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(hdr)
        .unwrap();
    HdrDeserializer::new().deserialize(&mut &bytes[..]).unwrap()
}

/// Requests the histogram holds above `us` (each bucket at its lowest value).
fn above(h: &Histogram<u64>, us: u64) -> u64 {
    h.iter_recorded()
        .filter(|v| h.lowest_equivalent(v.value_iterated_to()) > us)
        .map(|v| v.count_at_value())
        .sum()
}

/// The real `locust --json` output (Locust 2.47.0, README.md): per label, samples are the sum of
/// the file's `response_times` counts (= its `num_requests`), failures its `num_failures`, and
/// p50 / p99 / p99.9 the nearest-rank response times computed here from `response_times`.
#[test]
fn fixture_gives_the_nearest_rank_of_its_response_times() {
    let got = parse(SHOP).unwrap();
    assert_eq!(
        (got.format, got.tool.as_deref()),
        (Format::LocustJson, Some("locust"))
    );
    assert!(got.notes.is_empty(), "{:?}", got.notes);
    let want = response_times(SHOP);
    assert_eq!(
        got.labels.iter().map(|l| &l.label).collect::<Vec<_>>(),
        want.iter().map(|w| &w.0).collect::<Vec<_>>()
    );
    assert_eq!(
        want.iter().map(|w| w.0.as_str()).collect::<Vec<_>>(),
        ["inventory", "user", "payment"]
    );
    for (stats, (name, requests, failures, times)) in got.labels.iter().zip(&want) {
        let sum: u64 = times.iter().map(|t| t.1).sum();
        assert_eq!(stats.samples, sum, "{name}");
        assert_eq!(stats.samples, *requests, "{name}");
        assert_eq!(stats.failures, Some(*failures), "{name}");
        let us = |ms: f64| (ms * 1000.0).round() as u64;
        assert_eq!(stats.p50_us, Some(us(nearest_rank(times, 500))), "{name}");
        assert_eq!(stats.p99_us, us(nearest_rank(times, 990)), "{name}");
        assert_eq!(stats.p999_us, us(nearest_rank(times, 999)), "{name}");
    }
    // The run had 500s on payment only, and response times past 100 ms (Locust's 10 ms keys).
    assert!(want[2].2 > 0 && want[0].2 == 0 && want[1].2 == 0);
    assert!(want.iter().any(|w| w.3.iter().any(|t| t.0 > 100.0)));
}

/// What Locust printed at exit after the JSON (`shop_json_summary.txt`): printing the JSON
/// cleared its per-name rows, but the `Aggregated` row holds the run's totals, which are the
/// labels' sums; its `100%` is the largest response time of the file.
#[test]
fn fixture_adds_up_to_the_aggregated_row_locust_printed() {
    let got = parse(SHOP).unwrap();
    let (counts, percentiles) = SHOP_SUMMARY
        .split_once("Response time percentiles")
        .unwrap();
    let row = |table: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some("Aggregated"))
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let c = row(counts);
    let requests: u64 = c[1].parse().unwrap();
    let failures: u64 = c[2].split('(').next().unwrap().parse().unwrap();
    assert_eq!(got.labels.iter().map(|l| l.samples).sum::<u64>(), requests);
    assert_eq!(
        got.labels.iter().map(|l| l.failures.unwrap()).sum::<u64>(),
        failures
    );
    let p = row(percentiles);
    let hundred: u64 = p[p.len() - 2].parse().unwrap();
    let largest = response_times(SHOP)
        .iter()
        .flat_map(|w| w.3.iter().map(|t| t.0))
        .fold(0.0, f64::max);
    assert_eq!(largest, hundred as f64);
}

/// The stored histogram of each label holds exactly its requests: for thresholds between the
/// file's response times (and below and above all of them), the requests it counts above the
/// threshold are those of `response_times` above it.
#[test]
fn fixture_histograms_count_the_requests_above_each_threshold() {
    let got = parse(SHOP).unwrap();
    assert_eq!(
        got.distributions.keys().collect::<Vec<_>>(),
        ["inventory", "payment", "user"]
    );
    for (name, _, _, times) in response_times(SHOP) {
        let h = histogram(&got, &name);
        let sum: u64 = times.iter().map(|t| t.1).sum();
        assert_eq!(h.len(), sum, "{name}");
        let mut thresholds = vec![0.5, times[times.len() - 1].0 + 0.5];
        thresholds.extend(times.windows(2).map(|w| (w[0].0 + w[1].0) / 2.0));
        for t in thresholds {
            let want: u64 = times.iter().filter(|x| x.0 > t).map(|x| x.1).sum();
            let t_us = (t * 1000.0) as u64;
            assert_eq!(above(&h, t_us), want, "{name}: above {t} ms");
        }
    }
}

/// A `response_times` key given in the array of another line than the entry's start: errors
/// point at the entry by index and give the line of the member at fault.
#[test]
fn errors_in_the_fixture_give_the_entry_and_its_line() {
    let text = std::str::from_utf8(SHOP).unwrap();
    let line_of = |text: &str, needle: &str| {
        1 + text[..text.find(needle).unwrap()].matches('\n').count() as u64
    };
    // Entry 2 is payment, with 11 failures.
    let broken = text.replacen("\"num_failures\": 11,", "\"num_failures\": 11.5,", 1);
    let e = parse(broken.as_bytes()).unwrap_err();
    assert_eq!(
        (e.line, e.field.as_deref(), e.message.as_str()),
        (
            Some(line_of(&broken, "\"num_failures\": 11.5")),
            Some("/2/num_failures"),
            "must be a non-negative whole number (a count of requests)"
        )
    );
    // A key of user's response times (entry 1); the same key in inventory is not taken.
    let user = text.find("\"name\": \"user\"").unwrap();
    let at = user + text[user..].find("\"response_times\": {").unwrap();
    let key = at + text[at..].find("\"10\":").unwrap();
    let broken = format!("{}\"1O\":{}", &text[..key], &text[key + 5..]);
    let e = parse(broken.as_bytes()).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("/1/response_times/1O"));
    assert_eq!(e.line, Some(line_of(&broken, "\"1O\"")));
    assert!(e.message.starts_with("key \"1O\" is not a number"), "{e}");
    // Counts that no longer add up.
    let broken = text.replacen("\"num_requests\": 469,", "\"num_requests\": 470,", 1);
    let e = parse(broken.as_bytes()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "line {}: /2/num_requests: is 470 but response_times counts 469 requests: the entry \
             was edited or cut, its response times do not describe its requests",
            line_of(&broken, "\"num_requests\": 470")
        )
    );
}

#[test]
fn reads_entries() {
    // One name under two methods: labelled "{method} {name}"; Aggregated is a label like the
    // others; key 0 (under 0.5 ms), fractional keys and 10 ms keys past 100 ms; zero counts.
    let input = format!(
        "[{}, {}, {}, {}]",
        entry("user", "GET", 3, 0, r#""0": 1, "4.5": 1, "120": 1"#),
        entry("user", "POST", 2, 1, r#""7": 2, "9": 0"#),
        entry("inventory", "GET", 100, 0, r#""3": 98, "60": 1, "250": 1"#),
        entry(
            "Aggregated",
            "",
            105,
            1,
            r#""3": 98, "60": 1, "250": 1, "0": 1, "4.5": 1, "120": 1, "7": 2"#
        ),
    );
    let got = parse(input.as_bytes()).unwrap();
    let stats = |label: &str, samples, failures, p: [u64; 3]| LabelStats {
        label: label.to_owned(),
        samples,
        failures: Some(failures),
        p50_us: Some(p[0]),
        p99_us: p[1],
        p999_us: p[2],
    };
    assert_eq!(
        got.labels,
        [
            stats("GET user", 3, 0, [4_500, 120_000, 120_000]),
            stats("POST user", 2, 1, [7_000, 7_000, 7_000]),
            stats("inventory", 100, 0, [3_000, 60_000, 250_000]),
            stats("Aggregated", 105, 1, [3_000, 120_000, 250_000]),
        ]
    );
    assert!(got.notes.is_empty());
    let h = histogram(&got, "GET user");
    assert_eq!((h.len(), above(&h, 1), above(&h, 5_000)), (3, 2, 1));

    // A name under one method keeps its name; `method` may be missing or null; a repeated
    // response time counts every time; members in any order.
    let input = r#"[{"response_times": {"5": 1, "5.0": 1, "5": 2}, "num_failures": 0,
        "num_requests": 4, "name": "a"}, {"name": "b", "method": null, "num_requests": 1,
        "num_failures": 1, "response_times": {"1": 1}}]"#;
    let got = parse(input.as_bytes()).unwrap();
    assert_eq!(
        got.labels,
        [stats("a", 4, 0, [5_000; 3]), stats("b", 1, 1, [1_000; 3])]
    );
}

/// Requests without a response time (`num_none_requests`): samples are the timed requests, a
/// note says so, and failures are unknown unless there are none. Failures Locust counts without
/// a request (more than the requests) are unknown too. An entry without a timed request gives
/// no label.
#[test]
fn requests_without_a_response_time_are_noted() {
    let input = r#"[{"name": "a", "method": "GET", "num_requests": 5, "num_none_requests": 2,
        "num_failures": 1, "response_times": {"8": 3}},
        {"name": "b", "method": "GET", "num_requests": 5, "num_none_requests": 1,
        "num_failures": 0, "response_times": {"8": 4}},
        {"name": "c", "method": "GET", "num_requests": 2, "num_none_requests": 2,
        "num_failures": 2, "response_times": {}},
        {"name": "d", "method": "GET", "num_requests": 2, "num_failures": 3,
        "response_times": {"8": 2}}]"#;
    let got = parse(input.as_bytes()).unwrap();
    let summary: Vec<(&str, u64, Option<u64>)> = got
        .labels
        .iter()
        .map(|l| (l.label.as_str(), l.samples, l.failures))
        .collect();
    assert_eq!(summary, [("a", 3, None), ("b", 4, Some(0)), ("d", 2, None)]);
    assert_eq!(
        got.notes,
        [
            "a: 2 of 5 requests have no response time (Locust's num_none_requests): samples and \
             percentiles count the other 3; failures unknown (Locust counts 1 but does not say \
             how many had a response time)",
            "b: 1 of 5 requests have no response time (Locust's num_none_requests): samples and \
             percentiles count the other 4; failures 0",
            "d: Locust counts 3 failures but only 2 requests (errors logged without a request, \
             e.g. by calling stats.log_error): failures unknown",
        ]
    );
    assert_eq!(
        got.distributions.keys().collect::<Vec<_>>(),
        ["a", "b", "d"]
    );
}

#[test]
fn rejects_bad_input() {
    let ok = |times: &str| entry("a", "GET", 1, 0, times);
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "empty input: expected Locust JSON"),
        (
            "[]\n".to_owned(),
            "empty array: Locust lists no request. It writes `[]` for a run in which no user \
             made a request, and into the --json-file when --json is given too (printing its \
             stats clears them)",
        ),
        (
            "{\"name\": \"a\"}".to_owned(),
            "line 1: expected a JSON array (Locust summary) here",
        ),
        (
            "[{\"name\": \"a\",".to_owned(),
            "line 1: near key \"name\": truncated JSON (Locust summary), column 14: EOF while \
             parsing a value",
        ),
        (
            "[1]".to_owned(),
            "line 1: /0: must be an object (one Locust stats entry)",
        ),
        (
            format!("[{}, null]", ok(r#""1": 1"#)).replace('\n', " "),
            "line 1: /1: must be an object (one Locust stats entry)",
        ),
        (
            r#"[{"method": "GET", "num_requests": 0, "num_failures": 0, "response_times": {}}]"#
                .to_owned(),
            "line 1: /0/name: missing: every Locust stats entry has a name",
        ),
        (
            format!("[{}]", ok(r#""1": 1"#).replace("\"a\"", "7")).replace('\n', " "),
            "line 1: /0/name: must be a string",
        ),
        (
            format!("[{}]", entry("", "GET", 1, 0, r#""1": 1"#)).replace('\n', " "),
            "line 1: /0/name: is empty",
        ),
        (
            format!("[{}]", ok(r#""1": 1"#).replace("\"GET\"", "1")).replace('\n', " "),
            "line 1: /0/method: must be a string",
        ),
        (
            format!("[{}]", ok(r#""1": 1"#).replace("\"num_failures\": 0,", "")).replace('\n', " "),
            "line 1: /0/num_failures: missing: this is not Locust's --json output",
        ),
        (
            format!(
                "[{}]",
                ok(r#""1": 1"#).replace("\"num_requests\": 1", "\"num_requests\": \"1\"")
            )
            .replace('\n', " "),
            "line 1: /0/num_requests: must be a non-negative whole number (a count of requests)",
        ),
        (
            r#"[{"name": "a", "num_requests": 1, "num_failures": 0}]"#.to_owned(),
            "line 1: /0/response_times: missing: Locust writes each entry's response times there",
        ),
        (
            r#"[{"name": "a", "num_requests": 1, "num_failures": 0, "response_times": [1]}]"#
                .to_owned(),
            "line 1: /0/response_times: must be an object",
        ),
        // Keys: not a number, not finite, negative, over one hour.
        (
            format!("[{}]", ok(r#""abc": 1"#)).replace('\n', " "),
            "line 1: /0/response_times/abc: key \"abc\" is not a number of milliseconds \
             (Locust's response_times maps a response time in ms to a count of requests)",
        ),
        (
            format!("[{}]", ok(r#""": 1"#)).replace('\n', " "),
            "line 1: /0/response_times/: key \"\" is not a number of milliseconds (Locust's \
             response_times maps a response time in ms to a count of requests)",
        ),
        (
            format!("[{}]", ok(r#""NaN": 1"#)).replace('\n', " "),
            "line 1: /0/response_times/NaN: key \"NaN\" is not a number of milliseconds \
             (Locust's response_times maps a response time in ms to a count of requests)",
        ),
        (
            format!("[{}]", ok(r#""inf": 1"#)).replace('\n', " "),
            "line 1: /0/response_times/inf: key \"inf\" is not a number of milliseconds \
             (Locust's response_times maps a response time in ms to a count of requests)",
        ),
        (
            format!("[{}]", ok(r#""4 ms": 1"#)).replace('\n', " "),
            "line 1: /0/response_times/4 ms: key \"4 ms\" is not a number of milliseconds \
             (Locust's response_times maps a response time in ms to a count of requests)",
        ),
        (
            format!("[{}]", ok(r#""-5": 1"#)).replace('\n', " "),
            "line 1: /0/response_times/-5: key \"-5\" is negative: not a response time",
        ),
        (
            format!("[{}]", ok(r#""3600001": 1"#)).replace('\n', " "),
            "line 1: /0/response_times/3600001: key \"3600001\" is over one hour: Locust \
             writes response times in milliseconds",
        ),
        // Counts: fractional, negative, a string, null; the first wrong member is reported.
        (
            format!("[{}]", ok(r#""1": 0.5, "x": 1"#)).replace('\n', " "),
            "line 1: /0/response_times/1: must be a non-negative whole number (a count of \
             requests)",
        ),
        (
            format!("[{}]", ok(r#""1": -1"#)).replace('\n', " "),
            "line 1: /0/response_times/1: must be a non-negative whole number (a count of \
             requests)",
        ),
        (
            format!("[{}]", ok(r#""1": "1""#)).replace('\n', " "),
            "line 1: /0/response_times/1: must be a non-negative whole number (a count of \
             requests)",
        ),
        (
            format!("[{}]", ok(r#""1": null"#)).replace('\n', " "),
            "line 1: /0/response_times/1: must be a non-negative whole number (a count of \
             requests)",
        ),
        (
            format!("[{}]", ok(r#""1": 18446744073709551615, "2": 1"#)).replace('\n', " "),
            "line 1: /0/response_times: the counts overflow: not a real run",
        ),
        // Counts that disagree.
        (
            format!("[{}]", ok(r#""1": 2"#)).replace('\n', " "),
            "line 1: /0/num_requests: is 1 but response_times counts 2 requests: the entry was \
             edited or cut, its response times do not describe its requests",
        ),
        (
            format!(
                "[{}]",
                ok(r#""1": 1"#).replace("\"num_none_requests\": 0", "\"num_none_requests\": 1")
            )
            .replace('\n', " "),
            "line 1: /0/num_requests: is 1 but response_times counts 1 requests and 1 requests \
             without a response time (num_none_requests): the entry was edited or cut, its \
             response times do not describe its requests",
        ),
        // The same name and method twice.
        (
            format!("[{}, {}]", ok(r#""1": 1"#), ok(r#""2": 1"#)).replace('\n', " "),
            "line 1: /1/name: a second entry for method \"GET\" and name \"a\"",
        ),
        // Entries without a timed request only.
        (
            format!("[{}]", entry("a", "GET", 0, 3, "")).replace('\n', " "),
            "no entry has a request with a response time: Locust measured nothing",
        ),
        // Another tool's JSON.
        (
            r#"[{"type":"Point","metric":"http_req_duration","data":{"value":3}}]"#.to_owned(),
            "line 1: /0/name: missing: every Locust stats entry has a name",
        ),
    ];
    for (input, message) in &cases {
        assert_eq!(&error(input), message, "{input:?}");
    }
}

#[test]
fn entries_and_size_are_bounded() {
    let entries: Vec<String> = (0..=MAX_ENTRIES)
        .map(|i| {
            format!(
                r#"{{"name":"a{i}","num_requests":1,"num_failures":0,"response_times":{{"{}":1}}}}"#,
                i % 300
            )
        })
        .collect();
    let read = |entries: &[String]| {
        let input = format!("[{}]", entries.join(","));
        assert!(input.len() < MAX_JSON_SUMMARY_BYTES);
        read_all(
            parser(&Options::default()).unwrap(),
            input.as_bytes(),
            1 << 16,
        )
    };
    let got = read(&entries[..MAX_ENTRIES]).unwrap();
    assert_eq!(got.labels.len(), MAX_ENTRIES);
    assert_eq!(got.labels[299].p99_us, 299_000);
    assert_eq!(
        read(&entries).unwrap_err().to_string(),
        "more than 1000 entries: Locust writes one per request name, is this the right file?"
    );
    let mut p = parser(&Options::default()).unwrap();
    p.push(b"[").unwrap();
    let e = p.push(&vec![b' '; MAX_JSON_SUMMARY_BYTES]).unwrap_err();
    assert!(
        e.message
            .starts_with("Locust JSON is larger than the limit of 4 MiB"),
        "{e}"
    );
}

/// What Locust writes for a run without requests (`locust_idle.py`): `[]`. Not detected (nothing
/// says it is Locust's), refused with the reason when the format is given.
#[test]
fn idle_fixture_is_refused_with_the_reason() {
    assert_eq!(IDLE, b"[]\n");
    assert_eq!(detect(IDLE), None);
    assert!(error("[]\n").starts_with("empty array: Locust lists no request"));
    assert!(parse(IDLE).is_err());
}

#[test]
fn sniffs_locust_json_only() {
    let yes: &[&[u8]] = &[
        SHOP,
        &SHOP[..crate::reader::SNIFF_BYTES],
        &SHOP[..600],
        b"\xef\xbb\xbf [ {\"num_requests\": 1, \"response_times\": {}}]",
        b"[{\"name\":\"a\",\"num_requests\":1,\"response_times\":{\"1\":1}}]",
    ];
    for head in yes {
        assert!(sniff(head), "{:?}", String::from_utf8_lossy(head));
        assert_eq!(detect(head), Some(Format::LocustJson));
    }
    let no: &[&[u8]] = &[
        b"",
        b"[]",
        b"[1, {\"num_requests\": 1, \"response_times\": {}}]",
        b"{\"num_requests\": 1, \"response_times\": {}}",
        b"[{\"num_requests\": 1}]",
        b"[{\"response_times\": {}}]",
        b"{\"entries\": [{\"num_requests\": 1, \"response_times\": {}}]}",
    ];
    for head in no {
        assert!(!sniff(head), "{:?}", String::from_utf8_lossy(head));
    }
    // No other format takes Locust's JSON, nor this one another tool's file.
    use crate::format::{artillery, autocannon, hlog, jmeter, k6, locust, oha, wrk2};
    type Sniff = fn(&[u8]) -> bool;
    let others: [(&str, Sniff); 9] = [
        ("locust", locust::sniff),
        ("oha", oha::sniff),
        ("k6", k6::sniff),
        ("k6 points", k6::points::sniff),
        ("jmeter", jmeter::sniff),
        ("hdrhistogram", hlog::sniff),
        ("wrk2", wrk2::sniff),
        ("artillery", artillery::sniff),
        ("autocannon", autocannon::sniff),
    ];
    for (name, other) in others {
        assert!(!other(SHOP), "{name}");
        assert!(!other(&SHOP[..crate::reader::SNIFF_BYTES]), "{name}");
    }
    for f in FIXTURES.iter().filter(|f| f.format != Format::LocustJson) {
        assert!(!sniff(f.bytes), "{}", f.name);
    }
}

kit_tests!(Format::LocustJson);
