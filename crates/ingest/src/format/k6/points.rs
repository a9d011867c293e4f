//! k6's raw points: `k6 run --out json=points.json` (NDJSON) or `--out csv=points.csv`, gzipped
//! when the file name ends in `.gz` (read through the reader's gzip framing). The only exact
//! per-request k6 source: every request is one `http_req_duration` point.
//!
//! ```text
//! {"type":"Metric","data":{"name":"http_req_duration","type":"trend",…},"metric":"http_req_duration"}
//! {"metric":"http_req_duration","type":"Point","data":{"time":"…","value":5.41,"tags":{"expected_response":"true","name":"inventory","status":"200",…}}}
//! ```
//! ```text
//! metric_name,timestamp,metric_value,check,error,error_code,expected_response,group,method,name,proto,scenario,service,status,subproto,tls_version,url,extra_tags,metadata
//! http_req_duration,1796164540,5.409959,,,,true,,GET,inventory,HTTP/1.1,default,,200,,,inventory,,
//! ```
//!
//! Only `http_req_duration` points are read; every other line (the `Metric` declarations, other
//! metrics' points) is checked for its framing and dropped. Per point: the label is the `name`
//! tag (k6 sets it to the URL when the script gives none), else `url`; the value (milliseconds,
//! as k6 writes trends) goes into the label's HDR histogram in µs (3 significant digits:
//! percentiles are nearest-rank, within 0.1 %); the request failed when its `expected_response`
//! tag is `false` (k6's own `http_req_failed` rule), or, without that tag, when its `status` tag
//! is `0` (no response) or 400 and above. A label whose points carry neither tag has unknown
//! failures. Memory: one histogram per label (at most [`MAX_LABELS`]) and one line or CSV record
//! at a time (at most 1 MiB), whatever the number of points.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

use crate::framing::csv::{first_line, CsvRecords, Record};
use crate::framing::lines::LineBuffer;
use crate::hdr::Recorder;
use crate::{Extracted, Format, Ingest, IngestError, Options};

/// Distinct labels accepted (each holds an HDR histogram).
pub const MAX_LABELS: usize = 256;
/// Longest NDJSON line accepted, in bytes.
const MAX_LINE: usize = 1 << 20;
/// Longest plausible latency: one hour, in milliseconds.
const MAX_LATENCY_MS: f64 = 3_600_000.0;

const DURATION: &str = "http_req_duration";
const CSV_HEADER: &[u8] = b"metric_name,timestamp,metric_value";

/// Whether the start of an input looks like k6's raw points: an NDJSON line of a `Metric` or
/// `Point` with a `metric`, or the CSV header `metric_name,timestamp,metric_value,…`.
pub fn sniff(head: &[u8]) -> bool {
    let line = first_line(head);
    if line.starts_with(CSV_HEADER) {
        return true;
    }
    let line = line.trim_ascii_start();
    line.starts_with(b"{")
        && contains(line, b"\"metric\":\"")
        && (contains(line, b"\"type\":\"Metric\"") || contains(line, b"\"type\":\"Point\""))
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

pub fn parser(_options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    Ok(Box::new(Points {
        shape: Shape::Unknown(Vec::new()),
        labels: Labels::default(),
    }))
}

struct Points {
    shape: Shape,
    labels: Labels,
}

enum Shape {
    /// The first bytes, until the first non-blank byte tells NDJSON from CSV.
    Unknown(Vec<u8>),
    Json(LineBuffer),
    Csv(Box<CsvRecords>, Option<Columns>),
}

/// Where the columns of k6's CSV are.
#[derive(Debug, Clone, Copy)]
struct Columns {
    metric: usize,
    value: usize,
    name: Option<usize>,
    url: Option<usize>,
    status: Option<usize>,
    expected: Option<usize>,
}

impl Ingest for Points {
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        if let Shape::Unknown(head) = &mut self.shape {
            head.extend_from_slice(chunk);
            let Some(&first) = head.iter().find(|b| !b.is_ascii_whitespace()) else {
                return Ok(());
            };
            let head = std::mem::take(head);
            self.shape = if first == b'{' {
                Shape::Json(LineBuffer::new(MAX_LINE))
            } else {
                Shape::Csv(Box::new(CsvRecords::new(b',')), None)
            };
            return self.feed(&head);
        }
        self.feed(chunk)
    }

    fn finish(mut self: Box<Self>) -> Result<Extracted, IngestError> {
        let labels = &mut self.labels;
        match &mut self.shape {
            Shape::Unknown(_) => {
                return Err(IngestError::new(
                    "empty input: expected k6 points (--out json or --out csv)",
                ))
            }
            Shape::Json(lines) => lines.finish(|no, line| json_line(labels, no, line))?,
            Shape::Csv(csv, columns) => csv.finish(|r| csv_record(labels, columns, r))?,
        }
        self.labels.result()
    }
}

impl Points {
    fn feed(&mut self, chunk: &[u8]) -> Result<(), IngestError> {
        let labels = &mut self.labels;
        match &mut self.shape {
            Shape::Unknown(_) => Ok(()),
            Shape::Json(lines) => {
                lines.push(chunk, |no, line| json_line(labels, no, line), too_long)
            }
            Shape::Csv(csv, columns) => csv.push(chunk, |r| csv_record(labels, columns, r)),
        }
    }
}

fn too_long(line: u64) -> IngestError {
    IngestError::at_line(
        line,
        format!("line longer than {MAX_LINE} bytes: not k6 points"),
    )
}

/// One NDJSON line as k6 writes it; only what is read.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    metric: Cow<'a, str>,
    #[serde(borrow)]
    data: Option<Data<'a>>,
}

#[derive(Deserialize)]
struct Data<'a> {
    value: Option<f64>,
    #[serde(borrow)]
    tags: Option<Tags<'a>>,
}

#[derive(Deserialize, Default)]
struct Tags<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    status: Option<Cow<'a, str>>,
    #[serde(borrow)]
    expected_response: Option<Cow<'a, str>>,
}

fn json_line(labels: &mut Labels, no: u64, line: &[u8]) -> Result<(), IngestError> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let l: Line<'_> = serde_json::from_slice(line).map_err(|e| {
        IngestError::at_line(
            no,
            format!(
                "not a k6 point (k6 run --out json writes one JSON object per line), column {}: {}",
                e.column(),
                strip_position(&e)
            ),
        )
    })?;
    if l.kind != "Point" || l.metric != DURATION {
        return Ok(());
    }
    let data = l
        .data
        .ok_or_else(|| IngestError::at_line(no, "a Point without data").field("data"))?;
    let value = data
        .value
        .ok_or_else(|| IngestError::at_line(no, "a Point without a value").field("data.value"))?;
    let tags = data.tags.unwrap_or_default();
    let failed = failed(
        tags.expected_response.as_deref(),
        tags.status.as_deref(),
        no,
        "data.tags",
    )?;
    let label = tags.name.or(tags.url).filter(|l| !l.is_empty());
    labels.record(no, label.as_deref(), value, failed, "data.value")
}

fn strip_position(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg,
    }
}

fn csv_record(
    labels: &mut Labels,
    columns: &mut Option<Columns>,
    rec: &Record<'_>,
) -> Result<(), IngestError> {
    let Some(c) = *columns else {
        *columns = Some(header(rec)?);
        return Ok(());
    };
    if rec.field(c.metric) != DURATION.as_bytes() {
        return Ok(());
    }
    let text = |i: Option<usize>, field: &str| -> Result<Option<&str>, IngestError> {
        match i.map(|i| rec.field(i)) {
            None | Some(b"") => Ok(None),
            Some(f) => std::str::from_utf8(f)
                .map(Some)
                .map_err(|_| IngestError::at_line(rec.line(), "not valid UTF-8").field(field)),
        }
    };
    let value = std::str::from_utf8(rec.field(c.value))
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| {
            IngestError::at_line(rec.line(), "not a number of milliseconds").field("metric_value")
        })?;
    let failed = failed(
        text(c.expected, "expected_response")?,
        text(c.status, "status")?,
        rec.line(),
        "status",
    )?;
    let label = match text(c.name, "name")? {
        Some(n) => Some(n),
        None => text(c.url, "url")?,
    };
    labels.record(rec.line(), label, value, failed, "metric_value")
}

fn header(rec: &Record<'_>) -> Result<Columns, IngestError> {
    let find = |name: &str| (0..rec.len()).find(|&i| rec.field(i) == name.as_bytes());
    let need = |name: &str| {
        find(name).ok_or_else(|| {
            IngestError::at_line(
                rec.line(),
                "missing column in the k6 CSV header (k6 run --out csv writes \
                 metric_name,timestamp,metric_value,…)",
            )
            .field(name.to_owned())
        })
    };
    Ok(Columns {
        metric: need("metric_name")?,
        value: need("metric_value")?,
        name: find("name"),
        url: find("url"),
        status: find("status"),
        expected: find("expected_response"),
    })
}

/// Whether a request failed, from its `expected_response` tag or else its `status` tag; `None`
/// when it carries neither.
fn failed(
    expected: Option<&str>,
    status: Option<&str>,
    line: u64,
    field: &str,
) -> Result<Option<bool>, IngestError> {
    match (expected, status) {
        (Some("true"), _) => Ok(Some(false)),
        (Some("false"), _) => Ok(Some(true)),
        (Some(other), _) => Err(IngestError::at_line(
            line,
            format!("expected_response is {other:?}: expected true or false"),
        )
        .field(field.to_owned())),
        (None, Some(s)) => match s.parse::<u16>() {
            Ok(code) => Ok(Some(code == 0 || code >= 400)),
            Err(_) => Err(IngestError::at_line(
                line,
                format!("status {s:?} is not an HTTP status"),
            )
            .field(field.to_owned())),
        },
        (None, None) => Ok(None),
    }
}

#[derive(Default)]
struct Labels {
    by_name: BTreeMap<String, Label>,
}

struct Label {
    recorder: Recorder,
    /// Whether every point said whether it failed.
    failures_known: bool,
}

impl Labels {
    fn record(
        &mut self,
        line: u64,
        label: Option<&str>,
        ms: f64,
        failed: Option<bool>,
        field: &str,
    ) -> Result<(), IngestError> {
        if !ms.is_finite() || ms < 0.0 {
            return Err(IngestError::at_line(line, format!("{ms} is not a latency"))
                .field(field.to_owned()));
        }
        if ms > MAX_LATENCY_MS {
            return Err(IngestError::at_line(
                line,
                format!("{ms} ms is over one hour: k6 writes http_req_duration in milliseconds"),
            )
            .field(field.to_owned()));
        }
        let label = label.unwrap_or(DURATION);
        let entry = match self.by_name.get_mut(label) {
            Some(e) => e,
            None => {
                if self.by_name.len() >= MAX_LABELS {
                    return Err(IngestError::at_line(
                        line,
                        format!(
                            "more than {MAX_LABELS} distinct name tags: give the requests of one \
                             endpoint one name (tags: {{ name: 'inventory' }})"
                        ),
                    ));
                }
                self.by_name.entry(label.to_owned()).or_insert(Label {
                    recorder: Recorder::new(),
                    failures_known: true,
                })
            }
        };
        entry.recorder.record_us((ms * 1000.0).round() as u64);
        match failed {
            Some(true) => entry.recorder.record_failure(),
            Some(false) => {}
            None => entry.failures_known = false,
        }
        Ok(())
    }

    fn result(self) -> Result<Extracted, IngestError> {
        let mut labels = Vec::new();
        let mut distributions = std::collections::BTreeMap::new();
        let mut unknown = Vec::new();
        for (name, l) in &self.by_name {
            let Some(mut stats) = l.recorder.stats(name) else {
                continue;
            };
            distributions.insert(name.clone(), l.recorder.distribution());
            if !l.failures_known {
                stats.failures = None;
                unknown.push(name.as_str());
            }
            labels.push(stats);
        }
        if labels.is_empty() {
            return Err(IngestError::new(
                "no http_req_duration point: did the k6 script make HTTP requests?",
            ));
        }
        let notes = if unknown.is_empty() {
            Vec::new()
        } else {
            vec![format!(
                "failures: unknown for {} — their points carry neither an expected_response nor \
                 a status tag",
                unknown.join(", ")
            )]
        };
        Ok(Extracted {
            format: Format::K6Points,
            tool: Some("k6".to_owned()),
            labels,
            distributions,
            notes,
        })
    }
}

#[cfg(test)]
mod tests;
