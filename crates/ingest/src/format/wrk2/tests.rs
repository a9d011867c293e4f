//! Tests of the wrk2 parser: the fixtures against the simulated runs' exact values, every
//! printed unit, bad inputs and sniffing.

use super::*;
use crate::read_all;
use crate::testkit::{self, kit_tests};
use budget_core::distribution::Distribution;

const CHECKOUT: &str = include_str!("../../../../../tests/fixtures/wrk2/checkout.txt");
const SEARCH: &str = include_str!("../../../../../tests/fixtures/wrk2/search-errors.txt");
const HEALTH: &str = include_str!("../../../../../tests/fixtures/wrk2/health-us.txt");
const WRK_PLAIN: &str = include_str!("../../../../../tests/fixtures/wrk2/wrk-plain.txt");
const EXPECTED: &str = include_str!("../../../../../tests/fixtures/wrk2/expected.txt");

fn read(input: &[u8], label: Option<&str>, chunk: usize) -> Result<Extracted, IngestError> {
    let options = Options {
        unit: None,
        label: label.map(str::to_owned),
    };
    read_all(parser(&options)?, input, chunk)
}

/// Reads `input` in one push and in chunks of every small size; all must agree.
fn read_chunked(input: &str, label: Option<&str>) -> Result<Extracted, IngestError> {
    let options = Options {
        unit: None,
        label: label.map(str::to_owned),
    };
    testkit::read_in_every_chunking(Format::Wrk2, &options, input.as_bytes())
}

/// How far a value printed by wrk2 (`format_time_us`, 2 decimals) may be from the exact
/// histogram value: half a unit of the last printed digit.
fn printed_rounding_us(exact_us: u64) -> f64 {
    let us = exact_us as f64;
    if us < 850.0 {
        0.005
    } else if us < 1_000_000.0 {
        5.0
    } else if us < 51_000_000.0 {
        5_000.0
    } else {
        300_000.0
    }
}

/// The fixtures reproduce the simulated run's exact HdrHistogram values within wrk2's
/// printing, and its counts exactly.
#[test]
fn fixtures_reproduce_the_recorded_values() {
    let rows: Vec<Vec<&str>> = EXPECTED
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3);
    for row in rows {
        let text = match row[0] {
            "checkout.txt" => CHECKOUT,
            "search-errors.txt" => SEARCH,
            "health-us.txt" => HEALTH,
            other => panic!("unknown fixture {other}"),
        };
        let n: Vec<u64> = row[1..].iter().map(|v| v.parse().unwrap()).collect();
        let got = read_chunked(text, Some("endpoint")).unwrap();
        assert_eq!(got.format, Format::Wrk2);
        assert_eq!(got.tool.as_deref(), Some("wrk2"));
        let [stats] = got.labels.as_slice() else {
            panic!("one label")
        };
        assert_eq!(stats.label, "endpoint");
        assert_eq!(
            (stats.samples, stats.failures),
            (n[0], Some(n[1])),
            "{}",
            row[0]
        );
        for (ours, exact) in [
            (stats.p50_us.unwrap(), n[2]),
            (stats.p99_us, n[3]),
            (stats.p999_us, n[4]),
        ] {
            let err = (ours as f64 - exact as f64).abs();
            assert!(
                err <= printed_rounding_us(exact) + 0.5,
                "{}: {ours} vs {exact}",
                row[0]
            );
        }
    }
}

/// The printed values exactly, read from the Recorded Latency block (not the Uncorrected
/// one of `-U`), with the failures of the socket-errors and non-2xx lines.
#[test]
fn values_as_printed() {
    let table: [(&str, u64, u64, [u64; 3]); 3] = [
        (CHECKOUT, 100_214, 0, [3_210, 7_200, 9_500]),
        (
            SEARCH,
            99_873,
            12 + 87 + 311,
            [19_150, 1_270_000, 1_450_000],
        ),
        (HEALTH, 9_981, 0, [258, 526, 642]),
    ];
    for (text, samples, failures, [p50, p99, p999]) in table {
        let got = read_chunked(text, None).unwrap();
        assert_eq!(
            got.labels,
            [LabelStats {
                label: "default".into(),
                samples,
                failures: Some(failures),
                p50_us: Some(p50),
                p99_us: p99,
                p999_us: p999,
            }]
        );
    }
}

#[test]
fn latencies_in_every_unit() {
    let cases = [
        ("642.00us", Some(642)),
        ("0.85ms", Some(850)),
        ("12.30ms", Some(12_300)),
        ("1.45s", Some(1_450_000)),
        ("0.85m", Some(51_000_000)),
        ("2.00h", Some(7_200_000_000)),
        ("12", None),
        ("ms", None),
        ("12.3xs", None),
        ("-1.00ms", None),
        (".5ms", None),
        ("1.2.3ms", None),
    ];
    for (text, want) in cases {
        assert_eq!(latency_us(text), want, "{text}");
    }
}

/// Without the spectrum's footer the requests line gives the samples.
#[test]
fn samples_fall_back_to_the_requests_line() {
    let text: String = CHECKOUT
        .lines()
        .filter(|l| !l.starts_with("#["))
        .map(|l| format!("{l}\n"))
        .collect();
    let got = read_chunked(&text, None).unwrap();
    assert_eq!(got.labels[0].samples, 119_987);
}

/// The Uncorrected block of `-U` comes after the Recorded one and is not read.
#[test]
fn the_uncorrected_block_is_skipped() {
    assert!(SEARCH.contains("Uncorrected Latency"));
    let uncorrected = &SEARCH[SEARCH.find("Uncorrected Latency").unwrap()..];
    let p999_line = uncorrected
        .lines()
        .find(|l| l.trim_start().starts_with("99.900%"))
        .unwrap();
    assert!(!p999_line.contains("1.45s"), "{p999_line}");
    assert_eq!(
        read(SEARCH.as_bytes(), None, 4096).unwrap().labels[0].p999_us,
        1_450_000
    );
}

fn replace_line(text: &str, starts: &str, with: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with(starts) {
                with.to_owned()
            } else {
                l.to_owned()
            }
        })
        .map(|l| l + "\n")
        .collect()
}

fn line_of(text: &str, starts: &str) -> u64 {
    text.lines()
        .position(|l| l.trim_start().starts_with(starts))
        .unwrap() as u64
        + 1
}

/// Name, input, and the error's line, field and part of its message.
type Case<'a> = (&'a str, String, Option<u64>, Option<&'a str>, &'a str);

/// Malformed, truncated, empty, foreign and plain-wrk inputs: an error naming the line and
/// the field.
#[test]
fn bad_inputs_are_reported_with_line_and_field() {
    let header = line_of(CHECKOUT, "Latency Distribution (HdrHistogram");
    let cut_before_999: String = CHECKOUT[..CHECKOUT.find(" 99.900%").unwrap()].into();
    let cut_in_spectrum: String = CHECKOUT[..CHECKOUT.find("#[Mean").unwrap()].into();
    let twice = format!("{CHECKOUT}{CHECKOUT}");
    let cases: Vec<Case> = vec![
        ("empty", String::new(), None, None, "empty input"),
        (
            "JSON",
            "{\"metrics\": {}}".into(),
            None,
            Some("Latency Distribution"),
            "not wrk2 output",
        ),
        (
            "CSV",
            "timeStamp,elapsed,label\n1,2,3\n".into(),
            None,
            Some("Latency Distribution"),
            "--latency",
        ),
        (
            "no --latency",
            CHECKOUT[..CHECKOUT.find("  Latency Distribution").unwrap()].into(),
            None,
            Some("Latency Distribution"),
            "--latency",
        ),
        (
            "plain wrk",
            WRK_PLAIN.into(),
            Some(6),
            Some("99.900%"),
            "wrk output, not wrk2",
        ),
        (
            "no 99.9",
            replace_line(CHECKOUT, "99.900%", ""),
            Some(header),
            Some("99.900%"),
            "no 99.900% line",
        ),
        (
            "no 99",
            replace_line(CHECKOUT, "99.000%", ""),
            Some(header),
            Some("99.000%"),
            "no 99.000% line",
        ),
        (
            "cut before 99.9",
            cut_before_999,
            Some(header),
            Some("99.900%"),
            "truncated",
        ),
        (
            "cut in the spectrum",
            cut_in_spectrum,
            None,
            Some("Total count"),
            "truncated",
        ),
        (
            "bad latency",
            replace_line(CHECKOUT, "99.900%", " 99.900%   abc"),
            Some(13),
            Some("99.900%"),
            "not a latency",
        ),
        (
            "unknown unit",
            replace_line(CHECKOUT, "99.900%", " 99.900%   9.50xs"),
            Some(13),
            Some("99.900%"),
            "not a latency",
        ),
        (
            "bad percentile",
            replace_line(CHECKOUT, "99.900%", " 99.9x0%   9.50ms"),
            Some(13),
            Some("99.9x0%"),
            "not a number",
        ),
        (
            "percentile twice",
            replace_line(CHECKOUT, "99.990%", " 99.900%   9.50ms"),
            Some(14),
            Some("99.900%"),
            "twice",
        ),
        (
            "junk in the block",
            replace_line(CHECKOUT, "75.000%", "garbage"),
            Some(10),
            Some(RECORDED),
            "garbage",
        ),
        (
            "bad spectrum row",
            replace_line(CHECKOUT, "4.057", "4.057 0.75 x 4.00"),
            Some(line_of(CHECKOUT, "4.057")),
            Some("Detailed Percentile spectrum"),
            "spectrum",
        ),
        (
            "bad total",
            replace_line(
                CHECKOUT,
                "#[Max",
                "#[Max     =       19.344, Total count    =        many]",
            ),
            Some(line_of(CHECKOUT, "#[Max")),
            Some("Total count"),
            "not a count",
        ),
        (
            "bad socket errors",
            replace_line(
                SEARCH,
                "Socket errors",
                "  Socket errors: connect 0, read x, write 0, timeout 87",
            ),
            Some(line_of(SEARCH, "Socket errors")),
            Some("Socket errors"),
            "connect N",
        ),
        (
            "socket error names",
            replace_line(
                SEARCH,
                "Socket errors",
                "  Socket errors: connect 0, read 1",
            ),
            Some(line_of(SEARCH, "Socket errors")),
            Some("Socket errors"),
            "connect N",
        ),
        (
            "bad non-2xx",
            replace_line(SEARCH, "Non-2xx", "  Non-2xx or 3xx responses: lots"),
            Some(line_of(SEARCH, "Non-2xx")),
            Some("Non-2xx or 3xx responses"),
            "not a count",
        ),
        (
            "two runs",
            twice,
            Some(CHECKOUT.lines().count() as u64 + header),
            Some(RECORDED),
            "one wrk2 run per file",
        ),
        (
            "no samples",
            replace_line(
                &replace_line(
                    HEALTH,
                    "#[Max",
                    "#[Max     =        0.000, Total count    =            0]",
                ),
                "19996 requests",
                "  0 requests in 20.00s, 0.00B read",
            ),
            None,
            Some("Total count"),
            "no requests",
        ),
    ];
    for (name, input, line, field, message) in cases {
        for chunk in [1, 7, input.len().max(1)] {
            let err = read(input.as_bytes(), None, chunk).expect_err(name);
            assert_eq!(err.line, line, "{name}: {err}");
            assert_eq!(err.field.as_deref(), field, "{name}: {err}");
            assert!(err.message.contains(message), "{name}: {err}");
        }
    }
}

#[test]
fn limits_line_length() {
    let mut p = parser(&Options::default()).unwrap();
    assert_eq!(p.push(&vec![b'x'; MAX_LINE + 1]).unwrap_err().line, Some(1));
}

#[test]
fn sniffs_wrk_family_text_only() {
    let many_threads: String = std::iter::once(
        "Running 1m test @ http://127.0.0.1:8080/\n  64 threads and 640 connections\n".to_owned(),
    )
    .chain((0..64).map(|_| {
        "  Thread calibration: mean lat.: 3.131ms, rate sampling interval: 10ms\n".to_owned()
    }))
    .collect();
    let yes: [(&str, &[u8]); 6] = [
        ("checkout", CHECKOUT.as_bytes()),
        ("search", SEARCH.as_bytes()),
        ("health head", &HEALTH.as_bytes()[..400]),
        (
            "plain wrk (refused later, with a reason)",
            WRK_PLAIN.as_bytes(),
        ),
        (
            "calibration fills the head",
            &many_threads.as_bytes()[..2000],
        ),
        (
            "bom",
            b"\xef\xbb\xbfRunning 30s test @ http://x/\n  Thread Stats   Avg\n",
        ),
    ];
    for (name, head) in yes {
        assert!(sniff(head), "{name}");
    }
    let no: [(&str, &[u8]); 6] = [
        ("empty", b""),
        ("JSON", b"{\"Running \": \"Thread Stats\"}"),
        (
            "hlog",
            include_bytes!("../../../../../tests/fixtures/hdrhistogram/untagged.hlog"),
        ),
        ("CSV", b"timeStamp,elapsed,label\n1,2,Running test\n"),
        (
            "no Running line",
            b"  Thread Stats   Avg      Stdev     Max   +/- Stdev\n",
        ),
        ("Running alone", b"Running 30s test @ http://x/\n"),
    ];
    for (name, head) in no {
        assert!(!sniff(head), "{name}");
    }
    for fixture in [CHECKOUT, SEARCH, HEALTH, WRK_PLAIN] {
        assert_eq!(crate::detect(fixture.as_bytes()), Some(Format::Wrk2));
    }
}

/// The points of `e`'s one label, checked as an upload is.
fn points_of(e: &Extracted) -> Vec<(f64, u64)> {
    let [label] = e.labels.as_slice() else {
        panic!("one label")
    };
    let Some(Distribution::Percentiles { points }) = e.distributions.get(&label.label) else {
        panic!("no percentile points for {}", label.label)
    };
    assert_eq!(budget_core::distribution::check_points(points), Ok(()));
    points.iter().map(|p| (p.percentile, p.us)).collect()
}

/// `checkout.txt`: the 86 rows of the Recorded block's spectrum (Value ms → µs, Percentile
/// × 100), as printed, equal values of consecutive rows kept.
#[test]
fn spectrum_gives_the_distribution_points() {
    let got = points_of(&read_chunked(CHECKOUT, Some("checkout")).unwrap());
    assert_eq!(got.len(), 86);
    for (i, want) in [
        (0, (0.0, 596)),
        (1, (10.0, 2_047)),
        (5, (50.0, 3_209)),
        (34, (99.0625, 7_263)),
        (74, (99.9963, 16_007)),
        (75, (99.9969, 16_007)),
        (76, (99.9973, 16_511)),
        (84, (99.9991, 19_359)),
        (85, (100.0, 19_359)),
    ] {
        assert_eq!(got[i], want, "row {}", i + 1);
    }
    // The Uncorrected block's spectrum of `-U` (slowest 158.591 ms) is not read.
    let search = points_of(&read(SEARCH.as_bytes(), None, 4096).unwrap());
    assert_eq!(
        (search[0], search.last().copied()),
        ((0.0, 2_357), Some((100.0, 1_511_423)))
    );
}

/// Without spectrum rows, the percentile lines give the points (two decimals in their unit).
#[test]
fn percentile_lines_give_the_points_without_a_spectrum() {
    let text = format!(
        "{}{}",
        &CHECKOUT[..CHECKOUT.find("       0.596").unwrap()],
        &CHECKOUT[CHECKOUT.find("#[Mean").unwrap()..]
    );
    assert_eq!(
        points_of(&read_chunked(&text, None).unwrap()),
        [
            (50.0, 3_210),
            (75.0, 4_060),
            (90.0, 5_010),
            (99.0, 7_200),
            (99.9, 9_500),
            (99.99, 13_650),
            (99.999, 17_820),
            (100.0, 19_360),
        ]
    );
}

/// A spectrum longer than the cap is thinned as it is read: evenly spaced rows, the first and
/// the last kept, at most `MAX_POINTS`.
#[test]
fn a_long_spectrum_is_thinned() {
    let rows: String = (0..2_500u64)
        .map(|i| {
            format!(
                "{:12.3} {:12.6} {:12} {:12.2}\n",
                (i + 1) as f64 / 1000.0,
                i as f64 / 2_499.0,
                i + 1,
                1.0
            )
        })
        .collect();
    let text = format!(
        "{}{rows}{}",
        &CHECKOUT[..CHECKOUT.find("       0.596").unwrap()],
        &CHECKOUT[CHECKOUT.find("#[Mean").unwrap()..]
    );
    let got = points_of(&read(text.as_bytes(), None, 4096).unwrap());
    assert!(
        got.len() <= MAX_POINTS && got.len() >= MAX_POINTS / 4,
        "{}",
        got.len()
    );
    assert_eq!(got[0], (0.0, 1));
    assert_eq!(got[got.len() - 1], (100.0, 2_500));
    let steps: Vec<u64> = got.windows(2).map(|w| w[1].1 - w[0].1).collect();
    assert!(
        steps[..steps.len() - 1].iter().all(|&s| s == steps[0]),
        "{steps:?}"
    );

    let mut t = Thinned::default();
    for i in 0..10_000u64 {
        t.push(i as f64 / 100.0, i);
    }
    let kept = t.points();
    assert!(kept.len() <= MAX_POINTS);
    assert_eq!(kept.last(), Some(&(99.99, 9_999)));
}

/// The shared rules of summary points: sorted, latencies raised to the one before, a repeated
/// percentile kept once, out-of-range percentiles dropped, at most `MAX_POINTS`.
#[test]
fn percentile_points_are_made_valid() {
    let got = |points: &[(f64, u64)]| match percentile_points(points.iter().copied()) {
        Some(Distribution::Percentiles { points }) => {
            assert_eq!(budget_core::distribution::check_points(&points), Ok(()));
            Some(
                points
                    .iter()
                    .map(|p| (p.percentile, p.us))
                    .collect::<Vec<_>>(),
            )
        }
        Some(other) => panic!("{other:?}"),
        None => None,
    };
    assert_eq!(
        got(&[
            (100.0, 90),
            (50.0, 12),
            (0.0, 15),
            (99.0, 80),
            (99.0, 85),
            (-0.0, 3),
            (101.0, 1),
            (f64::NAN, 1),
        ]),
        Some(vec![(0.0, 15), (50.0, 15), (99.0, 85), (100.0, 90)])
    );
    assert_eq!(got(&[]), None);
    assert_eq!(got(&[(f64::INFINITY, 1), (-1.0, 2)]), None);
    let many: Vec<(f64, u64)> = (0..5_000u64).map(|i| (i as f64 / 50.0, i)).collect();
    let thinned = got(&many).unwrap();
    assert!(thinned.len() <= MAX_POINTS);
    assert_eq!(thinned[0], (0.0, 0));
    assert_eq!(thinned.last(), Some(&(99.98, 4_999)));
}

kit_tests!(Format::Wrk2);
