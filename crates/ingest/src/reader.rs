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
use crate::framing::gzip::{self, Gunzip, MAGIC};
use crate::{detect, parser, Extracted, Format, Ingest, IngestError, Options};

/// Bytes collected before the format is detected from them (when it is not given).
pub const SNIFF_BYTES: usize = 4096;

/// Whether the first bytes of an upload are a load tool's file (a format is detected from
/// them, or a gzip stream) rather than a native run.
pub fn is_load_tool_file(head: &[u8]) -> bool {
    head.starts_with(&MAGIC) || detect(head).is_some()
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
    /// The file is gzip-compressed and its stream is broken (or it was said to be gzip and is
    /// not).
    #[error("{0}")]
    Gzip(String),
    /// The file's plain bytes (decompressed, for a gzip file) pass the reader's limit.
    #[error(
        "the file decompresses to more than {limit} bytes, the upload limit (max_upload_bytes)"
    )]
    TooLarge { limit: u64 },
    /// The parser refused the content.
    #[error(transparent)]
    Ingest(#[from] IngestError),
}

/// One file of an upload, read as its chunks arrive.
pub struct FileReader {
    name: Option<String>,
    sha: Sha256,
    size: u64,
    /// Whether the caller said the file is gzip-compressed (`Content-Encoding: gzip`).
    gzip_required: bool,
    /// The file's first bytes, until it is known whether it is gzip.
    magic: Vec<u8>,
    body: Body,
}

/// The file's bytes, as they go to the parser.
enum Body {
    /// Not known yet whether the file is gzip-compressed (fewer than 2 bytes seen).
    Undecided(Plain),
    Plain(Plain),
    Gzip(Box<Gunzip<Plain>>),
    /// Taken apart by `finish`.
    Gone,
}

/// The plain bytes of a file: collected up to [`SNIFF_BYTES`] while the format is chosen, then
/// pushed to the parser; counted and capped.
struct Plain {
    format: Option<Format>,
    options: Options,
    parser: Option<Box<dyn Ingest>>,
    /// The first bytes, until the parser is chosen.
    head: Vec<u8>,
    bytes: u64,
    limit: u64,
    /// The error that made a write from the gzip decoder fail.
    error: Option<ReadError>,
}

impl std::fmt::Debug for FileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileReader")
            .field("name", &self.name)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl FileReader {
    /// A reader of the file `name` in `format` (detected from the content when `None`). A file
    /// that starts like a gzip stream is decompressed as it arrives.
    pub fn new(name: Option<String>, format: Option<Format>, options: Options) -> Self {
        Self {
            name,
            sha: Sha256::new(),
            size: 0,
            gzip_required: false,
            magic: Vec::new(),
            body: Body::Undecided(Plain {
                format,
                options,
                parser: None,
                head: Vec::new(),
                bytes: 0,
                limit: u64::MAX,
                error: None,
            }),
        }
    }

    /// Refuses a file whose plain bytes (decompressed, for a gzip file) pass `limit`.
    pub fn with_limit(mut self, limit: u64) -> Self {
        if let Body::Undecided(p) = &mut self.body {
            p.limit = limit;
        }
        self
    }

    /// The file must be a gzip stream (the transport said so: `Content-Encoding: gzip`).
    pub fn gzip_required(mut self) -> Self {
        self.gzip_required = true;
        self
    }

    /// The file's name, as given to [`FileReader::new`].
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Bytes pushed so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Plain bytes read so far: the decompressed size of a gzip file.
    pub fn plain_size(&self) -> u64 {
        match &self.body {
            Body::Undecided(p) | Body::Plain(p) => p.bytes,
            Body::Gzip(g) => g.plain_ref().bytes,
            Body::Gone => 0,
        }
    }

    /// Feeds the next bytes of the file (chunks may be cut anywhere). This is CPU work that
    /// may also wait for the parser's own threads (the HdrHistogram parser decodes on several):
    /// from async code, call it (and [`FileReader::finish`]) where blocking is allowed, e.g.
    /// inside `tokio::task::block_in_place` or `spawn_blocking`, as the server does.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), ReadError> {
        self.sha.update(chunk);
        self.size += chunk.len() as u64;
        if matches!(self.body, Body::Undecided(_)) {
            let take = (MAGIC.len() - self.magic.len()).min(chunk.len());
            self.magic.extend_from_slice(&chunk[..take]);
            if self.magic.len() < MAGIC.len() {
                return Ok(());
            }
            let magic = std::mem::take(&mut self.magic);
            self.decide(&magic)?;
            self.write(&magic)?;
            return self.write(&chunk[take..]);
        }
        self.write(chunk)
    }

    /// Chooses plain or gzip from the file's first bytes.
    fn decide(&mut self, first: &[u8]) -> Result<(), ReadError> {
        let Body::Undecided(plain) = std::mem::replace(&mut self.body, Body::Gone) else {
            return Ok(());
        };
        let gzip = first == MAGIC;
        if self.gzip_required && !gzip {
            return Err(ReadError::Gzip(
                "the upload says Content-Encoding: gzip, but the body is not a gzip stream".into(),
            ));
        }
        self.body = if gzip {
            Body::Gzip(Box::new(Gunzip::new(plain)))
        } else {
            Body::Plain(plain)
        };
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ReadError> {
        if bytes.is_empty() {
            return Ok(());
        }
        match &mut self.body {
            Body::Plain(p) | Body::Undecided(p) => p.push(bytes),
            Body::Gzip(g) => g.push(bytes).map_err(|e| {
                g.plain()
                    .error
                    .take()
                    .unwrap_or_else(|| ReadError::Gzip(gzip::describe(&e)))
            }),
            Body::Gone => Ok(()),
        }
    }

    /// Ends the file: what the parser extracted, and where it came from.
    pub fn finish(mut self) -> Result<(Extracted, Source), ReadError> {
        if self.size == 0 {
            return Err(ReadError::Empty);
        }
        if matches!(self.body, Body::Undecided(_)) {
            // Fewer than two bytes: not gzip.
            let magic = std::mem::take(&mut self.magic);
            self.decide(&magic)?;
            self.write(&magic)?;
        }
        let (plain, gzip) = match std::mem::replace(&mut self.body, Body::Gone) {
            Body::Gzip(mut g) => {
                // What flate2 still holds is written now: a refusal of the plain bytes is the
                // writer's error, not the stream's.
                if let Err(e) = g.try_finish() {
                    let kept = g.plain().error.take();
                    return Err(kept.unwrap_or_else(|| ReadError::Gzip(gzip::describe(&e))));
                }
                let plain = (*g)
                    .finish()
                    .map_err(|e| ReadError::Gzip(gzip::describe(&e)))?;
                (plain, true)
            }
            Body::Plain(p) | Body::Undecided(p) => (p, false),
            Body::Gone => return Err(ReadError::Empty),
        };
        if let Some(e) = plain.error {
            return Err(e);
        }
        let plain_bytes = plain.bytes;
        let mut extracted = plain.finish()?;
        if gzip {
            extracted.notes.push(format!(
                "gzip-compressed: {} bytes uploaded, {plain_bytes} bytes decompressed",
                self.size
            ));
        }
        let source = Source {
            name: self.name,
            format: extracted.format,
            sha256: hex::encode(self.sha.finalize()),
            size: self.size,
        };
        Ok((extracted, source))
    }
}

impl Plain {
    fn push(&mut self, chunk: &[u8]) -> Result<(), ReadError> {
        self.bytes += chunk.len() as u64;
        if self.bytes > self.limit {
            return Err(ReadError::TooLarge { limit: self.limit });
        }
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

    fn finish(mut self) -> Result<Extracted, ReadError> {
        if self.bytes == 0 {
            return Err(ReadError::Empty);
        }
        if self.parser.is_none() {
            self.start()?;
        }
        let parser = self.parser.take().expect("started above");
        Ok(parser.finish()?)
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

/// The gzip decoder writes the plain bytes here; an error is kept for [`FileReader`] to answer.
impl std::io::Write for Plain {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.push(buf) {
            Ok(()) => Ok(buf.len()),
            Err(e) => {
                self.error = Some(e);
                Err(std::io::Error::other("the plain bytes were refused"))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{self, gunzip, FIXTURES, SMALL_CHUNKS};

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

    const POINTS_JSON_GZ: &[u8] = include_bytes!("../../../tests/fixtures/k6/points.json.gz");
    const POINTS_CSV_GZ: &[u8] = include_bytes!("../../../tests/fixtures/k6/points.csv.gz");

    fn gzip(plain: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(plain).unwrap();
        e.finish().unwrap()
    }

    /// A gzip file reads as its plain bytes do, in every chunking, detected from the plain
    /// bytes, with the SHA-256 and size of what was uploaded and a note of the compression.
    #[test]
    fn gzip_files_read_as_their_plain_bytes() {
        let o = Options::default();
        for gz in [POINTS_JSON_GZ, POINTS_CSV_GZ] {
            let plain = gunzip(gz);
            let (want, _) = read(&plain, None, &o, 4096).unwrap();
            let (got, source) = read(gz, None, &o, gz.len()).unwrap();
            assert_eq!(got.labels, want.labels);
            assert_eq!(source.format, Format::K6Points);
            assert_eq!(source.size, gz.len() as u64);
            assert_eq!(source.sha256, hex::encode(Sha256::digest(gz)));
            assert_eq!(
                got.notes.last().unwrap(),
                &format!(
                    "gzip-compressed: {} bytes uploaded, {} bytes decompressed",
                    gz.len(),
                    plain.len()
                )
            );
            for chunk in [1, 2, 3, 7, 1000] {
                assert_eq!(read(gz, None, &o, chunk).unwrap().0, got, "{chunk}");
            }
        }
        // Any format, and members concatenated (as `cat a.gz b.gz` makes them).
        for f in FIXTURES
            .iter()
            .filter(|f| f.format != Format::Hdrhistogram)
            .take(6)
        {
            let options = testkit::options(f.format);
            let whole = read(f.bytes, None, &options, 4096);
            let (a, b) = f.bytes.split_at(f.bytes.len() / 2);
            let gz = [gzip(a), gzip(b)].concat();
            let got = read(&gz, None, &options, 5);
            match (whole, got) {
                (Ok((w, _)), Ok((g, _))) => assert_eq!(w.labels, g.labels, "{}", f.name),
                (Err(w), Err(g)) => assert_eq!(w, g, "{}", f.name),
                (w, g) => panic!("{}: {w:?} / {g:?}", f.name),
            }
        }
    }

    #[test]
    fn broken_and_oversized_gzip_streams() {
        let o = Options::default();
        let gz = POINTS_JSON_GZ;
        // Cut off: the stream (or the file) is truncated.
        let err = read(&gz[..gz.len() / 2], None, &o, 100).unwrap_err();
        assert!(
            matches!(&err, ReadError::Gzip(m) if m.contains("truncated"))
                || matches!(err, ReadError::Ingest(_)),
            "{err:?}"
        );
        let err = read(&gz[..gz.len() - 4], None, &o, 100).unwrap_err();
        assert!(matches!(&err, ReadError::Gzip(_)), "{err:?}");
        // Corrupt data: refused, never a panic.
        let mut bad = gz.to_vec();
        for b in bad.iter_mut().skip(40).step_by(97) {
            *b ^= 0x5a;
        }
        assert!(read(&bad, None, &o, 64).is_err());
        // A bomb: a few KiB that inflate to 64 MiB are refused at the cap, as they arrive.
        let bomb = gzip(&vec![b' '; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        let mut r = FileReader::new(None, Some(Format::K6Points), o.clone()).with_limit(1 << 20);
        let err = bomb
            .chunks(1024)
            .find_map(|c| r.push(c).err())
            .expect("refused before the end");
        assert_eq!(err, ReadError::TooLarge { limit: 1 << 20 });
        assert!(
            r.plain_size() <= (1 << 20) + (1 << 17),
            "{}",
            r.plain_size()
        );
        // In one push too: what flate2 still holds at the end is refused by `finish`.
        let mut r = FileReader::new(None, Some(Format::K6Points), o.clone()).with_limit(1 << 20);
        let over = r.push(&bomb).err();
        let err = over.or_else(|| r.finish().err()).unwrap();
        assert_eq!(err, ReadError::TooLarge { limit: 1 << 20 });
        // The plain limit holds for a plain file too.
        let mut r = FileReader::new(None, None, o.clone()).with_limit(10);
        assert_eq!(
            r.push(b"0123456789a"),
            Err(ReadError::TooLarge { limit: 10 })
        );
        // Content-Encoding: gzip on a body that is not.
        let r = FileReader::new(None, None, o.clone()).gzip_required();
        let mut r = r;
        assert!(
            matches!(r.push(b"Type,Name"), Err(ReadError::Gzip(m)) if m.contains("Content-Encoding"))
        );
        // One byte: not gzip, read as it is.
        assert_eq!(
            read(b"x", Some(Format::Jmeter), &o, 1).unwrap_err(),
            read(b"x", Some(Format::Jmeter), &o, 9).unwrap_err()
        );
    }
}
