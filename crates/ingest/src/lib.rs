//! budget-ingest: reading load-test results as the tools write them.
//!
//! Every format is a push parser: the caller feeds the upload chunk by chunk ([`Ingest::push`])
//! and asks for the result at the end ([`Ingest::finish`]); nothing here reads files or
//! sockets, and memory stays flat whatever the input size (raw samples go into HDR histograms).
//! A parser yields per-*label* statistics in the tool's own names; [`mapping`] turns labels into
//! the chain's segment ids.
//!
//! Laid out like vector's `lib/codecs`: framing (lines, CSV records, a bounded JSON buffer) is
//! shared by the formats and owned by none; each file under [`mod@format`] reads one tool's output;
//! [`reader`] reads one uploaded file whatever the transport (format detection from the first
//! bytes, SHA-256 and size); [`hdr`] and [`mapping`] are the percentile recorder and the
//! label → segment mapping. budget-core does not depend on this crate, nor does the agent.
//!
//! **JSON summaries** (oha, k6, Artillery, autocannon, Locust's `--json`) are the exception to "flat": a summary is one JSON document whose
//! errors quote its text, so it is collected whole — up to [`MAX_JSON_SUMMARY_BYTES`] (4 MiB; real
//! summaries are a few KiB). The push that would take an input past the cap is refused with an
//! [`IngestError`] naming the limit, and nothing past it is ever held. The text is then read into
//! typed state, member by member, keeping only what the parser uses (no tree of the document is
//! built): an oha summary costs its text plus a few values, a k6 summary its text plus at most
//! 10 000 metrics (measured peak heap for a 4 MiB input: 6 MiB for oha, 16 MiB for k6 with 10 000
//! labels, where a JSON tree took up to 166 MiB).
#![forbid(unsafe_code)]

mod codec;
pub mod format;
mod framing;
pub mod hdr;
pub mod mapping;
pub mod reader;
#[cfg(test)]
mod testkit;

use std::collections::BTreeMap;
use std::fmt;

use budget_core::distribution::Distribution;

use serde::{Deserialize, Serialize};

/// Largest JSON tool summary (oha, k6, Artillery, autocannon, Locust's `--json`) accepted, in bytes: 4 MiB. Real summaries are a few KiB (a
/// k6 summary with a hundred sub-metrics stays well under 1 MiB); a larger input is refused by the
/// push that would cross the cap, with an [`IngestError`] naming it.
pub const MAX_JSON_SUMMARY_BYTES: usize = 4 << 20;

/// The formats a run upload may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// budgetd's own JSON (`schemas/run.json`).
    Native,
    /// Locust `*_stats.csv`.
    Locust,
    /// Locust's final stats as JSON (`locust --json` on stdout, or `--json-file`).
    LocustJson,
    /// oha `--json` output (one endpoint per file).
    Oha,
    /// k6 `--summary-export` or `handleSummary()` JSON.
    K6,
    /// JMeter JTL CSV (with or without header).
    Jmeter,
    /// HdrHistogram interval log (`.hlog`).
    Hdrhistogram,
    /// wrk2 `--latency` text output (one endpoint per file).
    Wrk2,
    /// Artillery's JSON report (`artillery run --output report.json`).
    Artillery,
    /// autocannon JSON output (`autocannon -j`, one endpoint per file).
    Autocannon,
    /// k6's raw points: `k6 run --out json=…` (NDJSON) or `--out csv=…`.
    K6Points,
}

impl Format {
    pub const ALL: [Format; 11] = [
        Format::Native,
        Format::Locust,
        Format::LocustJson,
        Format::Oha,
        Format::K6,
        Format::Jmeter,
        Format::Hdrhistogram,
        Format::Wrk2,
        Format::Artillery,
        Format::Autocannon,
        Format::K6Points,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Locust => "locust",
            Self::LocustJson => "locust_json",
            Self::Oha => "oha",
            Self::K6 => "k6",
            Self::Jmeter => "jmeter",
            Self::Hdrhistogram => "hdrhistogram",
            Self::Wrk2 => "wrk2",
            Self::Artillery => "artillery",
            Self::Autocannon => "autocannon",
            Self::K6Points => "k6_points",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// How the format's percentiles are computed, in plain words: kept as the run's evidence
    /// (nearest-rank for raw samples and HDR histograms; k6's summary interpolates).
    pub fn percentile_method(self) -> &'static str {
        match self {
            Self::Native => "as uploaded: the native document's own percentiles",
            Self::Locust => {
                "Locust's own: nearest-rank over response times it rounds (whole ms below 100 ms, \
                 then 2 significant digits)"
            }
            Self::LocustJson => {
                "nearest-rank over Locust's rounded response times (its response_times histogram)"
            }
            Self::Oha => {
                "oha's own: exact, the sorted latencies of every response at index ⌊p × n⌋"
            }
            Self::K6 => {
                "k6's own: linear interpolation between the two nearest samples (k6's trend \
                 summary)"
            }
            Self::Jmeter => {
                "nearest-rank over every sample (HDR histogram, 3 significant digits; JTL times \
                 are whole ms)"
            }
            Self::Hdrhistogram => {
                "nearest-rank on the merged histograms (HdrHistogram's highest equivalent value)"
            }
            Self::Wrk2 => {
                "wrk2's own: nearest-rank on its HdrHistogram of latencies corrected for \
                 coordinated omission"
            }
            Self::Artillery => {
                "Artillery's own: a DDSketch of 1 % relative accuracy, rounded to 0.1 ms"
            }
            Self::Autocannon => {
                "autocannon's own: nearest-rank on its HdrHistogram (hdr-histogram-js) of \
                 whole-ms latencies"
            }
            Self::K6Points => {
                "nearest-rank over every request's http_req_duration (HDR histogram, 3 \
                 significant digits)"
            }
        }
    }

    /// The file the format reads, in words: "a k6 summary (--summary-export or handleSummary)".
    pub fn file_kind(self) -> &'static str {
        match self {
            Self::Native => "a native budgetd run (schemas/run.json)",
            Self::Locust => "a Locust stats CSV (*_stats.csv)",
            Self::LocustJson => "Locust's final stats as JSON (locust --json, or --json-file)",
            Self::Oha => "oha JSON output",
            Self::K6 => "a k6 summary (--summary-export or handleSummary JSON)",
            Self::Jmeter => "a JMeter JTL CSV",
            Self::Hdrhistogram => "an HdrHistogram interval log",
            Self::Wrk2 => "wrk2 --latency output",
            Self::Artillery => "an Artillery report (artillery run --output report.json)",
            Self::Autocannon => "autocannon JSON output (autocannon -j)",
            Self::K6Points => "k6 raw points (k6 run --out json or --out csv)",
        }
    }

    /// Whether the format holds one endpoint per file (several files make one run).
    pub fn single_endpoint(self) -> bool {
        matches!(self, Self::Oha | Self::Wrk2 | Self::Autocannon)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Unit of raw values where the format does not record it (HdrHistogram logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnit {
    Ns,
    Us,
    Ms,
    S,
}

impl TimeUnit {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ns" => Self::Ns,
            "us" => Self::Us,
            "ms" => Self::Ms,
            "s" => Self::S,
            _ => return None,
        })
    }

    /// A value in this unit, in microseconds (rounded to nearest).
    pub fn to_us(self, v: f64) -> f64 {
        match self {
            Self::Ns => v / 1000.0,
            Self::Us => v,
            Self::Ms => v * 1000.0,
            Self::S => v * 1_000_000.0,
        }
    }
}

/// How to read one upload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// Unit of HdrHistogram values (required for `hdrhistogram`).
    pub unit: Option<TimeUnit>,
    /// The label of a single-endpoint file (oha, wrk2): usually the multipart part's name.
    pub label: Option<String>,
}

/// Statistics of one tool label (a request name, a tag, an endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelStats {
    pub label: String,
    pub samples: u64,
    /// Failed requests; `None` where the file does not say (a k6 summary without a
    /// `http_req_failed{…}` sub-metric for the label, an HdrHistogram log): unknown, never 0.
    pub failures: Option<u64>,
    pub p50_us: Option<u64>,
    pub p99_us: u64,
    pub p999_us: u64,
}

/// What a parser extracted from one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extracted {
    pub format: Format,
    /// The tool and version when the file says, e.g. `"JMeter 5.6"`.
    pub tool: Option<String>,
    pub labels: Vec<LabelStats>,
    /// The latency distribution of each label that has one, by label: the HDR histogram of
    /// formats with raw samples or histograms, the percentile points of summary formats.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub distributions: BTreeMap<String, Distribution>,
    /// What a reader of the run should know about these numbers, in plain words (failures that
    /// are unknown, latencies corrected for coordinated omission, …): kept as the run's evidence.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Why an upload could not be read: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default(), field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
pub struct IngestError {
    /// 1-based line of the input, where the format has lines.
    pub line: Option<u64>,
    /// The field (column, JSON key or pointer) at fault.
    pub field: Option<String>,
    pub message: String,
}

impl IngestError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            line: None,
            field: None,
            message: message.into(),
        }
    }

    pub fn at_line(line: u64, message: impl Into<String>) -> Self {
        Self {
            line: Some(line),
            field: None,
            message: message.into(),
        }
    }

    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }
}

/// A push parser of one format.
pub trait Ingest: Send {
    /// Feeds the next bytes of the input (chunks may split lines and UTF-8 sequences anywhere).
    fn push(&mut self, chunk: &[u8]) -> Result<(), IngestError>;
    /// Ends the input and returns what was read.
    fn finish(self: Box<Self>) -> Result<Extracted, IngestError>;
}

/// Reads a whole input with `parser`, in chunks of `chunk` bytes (tests, small inputs).
pub fn read_all(
    mut parser: Box<dyn Ingest>,
    input: &[u8],
    chunk: usize,
) -> Result<Extracted, IngestError> {
    for part in input.chunks(chunk.max(1)) {
        parser.push(part)?;
    }
    parser.finish()
}

/// The parser of `format`. `Native` is not a load-tool format and has no parser here.
pub fn parser(format: Format, options: &Options) -> Result<Box<dyn Ingest>, IngestError> {
    match format {
        Format::Native => Err(IngestError::new(
            "native uploads are JSON documents, not parsed here",
        )),
        Format::Locust => format::locust::parser(options),
        Format::LocustJson => format::locust_json::parser(options),
        Format::Oha => format::oha::parser(options),
        Format::K6 => format::k6::parser(options),
        Format::Jmeter => format::jmeter::parser(options),
        Format::Hdrhistogram => format::hlog::parser(options),
        Format::Wrk2 => format::wrk2::parser(options),
        Format::Artillery => format::artillery::parser(options),
        Format::Autocannon => format::autocannon::parser(options),
        Format::K6Points => format::k6::points::parser(options),
    }
}

/// What a document that is not a valid native run looks like, when it is a load tool's output:
/// the hint added to the native schema's error (a k6 summary sent as `application/json` with
/// `?format=native`, Locust's `--json` output, …).
pub fn looks_like_a_tool(document: &[u8]) -> Option<String> {
    if let Some(f) = detect(document) {
        return Some(format!(
            "this looks like {} (format {f}), not a native run: upload it without \
             ?format=native and it is read as {f} (or name it: ?format={f}, budgetctl --format {f})",
            f.file_kind()
        ));
    }
    format::unsupported::recognise(document).map(|u| {
        format!(
            "this looks like {}, which budgetd does not read: {}",
            u.what, u.instead
        )
    })
}

/// The format of an input from its first bytes, when exactly one load-tool format matches.
pub fn detect(head: &[u8]) -> Option<Format> {
    use format::{artillery, autocannon, hlog, jmeter, k6, locust, locust_json, oha, wrk2};
    let candidates: Vec<Format> = [
        (Format::Locust, locust::sniff as fn(&[u8]) -> bool),
        (Format::LocustJson, locust_json::sniff),
        (Format::Oha, oha::sniff),
        (Format::K6, k6::sniff),
        (Format::Jmeter, jmeter::sniff),
        (Format::Hdrhistogram, hlog::sniff),
        (Format::Wrk2, wrk2::sniff),
        (Format::Artillery, artillery::sniff),
        (Format::Autocannon, autocannon::sniff),
        (Format::K6Points, k6::points::sniff),
    ]
    .into_iter()
    .filter(|(_, sniff)| sniff(head))
    .map(|(f, _)| f)
    .collect();
    match candidates.as_slice() {
        [one] => Some(*one),
        _ => None,
    }
}
