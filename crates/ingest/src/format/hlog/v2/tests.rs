use proptest::prelude::*;

use super::*;

#[test]
fn the_merged_layout_is_that_of_histogram_new_3() {
    assert!(MERGED.same_buckets(&Layout::new(1, 2, u32::from(SIGFIG)).unwrap()));
    let h = Histogram::<u64>::new(SIGFIG).unwrap();
    for v in [0, 1, 2047, 2048, 2049, 1 << 20, 3_600_000_000_000] {
        assert_eq!(
            MERGED.highest_value(MERGED.index_of(v)),
            h.highest_equivalent(v)
        );
    }
}

/// The V2 encoding of `numbers` (ZigZag, then LEB128-64b9B): a count when `>= 0`, a run
/// of that many empty buckets when negative.
fn encode(numbers: &[i64]) -> Vec<u8> {
    let mut out = Vec::new();
    for &n in numbers {
        let mut v = ((n << 1) ^ (n >> 63)) as u64;
        for _ in 0..8 {
            if v < 0x80 {
                break;
            }
            out.push((v & 0x7f) as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    out
}

/// `Merged::add` in the merged layout against the number-by-number way (`V2::for_each`
/// into `Merged::add_at`, what `add` did for every layout before the block path): the same
/// counts, the same length, the same error. Two histograms in turn, so that the second
/// finds the counts grown by the first.
fn agrees_with_number_by_number(payloads: &[Vec<u8>], high: u64, cap: u64) {
    let layout = Layout::new(1, high, u32::from(SIGFIG)).unwrap();
    let cap_index = MERGED.index_of(cap);
    let mut fast = Merged::new();
    let mut slow = Merged::new();
    for payload in payloads {
        let h = V2 { layout, payload };
        let got = fast.add(h, cap);
        let want = h.for_each(|i, n| slow.add_at(i.min(cap_index), n));
        assert_eq!(got, want);
        assert_eq!(fast.counts, slow.counts);
        assert_eq!(fast.total, slow.total);
    }
}

#[test]
fn block_path_edges() {
    let full = |n: usize| vec![2u8; n];
    let cases: Vec<Vec<u8>> = vec![
        Vec::new(),
        full(15),
        full(16),
        full(17),
        full(31),
        full(32),
        full(33),
        full(100),
        // a two-byte number in the middle of blocks, a run of 64, counts of 63
        [
            &full(13)[..],
            &[0x80, 0x01],
            &full(20),
            &[127, 126, 126],
            &full(9),
        ]
        .concat(),
        // a number cut short after full blocks
        [&full(16)[..], &[0x80]].concat(),
        // counts past the histogram's buckets
        encode(&[5, -2000, 3, 1, 1, 1, 1, 1, 1, 1, 1]),
        // a total beyond 64 bits, a count of 2^62 first
        encode(&[1 << 62, 1 << 62, 1 << 62, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
        // runs that saturate the index, then blocks and counts past it
        encode(&[1, i64::MIN + 1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        [
            &encode(&[i64::MIN + 1, i64::MIN + 1])[..],
            &[1; 40],
            &encode(&[0, 0, 1]),
        ]
        .concat(),
    ];
    for payload in &cases {
        for cap in [0, 1, 5, 2047, 2048, 2100, 3_600_000_000] {
            agrees_with_number_by_number(&[payload.clone(), payload.clone()], 1 << 20, cap);
        }
    }
    // counts grown far first: the blocks then add through the window, up to its end
    let far = encode(&[-5000, 1]);
    let dense: Vec<i64> = (0..6000).map(|i| [3, -2, 0, 63, -64][i % 5]).collect();
    for cap in [10, 3000, 5100, 1 << 30] {
        agrees_with_number_by_number(&[far.clone(), encode(&dense)], 1 << 20, cap);
    }
    // merged totals near overflow: the block path steps aside, counts saturate
    let big = encode(&[i64::MAX / 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]);
    agrees_with_number_by_number(&[big.clone(), big.clone(), big], 1 << 20, 1 << 30);
}

proptest! {
    #[test]
    fn block_path_agrees_on_numbers(
        numbers in proptest::collection::vec(
            prop_oneof![
                6 => 0i64..64,
                3 => -64i64..0,
                1 => 0i64..100_000,
                1 => -3000i64..0,
            ],
            0..600,
        ),
        second in proptest::collection::vec(0i64..64, 0..40),
        high_bits in 11u32..40,
        cap in 0u64..40_000,
    ) {
        let payloads = [encode(&numbers), encode(&second), encode(&numbers)];
        agrees_with_number_by_number(&payloads, 1 << high_bits, cap);
    }

    #[test]
    fn block_path_agrees_on_bytes(
        bytes in proptest::collection::vec(
            prop_oneof![9 => 0u8..0x80, 1 => any::<u8>()],
            0..400,
        ),
        cap in 0u64..40_000,
    ) {
        agrees_with_number_by_number(&[bytes.clone(), bytes], 1 << 30, cap);
    }

    /// `index_of` puts a value in the bucket HdrHistogram puts it in (same highest value), and
    /// a bucket's highest value in that bucket.
    #[test]
    fn layout_indexes_agree_with_the_crate(
        low_bits in 0u32..20,
        digits in 0u8..=5,
        value in 0u64..1 << 60,
    ) {
        let low = 1u64 << low_bits;
        let Ok(h) = Histogram::<u64>::new_with_bounds(low, 1 << 62, digits) else {
            return Ok(());
        };
        let layout = Layout::new(low, 1 << 62, u32::from(digits)).unwrap();
        let index = layout.index_of(value);
        prop_assert!(index < layout.counts_len);
        prop_assert_eq!(layout.highest_value(index), h.highest_equivalent(value));
        prop_assert_eq!(layout.index_of(layout.highest_value(index)), index);
    }
}
