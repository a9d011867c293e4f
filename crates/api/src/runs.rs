//! Runs: `POST /chains/{chain}/runs` (upload), `GET /chains/{chain}/runs[/{run_id}]`.

use std::collections::BTreeMap;

use budget_core::baseline::{BaselineDocument, BaselineReason, BaselineState};
use budget_core::checks::Finding;
use budget_core::drift::DriftEntry;
use budget_core::run::SegmentUpload;
use serde::{Deserialize, Serialize};

/// `POST /chains/{chain}/runs`'s query: how to read the upload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UploadQuery {
    /// `native`, `locust`, `locust_json`, `oha`, `k6`, `k6_points`, `artillery`, `autocannon`, `jmeter`,
    /// `hdrhistogram` or `wrk2`; absent: detected from the content (a JSON body that is no load
    /// tool's document is `native`).
    pub format: Option<String>,
    /// The unit of HdrHistogram values: `ns`, `us`, `ms` or `s`.
    pub unit: Option<String>,
    /// The label of a single-endpoint file (oha, wrk2) sent as a raw body.
    pub label: Option<String>,
    /// A JSON object of tool label → segment id; it wins over the topology's `labels`.
    pub map: Option<String>,
    /// `true`: read, map and compute the upload as usual, answer what it would store (the
    /// segments, the label mapping, the comparison and the draft with its findings), and
    /// store nothing — no run, no draft, no archive item, no `Idempotency-Key` record.
    pub dry_run: Option<bool>,
}

/// What a run upload answers (OpenAPI `RunUploadResult`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunUploadResult {
    pub run_id: String,
    pub chain: String,
    pub topology_version: i64,
    /// Drift findings: the compared percentiles that moved more than 20 %.
    pub drift: Vec<DriftEntry>,
    /// Every compared percentile, drifted or not.
    pub comparison: Vec<DriftEntry>,
    /// The approved baseline the run was compared with.
    pub compared_to: Option<String>,
    /// The R-drift threshold the comparison used, in percent.
    pub drift_threshold_pct: u64,
    /// The draft created, or null.
    pub baseline_id: Option<String>,
    pub reason: Option<BaselineReason>,
    pub findings: Vec<Finding>,
    /// The format read (`native`, `locust`, `oha`, …).
    pub format: String,
    pub tool: Option<String>,
    /// The percentiles read, per segment (milliseconds).
    pub segments: Vec<SegmentUpload>,
    /// How load-tool labels were mapped (absent for native uploads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapping: Option<LabelMapping>,
    /// The run's evidence: every file read, how its percentiles were computed, notes.
    pub sources: Vec<RunSource>,
    /// A dry run (`?dry_run=true`): nothing was stored, `run_id` is empty and `baseline_id`
    /// null; `reason` says whether the upload would open a draft.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// With `dry_run`: the baseline this run computes to, as the draft would hold it (its id
    /// empty, its run id empty), whether or not the upload would open one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<BaselineDocument>,
}

/// How the labels of a load-tool upload were used.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LabelMapping {
    /// `label → segment` for every label used.
    pub mapped: BTreeMap<String, String>,
    /// Labels no rule mapped (reported, not used).
    pub unmapped: Vec<String>,
    /// Labels deliberately skipped, e.g. Locust's `Aggregated` row.
    pub ignored: Vec<String>,
}

/// One uploaded file of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSource {
    /// The multipart part or file name, when known.
    pub name: Option<String>,
    pub format: String,
    pub sha256: String,
    pub size: i64,
    /// How the file's percentiles were computed (nearest-rank, the tool's interpolation, …);
    /// `null` for runs stored before it was recorded.
    pub percentiles: Option<String>,
    /// What a reader of the run should know about the file's numbers, in plain words (failures
    /// that are unknown, latencies corrected for coordinated omission, a gzip stream, …).
    pub notes: Vec<String>,
}

/// One segment of a stored run, in milliseconds (`null` where the run has no value).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSegment {
    pub id: String,
    pub samples: u64,
    pub failures: Option<u64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// The distribution the run keeps for the segment (`histogram` or `percentiles`), if any.
    pub distribution: Option<budget_core::distribution::Source>,
    /// What it takes in the stored run, in bytes (the base64 histogram or the points' JSON).
    pub distribution_bytes: Option<u64>,
}

/// How a stored run compares with the chain's approved baseline now (R-drift).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveComparison {
    pub baseline_id: String,
    /// Every compared percentile, drifted or not.
    pub comparison: Vec<DriftEntry>,
    /// Whether any percentile drifted.
    pub drift: bool,
    pub drift_threshold_pct: u64,
}

/// A stored run (OpenAPI `Run`): its record, percentiles in milliseconds, and how it compares
/// with the live baseline (absent while the chain has none).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Run {
    pub id: String,
    pub chain: String,
    pub topology_version: i64,
    pub format: String,
    pub tool: Option<String>,
    pub note: Option<String>,
    pub source_sha256: String,
    pub source_size: i64,
    pub uploaded_by: String,
    /// The owner of the uploading token.
    pub uploaded_by_owner: String,
    pub created_at: String,
    pub sources: Vec<RunSource>,
    /// How tool labels were mapped (`null` for native uploads).
    pub mapping: Option<LabelMapping>,
    pub segments: Vec<RunSegment>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_live: Option<LiveComparison>,
    /// The draft this run's upload opened (`null` when it opened none; drafts recomputed from
    /// the run later are not it), and that draft's state now.
    pub draft_id: Option<String>,
    pub draft_state: Option<BaselineState>,
}

/// `GET /chains/{chain}/runs`: the newest runs first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunList {
    pub runs: Vec<Run>,
}

/// `GET /chains/{chain}/runs`'s query.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunListQuery {
    /// At most this many runs (1 to 1000, default 100).
    pub limit: Option<i64>,
}
