//! Streaming run uploads in load-tool formats: a raw body (`?format=`, or detected), or
//! `multipart/form-data` with one part per file (single-endpoint tools: the part's name is the
//! label) and an optional `map` part. Bytes go to the parser as they arrive; nothing buffers
//! the whole file. Reading one file (format detection, parsing, SHA-256) is
//! `budget_ingest::reader`; this module is the HTTP side: limits, multipart parts, API errors.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::CONTENT_TYPE;
use budget_api::runs::{RunSource, UploadQuery};
use budget_ingest::reader::{FileReader, ReadError};
use budget_ingest::{Extracted, Format, IngestError, Options, TimeUnit};
use futures_util::StreamExt;
use serde_json::json;

use crate::error::{ApiError, ApiResult, Code};
use crate::http::bodies::body_error;
use crate::state::AppState;

use super::turns::too_slow;
pub use super::turns::{Turn, Uploads, MIN_PACE, UPLOADS_AT_ONCE, UPLOADS_PER_TOKEN};

/// What the query string says about an upload, read: the format and unit known to the reader,
/// the label map a JSON object.
pub struct UploadOptions {
    pub format: Option<Format>,
    pub unit: Option<TimeUnit>,
    pub label: Option<String>,
    pub map: BTreeMap<String, String>,
}

impl UploadOptions {
    pub fn parse(query: UploadQuery) -> ApiResult<Self> {
        let format = match query.format.as_deref() {
            None | Some("") => None,
            Some(f) => Some(Format::parse(f).ok_or_else(|| {
                let known: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
                ApiError::bad_request(format!(
                    "unknown format {f:?}; use one of {}",
                    known.join(", ")
                ))
            })?),
        };
        let unit = match query.unit.as_deref() {
            None | Some("") => None,
            Some(u) => Some(TimeUnit::parse(u).ok_or_else(|| {
                ApiError::bad_request(format!("unknown unit {u:?}; use ns, us, ms or s"))
            })?),
        };
        let map = match query.map {
            None => BTreeMap::new(),
            Some(raw) => parse_map(raw.as_bytes(), "query parameter map")?,
        };
        Ok(Self {
            format,
            unit,
            label: query.label.filter(|l| !l.is_empty()),
            map,
        })
    }
}

fn parse_map(raw: &[u8], what: &str) -> ApiResult<BTreeMap<String, String>> {
    serde_json::from_slice(raw).map_err(|e| {
        ApiError::validation(
            format!("{what} must be a JSON object of label → segment id: {e}"),
            json!({"violations": [{"pointer": "/map", "message": e.to_string()}]}),
        )
    })
}

fn ingest_error(name: Option<&str>, e: IngestError) -> ApiError {
    let prefix = name.map(|n| format!("{n}: ")).unwrap_or_default();
    ApiError::validation(
        format!("{prefix}{e}"),
        json!({"file": name, "line": e.line, "field": e.field, "message": e.message}),
    )
}

fn too_large(limit: u64) -> ApiError {
    ApiError::new(
        Code::PayloadTooLarge,
        format!("the upload exceeds the limit of {limit} bytes (max_upload_bytes)"),
    )
    .with_details(json!({"limit_bytes": limit}))
}

/// The most bytes of `map` parts (JSON objects of label → segment id) a multipart upload may
/// carry, all of them together; they count against `max_upload_bytes` too.
pub const MAX_MAP_BYTES: usize = 64 * 1024;

/// The most file parts one multipart upload may carry (each keeps a parser's state).
pub const MAX_FILES: usize = 256;

/// The most of a multipart body that is not its parts' data: its preamble, the parts' headers
/// and the boundaries, which the multipart parser holds until it has found their end.
pub const MAX_MULTIPART_AHEAD: u64 = 1024 * 1024;

/// A multipart body's bytes read so far, those of them handed out as parts' data, and why the
/// body was stopped, if it was.
struct Meter {
    limit: u64,
    read: AtomicU64,
    handed: AtomicU64,
    stopped: AtomicU8,
    /// Why the body could not be read, if it could not: it stopped arriving, or lost its
    /// turn ([`super::turns::TooSlow`]), or the client cut it off.
    failed: Mutex<Option<ApiError>>,
}

const TOO_LARGE: u8 = 1;
const AHEAD: u8 = 2;

impl Meter {
    /// `data` handed out: it no longer counts as read ahead.
    fn hand(&self, data: usize) {
        self.handed.fetch_add(data as u64, Relaxed);
    }

    /// Counts a chunk read from the body; stops the body past `limit` in all, or when more
    /// than [`MAX_MULTIPART_AHEAD`] of it is not parts' data handed out (the parser would hold
    /// it all, scanning it again at every chunk, to find a boundary or a header's end).
    fn count(&self, chunk: usize) -> Result<(), &'static str> {
        let read = self.read.fetch_add(chunk as u64, Relaxed) + chunk as u64;
        let (why, message) = if read > self.limit {
            (TOO_LARGE, "the upload exceeds max_upload_bytes")
        } else if read.saturating_sub(self.handed.load(Relaxed)) > MAX_MULTIPART_AHEAD {
            (
                AHEAD,
                "the multipart body holds too much outside its parts' data",
            )
        } else {
            return Ok(());
        };
        self.stopped.store(why, Relaxed);
        Err(message)
    }

    /// The API error of a multipart body that could not be read: the limit that stopped it,
    /// or what the parser found wrong.
    fn error(&self, e: multer::Error) -> ApiError {
        if let Some(failed) = self.failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return failed;
        }
        match self.stopped.load(Relaxed) {
            TOO_LARGE => too_large(self.limit),
            AHEAD => ApiError::new(
                Code::PayloadTooLarge,
                format!(
                    "the multipart body holds more than {MAX_MULTIPART_AHEAD} bytes outside its \
                     parts' data (a preamble, part headers, boundaries); each part starts with a \
                     boundary line and a few header lines"
                ),
            )
            .with_details(json!({"limit_bytes": MAX_MULTIPART_AHEAD})),
            _ => ApiError::bad_request(format!("invalid multipart body: {e}")),
        }
    }
}

fn map_too_large() -> ApiError {
    ApiError::new(
        Code::PayloadTooLarge,
        format!(
            "the map parts exceed {MAX_MAP_BYTES} bytes together; a label map is a small JSON object"
        ),
    )
    .with_details(json!({"limit_bytes": MAX_MAP_BYTES}))
}

/// The API error of a file that could not be read, with the messages and details the API has
/// always answered.
fn read_error(name: Option<&str>, e: ReadError) -> ApiError {
    let prefix = name.map(|n| format!("{n}: ")).unwrap_or_default();
    match e {
        ReadError::Undetected => ApiError::validation(
            format!(
                "{prefix}cannot tell the load-test format from the content; pass ?format=locust|locust_json|oha|k6|k6_points|artillery|autocannon|jmeter|hdrhistogram|wrk2"
            ),
            json!({"file": name}),
        ),
        ReadError::Unsupported(u) => ApiError::validation(
            format!("{prefix}{}", ReadError::Unsupported(u.clone())),
            json!({"file": name, "recognised": u.what, "instead": u.instead}),
        ),
        ReadError::Gzip(why) => {
            ApiError::validation(format!("{prefix}{why}"), json!({"file": name}))
        }
        ReadError::TooLarge { limit } => too_large(limit),
        ReadError::Native => ApiError::bad_request(
            "native runs are uploaded as one application/json body, not as a load-tool file",
        ),
        ReadError::Empty => {
            ApiError::validation(format!("{prefix}the file is empty"), json!({"file": name}))
        }
        ReadError::Ingest(e) => ingest_error(name, e),
    }
}

/// Feeds `chunk` to `file`. Parsing is CPU work: keep it off the async workers' hot path.
fn push(file: &mut FileReader, chunk: &[u8]) -> ApiResult<()> {
    tokio::task::block_in_place(|| file.push(chunk)).map_err(|e| read_error(file.name(), e))
}

/// Ends `file`: what it holds and where it came from.
fn finish(file: FileReader) -> ApiResult<(Extracted, RunSource)> {
    let name = file.name().map(str::to_owned);
    let (extracted, source) = tokio::task::block_in_place(|| file.finish())
        .map_err(|e| read_error(name.as_deref(), e))?;
    let source = RunSource {
        name: source.name,
        format: source.format.as_str().into(),
        sha256: source.sha256,
        size: source.size as i64,
        percentiles: Some(source.format.percentile_method().into()),
        notes: extracted.notes.clone(),
    };
    Ok((extracted, source))
}

/// Why an upload's body could not be read: it lost its turn ([`super::turns::TooSlow`]), or
/// as any body ([`body_error`]).
fn upload_body_error(e: axum::Error, limit: u64) -> ApiError {
    too_slow(&e).unwrap_or_else(|| body_error(e, limit as usize, "max_upload_bytes"))
}

/// Reads a raw (non-multipart) body as one file.
pub async fn read_raw(
    state: &AppState,
    req: Request,
    q: &UploadOptions,
) -> ApiResult<(Vec<Extracted>, Vec<RunSource>)> {
    let limit = state.settings.max_upload_bytes;
    let options = Options {
        unit: q.unit,
        label: q.label.clone(),
    };
    // A gzip body (`Content-Encoding: gzip`, or a `.gz` file) is inflated as it streams; its
    // plain bytes count against the same limit.
    let mut file = FileReader::new(q.label.clone(), q.format, options).with_limit(limit);
    if content_encoding_gzip(req.headers())? {
        file = file.gzip_required();
    }
    let mut stream = req.into_body().into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| upload_body_error(e, limit))?;
        if file.size() + chunk.len() as u64 > limit {
            return Err(too_large(limit));
        }
        push(&mut file, &chunk)?;
    }
    let (extracted, source) = finish(file)?;
    Ok((vec![extracted], vec![source]))
}

/// Reads a multipart body: every part but `map` is a file.
pub async fn read_multipart(
    state: &AppState,
    req: Request,
    q: &UploadOptions,
) -> ApiResult<(Vec<Extracted>, Vec<RunSource>, BTreeMap<String, String>)> {
    let limit = state.settings.max_upload_bytes;
    let boundary = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok())
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid multipart body: Content-Type multipart/form-data needs a boundary",
            )
        })?;
    // Every byte of the body counts against the limit, and no more than
    // MAX_MULTIPART_AHEAD of it is held ahead of the parts' data.
    let meter = Arc::new(Meter {
        limit,
        read: AtomicU64::new(0),
        handed: AtomicU64::new(0),
        stopped: AtomicU8::new(0),
        failed: Mutex::default(),
    });
    let counted = Arc::clone(&meter);
    let body = req.into_body().into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| {
            let why = e.to_string();
            *counted.failed.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(upload_body_error(e, limit));
            why
        })?;
        counted.count(chunk.len())?;
        Ok::<_, String>(chunk)
    });
    let mut multipart = multer::Multipart::new(body, boundary);
    let mut files = Vec::new();
    let mut sources = Vec::new();
    let mut map = q.map.clone();
    // The map parts' bytes together: more parts named `map` hold no more than one.
    let mut map_bytes = 0usize;
    // Plain (decompressed) bytes of the files so far: gzip parts count against the limit as
    // they inflate.
    let mut plain = 0u64;
    while let Some(mut field) = multipart.next_field().await.map_err(|e| meter.error(e))? {
        let name = field.name().map(str::to_owned).filter(|n| !n.is_empty());
        if name.as_deref() == Some("map") {
            let mut bytes = Vec::new();
            while let Some(chunk) = field.chunk().await.map_err(|e| meter.error(e))? {
                meter.hand(chunk.len());
                map_bytes += chunk.len();
                if map_bytes > MAX_MAP_BYTES {
                    return Err(map_too_large());
                }
                bytes.extend_from_slice(&chunk);
            }
            map.extend(parse_map(&bytes, "the map part")?);
            continue;
        }
        if files.len() >= MAX_FILES {
            return Err(ApiError::validation(
                format!("a multipart upload holds at most {MAX_FILES} files"),
                json!({"limit_files": MAX_FILES}),
            ));
        }
        let label = name
            .clone()
            .or_else(|| field.file_name().map(str::to_owned));
        let options = Options {
            unit: q.unit,
            label: label.clone(),
        };
        let mut file =
            FileReader::new(label, q.format, options).with_limit(limit.saturating_sub(plain));
        while let Some(chunk) = field.chunk().await.map_err(|e| meter.error(e))? {
            meter.hand(chunk.len());
            push(&mut file, &chunk)?;
        }
        plain += file.plain_size();
        let (extracted, source) = finish(file)?;
        files.push(extracted);
        sources.push(source);
    }
    if files.is_empty() {
        return Err(ApiError::validation(
            "the multipart upload has no file part",
            json!({"violations": [{"pointer": "", "message": "add one part per load-test file"}]}),
        ));
    }
    if let Some(first) = files.first().map(|f| f.format) {
        if files.iter().any(|f| f.format != first) {
            return Err(ApiError::bad_request(
                "all files of one run must be in the same format",
            ));
        }
    }
    Ok((files, sources, map))
}

/// Whether a body is a load tool's file, from its first [`SNIFF_BYTES`](budget_ingest::reader::SNIFF_BYTES)
/// bytes (whatever its Content-Type), and the request with its body whole again.
pub async fn peek_tool(req: Request) -> ApiResult<(Request, bool)> {
    let (parts, body) = req.into_parts();
    let mut stream = body.into_data_stream();
    let mut head = bytes::BytesMut::new();
    while head.len() < budget_ingest::reader::SNIFF_BYTES {
        match stream.next().await {
            Some(chunk) => head.extend_from_slice(
                &chunk.map_err(|e| body_error(e, usize::MAX, "max_upload_bytes"))?,
            ),
            None => break,
        }
    }
    let tool = budget_ingest::reader::is_load_tool_file(&head);
    let first = futures_util::stream::once(std::future::ready(Ok::<_, axum::Error>(head.freeze())));
    let body = Body::from_stream(first.chain(stream));
    Ok((Request::from_parts(parts, body), tool))
}

/// Whether the body is `Content-Encoding: gzip`; any other encoding is refused (415).
fn content_encoding_gzip(headers: &axum::http::HeaderMap) -> ApiResult<bool> {
    let Some(v) = headers.get(axum::http::header::CONTENT_ENCODING) else {
        return Ok(false);
    };
    let v = v.to_str().unwrap_or("").trim().to_ascii_lowercase();
    match v.as_str() {
        "" | "identity" => Ok(false),
        "gzip" | "x-gzip" => Ok(true),
        other => Err(ApiError::new(
            Code::UnsupportedMediaType,
            format!("Content-Encoding {other:?} is not supported: send the file as it is, or gzip-compressed (Content-Encoding: gzip)"),
        )),
    }
}

pub fn is_multipart(req: &Request<Body>) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.trim()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        })
}

pub fn is_json(req: &Request<Body>) -> bool {
    crate::http::extract::is_json(
        req.headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    )
}
