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
//! significant digits, values clamped to one hour in that unit as [`super::hdr::Recorder`] clamps
//! to one hour); percentiles are taken from the merged histogram and converted to µs at the end,
//! rounded to nearest and kept within 1 µs ..= 1 h like the `Recorder`. Converting each value to µs
//! first would round nanosecond logs twice; this way the result is the log's own percentile (the
//! highest equivalent value, as HdrHistogram reports it) to within the rounding to whole µs.
//!
//! **Memory** stays flat whatever the number of lines: one histogram per tag (at most
//! [`MAX_TAGS`] tags), scratch buffers reused from line to line, lines of at most [`MAX_LINE`]
//! bytes and decompressed histograms of at most [`MAX_DECODED`] bytes.
//!
//! **Decoding.** Each line is decoded here rather than by the `hdrhistogram` crate's
//! `Deserializer`: base64, then the zlib stream (a small RFC 1950/1951 inflater, checksum
//! verified, output capped), then the V2 counts (LEB128 + ZigZag, runs of zeros), whose indexes
//! are turned into values with HdrHistogram's own layout arithmetic (lowest discernible value and
//! significant digits from the header) and recorded straight into the tag's histogram. So a line
//! costs its non-zero counts only: the crate's deserializer would allocate and zero the whole
//! counts array of every interval histogram (260 KB for a 1 h range in ns) and the merge would
//! walk it again; and a forged header cannot make anything allocate beyond the caps nor reach
//! an overflow. The format has no failures: `failures` is 0.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::hdr::MAX_US;
use super::lines::LineBuffer;
use super::{Extracted, Format, Ingest, IngestError, LabelStats, Options, TimeUnit};

/// Longest line accepted, in bytes (a base64 histogram of a few MiB is already extreme).
pub const MAX_LINE: usize = 4 << 20;
/// Largest decompressed histogram accepted, in bytes.
pub const MAX_DECODED: usize = 16 << 20;
/// Most distinct tags in one log (each holds one histogram).
pub const MAX_TAGS: usize = 256;
/// Precision of the merged histograms, as the rest of the ingest (`Recorder`).
const SIGFIG: u8 = 3;

const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
const V2_HEADER_LEN: usize = 40;

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
    Ok(Box::new(HlogParser {
        lines: LineBuffer::new(MAX_LINE),
        bytes: 0,
        log: Log {
            unit,
            cap: one_hour_in(unit),
            untagged: options
                .label
                .as_deref()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .unwrap_or("default")
                .to_owned(),
            tags: BTreeMap::new(),
            intervals: 0,
            decoder: Decoder::default(),
        },
    }))
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

/// What the lines so far hold.
struct Log {
    unit: TimeUnit,
    /// Largest value merged, in `unit`.
    cap: u64,
    /// The label of untagged intervals.
    untagged: String,
    tags: BTreeMap<String, Histogram<u64>>,
    intervals: u64,
    decoder: Decoder,
}

impl Ingest for HlogParser {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        self.bytes += chunk.len() as u64;
        let log = &mut self.log;
        self.lines
            .push(chunk, |no, line| log.line(no, line), too_long)
    }

    fn finish(mut self: Box<Self>) -> Result<Extracted, IngestError> {
        let log = &mut self.log;
        self.lines.finish(|no, line| log.line(no, line))?;
        if self.bytes == 0 {
            return Err(IngestError::new("empty input: not an HdrHistogram log"));
        }
        if log.intervals == 0 {
            return Err(IngestError::new(
                "no interval histogram lines ([Tag=NAME,]start,length,max,BASE64) in the log",
            ));
        }
        let labels: Vec<LabelStats> = log
            .tags
            .iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(label, h)| stats(label, h, log.unit))
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
    fn line(&mut self, no: u64, line: &[u8]) -> Result<(), IngestError> {
        let line = if no == 1 {
            line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line)
        } else {
            line
        };
        let line = line.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") || line.starts_with(LEGEND) {
            return Ok(());
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
        let fields: Vec<&[u8]> = rest.splitn(5, |&b| b == b',').collect();
        if fields.len() != 4 {
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
        for (field, name) in
            fields[..3]
                .iter()
                .zip(["StartTimestamp", "Interval_Length", "Interval_Max"])
        {
            if parse_f64(field).is_none() {
                return Err(IngestError::at_line(
                    no,
                    format!("{:?} is not a number", String::from_utf8_lossy(field)),
                )
                .field(name));
            }
        }
        let counts = self
            .decoder
            .decode(fields[3])
            .map_err(|m| IngestError::at_line(no, m).field(HISTOGRAM_FIELD))?;
        let label = tag.unwrap_or(&self.untagged);
        if !self.tags.contains_key(label) {
            if self.tags.len() >= MAX_TAGS {
                return Err(IngestError::at_line(
                    no,
                    format!("more than {MAX_TAGS} distinct tags"),
                )
                .field("Tag"));
            }
            self.tags.insert(
                label.to_owned(),
                Histogram::new(SIGFIG).expect("valid HDR sigfig"),
            );
        }
        let merged = self.tags.get_mut(label).expect("inserted above");
        for &(value, count) in counts {
            merged.record_n(value.min(self.cap), count).map_err(|e| {
                IngestError::at_line(no, format!("cannot merge the histogram: {e:?}"))
                    .field(HISTOGRAM_FIELD)
            })?;
        }
        self.intervals += 1;
        Ok(())
    }
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
        failures: 0,
        p50_us: Some(at(0.50)),
        p99_us: at(0.99),
        p999_us: at(0.999),
    }
}

/// Base64 → V2 histogram → `(value, count)` pairs, with its buffers kept from line to line.
#[derive(Default)]
struct Decoder {
    raw: Vec<u8>,
    inflated: Vec<u8>,
    counts: Vec<(u64, u64)>,
}

impl Decoder {
    /// The non-zero counts of the histogram, each at the highest value of its bucket (the value
    /// HdrHistogram reports for that bucket; recorded into a histogram of the same layout, it
    /// lands in the same bucket).
    fn decode(&mut self, b64: &[u8]) -> Result<&[(u64, u64)], String> {
        base64_decode(b64, &mut self.raw)?;
        let cookie = be_u32(&self.raw, 0).ok_or_else(|| {
            format!(
                "a histogram of {} bytes is too short for its header",
                self.raw.len()
            )
        })?;
        let v2: &[u8] = match cookie {
            V2_COMPRESSED_COOKIE => {
                let len = be_u32(&self.raw, 4).ok_or("compressed histogram header truncated")?;
                let body = self
                    .raw
                    .get(8..)
                    .and_then(|b| b.get(..len as usize))
                    .ok_or_else(|| {
                        format!(
                            "compressed histogram truncated: its header says {len} bytes, {} follow",
                            self.raw.len().saturating_sub(8)
                        )
                    })?;
                inflate::zlib(body, MAX_DECODED, &mut self.inflated)
                    .map_err(|e| format!("bad compressed histogram: {e}"))?;
                match be_u32(&self.inflated, 0) {
                    Some(V2_COOKIE) => {}
                    Some(other) => {
                        return Err(format!(
                            "the compressed payload is not a V2 histogram (cookie {other:#010x})"
                        ))
                    }
                    None => return Err("the compressed payload is empty".into()),
                }
                &self.inflated
            }
            V2_COOKIE => &self.raw,
            other => return Err(unsupported_cookie(other)),
        };
        self.counts.clear();
        decode_v2(v2, &mut self.counts)?;
        Ok(&self.counts)
    }
}

fn unsupported_cookie(cookie: u32) -> String {
    let what = match cookie {
        0x0c72_124e | 0x0c72_124f => "a DoubleHistogram",
        _ => match cookie & !0xf0 {
            0x1c84_9301 | 0x1c84_9302 => "the V1 encoding of log format 1.0/1.1",
            0x1c84_9308 | 0x1c84_9309 => "the V0 encoding of the oldest logs",
            _ => "not an HdrHistogram encoding",
        },
    };
    format!(
        "unsupported histogram (cookie {cookie:#010x}: {what}); only integer histograms in the V2 \
         encoding (log format 1.2 and later) are read"
    )
}

/// The non-zero counts of a V2 histogram (`V2_COOKIE` first) into `out`, as `(highest
/// equivalent value, count)`. Refused: header fields the format allows but integer histograms do
/// not use, layouts HdrHistogram cannot build, a payload shorter than announced, counts past the
/// histogram's range and totals beyond 64 bits.
fn decode_v2(buf: &[u8], out: &mut Vec<(u64, u64)>) -> Result<(), String> {
    if buf.len() < V2_HEADER_LEN {
        return Err(format!(
            "histogram header truncated ({} of 40 bytes)",
            buf.len()
        ));
    }
    let word = |at: usize| be_u32(buf, at).expect("within the header");
    let long = |at: usize| u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
    let payload_len = word(4) as usize;
    if word(8) != 0 {
        return Err("histograms with a normalizing index offset are not supported".into());
    }
    let ratio = f64::from_bits(long(32));
    if ratio != 1.0 {
        return Err(format!(
            "integer-to-double conversion ratio {ratio}: DoubleHistogram logs are not supported"
        ));
    }
    let layout = Layout::new(long(16), long(24), word(12))?;
    let payload = buf[V2_HEADER_LEN..].get(..payload_len).ok_or_else(|| {
        format!(
            "histogram payload truncated: {payload_len} bytes announced, {} present",
            buf.len() - V2_HEADER_LEN
        )
    })?;
    let mut total: u64 = 0;
    let mut index: u64 = 0;
    let mut rest = payload;
    while !rest.is_empty() {
        let (raw, used) = varint(rest).ok_or("histogram counts truncated inside a number")?;
        rest = &rest[used..];
        // ZigZag: a negative number is a run of that many empty buckets
        let n = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
        if n < 0 {
            index = index.saturating_add(n.unsigned_abs());
            continue;
        }
        if n > 0 {
            if index >= layout.counts_len {
                return Err(format!(
                    "bad histogram: counts past its {} buckets",
                    layout.counts_len
                ));
            }
            total = total
                .checked_add(n as u64)
                .ok_or("histogram counts overflow 64 bits")?;
            out.push((layout.highest_value(index), n as u64));
        }
        index += 1;
    }
    Ok(())
}

/// Where the values of an HdrHistogram's counts array lie (`Histogram::new_with_bounds`'s
/// arithmetic: `value_for(index)` and `highest_equivalent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    unit_magnitude: u32,
    sub_bucket_half_count_magnitude: u32,
    counts_len: u64,
}

impl Layout {
    fn new(low: u64, high: u64, digits: u32) -> Result<Self, String> {
        let bad = |why: &str| {
            Err(format!(
                "bad histogram: {why} (lowest {low}, highest {high}, {digits} digits)"
            ))
        };
        if digits > 5 {
            return bad("more than 5 significant digits");
        }
        if low == 0 || low > u64::MAX / 2 || high < 2 * low {
            return bad("impossible value range");
        }
        let largest_single_unit = 2 * 10u64.pow(digits);
        let sub_bucket_count_magnitude = 64 - (largest_single_unit - 1).leading_zeros();
        let unit_magnitude = 63 - low.leading_zeros();
        if unit_magnitude + sub_bucket_count_magnitude > 63 {
            return bad("too many digits for its lowest value");
        }
        let sub_bucket_half_count_magnitude = sub_bucket_count_magnitude.max(1) - 1;
        // buckets_to_cover(high)
        let mut smallest_untrackable = 1u64 << (sub_bucket_count_magnitude + unit_magnitude);
        let mut buckets = 1u64;
        while smallest_untrackable <= high {
            if smallest_untrackable > u64::MAX / 2 {
                buckets += 1;
                break;
            }
            smallest_untrackable <<= 1;
            buckets += 1;
        }
        Ok(Self {
            unit_magnitude,
            sub_bucket_half_count_magnitude,
            counts_len: (buckets + 1) << sub_bucket_half_count_magnitude,
        })
    }

    /// The highest value of the bucket at `index` (saturated at `u64::MAX` in the last bucket of
    /// a full-range histogram).
    fn highest_value(&self, index: u64) -> u64 {
        let half = 1u64 << self.sub_bucket_half_count_magnitude;
        let (bucket, sub) = match (index >> self.sub_bucket_half_count_magnitude).checked_sub(1) {
            Some(bucket) => (bucket, (index & (half - 1)) + half),
            None => (0, index & (half - 1)),
        };
        let shift = (bucket + u64::from(self.unit_magnitude)).min(127) as u32;
        let lowest = u128::from(sub) << shift;
        let highest = lowest + (1u128 << shift) - 1;
        u64::try_from(highest).unwrap_or(u64::MAX)
    }
}

/// LEB128-64b9B, as the V2 encoding writes counts: 7 bits a byte, the 9th byte whole.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for i in 0..9 {
        let b = *bytes.get(i)?;
        if i == 8 {
            return Some((value | (u64::from(b) << 56), 9));
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

fn be_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}

/// Standard base64 (`+/`, `=` padding optional), as every HdrHistogram log writer emits it.
fn base64_decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    let data = input
        .strip_suffix(b"==")
        .or_else(|| input.strip_suffix(b"="))
        .unwrap_or(input);
    if data.is_empty() {
        return Err("empty histogram".into());
    }
    if data.len() % 4 == 1 {
        return Err(format!(
            "bad base64: {} characters cannot encode whole bytes",
            data.len()
        ));
    }
    let bad = |i: usize| {
        format!(
            "bad base64: {:?} at character {}",
            char::from(data[i]).escape_default().to_string(),
            i + 1
        )
    };
    out.reserve(data.len() / 4 * 3 + 2);
    let mut quads = data.chunks_exact(4);
    for (q, c) in quads.by_ref().enumerate() {
        let v = [
            B64[usize::from(c[0])],
            B64[usize::from(c[1])],
            B64[usize::from(c[2])],
            B64[usize::from(c[3])],
        ];
        if (v[0] | v[1] | v[2] | v[3]) & 0xc0 != 0 {
            let i = v.iter().position(|&x| x & 0xc0 != 0).expect("one is bad");
            return Err(bad(q * 4 + i));
        }
        let n =
            u32::from(v[0]) << 18 | u32::from(v[1]) << 12 | u32::from(v[2]) << 6 | u32::from(v[3]);
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    let tail = quads.remainder();
    let start = data.len() - tail.len();
    let mut n: u32 = 0;
    for (i, &c) in tail.iter().enumerate() {
        let v = B64[usize::from(c)];
        if v & 0xc0 != 0 {
            return Err(bad(start + i));
        }
        n = n << 6 | u32::from(v);
    }
    match tail.len() {
        2 => out.push((n >> 4) as u8),
        3 => out.extend_from_slice(&[(n >> 10) as u8, (n >> 2) as u8]),
        _ => {}
    }
    Ok(())
}

/// The value of each base64 character, 0xff for the others.
const B64: [u8; 256] = {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut table = [0xffu8; 256];
    let mut i = 0;
    while i < 64 {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// A small zlib (RFC 1950) / DEFLATE (RFC 1951) decoder with an output cap, after Mark Adler's
/// `puff.c` (canonical Huffman codes, every length and distance checked), with a lookup table for
/// the codes of up to 9 bits and puff's bit-by-bit decoding for the longer ones.
mod inflate {
    const MAXBITS: usize = 15;
    const MAXLCODES: usize = 286;
    const MAXDCODES: usize = 30;
    const FIXLCODES: usize = 288;

    const LBASE: [u16; 29] = [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115,
        131, 163, 195, 227, 258,
    ];
    const LEXT: [u8; 29] = [
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
    ];
    const DBASE: [u16; 30] = [
        1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
        2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
    ];
    const DEXT: [u8; 30] = [
        0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
        13, 13,
    ];
    /// Order of the code-length code lengths in a dynamic block header.
    const ORDER: [usize; 19] = [
        16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
    ];

    /// Codes of up to this many bits are decoded with one lookup.
    const FAST_BITS: u32 = 9;

    struct Huffman {
        count: [u16; MAXBITS + 1],
        symbol: [u16; FIXLCODES],
        /// By the next `FAST_BITS` input bits: `symbol << 4 | code length`, 0 for a longer code.
        fast: [u16; 1 << FAST_BITS],
    }

    impl Huffman {
        fn new() -> Self {
            Self {
                count: [0; MAXBITS + 1],
                symbol: [0; FIXLCODES],
                fast: [0; 1 << FAST_BITS],
            }
        }

        /// Builds the code from code lengths; returns 0 for a complete code, > 0 for an
        /// incomplete one, < 0 for an over-subscribed one.
        fn construct(&mut self, lengths: &[u8]) -> i32 {
            self.count = [0; MAXBITS + 1];
            self.fast = [0; 1 << FAST_BITS];
            for &l in lengths {
                self.count[usize::from(l)] += 1;
            }
            if usize::from(self.count[0]) == lengths.len() {
                return 0;
            }
            let mut left: i32 = 1;
            for len in 1..=MAXBITS {
                left <<= 1;
                left -= i32::from(self.count[len]);
                if left < 0 {
                    return left;
                }
            }
            let mut offs = [0u16; MAXBITS + 1];
            for len in 1..MAXBITS {
                offs[len + 1] = offs[len] + self.count[len];
            }
            for (sym, &l) in lengths.iter().enumerate() {
                if l != 0 {
                    let slot = &mut offs[usize::from(l)];
                    self.symbol[usize::from(*slot)] = sym as u16;
                    *slot += 1;
                }
            }
            // canonical codes, in the order of `symbol`; stored bit-reversed, as read
            let mut code = 0u32;
            let mut index = 0;
            for len in 1..=MAXBITS as u32 {
                for _ in 0..self.count[len as usize] {
                    if len <= FAST_BITS {
                        let entry = self.symbol[index] << 4 | len as u16;
                        let mut at = (code.reverse_bits() >> (32 - len)) as usize;
                        while at < self.fast.len() {
                            self.fast[at] = entry;
                            at += 1 << len;
                        }
                    }
                    code += 1;
                    index += 1;
                }
                code <<= 1;
            }
            left
        }
    }

    struct State<'a> {
        input: &'a [u8],
        pos: usize,
        bitbuf: u64,
        bitcnt: u32,
        out: &'a mut Vec<u8>,
        limit: usize,
    }

    const TRUNCATED: &str = "compressed data truncated";

    impl State<'_> {
        fn bits(&mut self, need: u32) -> Result<u32, &'static str> {
            let mut val = self.bitbuf;
            while self.bitcnt < need {
                let b = *self.input.get(self.pos).ok_or(TRUNCATED)?;
                self.pos += 1;
                val |= u64::from(b) << self.bitcnt;
                self.bitcnt += 8;
            }
            self.bitbuf = val >> need;
            self.bitcnt -= need;
            Ok((val & ((1u64 << need) - 1)) as u32)
        }

        fn decode(&mut self, h: &Huffman) -> Result<u16, &'static str> {
            while self.bitcnt < FAST_BITS {
                let Some(&b) = self.input.get(self.pos) else {
                    break;
                };
                self.pos += 1;
                self.bitbuf |= u64::from(b) << self.bitcnt;
                self.bitcnt += 8;
            }
            let entry = h.fast[(self.bitbuf & ((1 << FAST_BITS) - 1)) as usize];
            let len = u32::from(entry & 15);
            if len != 0 && len <= self.bitcnt {
                self.bitbuf >>= len;
                self.bitcnt -= len;
                return Ok(entry >> 4);
            }
            let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
            for len in 1..=MAXBITS {
                code |= self.bits(1)? as i32;
                let count = i32::from(h.count[len]);
                if code - count < first {
                    return Ok(h.symbol[(index + (code - first)) as usize]);
                }
                index += count;
                first += count;
                first <<= 1;
                code <<= 1;
            }
            Err("bad Huffman code")
        }

        fn room(&self, more: usize) -> Result<(), &'static str> {
            if self.out.len() + more > self.limit {
                Err("decompressed histogram too large")
            } else {
                Ok(())
            }
        }

        /// Drops the bits left of the current byte; whole bytes read ahead go back to the input.
        fn align(&mut self) {
            self.pos -= (self.bitcnt / 8) as usize;
            self.bitbuf = 0;
            self.bitcnt = 0;
        }

        fn stored(&mut self) -> Result<(), &'static str> {
            self.align();
            let header = self.input.get(self.pos..self.pos + 4).ok_or(TRUNCATED)?;
            let len = u16::from_le_bytes([header[0], header[1]]);
            let nlen = u16::from_le_bytes([header[2], header[3]]);
            if len != !nlen {
                return Err("stored block length does not match its complement");
            }
            self.pos += 4;
            let len = usize::from(len);
            let data = self.input.get(self.pos..self.pos + len).ok_or(TRUNCATED)?;
            self.room(len)?;
            self.out.extend_from_slice(data);
            self.pos += len;
            Ok(())
        }

        fn codes(&mut self, lencode: &Huffman, distcode: &Huffman) -> Result<(), &'static str> {
            loop {
                let sym = usize::from(self.decode(lencode)?);
                if sym < 256 {
                    self.room(1)?;
                    self.out.push(sym as u8);
                } else if sym == 256 {
                    return Ok(());
                } else {
                    let sym = sym - 257;
                    if sym >= LBASE.len() {
                        return Err("bad length symbol");
                    }
                    let len = usize::from(LBASE[sym]) + self.bits(u32::from(LEXT[sym]))? as usize;
                    let dsym = usize::from(self.decode(distcode)?);
                    if dsym >= DBASE.len() {
                        return Err("bad distance symbol");
                    }
                    let dist =
                        usize::from(DBASE[dsym]) + self.bits(u32::from(DEXT[dsym]))? as usize;
                    if dist > self.out.len() {
                        return Err("distance too far back");
                    }
                    self.room(len)?;
                    let start = self.out.len() - dist;
                    for k in 0..len {
                        let b = self.out[start + k];
                        self.out.push(b);
                    }
                }
            }
        }

        fn fixed(&mut self) -> Result<(), &'static str> {
            let mut lengths = [0u8; FIXLCODES];
            lengths[..144].fill(8);
            lengths[144..256].fill(9);
            lengths[256..280].fill(7);
            lengths[280..].fill(8);
            let mut lencode = Huffman::new();
            lencode.construct(&lengths);
            let mut distcode = Huffman::new();
            distcode.construct(&[5u8; MAXDCODES]);
            self.codes(&lencode, &distcode)
        }

        fn dynamic(&mut self) -> Result<(), &'static str> {
            let nlen = self.bits(5)? as usize + 257;
            let ndist = self.bits(5)? as usize + 1;
            let ncode = self.bits(4)? as usize + 4;
            if nlen > MAXLCODES || ndist > MAXDCODES {
                return Err("bad dynamic block code counts");
            }
            let mut lengths = [0u8; MAXLCODES + MAXDCODES];
            for &o in ORDER.iter().take(ncode) {
                lengths[o] = self.bits(3)? as u8;
            }
            let mut lencode = Huffman::new();
            if lencode.construct(&lengths[..19]) != 0 {
                return Err("incomplete code-length code");
            }
            let mut index = 0;
            while index < nlen + ndist {
                let sym = self.decode(&lencode)?;
                if sym < 16 {
                    lengths[index] = sym as u8;
                    index += 1;
                    continue;
                }
                let (len, rep) = match sym {
                    16 => {
                        if index == 0 {
                            return Err("repeat with no previous length");
                        }
                        (lengths[index - 1], 3 + self.bits(2)? as usize)
                    }
                    17 => (0, 3 + self.bits(3)? as usize),
                    _ => (0, 11 + self.bits(7)? as usize),
                };
                if index + rep > nlen + ndist {
                    return Err("too many code lengths");
                }
                lengths[index..index + rep].fill(len);
                index += rep;
            }
            if lengths[256] == 0 {
                return Err("no end-of-block code");
            }
            let err = lencode.construct(&lengths[..nlen]);
            if err < 0 || (err > 0 && nlen != usize::from(lencode.count[0] + lencode.count[1])) {
                return Err("bad literal/length code");
            }
            let mut distcode = Huffman::new();
            let err = distcode.construct(&lengths[nlen..nlen + ndist]);
            if err < 0 || (err > 0 && ndist != usize::from(distcode.count[0] + distcode.count[1])) {
                return Err("bad distance code");
            }
            self.codes(&lencode, &distcode)
        }
    }

    /// Inflates the zlib stream `input` into `out` (cleared first), at most `limit` bytes, and
    /// verifies its Adler-32 checksum.
    pub(super) fn zlib(input: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), &'static str> {
        out.clear();
        let (cmf, flg) = match input {
            [cmf, flg, ..] => (*cmf, *flg),
            _ => return Err(TRUNCATED),
        };
        if cmf & 0x0f != 8 || cmf >> 4 > 7 || (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
            return Err("not a zlib stream");
        }
        if flg & 0x20 != 0 {
            return Err("zlib preset dictionaries are not supported");
        }
        let mut s = State {
            input,
            pos: 2,
            bitbuf: 0,
            bitcnt: 0,
            out,
            limit,
        };
        loop {
            let last = s.bits(1)?;
            match s.bits(2)? {
                0 => s.stored()?,
                1 => s.fixed()?,
                2 => s.dynamic()?,
                _ => return Err("bad block type"),
            }
            if last == 1 {
                break;
            }
        }
        s.align();
        let pos = s.pos;
        let sum = input.get(pos..pos + 4).ok_or("zlib checksum missing")?;
        if u32::from_be_bytes([sum[0], sum[1], sum[2], sum[3]]) != adler32(out) {
            return Err("zlib checksum mismatch");
        }
        Ok(())
    }

    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for chunk in data.chunks(5552) {
            for &x in chunk {
                a += u32::from(x);
                b += a;
            }
            a %= 65521;
            b %= 65521;
        }
        (b << 16) | a
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn inflate(z: &[u8]) -> Result<Vec<u8>, &'static str> {
            let mut out = Vec::new();
            zlib(z, 1 << 20, &mut out).map(|()| out)
        }

        fn hex(s: &str) -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        }

        /// Vectors from CPython's zlib 1.2.13: level 0 (stored block) and Z_FIXED (fixed
        /// Huffman) of `TEXT`, and level 9 of `SKEWED` (a dynamic Huffman block).
        const TEXT: &[u8] = b"hello hello hello, HdrHistogram! 0123456789 hello hello";
        const STORED: &str = "7801013700c8ff68656c6c6f2068656c6c6f2068656c6c6f2c20486472486973746f6772616d2120303132333435363738392068656c6c6f2068656c6c6f11ca124b";
        const FIXED: &str = "7801cb48cdc9c957c840903a0a1e29451e99c525f9e94589b98a0a068646c626a666e61696c8aa0011ca124b";
        const SKEWED: &[u8] = b"aab aa baa  caaaecaaaabab cccdabaaa abcbcecbcabababaabbaa  abacaabccaaacbbeaabaaaaacbbaabbbaccdecaebcabcbebbacbacaabdbbb aaabbdbbababbbbcaaabeababacaabbadaabadbaaaeababbabacbebdbcbccacaaa ecaadebbaaba";
        const DYNAMIC: &str = "78da2d8e810d044108025bd9d600edbf8567bcdfc40d411c95fca4e7d68ba4e593eb26998a36e438dbc2c7f2c5ab1a769888bdbaf46922ed668a5be6e2c5f826a6cdc71614c43e2045f80fb506dc403cf71a850cb7848c1eb7cede36fd008b1b49f9";

        #[test]
        fn block_types() {
            assert_eq!(hex(STORED)[2] >> 1 & 3, 0);
            assert_eq!(hex(FIXED)[2] >> 1 & 3, 1);
            assert_eq!(hex(DYNAMIC)[2] >> 1 & 3, 2);
            assert_eq!(inflate(&hex(STORED)).as_deref(), Ok(TEXT));
            assert_eq!(inflate(&hex(FIXED)).as_deref(), Ok(TEXT));
            assert_eq!(inflate(&hex(DYNAMIC)).as_deref(), Ok(SKEWED));
        }

        #[test]
        fn rejects_corruption_and_caps_output() {
            let z = hex(DYNAMIC);
            let mut bad = z.clone();
            let n = bad.len();
            bad[n - 1] ^= 1;
            assert_eq!(inflate(&bad), Err("zlib checksum mismatch"));
            assert_eq!(inflate(&z[..z.len() - 4]), Err("zlib checksum missing"));
            assert_eq!(inflate(&z[..z.len() / 2]), Err(TRUNCATED));
            assert_eq!(inflate(&z[..1]), Err(TRUNCATED));
            assert_eq!(inflate(b"\x78\x00"), Err("not a zlib stream"));
            let mut out = Vec::new();
            assert_eq!(
                zlib(&z, 10, &mut out),
                Err("decompressed histogram too large")
            );
            let mut stored = hex(STORED);
            stored[5] ^= 0xff;
            assert_eq!(
                inflate(&stored),
                Err("stored block length does not match its complement")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use hdrhistogram::serialization::{
        Deserializer, Serializer, V2DeflateSerializer, V2Serializer,
    };
    use proptest::prelude::*;

    use super::super::read_all;
    use super::*;

    const TAGGED: &[u8] = include_bytes!("../../../../tests/fixtures/hdrhistogram/tagged.hlog");
    const TAGGED_EXPECTED: &str =
        include_str!("../../../../tests/fixtures/hdrhistogram/tagged.expected.txt");
    const UNTAGGED: &[u8] = include_bytes!("../../../../tests/fixtures/hdrhistogram/untagged.hlog");
    const UNTAGGED_EXPECTED: &str =
        include_str!("../../../../tests/fixtures/hdrhistogram/untagged.expected.txt");

    fn opts(unit: Option<TimeUnit>, label: Option<&str>) -> Options {
        Options {
            unit,
            label: label.map(str::to_owned),
        }
    }

    fn read(
        input: &[u8],
        unit: TimeUnit,
        label: Option<&str>,
        chunk: usize,
    ) -> Result<Extracted, IngestError> {
        read_all(parser(&opts(Some(unit), label))?, input, chunk)
    }

    /// Reads `input` whole, in 7-byte and in 1-byte chunks; all three must agree.
    fn read_chunked(
        input: &[u8],
        unit: TimeUnit,
        label: Option<&str>,
    ) -> Result<Extracted, IngestError> {
        let whole = read(input, unit, label, input.len().max(1));
        for chunk in [7, 1] {
            assert_eq!(
                read(input, unit, label, chunk),
                whole,
                "chunks of {chunk} bytes"
            );
        }
        whole
    }

    /// A row of an `expected.txt` written by generate.py: the label, the samples, the library's
    /// `get_value_at_percentile` for 50 / 99 / 99.9 and the same histogram's values at the nearest
    /// rank.
    struct Row {
        tag: String,
        samples: u64,
        lib: [u64; 3],
        nearest_rank: [u64; 3],
    }

    fn expected(text: &str) -> Vec<Row> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().filter(|f| *f != "|").collect();
                let n = |i: usize| f[i].parse::<u64>().unwrap();
                Row {
                    tag: f[0].to_owned(),
                    samples: n(1),
                    lib: [n(2), n(3), n(4)],
                    nearest_rank: [n(5), n(6), n(7)],
                }
            })
            .collect()
    }

    /// `got` µs reproduces `lib` (in `unit`) within HDR precision (3 significant digits: one
    /// part in a thousand) plus the rounding to whole µs.
    fn assert_close(got: u64, lib: u64, unit: TimeUnit, what: &str) {
        let lib_us = unit.to_us(lib as f64);
        let err = (got as f64 - lib_us).abs();
        assert!(
            err <= lib_us * 0.001 + 0.5,
            "{what}: got {got} µs, library {lib_us} µs"
        );
    }

    /// The percentiles are the library's, taken at the nearest rank `ceil(q·N)` as budgetd's
    /// `Recorder` does. hdrh's `get_value_at_percentile` takes rank `int(q·N + 0.5)`: where the
    /// two ranks agree, the result is also exactly hdrh's own number.
    fn check_fixture(got: &Extracted, rows: &[Row], unit: TimeUnit, untagged: &str) {
        assert_eq!(got.format, Format::Hdrhistogram);
        assert_eq!(got.tool.as_deref(), Some("HdrHistogram"));
        assert_eq!(got.labels.len(), rows.len());
        let mut same_rank = 0;
        for (stats, row) in got.labels.iter().zip(rows) {
            let label = if row.tag == "-" { untagged } else { &row.tag };
            assert_eq!(stats.label, label);
            assert_eq!(stats.samples, row.samples, "{label}");
            assert_eq!(stats.failures, 0);
            let ours = [stats.p50_us.unwrap(), stats.p99_us, stats.p999_us];
            for (i, q) in [0.5, 0.99, 0.999].into_iter().enumerate() {
                let what = format!("{label} q{q}");
                assert_close(ours[i], row.nearest_rank[i], unit, &what);
                let n = row.samples as f64;
                if (q * n).ceil() == (q * n + 0.5).floor() {
                    assert_close(ours[i], row.lib[i], unit, &what);
                    same_rank += 1;
                }
            }
        }
        assert!(
            same_rank >= rows.len() * 2,
            "most percentiles compare to hdrh's own"
        );
    }

    #[test]
    fn tagged_fixture_reproduces_the_python_library() {
        let got = read_chunked(TAGGED, TimeUnit::Ns, Some("ignored-for-tagged")).unwrap();
        let rows = expected(TAGGED_EXPECTED);
        assert_eq!(
            rows.iter().map(|r| r.tag.as_str()).collect::<Vec<_>>(),
            ["inventory", "payment", "user"]
        );
        check_fixture(&got, &rows, TimeUnit::Ns, "");
        // merged in ns, converted at the end: exactly the library's value rounded to µs
        let payment = &got.labels[1];
        assert_eq!(payment.p50_us, Some(25_854));
        assert_eq!(payment.p999_us, 742_916);
    }

    #[test]
    fn untagged_fixture_takes_the_label_option() {
        let rows = expected(UNTAGGED_EXPECTED);
        for (label, want) in [
            (None, "default"),
            (Some(" "), "default"),
            (Some("checkout"), "checkout"),
        ] {
            let got = read_chunked(UNTAGGED, TimeUnit::Us, label).unwrap();
            check_fixture(&got, &rows, TimeUnit::Us, want);
        }
    }

    #[test]
    fn the_unit_scales_the_result() {
        let ns = read(UNTAGGED, TimeUnit::Ns, None, 4096).unwrap().labels[0].clone();
        let us = read(UNTAGGED, TimeUnit::Us, None, 4096).unwrap().labels[0].clone();
        let ms = read(UNTAGGED, TimeUnit::Ms, None, 4096).unwrap().labels[0].clone();
        let s = read(UNTAGGED, TimeUnit::S, None, 4096).unwrap().labels[0].clone();
        assert_eq!(us.p50_us, Some(12_151));
        assert_eq!((ns.p50_us, ns.p99_us, ns.p999_us), (Some(12), 48, 68));
        assert_eq!((ms.p50_us, ms.p99_us), (Some(12_151_000), 48_127_000));
        // seconds: 12151 s is beyond the one-hour clamp
        assert_eq!((s.p50_us, s.p999_us), (Some(MAX_US), MAX_US));
        assert_eq!(ns.samples, 2800);
    }

    fn write_log<S: Serializer>(
        ser: &mut S,
        intervals: &[(Option<&str>, &Histogram<u64>)],
    ) -> Vec<u8> {
        let mut buf = Vec::new();
        {
            let mut w = IntervalLogWriterBuilder::new()
                .add_comment("[Logged with the hdrhistogram crate]")
                .with_start_time(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
                .with_base_time(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
                .with_max_value_divisor(1_000_000.0)
                .begin_log_with(&mut buf, ser)
                .unwrap();
            for (i, (tag, h)) in intervals.iter().enumerate() {
                let tag = tag.map(|t| Tag::new(t).unwrap());
                w.write_histogram(
                    *h,
                    Duration::from_secs(i as u64),
                    Duration::from_secs(1),
                    tag,
                )
                .unwrap();
            }
        }
        buf
    }

    fn hist(
        low: u64,
        high: u64,
        sigfig: u8,
        values: impl IntoIterator<Item = u64>,
    ) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(low, high, sigfig).unwrap();
        for v in values {
            h.record(v).unwrap();
        }
        h
    }

    /// Logs written by the Rust crate, compressed (V2 + zlib) and not (plain V2), with tags and
    /// without: every tag's percentiles are exactly those of the crate's own merged histogram.
    #[test]
    fn logs_of_the_rust_crate_round_trip() {
        let a1 = hist(1, 3_600_000_000_000, 3, (1..=5000).map(|i| i * 1_733));
        let a2 = hist(
            1,
            3_600_000_000_000,
            3,
            (1..=3000).map(|i| 2_000_000 + i * 977),
        );
        let b = hist(1, 3_600_000_000_000, 3, (1..=999).map(|i| i * i * 31));
        let untagged = hist(1, 3_600_000_000_000, 3, [5_000, 6_000, 7_000]);
        let intervals = [
            (Some("a"), &a1),
            (Some("b"), &b),
            (None, &untagged),
            (Some("a"), &a2),
        ];
        let mut merged_a = a1.clone();
        merged_a.add(&a2).unwrap();
        let lib_us =
            |h: &Histogram<u64>, q: f64| (h.value_at_quantile(q) as f64 / 1000.0).round() as u64;
        for log in [
            write_log(&mut V2DeflateSerializer::new(), &intervals),
            write_log(&mut V2Serializer::new(), &intervals),
        ] {
            assert!(sniff(&log));
            let got = read_chunked(&log, TimeUnit::Ns, Some("svc")).unwrap();
            let labels: Vec<&str> = got.labels.iter().map(|l| l.label.as_str()).collect();
            assert_eq!(labels, ["a", "b", "svc"]);
            for (stats, h) in got.labels.iter().zip([&merged_a, &b, &untagged]) {
                assert_eq!(stats.samples, h.len());
                assert_eq!(stats.p50_us, Some(lib_us(h, 0.5)));
                assert_eq!(stats.p99_us, lib_us(h, 0.99));
                assert_eq!(stats.p999_us, lib_us(h, 0.999));
            }
        }
    }

    /// Histograms of other layouts (coarser precision, a higher lowest value) merge at their
    /// highest equivalent values; empty intervals count for nothing.
    #[test]
    fn other_layouts_and_empty_intervals() {
        let coarse = hist(1, 1 << 40, 2, (1..=1000).map(|i| i * 1000));
        let high_low = hist(1024, 1 << 40, 3, (1..=1000).map(|i| i * 1000));
        let empty = Histogram::<u64>::new_with_bounds(1, 1 << 40, 3).unwrap();
        let log = write_log(
            &mut V2DeflateSerializer::new(),
            &[
                (Some("c"), &coarse),
                (Some("h"), &high_low),
                (Some("c"), &empty),
                (Some("e"), &empty),
            ],
        );
        let got = read(&log, TimeUnit::Ns, None, 100).unwrap();
        assert_eq!(got.labels.len(), 2, "a tag with no samples is left out");
        for (stats, src) in got.labels.iter().zip([&coarse, &high_low]) {
            assert_eq!(stats.samples, 1000);
            let lib = src.value_at_quantile(0.99) as f64 / 1000.0;
            assert!(
                (stats.p99_us as f64 - lib).abs() <= lib * 0.01 + 1.0,
                "{} vs {lib}",
                stats.p99_us
            );
        }
        let only_empty = write_log(&mut V2Serializer::new(), &[(None, &empty)]);
        let err = read(&only_empty, TimeUnit::Ns, None, 100).unwrap_err();
        assert!(err.message.contains("hold no samples"), "{err}");
    }

    #[test]
    fn values_are_clamped_to_one_hour() {
        let h = hist(1, u64::MAX / 4, 3, [10, 7_200_000_000_000]);
        let got = read(
            &write_log(&mut V2Serializer::new(), &[(None, &h)]),
            TimeUnit::Ns,
            None,
            64,
        )
        .unwrap();
        assert_eq!(
            got.labels[0].p50_us,
            Some(1),
            "10 ns rounds to 0 µs, kept at 1 µs like the Recorder"
        );
        assert_eq!(got.labels[0].p999_us, MAX_US);
    }

    const LEGEND_LINE: &str =
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"";

    /// The base64 of the first interval line of the tagged fixture.
    fn first_histogram() -> String {
        let text = std::str::from_utf8(TAGGED).unwrap();
        let line = text.lines().find(|l| l.starts_with("Tag=")).unwrap();
        line.rsplit(',').next().unwrap().to_owned()
    }

    fn b64(bytes: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in bytes.chunks(3) {
            let n = (u32::from(c[0]) << 16)
                | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
                | u32::from(*c.get(2).unwrap_or(&0));
            for i in 0..4 {
                if i <= c.len() {
                    out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn base64_round_trips() {
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let mut out = Vec::new();
            let res = base64_decode(b64(&bytes).as_bytes(), &mut out);
            if len == 0 {
                assert!(res.is_err());
            } else {
                assert_eq!((res, out), (Ok(()), bytes));
            }
        }
    }

    /// A plain (uncompressed) V2 histogram: header, then `payload`.
    fn v2(ratio: f64, payload_len: Option<u32>, payload: &[u8]) -> String {
        let mut h = Vec::new();
        h.extend_from_slice(&V2_COOKIE.to_be_bytes());
        h.extend_from_slice(&payload_len.unwrap_or(payload.len() as u32).to_be_bytes());
        h.extend_from_slice(&0u32.to_be_bytes());
        h.extend_from_slice(&3u32.to_be_bytes());
        h.extend_from_slice(&1u64.to_be_bytes());
        h.extend_from_slice(&1_000_000u64.to_be_bytes());
        h.extend_from_slice(&ratio.to_bits().to_be_bytes());
        h.extend_from_slice(payload);
        b64(&h)
    }

    /// Name, input, and the error's line, field and part of its message.
    type Case<'a> = (&'a str, String, Option<u64>, Option<&'a str>, &'a str);

    /// Malformed, truncated, empty and foreign inputs: an error naming the line and the field.
    #[test]
    fn bad_inputs_are_reported_with_line_and_field() {
        let good = first_histogram();
        let mut raw = Vec::new();
        base64_decode(good.as_bytes(), &mut raw).unwrap();
        let mut v1 = raw.clone();
        v1[..4].copy_from_slice(&0x1c84_9302u32.to_be_bytes());
        let mut short_zlib = raw.clone();
        short_zlib.truncate(raw.len() - 10);
        let mut bad_checksum = raw.clone();
        let n = bad_checksum.len();
        bad_checksum[n - 1] ^= 0x55;
        // three counts of 2^63 - 1: the total overflows 64 bits
        let huge = [[0xfeu8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]; 3].concat();
        let l = LEGEND_LINE;
        let h = HISTOGRAM_FIELD;
        let cases: Vec<Case> = vec![
            ("empty", String::new(), None, None, "empty input"),
            ("blank lines", "\n\n  \n".into(), None, None, "no interval histogram lines"),
            ("header only", format!("#[StartTime: 1.000 (seconds since epoch)]\n{l}\n"), None, None, "no interval histogram lines"),
            ("bad base64", format!("{l}\n0.0,1.0,2.0,HIST*AAA\n"), Some(2), Some(h), "bad base64: \"*\" at character 5"),
            ("base64 length", format!("{l}\n0.0,1.0,2.0,HISTF\n"), Some(2), Some(h), "bad base64"),
            ("empty histogram", "0.0,1.0,2.0,\n".into(), Some(1), Some(h), "empty histogram"),
            ("not a histogram", "0.0,1.0,2.0,aGVsbG8gd29ybGQ=\n".into(), Some(1), Some(h), "not an HdrHistogram encoding"),
            ("too short", "0.0,1.0,2.0,AAA=\n".into(), Some(1), Some(h), "too short"),
            ("V1", format!("#c\n0.0,1.0,2.0,{}\n", b64(&v1)), Some(2), Some(h), "V1 encoding"),
            ("cut zlib", format!("0.0,1.0,2.0,{}\n", b64(&short_zlib)), Some(1), Some(h), "compressed histogram truncated"),
            ("cut base64", format!("0.0,1.0,2.0,{}\n", &good[..good.len() / 2]), Some(1), Some(h), "truncated"),
            ("checksum", format!("0.0,1.0,2.0,{}\n", b64(&bad_checksum)), Some(1), Some(h), "checksum"),
            ("double histogram", format!("0.0,1.0,2.0,{}\n", v2(0.001, None, &[2])), Some(1), Some(h), "DoubleHistogram"),
            ("payload announced", format!("0.0,1.0,2.0,{}\n", v2(1.0, Some(1 << 31), &[2])), Some(1), Some(h), "payload truncated"),
            ("count overflow", format!("0.0,1.0,2.0,{}\n", v2(1.0, None, &huge)), Some(1), Some(h), "overflow"),
            ("cut count", format!("0.0,1.0,2.0,{}\n", v2(1.0, None, &[0x80])), Some(1), Some(h), "truncated inside a number"),
            ("beyond the counts", format!("0.0,1.0,2.0,{}\n", v2(1.0, None, &[0xfd, 0xff, 0xff, 0x01, 2])), Some(1), Some(h), "bad histogram"),
            ("DoubleHistogram cookie", "0.0,1.0,2.0,DHISTgAAAAA=\n".into(), Some(1), Some(h), "a DoubleHistogram"),
            ("3 fields", format!("{l}\nTag=a,0.0,1.0,{good}\n"), Some(2), None, "found 3"),
            ("5 fields", format!("0.0,1.0,2.0,3.0,{good}\n"), Some(1), None, "found 5"),
            ("timestamp", format!("x0.0,1.0,2.0,{good}\n"), Some(1), Some("StartTimestamp"), "not a number"),
            ("length", format!("0.0,,2.0,{good}\n"), Some(1), Some("Interval_Length"), "not a number"),
            ("max", format!("0.0,1.0,NaN,{good}\n"), Some(1), Some("Interval_Max"), "not a number"),
            ("empty tag", format!("Tag=,0.0,1.0,2.0,{good}\n"), Some(1), Some("Tag"), "empty tag"),
            ("tag alone", "Tag=abc\n".into(), Some(1), Some("Tag"), "comma"),
            ("JSON", "{\"metrics\": {\"http_req_duration\": {}}, \"a\": 1}\n".into(), Some(1), None, "found 2"),
            ("JMeter CSV", "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success\n".into(), Some(1), None, "found 8"),
            ("wrk2", "Running 30s test @ http://127.0.0.1/\n".into(), Some(1), None, "found 1"),
        ];
        for (name, input, line, field, message) in cases {
            for chunk in [1, 7, input.len().max(1)] {
                let err = read(input.as_bytes(), TimeUnit::Ns, None, chunk).expect_err(name);
                assert_eq!(err.line, line, "{name}: {err}");
                assert_eq!(err.field.as_deref(), field, "{name}: {err}");
                assert!(err.message.contains(message), "{name}: {err}");
            }
        }
    }

    #[test]
    fn the_unit_is_required() {
        let err = parser(&opts(None, None)).err().unwrap();
        assert_eq!(err.field.as_deref(), Some("unit"));
        assert!(err.message.contains("?unit=ns|us|ms|s"), "{err}");
    }

    #[test]
    fn limits_lines_and_tags() {
        let mut p = parser(&opts(Some(TimeUnit::Us), None)).unwrap();
        let err = p.push(&vec![b'A'; MAX_LINE + 1]).unwrap_err();
        assert_eq!(err.line, Some(1));
        let good = first_histogram();
        let mut log = String::new();
        for i in 0..=MAX_TAGS {
            log.push_str(&format!("Tag=t{i},0.0,1.0,2.0,{good}\n"));
        }
        let err = read(log.as_bytes(), TimeUnit::Us, None, 4096).unwrap_err();
        assert_eq!(
            (err.line, err.field.as_deref()),
            (Some(MAX_TAGS as u64 + 1), Some("Tag"))
        );
    }

    /// The benchmark's generator (see `hlog_stream`): a long stream keeps one histogram per tag
    /// and scratch buffers no bigger than one histogram.
    #[test]
    fn a_long_stream_stays_flat() {
        let mut p = HlogParser {
            lines: LineBuffer::new(MAX_LINE),
            bytes: 0,
            log: Log {
                unit: TimeUnit::Ns,
                cap: one_hour_in(TimeUnit::Ns),
                untagged: "default".into(),
                tags: BTreeMap::new(),
                intervals: 0,
                decoder: Decoder::default(),
            },
        };
        let mut chunks = 0;
        hlog_stream(600, 200, |chunk| {
            chunks += 1;
            p.push(chunk).unwrap();
        });
        assert!(chunks > 1);
        assert!(p.log.decoder.raw.capacity() < 64 * 1024);
        assert!(p.log.decoder.inflated.capacity() < 256 * 1024);
        assert_eq!(p.log.tags.len(), 3);
        let got = Box::new(p).finish().unwrap();
        assert_eq!(got.labels.iter().map(|l| l.samples).sum::<u64>(), 600 * 200);
        for l in &got.labels {
            assert!(l.p50_us.unwrap() > 20_000 && l.p999_us < 51_000, "{l:?}");
        }
    }

    /// The generator given to the ingest benchmark (kept here so that it is known to work): an
    /// hlog of `intervals` lines, tags inventory/payment/user in turn, `values_per_interval`
    /// values of 20..50 ms in ns each, handed to `sink` in chunks of about 64 KiB.
    fn hlog_stream(intervals: usize, values_per_interval: usize, mut sink: impl FnMut(&[u8])) {
        let mut ser = V2DeflateSerializer::new();
        let mut buf = Vec::with_capacity(80 * 1024);
        buf.extend_from_slice(b"#[Histogram log format version 1.3]\n#[StartTime: 1700000000.000 (seconds since epoch)]\n");
        buf.extend_from_slice(b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n");
        let tags = ["inventory", "payment", "user"];
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..intervals {
            h.reset();
            for _ in 0..values_per_interval {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                h.record(20_000_000 + x % 30_000_000).unwrap();
            }
            let mut w = IntervalLogWriterBuilder::new()
                .begin_log_with(&mut buf, &mut ser)
                .unwrap();
            let start = Duration::from_secs((i / 3) as u64);
            w.write_histogram(&h, start, Duration::from_secs(1), Tag::new(tags[i % 3]))
                .unwrap();
            if buf.len() >= 64 * 1024 {
                sink(&buf);
                buf.clear();
            }
        }
        if !buf.is_empty() {
            sink(&buf);
        }
    }

    #[test]
    fn sniffs_only_hlogs() {
        let rust_log = write_log(&mut V2Serializer::new(), &[(None, &hist(1, 1000, 3, [5]))]);
        let yes: Vec<(&str, Vec<u8>)> = vec![
            ("python tagged", TAGGED[..300].to_vec()),
            ("python untagged", UNTAGGED.to_vec()),
            ("rust crate", rust_log),
            (
                "jHiccup",
                b"#[Logged with jHiccup version 2.0.10]\n#[Histogram log format version 1.2]\n"
                    .to_vec(),
            ),
            ("legend first", format!("{LEGEND_LINE}\n").into_bytes()),
            (
                "interval first",
                b"\xef\xbb\xbfTag=a,0.127,1.007,2.769,HISTFAAAAEV42pNpmSz\n".to_vec(),
            ),
            ("cut header", b"#[StartTime: 17".to_vec()),
        ];
        for (name, head) in yes {
            assert!(sniff(&head), "{name}");
        }
        let no: Vec<(&str, &[u8])> = vec![
            ("empty", b""),
            ("comment only", b"# just a comment\n"),
            ("JSON", b"{\"root_group\": {}}"),
            (
                "JMeter",
                b"timeStamp,elapsed,label,responseCode\n1700000000000,12,GET /,200\n",
            ),
            (
                "JMeter no header",
                b"1700000000000,12,GET /,200,OK,t 1-1,text,true,,120,0,1,1,http://x/,11,0,3\n",
            ),
            (
                "locust",
                b"Type,Name,Request Count,Failure Count,Median Response Time\n",
            ),
            (
                "wrk2",
                include_bytes!("../../../../tests/fixtures/wrk2/checkout.txt"),
            ),
            ("numbers", b"0.1,0.2,0.3,0.4\n"),
        ];
        for (name, head) in no {
            assert!(!sniff(head), "{name}");
        }
        for fixture in [TAGGED, UNTAGGED] {
            assert_eq!(super::super::detect(fixture), Some(Format::Hdrhistogram));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

        /// Mutated fixtures (bytes overwritten, cut, spliced) give a result or an error, never a
        /// panic.
        #[test]
        fn mutated_fixtures_never_panic(
            which in 0usize..2,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
            cut in any::<usize>(),
            splice in any::<Option<(usize, usize)>>(),
            chunk in 1usize..600,
        ) {
            let mut input = [TAGGED, UNTAGGED][which].to_vec();
            for (at, byte) in flips {
                let n = input.len();
                input[at % n] = byte;
            }
            if let Some((from, len)) = splice {
                let n = input.len();
                let from = from % n;
                let piece = input[from..(from + len % 200).min(n)].to_vec();
                input.splice(from..from, piece);
            }
            if cut % 3 == 0 {
                input.truncate(cut % (input.len() + 1));
            }
            let _ = read(&input, TimeUnit::Ns, None, chunk);
        }

        /// The V2 decoding agrees with the crate's own `Deserializer` on every layout: the same
        /// counts array length, and every non-zero bucket at the same highest value.
        #[test]
        fn v2_decoding_agrees_with_the_crate(
            low_bits in 0u32..30,
            span_bits in 1u32..34,
            digits in 0u8..=5,
            values in proptest::collection::vec((any::<u64>(), 1u64..1000), 0..60),
            compressed in any::<bool>(),
        ) {
            let low = 1u64 << low_bits;
            let high = low.saturating_mul(1u64 << span_bits).max(2 * low);
            let Ok(mut h) = Histogram::<u64>::new_with_bounds(low, high, digits) else {
                prop_assert!(Layout::new(low, high, u32::from(digits)).is_err());
                return Ok(());
            };
            for (v, n) in values {
                h.record_n(v % (high + 1), n).unwrap();
            }
            let mut bytes = Vec::new();
            if compressed {
                V2DeflateSerializer::new().serialize(&h, &mut bytes).unwrap();
            } else {
                V2Serializer::new().serialize(&h, &mut bytes).unwrap();
            }
            let layout = Layout::new(low, high, u32::from(digits)).unwrap();
            prop_assert_eq!(layout.counts_len, h.distinct_values() as u64);
            let mut decoder = Decoder::default();
            let ours = decoder.decode(b64(&bytes).as_bytes()).unwrap().to_vec();
            let theirs: Histogram<u64> = Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
            let theirs: Vec<(u64, u64)> =
                theirs.iter_recorded().map(|v| (v.value_iterated_to(), v.count_at_value())).collect();
            prop_assert_eq!(ours, theirs);
        }

        /// Mutations inside one decoded histogram (compressed, and decompressed then sent as a
        /// plain V2 histogram) reach the zlib and V2 decoders.
        #[test]
        fn mutated_histograms_never_panic(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cut in proptest::option::of(any::<usize>()),
        ) {
            let mut raw = Vec::new();
            base64_decode(first_histogram().as_bytes(), &mut raw).unwrap();
            let mut inflated = Vec::new();
            inflate::zlib(&raw[8..], MAX_DECODED, &mut inflated).unwrap();
            for bytes in [&raw, &inflated] {
                let mut bytes = bytes.clone();
                for (at, b) in &flips {
                    let n = bytes.len();
                    bytes[at % n] = *b;
                }
                if let Some(cut) = cut {
                    bytes.truncate(cut % (bytes.len() + 1));
                }
                let line = format!("0.0,1.0,2.0,{}\n", b64(&bytes));
                let _ = read(line.as_bytes(), TimeUnit::Us, None, 64);
            }
        }
    }
}
