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

use csv_core::{ReadRecordResult, Reader, ReaderBuilder};

use super::hdr::Recorder;
use super::{Extracted, Format, Ingest, IngestError, LabelStats, Options};

/// Distinct labels accepted (as `hlog::MAX_TAGS`). Each holds an HDR histogram of ~190 KB, so
/// this bounds memory (~48 MB).
pub const MAX_LABELS: usize = 256;
/// Longest CSV record accepted, in bytes (guards against binary input or an unclosed quote).
const MAX_RECORD: usize = 1 << 20;
/// Most fields accepted in one record.
const MAX_FIELDS: usize = 1024;
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
        Ok(Extracted {
            format: Format::Jmeter,
            tool: Some("JMeter".to_owned()),
            labels,
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

/// A non-negative decimal integer of at most 19 digits (no sign, no spaces).
#[inline]
pub(super) fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    Some(v)
}

/// A field for an error message: quoted, at most 40 bytes.
pub(super) fn shown(b: &[u8]) -> String {
    const MAX: usize = 40;
    let cut = b.len() > MAX;
    let text = String::from_utf8_lossy(&b[..b.len().min(MAX)]);
    format!("{:?}{}", text, if cut { "…" } else { "" })
}

fn is_digits(b: &[u8]) -> bool {
    !b.is_empty() && b.iter().all(u8::is_ascii_digit)
}

/// The first line of `head` (all of it without a newline), without `\r`, after a UTF-8 BOM.
pub(super) fn first_line(head: &[u8]) -> &[u8] {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    let line = head.split(|&b| b == b'\n').next().unwrap_or(head);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// `,` or tab: whichever comes first in `line` (`,` when neither does).
fn delimiter(line: &[u8]) -> u8 {
    line.iter()
        .copied()
        .find(|&b| b == b',' || b == b'\t')
        .unwrap_or(b',')
}

/// A field of a naively split line without its surrounding quotes (sniffing only).
pub(super) fn unquote(f: &[u8]) -> &[u8] {
    f.strip_prefix(b"\"")
        .and_then(|f| f.strip_suffix(b"\""))
        .unwrap_or(f)
}

const BOM: &[u8; 3] = b"\xef\xbb\xbf";

/// CSV records of pushed chunks, through `csv-core` with reused buffers: no allocation per
/// record once the buffers fit the longest record. A leading UTF-8 BOM is skipped even when
/// split across chunks; blank lines are skipped; `\n`, `\r\n` and `\r` end records.
pub(super) struct CsvRecords {
    reader: Reader,
    out: Vec<u8>,
    ends: Vec<usize>,
    nout: usize,
    nend: usize,
    /// Bytes of a leading BOM matched so far; 3 once past the start of the input.
    bom: usize,
}

/// One CSV record: its unquoted fields, and where it is in the input.
pub(super) struct Record<'a> {
    data: &'a [u8],
    ends: &'a [usize],
    /// The line (1-based, counting `\n`) of the record's last byte.
    end_line: u64,
}

impl Record<'_> {
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Field `i`, empty when the record has fewer fields.
    #[inline]
    pub(super) fn field(&self, i: usize) -> &[u8] {
        match self.ends.get(i) {
            Some(&end) => &self.data[if i == 0 { 0 } else { self.ends[i - 1] }..end],
            None => &[],
        }
    }

    /// The 1-based line the record starts on (quoted fields may hold newlines).
    pub(super) fn line(&self) -> u64 {
        let inner = self.data.iter().filter(|&&b| b == b'\n').count() as u64;
        self.end_line.saturating_sub(inner).max(1)
    }
}

impl CsvRecords {
    pub(super) fn new(delimiter: u8) -> Self {
        Self {
            reader: ReaderBuilder::new().delimiter(delimiter).build(),
            out: vec![0; 4096],
            ends: vec![0; 64],
            nout: 0,
            nend: 0,
            bom: 0,
        }
    }

    /// Calls `f` for every record completed by `chunk`.
    pub(super) fn push<F>(&mut self, mut chunk: &[u8], mut f: F) -> Result<(), IngestError>
    where
        F: FnMut(&Record<'_>) -> Result<(), IngestError>,
    {
        while self.bom < BOM.len() {
            match chunk.first() {
                None => return Ok(()),
                Some(&b) if b == BOM[self.bom] => {
                    self.bom += 1;
                    chunk = &chunk[1..];
                }
                Some(_) => {
                    let matched = std::mem::replace(&mut self.bom, BOM.len());
                    self.feed(&BOM[..matched], &mut f)?;
                }
            }
        }
        self.feed(chunk, &mut f)
    }

    /// Ends the input: calls `f` for a last record without a terminator.
    pub(super) fn finish<F>(&mut self, mut f: F) -> Result<(), IngestError>
    where
        F: FnMut(&Record<'_>) -> Result<(), IngestError>,
    {
        if self.bom < BOM.len() {
            let matched = std::mem::replace(&mut self.bom, BOM.len());
            self.feed(&BOM[..matched], &mut f)?;
        }
        loop {
            let (res, _, nout, nend) = self.reader.read_record(
                &[],
                &mut self.out[self.nout..],
                &mut self.ends[self.nend..],
            );
            self.nout += nout;
            self.nend += nend;
            match res {
                ReadRecordResult::Record => self.emit(false, &mut f)?,
                ReadRecordResult::OutputFull => self.grow_out()?,
                ReadRecordResult::OutputEndsFull => self.grow_ends()?,
                ReadRecordResult::InputEmpty | ReadRecordResult::End => return Ok(()),
            }
        }
    }

    #[inline]
    fn feed<F>(&mut self, mut input: &[u8], f: &mut F) -> Result<(), IngestError>
    where
        F: FnMut(&Record<'_>) -> Result<(), IngestError>,
    {
        // An empty input means end of data to csv-core: only `finish` passes one.
        while !input.is_empty() {
            let (res, nin, nout, nend) = self.reader.read_record(
                input,
                &mut self.out[self.nout..],
                &mut self.ends[self.nend..],
            );
            let ended_by_lf = nin > 0 && input[nin - 1] == b'\n';
            input = &input[nin..];
            self.nout += nout;
            self.nend += nend;
            match res {
                ReadRecordResult::Record => self.emit(ended_by_lf, f)?,
                ReadRecordResult::OutputFull => self.grow_out()?,
                ReadRecordResult::OutputEndsFull => self.grow_ends()?,
                ReadRecordResult::InputEmpty | ReadRecordResult::End => break,
            }
        }
        Ok(())
    }

    #[inline]
    fn emit<F>(&mut self, ended_by_lf: bool, f: &mut F) -> Result<(), IngestError>
    where
        F: FnMut(&Record<'_>) -> Result<(), IngestError>,
    {
        let rec = Record {
            data: &self.out[..self.nout],
            ends: &self.ends[..self.nend],
            end_line: self.reader.line() - u64::from(ended_by_lf),
        };
        let result = f(&rec);
        self.nout = 0;
        self.nend = 0;
        result
    }

    #[cold]
    fn grow_out(&mut self) -> Result<(), IngestError> {
        if self.out.len() >= MAX_RECORD {
            return Err(IngestError::at_line(
                self.reader.line(),
                "CSV record longer than 1 MiB (binary input or an unclosed quote?)",
            ));
        }
        self.out.resize(self.out.len() * 2, 0);
        Ok(())
    }

    #[cold]
    fn grow_ends(&mut self) -> Result<(), IngestError> {
        if self.ends.len() >= MAX_FIELDS {
            return Err(IngestError::at_line(
                self.reader.line(),
                format!("CSV record with more than {MAX_FIELDS} fields"),
            ));
        }
        self.ends.resize(self.ends.len() * 2, 0);
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::ingest::{detect, locust, read_all};

    const SHOP_2X: &[u8] = include_bytes!("../../../../tests/fixtures/jmeter/shop_2x_default.jtl");
    const SHOP_HEADER: &[u8] = include_bytes!("../../../../tests/fixtures/jmeter/shop_header.jtl");
    const SHOP_FULL: &[u8] =
        include_bytes!("../../../../tests/fixtures/jmeter/shop_header_full.jtl");
    /// Each JTL fixture with what JMeter and the exact script reported (`*.summary.txt`).
    const FIXTURES: [(&str, &[u8], &str); 3] = [
        (
            "shop_2x_default",
            SHOP_2X,
            include_str!("../../../../tests/fixtures/jmeter/shop_2x_default.summary.txt"),
        ),
        (
            "shop_header",
            SHOP_HEADER,
            include_str!("../../../../tests/fixtures/jmeter/shop_header.summary.txt"),
        ),
        (
            "shop_header_full",
            SHOP_FULL,
            include_str!("../../../../tests/fixtures/jmeter/shop_header_full.summary.txt"),
        ),
    ];

    /// Parses `input` whole, in 7-byte and in 1-byte chunks: all three must agree.
    fn parse(input: &[u8]) -> Result<Extracted, IngestError> {
        let whole = read_all(parser(&Options::default()).unwrap(), input, input.len());
        for chunk in [1, 7] {
            let got = read_all(parser(&Options::default()).unwrap(), input, chunk);
            assert_eq!(got, whole, "chunks of {chunk} bytes");
        }
        whole
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
                        failures,
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
                got.labels.iter().map(|l| l.failures).sum::<u64>(),
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
                    (j[0], j[1]),
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

    /// A fixture edited by `edits` (flip, truncate or insert at an index), for the proptests.
    pub(in crate::ingest) fn mutate(
        base: &[u8],
        edits: &[(u8, prop::sample::Index, u8)],
    ) -> Vec<u8> {
        let mut input = base.to_vec();
        for (op, at, byte) in edits {
            let i = at.index(input.len() + 1);
            match op {
                0 if i < input.len() => input[i] ^= byte | 1,
                1 => input.truncate(i),
                _ => input.insert(i, *byte),
            }
        }
        input
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Mutated fixtures never panic, and chunking never changes the outcome.
        #[test]
        fn mutated_fixtures_never_panic(
            which in 0..FIXTURES.len(),
            edits in prop::collection::vec((0..3u8, any::<prop::sample::Index>(), any::<u8>()), 0..12),
            chunk in 1..4096usize,
        ) {
            let input = mutate(FIXTURES[which].1, &edits);
            let chunked = read_all(parser(&Options::default()).unwrap(), &input, chunk);
            let whole = read_all(parser(&Options::default()).unwrap(), &input, input.len());
            prop_assert_eq!(chunked, whole);
            let _ = read_all(locust::parser(&Options::default()).unwrap(), &input, chunk);
        }
    }
}
