//! The test kit every format's tests use: the fixture catalogue, reading an input in chunks of
//! every small size (the result must not depend on where the chunks are cut), fixture mutation,
//! and [`kit_tests!`], which gives a format the two properties every parser must hold:
//!
//! - each of its fixtures read in chunks of every size from 1 to [`SMALL_CHUNKS`] bytes gives
//!   exactly what one push gives;
//! - arbitrary bytes, and mutated fixtures, never panic the parser (nor `detect`), and give the
//!   same result or error whatever the chunking.

use proptest::prelude::*;
use proptest::sample::Index;

use crate::{parser, read_all, Extracted, Format, IngestError, Options, TimeUnit};

/// Chunk sizes 1 ..= this are all tried by [`read_in_every_chunking`].
pub(crate) const SMALL_CHUNKS: usize = 32;

/// One file under `tests/fixtures/`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fixture {
    pub format: Format,
    pub name: &'static str,
    pub bytes: &'static [u8],
}

macro_rules! fixture {
    ($format:ident, $path:literal) => {
        Fixture {
            format: Format::$format,
            name: $path,
            bytes: include_bytes!(concat!("../../../tests/fixtures/", $path)),
        }
    };
}

/// Every load-tool fixture, by format (the server's integration tests upload the same files).
pub(crate) const FIXTURES: &[Fixture] = &[
    fixture!(Locust, "locust/shop_stats.csv"),
    fixture!(Locust, "locust/idle_stats.csv"),
    fixture!(LocustJson, "locust/shop.json"),
    fixture!(Oha, "oha/inventory.json"),
    fixture!(Oha, "oha/payment.json"),
    fixture!(Oha, "oha/user.json"),
    fixture!(K6, "k6/handle-summary.json"),
    fixture!(K6, "k6/summary-export.json"),
    fixture!(K6, "k6/default-trend-stats.json"),
    fixture!(K6, "k6/summary-export-no-failed.json"),
    fixture!(K6Points, "k6/points-small.json"),
    fixture!(K6Points, "k6/points-small.csv"),
    fixture!(Artillery, "artillery/report.json"),
    fixture!(Autocannon, "autocannon/inventory.json"),
    fixture!(Autocannon, "autocannon/payment.json"),
    fixture!(Autocannon, "autocannon/user.json"),
    fixture!(Autocannon, "autocannon/payment-rate.json"),
    fixture!(Jmeter, "jmeter/shop_2x_default.jtl"),
    fixture!(Jmeter, "jmeter/shop_header.jtl"),
    fixture!(Jmeter, "jmeter/shop_header_full.jtl"),
    fixture!(Hdrhistogram, "hdrhistogram/tagged.hlog"),
    fixture!(Hdrhistogram, "hdrhistogram/untagged.hlog"),
    fixture!(Wrk2, "wrk2/checkout.txt"),
    fixture!(Wrk2, "wrk2/search-errors.txt"),
    fixture!(Wrk2, "wrk2/health-us.txt"),
    fixture!(Wrk2, "wrk2/wrk-plain.txt"),
];

/// The fixtures of `format`.
pub(crate) fn fixtures(format: Format) -> Vec<Fixture> {
    FIXTURES
        .iter()
        .filter(|f| f.format == format)
        .copied()
        .collect()
}

/// The options the kit reads `format` with: a unit for HdrHistogram logs (which need one), a
/// label for the single-endpoint formats.
/// The plain bytes of a gzip file (members concatenated, as `cat a.gz b.gz` makes them).
pub(crate) fn gunzip(gz: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(gz)
        .read_to_end(&mut out)
        .unwrap();
    out
}

pub(crate) fn options(format: Format) -> Options {
    Options {
        unit: (format == Format::Hdrhistogram).then_some(TimeUnit::Ns),
        label: format.single_endpoint().then(|| "kit".to_owned()),
    }
}

/// Reads `input` in one push, then in chunks of every size from 1 to [`SMALL_CHUNKS`] bytes:
/// every result must equal the one-push result, which is returned.
pub(crate) fn read_in_every_chunking(
    format: Format,
    options: &Options,
    input: &[u8],
) -> Result<Extracted, IngestError> {
    let whole = read(format, options, input, input.len());
    for chunk in 1..=SMALL_CHUNKS {
        let got = read(format, options, input, chunk);
        assert_eq!(got, whole, "{format}: chunks of {chunk} bytes");
    }
    whole
}

fn read(
    format: Format,
    options: &Options,
    input: &[u8],
    chunk: usize,
) -> Result<Extracted, IngestError> {
    read_all(parser(format, options)?, input, chunk.max(1))
}

/// The property behind both proptests of [`kit_tests!`]: `input` read in `chunk`-byte pieces
/// gives what one push gives, and nothing panics (a panic fails the test case).
pub(crate) fn same_in_chunks(
    format: Format,
    input: &[u8],
    chunk: usize,
) -> Result<(), TestCaseError> {
    let _ = crate::detect(input);
    let options = options(format);
    let whole = read(format, &options, input, input.len());
    let chunked = read(format, &options, input, chunk);
    prop_assert_eq!(chunked, whole, "{} in chunks of {}", format, chunk);
    Ok(())
}

/// One edit of a fixture: what, where, and a byte.
pub(crate) type Edit = (u8, Index, u8);

/// Up to 12 edits: overwrite, flip, cut, insert a byte, or repeat a piece of the input.
pub(crate) fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec((0..5u8, any::<Index>(), any::<u8>()), 0..12)
}

/// `base` with `edits` applied in order.
pub(crate) fn mutate(base: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut input = base.to_vec();
    for (op, at, byte) in edits {
        let i = at.index(input.len() + 1);
        match op {
            0 if i < input.len() => input[i] = *byte,
            1 if i < input.len() => input[i] ^= byte | 1,
            2 => input.truncate(i),
            3 => input.insert(i, *byte),
            _ => {
                let piece = input[i..(i + usize::from(*byte)).min(input.len())].to_vec();
                input.splice(i..i, piece);
            }
        }
    }
    input
}

/// The kit's tests for one format, to be invoked in the format's test module:
/// `crate::testkit::kit_tests!(Format::Jmeter);`.
macro_rules! kit_tests {
    ($format:expr) => {
        /// Every fixture of the format reads the same in chunks of every small size.
        #[test]
        fn kit_fixtures_read_the_same_in_chunks_of_every_small_size() {
            let fixtures = $crate::testkit::fixtures($format);
            assert!(!fixtures.is_empty());
            for f in fixtures {
                let options = $crate::testkit::options($format);
                let _ = $crate::testkit::read_in_every_chunking($format, &options, f.bytes);
            }
        }

        ::proptest::proptest! {
            #![proptest_config(::proptest::prelude::ProptestConfig {
                cases: 256,
                ..::proptest::prelude::ProptestConfig::default()
            })]

            /// Arbitrary bytes never panic, and chunking does not change the outcome.
            #[test]
            fn kit_arbitrary_bytes_never_panic(
                input in ::proptest::collection::vec(::proptest::prelude::any::<u8>(), 0..2048),
                chunk in 1usize..64,
            ) {
                $crate::testkit::same_in_chunks($format, &input, chunk)?;
            }

            /// Mutated fixtures never panic, and chunking does not change the outcome.
            #[test]
            fn kit_mutated_fixtures_never_panic(
                which in ::proptest::prelude::any::<::proptest::sample::Index>(),
                edits in $crate::testkit::edits(),
                chunk in 1usize..600,
            ) {
                let fixtures = $crate::testkit::fixtures($format);
                let input = $crate::testkit::mutate(which.get(&fixtures).bytes, &edits);
                $crate::testkit::same_in_chunks($format, &input, chunk)?;
            }
        }
    };
}

pub(crate) use kit_tests;

/// The percentile points `e` keeps for `label`, checked as an upload is (`check_points`), as
/// `(percentile, µs)` pairs. Panics when the label has none.
pub(crate) fn points(e: &crate::Extracted, label: &str) -> Vec<(f64, u64)> {
    let Some(budget_core::distribution::Distribution::Percentiles { points }) =
        e.distributions.get(label)
    else {
        panic!("no percentile points for {label}: {:?}", e.distributions)
    };
    assert_eq!(budget_core::distribution::check_points(points), Ok(()));
    points.iter().map(|p| (p.percentile, p.us)).collect()
}
