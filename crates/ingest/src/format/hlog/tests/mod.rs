//! Tests of the hlog parser: the fixtures against the Python HdrHistogram library, logs written
//! by the Rust crate, layouts, clamping, flat memory and sniffing; the bad inputs are in
//! [`errors`].

use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer, V2Serializer};
use proptest::prelude::*;

use base64::Engine as _;

use super::v2::{Decoder, Layout, V2_COOKIE};
use super::*;
use crate::codec::{base64_decode, Inflater};
use crate::read_all;
use crate::testkit::{self, kit_tests};

mod errors;
mod threads;

const TAGGED: &[u8] = include_bytes!("../../../../../../tests/fixtures/hdrhistogram/tagged.hlog");
const TAGGED_EXPECTED: &str =
    include_str!("../../../../../../tests/fixtures/hdrhistogram/tagged.expected.txt");
const UNTAGGED: &[u8] =
    include_bytes!("../../../../../../tests/fixtures/hdrhistogram/untagged.hlog");
const UNTAGGED_EXPECTED: &str =
    include_str!("../../../../../../tests/fixtures/hdrhistogram/untagged.expected.txt");

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

/// Reads `input` in one push and in chunks of every small size; all must agree.
fn read_chunked(
    input: &[u8],
    unit: TimeUnit,
    label: Option<&str>,
) -> Result<Extracted, IngestError> {
    testkit::read_in_every_chunking(Format::Hdrhistogram, &opts(Some(unit), label), input)
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
        assert_eq!(stats.failures, None);
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

fn write_log<S: Serializer>(ser: &mut S, intervals: &[(Option<&str>, &Histogram<u64>)]) -> Vec<u8> {
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

fn hist(low: u64, high: u64, sigfig: u8, values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
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
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The benchmark's generator (see `hlog_stream`): a long stream keeps one histogram per tag
/// and scratch buffers no bigger than one histogram.
#[test]
fn a_long_stream_stays_flat() {
    let mut p = HlogParser::new(TimeUnit::Ns, None, Tuning::for_this_machine());
    let mut chunks = 0;
    hlog_stream(600, 200, |chunk| {
        chunks += 1;
        p.push(chunk).unwrap();
    });
    assert!(chunks > 1);
    assert!(p.log.main.decoder.raw.capacity() < 64 * 1024);
    assert!(p.log.main.decoder.inflater.capacity() < 256 * 1024);
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
            include_bytes!("../../../../../../tests/fixtures/wrk2/checkout.txt"),
        ),
        ("numbers", b"0.1,0.2,0.3,0.4\n"),
    ];
    for (name, head) in no {
        assert!(!sniff(head), "{name}");
    }
    for fixture in [TAGGED, UNTAGGED] {
        assert_eq!(crate::detect(fixture), Some(Format::Hdrhistogram));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

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
        let ours = decoder.decode(b64(&bytes).as_bytes()).unwrap().values().unwrap();
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
        let inflated = Inflater::default().zlib(&raw[8..], MAX_DECODED).unwrap().to_vec();
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

kit_tests!(Format::Hdrhistogram);
