//! JMeter JTL results in CSV: one row per sample, with or without a header line.
//!
//! - With a header (`jmeter.save.saveservice.print_field_names=true`, the default since 3.0),
//!   columns are found by name: `elapsed` (ms), `label` and `success` (`true`/`false`) are
//!   required, any others are ignored.
//! - Without a header (the JMeter 2.x default), the row must start with JMeter's default
//!   columns: `timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success`
//!   (2.x then writes `bytes,grpThreads,allThreads,Latency`; 3.x–5.x `failureMessage,bytes,…`).
//!   Every row must have as many fields as the first.
//! - The delimiter is `,` or a tab (`default_delimiter=\t`), whichever comes first on line 1.
//!
//! Rows come in any order; each is recorded into its label's HDR histogram and dropped, so
//! memory is bounded by the number of labels ([`MAX_LABELS`]), not by the input size. Failures
//! are rows with `success=false`. JTL times are whole milliseconds: percentiles are the HDR
//! values truncated to the millisecond, which is the exact nearest-rank percentile below
//! ~1 s (HDR buckets there are narrower than 1 ms) and within HDR's 0.1 % above.
//!
//! Not read: `SampleCount`/`ErrorCount` (every row counts as one sample), timestamps, and XML
//! JTL files.
//!
//! `CsvRecords` (records of pushed chunks through `csv-core`) is shared with the Locust parser.

use std::collections::HashMap;

use crate::framing::csv::{first_line, parse_u64, shown, unquote, CsvRecords, Record};
use crate::hdr::Recorder;
use crate::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Distinct labels accepted (as `hlog::MAX_TAGS`). Each holds an HDR histogram of ~190 KB, so
/// this bounds memory (~48 MB).
pub const MAX_LABELS: usize = 256;
/// Longest first line buffered while the delimiter is unknown.
const MAX_HEAD: usize = 64 * 1024;
/// Fields of a header-less row that must be present: JMeter's default columns up to `success`.
const HEADERLESS_MIN_FIELDS: usize = 8;
/// Column names that only a JTL header has.
const HEADER_NAMES: [&str; 6] = [
    "timeStamp",
    "elapsed",
    "label",
    "success",
    "responseCode",
    "threadName",
];

/// Whether the start of an input looks like a JTL: a header naming `elapsed` and `label`, or a
/// header-less row `13-digit epoch ms,integer,label…`.
pub fn sniff(head: &[u8]) -> bool {
    let line = first_line(head);
    let delimiter = delimiter(line);
    let fields: Vec<&[u8]> = line.split(|&b| b == delimiter).map(unquote).collect();
    if let [stamp, elapsed, label, ..] = fields.as_slice() {
        if stamp.len() == 13 && is_digits(stamp) && is_digits(elapsed) && !label.is_empty() {
            return true;
        }
    }
    fields.contains(&&b"elapsed"[..]) && fields.contains(&&b"label"[..])
}

pub fn parser(_options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Ok(Box::new(Jtl::default()))
}

#[derive(Default)]
struct Jtl {
    /// The input until its first line is complete (the delimiter is chosen from it).
    head: Vec<u8>,
    csv: Option<CsvRecords>,
    body: Body,
}

impl Jtl {
    fn start(&mut self) -> Result<(), IngestError> {
        let head = std::mem::take(&mut self.head);
        let csv = self
            .csv
            .insert(CsvRecords::new(delimiter(first_line(&head))));
        csv.push(&head, |r| self.body.record(r))
    }
}

impl Ingest for Jtl {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        if let Some(csv) = &mut self.csv {
            return csv.push(chunk, |r| self.body.record(r));
        }
        let scanned = self.head.len();
        self.head.extend_from_slice(chunk);
        match chunk.iter().position(|&b| b == b'\n') {
            Some(pos) if scanned + pos <= MAX_HEAD => self.start(),
            None if self.head.len() <= MAX_HEAD => Ok(()),
            _ => Err(head_too_long()),
        }
    }

    fn finish(mut self: Box<Self>) -> Result<Extracted, IngestError> {
        if self.csv.is_none() {
            if self.head.len() > MAX_HEAD {
                return Err(head_too_long());
            }
            self.start()?;
        }
        let this = &mut *self;
        if let Some(csv) = &mut this.csv {
            csv.finish(|r| this.body.record(r))?;
        }
        self.body.finish()
    }
}

fn head_too_long() -> IngestError {
    IngestError::at_line(1, "first line longer than 64 KiB: not a JTL CSV")
}

/// Where the needed columns are.
#[derive(Debug, Clone, Copy)]
struct Layout {
    elapsed: usize,
    label: usize,
    success: usize,
    /// Fields every row must have.
    fields: usize,
}

#[derive(Default)]
struct Body {
    /// Known after the first record (a header, or the first header-less row).
    layout: Option<Layout>,
    labels: Labels,
    samples: u64,
    /// Line of the header, when there is one.
    header_line: Option<u64>,
}

impl Body {
    fn record(&mut self, rec: &Record<'_>) -> Result<(), IngestError> {
        let Some(layout) = self.layout else {
            return self.first(rec);
        };
        if rec.len() != layout.fields {
            return Err(IngestError::at_line(
                rec.line(),
                format!(
                    "expected {} fields, found {} (truncated or malformed row)",
                    layout.fields,
                    rec.len()
                ),
            ));
        }
        let elapsed = rec.field(layout.elapsed);
        let Some(ms) = parse_u64(elapsed) else {
            return Err(elapsed_error(rec.line(), elapsed));
        };
        let ok = match rec.field(layout.success) {
            b"true" => true,
            b"false" => false,
            other => parse_bool(other).ok_or_else(|| {
                IngestError::at_line(rec.line(), format!("{} is not true or false", shown(other)))
                    .field("success")
            })?,
        };
        let recorder = self.labels.get(rec.field(layout.label), rec)?;
        recorder.record_us(ms.saturating_mul(1000));
        if !ok {
            recorder.record_failure();
        }
        self.samples += 1;
        Ok(())
    }

    /// The first record: a header, or the first sample of a header-less file.
    fn first(&mut self, rec: &Record<'_>) -> Result<(), IngestError> {
        // A header-less row has its `elapsed` in field 1 (a sampler may be named "label").
        let header = parse_u64(rec.field(1)).is_none()
            && (0..rec.len()).any(|i| HEADER_NAMES.iter().any(|n| rec.field(i) == n.as_bytes()));
        if header {
            let find = |name: &str| {
                (0..rec.len())
                    .find(|&i| rec.field(i) == name.as_bytes())
                    .ok_or_else(|| {
                        IngestError::at_line(rec.line(), "missing column in the JTL header")
                            .field(name)
                    })
            };
            self.layout = Some(Layout {
                elapsed: find("elapsed")?,
                label: find("label")?,
                success: find("success")?,
                fields: rec.len(),
            });
            self.header_line = Some(rec.line());
            return Ok(());
        }
        // Header-less: JMeter's default column order, which begins the same in 2.x and 3.x+.
        if parse_u64(rec.field(1)).is_none() {
            let mut e = elapsed_error(rec.line(), rec.field(1));
            e.message.push_str(
                ": not a JTL (no header naming `elapsed`, nor a row of JMeter's default columns)",
            );
            return Err(e);
        }
        if rec.len() < HEADERLESS_MIN_FIELDS {
            return Err(IngestError::at_line(
                rec.line(),
                format!(
                    "a JTL row without header needs JMeter's default columns (at least {HEADERLESS_MIN_FIELDS} \
                     fields up to `success`), found {}",
                    rec.len()
                ),
            ));
        }
        self.layout = Some(Layout {
            elapsed: 1,
            label: 2,
            success: 7,
            fields: rec.len(),
        });
        self.record(rec)
    }

    fn finish(self) -> Result<Extracted, IngestError> {
        if self.layout.is_none() {
            return Err(IngestError::new(
                "empty input: no JTL header nor sample row",
            ));
        }
        if self.samples == 0 {
            let message = "a JTL header but no sample rows (empty run or truncated file)";
            return Err(match self.header_line {
                Some(line) => IngestError::at_line(line, message),
                None => IngestError::new(message),
            });
        }
        let mut labels: Vec<LabelStats> = self
            .labels
            .recorders
            .iter()
            .filter_map(|(name, r)| r.stats(name))
            .map(whole_ms)
            .collect();
        labels.sort_by(|a, b| a.label.cmp(&b.label));
        let distributions = self
            .labels
            .recorders
            .iter()
            .filter(|(_, r)| r.samples() > 0)
            .map(|(name, r)| (name.clone(), r.distribution()))
            .collect();
        Ok(Extracted {
            format: Format::Jmeter,
            tool: Some("JMeter".to_owned()),
            labels,
            distributions,
            notes: Vec::new(),
        })
    }
}

/// Per-label recorders, with the last label used checked first (rows of one label cluster).
#[derive(Default)]
struct Labels {
    index: HashMap<Box<[u8]>, usize>,
    recorders: Vec<(String, Recorder)>,
    last: usize,
}

impl Labels {
    fn get(&mut self, label: &[u8], rec: &Record<'_>) -> Result<&mut Recorder, IngestError> {
        let hit = match self.recorders.get(self.last) {
            Some((name, _)) if name.as_bytes() == label => Some(self.last),
            _ => self.index.get(label).copied(),
        };
        let i = match hit {
            Some(i) => i,
            None => self.insert(label, rec)?,
        };
        self.last = i;
        Ok(&mut self.recorders[i].1)
    }

    #[cold]
    fn insert(&mut self, label: &[u8], rec: &Record<'_>) -> Result<usize, IngestError> {
        let name = std::str::from_utf8(label)
            .map_err(|_| IngestError::at_line(rec.line(), "not valid UTF-8").field("label"))?;
        if self.recorders.len() >= MAX_LABELS {
            return Err(IngestError::at_line(
                rec.line(),
                format!(
                    "more than {MAX_LABELS} distinct labels (new label {}): filter the JTL",
                    shown(label)
                ),
            )
            .field("label"));
        }
        self.index.insert(label.into(), self.recorders.len());
        self.recorders.push((name.to_owned(), Recorder::new()));
        Ok(self.recorders.len() - 1)
    }
}

/// Percentiles truncated to the millisecond, the resolution of JTL times (see module doc).
fn whole_ms(mut s: LabelStats) -> LabelStats {
    let ms = |us: u64| us / 1000 * 1000;
    s.p50_us = s.p50_us.map(ms);
    s.p99_us = ms(s.p99_us);
    s.p999_us = ms(s.p999_us);
    s
}

fn elapsed_error(line: u64, value: &[u8]) -> IngestError {
    let what = if value.first() == Some(&b'-') && parse_u64(&value[1..]).is_some() {
        "is negative"
    } else if value.contains(&b'.') && value.iter().any(u8::is_ascii_digit) {
        "is not a whole number of milliseconds (JTL `elapsed` is in ms)"
    } else {
        "is not a number"
    };
    IngestError::at_line(line, format!("{} {what}", shown(value))).field("elapsed")
}

fn parse_bool(b: &[u8]) -> Option<bool> {
    if b.eq_ignore_ascii_case(b"true") {
        Some(true)
    } else if b.eq_ignore_ascii_case(b"false") {
        Some(false)
    } else {
        None
    }
}

fn is_digits(b: &[u8]) -> bool {
    !b.is_empty() && b.iter().all(u8::is_ascii_digit)
}

/// `,` or tab: whichever comes first in `line` (`,` when neither does).
fn delimiter(line: &[u8]) -> u8 {
    line.iter()
        .copied()
        .find(|&b| b == b',' || b == b'\t')
        .unwrap_or(b',')
}

#[cfg(test)]
mod tests;
