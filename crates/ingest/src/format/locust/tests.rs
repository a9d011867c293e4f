//! The Locust stats CSV reader on hand-made rows and on the real fixtures.

use super::*;
use crate::detect;
use crate::format::jmeter;
use crate::testkit::points;
use crate::testkit::{self, kit_tests};

const SHOP: &[u8] = include_bytes!("../../../../../tests/fixtures/locust/shop_stats.csv");
const SHOP_SUMMARY: &str = include_str!("../../../../../tests/fixtures/locust/shop_summary.txt");
const IDLE: &[u8] = include_bytes!("../../../../../tests/fixtures/locust/idle_stats.csv");

const HEADER: &str = "Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,\
                      Min Response Time,Max Response Time,Average Content Size,Requests/s,Failures/s,\
                      50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%\n";

/// A data row of the current header: type, name, requests, failures, 50 %, 99 %, 99.9 %.
fn row(kind: &str, name: &str, requests: &str, failures: &str, p: [&str; 3]) -> String {
    let [p50, p99, p999] = p;
    format!("{kind},{name},{requests},{failures},{p50},1.5,1,9,10,1.0,0.0,{p50},{p50},{p50},{p50},{p99},{p99},{p99},{p99},{p999},{p999},{p999}\n")
}

/// Parses `input` in one push and in chunks of every small size: all must agree.
fn parse(input: &[u8]) -> Result<Extracted, IngestError> {
    testkit::read_in_every_chunking(Format::Locust, &Options::default(), input)
}

/// label, samples, failures, p50, p99, p99.9 (µs).
type Row = (&'static str, u64, u64, u64, u64, u64);

fn check(input: &str, expect: Result<&[Row], &str>) {
    let got = parse(input.as_bytes());
    match expect {
        Ok(rows) => {
            let got = got.unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(
                (got.format, got.tool.as_deref()),
                (Format::Locust, Some("locust"))
            );
            let want: Vec<LabelStats> = rows
                .iter()
                .map(|&(label, samples, failures, p50, p99, p999)| LabelStats {
                    label: label.to_owned(),
                    samples,
                    failures: Some(failures),
                    p50_us: Some(p50),
                    p99_us: p99,
                    p999_us: p999,
                })
                .collect();
            assert_eq!(got.labels, want, "{input:?}");
        }
        Err(message) => assert_eq!(got.expect_err(input).to_string(), message, "{input:?}"),
    }
}

#[test]
fn reads_rows() {
    let agg = row("", "Aggregated", "12", "1", ["7", "120", "130"]);
    let cases: Vec<(String, &[Row])> = vec![
        (
            format!(
                "{HEADER}{}{}{agg}",
                row("GET", "inventory", "10", "0", ["6", "67", "89"]),
                row("GET", "payment", "2", "1", ["32", "68", "81"])
            ),
            &[
                ("inventory", 10, 0, 6_000, 67_000, 89_000),
                ("payment", 2, 1, 32_000, 68_000, 81_000),
                ("Aggregated", 12, 1, 7_000, 120_000, 130_000),
            ],
        ),
        // A row without requests has N/A percentiles: no label, no error. Fractional ms.
        (
            format!(
                "{HEADER}{}{}{agg}",
                row("GET", "idle", "0", "0", ["N/A", "N/A", "N/A"]),
                row("GET", "fast", "12", "1", ["0.25", "1.5", "2"])
            ),
            &[
                ("fast", 12, 1, 250, 1_500, 2_000),
                ("Aggregated", 12, 1, 7_000, 120_000, 130_000),
            ],
        ),
        // One Name under two Types: labelled "{Type} {Name}". Quoted names; CRLF.
        (
            format!(
                "{HEADER}{}{}{}{agg}",
                row("GET", "user", "5", "0", ["5", "9", "9"]),
                row("POST", "user", "7", "1", ["8", "20", "20"]),
                row("GET", "\"/a?x=1,2\"", "1", "0", ["1", "1", "1"])
            )
            .replace('\n', "\r\n"),
            &[
                ("GET user", 5, 0, 5_000, 9_000, 9_000),
                ("POST user", 7, 1, 8_000, 20_000, 20_000),
                ("/a?x=1,2", 1, 0, 1_000, 1_000, 1_000),
                ("Aggregated", 12, 1, 7_000, 120_000, 130_000),
            ],
        ),
        // Older names (`# requests`, `# failures`), quoted; columns found by name.
        (
            "\"Name\",\"# requests\",\"# failures\",\"99.9%\",\"99%\",\"50%\",\"Type\"\n\
             \"home\",\"3\",\"0\",\"40\",\"30\",\"10\",\"GET\"\n\
             \"Aggregated\",\"3\",\"0\",\"40\",\"30\",\"10\",\"None\"\n"
                .to_owned(),
            &[
                ("home", 3, 0, 10_000, 30_000, 40_000),
                ("Aggregated", 3, 0, 10_000, 30_000, 40_000),
            ],
        ),
    ];
    for (input, rows) in &cases {
        check(input, Ok(rows));
    }
}

#[test]
fn rejects_bad_input() {
    let agg = row("", "Aggregated", "1", "0", ["1", "1", "1"]);
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "empty input: no Locust stats header"),
        (
            HEADER.replace(",99.9%", ""),
            "line 1: 99.9%: missing column in the Locust stats header",
        ),
        // Truncated: at a row boundary (no Aggregated row) or inside a row.
        (
            format!("{HEADER}{}", row("GET", "a", "1", "0", ["1", "2", "3"])),
            "no `Aggregated` row: Locust always writes it last, the file looks truncated",
        ),
        (
            format!(
                "{HEADER}{}GET,b,4,0,5,5",
                row("GET", "a", "1", "0", ["1", "2", "3"])
            ),
            "line 3: expected 22 fields, found 6 (truncated or malformed row)",
        ),
        // Wrong unit / not a number.
        (
            format!(
                "{HEADER}{}{agg}",
                row("GET", "a", "1", "0", ["1", "12ms", "3"])
            ),
            "line 2: 99%: \"12ms\" is not a number of milliseconds",
        ),
        (
            format!(
                "{HEADER}{}{agg}",
                row("GET", "a", "1", "0", ["1", "2", "-3"])
            ),
            "line 2: 99.9%: \"-3\" is not a number of milliseconds",
        ),
        (
            format!(
                "{HEADER}{}{agg}",
                row("GET", "a", "1.5", "0", ["1", "2", "3"])
            ),
            "line 2: Request Count: \"1.5\" is not a count",
        ),
        (
            format!("{HEADER}{}{agg}", row("GET", "a", "1", "", ["1", "2", "3"])),
            "line 2: Failure Count: \"\" is not a count",
        ),
        (
            format!(
                "{HEADER}{}{}{agg}",
                row("GET", "a", "1", "0", ["1", "2", "3"]),
                row("GET", "a", "1", "0", ["1", "2", "3"])
            ),
            "line 3: Name: a second row for Type \"GET\" and Name \"a\"",
        ),
        // Another tool's file.
        (
            "timeStamp,elapsed,label,success\n1,2,a,true\n".to_owned(),
            "line 1: Name: missing column in the Locust stats header",
        ),
        (
            "1700000000000,7,inventory,200,OK,Shop 1-1,text,true,176,1,1,7\n".to_owned(),
            "line 1: Name: missing column in the Locust stats header",
        ),
    ];
    for (input, message) in &cases {
        check(input, Err(message));
    }
    let bad_utf8 = [
        HEADER.as_bytes(),
        b"GET,\xff,1,0,1,1,1,1,1,1,0,1,1,1,1,1,1,1,1,1,1,1\n",
    ]
    .concat();
    assert_eq!(
        parse(&bad_utf8).unwrap_err().to_string(),
        "line 2: Name: not valid UTF-8"
    );
}

#[test]
fn sniffs_locust_only() {
    let cases: &[(&[u8], bool)] = &[
        (HEADER.as_bytes(), true),
        (b"Type,Name,Request Count", true),
        (
            b"\xef\xbb\xbf\"Type\",\"Name\",\"# requests\",\"# failures\"\r\n",
            true,
        ),
        (b"Type,Name,Request Count,Failure Count\n", true),
        (b"Method,Name,# requests\n", false),
        (b"timeStamp,elapsed,label,responseCode\n", false),
        (b"1700000000000,7,inventory,200,OK\n", false),
        (b"Type,Name\n", false),
        (b"", false),
    ];
    for (head, want) in cases {
        assert_eq!(sniff(head), *want, "{:?}", String::from_utf8_lossy(head));
        if *want {
            assert!(!jmeter::sniff(head));
        }
    }
    for input in [SHOP, IDLE] {
        assert_eq!(detect(input), Some(Format::Locust));
    }
}

/// `shop_stats.csv` against the tables Locust printed at exit (`shop_summary.txt`): counts,
/// failures and its 50 % / 99 % / 99.9 % columns, in its own whole milliseconds.
#[test]
fn fixture_matches_locust_summary() {
    let got = parse(SHOP).unwrap();
    // "Type Name # reqs # fails(%) | Avg Min Max Med | req/s failures/s", then the
    // percentile table "Type Name 50% 66% … 99% 99.9% 99.99% 100% # reqs".
    let (counts, percentiles) = SHOP_SUMMARY
        .split_once("Response time percentiles")
        .unwrap();
    let words = |table: &str, label: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.split_whitespace().take(2).any(|w| w == label))
            .unwrap_or_else(|| panic!("{label} not in the summary"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        got.labels
            .iter()
            .map(|l| l.label.as_str())
            .collect::<Vec<_>>(),
        ["inventory", "payment", "user", "Aggregated"]
    );
    for stats in &got.labels {
        let c = words(counts, &stats.label);
        let at = c.iter().position(|w| *w == stats.label).unwrap();
        let samples: u64 = c[at + 1].parse().unwrap();
        let failures: u64 = c[at + 2].split('(').next().unwrap().parse().unwrap();
        let p = words(percentiles, &stats.label);
        let n = p.len();
        let ms = |i: usize| p[i].parse::<u64>().unwrap() * 1000;
        assert_eq!(p[n - 1].parse::<u64>().unwrap(), samples);
        assert_eq!(
            (
                stats.samples,
                stats.failures,
                stats.p50_us,
                stats.p99_us,
                stats.p999_us
            ),
            (
                samples,
                Some(failures),
                Some(ms(n - 12)),
                ms(n - 5),
                ms(n - 4)
            ),
            "{}",
            stats.label
        );
    }
}

/// `shop_stats.csv`, row `payment`: Min Response Time 10.627448999912303 ms as 0, then the
/// columns 50% … 100% (32, 36, 40, 42, 49, 54, 60, 68, 81, 81, 81 ms); Max is not used, the
/// file has a 100% column.
#[test]
fn fixture_gives_the_percentile_columns_as_points() {
    let got = parse(SHOP).unwrap();
    assert_eq!(
        points(&got, "payment"),
        [
            (0.0, 10_627),
            (50.0, 32_000),
            (66.0, 36_000),
            (75.0, 40_000),
            (80.0, 42_000),
            (90.0, 49_000),
            (95.0, 54_000),
            (98.0, 60_000),
            (99.0, 68_000),
            (99.9, 81_000),
            (99.99, 81_000),
            (100.0, 81_000),
        ]
    );
    assert_eq!(
        got.distributions.keys().collect::<Vec<_>>(),
        ["Aggregated", "inventory", "payment", "user"]
    );
    assert!(parse(IDLE).unwrap().distributions.is_empty());
}

/// `N/A` and unreadable cells give no point, Max stands for 100 % without a `100%` column,
/// and a whole-ms percentile below the exact minimum is raised to it.
#[test]
fn points_skip_missing_cells_and_stay_monotone() {
    let input = "Type,Name,Request Count,Failure Count,Min Response Time,Max Response Time,\
                 50%,66%,99%,99.9%\n\
                 GET,a,3,0,2.4,7.25,2,N/A,6,7\n\
                 ,Aggregated,3,0,N/A,?,2,3,6,7\n";
    let got = parse(input.as_bytes()).unwrap();
    assert_eq!(
        points(&got, "a"),
        [
            (0.0, 2_400),
            (50.0, 2_400),
            (99.0, 6_000),
            (99.9, 7_000),
            (100.0, 7_250)
        ]
    );
    assert_eq!(
        points(&got, "Aggregated"),
        [(50.0, 2_000), (66.0, 3_000), (99.0, 6_000), (99.9, 7_000)]
    );
}

/// A run without requests: only `Aggregated`, all `N/A`: no label, no error.
#[test]
fn idle_fixture_has_no_labels() {
    let got = parse(IDLE).unwrap();
    assert!(got.labels.is_empty());
}

kit_tests!(Format::Locust);
