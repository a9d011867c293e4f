//! One interval histogram of an hlog line: base64 → (zlib) → the V2 encoding → its non-zero
//! buckets, and the per-tag merge of those buckets.
//!
//! The V2 counts (LEB128 + ZigZag, runs of zeros) are read as `(bucket index, count)` while they
//! are merged ([`V2::for_each`]); a bucket's value comes from HdrHistogram's own layout
//! arithmetic (lowest discernible value and significant digits from the header, [`Layout`]). A
//! tag's merged counts are kept in the layout of `Histogram::new(3)` ([`Merged`]): an interval
//! written in that layout (the usual case: lowest value 1, 3 digits) adds its counts index by
//! index, any other is mapped value by value. Either way each count lands where
//! `Histogram::record_n(bucket's highest value)` would put it.
//!
//! Speed: a line costs its base64, its inflating and one pass over its counts, which are added
//! where they belong without a branch on their sign (empty runs and counts alternate
//! unpredictably, a branch there would mispredict every other number). In the usual layout the
//! counts are read sixteen one-byte numbers at a time ([`Merged::add_block`]).

use hdrhistogram::Histogram;

use crate::codec::{base64_decode, Inflater};

/// Largest decompressed histogram accepted, in bytes.
pub const MAX_DECODED: usize = 16 << 20;
/// Precision of the merged histograms, as the rest of the ingest (`Recorder`).
const SIGFIG: u8 = 3;

pub(super) const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
const V2_HEADER_LEN: usize = 40;

/// Base64 → V2 histogram, with its buffers kept from line to line.
#[derive(Default)]
pub(super) struct Decoder {
    pub(super) raw: Vec<u8>,
    pub(super) inflater: Inflater,
}

/// A V2 histogram whose header is read: its layout, and its counts still encoded.
#[derive(Debug, Clone, Copy)]
pub(super) struct V2<'a> {
    pub(super) layout: Layout,
    payload: &'a [u8],
}

impl Decoder {
    /// Releases the buffers that hold more than `max` bytes (they grow again as needed).
    pub(super) fn release_over(&mut self, max: usize) {
        if self.raw.capacity() > max {
            self.raw = Vec::new();
        }
        self.inflater.release_over(max);
    }

    /// Decodes one base64 histogram up to its encoded counts.
    pub(super) fn decode(&mut self, b64: &[u8]) -> Result<V2<'_>, String> {
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
                let inflated = self
                    .inflater
                    .zlib(body, MAX_DECODED)
                    .map_err(|e| format!("bad compressed histogram: {e}"))?;
                match be_u32(inflated, 0) {
                    Some(V2_COOKIE) => {}
                    Some(other) => {
                        return Err(format!(
                            "the compressed payload is not a V2 histogram (cookie {other:#010x})"
                        ))
                    }
                    None => return Err("the compressed payload is empty".into()),
                }
                inflated
            }
            V2_COOKIE => &self.raw,
            other => return Err(unsupported_cookie(other)),
        };
        v2_header(v2)
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

/// The layout and encoded counts of a V2 histogram (`V2_COOKIE` first). Refused: header fields
/// the format allows but integer histograms do not use, layouts HdrHistogram cannot build and a
/// payload shorter than announced.
fn v2_header(buf: &[u8]) -> Result<V2<'_>, String> {
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
    Ok(V2 { layout, payload })
}

impl V2<'_> {
    /// Calls `f(index, count)` for every number of the counts, in order: a bucket's count (0 for
    /// an empty one) at its index, or 0 at the first index of a run of empty buckets. Refused,
    /// before `f` sees them: a number cut short, a count past the histogram's buckets, and counts
    /// summing beyond 64 bits.
    #[inline]
    pub(super) fn for_each(&self, mut f: impl FnMut(u64, u64)) -> Result<(), String> {
        let payload = self.payload;
        let counts_len = self.layout.counts_len;
        let mut total: u64 = 0;
        let mut index: u64 = 0;
        let mut at = 0;
        while let Some(&first) = payload.get(at) {
            // One-byte numbers (-64 ..= 63) are most of them.
            let raw = if first & 0x80 == 0 {
                at += 1;
                u64::from(first)
            } else {
                let (raw, used) =
                    varint(&payload[at..]).ok_or("histogram counts truncated inside a number")?;
                at += used;
                raw
            };
            // ZigZag: an odd number is negative, a run of that many empty buckets; an even one
            // the count of the bucket at `index`.
            let negative = raw & 1;
            let magnitude = (raw >> 1) + negative;
            let count = magnitude * (negative ^ 1);
            // `&`, not `&&`: one branch, taken only on bad input
            if (count != 0) & (index >= counts_len) {
                return Err(format!(
                    "bad histogram: counts past its {counts_len} buckets"
                ));
            }
            total = total
                .checked_add(count)
                .ok_or("histogram counts overflow 64 bits")?;
            f(index, count);
            index = index.saturating_add(if negative == 1 { magnitude } else { 1 });
        }
        Ok(())
    }

    /// `(value, count)` of each non-zero bucket, the value being the highest of its bucket (what
    /// HdrHistogram reports for it).
    #[cfg(test)]
    pub(super) fn values(&self) -> Result<Vec<(u64, u64)>, String> {
        let mut out = Vec::new();
        self.for_each(|i, n| {
            if n > 0 {
                out.push((self.layout.highest_value(i), n));
            }
        })?;
        Ok(out)
    }
}

/// Where the values of an HdrHistogram's counts array lie (`Histogram::new_with_bounds`'s
/// arithmetic: `value_for(index)`, `highest_equivalent` and `index_for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    unit_magnitude: u32,
    sub_bucket_half_count_magnitude: u32,
    pub(super) counts_len: u64,
}

impl Layout {
    pub(super) fn new(low: u64, high: u64, digits: u32) -> Result<Self, String> {
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

    /// Whether two layouts put every value at the same index (they may differ in length).
    fn same_buckets(&self, other: &Layout) -> bool {
        self.unit_magnitude == other.unit_magnitude
            && self.sub_bucket_half_count_magnitude == other.sub_bucket_half_count_magnitude
    }

    /// The highest value of the bucket at `index` (saturated at `u64::MAX` in the last bucket of
    /// a full-range histogram).
    pub(super) fn highest_value(&self, index: u64) -> u64 {
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

    /// The index of the bucket holding `value`.
    fn index_of(&self, value: u64) -> u64 {
        let sub_bucket_count_magnitude = self.sub_bucket_half_count_magnitude + 1;
        let mask = ((1u64 << sub_bucket_count_magnitude) - 1) << self.unit_magnitude;
        let base = 64 - self.unit_magnitude - sub_bucket_count_magnitude;
        let bucket = base - (value | mask).leading_zeros();
        let sub = value >> (bucket + self.unit_magnitude);
        ((u64::from(bucket) + 1) << self.sub_bucket_half_count_magnitude) + sub
            - (1u64 << self.sub_bucket_half_count_magnitude)
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

/// The layout of `Histogram::new(3)` (lowest discernible value 1, 3 digits), which the merged
/// counts use; its length does not matter.
const MERGED: Layout = Layout {
    unit_magnitude: 0,
    sub_bucket_half_count_magnitude: 10,
    counts_len: 2048,
};

/// One tag's merged histogram: counts in the layout of `Histogram::new(3)`, values clamped to
/// `cap`, grown only as far as the largest value seen (as an auto-resizing `Histogram` grows).
#[derive(Debug, Clone)]
pub(super) struct Merged {
    /// Never empty: slot 0 also takes the zero counts of empty runs (see [`Merged::add_at`]).
    counts: Vec<u64>,
    /// The sum of `counts`, saturated at `u64::MAX`. While it does not overflow, no single
    /// count can: [`Merged::add_block`] adds without saturating.
    total: u64,
}

/// Each byte of a `u64` set to 1.
const ONES: u64 = 0x0101_0101_0101_0101;
/// Bytes of V2 counts read at once by [`Merged::add_block`].
const BLOCK: usize = 16;
/// Slots of `counts` that a block can reach from its first index: its first 15 numbers step
/// at most 64 buckets each.
const WINDOW: usize = 1024;

/// The counts and steps of eight one-byte ZigZag numbers (the bytes of `word`, high bits
/// clear), byte for byte: an even number `2n` is a count `n` (at most 63) at the current index
/// and a step of 1; an odd one `2n - 1` a run of `n` empty buckets (at most 64): no count, a
/// step of `n`.
#[inline(always)]
fn counts_and_steps(word: u64) -> (u64, u64) {
    let odd = word & ONES;
    let magnitude = ((word >> 1) & (ONES * 0x3f)) + odd;
    let odd_mask = odd * 0xff;
    let counts = magnitude & !odd_mask;
    let steps = (magnitude & odd_mask) | (ONES & !odd_mask);
    (counts, steps)
}

/// The sum of the eight bytes of `x`, each at most 64 (so that no 16-bit sum carries).
#[inline(always)]
fn byte_sum(x: u64) -> u64 {
    let pairs = (x & 0x00ff_00ff_00ff_00ff) + ((x >> 8) & 0x00ff_00ff_00ff_00ff);
    pairs.wrapping_mul(0x0001_0001_0001_0001) >> 48
}

impl Merged {
    pub(super) fn new() -> Self {
        Self {
            counts: vec![0],
            total: 0,
        }
    }

    /// Adds the counts of `h`, each at its bucket's highest value clamped to `cap`. On an error
    /// the counts read before it are merged (the upload is refused anyway).
    pub(super) fn add(&mut self, h: V2<'_>, cap: u64) -> Result<(), String> {
        let cap_index = MERGED.index_of(cap);
        if h.layout.same_buckets(&MERGED) {
            self.add_same_layout(h, cap_index)
        } else {
            let layout = h.layout;
            h.for_each(|i, n| self.add_at(MERGED.index_of(layout.highest_value(i).min(cap)), n))
        }
    }

    /// [`Merged::add`] for a histogram in the merged layout: its counts land index by index,
    /// clamped to `cap_index`. What [`V2::for_each`] does number by number is done here sixteen
    /// bytes at a time wherever sixteen one-byte numbers follow each other (most of a
    /// histogram's counts; see [`Merged::add_block`]); anything else (a longer number, an index
    /// near the cap or beyond the counts so far, a total near overflow) goes number by number,
    /// with the same checks and errors as [`V2::for_each`].
    fn add_same_layout(&mut self, h: V2<'_>, cap_index: u64) -> Result<(), String> {
        let payload = h.payload;
        let counts_len = h.layout.counts_len;
        // A block whose indexes all lie below this needs no check: inside the histogram,
        // at or below the cap's bucket (so not clamped).
        let bound = counts_len.min(cap_index.saturating_add(1));
        let mut line_total: u64 = 0;
        let mut index: u64 = 0;
        let mut at = 0;
        while at < payload.len() {
            if let Some(block) = payload.get(at..at + BLOCK) {
                let word = |i: usize| u64::from_le_bytes(block[i..i + 8].try_into().expect("8"));
                let limit = bound.min(self.counts.len() as u64);
                if let Some((end, sum)) = self.add_block([word(0), word(8)], index, limit) {
                    index = end;
                    line_total += sum;
                    at += BLOCK;
                    continue;
                }
            }
            // One number, as `V2::for_each` reads it.
            let first = payload[at];
            let raw = if first & 0x80 == 0 {
                at += 1;
                u64::from(first)
            } else {
                let (raw, used) =
                    varint(&payload[at..]).ok_or("histogram counts truncated inside a number")?;
                at += used;
                raw
            };
            let negative = raw & 1;
            let magnitude = (raw >> 1) + negative;
            if negative == 1 {
                index = index.saturating_add(magnitude);
                continue;
            }
            if magnitude != 0 && index >= counts_len {
                return Err(format!(
                    "bad histogram: counts past its {counts_len} buckets"
                ));
            }
            line_total = line_total
                .checked_add(magnitude)
                .ok_or("histogram counts overflow 64 bits")?;
            self.add_at(index.min(cap_index), magnitude);
            index = index.saturating_add(1);
        }
        Ok(())
    }

    /// Adds the sixteen numbers of `block` (the V2 counts' bytes as two little-endian words, the
    /// first number at `index`) when each is one byte long and every index they reach lies
    /// below `limit`, and returns the index after them and the sum of their counts; else
    /// changes nothing and returns `None`.
    ///
    /// The counts and steps of eight bytes are worked out at once ([`counts_and_steps`]), then
    /// the counts are added one by one; an empty run adds its zero at its own index (below
    /// `limit`), so that no branch depends on the data. Away from the end of `counts`, the
    /// additions go through a fixed window of [`WINDOW`] slots, which needs no bounds checks.
    /// No sum can overflow: the merged total does not (checked first), so no single count
    /// does, and neither does the histogram's own total, which is part of the merged one.
    #[inline(always)]
    fn add_block(&mut self, block: [u64; 2], index: u64, limit: u64) -> Option<(u64, u64)> {
        if (block[0] | block[1]) & (ONES << 7) != 0 {
            return None;
        }
        let lanes = block.map(counts_and_steps);
        let sum = lanes
            .iter()
            .map(|&(counts, _)| byte_sum(counts))
            .sum::<u64>();
        let steps = lanes.iter().map(|&(_, steps)| byte_sum(steps)).sum::<u64>();
        let end = index.saturating_add(steps);
        if end > limit {
            return None;
        }
        let total = self.total.checked_add(sum)?;
        let base = index as usize;
        let mut at = 0;
        match self.counts.get_mut(base..base + WINDOW) {
            Some(window) => {
                let window: &mut [u64; WINDOW] = window.try_into().expect("WINDOW slots");
                // `at` stays below 15 × 64 + 1: the `%` changes nothing, it only lets the
                // compiler see that no bounds check is needed
                for (counts, steps) in lanes {
                    for k in 0..8 {
                        window[at % WINDOW] += (counts >> (8 * k)) & 0xff;
                        at += ((steps >> (8 * k)) & 0xff) as usize;
                    }
                }
            }
            None => {
                for (counts, steps) in lanes {
                    for k in 0..8 {
                        self.counts[base + at] += (counts >> (8 * k)) & 0xff;
                        at += ((steps >> (8 * k)) & 0xff) as usize;
                    }
                }
            }
        }
        self.total = total;
        Some((end, sum))
    }

    /// Adds `count` at `index` without a branch on the count: a zero count is added to slot 0
    /// instead, so that an empty run far out grows nothing. (Measured: this beats a branch, which
    /// mispredicts, and beats spreading the zeros over several slots.)
    #[inline(always)]
    fn add_at(&mut self, index: u64, count: u64) {
        let slot = if count == 0 { 0 } else { index as usize };
        if slot >= self.counts.len() {
            self.grow(slot);
        }
        self.counts[slot] = self.counts[slot].saturating_add(count);
        self.total = self.total.saturating_add(count);
    }

    /// Adds `other`'s counts into these (another thread's counts of the same tag): each slot's
    /// sum saturates, as [`Merged::add_at`] saturates, so the counts are those of adding every
    /// interval into one `Merged`, in any order.
    pub(super) fn absorb(&mut self, other: &Merged) {
        if other.counts.len() > self.counts.len() {
            self.grow(other.counts.len() - 1);
        }
        for (mine, &theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine = mine.saturating_add(theirs);
        }
        self.total = self.total.saturating_add(other.total);
    }

    /// Bytes held by the counts.
    pub(super) fn held_bytes(&self) -> usize {
        self.counts.capacity() * std::mem::size_of::<u64>()
    }

    #[cold]
    fn grow(&mut self, slot: usize) {
        self.counts.reserve_exact(slot + 1 - self.counts.len());
        self.counts.resize(slot + 1, 0);
    }

    /// The histogram these counts make (the same counts, so the same percentiles, as recording
    /// every interval's values into one `Histogram::new(3)`).
    pub(super) fn histogram(&self) -> Histogram<u64> {
        let mut h = Histogram::new(SIGFIG).expect("valid HDR sigfig");
        for (i, &n) in self.counts.iter().enumerate().filter(|(_, &n)| n > 0) {
            h.record_n(MERGED.highest_value(i as u64), n)
                .expect("values up to the cap fit an auto-resizing histogram");
        }
        h
    }
}

#[cfg(test)]
mod tests;
