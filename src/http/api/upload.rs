//! Streaming run uploads in load-tool formats: a raw body (`?format=`, or detected), or
//! `multipart/form-data` with one part per file (single-endpoint tools: the part's name is the
//! label) and an optional `map` part. Bytes go to the parser as they arrive; nothing buffers
//! the whole file.

use std::collections::{BTreeMap, HashMap};

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header::CONTENT_TYPE;
use budget_core::ingest::{self, Extracted, Format, Ingest, IngestError, Options, TimeUnit};
use futures_util::StreamExt;
use serde_json::json;
use sha2::Digest;

use crate::error::{ApiError, ApiResult, Code};
use crate::state::AppState;
use crate::store::RunSource;

/// What the query string says about an upload.
pub struct UploadQuery {
    pub format: Option<Format>,
    pub unit: Option<TimeUnit>,
    pub label: Option<String>,
    pub map: BTreeMap<String, String>,
}

impl UploadQuery {
    pub fn parse(query: &HashMap<String, String>) -> ApiResult<Self> {
        let format = match query.get("format").map(String::as_str) {
            None | Some("") => None,
            Some(f) => Some(Format::parse(f).ok_or_else(|| {
                let known: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
                ApiError::bad_request(format!(
                    "unknown format {f:?}; use one of {}",
                    known.join(", ")
                ))
            })?),
        };
        let unit = match query.get("unit").map(String::as_str) {
            None | Some("") => None,
            Some(u) => Some(TimeUnit::parse(u).ok_or_else(|| {
                ApiError::bad_request(format!("unknown unit {u:?}; use ns, us, ms or s"))
            })?),
        };
        let map = match query.get("map") {
            None => BTreeMap::new(),
            Some(raw) => parse_map(raw.as_bytes(), "query parameter map")?,
        };
        Ok(Self {
            format,
            unit,
            label: query.get("label").filter(|l| !l.is_empty()).cloned(),
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

/// The largest `map` part (a JSON object of label → segment id) a multipart upload may carry;
/// it counts against `max_upload_bytes` too.
pub const MAX_MAP_BYTES: usize = 64 * 1024;

/// The most file parts one multipart upload may carry (each keeps a parser's state).
pub const MAX_FILES: usize = 256;

fn map_too_large() -> ApiError {
    ApiError::new(
        Code::PayloadTooLarge,
        format!("the map part exceeds {MAX_MAP_BYTES} bytes; a label map is a small JSON object"),
    )
    .with_details(json!({"limit_bytes": MAX_MAP_BYTES}))
}

/// Feeds one file, chunk by chunk, detecting the format from the first bytes when not given.
struct FileReader {
    name: Option<String>,
    format: Option<Format>,
    options: Options,
    parser: Option<Box<dyn Ingest>>,
    head: Vec<u8>,
    sha: sha2::Sha256,
    size: u64,
}

const SNIFF_BYTES: usize = 4096;

impl FileReader {
    fn new(name: Option<String>, format: Option<Format>, options: Options) -> Self {
        Self {
            name,
            format,
            options,
            parser: None,
            head: Vec::new(),
            sha: sha2::Sha256::new(),
            size: 0,
        }
    }

    fn start(&mut self) -> ApiResult<()> {
        let format = match self.format {
            Some(f) => f,
            None => ingest::detect(&self.head).ok_or_else(|| {
                ApiError::validation(
                    format!(
                        "{}cannot tell the load-test format from the content; pass ?format=locust|oha|k6|jmeter|hdrhistogram|wrk2",
                        self.name.as_ref().map(|n| format!("{n}: ")).unwrap_or_default()
                    ),
                    json!({"file": self.name}),
                )
            })?,
        };
        if format == Format::Native {
            return Err(ApiError::bad_request(
                "native runs are uploaded as one application/json body, not as a load-tool file",
            ));
        }
        self.format = Some(format);
        let mut parser = ingest::parser(format, &self.options)
            .map_err(|e| ingest_error(self.name.as_deref(), e))?;
        let head = std::mem::take(&mut self.head);
        push(&mut *parser, &head).map_err(|e| ingest_error(self.name.as_deref(), e))?;
        self.parser = Some(parser);
        Ok(())
    }

    fn push(&mut self, chunk: &[u8]) -> ApiResult<()> {
        self.sha.update(chunk);
        self.size += chunk.len() as u64;
        match &mut self.parser {
            Some(p) => push(&mut **p, chunk).map_err(|e| ingest_error(self.name.as_deref(), e)),
            None => {
                self.head.extend_from_slice(chunk);
                if self.head.len() >= SNIFF_BYTES || self.format.is_some() {
                    self.start()?;
                }
                Ok(())
            }
        }
    }

    fn finish(mut self) -> ApiResult<(Extracted, RunSource)> {
        if self.size == 0 {
            return Err(ApiError::validation(
                format!(
                    "{}the file is empty",
                    self.name
                        .as_ref()
                        .map(|n| format!("{n}: "))
                        .unwrap_or_default()
                ),
                json!({"file": self.name}),
            ));
        }
        if self.parser.is_none() {
            self.start()?;
        }
        let parser = self.parser.take().expect("started above");
        let extracted = tokio::task::block_in_place(|| parser.finish())
            .map_err(|e| ingest_error(self.name.as_deref(), e))?;
        let source = RunSource {
            name: self.name.clone(),
            format: extracted.format.as_str().into(),
            sha256: hex::encode(self.sha.finalize()),
            size: self.size as i64,
        };
        Ok((extracted, source))
    }
}

/// Parsing is CPU work: keep it off the async workers' hot path.
fn push(parser: &mut dyn Ingest, chunk: &[u8]) -> Result<(), IngestError> {
    tokio::task::block_in_place(|| parser.push(chunk))
}

/// Reads a raw (non-multipart) body as one file.
pub async fn read_raw(
    state: &AppState,
    req: Request,
    q: &UploadQuery,
) -> ApiResult<(Vec<Extracted>, Vec<RunSource>)> {
    let limit = state.settings.max_upload_bytes;
    let options = Options {
        unit: q.unit,
        label: q.label.clone(),
    };
    let mut file = FileReader::new(q.label.clone(), q.format, options);
    let mut stream = req.into_body().into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| crate::http::extract::body_error(e, limit as usize, "max_upload_bytes"))?;
        if file.size + chunk.len() as u64 > limit {
            return Err(too_large(limit));
        }
        file.push(&chunk)?;
    }
    let (extracted, source) = file.finish()?;
    Ok((vec![extracted], vec![source]))
}

/// Reads a multipart body: every part but `map` is a file.
pub async fn read_multipart(
    state: &AppState,
    req: Request,
    q: &UploadQuery,
) -> ApiResult<(Vec<Extracted>, Vec<RunSource>, BTreeMap<String, String>)> {
    let limit = state.settings.max_upload_bytes;
    let mut multipart = Multipart::from_request(req, state)
        .await
        .map_err(|e| ApiError::bad_request(format!("invalid multipart body: {e}")))?;
    let mut files = Vec::new();
    let mut sources = Vec::new();
    let mut map = q.map.clone();
    let mut total = 0u64;
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::bad_request(format!("invalid multipart body: {e}")))?
    {
        let name = field.name().map(str::to_owned).filter(|n| !n.is_empty());
        if name.as_deref() == Some("map") {
            let mut bytes = Vec::new();
            while let Some(chunk) = field
                .chunk()
                .await
                .map_err(|e| ApiError::bad_request(format!("invalid map part: {e}")))?
            {
                total += chunk.len() as u64;
                if total > limit {
                    return Err(too_large(limit));
                }
                if bytes.len() + chunk.len() > MAX_MAP_BYTES {
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
        let mut file = FileReader::new(label, q.format, options);
        while let Some(chunk) = field
            .chunk()
            .await
            .map_err(|e| ApiError::bad_request(format!("invalid multipart body: {e}")))?
        {
            total += chunk.len() as u64;
            if total > limit {
                return Err(too_large(limit));
            }
            file.push(&chunk)?;
        }
        let (extracted, source) = file.finish()?;
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
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|m| {
            let m = m.trim().to_ascii_lowercase();
            m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
        })
}
