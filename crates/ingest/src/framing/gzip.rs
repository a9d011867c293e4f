//! gzip-compressed uploads (`.gz` files, `Content-Encoding: gzip`, k6's `--out json=x.json.gz`):
//! flate2's streaming multi-member decoder (members concatenated, as `gzip` and `zcat` read
//! them) between the pushed chunks and a [`std::io::Write`] that reads the plain bytes. Memory is
//! flate2's window and buffer, whatever the sizes. The caller counts and caps the plain bytes in
//! its writer, so a decompression bomb is refused at the chunk that crosses the cap, never
//! inflated past it.

use std::io::Write;

use flate2::write::MultiGzDecoder;

/// The first two bytes of every gzip member (RFC 1952).
pub(crate) const MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A gzip stream being inflated into `W`.
pub(crate) struct Gunzip<W: Write> {
    decoder: MultiGzDecoder<W>,
}

impl<W: Write> Gunzip<W> {
    pub(crate) fn new(plain: W) -> Self {
        Self {
            decoder: MultiGzDecoder::new(plain),
        }
    }

    /// The writer of the plain bytes.
    pub(crate) fn plain(&mut self) -> &mut W {
        self.decoder.get_mut()
    }

    pub(crate) fn plain_ref(&self) -> &W {
        self.decoder.get_ref()
    }

    /// Inflates `input` into the writer. An error is the writer's, or the stream's
    /// (`InvalidInput`/`InvalidData`: a bad header, corrupt data, a wrong checksum).
    pub(crate) fn push(&mut self, input: &[u8]) -> std::io::Result<()> {
        self.decoder.write_all(input)
    }

    /// Inflates what is left, keeping the writer (whose error can then be read).
    pub(crate) fn try_finish(&mut self) -> std::io::Result<()> {
        self.decoder.try_finish()
    }

    /// Ends the stream and returns the writer; a stream cut off inside a member is an error.
    pub(crate) fn finish(self) -> std::io::Result<W> {
        self.decoder.finish()
    }
}

/// What a gzip stream's own error says, for an upload's author.
pub(crate) fn describe(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::WriteZero => {
            "the gzip stream is truncated (the file was cut off)".to_owned()
        }
        _ => format!("not a valid gzip stream: {e}"),
    }
}
