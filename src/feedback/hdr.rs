//! Agents' latency histograms: HdrHistogram V2 compressed, decoded within fixed bounds.
//!
//! A hostile report cannot make the server allocate more than [`MAX_INFLATED`] for one
//! histogram: the compressed bytes are capped, inflated with an output cap, and the header's
//! significant figures and highest trackable value checked before the crate's deserializer
//! sizes anything.

use std::io::Read;

use budget_core::feedback::Latency;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

/// Largest `latency_hdr` accepted in one window.
pub const MAX_HDR_BYTES: usize = 64 * 1024;
/// Largest inflated histogram (header and counts).
pub const MAX_INFLATED: usize = 1024 * 1024;
/// Latencies are microseconds; nothing above an hour is tracked.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;

/// Cookie bases; bits 4-7 carry the word size and are ignored, as every implementation does.
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9304;
const V2_COOKIE: u32 = 0x1c84_9303;
const WORD_SIZE_BITS: u32 = 0xf0;
const V2_HEADER: usize = 40;

/// An empty histogram in the rollups' layout: 3 significant digits up to an hour.
pub fn empty() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("constant bounds are valid")
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes a V2 compressed histogram (an empty input is an empty histogram).
pub fn decode(bytes: &[u8]) -> Result<Histogram<u64>, String> {
    if bytes.is_empty() {
        return Ok(empty());
    }
    if bytes.len() > MAX_HDR_BYTES {
        return Err(format!(
            "latency_hdr is {} bytes; at most {MAX_HDR_BYTES}",
            bytes.len()
        ));
    }
    if be_u32(bytes, 0).map(|c| c & !WORD_SIZE_BITS) != Some(V2_COMPRESSED_COOKIE) {
        return Err("latency_hdr is not an HdrHistogram V2 compressed encoding".into());
    }
    let len = be_u32(bytes, 4).ok_or("latency_hdr is truncated")? as usize;
    let body = bytes
        .get(8..8 + len)
        .ok_or("latency_hdr is shorter than its header says")?;
    let mut inflated = Vec::new();
    flate2::read::ZlibDecoder::new(body)
        .take(MAX_INFLATED as u64 + 1)
        .read_to_end(&mut inflated)
        .map_err(|e| format!("latency_hdr does not inflate: {e}"))?;
    if inflated.len() > MAX_INFLATED {
        return Err(format!("latency_hdr inflates beyond {MAX_INFLATED} bytes"));
    }
    if inflated.len() < V2_HEADER
        || be_u32(&inflated, 0).map(|c| c & !WORD_SIZE_BITS) != Some(V2_COOKIE)
    {
        return Err("latency_hdr holds no V2 histogram".into());
    }
    let payload = be_u32(&inflated, 4).unwrap_or(0) as usize;
    let figures = be_u32(&inflated, 12).unwrap_or(0);
    let lowest = be_u64(&inflated, 16).unwrap_or(0);
    let highest = be_u64(&inflated, 24).unwrap_or(u64::MAX);
    if payload != inflated.len() - V2_HEADER
        || !(1..=5).contains(&figures)
        || lowest == 0
        || highest > MAX_LATENCY_US.saturating_mul(2)
    {
        return Err(format!(
            "latency_hdr: 1-5 significant figures and values up to {MAX_LATENCY_US} µs"
        ));
    }
    let h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut inflated.as_slice())
        .map_err(|e| format!("latency_hdr: {e:?}"))?;
    Ok(h)
}

/// Adds `from` into `into` (values above [`MAX_LATENCY_US`] count as that).
pub fn merge(into: &mut Histogram<u64>, from: &Histogram<u64>) {
    if into.add(from).is_ok() {
        return;
    }
    for v in from.iter_recorded() {
        let value = v.value_iterated_to().min(MAX_LATENCY_US);
        into.saturating_record_n(value, v.count_at_value());
    }
}

/// V2 compressed bytes of `h`.
pub fn encode(h: &Histogram<u64>) -> Vec<u8> {
    let mut out = Vec::new();
    V2DeflateSerializer::new()
        .serialize(h, &mut out)
        .expect("serializing to memory does not fail");
    out
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
        let back = decode(&encode(&h)).unwrap();
        assert_eq!(back.len(), 1000);
        let l = latency(&back);
        assert_eq!(l.samples, 1000);
        assert!((990_000..=991_000).contains(&l.p99_us), "{l:?}");
        assert!((999_000..=1_000_500).contains(&l.p999_us), "{l:?}");
    }

    #[test]
    fn refuses_what_is_not_a_bounded_histogram() {
        assert!(decode(&[1, 2, 3]).is_err());
        assert!(decode(&vec![0u8; MAX_HDR_BYTES + 1]).is_err());
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
        assert_eq!(decode(&[]).unwrap().len(), 0);
    }
}
