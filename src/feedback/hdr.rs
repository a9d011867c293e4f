//! Agents' latency histograms: HdrHistogram V2 compressed, decoded within fixed bounds.
//!
//! A hostile report cannot make the server inflate more than its histogram's range can hold
//! (221,184 bytes at 3 significant figures; [`MAX_INFLATED`] in any case): the compressed bytes
//! are capped, the header is inflated first and its significant figures, highest trackable
//! value and length of counts checked, and only then are the counts inflated, with an output
//! cap. The counts are read straight from the payload, never by a deserializer sizing them.

use std::io::Read;

use budget_core::feedback::Latency;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

/// Largest `latency_hdr` accepted in one window.
pub const MAX_HDR_BYTES: usize = 64 * 1024;
/// Largest inflated histogram (header and counts).
pub const MAX_INFLATED: usize = 1024 * 1024;
/// Most significant figures a histogram may have: 3, as every agent and load-tool reader of
/// budgetd records; it bounds a decoded histogram to about 23,500 buckets (values up to two
/// hours), whatever the sender claims.
pub const MAX_FIGURES: u32 = 3;
/// Most samples one histogram may hold (2^40, a trillion): no load test or window has more, and
/// rollups adding up many windows stay far from `i64::MAX`, the largest count V2 can write.
pub const MAX_SAMPLES: u64 = 1 << 40;
/// Latencies are microseconds; nothing above an hour is tracked.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;

/// Cookie bases; bits 4-7 carry the word size and are ignored, as every implementation does.
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304;
const V2_COOKIE: u32 = 0x1c84_9303;
const WORD_SIZE_BITS: u32 = 0xf0;
const V2_HEADER: usize = 40;

/// An empty histogram in the rollups' layout: 3 significant digits, growing as values come
/// (values are clamped to [`MAX_LATENCY_US`], so it never grows past an hour's buckets).
pub fn empty() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits are valid")
}

/// A decoded histogram: its non-zero buckets as `(lowest value of the bucket, count)`, never
/// a counts array of the sender's size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sparse {
    pub buckets: Vec<(u64, u64)>,
}

impl Sparse {
    pub fn len(&self) -> u64 {
        self.buckets
            .iter()
            .fold(0u64, |n, (_, c)| n.saturating_add(*c))
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// Adds `from` into `into` (values above [`MAX_LATENCY_US`] count as that).
pub fn add(into: &mut Histogram<u64>, from: &Sparse) {
    for &(value, count) in &from.buckets {
        let value = value.min(MAX_LATENCY_US);
        // `record_n` grows the histogram to the value; only a count overflow fails it.
        if into.record_n(value, count).is_err() {
            into.saturating_record_n(value, count);
        }
    }
}

/// The layout of a histogram with `figures` significant figures and lowest discernible value
/// `lowest`: which value each counts index stands for (as every HdrHistogram lays it out).
struct Layout {
    unit_magnitude: u32,
    half_count_magnitude: u32,
    half_count: u64,
}

impl Layout {
    fn new(figures: u32, lowest: u64) -> Option<Self> {
        let unit_magnitude = 63 - lowest.leading_zeros();
        let largest = 2 * 10u64.pow(figures);
        let count_magnitude = 64 - (largest - 1).leading_zeros();
        let half_count_magnitude = count_magnitude.checked_sub(1)?;
        (unit_magnitude + count_magnitude <= 63).then_some(Self {
            unit_magnitude,
            half_count_magnitude,
            half_count: 1 << half_count_magnitude,
        })
    }

    /// Counts a histogram of this layout has to reach `highest` (HdrHistogram's sizing): a
    /// first bucket of `2 × half_count` sub-buckets, then `half_count` more per doubling.
    fn counts_len(&self, highest: u64) -> u64 {
        let mut reach = u128::from(2 * self.half_count) << self.unit_magnitude;
        let mut buckets = 1u64;
        while reach <= u128::from(highest) {
            reach <<= 1;
            buckets += 1;
        }
        (buckets + 1) * self.half_count
    }

    /// The lowest value of the bucket at counts index `index`; `None` past 64 bits (a bucket
    /// number is never narrowed: one past 2^32 would wrap to a small value).
    fn value_of(&self, index: u64) -> Option<u64> {
        let mut sub = (index & (self.half_count - 1)) + self.half_count;
        let bucket = match (index >> self.half_count_magnitude).checked_sub(1) {
            Some(bucket) => u32::try_from(bucket).ok()?,
            None => {
                sub -= self.half_count;
                0
            }
        };
        let shift = bucket.checked_add(self.unit_magnitude)?;
        if shift >= 64 || sub.leading_zeros() < shift {
            return None;
        }
        Some(sub << shift)
    }
}

/// One LEB128 number (at most 9 bytes, the 9th with all 8 bits) and the bytes it took.
fn leb128(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(9) {
        if i == 8 {
            return Some((value | u64::from(b) << 56, 9));
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes a V2 compressed histogram (an empty input is an empty histogram) into its non-zero
/// buckets, reading the counts straight from the payload.
pub fn decode(bytes: &[u8]) -> Result<Sparse, String> {
    decode_named(bytes, "latency_hdr")
}

/// [`decode`], with errors naming the input `name` (a run's histogram, an agent's
/// `latency_hdr`).
pub fn decode_named(bytes: &[u8], name: &str) -> Result<Sparse, String> {
    decode_metered(bytes, name, &mut 0)
}

/// [`decode_named`], adding to `total` the bytes it inflated (whether or not they then
/// decode): what decoding cost.
pub fn decode_metered(bytes: &[u8], name: &str, total: &mut usize) -> Result<Sparse, String> {
    if bytes.is_empty() {
        return Ok(Sparse::default());
    }
    if bytes.len() > MAX_HDR_BYTES {
        return Err(format!(
            "{name} is {} bytes; at most {MAX_HDR_BYTES}",
            bytes.len()
        ));
    }
    if be_u32(bytes, 0).map(|c| c & !WORD_SIZE_BITS) != Some(V2_COMPRESSED_COOKIE) {
        return Err(format!(
            "{name} is not an HdrHistogram V2 compressed encoding"
        ));
    }
    let len = be_u32(bytes, 4).ok_or_else(|| format!("{name} is truncated"))? as usize;
    let body = bytes
        .get(8..8 + len)
        .ok_or_else(|| format!("{name} is shorter than its header says"))?;
    // The header is inflated first: it bounds what the counts may take before any is inflated.
    let mut zlib = flate2::read::ZlibDecoder::new(body);
    let mut inflated = Vec::with_capacity(V2_HEADER);
    let read = (&mut zlib)
        .take(V2_HEADER as u64)
        .read_to_end(&mut inflated);
    *total = total.saturating_add(inflated.len());
    read.map_err(|e| format!("{name} does not inflate: {e}"))?;
    if inflated.len() < V2_HEADER
        || be_u32(&inflated, 0).map(|c| c & !WORD_SIZE_BITS) != Some(V2_COOKIE)
    {
        return Err(format!("{name} holds no V2 histogram"));
    }
    let payload = be_u32(&inflated, 4).unwrap_or(0) as usize;
    let figures = be_u32(&inflated, 12).unwrap_or(0);
    let lowest = be_u64(&inflated, 16).unwrap_or(0);
    let highest = be_u64(&inflated, 24).unwrap_or(u64::MAX);
    if !(1..=MAX_FIGURES).contains(&figures)
        || lowest == 0
        || highest > MAX_LATENCY_US.saturating_mul(2)
    {
        return Err(format!(
            "{name}: 1-{MAX_FIGURES} significant figures and values up to {} µs \
             (budgetd's agents and load-tool readers record 3)",
            MAX_LATENCY_US * 2
        ));
    }
    if be_u32(&inflated, 8) != Some(0) {
        return Err(format!(
            "{name}: a normalizing index offset is not supported"
        ));
    }
    let layout = Layout::new(figures, lowest).ok_or_else(|| {
        format!("{name}: its lowest value and significant figures do not fit 64 bits")
    })?;
    // At most one count or run of zeros per index up to the largest value accepted, each at
    // most 9 bytes: a longer payload says nothing more and is not inflated.
    let most = layout
        .counts_len(MAX_LATENCY_US.saturating_mul(2))
        .saturating_mul(9)
        .min((MAX_INFLATED - V2_HEADER) as u64) as usize;
    if payload > most {
        return Err(format!(
            "{name}: its counts take {payload} bytes; a histogram of its range takes at most {most}"
        ));
    }
    // A V2 payload is mostly one-byte counts: about four times its compressed size.
    inflated.reserve(body.len().saturating_mul(4).min(payload + 1));
    let read = zlib.take(payload as u64 + 1).read_to_end(&mut inflated);
    *total = total.saturating_add(inflated.len() - V2_HEADER);
    read.map_err(|e| format!("{name} does not inflate: {e}"))?;
    if inflated.len() - V2_HEADER != payload {
        return Err(format!(
            "{name}: its header says {payload} bytes of counts, which is not what it holds"
        ));
    }
    let mut buckets = Vec::new();
    let (mut at, mut index, mut total) = (V2_HEADER, 0u64, 0u64);
    let beyond = || format!("{name}: a count lies beyond the histogram's range");
    while at < inflated.len() {
        let (raw, took) =
            leb128(&inflated[at..]).ok_or_else(|| format!("{name}: a count is cut short"))?;
        at += took;
        let n = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
        if n < 0 {
            index = index.checked_add(n.unsigned_abs()).ok_or_else(beyond)?;
            continue;
        }
        if n > 0 {
            let value = layout.value_of(index).ok_or_else(beyond)?;
            if value > MAX_LATENCY_US.saturating_mul(2) {
                return Err(format!(
                    "{name}: values up to {} µs (two hours; above an hour counts as an hour)",
                    MAX_LATENCY_US * 2
                ));
            }
            total = total
                .checked_add(n as u64)
                .filter(|t| *t <= MAX_SAMPLES)
                .ok_or_else(|| format!("{name}: its counts add up past 2^40 samples"))?;
            buckets.push((value, n as u64));
        }
        index = index.checked_add(1).ok_or_else(beyond)?;
    }
    Ok(Sparse { buckets })
}

/// Adds `from` into `into` (values above [`MAX_LATENCY_US`] count as that).
pub fn merge(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    if into.add(from).is_ok() {
        return;
    }
    for v in from.iter_recorded() {
        let value = v.value_iterated_to().min(MAX_LATENCY_US);
        if into.record_n(value, v.count_at_value()).is_err() {
            into.saturating_record_n(value, v.count_at_value());
        }
    }
}

/// V2 compressed bytes of `h`. V2 stores counts as `i64`: a bucket merged past that (rollups
/// add up many windows) is written as `i64::MAX`, as a saturating counter would be, rather than
/// failing the flush that stores every agent's report.
pub fn encode(h: &Histogram<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    if V2DeflateSerializer::new().serialize(h, &mut out).is_ok() {
        return out;
    }
    // Bucket by bucket (`iter_recorded` walks by a total count that no longer adds up here).
    let mut clamped = empty();
    for v in h.iter_all().filter(|v| v.count_at_value() > 0) {
        let (value, count) = (
            v.value_iterated_to().min(MAX_LATENCY_US),
            v.count_at_value().min(i64::MAX as u64),
        );
        // `record_n` grows the histogram to the value; only a count overflow fails it.
        if clamped.record_n(value, count).is_err() {
            clamped.saturating_record_n(value, count);
        }
    }
    out.clear();
    match V2DeflateSerializer::new().serialize(&clamped, &mut out) {
        Ok(_) => out,
        Err(e) => {
            tracing::error!(error = ?e, "a histogram could not be encoded; stored empty");
            Vec::new()
        }
    }
}

/// Nearest-rank p50 / p99 / p999 of `h`.
pub fn latency(h: &Histogram<u64>) -> Latency {
    let at = |q: f64| h.highest_equivalent(h.value_at_quantile(q));
    if h.is_empty() {
        return Latency::default();
    }
    Latency {
        samples: h.len(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        p999_us: at(0.999),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_percentiles() {
        let mut h = empty();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let sparse = decode(&encode(&h)).unwrap();
        assert_eq!(sparse.len(), 1000);
        let mut back = empty();
        add(&mut back, &sparse);
        assert_eq!(back, h, "every bucket back where it was");
        let l = latency(&back);
        assert_eq!(l.samples, 1000);
        assert!((990_000..=991_000).contains(&l.p99_us), "{l:?}");
        assert!((999_000..=1_000_500).contains(&l.p999_us), "{l:?}");
    }

    #[test]
    fn refuses_what_is_not_a_bounded_histogram() {
        assert!(decode(&[1, 2, 3]).is_err());
        assert!(decode(&vec![0u8; MAX_HDR_BYTES + 1]).is_err());
        // Other layouts decode to the same values (2 figures, lowest 1000).
        let mut coarse = Histogram::<u64>::new_with_bounds(1000, 3_600_000_000, 2).unwrap();
        coarse.record(123_456).unwrap();
        let sparse = decode(&encode(&coarse)).unwrap();
        assert_eq!(sparse.buckets, [(coarse.lowest_equivalent(123_456), 1)]);
        let mut wide = Histogram::<u64>::new_with_bounds(1, u64::MAX / 4, 5).unwrap();
        wide.record(7).unwrap();
        let err = decode(&encode(&wide)).unwrap_err();
        assert!(err.contains("significant figures"), "{err}");
        let mut bytes = encode(&{
            let mut h = empty();
            h.record(5).unwrap();
            h
        });
        let n = bytes.len();
        bytes.truncate(n - 3);
        assert!(decode(&bytes).is_err());
        assert!(decode(&[]).unwrap().is_empty());
    }

    /// V2 compressed bytes written by hand: a header with `figures`, lowest 1 and highest 1 h,
    /// then `counts` as zigzag LEB128 (negative: a run of empty buckets).
    fn raw_v2(figures: u32, counts: &[i64]) -> Vec<u8> {
        use std::io::Write;
        let mut payload = Vec::new();
        for &c in counts {
            let mut z = ((c << 1) ^ (c >> 63)) as u64;
            loop {
                let byte = (z & 0x7f) as u8;
                z >>= 7;
                if z == 0 {
                    payload.push(byte);
                    break;
                }
                payload.push(byte | 0x80);
            }
        }
        let mut inflated = Vec::new();
        inflated.extend(V2_COOKIE.to_be_bytes());
        inflated.extend((payload.len() as u32).to_be_bytes());
        inflated.extend(0u32.to_be_bytes());
        inflated.extend(figures.to_be_bytes());
        inflated.extend(1u64.to_be_bytes());
        inflated.extend(MAX_LATENCY_US.to_be_bytes());
        inflated.extend(1f64.to_bits().to_be_bytes());
        inflated.extend(payload);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&inflated).unwrap();
        let body = z.finish().unwrap();
        let mut out = Vec::new();
        out.extend(V2_COMPRESSED_COOKIE.to_be_bytes());
        out.extend((body.len() as u32).to_be_bytes());
        out.extend(body);
        out
    }

    /// Found by attacking the server: skips that overflow the bucket index panicked the decoder
    /// (debug) or wrapped it (release); counts that add up past 2^64 made kill rates wrong; five
    /// significant figures let one small histogram decode into a million buckets.
    #[test]
    fn hostile_counts_and_skips_are_refused() {
        assert_eq!(decode(&raw_v2(3, &[0, 2, 3])).unwrap().len(), 5);
        let skips = raw_v2(3, &[i64::MIN + 1, i64::MIN + 1, 0, 0]);
        let err = decode(&skips).unwrap_err();
        assert!(err.contains("beyond the histogram's range"), "{err}");
        let huge = raw_v2(3, &[i64::MAX, i64::MAX, i64::MAX]);
        let err = decode(&huge).unwrap_err();
        assert!(err.contains("past 2^40"), "{err}");
        let many = raw_v2(3, &[1 << 39, 1 << 39, 1]);
        assert!(decode(&many).unwrap_err().contains("past 2^40"));
        assert_eq!(
            decode(&raw_v2(3, &[1 << 39, 1 << 39])).unwrap().len(),
            1 << 40
        );
        let fine = raw_v2(5, &[1; 100]);
        let err = decode(&fine).unwrap_err();
        assert!(err.contains("1-3 significant figures"), "{err}");
    }

    /// Found by attacking the server: a count at index ((2^32 + 2) << 10) + 5 (bucket 2^32 + 1
    /// at 3 significant figures) read as bucket 1, a latency of about 2 ms, because the bucket
    /// number was narrowed to 32 bits; an agent could so put any latency into the rollups.
    #[test]
    fn a_count_past_the_range_is_refused_not_wrapped_into_it() {
        let index = (((1_i64 << 32) + 2) << 10) + 5;
        let err = decode(&raw_v2(3, &[-index, 7])).unwrap_err();
        assert!(err.contains("beyond the histogram's range"), "{err}");
        let at_2_32 = ((1_i64 << 32) + 1) << 10;
        let err = decode(&raw_v2(3, &[-at_2_32, 7])).unwrap_err();
        assert!(err.contains("beyond the histogram's range"), "{err}");
        // The same count where it belongs is read: bucket 1, sub-bucket 1,029, 2,058 µs.
        let near = decode(&raw_v2(3, &[-((2 << 10) + 5), 7])).unwrap();
        assert_eq!(near.buckets, [(2_058, 7)]);
    }

    /// A header claiming more counts than its range holds is refused before they are
    /// inflated. Before, a histogram of a million one-byte runs of zeros (about 1 KiB sent)
    /// was inflated whole, 1 MiB, and then decoded to nothing.
    #[test]
    fn counts_longer_than_the_range_are_refused_before_they_are_inflated() {
        for (lowest, figures) in [(1, 3), (1000, 2), (1, 1)] {
            let layout = Layout::new(figures, lowest).unwrap();
            let sized =
                Histogram::<u64>::new_with_bounds(lowest, 2 * MAX_LATENCY_US, figures as u8);
            assert_eq!(
                layout.counts_len(2 * MAX_LATENCY_US),
                sized.unwrap().distinct_values() as u64,
                "sized as HdrHistogram sizes it ({lowest}, {figures})"
            );
        }
        let mut h = empty();
        h.record(1).unwrap();
        h.record(MAX_LATENCY_US).unwrap();
        assert_eq!(decode(&encode(&h)).unwrap().len(), 2);
        // Runs of one empty bucket, one byte each: 24,576 counts at 9 bytes at most fit.
        let most = 24_576 * 9;
        let mut inflated = 0;
        let long = raw_v2(3, &vec![-1; most + 1]);
        let err = decode_metered(&long, "latency_hdr", &mut inflated).unwrap_err();
        assert!(err.contains(&format!("takes at most {most}")), "{err}");
        assert_eq!(inflated, V2_HEADER, "only the header was inflated");
        let mut inflated = 0;
        assert!(
            decode_metered(&raw_v2(3, &vec![-1; most]), "latency_hdr", &mut inflated)
                .unwrap()
                .is_empty()
        );
        assert_eq!(inflated, V2_HEADER + most);
    }

    /// Found by attacking the server: two reports whose counts met in one rollup bucket past
    /// `i64::MAX` made `encode` panic in the flusher, and no report was stored until a restart.
    #[test]
    fn a_count_past_what_v2_writes_is_clamped_not_a_panic() {
        let mut h = empty();
        h.record_n(5_000, 1 << 62).unwrap();
        h.record_n(5_000, 1 << 62).unwrap();
        h.record_n(5_000, 1 << 62).unwrap();
        h.record_n(9_000, 7).unwrap();
        // Read back with the library (`decode` refuses more than 2^40 samples, as it should).
        let bytes = encode(&h);
        let back: Histogram<u64> = hdrhistogram::serialization::Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .unwrap();
        assert_eq!(back.count_at(5_000), i64::MAX as u64);
        assert_eq!(back.count_at(9_000), 7);
    }
}
