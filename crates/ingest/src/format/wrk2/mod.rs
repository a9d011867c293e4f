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
//! **Distribution.** The label's percentile points are the Recorded Latency block's `Detailed
//! Percentile spectrum` (each row's `Value` in ms and its `Percentile`, a fraction, × 100), or,
//! without a spectrum, its percentile lines (50 % … 100 %). A spectrum of more than
//! [`MAX_POINTS`] rows is thinned as it is read (every other row kept each time the kept ones
//! reach the cap), so memory stays flat: evenly spaced rows plus the last.
//!
//! Plain wrk (`wrk --latency`) prints only 50/75/90/99 %: its files are refused, naming the
//! missing 99.900% line. Lines the format does not define (Lua `done()` output, …) are skipped.

use budget_core::distribution::MAX_POINTS;

use crate::format::percentile_points;
use crate::framing::lines::LineBuffer;
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

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
    /// The Recorded Latency block's percentile lines, as points (percent, µs).
    table: Thinned,
    /// The Recorded Latency block's spectrum rows, as points (percent, µs).
    spectrum: Thinned,
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
        self.table.push(pct, us);
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
        // `Value` in ms with 3 decimals (whole µs), `Percentile` a fraction with 6 decimals.
        if let (Ok(ms), Ok(fraction)) = (cols[0].parse::<f64>(), cols[1].parse::<f64>()) {
            let us = (ms * 1000.0).round();
            if us.is_finite() && us >= 0.0 && us < u64::MAX as f64 {
                self.spectrum
                    .push((fraction * 1_000_000.0).round() / 10_000.0, us as u64);
            }
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
        let rows = if self.spectrum.is_empty() {
            &self.table
        } else {
            &self.spectrum
        };
        let distributions = percentile_points(rows.points())
            .map(|d| (self.label.clone(), d))
            .into_iter()
            .collect();
        Ok(Extracted {
            distributions,
            format: Format::Wrk2,
            tool: Some("wrk2".to_owned()),
            labels: vec![LabelStats {
                label: self.label.clone(),
                samples,
                failures: Some(self.socket_errors.saturating_add(self.status_errors)),
                p50_us: self.p50,
                p99_us: p99,
                p999_us: p999,
            }],
            notes: Vec::new(),
        })
    }
}

/// Rows of a table of any length kept in bounded memory: every `stride`-th row, the stride
/// doubling (and every other kept row dropped) each time [`MAX_POINTS`] rows are kept, and the
/// last row. What is kept is evenly spaced, at most [`MAX_POINTS`] with the last.
#[derive(Debug, Default)]
struct Thinned {
    kept: Vec<(f64, u64)>,
    /// Keep the rows whose index is a multiple of this (0 is read as 1).
    stride: u64,
    /// Rows pushed.
    seen: u64,
    last: Option<(f64, u64)>,
}

impl Thinned {
    fn push(&mut self, percentile: f64, us: u64) {
        let stride = self.stride.max(1);
        if self.seen % stride == 0 {
            self.kept.push((percentile, us));
            if self.kept.len() >= MAX_POINTS {
                let mut i = 0usize;
                self.kept.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride = stride.saturating_mul(2);
            }
        }
        self.seen = self.seen.saturating_add(1);
        self.last = Some((percentile, us));
    }

    fn is_empty(&self) -> bool {
        self.seen == 0
    }

    /// The rows kept, and the last one when it was not.
    fn points(&self) -> Vec<(f64, u64)> {
        let mut points = self.kept.clone();
        let last_kept = self
            .seen
            .checked_sub(1)
            .map(|i| i % self.stride.max(1) == 0);
        if let (Some(last), Some(false)) = (self.last, last_kept) {
            points.push(last);
        }
        points
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
mod tests;
