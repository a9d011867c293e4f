//! HdrHistogram interval logs (`.hlog`), as written by `HistogramLogWriter` (Java, Python, Rust,
//! C), jHiccup, Gatling's and many other tools' HdrHistogram exports.
//!
//! ```text
//! #[Histogram log format version 1.3]
//! #[StartTime: 1441812279.474 (seconds since epoch), Wed Sep 09 08:24:39 PDT 2015]
//! #[BaseTime: 1441812279.474 (seconds since epoch)]
//! "StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"
//! Tag=payment,0.127,1.007,2.769,HISTFAAAAEV42pNpmSz...
//! 1.134,0.999,0.442,HISTFAAAAEJ42pNpmSzMwMDAxAABzFCaEUoz...
//! ```
//!
//! Lines are read one by one as the chunks arrive: `#` lines (including the `StartTime`,
//! `BaseTime` and `MaxValue…` headers) and the CSV legend are skipped; every other non-empty line
//! is an interval `[Tag=NAME,]start,length,max,BASE64`, whose histogram (the V2 encoding, zlib
//! compressed or not) is decoded and merged into one histogram per tag. Untagged lines go to the
//! label given in [`Options::label`], else `"default"`.
//!
//! **Units.** The format does not record the unit of its values, so [`Options::unit`] is
//! required. Merging happens *in the log's own unit* (one auto-resizing histogram per tag, 3
//! significant digits, values clamped to one hour in that unit as [`crate::hdr::Recorder`] clamps
//! to one hour); percentiles are taken from the merged histogram and converted to µs at the end,
//! rounded to nearest and kept within 1 µs ..= 1 h like the `Recorder`. Converting each value to µs
//! first would round nanosecond logs twice; this way the result is the log's own percentile (the
//! highest equivalent value, as HdrHistogram reports it) to within the rounding to whole µs.
//!
//! **Memory** stays flat whatever the number of lines: one histogram per tag (at most
//! [`MAX_TAGS`] tags), scratch buffers reused from line to line, lines of at most [`MAX_LINE`]
//! bytes and decompressed histograms of at most [`MAX_DECODED`] bytes; with several threads,
//! each thread's buffers, at most 8 MiB of counts per worker and three batches of lines (see
//! **Threads**).
//!
//! **Decoding** (`v2.rs`). Each line is decoded here rather than by the `hdrhistogram` crate's
//! `Deserializer`: base64 (the `base64` crate), then the zlib stream (libdeflate, checksum
//! verified, output capped at [`MAX_DECODED`]: a larger histogram is refused, never allocated),
//! then the V2 counts (LEB128 + ZigZag, runs of zeros), whose indexes are placed with
//! HdrHistogram's own layout arithmetic (lowest discernible value and significant digits from
//! the header) and added straight into the tag's merged counts. So a line costs its non-zero
//! counts only: the crate's deserializer would allocate and zero the whole counts array of every
//! interval histogram (260 KB for a 1 h range in ns) and the merge would walk it again; and a
//! forged header cannot make anything allocate beyond the caps nor reach an overflow. The format
//! has no failures: `failures` is unknown (`None`), and the run's evidence says so.
//!
//! **Threads** (`lanes.rs`). The calling thread reads the lines in order and checks their fields
//! and tags; where `std::thread::available_parallelism()` is more than 1, the histograms are
//! decoded by the calling thread together with up to [`MAX_THREADS`]` - 1` worker threads,
//! started with the first 256 KiB of histograms (a smaller log is decoded by the calling thread
//! alone, at its end). Each thread has its own buffers and its own per-tag counts, added up at
//! the end; the result, and the error (the first bad line's), are exactly those of one thread.
//! At most two batches of 256 KiB of base64 are queued or being decoded at a time, besides the
//! one being filled, and a worker keeps at most 8 MiB of counts (past that, it hands them to the
//! calling thread, which adds them into its own); each thread's buffers have the caps above. `push` and `finish` may wait for the workers (a
//! condition variable): call them where blocking is allowed (the server does, inside
//! `tokio::task::block_in_place`). An error may be reported by a later `push` than the one that
//! brought its line (at most two batches later), or by `finish`. Dropping the parser does not
//! wait: its workers end after the lines in their hands.

mod lanes;
mod v2;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

pub use self::lanes::MAX_THREADS;
use self::lanes::{Lane, Pool, TagIndex, Tuning};
use self::v2::Merged;
pub use self::v2::MAX_DECODED;
use crate::framing::lines::LineBuffer;
use crate::hdr::MAX_US;
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options, TimeUnit};

/// Longest line accepted, in bytes (a base64 histogram of a few MiB is already extreme).
pub const MAX_LINE: usize = 4 << 20;
/// Most distinct tags in one log (each holds one histogram).
pub const MAX_TAGS: usize = 256;

const LEGEND: &[u8] = b"\"StartTimestamp\"";
const HISTOGRAM_FIELD: &str = "Interval_Compressed_Histogram";

/// Whether the start of an input looks like an HdrHistogram interval log: leading `#` comments
/// of which one is a `#[StartTime: …]`, `#[BaseTime: …]` or `#[Histogram log format …]` header,
/// or a first non-comment line that is the `"StartTimestamp","Interval_Length",…` legend or an
/// interval line whose histogram is base64 V2 (`HIST…`).
pub fn sniff(head: &[u8]) -> bool {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    for line in head.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        if line.starts_with(b"#") {
            let header = line.starts_with(b"#[")
                && [&b"StartTime"[..], b"BaseTime", b"Histogram log format"]
                    .iter()
                    .any(|w| contains(line, w));
            if header {
                return true;
            }
            continue;
        }
        return line.starts_with(b"\"StartTimestamp\",\"Interval_Length\"")
            || looks_like_interval(line);
    }
    false
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn looks_like_interval(line: &[u8]) -> bool {
    let rest = match line.strip_prefix(b"Tag=") {
        Some(tagged) => match tagged.iter().position(|&b| b == b',') {
            Some(i) => &tagged[i + 1..],
            None => return false,
        },
        None => line,
    };
    let fields: Vec<&[u8]> = rest.split(|&b| b == b',').collect();
    fields.len() == 4
        && fields[..3].iter().all(|f| parse_f64(f).is_some())
        && fields[3].starts_with(b"HIST")
}

/// The parser; fails at once without [`Options::unit`], which the format does not record.
pub fn parser(options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    let unit = options.unit.ok_or_else(|| {
        IngestError::new(
            "HdrHistogram logs do not record the unit of their values: say it with ?unit=ns|us|ms|s",
        )
        .field("unit")
    })?;
    Ok(Box::new(HlogParser::new(
        unit,
        options.label.as_deref(),
        Tuning::for_this_machine(),
    )))
}

/// One hour in `unit`: the largest value kept (as `Recorder` keeps at most one hour).
fn one_hour_in(unit: TimeUnit) -> u64 {
    match unit {
        TimeUnit::Ns => MAX_US * 1000,
        TimeUnit::Us => MAX_US,
        TimeUnit::Ms => MAX_US / 1000,
        TimeUnit::S => MAX_US / 1_000_000,
    }
}

struct HlogParser {
    lines: LineBuffer,
    bytes: u64,
    log: Log,
}

impl HlogParser {
    fn new(unit: TimeUnit, label: Option<&str>, tuning: Tuning) -> Self {
        let cap = one_hour_in(unit);
        Self {
            lines: LineBuffer::new(MAX_LINE),
            bytes: 0,
            log: Log {
                unit,
                cap,
                untagged: label
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .unwrap_or("default")
                    .to_owned(),
                tags: BTreeMap::new(),
                intervals: 0,
                main: Lane::default(),
                pool: (tuning.threads > 1).then(|| Pool::new(tuning, cap)),
            },
        }
    }
}

/// What the lines so far hold.
struct Log {
    unit: TimeUnit,
    /// Largest value merged, in `unit`.
    cap: u64,
    /// The label of untagged intervals.
    untagged: String,
    /// Each tag's index in the lanes' counts.
    tags: BTreeMap<String, usize>,
    /// Interval lines decoded (on one thread).
    intervals: u64,
    /// The calling thread's buffers and counts: the totals, once the other threads' are added.
    main: Lane,
    /// The batches and other threads, when decoding on several.
    pool: Option<Pool>,
}

impl Ingest for HlogParser {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.bytes += chunk.len() as u64;
        let log = &mut self.log;
        self.lines
            .push(chunk, |no, line| log.line(no, line), too_long)
    }

    fn finish(mut self: Box<Self>) -> Result<Extracted, IngestError> {
        self.end()
    }
}

impl HlogParser {
    /// [`Ingest::finish`], leaving the parser to be looked at (tests).
    fn end(&mut self) -> Result<Extracted, IngestError> {
        let log = &mut self.log;
        self.lines.finish(|no, line| log.line(no, line))?;
        if let Some(pool) = &mut log.pool {
            pool.finish(&mut log.main)?;
            log.intervals = pool.queued_lines;
        }
        if self.bytes == 0 {
            return Err(IngestError::new("empty input: not an HdrHistogram log"));
        }
        if log.intervals == 0 {
            return Err(IngestError::new(
                "no interval histogram lines ([Tag=NAME,]start,length,max,BASE64) in the log",
            ));
        }
        let totals = &log.main.counts;
        let mut distributions = std::collections::BTreeMap::new();
        let labels: Vec<LabelStats> = log
            .tags
            .iter()
            .map(|(label, &tag)| (label, totals[tag].histogram()))
            .filter(|(_, h)| !h.is_empty())
            .map(|(label, h)| {
                let us = crate::hdr::to_us(&h, log.unit);
                distributions.insert(label.clone(), crate::hdr::histogram(&us));
                stats(label, &h, log.unit)
            })
            .collect();
        if labels.is_empty() {
            return Err(IngestError::new(format!(
                "the log's {} interval histograms hold no samples",
                log.intervals
            )));
        }
        Ok(Extracted {
            format: Format::Hdrhistogram,
            tool: Some("HdrHistogram".to_owned()),
            labels,
            distributions,
            notes: vec![
                "failures: unknown — an HdrHistogram log records latencies only".to_owned(),
            ],
        })
    }
}

fn too_long(line: u64) -> IngestError {
    IngestError::at_line(
        line,
        format!("line longer than {MAX_LINE} bytes: not an HdrHistogram log"),
    )
}

impl Log {
    /// Reads line `no`: at once on one thread, else into a batch for the threads.
    fn line(&mut self, no: u64, line: &[u8]) -> Result<(), IngestError> {
        let (tag, b64) = match self.interval(no, line) {
            Ok(Some(interval)) => interval,
            Ok(None) => return Ok(()),
            // the lines before it come first
            Err(e) => {
                return Err(match &mut self.pool {
                    Some(pool) => pool.drain(&mut self.main).err().unwrap_or(e),
                    None => e,
                })
            }
        };
        match &mut self.pool {
            Some(pool) => pool.push(&mut self.main, no, tag, b64),
            None => {
                self.main.line(no, tag, b64, self.cap)?;
                self.intervals += 1;
                Ok(())
            }
        }
    }

    /// The tag and base64 histogram of line `no` when it is an interval line (`None` for a
    /// comment, a blank line or the legend), its fields checked. A new tag is numbered here, in
    /// line order: past [`MAX_TAGS`] it has no number, and the line is refused once its
    /// histogram's header has been read ([`Lane::line`]).
    fn interval<'l>(
        &mut self,
        no: u64,
        line: &'l [u8],
    ) -> Result<Option<(TagIndex, &'l [u8])>, IngestError> {
        let line = if no == 1 {
            line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line)
        } else {
            line
        };
        let line = line.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") || line.starts_with(LEGEND) {
            return Ok(None);
        }
        let (tag, rest) = match line.strip_prefix(b"Tag=") {
            Some(tagged) => {
                let comma = tagged.iter().position(|&b| b == b',').ok_or_else(|| {
                    IngestError::at_line(no, "a Tag= without the comma that ends it").field("Tag")
                })?;
                let tag = std::str::from_utf8(&tagged[..comma])
                    .map_err(|_| IngestError::at_line(no, "the tag is not UTF-8").field("Tag"))?;
                if tag.is_empty() {
                    return Err(IngestError::at_line(no, "empty tag").field("Tag"));
                }
                (Some(tag), &tagged[comma + 1..])
            }
            None => (None, line),
        };
        let fields = match four_fields(rest) {
            Some(fields) => fields,
            None => {
                let found = rest.split(|&b| b == b',').count();
                return Err(IngestError::at_line(
                    no,
                    format!(
                        "expected 4 comma-separated fields after the optional Tag= (StartTimestamp, \
                         Interval_Length, Interval_Max, {HISTOGRAM_FIELD}), found {found}: not an \
                         HdrHistogram interval line"
                    ),
                ));
            }
        };
        for (field, name) in
            fields[..3]
                .iter()
                .zip(["StartTimestamp", "Interval_Length", "Interval_Max"])
        {
            if !is_number(field) {
                return Err(IngestError::at_line(
                    no,
                    format!("{:?} is not a number", String::from_utf8_lossy(field)),
                )
                .field(name));
            }
        }
        let label = tag.unwrap_or(&self.untagged);
        let index = match self.tags.get(label) {
            Some(&index) => Some(index),
            None if self.tags.len() >= MAX_TAGS => None,
            None => {
                let index = self.tags.len();
                self.tags.insert(label.to_owned(), index);
                self.main.counts.push(Merged::new());
                Some(index)
            }
        };
        Ok(Some((index, fields[3])))
    }
}

/// The four comma-separated fields of `line`, or `None` when it has another number of fields.
/// (The last one, the histogram, is most of the line: searched with `memchr`.)
fn four_fields(line: &[u8]) -> Option<[&[u8]; 4]> {
    let mut fields = [&line[..0]; 4];
    let mut rest = line;
    for field in &mut fields[..3] {
        let comma = memchr::memchr(b',', rest)?;
        *field = &rest[..comma];
        rest = &rest[comma + 1..];
    }
    fields[3] = rest;
    memchr::memchr(b',', rest).is_none().then_some(fields)
}

/// Whether `field` is a finite number: at once for plain decimals as the writers print them
/// (`%.3f`, `%f`), by [`parse_f64`] for anything else.
fn is_number(field: &[u8]) -> bool {
    let digits = |s: &[u8]| !s.is_empty() && s.len() <= 200 && s.iter().all(u8::is_ascii_digit);
    let plain = match field.iter().position(|&b| b == b'.') {
        Some(dot) => digits(&field[..dot]) && digits(&field[dot + 1..]),
        None => digits(field),
    };
    plain || parse_f64(field).is_some()
}

/// A finite number as the writers print them (`%.3f`, `%f`).
fn parse_f64(field: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(field).ok()?.trim();
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn stats(label: &str, h: &Histogram<u64>, unit: TimeUnit) -> LabelStats {
    let at = |q: f64| {
        let us = unit.to_us(h.value_at_quantile(q) as f64).round();
        (us as u64).clamp(1, MAX_US)
    };
    LabelStats {
        label: label.to_owned(),
        samples: h.len(),
        failures: None,
        p50_us: Some(at(0.50)),
        p99_us: at(0.99),
        p999_us: at(0.999),
    }
}

#[cfg(test)]
mod tests;
