//! Tests of the JTL parser: table-driven cases, and the fixtures against JMeter's own numbers
//! and exact nearest-rank percentiles.

use super::*;
use crate::format::locust;
use crate::testkit::{self, kit_tests};
use crate::{detect, read_all};

const SHOP_2X: &[u8] = include_bytes!("../../../../../tests/fixtures/jmeter/shop_2x_default.jtl");
const SHOP_HEADER: &[u8] = include_bytes!("../../../../../tests/fixtures/jmeter/shop_header.jtl");
const SHOP_FULL: &[u8] =
    include_bytes!("../../../../../tests/fixtures/jmeter/shop_header_full.jtl");
/// Each JTL fixture with what JMeter and the exact script reported (`*.summary.txt`).
const FIXTURES: [(&str, &[u8], &str); 3] = [
    (
        "shop_2x_default",
        SHOP_2X,
        include_str!("../../../../../tests/fixtures/jmeter/shop_2x_default.summary.txt"),
    ),
    (
        "shop_header",
        SHOP_HEADER,
        include_str!("../../../../../tests/fixtures/jmeter/shop_header.summary.txt"),
    ),
    (
        "shop_header_full",
        SHOP_FULL,
        include_str!("../../../../../tests/fixtures/jmeter/shop_header_full.summary.txt"),
    ),
];

/// Parses `input` in one push and in chunks of every small size: all must agree.
fn parse(input: &[u8]) -> Result<Extracted, IngestError> {
    testkit::read_in_every_chunking(Format::Jmeter, &Options::default(), input)
}

/// label, samples, failures, p50, p99, p99.9 (ms).
type Row = (&'static str, u64, u64, u64, u64, u64);

fn check(input: &[u8], expect: Result<&[Row], &str>) {
    let shown = String::from_utf8_lossy(input);
    let got = parse(input);
    match expect {
        Ok(rows) => {
            let got = got.unwrap_or_else(|e| panic!("{shown:?}: {e}"));
            assert_eq!(got.format, Format::Jmeter);
            assert_eq!(got.tool.as_deref(), Some("JMeter"));
            let want: Vec<LabelStats> = rows
                .iter()
                .map(|&(label, samples, failures, p50, p99, p999)| LabelStats {
                    label: label.to_owned(),
                    samples,
                    failures: Some(failures),
                    p50_us: Some(p50 * 1000),
                    p99_us: p99 * 1000,
                    p999_us: p999 * 1000,
                })
                .collect();
            assert_eq!(got.labels, want, "{shown:?}");
        }
        Err(message) => {
            let e = got.expect_err(&shown);
            assert_eq!(e.to_string(), message, "{shown:?}");
        }
    }
}

const H5: &str = "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,\
                  failureMessage,bytes,sentBytes,grpThreads,allThreads,URL,Latency,IdleTime,Connect\n";

#[test]
fn reads_samples() {
    let cases: &[(String, &[Row])] = &[
        // JMeter 3.x-5.x header; rows of two labels in any order; a failure.
        (
            format!(
                "{H5}1700000000000,12,a,200,OK,t 1-1,text,true,,10,5,1,1,http://x/a,11,0,3\n\
                 1700000000001,30,b,500,Internal Server Error,t 1-1,text,false,boom,10,5,1,1,http://x/b,29,0,1\n\
                 1700000000002,10,a,200,OK,t 1-1,text,true,,10,5,1,1,http://x/a,9,0,0\n"
            ),
            &[("a", 2, 0, 10, 12, 12), ("b", 1, 1, 30, 30, 30)],
        ),
        // JMeter 2.x defaults: no header, 12 columns.
        (
            "1700000000000,7,inventory,200,OK,Shop 1-1,text,true,176,1,1,7\n\
             1700000000100,50,payment,500,Nope,Shop 1-1,text,false,205,1,1,50\n"
                .to_owned(),
            &[("inventory", 1, 0, 7, 7, 7), ("payment", 1, 1, 50, 50, 50)],
        ),
        // JMeter 3.x+ defaults without a header: 17 columns, the same first eight.
        ("1700000000000,8,label,200,OK,t,text,true,,1,1,1,1,http://x,8,0,1\n".to_owned(), &[("label", 1, 0, 8, 8, 8)]),
        // Quoted fields with commas, doubled quotes and newlines; CRLF; no final newline.
        (
            "timeStamp,elapsed,label,responseMessage,success\r\n\
             1,5,\"GET /a,b\",\"declined, \"\"card\"\" expired\",false\r\n\
             2,6,\"GET /a,b\",\"two\r\nlines\",true\r\n\
             3,7,\"GET /a,b\",ok,TRUE"
                .to_owned(),
            &[("GET /a,b", 3, 1, 6, 7, 7)],
        ),
        // Columns in another order, blank lines, a UTF-8 BOM; 0 ms stays 0.
        (
            "\u{feff}label,success,elapsed\n\nx,true,3\n\ny,false,0\n".to_owned(),
            &[("x", 1, 0, 3, 3, 3), ("y", 1, 1, 0, 0, 0)],
        ),
        // Tab-delimited (`default_delimiter=\t`): commas inside a field need no quotes.
        (
            "timeStamp\telapsed\tlabel\tresponseMessage\tsuccess\n1\t4\tz\ta, b\ttrue\n".to_owned(),
            &[("z", 1, 0, 4, 4, 4)],
        ),
        // Beyond ~1 s HDR buckets are wider than 1 ms: within 0.1 %, here exact.
        ("elapsed,label,success\n1500,slow,true\n".to_owned(), &[("slow", 1, 0, 1500, 1500, 1500)]),
    ];
    for (input, rows) in cases {
        check(input.as_bytes(), Ok(rows));
    }
}

#[test]
fn rejects_bad_input() {
    const NOT_JTL: &str =
        ": not a JTL (no header naming `elapsed`, nor a row of JMeter's default columns)";
    let many_labels: String = std::iter::once("elapsed,label,success\n".to_owned())
        .chain((0..=MAX_LABELS).map(|i| format!("1,l{i},true\n")))
        .collect();
    let long_line = "x".repeat(MAX_HEAD + 1);
    let cases: Vec<(&[u8], String)> = vec![
        (b"", "empty input: no JTL header nor sample row".into()),
        (b"\n\r\n\n", "empty input: no JTL header nor sample row".into()),
        (H5.as_bytes(), "line 1: a JTL header but no sample rows (empty run or truncated file)".into()),
        (b"elapsed,label,success\n1,a,true\nabc,a,true\n", "line 3: elapsed: \"abc\" is not a number".into()),
        (
            b"elapsed,label,success\n12.5,a,true\n",
            "line 2: elapsed: \"12.5\" is not a whole number of milliseconds (JTL `elapsed` is in ms)".into(),
        ),
        (b"elapsed,label,success\n-3,a,true\n", "line 2: elapsed: \"-3\" is negative".into()),
        (b"elapsed,label,success\n,a,true\n", "line 2: elapsed: \"\" is not a number".into()),
        (b"elapsed,label,success\n3,a,yes\n", "line 2: success: \"yes\" is not true or false".into()),
        (b"timeStamp,elapsed,label\n1,2,a\n", "line 1: success: missing column in the JTL header".into()),
        (b"timeStamp,label,success\n1,a,true\n", "line 1: elapsed: missing column in the JTL header".into()),
        // Truncated in the middle of the last row.
        (b"elapsed,label,success\n1,a,true\n2,a", "line 3: expected 3 fields, found 2 (truncated or malformed row)".into()),
        (
            b"1700000000000,7,a,200,OK,t,text,true,1,1,1,7\n1700000000001,8,a,200,O",
            "line 2: expected 12 fields, found 5 (truncated or malformed row)".into(),
        ),
        // Line numbers count the newlines inside quoted fields.
        (
            b"elapsed,label,msg,success\n5,a,\"two\nlines\",true\n5,a,\"x\",maybe\n",
            "line 4: success: \"maybe\" is not true or false".into(),
        ),
        (
            b"elapsed,label,msg,success\r\n5,a,\"two\r\nlines\",true\r\n5,a,\"x\",maybe\r\n",
            "line 4: success: \"maybe\" is not true or false".into(),
        ),
        (b"elapsed,label,success\n1,\xff,true\n", "line 2: label: not valid UTF-8".into()),
        (
            many_labels.as_bytes(),
            format!(
                "line {}: label: more than {MAX_LABELS} distinct labels (new label \"l{MAX_LABELS}\"): \
                 filter the JTL",
                MAX_LABELS + 2
            ),
        ),
        // Other tools' files.
        (
            b"Type,Name,Request Count,Failure Count,Median Response Time,50%,99%,99.9%\n",
            format!("line 1: elapsed: \"Name\" is not a number{NOT_JTL}"),
        ),
        (b"{\"metrics\":{\"http_req_duration\":{\"p(99)\":12.5}}}\n", format!("line 1: elapsed: \"\" is not a number{NOT_JTL}")),
        (
            b"1700000000000,7,a\n",
            "line 1: a JTL row without header needs JMeter's default columns (at least 8 fields up to \
             `success`), found 3"
                .into(),
        ),
        (long_line.as_bytes(), "line 1: first line longer than 64 KiB: not a JTL CSV".into()),
    ];
    for (input, message) in cases {
        check(input, Err(&message));
    }
}

#[test]
fn sniffs_jtl_only() {
    let cases: &[(&[u8], bool)] = &[
        (H5.as_bytes(), true),
        (b"timeStamp,elapsed,label,responseCode", true),
        (b"\xef\xbb\xbftimeStamp\telapsed\tlabel\tsuccess\n", true),
        (
            b"1700000000000,7,inventory,200,OK,Shop 1-1,text,true,176,1,1,7\n",
            true,
        ),
        (b"1700000000000,7,\"GET /a,b\",200", true),
        (b"1700000000,7,inventory,200,OK\n", false),
        (
            b"Type,Name,Request Count,Failure Count,Median Response Time\n",
            false,
        ),
        (b"#[Histogram log format version 1.3]\n", false),
        (
            b"0.127,1.007,2.769,HISTFAAAAEV4nJNpmSzMwMCgyAABzFCaEUoz\n",
            false,
        ),
        (b"Running 30s test @ http://127.0.0.1:8080\n", false),
        (b"{\"metrics\":{}}", false),
        (b"", false),
    ];
    for (head, want) in cases {
        assert_eq!(sniff(head), *want, "{:?}", String::from_utf8_lossy(head));
    }
    for (name, jtl, _) in FIXTURES {
        assert!(sniff(jtl) && !locust::sniff(jtl), "{name}");
        assert_eq!(detect(&jtl[..512]), Some(Format::Jmeter), "{name}");
    }
}

/// The value at 1-based rank ceil(q·n) of `sorted`.
fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    sorted[((q * sorted.len() as f64).ceil() as usize).max(1) - 1]
}

/// Equal below ~1 s (HDR buckets narrower than 1 ms), within 0.1 % above.
fn assert_close(got_us: u64, exact_ms: u64, what: &str) {
    let exact = exact_ms * 1000;
    if exact < 1_000_000 {
        assert_eq!(got_us, exact, "{what}");
    } else {
        assert!(
            got_us.abs_diff(exact) as f64 <= exact as f64 * 0.001,
            "{what}: {got_us} µs vs {exact} µs"
        );
    }
}

#[test]
fn percentiles_match_sorted_nearest_rank() {
    // 30 000 skewed times from 0 ms to ~40 s, three labels interleaved.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut by_label: [Vec<u64>; 3] = Default::default();
    let mut jtl = String::from("timeStamp,elapsed,label,success\n");
    for i in 0..30_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let ms = match x % 100 {
            0..=79 => x % 300,
            80..=97 => 300 + x % 3_000,
            _ => 3_000 + x % 40_000,
        };
        let label = (x >> 20) as usize % 3;
        by_label[label].push(ms);
        jtl.push_str(&format!(
            "{},{ms},l{label},{}\n",
            1_700_000_000_000 + i,
            i % 50 != 0
        ));
    }
    let got = read_all(parser(&Options::default()).unwrap(), jtl.as_bytes(), 65_536).unwrap();
    for (stats, mut values) in got.labels.iter().zip(by_label) {
        values.sort_unstable();
        assert_eq!(stats.samples, values.len() as u64);
        assert_close(stats.p50_us.unwrap(), nearest_rank(&values, 0.50), "p50");
        assert_close(stats.p99_us, nearest_rank(&values, 0.99), "p99");
        assert_close(stats.p999_us, nearest_rank(&values, 0.999), "p99.9");
    }
}

/// The rows of `summary` after the line starting with `title`, split on commas, until a
/// blank line: `label → numbers`.
fn summary_table<'a>(summary: &'a str, title: &str) -> Vec<(&'a str, Vec<u64>)> {
    summary
        .lines()
        .skip_while(|l| !l.starts_with(title))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let mut f = l.split(',');
            let label = f.next().unwrap();
            (label, f.map(|n| n.parse().unwrap()).collect())
        })
        .collect()
}

/// Each fixture against JMeter 2.13's own numbers and the exact nearest-rank ones
/// (`*.summary.txt`), and against percentiles sorted here from the raw rows.
#[test]
fn fixtures_match_jmeter_and_exact_percentiles() {
    for (name, jtl, summary) in FIXTURES {
        let got = parse(jtl).unwrap_or_else(|e| panic!("{name}: {e}"));
        // JMeter's summariser line: `summary =    900 in ... Err:    15 (1.67%)`.
        let total: Vec<&str> = summary
            .lines()
            .find(|l| l.starts_with("summary ="))
            .unwrap()
            .split_whitespace()
            .collect();
        let samples: u64 = total[2].parse().unwrap();
        let errors: u64 = total[total.iter().position(|w| *w == "Err:").unwrap() + 1]
            .parse()
            .unwrap();
        assert_eq!(
            got.labels.iter().map(|l| l.samples).sum::<u64>(),
            samples,
            "{name}"
        );
        assert_eq!(
            got.labels.iter().map(|l| l.failures.unwrap()).sum::<u64>(),
            errors,
            "{name}"
        );

        // label,samples,errors,average,median,90%,95%,99%,99.9%,min,max (JMeter's ranks).
        let jmeter: Vec<_> = summary_table(summary, "label,samples,errors,average")
            .into_iter()
            .filter(|(l, _)| *l != "TOTAL")
            .collect();
        // label,samples,failures,p50,p90,p95,p99,p99.9,max (exact nearest rank).
        let exact = summary_table(summary, "label,samples,failures,p50");
        // The same from the raw rows: timeStamp,elapsed,label lead every fixture row,
        // and no label or earlier field is quoted, so a plain split is right here.
        let body = if jtl.starts_with(b"timeStamp") {
            &jtl[jtl.iter().position(|&b| b == b'\n').unwrap() + 1..]
        } else {
            jtl
        };
        let mut raw: HashMap<&str, Vec<u64>> = HashMap::new();
        for line in std::str::from_utf8(body).unwrap().lines() {
            let mut f = line.split(',').skip(1);
            let ms = f.next().unwrap().parse().unwrap();
            raw.entry(f.next().unwrap()).or_default().push(ms);
        }
        assert_eq!(got.labels.len(), 3, "{name}");
        for ((stats, (jl, j)), (el, e)) in got.labels.iter().zip(&jmeter).zip(&exact) {
            assert_eq!(
                (stats.label.as_str(), stats.label.as_str()),
                (*jl, *el),
                "{name}"
            );
            assert_eq!(
                (stats.samples, stats.failures),
                (j[0], Some(j[1])),
                "{name} {jl}: JMeter's count and errors"
            );
            let ours = [stats.p50_us.unwrap(), stats.p99_us, stats.p999_us];
            // Exact nearest rank: equal (all times here are below 1 s).
            assert_eq!(
                ours,
                [e[2] * 1000, e[5] * 1000, e[6] * 1000],
                "{name} {jl}: exact"
            );
            let mut values = raw.remove(stats.label.as_str()).unwrap();
            values.sort_unstable();
            for (got_us, q) in ours.into_iter().zip([0.5, 0.99, 0.999]) {
                assert_close(
                    got_us,
                    nearest_rank(&values, q),
                    &format!("{name} {jl} q{q}"),
                );
            }
            // JMeter ranks round(q·n) where nearest rank takes ceil(q·n): never above ours.
            for (got_us, jmeter_ms) in ours.into_iter().zip([j[3], j[6], j[7]]) {
                assert!(
                    jmeter_ms * 1000 <= got_us,
                    "{name} {jl}: JMeter {jmeter_ms} ms, ours {got_us} µs"
                );
            }
        }
    }
}

kit_tests!(Format::Jmeter);
