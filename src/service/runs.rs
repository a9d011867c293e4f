//! Runs: uploads (native JSON or load-tool files) and reads. Whether a run opens a draft is
//! `budget_core::intake`'s decision; this module loads what it needs and stores the outcome.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

use budget_core::baseline::{BaselineReason, BaselineState};
use budget_core::drift;
use budget_core::intake::{self, ChainBefore, DraftOf};
use budget_core::run::RunUpload;
use budget_core::{us_to_ms, Topology};
use budget_ingest::mapping::Mapping;
use budget_ingest::{Extracted, Format};
use serde_json::json;
use sha2::Digest;

use super::{audit, now, parse_with_schema, violations_of};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::schemas::Schema;
use crate::state::AppState;
use crate::store::{NewRun, StoreError, StoredRun};

use budget_api::chains::TopologyVersion;
/// A stored run as shown.
pub use budget_api::runs::Run as RunView;
/// What a run upload answers.
pub use budget_api::runs::RunUploadResult as RunOutcome;
use budget_api::runs::{LabelMapping, LiveComparison, RunSegment, RunSource};

/// How labels were mapped, as stored and answered (the load-tool reader's own report has the
/// same fields).
fn label_mapping(m: Mapping) -> LabelMapping {
    LabelMapping {
        mapped: m.mapped,
        unmapped: m.unmapped,
        ignored: m.ignored,
    }
}

/// A native JSON run (`raw` is the body as received, for its checksum). A `dry_run` stores
/// nothing: no run, no draft, no archive item, no `Idempotency-Key` record.
#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn upload_run(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    body: serde_json::Value,
    raw: &[u8],
    dry_run: bool,
) -> ApiResult<RunOutcome> {
    let topo = super::chains::known(state, chain).await?;
    let upload: RunUpload = parse_with_schema(Schema::Run, body).map_err(|mut e| {
        // A load tool's JSON sent as native: say what it looks like.
        if let Some(hint) = budget_ingest::looks_like_a_tool(raw) {
            e.message = format!("{}; {hint}", e.message);
            if let Some(details) = e.details.as_object_mut() {
                details.insert("hint".into(), hint.into());
            }
        }
        e
    })?;
    let run = Upload::one_body(upload, None, Format::Native.as_str(), raw)
        .percentiles(Format::Native.percentile_method());
    record_run(state, principal, chain, topo, run, dry_run).await
}

/// A run read from load-tool files: labels mapped to segments (`map` first, then the
/// topology's `labels`), then stored exactly like the equivalent native upload.
#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn upload_tool_run(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    files: Vec<Extracted>,
    sources: Vec<RunSource>,
    map: &BTreeMap<String, String>,
    dry_run: bool,
) -> ApiResult<RunOutcome> {
    let topo = super::chains::known(state, chain).await?;
    let format = files.first().map_or(Format::Native, |f| f.format);
    let (upload, mapping) = budget_ingest::mapping::to_upload(&files, &topo.topology, map)
        .map_err(|failure| mapping_error(chain, &failure))?;
    let run = Upload {
        upload,
        format,
        sources,
        mapping: Some(label_mapping(mapping)),
    };
    record_run(state, principal, chain, topo, run, dry_run).await
}

/// A 422 naming the segments without data, every label found, mapped and unmapped, and the
/// fix (`details`: `violations`, `labels {found, mapped, unmapped, ignored}`, `missing`,
/// `suggested_map`, `fix`).
fn mapping_error(chain: &str, failure: &budget_ingest::mapping::MappingFailure) -> ApiError {
    ApiError::validation(
        failure.message(chain),
        json!({
            "violations": failure.errors,
            "labels": {
                "found": failure.found,
                "mapped": failure.mapping.mapped,
                "unmapped": failure.mapping.unmapped,
                "ignored": failure.mapping.ignored,
            },
            "missing": failure.missing,
            "suggested_map": failure.suggested_map,
            "fix": failure.fix,
        }),
    )
}

/// A run made from production data (`from: production`): `upload` holds the merged
/// percentiles, `source` names the window and the agents.
pub async fn upload_production_run(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    upload: RunUpload,
    source: String,
) -> ApiResult<RunOutcome> {
    let topo = state.store.get_topology(chain, None).await?;
    let bytes = serde_json::to_vec(&upload).map_err(|e| ApiError::internal(e.into()))?;
    let run = Upload::one_body(upload, Some(source), "production", &bytes)
        .percentiles("nearest-rank on the agents' merged HDR histograms (3 significant digits)");
    record_run(state, principal, chain, topo, run, false).await
}

/// A run as received, before it is checked against the topology.
struct Upload {
    upload: RunUpload,
    format: Format,
    sources: Vec<RunSource>,
    mapping: Option<LabelMapping>,
}

impl Upload {
    /// A run in the native format, read from one body `bytes`: its one source is named
    /// `name`, of format `source_format`, with the body's checksum and size.
    fn one_body(
        upload: RunUpload,
        name: Option<String>,
        source_format: &str,
        bytes: &[u8],
    ) -> Self {
        Self {
            upload,
            format: Format::Native,
            sources: vec![RunSource {
                name,
                format: source_format.into(),
                sha256: hex::encode(sha2::Sha256::digest(bytes)),
                size: bytes.len() as i64,
                percentiles: None,
                notes: Vec::new(),
            }],
            mapping: None,
        }
    }

    /// Records how the body's percentiles were computed.
    fn percentiles(mut self, method: &str) -> Self {
        for s in &mut self.sources {
            s.percentiles = Some(method.to_owned());
        }
        self
    }
}

/// One checksum for the run: the file's, or a hash over every file's name and hash.
fn source_checksum(sources: &[RunSource]) -> (String, i64) {
    match sources {
        [one] => (one.sha256.clone(), one.size),
        many => {
            let mut h = sha2::Sha256::new();
            for s in many {
                h.update(format!(
                    "{}:{}\n",
                    s.name.as_deref().unwrap_or(""),
                    s.sha256
                ));
            }
            (hex::encode(h.finalize()), many.iter().map(|s| s.size).sum())
        }
    }
}

/// Checks the run against the topology, decides whether it opens a draft (core's `intake`)
/// and stores both in one transaction. A `dry_run` goes as far as the decision and the draft
/// document, answers them with the baseline the run computes to (`preview`), and stores
/// nothing: no run, no draft, no archive item, no audit entry, and no `Idempotency-Key` record
/// (the store's commit never runs).
async fn record_run(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    topo: TopologyVersion,
    received: Upload,
    dry_run: bool,
) -> ApiResult<RunOutcome> {
    let Upload {
        upload,
        format,
        sources,
        mapping,
    } = received;
    let (tool, note) = (upload.tool.clone(), upload.note.clone());
    // The answer lists the percentiles read; the distributions stay with the stored run (a
    // histogram is kilobytes per segment).
    let segments: Vec<_> = upload
        .segments
        .iter()
        .map(|s| budget_core::run::SegmentUpload {
            distribution: None,
            ..s.clone()
        })
        .collect();
    let ids: Vec<String> = upload.segments.iter().map(|s| s.id.clone()).collect();
    let run = upload.into_run(&topo.topology).map_err(|errs| {
        violations_of(
            format!(
                "the run does not fit the topology of {chain:?} (v{})",
                topo.version
            ),
            errs,
        )
    })?;
    // Histograms are decoded once: for the draft's kill rates, and checked on the way.
    let tails = super::distributions::UploadTails::new(&run);
    let (source_sha256, source_size) = source_checksum(&sources);

    // The approved baseline may change between comparing and inserting; the store refuses the
    // insert then, and we compare again.
    for _ in 0..5 {
        let current = state.approved.current(state.store.as_ref(), chain).await?;
        let first_run = state.store.run_count(chain).await? == 0;
        let before = ChainBefore {
            approved: current.as_ref().map(|c| &c.doc),
            first_run,
        };
        let assessment = intake::assess(&topo.topology, &run, before);
        let created_at = now();
        let of = DraftOf {
            chain,
            topology_version: topo.version,
            topology: &topo.topology,
            run_id: "",
            run: &run,
            tails: &tails,
            created_by: &principal.name,
            created_at: &created_at,
        };
        let draft = assessment.draft(&of).map_err(|errs| {
            violations_of(
                format!("the run does not cover the topology of {chain:?}"),
                errs,
            )
        })?;
        let drift = assessment.drift();
        if dry_run {
            // The draft it would open, or what a recompute of it would give.
            let preview = match draft {
                Some(doc) => doc,
                None => intake::recompute(&of).map_err(|errs| {
                    violations_of(
                        format!("the run does not cover the topology of {chain:?}"),
                        errs,
                    )
                })?,
            };
            tails.finish(&ids)?;
            let reason = assessment.reason;
            return Ok(RunOutcome {
                run_id: String::new(),
                chain: chain.to_owned(),
                topology_version: topo.version,
                drift,
                comparison: assessment.comparison,
                compared_to: assessment.compared_to,
                drift_threshold_pct: drift::DRIFT_THRESHOLD_PCT,
                baseline_id: None,
                reason,
                findings: if reason.is_some() {
                    preview.findings.clone()
                } else {
                    Vec::new()
                },
                format: format.as_str().into(),
                tool,
                segments,
                mapping,
                sources,
                dry_run: true,
                preview: Some(preview),
            });
        }
        // Every histogram checked (those the draft did not read too) before anything is stored.
        tails.finish(&ids)?;
        let new_run = NewRun {
            chain: chain.to_owned(),
            topology_version: topo.version,
            format: format.as_str().into(),
            tool: tool.clone(),
            note: note.clone(),
            source_sha256: source_sha256.clone(),
            source_size,
            sources: sources.clone(),
            mapping: mapping.clone(),
            data: run.clone(),
            uploaded_by: principal.name.clone(),
            uploaded_by_owner: principal.owner.clone(),
            created_at: created_at.clone(),
        };
        let audit = audit(
            principal,
            "run.upload",
            Some(chain),
            json!({"drift": !drift.is_empty()}),
        );
        let compared_to = assessment.compared_to.clone();
        match state
            .store
            .insert_run(new_run, draft, compared_to.clone(), audit)
            .await
        {
            Ok((stored, baseline)) => {
                let reason = assessment.reason;
                if reason == Some(BaselineReason::Drift) && baseline.is_some() {
                    crate::observe::drift_event();
                }
                state.archiver.kick();
                return Ok(RunOutcome {
                    run_id: stored.id,
                    chain: chain.to_owned(),
                    topology_version: topo.version,
                    drift,
                    comparison: assessment.comparison,
                    compared_to,
                    drift_threshold_pct: drift::DRIFT_THRESHOLD_PCT,
                    baseline_id: baseline.as_ref().map(|b| b.doc.id.clone()),
                    reason,
                    findings: baseline.map(|b| b.doc.findings).unwrap_or_default(),
                    format: format.as_str().into(),
                    tool,
                    segments,
                    mapping,
                    sources,
                    dry_run: false,
                    preview: None,
                });
            }
            Err(StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::conflict(format!(
        "the approved baseline of {chain:?} kept changing; upload again"
    )))
}

/// Views of `runs`, compared with the chain's approved baseline (if any) on each run's own
/// topology version.
async fn views(state: &AppState, chain: &str, runs: Vec<StoredRun>) -> ApiResult<Vec<RunView>> {
    let current = state.store.current_baseline(chain).await?;
    let mut topologies: HashMap<i64, Topology> = HashMap::new();
    let mut out = Vec::with_capacity(runs.len());
    for run in runs {
        let vs_live = match &current {
            None => None,
            Some(live) => {
                let topology = match topologies.entry(run.topology_version) {
                    Entry::Occupied(known) => known.into_mut(),
                    Entry::Vacant(slot) => {
                        let version = Some(run.topology_version);
                        slot.insert(state.store.get_topology(chain, version).await?.topology)
                    }
                };
                let comparison = drift::compare(topology, &live.doc.segments, &run.data);
                Some(LiveComparison {
                    baseline_id: live.doc.id.clone(),
                    drift: drift::drifted(&comparison),
                    comparison,
                    drift_threshold_pct: drift::DRIFT_THRESHOLD_PCT,
                })
            }
        };
        let segments = run
            .data
            .segments
            .iter()
            .map(|(id, s)| {
                let distribution = run.data.distributions.get(id);
                RunSegment {
                    id: id.clone(),
                    samples: s.samples,
                    failures: s.failures,
                    p50_ms: s.p50_us.map(us_to_ms),
                    p99_ms: us_to_ms(s.p99_us),
                    p999_ms: us_to_ms(s.p999_us),
                    distribution: distribution.map(|d| d.kind()),
                    distribution_bytes: distribution.map(|d| d.stored_bytes()),
                }
            })
            .collect();
        out.push(RunView {
            id: run.id,
            chain: run.chain,
            topology_version: run.topology_version,
            format: run.format,
            tool: run.tool,
            note: run.note,
            source_sha256: run.source_sha256,
            source_size: run.source_size,
            uploaded_by: run.uploaded_by,
            uploaded_by_owner: run.uploaded_by_owner,
            created_at: run.created_at,
            sources: run.sources,
            mapping: run.mapping,
            segments,
            vs_live,
            draft_state: run
                .opened_draft
                .as_ref()
                .and_then(|(_, state)| BaselineState::parse(state)),
            draft_id: run.opened_draft.map(|(id, _)| id),
        });
    }
    Ok(out)
}

/// One run of a chain.
#[tracing::instrument(skip_all, fields(chain = ?chain, run = ?run_id))]
pub async fn get(state: &AppState, chain: &str, run_id: &str) -> ApiResult<RunView> {
    super::chains::known(state, chain).await?;
    let run = state.store.get_run(chain, run_id).await?;
    let mut views = views(state, chain, vec![run]).await?;
    views
        .pop()
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("a run view went missing")))
}

/// The newest `limit` runs of a chain, newest first.
#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn list(state: &AppState, chain: &str, limit: i64) -> ApiResult<Vec<RunView>> {
    super::chains::known(state, chain).await?;
    let runs = state.store.list_runs(chain, limit).await?;
    views(state, chain, runs).await
}
