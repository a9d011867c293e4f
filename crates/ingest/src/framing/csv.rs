//! CSV framing: records of pushed chunks through `csv-core`, and the field helpers the CSV
//! formats (JMeter JTL, Locust stats) share.

use csv_core::{ReadRecordResult, Reader, ReaderBuilder};

use crate::IngestError;

/// Longest CSV record accepted, in bytes (guards against binary input or an unclosed quote).
const MAX_RECORD: usize = 1 << 20;
/// Most fields accepted in one record.
const MAX_FIELDS: usize = 1024;

/// A non-negative decimal integer of at most 19 digits (no sign, no spaces).
#[inline]
pub(crate) fn parse_u64(b: &[u8]) -> Option<u64> {
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
pub(crate) fn shown(b: &[u8]) -> String {
    const MAX: usize = 40;
    let cut = b.len() > MAX;
    let text = String::from_utf8_lossy(&b[..b.len().min(MAX)]);
    format!("{:?}{}", text, if cut { "…" } else { "" })
}

/// The first line of `head` (all of it without a newline), without `\r`, after a UTF-8 BOM.
pub(crate) fn first_line(head: &[u8]) -> &[u8] {
    let head = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    let line = head.split(|&b| b == b'\n').next().unwrap_or(head);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A field of a naively split line without its surrounding quotes (sniffing only).
pub(crate) fn unquote(f: &[u8]) -> &[u8] {
    f.strip_prefix(b"\"")
        .and_then(|f| f.strip_suffix(b"\""))
        .unwrap_or(f)
}

const BOM: &[u8; 3] = b"\xef\xbb\xbf";

/// CSV records of pushed chunks, through `csv-core` with reused buffers: no allocation per
/// record once the buffers fit the longest record. A leading UTF-8 BOM is skipped even when
/// split across chunks; blank lines are skipped; `\n`, `\r\n` and `\r` end records.
pub(crate) struct CsvRecords {
    reader: Reader,
    out: Vec<u8>,
    ends: Vec<usize>,
    nout: usize,
    nend: usize,
    /// Bytes of a leading BOM matched so far; 3 once past the start of the input.
    bom: usize,
}

/// One CSV record: its unquoted fields, and where it is in the input.
pub(crate) struct Record<'a> {
    data: &'a [u8],
    ends: &'a [usize],
    /// The line (1-based, counting `\n`) of the record's last byte.
    end_line: u64,
}

impl Record<'_> {
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Field `i`, empty when the record has fewer fields.
    #[inline]
    pub(crate) fn field(&self, i: usize) -> &[u8] {
        match self.ends.get(i) {
            Some(&end) => &self.data[if i == 0 { 0 } else { self.ends[i - 1] }..end],
            None => &[],
        }
    }

    /// The 1-based line the record starts on (quoted fields may hold newlines).
    pub(crate) fn line(&self) -> u64 {
        let inner = self.data.iter().filter(|&&b| b == b'\n').count() as u64;
        self.end_line.saturating_sub(inner).max(1)
    }
}

impl CsvRecords {
    pub(crate) fn new(delimiter: u8) -> Self {
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
    pub(crate) fn push<F>(&mut self, mut chunk: &[u8], mut f: F) -> Result<(), IngestError>
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
    pub(crate) fn finish<F>(&mut self, mut f: F) -> Result<(), IngestError>
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
