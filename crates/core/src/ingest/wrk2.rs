//! wrk2 text output with `--latency` (`-L`, or `-U`, which adds the uncorrected block).
//!
//! ```text
//! Running 30s test @ http://127.0.0.1:80/index.html
//!   2 threads and 100 connections
//!   Thread Stats   Avg      Stdev     Max   +/- Stdev
//!     Latency     6.60ms    1.92ms  12.50ms   68.46%
//!   Latency Distribution (HdrHistogram - Recorded Latency)
//!  50.000%    6.67ms
//!  99.000%   11.18ms
//!  99.900%   12.30ms
//! 100.000%   12.50ms
//!
//!   Detailed Percentile spectrum:
//!        Value   Percentile   TotalCount 1/(1-Percentile)
//!
//!        0.921     0.000000            1         1.00
//!       12.503     1.000000        39500          inf
//! #[Mean    =        6.602, StdDeviation   =        1.919]
//! #[Max     =       12.496, Total count    =        39500]
//! #[Buckets =           27, SubBuckets     =         2048]
//! ----------------------------------------------------------
//!   60018 requests in 30.00s, 19.81MB read
//!   Socket errors: connect 0, read 2, write 0, timeout 5
//!   Non-2xx or 3xx responses: 12
//! Requests/sec:   2000.28
//! ```
//!
//! One endpoint per file: the label is [`Options::label`] (the upload part's name), else
//! `"default"`. p50 / p99 / p99.9 come from the `Latency Distribution (HdrHistogram - Recorded
//! Latency)` block (the coordinated-omission-corrected latency; the `Uncorrected Latency` block of
//! `-U` is skipped), printed by wrk2 with two decimals in us, ms, s or m (minutes) and read back
//! to the nearest µs. `samples` is the block's `Total count` (the requests recorded after wrk2's
//! calibration), else the `N requests in …` line; `failures` = `Non-2xx or 3xx responses` + all
//! `Socket errors` (connect, read, write, timeout), as wrk2 counts them.
//!
//! Plain wrk (`wrk --latency`) prints only 50/75/90/99 %: its files are refused, naming the
//! missing 99.900% line. Lines the format does not define (Lua `done()` output, …) are skipped.

use super::lines::LineBuffer;
use super::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Longest line accepted, in bytes.
const MAX_LINE: usize = 64 * 1024;

const RECORDED: &str = "Latency Distribution (HdrHistogram - Recorded Latency)";

/// Whether the start of an input looks like wrk2 (or wrk) text output: a `Running 30s test @ URL`
/// line, and the `Latency Distribution (HdrHistogram` block, the `Thread Stats` table or the
/// `N threads and M connections` line (many calibration lines may push the others out of the
/// head).
pub fn sniff(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let running = text
        .lines()
        .any(|l| l.starts_with("Running ") && l.contains(" test @ "));
    let threads = text.lines().any(|l| {
        let l = l.trim();
        l.contains(" threads and ") && l.ends_with(" connections")
    });
    running
        && (text.contains("Latency Distribution (HdrHistogram")
            || text.contains("Thread Stats")
            || threads)
}

pub fn parser(options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Ok(Box::new(Wrk2Parser {
        lines: LineBuffer::new(MAX_LINE),
        out: Output {
            label: options
                .label
                .as_deref()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .unwrap_or("default")
                .to_owned(),
            ..Output::default()
        },
    }))
}

struct Wrk2Parser {
    lines: LineBuffer,
    out: Output,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// Outside any latency block.
    #[default]
    Outside,
    /// The percentile lines of the Recorded Latency block.
    Percentiles,
    /// The Recorded Latency block's spectrum table and footer.
    Spectrum,
    /// A block that is not read: wrk2's Uncorrected Latency, plain wrk's Latency Distribution.
    Skipped,
}

#[derive(Default)]
struct Output {
    label: String,
    block: Block,
    /// Line of the Recorded Latency block's header.
    recorded_at: Option<u64>,
    /// Line of plain wrk's `Latency Distribution` header.
    plain_wrk_at: Option<u64>,
    p50: Option<u64>,
    p99: Option<u64>,
    p999: Option<u64>,
    total_count: Option<u64>,
    requests: Option<u64>,
    socket_errors: u64,
    status_errors: u64,
    bytes: u64,
}

impl Ingest for Wrk2Parser {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.out.bytes += chunk.len() as u64;
        let out = &mut self.out;
        self.lines
            .push(chunk, |no, line| out.line(no, line), too_long)
    }

    fn finish(mut self: Box<Self>) -> Result<Extracted, IngestError> {
        let out = &mut self.out;
        self.lines.finish(|no, line| out.line(no, line))?;
        out.result()
    }
}

fn too_long(line: u64) -> IngestError {
    IngestError::at_line(
        line,
        format!("line longer than {MAX_LINE} bytes: not wrk2 output"),
    )
}

impl Output {
    fn line(&mut self, no: u64, line: &[u8]) -> Result<(), IngestError> {
        let text = String::from_utf8_lossy(line);
        let t = text.trim();
        if let Some(desc) = t.strip_prefix("Latency Distribution (HdrHistogram - ") {
            if desc.starts_with("Recorded Latency") {
                if let Some(first) = self.recorded_at {
                    return Err(IngestError::at_line(
                        no,
                        format!(
                            "a second Recorded Latency block (the first is on line {first}): one \
                             wrk2 run per file"
                        ),
                    )
                    .field(RECORDED));
                }
                self.recorded_at = Some(no);
                self.block = Block::Percentiles;
            } else {
                self.block = Block::Skipped;
            }
            return Ok(());
        }
        if t == "Latency Distribution" {
            self.plain_wrk_at.get_or_insert(no);
            self.block = Block::Skipped;
            return Ok(());
        }
        if t.starts_with("----------") {
            self.block = Block::Outside;
            return Ok(());
        }
        if self.summary_line(no, t)? {
            // the summary follows plain wrk's distribution without a dashed line
            self.block = Block::Outside;
            return Ok(());
        }
        match self.block {
            Block::Outside | Block::Skipped => Ok(()),
            Block::Percentiles => self.percentile_line(no, t),
            Block::Spectrum => self.spectrum_line(no, t),
        }
    }

    /// The `requests in`, `Socket errors` and `Non-2xx or 3xx` lines; `true` when `t` is one.
    fn summary_line(&mut self, no: u64, t: &str) -> Result<bool, IngestError> {
        if let Some((n, rest)) = t.split_once(' ') {
            if rest.starts_with("requests in ") && n.bytes().all(|b| b.is_ascii_digit()) {
                let n = n.parse().map_err(|_| {
                    IngestError::at_line(no, format!("{n:?} requests: not a count"))
                        .field("requests")
                })?;
                self.requests = Some(n);
                return Ok(true);
            }
        }
        if let Some(rest) = t.strip_prefix("Socket errors:") {
            let mut sum = 0u64;
            let mut names = Vec::new();
            for part in rest.split(',') {
                let (name, n) = part.trim().split_once(' ').unwrap_or((part.trim(), ""));
                let n: u64 = n.trim().parse().map_err(|_| {
                    IngestError::at_line(
                        no,
                        format!("{part:?}: expected `connect N, read N, write N, timeout N`"),
                    )
                    .field("Socket errors")
                })?;
                names.push(name.to_owned());
                sum = sum.saturating_add(n);
            }
            if names != ["connect", "read", "write", "timeout"] {
                return Err(IngestError::at_line(
                    no,
                    "expected `connect N, read N, write N, timeout N`",
                )
                .field("Socket errors"));
            }
            self.socket_errors = sum;
            return Ok(true);
        }
        if let Some(rest) = t.strip_prefix("Non-2xx or 3xx responses:") {
            self.status_errors = rest.trim().parse().map_err(|_| {
                IngestError::at_line(no, format!("{:?} is not a count", rest.trim()))
                    .field("Non-2xx or 3xx responses")
            })?;
            return Ok(true);
        }
        Ok(false)
    }

    /// ` 99.900%   12.30ms` in the Recorded Latency block.
    fn percentile_line(&mut self, no: u64, t: &str) -> Result<(), IngestError> {
        if t.is_empty() {
            return Ok(());
        }
        if t == "Detailed Percentile spectrum:" {
            self.block = Block::Spectrum;
            return Ok(());
        }
        let Some((pct, value)) = t.split_once('%') else {
            return Err(IngestError::at_line(
                no,
                format!("{t:?} in the Latency Distribution block: expected `99.900%   12.30ms`"),
            )
            .field(RECORDED));
        };
        let field = format!("{}%", pct.trim());
        let pct: f64 = pct.trim().parse().map_err(|_| {
            IngestError::at_line(no, "the percentile is not a number").field(field.clone())
        })?;
        let us = latency_us(value.trim()).ok_or_else(|| {
            IngestError::at_line(
                no,
                format!(
                    "{:?} is not a latency: expected a number and a unit us, ms, s or m",
                    value.trim()
                ),
            )
            .field(field.clone())
        })?;
        let slot = if (pct - 50.0).abs() < 1e-9 {
            &mut self.p50
        } else if (pct - 99.0).abs() < 1e-9 {
            &mut self.p99
        } else if (pct - 99.9).abs() < 1e-9 {
            &mut self.p999
        } else {
            return Ok(());
        };
        if slot.replace(us).is_some() {
            return Err(IngestError::at_line(no, "percentile given twice").field(field));
        }
        Ok(())
    }

    /// The spectrum table: its header, rows of 4 numbers, and the `#[…]` footer lines of which
    /// `#[Max = …, Total count = N]` gives the sample count.
    fn spectrum_line(&mut self, no: u64, t: &str) -> Result<(), IngestError> {
        if t.is_empty() || t.starts_with("Value") {
            return Ok(());
        }
        if let Some(footer) = t.strip_prefix("#[") {
            for part in footer.trim_end_matches(']').split(',') {
                if let Some((key, value)) = part.split_once('=') {
                    if key.trim() == "Total count" {
                        let n = value.trim().parse().map_err(|_| {
                            IngestError::at_line(no, format!("{:?} is not a count", value.trim()))
                                .field("Total count")
                        })?;
                        self.total_count = Some(n);
                    }
                }
            }
            return Ok(());
        }
        let cols: Vec<&str> = t.split_whitespace().collect();
        let row_ok = cols.len() == 4
            && cols[..2].iter().all(|c| c.parse::<f64>().is_ok())
            && cols[2].parse::<u64>().is_ok()
            && (cols[3] == "inf" || cols[3].parse::<f64>().is_ok());
        if !row_ok {
            return Err(IngestError::at_line(
                no,
                format!(
                    "{t:?} in the percentile spectrum: expected `Value Percentile TotalCount \
                     1/(1-Percentile)`"
                ),
            )
            .field("Detailed Percentile spectrum"));
        }
        Ok(())
    }

    fn result(&self) -> Result<Extracted, IngestError> {
        if self.bytes == 0 {
            return Err(IngestError::new("empty input: not wrk2 output"));
        }
        let Some(at) = self.recorded_at else {
            if let Some(line) = self.plain_wrk_at {
                return Err(IngestError::at_line(
                    line,
                    "this is wrk output, not wrk2: wrk's Latency Distribution stops at 99% and \
                     has no 99.9th percentile; run wrk2 with --latency",
                )
                .field("99.900%"));
            }
            return Err(IngestError::new(format!(
                "no `{RECORDED}` block: not wrk2 output, or wrk2 was run without --latency (-L)"
            ))
            .field("Latency Distribution"));
        };
        let missing = |field: &str| {
            IngestError::at_line(
                at,
                format!("the Recorded Latency block has no {field} line (file truncated?)"),
            )
            .field(field)
        };
        let p99 = self.p99.ok_or_else(|| missing("99.000%"))?;
        let p999 = self.p999.ok_or_else(|| missing("99.900%"))?;
        let samples = self.total_count.or(self.requests).ok_or_else(|| {
            IngestError::new(
                "neither the spectrum's `Total count` nor the `N requests in …` line: file \
                 truncated?",
            )
            .field("Total count")
        })?;
        if samples == 0 {
            return Err(IngestError::new("wrk2 recorded no requests").field("Total count"));
        }
        Ok(Extracted {
            format: Format::Wrk2,
            tool: Some("wrk2".to_owned()),
            labels: vec![LabelStats {
                label: self.label.clone(),
                samples,
                failures: self.socket_errors.saturating_add(self.status_errors),
                p50_us: self.p50,
                p99_us: p99,
                p999_us: p999,
            }],
        })
    }
}

/// `12.30ms` → 12300: wrk's units (`format_time_us`: us, ms, s, then m and h), to the nearest µs.
fn latency_us(s: &str) -> Option<u64> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = s.split_at(split);
    if number.is_empty() || !number.bytes().next()?.is_ascii_digit() {
        return None;
    }
    let v: f64 = number.parse().ok()?;
    let scale = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        _ => return None,
    };
    let us = (v * scale).round();
    (us.is_finite() && us < u64::MAX as f64).then_some(us as u64)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::read_all;
    use super::*;

    const CHECKOUT: &str = include_str!("../../../../tests/fixtures/wrk2/checkout.txt");
    const SEARCH: &str = include_str!("../../../../tests/fixtures/wrk2/search-errors.txt");
    const HEALTH: &str = include_str!("../../../../tests/fixtures/wrk2/health-us.txt");
    const WRK_PLAIN: &str = include_str!("../../../../tests/fixtures/wrk2/wrk-plain.txt");
    const EXPECTED: &str = include_str!("../../../../tests/fixtures/wrk2/expected.txt");

    fn read(input: &[u8], label: Option<&str>, chunk: usize) -> Result<Extracted, IngestError> {
        let options = Options {
            unit: None,
            label: label.map(str::to_owned),
        };
        read_all(parser(&options)?, input, chunk)
    }

    /// Reads `input` whole, in 7-byte and in 1-byte chunks; all three must agree.
    fn read_chunked(input: &str, label: Option<&str>) -> Result<Extracted, IngestError> {
        let whole = read(input.as_bytes(), label, input.len().max(1));
        for chunk in [7, 1] {
            assert_eq!(
                read(input.as_bytes(), label, chunk),
                whole,
                "chunks of {chunk} bytes"
            );
        }
        whole
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
            assert_eq!((stats.samples, stats.failures), (n[0], n[1]), "{}", row[0]);
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
                    failures,
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
            "Running 1m test @ http://127.0.0.1:8080/\n  64 threads and 640 connections\n"
                .to_owned(),
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
                include_bytes!("../../../../tests/fixtures/hdrhistogram/untagged.hlog"),
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
            assert_eq!(super::super::detect(fixture.as_bytes()), Some(Format::Wrk2));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

        /// Mutated fixtures (bytes overwritten, cut, spliced) give a result or an error, never a
        /// panic.
        #[test]
        fn mutated_fixtures_never_panic(
            which in 0usize..4,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..12),
            cut in any::<usize>(),
            splice in any::<Option<(usize, usize)>>(),
            chunk in 1usize..500,
        ) {
            let mut input = [CHECKOUT, SEARCH, HEALTH, WRK_PLAIN][which].as_bytes().to_vec();
            for (at, byte) in flips {
                let n = input.len();
                input[at % n] = byte;
            }
            if let Some((from, len)) = splice {
                let n = input.len();
                let from = from % n;
                let piece = input[from..(from + len % 300).min(n)].to_vec();
                input.splice(from..from, piece);
            }
            if cut % 3 == 0 {
                input.truncate(cut % (input.len() + 1));
            }
            let _ = read(&input, None, chunk);
        }
    }
}
