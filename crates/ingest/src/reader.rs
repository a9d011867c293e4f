//! Reading one uploaded file whatever the transport: the bytes arrive in chunks
//! ([`FileReader::push`]), the first [`SNIFF_BYTES`] are collected, the format is detected from
//! them when the caller does not name it (a file budgetd can name but does not read — another
//! output of a supported tool, an archive — is refused saying what it is and what to upload
//! instead, [`ReadError::Unsupported`]), the parser is fed as the chunks come, and the file's
//! SHA-256 and size are taken on the way. [`FileReader::finish`] returns what the parser extracted and the
//! [`Source`] that identifies the file. The HTTP server drives it from a raw body or from each
//! multipart part; nothing here knows about either.

use sha2::{Digest, Sha256};

use crate::format::unsupported::{recognise, Unsupported};
use crate::{detect, parser, Extracted, Format, Ingest, IngestError, Options};

/// Bytes collected before the format is detected from them (when it is not given).
pub const SNIFF_BYTES: usize = 4096;

/// Whether the first bytes of an upload are a load tool's file (a format is detected from
/// them) rather than a native run.
pub fn is_load_tool_file(head: &[u8]) -> bool {
    detect(head).is_some()
}

/// Where the extracted statistics came from: one uploaded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The file's name (a multipart part's name or file name, the raw body's label).
    pub name: Option<String>,
    pub format: Format,
    /// Lowercase hex SHA-256 of the file's bytes.
    pub sha256: String,
    pub size: u64,
}

/// Why a file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// No format was given and the first bytes match none (or several) of the load-tool formats.
    #[error("cannot tell the load-test format from the content")]
    Undetected,
    /// The file is one budgetd can name but does not read (Locust's history CSV, oha's text
    /// output, HistogramLogProcessor's `.hgrm`, a zip archive, …).
    #[error("this is {}, which budgetd does not read: {}", .0.what, .0.instead)]
    Unsupported(Unsupported),
    /// [`Format::Native`] is a JSON document, not a load-tool file.
    #[error("native runs are not load-tool files")]
    Native,
    /// The file has no bytes.
    #[error("the file is empty")]
    Empty,
    /// The parser refused the content.
    #[error(transparent)]
    Ingest(#[from] IngestError),
}

/// One file of an upload, read as its chunks arrive.
pub struct FileReader {
    name: Option<String>,
    format: Option<Format>,
    options: Options,
    parser: Option<Box<dyn Ingest>>,
    /// The first bytes, until the parser is chosen.
    head: Vec<u8>,
    sha: Sha256,
    size: u64,
}

impl std::fmt::Debug for FileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("name", &self.name)
            .field("format", &self.format)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl FileReader {
    /// A reader of the file `name` in `format` (detected from the content when `None`).
    pub fn new(name: Option<String>, format: Option<Format>, options: Options) -> Self {
        Self {
            name,
            format,
            options,
            parser: None,
            head: Vec::new(),
            sha: Sha256::new(),
            size: 0,
        }
    }

    /// The file's name, as given to [`FileReader::new`].
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Bytes pushed so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Feeds the next bytes of the file (chunks may be cut anywhere). This is CPU work that
    /// may also wait for the parser's own threads (the HdrHistogram parser decodes on several):
    /// from async code, call it (and [`FileReader::finish`]) where blocking is allowed, e.g.
    /// inside `tokio::task::block_in_place` or `spawn_blocking`, as the server does.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), ReadError> {
        self.sha.update(chunk);
        self.size += chunk.len() as u64;
        match &mut self.parser {
            Some(p) => Ok(p.push(chunk)?),
            None => {
                self.head.extend_from_slice(chunk);
                if self.head.len() >= SNIFF_BYTES {
                    self.start()?;
                }
                Ok(())
            }
        }
    }

    /// Ends the file: what the parser extracted, and where it came from.
    pub fn finish(mut self) -> Result<(Extracted, Source), ReadError> {
        if self.size == 0 {
            return Err(ReadError::Empty);
        }
        if self.parser.is_none() {
            self.start()?;
        }
        let parser = self.parser.take().expect("started above");
        let extracted = parser.finish()?;
        let source = Source {
            name: self.name,
            format: extracted.format,
            sha256: hex::encode(self.sha.finalize()),
            size: self.size,
        };
        Ok((extracted, source))
    }

    /// Chooses the parser (detecting the format from the head when not given) and feeds it the
    /// head. A head recognised as a file budgetd does not read is refused as such, also when a
    /// format is given (a `.hgrm` named `hdrhistogram` is no interval log).
    fn start(&mut self) -> Result<(), ReadError> {
        let detected = detect(&self.head);
        if self
            .format
            .map_or(detected.is_none(), |f| detected != Some(f))
        {
            if let Some(what) = recognise(&self.head) {
                return Err(ReadError::Unsupported(what));
            }
        }
        let format = match self.format {
            Some(f) => f,
            None => detected.ok_or(ReadError::Undetected)?,
        };
        if format == Format::Native {
            return Err(ReadError::Native);
        }
        self.format = Some(format);
        let mut parser = parser(format, &self.options)?;
        let head = std::mem::take(&mut self.head);
        parser.push(&head)?;
        self.parser = Some(parser);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, FIXTURES, SMALL_CHUNKS};

    fn read(
        input: &[u8],
        format: Option<Format>,
        options: &Options,
        chunk: usize,
    ) -> Result<(Extracted, Source), ReadError> {
        let mut reader = FileReader::new(Some("f".into()), format, options.clone());
        for part in input.chunks(chunk.max(1)) {
            reader.push(part)?;
        }
        assert_eq!(reader.size(), input.len() as u64);
        reader.finish()
    }

    /// Every fixture is detected as its format and reads as its parser reads it, with the same
    /// result in chunks of every small size, and its SHA-256 and size.
    #[test]
    fn fixtures_are_detected_and_read_in_every_chunking() {
        for f in FIXTURES {
            let options = testkit::options(f.format);
            let whole = read(f.bytes, None, &options, f.bytes.len());
            let direct = crate::read_all(crate::parser(f.format, &options).unwrap(), f.bytes, 4096);
            match (&whole, direct) {
                (Ok((got, source)), Ok(want)) => {
                    assert_eq!(got, &want, "{}", f.name);
                    assert_eq!(source.format, f.format, "{}", f.name);
                    assert_eq!(source.size, f.bytes.len() as u64);
                    assert_eq!(source.sha256, hex::encode(Sha256::digest(f.bytes)));
                }
                (Err(ReadError::Ingest(got)), Err(want)) => assert_eq!(got, &want, "{}", f.name),
                (got, want) => panic!("{}: {got:?} / {want:?}", f.name),
            }
            for chunk in (1..=SMALL_CHUNKS).chain([SNIFF_BYTES - 1, SNIFF_BYTES + 1]) {
                assert_eq!(
                    read(f.bytes, None, &options, chunk),
                    whole,
                    "{} / {chunk}",
                    f.name
                );
            }
        }
    }

    #[test]
    fn undetected_native_and_empty_files() {
        let o = Options::default();
        let garbage = b"hello\nworld\n";
        assert_eq!(
            read(garbage, None, &o, 3).unwrap_err(),
            ReadError::Undetected
        );
        let native = read(b"{}", Some(Format::Native), &o, 1).unwrap_err();
        assert_eq!(native, ReadError::Native);
        assert_eq!(read(b"", None, &o, 1).unwrap_err(), ReadError::Empty);
        assert_eq!(
            read(b"", Some(Format::Oha), &o, 1).unwrap_err(),
            ReadError::Empty
        );
        // The given format wins over detection; its parser's error comes back as is.
        let err = read(garbage, Some(Format::Jmeter), &o, 5).unwrap_err();
        assert!(
            matches!(&err, ReadError::Ingest(e) if e.line == Some(1)),
            "{err:?}"
        );
    }
}
