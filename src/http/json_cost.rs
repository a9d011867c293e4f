//! What a JSON body takes once parsed into a `serde_json::Value`, estimated from one pass over
//! its bytes before it is parsed, so that [`super::bodies::Bodies`] can charge it first.
//!
//! The estimate follows the value's layout: every value is a slot of `size_of::<Value>()`
//! bytes in its parent (an array's vector, which grows by doubling from 4 slots; an object's
//! B-tree nodes of 11 key and value slots, one node up to 11 members and at least 5 members per
//! node past that); a string, key or value, holds its bytes on the heap. Numbers, booleans and
//! null take only their slot. Each allocation is counted as the larger of what jemalloc (the
//! server's allocator: four size classes to each doubling) and glibc (an 8-byte header,
//! 16-byte steps) take for it, and a quarter more is added for what the allocator keeps
//! besides (an array of numbers grew a process on glibc by 12 % more than its layout).
//! Escapes only shorten a string, and a repeated key is counted twice, so the estimate errs
//! high. `examples/json_memory.rs` prints it beside the memory measured.

use serde_json::Value;

/// A value's slot in its parent.
const SLOT: usize = size_of::<Value>();
/// A B-tree leaf of an object: 11 keys and 11 values, its parent pointer, index and length.
const LEAF: usize = 11 * (size_of::<String>() + SLOT) + 16;
/// A B-tree node above the leaves: a leaf and its 12 child pointers.
const BRANCH: usize = LEAF + 12 * size_of::<usize>();
/// Deeper than this, `serde_json` refuses the body (its limit is 128), so counting stops.
const DEEPEST: usize = 256;

/// The bytes `raw` takes once parsed into a `Value`, estimated (see the module's text). Any
/// bytes are counted without panicking; the parser refuses those that are not JSON
/// afterwards, having built at most what they are counted as.
pub fn parsed_bytes(raw: &[u8]) -> usize {
    let laid_out = laid_out(raw);
    laid_out.saturating_add(laid_out / 4)
}

/// What the parsed value's allocations take, as the module's text lays them out.
fn laid_out(raw: &[u8]) -> usize {
    let mut total = SLOT;
    // The arrays and objects open at this point, with the values begun in each.
    let mut open: Vec<Open> = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b' ' | b'\t' | b'\n' | b'\r' | b',' | b':' => {}
            b'"' => {
                let start = i + 1;
                i = start;
                while i < raw.len() && raw[i] != b'"' {
                    // An escape's second byte is never the string's end.
                    i += if raw[i] == b'\\' { 2 } else { 1 };
                }
                total = total.saturating_add(chunk(i.min(raw.len()) - start));
                begun(&mut open);
            }
            b @ (b'[' | b'{') => {
                begun(&mut open);
                if open.len() == DEEPEST {
                    return still_open(total, &open);
                }
                open.push(Open {
                    object: b == b'{',
                    values: 0,
                });
            }
            b']' | b'}' => {
                if let Some(closed) = open.pop() {
                    total = total.saturating_add(closed.bytes());
                }
            }
            _ => {
                // A number, `true`, `false` or `null`: up to the next byte that ends it.
                begun(&mut open);
                while i + 1 < raw.len()
                    && !matches!(
                        raw[i + 1],
                        b' ' | b'\t'
                            | b'\n'
                            | b'\r'
                            | b','
                            | b':'
                            | b'"'
                            | b'['
                            | b']'
                            | b'{'
                            | b'}'
                    )
                {
                    i += 1;
                }
            }
        }
        i += 1;
    }
    still_open(total, &open)
}

/// `total` with what the arrays and objects still `open` hold: the parser builds them whole
/// before it finds that they never end (an array of numbers without its `]` takes as much as
/// one with it).
fn still_open(total: usize, open: &[Open]) -> usize {
    open.iter()
        .fold(total, |total, o| total.saturating_add(o.bytes()))
}

/// An array or object being counted: the values begun in it (an object's keys count as
/// values, so its members are half of them).
struct Open {
    object: bool,
    values: usize,
}

impl Open {
    /// What it holds besides its values' own strings and containers.
    fn bytes(&self) -> usize {
        if self.object {
            let members = self.values.div_ceil(2);
            match members {
                0 => 0,
                1..=11 => chunk(LEAF),
                _ => {
                    let leaves = members.div_ceil(5);
                    leaves * chunk(LEAF) + leaves.div_ceil(5) * chunk(BRANCH)
                }
            }
        } else if self.values == 0 {
            0
        } else {
            chunk(SLOT * self.values.next_power_of_two().max(4))
        }
    }
}

fn begun(open: &mut [Open]) {
    if let Some(last) = open.last_mut() {
        last.values += 1;
    }
}

/// What the allocator takes for `bytes` (none for none): the larger of glibc's chunk (an
/// 8-byte header, 16-byte steps, 32 at least) and jemalloc's size class (steps of an eighth
/// of the next power of two past 128: 256 up to 2048, 4096 up to 32768, …).
fn chunk(bytes: usize) -> usize {
    if bytes == 0 {
        return 0;
    }
    let glibc = bytes
        .saturating_add(8)
        .div_ceil(16)
        .saturating_mul(16)
        .max(32);
    let step = (bytes
        .checked_next_power_of_two()
        .unwrap_or(usize::MAX / 2 + 1)
        / 8)
    .max(16);
    let jemalloc = bytes.div_ceil(step).saturating_mul(step);
    glibc.max(jemalloc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_a_quarter_more_than_the_layout() {
        let raw = br#"{"a":[1,2,"three"]}"#;
        assert_eq!(
            laid_out(raw),
            SLOT + chunk(LEAF) + 32 + chunk(4 * SLOT) + 32
        );
        assert_eq!(parsed_bytes(raw), laid_out(raw) * 5 / 4);
    }

    #[test]
    fn allocations_are_counted_as_the_larger_allocators_take_them() {
        // glibc: header and 16-byte steps.
        assert_eq!(chunk(1), 32);
        assert_eq!(chunk(40), 48);
        assert_eq!(chunk(128), 144);
        assert_eq!(chunk(632), 640);
        // jemalloc: a quarter of a power of two past one (found by attacking the server:
        // strings of 16,385 bytes take 20 KiB each).
        assert_eq!(chunk(16_385), 20_480);
        assert_eq!(chunk(1025), 1280);
        assert_eq!(chunk(usize::MAX), usize::MAX);
    }

    #[test]
    fn scalars_take_their_slot_and_strings_their_chunk() {
        assert_eq!(laid_out(b"1"), SLOT);
        assert_eq!(laid_out(b" true "), SLOT);
        assert_eq!(laid_out(b"\"\""), SLOT);
        // 40 bytes and the header: 48.
        let forty = format!("\"{}\"", "a".repeat(40));
        assert_eq!(laid_out(forty.as_bytes()), SLOT + 48);
        // An escaped quote does not end the string: 4 bytes, one chunk of 32.
        assert_eq!(laid_out(br#""a\"b""#), SLOT + 32);
    }

    #[test]
    fn arrays_grow_by_doubling_from_four() {
        assert_eq!(laid_out(b"[]"), SLOT);
        assert_eq!(laid_out(b"[1]"), SLOT + chunk(4 * SLOT));
        assert_eq!(laid_out(b"[1,2,3,4,5]"), SLOT + chunk(8 * SLOT));
        // Nested: each array its own vector.
        assert_eq!(laid_out(b"[[1],[2,3]]"), SLOT + 3 * chunk(4 * SLOT));
    }

    #[test]
    fn objects_take_a_leaf_then_a_node_per_five_members() {
        assert_eq!(laid_out(b"{}"), SLOT);
        // One leaf, and the key's chunk.
        assert_eq!(laid_out(br#"{"a":1}"#), SLOT + chunk(LEAF) + 32);
        let keys = |n: usize| {
            let members: Vec<String> = (0..n).map(|i| format!("\"k{i:02}\":null")).collect();
            format!("{{{}}}", members.join(","))
        };
        assert_eq!(laid_out(keys(11).as_bytes()), SLOT + chunk(LEAF) + 11 * 32);
        assert_eq!(
            laid_out(keys(12).as_bytes()),
            SLOT + 3 * chunk(LEAF) + chunk(BRANCH) + 12 * 32
        );
    }

    #[test]
    fn what_is_not_json_is_counted_without_panicking() {
        for raw in [
            &b"\"unterminated"[..],
            b"\"ends in an escape\\",
            b"]]]}}}",
            b"[[[[",
            b"{\"a\" 1 2 3",
            &[0xff, 0xfe, b'"', 0x80],
        ] {
            assert!(laid_out(raw) >= SLOT);
        }
        // Arrays opened and never closed, each holding the next: counted as far as 256 deep.
        let deep = "[".repeat(100_000);
        assert_eq!(laid_out(deep.as_bytes()), SLOT + DEEPEST * chunk(4 * SLOT));
    }

    /// Found in review: what was still open when the bytes ran out counted nothing, though
    /// the parser builds it whole before it reports the missing end, so 8 MiB of `1,` without
    /// its `]` (about 128 MiB parsed) was charged 32 bytes.
    #[test]
    fn what_never_ends_is_counted_as_if_it_did() {
        assert_eq!(laid_out(b"[1,1,1,1,1"), laid_out(b"[1,1,1,1,1]"));
        assert_eq!(
            laid_out(br#"{"a":1,"b":[1"#),
            laid_out(br#"{"a":1,"b":[1]}"#)
        );
        // Past the depth the parser allows, too.
        let ones = vec!["1"; 1000].join(",");
        let deep = format!("[{ones},{}", "[".repeat(300));
        assert!(laid_out(deep.as_bytes()) >= laid_out(format!("[{ones}]").as_bytes()));
    }

    /// The largest bodies the API expects stay far below a token's share parsed (64 MiB at
    /// the defaults): a native run of 1,000 segments with 10 percentile points each, the
    /// upload benchmark's largest, is about 0.7 MB and under 12 MiB parsed.
    #[test]
    fn a_run_of_a_thousand_segments_with_points_is_estimated_under_twelve_mib() {
        let points: Vec<Value> = [0.0, 50.0, 75.0, 90.0, 95.0, 98.0, 99.0, 99.9, 99.99, 100.0]
            .iter()
            .map(|p| serde_json::json!({"percentile": p, "us": 123_456}))
            .collect();
        let segments: Vec<Value> = (0..1000)
            .map(|i| {
                serde_json::json!({"id": format!("api->s{i}"), "samples": 120_000, "failures": 3,
                    "p50_ms": 12.5, "p99_ms": 80.25, "p999_ms": 140.0,
                    "distribution": {"kind": "percentiles", "points": points}})
            })
            .collect();
        let raw =
            serde_json::to_vec(&serde_json::json!({"tool": "k6", "segments": segments})).unwrap();
        let estimate = parsed_bytes(&raw);
        assert!(raw.len() < 800_000, "{}", raw.len());
        assert!(estimate < 12 << 20, "{estimate}");
    }

    /// The estimate is at least what the values laid out as described take (the shapes of
    /// `examples/json_memory.rs`, per byte of body); what the process's memory grows by is that
    /// example's to measure.
    #[test]
    fn many_small_values_cost_many_times_their_bytes() {
        let array_of = |item: &str, n: usize| format!("[{}]", vec![item; n].join(","));
        let per_byte = |raw: String| laid_out(raw.as_bytes()) as f64 / raw.len() as f64;
        // 1,000 numbers: 1,024 slots of 32 bytes in 2,001 bytes.
        assert!((16.0..17.0).contains(&per_byte(array_of("1", 1000))));
        // One-key objects: a leaf (640 bytes), a key (32) and a slot (32 of 64 reserved) in 8.
        let one_key = per_byte(array_of(r#"{"a":1}"#, 1000));
        assert!((88.0..90.0).contains(&one_key), "{one_key}");
    }
}
