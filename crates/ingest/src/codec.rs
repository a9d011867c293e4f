//! Byte codecs the formats decode with: base64 (the `base64` crate) and zlib (`libdeflater`,
//! bindings to the C library libdeflate, which inflates a whole stream into one buffer: see
//! [`Inflater`]). Each keeps its buffers from call to call and words its errors for an upload's
//! author. Inflating is capped: output past the cap is refused, never allocated.

use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::{DecodeError, Engine as _};
use libdeflater::{DecompressionError, Decompressor};

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

/// A zlib (RFC 1950) inflater (libdeflate, whole buffer at once) whose state and output buffer
/// are kept from call to call.
pub(crate) struct Inflater {
    state: Decompressor,
    /// The output buffer, zero-filled once and kept at its full length: it grows (doubling) as
    /// an input needs it, never past the cap of the call that grew it.
    buf: Vec<u8>,
}

impl Default for Inflater {
    fn default() -> Self {
        Self {
            state: Decompressor::new(),
            buf: Vec::new(),
        }
    }
}

/// First size of the output buffer.
const FIRST_BUF: usize = 16 * 1024;

impl Inflater {
    /// Inflates the zlib stream `input` (checksum verified) and returns the output, refusing any
    /// stream that inflates to more than `cap` bytes: the buffer never grows past `cap`.
    ///
    /// libdeflate inflates a stream whole into one buffer and says only whether that buffer was
    /// too small: it is then doubled (up to `cap`) and the stream inflated again from the start.
    /// The buffer keeps its size for the next stream, so this happens while the first few
    /// streams of an upload are read, not on every line.
    pub(crate) fn zlib(&mut self, input: &[u8], cap: usize) -> Result<&[u8], String> {
        if self.buf.is_empty() {
            self.grow(FIRST_BUF.min(cap));
        }
        loop {
            let room = self.buf.len().min(cap);
            match self.state.zlib_decompress(input, &mut self.buf[..room]) {
                Ok(n) => return Ok(&self.buf[..n]),
                Err(DecompressionError::InsufficientSpace) if room >= cap => {
                    return Err(format!(
                        "it inflates to more than {cap} bytes, the limit for one histogram"
                    ))
                }
                Err(DecompressionError::InsufficientSpace) => {
                    self.grow(room.saturating_mul(2).max(FIRST_BUF).min(cap));
                }
                Err(DecompressionError::BadData) => return Err(self.diagnose(input, room)),
            }
        }
    }

    /// Releases the output buffer when it holds more than `max` bytes (it grows again from
    /// 16 KiB as needed).
    pub(crate) fn release_over(&mut self, max: usize) {
        if self.buf.capacity() > max {
            self.buf = Vec::new();
        }
    }

    /// Zero-fills the buffer up to `len` bytes, allocating exactly that.
    fn grow(&mut self, len: usize) {
        self.buf.reserve_exact(len.saturating_sub(self.buf.len()));
        self.buf.resize(len, 0);
    }

    /// Why libdeflate refused `input` (it says only "bad data"): the 2-byte header checked as
    /// zlib checks it, then the DEFLATE data inflated alone, with and without the last 4 bytes,
    /// which tells a wrong checksum from a stream that stops before its checksum. (Only on
    /// refused input, so its cost does not matter.)
    fn diagnose(&mut self, input: &[u8], room: usize) -> String {
        let [cmf, flg, ..] = *input else {
            return "compressed data truncated".into();
        };
        let corrupt = |why: &str| format!("corrupt zlib stream ({why})");
        if (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
            return corrupt("incorrect header check");
        }
        if cmf & 0x0f != 8 {
            return corrupt("unknown compression method");
        }
        if cmf >> 4 > 7 {
            return corrupt("invalid window size");
        }
        if flg & 0x20 != 0 {
            return corrupt("a preset dictionary is required");
        }
        let body = &input[2..];
        let out = &mut self.buf[..room];
        if self.state.deflate_decompress(body, out).is_err() {
            return "corrupt or truncated zlib stream".into();
        }
        let without_checksum = &body[..body.len().saturating_sub(4)];
        match self.state.deflate_decompress(without_checksum, out) {
            Ok(_) => "zlib checksum mismatch".into(),
            Err(_) => "compressed data truncated (the checksum is missing)".into(),
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
        let mut z = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut out = vec![0; z.zlib_compress_bound(data.len())];
        let n = z.zlib_compress(data, &mut out).unwrap();
        out.truncate(n);
        out
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
        assert_eq!(err, "corrupt or truncated zlib stream");
        let err = inflater.zlib(&z[..z.len() - 2], 1 << 20).unwrap_err();
        assert_eq!(err, "compressed data truncated (the checksum is missing)");
        let mut bad_data = z.clone();
        bad_data[2] |= 0x06; // the first block's type becomes 3, which DEFLATE does not define
        let err = inflater.zlib(&bad_data, 1 << 20).unwrap_err();
        assert_eq!(err, "corrupt or truncated zlib stream");
        for (input, why) in [
            (&b"\x78\x00"[..], "incorrect header check"),
            (b"\x79\x18\x03\x00", "unknown compression method"),
            (b"\x88\x98\x03\x00", "invalid window size"),
            (b"\x78\xbb\x03\x00", "a preset dictionary is required"),
        ] {
            let err = inflater.zlib(input, 1 << 20).unwrap_err();
            assert_eq!(err, format!("corrupt zlib stream ({why})"), "{input:?}");
        }
        for input in [&b""[..], b"\x78"] {
            let err = inflater.zlib(input, 1 << 20).unwrap_err();
            assert_eq!(err, "compressed data truncated", "{input:?}");
        }
        // After all these, the buffer still reads a good stream back.
        assert_eq!(inflater.zlib(&z, 1 << 20).unwrap(), &text[..]);
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
        // Caps below the first buffer size, after a small one grew the buffer.
        let mut inflater = Inflater::default();
        let text = zlib(&[5u8; 700]);
        assert!(inflater.zlib(&text, 100).is_err());
        assert_eq!(inflater.capacity(), 100);
        assert_eq!(inflater.zlib(&text, 1000).unwrap(), &[5u8; 700][..]);
        assert_eq!(inflater.capacity(), 1000);
        let err = inflater.zlib(&text, 699).unwrap_err();
        assert_eq!(
            err,
            "it inflates to more than 699 bytes, the limit for one histogram"
        );
    }
}
