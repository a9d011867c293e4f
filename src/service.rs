//! What the transports call: one function per operation. Each validates its input, applies
//! the core rules and calls the store; handlers only extract, call and map.

use budget_core::baseline::{BaselineDocument, BaselineReason, BaselineState};
use budget_core::checks::Finding;
use budget_core::diff::BaselineDiff;
use budget_core::drift::{self, DriftEntry};
use budget_core::ingest::mapping::Mapping;
use budget_core::ingest::{Extracted, Format};
use budget_core::live::LiveChain;
use budget_core::run::RunUpload;
use budget_core::{RunData, Topology};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::Digest;
use std::collections::BTreeMap;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::schemas::Schema;
use crate::state::AppState;
use crate::store::{
    Audit, NewRelease, NewRun, Published, Release, RunSource, StoreError, StoredBaseline,
    TopologyVersion, Verdict,
};

/// Now, as stored and shown: RFC 3339 UTC with milliseconds.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn audit(principal: &Principal, action: &'static str, chain: Option<&str>, detail: Value) -> Audit {
    Audit {
        actor: principal.name.clone(),
        action,
        chain: chain.map(str::to_owned),
        subject: None,
        detail,
        at: now(),
    }
}

/// Chain names: lowercase letters, digits, `-`, `_`, `.`; 1–64 characters.
pub fn check_chain_name(chain: &str) -> ApiResult<()> {
    if chain.len() > 64 {
        // Not echoed: it may be huge.
        return Err(ApiError::bad_request(
            "invalid chain name: longer than 64 characters",
        ));
    }
    let ok = (1..=64).contains(&chain.len())
        && chain
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chain
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "invalid chain name {chain:?}: use 1-64 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit"
        )))
    }
}

/// Schema check, then typed parse: every violation with its JSON pointer.
fn parse_with_schema<T: serde::de::DeserializeOwned>(schema: Schema, body: Value) -> ApiResult<T> {
    let violations = schema.violations(&body);
    if !violations.is_empty() {
        return Err(ApiError::validation(
            format!(
                "the document does not match the {} schema ({} violations)",
                schema.name(),
                violations.len()
            ),
            json!({"schema": format!("/schemas/{}.json", schema.name()), "violations": violations}),
        ));
    }
    serde_json::from_value(body).map_err(|e| {
        ApiError::validation(
            format!(
                "the document does not match the {} schema: {e}",
                schema.name()
            ),
            json!({"violations": [{"pointer": "", "message": e.to_string()}]}),
        )
    })
}

fn violations_of<E: Serialize>(message: String, errors: Vec<E>) -> ApiError {
    ApiError::validation(message, json!({ "violations": errors }))
}

#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn put_topology(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    body: Value,
) -> ApiResult<(TopologyVersion, bool)> {
    check_chain_name(chain)?;
    let topology: Topology = parse_with_schema(Schema::Topology, body)?;
    topology.validate().map_err(|errs| {
        violations_of(
            format!("the topology of {chain:?} is not a valid call tree"),
            errs,
        )
    })?;
    let audit = audit(principal, "topology.put", Some(chain), json!({}));
    Ok(state.store.put_topology(chain, &topology, audit).await?)
}

/// What a run upload answers.
#[derive(Debug, Serialize)]
pub struct RunOutcome {
    pub run_id: String,
    pub chain: String,
    pub topology_version: i64,
    /// Drift findings: the compared percentiles that moved more than 20 %.
    pub drift: Vec<DriftEntry>,
    /// Every compared percentile, drifted or not.
    pub comparison: Vec<DriftEntry>,
    /// The approved baseline the run was compared with.
    pub compared_to: Option<String>,
    /// The draft created, or null.
    pub baseline_id: Option<String>,
    pub reason: Option<BaselineReason>,
    pub findings: Vec<Finding>,
    pub format: Format,
    pub tool: Option<String>,
    /// The percentiles read, per segment (milliseconds).
    pub segments: Vec<budget_core::run::SegmentUpload>,
    /// How load-tool labels were mapped (absent for native uploads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapping: Option<Mapping>,
}

#[allow(clippy::too_many_arguments)]
fn draft_document(
    chain: &str,
    topology_version: i64,
    topology: &Topology,
    run_id: &str,
    run: &RunData,
    reason: BaselineReason,
    actor: &str,
    created_at: &str,
    drift: (Vec<DriftEntry>, Option<String>),
) -> ApiResult<BaselineDocument> {
    let computation = budget_core::compute(topology, run).map_err(|errs| {
        violations_of(
            format!("the run does not cover the topology of {chain:?}"),
            errs,
        )
    })?;
    Ok(BaselineDocument {
        id: String::new(),
        chain: chain.to_owned(),
        state: BaselineState::Draft,
        reason,
        run_id: run_id.to_owned(),
        topology_version,
        created_at: created_at.to_owned(),
        created_by: actor.to_owned(),
        entry_budget_ms: topology.entry_budget_ms,
        breaker_window_ms: topology.breaker_window_ms,
        max_recovery: topology.max_recovery,
        segments: computation.segments,
        findings: computation.findings,
        drift: drift.0,
        drift_baseline_id: drift.1,
        decision: None,
    })
}

#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn upload_run(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    body: Value,
    raw: &[u8],
) -> ApiResult<RunOutcome> {
    check_chain_name(chain)?;
    let topo = state.store.get_topology(chain, None).await?;
    let upload: RunUpload = parse_with_schema(Schema::Run, body)?;
    let sources = vec![RunSource {
        name: None,
        format: Format::Native.as_str().into(),
        sha256: hex::encode(sha2::Sha256::digest(raw)),
        size: raw.len() as i64,
    }];
    record_run(
        state,
        principal,
        chain,
        topo,
        upload,
        Format::Native,
        sources,
        None,
    )
    .await
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
) -> ApiResult<RunOutcome> {
    check_chain_name(chain)?;
    let topo = state.store.get_topology(chain, None).await?;
    let format = files.first().map_or(Format::Native, |f| f.format);
    let (upload, mapping) = budget_core::ingest::mapping::to_upload(&files, &topo.topology, map)
        .map_err(|errs| {
            violations_of(
                format!("the labels of the upload do not map onto the segments of {chain:?}"),
                errs,
            )
        })?;
    record_run(
        state,
        principal,
        chain,
        topo,
        upload,
        format,
        sources,
        Some(mapping),
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn record_run(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    topo: TopologyVersion,
    upload: RunUpload,
    format: Format,
    sources: Vec<RunSource>,
    mapping: Option<Mapping>,
) -> ApiResult<RunOutcome> {
    let (tool, note) = (upload.tool.clone(), upload.note.clone());
    let segments = upload.segments.clone();
    let run = upload.into_run(&topo.topology).map_err(|errs| {
        violations_of(
            format!(
                "the run does not fit the topology of {chain:?} (v{})",
                topo.version
            ),
            errs,
        )
    })?;
    let (source_sha256, source_size) = match sources.as_slice() {
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
    };

    // The approved baseline may change between comparing and inserting; the store refuses the
    // insert then, and we compare again.
    for _ in 0..5 {
        let current = state.store.current_baseline(chain).await?;
        let first_run = state.store.run_count(chain).await? == 0;
        let comparison = current
            .as_ref()
            .map(|c| drift::compare(&topo.topology, &c.doc.segments, &run))
            .unwrap_or_default();
        let reason = match &current {
            None if first_run => Some(BaselineReason::FirstRun),
            None => Some(BaselineReason::NoApprovedBaseline),
            Some(_) if drift::drifted(&comparison) => Some(BaselineReason::Drift),
            Some(_) => None,
        };
        let created_at = now();
        let compared_to = current.as_ref().map(|c| c.doc.id.clone());
        let drift: Vec<DriftEntry> = comparison.iter().filter(|e| e.drift).cloned().collect();
        let draft = match reason {
            Some(reason) => {
                let drift_part = if reason == BaselineReason::Drift {
                    (drift.clone(), compared_to.clone())
                } else {
                    (Vec::new(), None)
                };
                Some(draft_document(
                    chain,
                    topo.version,
                    &topo.topology,
                    "",
                    &run,
                    reason,
                    &principal.name,
                    &created_at,
                    drift_part,
                )?)
            }
            None => None,
        };
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
        match state
            .store
            .insert_run(new_run, draft, compared_to.clone(), audit)
            .await
        {
            Ok((stored, baseline)) => {
                if reason == Some(BaselineReason::Drift) && baseline.is_some() {
                    crate::observe::drift_event();
                }
                state.archiver.kick();
                return Ok(RunOutcome {
                    run_id: stored.id,
                    chain: chain.to_owned(),
                    topology_version: topo.version,
                    drift,
                    comparison,
                    compared_to,
                    baseline_id: baseline.as_ref().map(|b| b.doc.id.clone()),
                    reason,
                    findings: baseline.map(|b| b.doc.findings).unwrap_or_default(),
                    format,
                    tool: tool.clone(),
                    segments: segments.clone(),
                    mapping: mapping.clone(),
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

#[tracing::instrument(skip_all, fields(chain = ?chain, run = ?run_id))]
pub async fn recompute(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    run_id: &str,
    topology_version: Option<i64>,
) -> ApiResult<StoredBaseline> {
    check_chain_name(chain)?;
    let run = state.store.get_run(chain, run_id).await?;
    let topo = state.store.get_topology(chain, topology_version).await?;
    let doc = draft_document(
        chain,
        topo.version,
        &topo.topology,
        &run.id,
        &run.data,
        BaselineReason::Recompute,
        &principal.name,
        &now(),
        (Vec::new(), None),
    )?;
    let audit = audit(
        principal,
        "baseline.recompute",
        Some(chain),
        json!({"run_id": run.id, "topology_version": topo.version}),
    );
    let stored = state.store.insert_baseline(doc, audit).await?;
    state.archiver.kick();
    Ok(stored)
}

#[tracing::instrument(skip_all, fields(baseline = ?id))]
pub async fn approve(
    state: &AppState,
    principal: &Principal,
    id: &str,
    comment: Option<String>,
) -> ApiResult<(StoredBaseline, Option<Published>)> {
    // Whether it is still a draft is decided by the store, in the transaction.
    let stored = state.store.get_baseline(id).await?;
    if stored.doc.has_errors() {
        let errors: Vec<&Finding> = stored
            .doc
            .findings
            .iter()
            .filter(|f| f.severity == budget_core::Severity::Error)
            .collect();
        return Err(ApiError::validation(
            format!(
                "baseline {id} has {} error finding(s) and cannot be approved",
                errors.len()
            ),
            json!({ "findings": errors }),
        ));
    }
    // Four eyes compares people, not tokens: whoever owns the token that uploaded the run
    // may not approve, whichever of their tokens they use (admin included).
    if state.settings.approval.require_distinct_approver
        && stored.run_uploaded_by_owner == principal.owner
    {
        return Err(ApiError::forbidden(format!(
            "four eyes: {:?} owns the token {:?} that uploaded run {} and cannot approve its baseline; another person must",
            principal.owner, stored.run_uploaded_by, stored.doc.run_id
        )));
    }
    let audit = audit(
        principal,
        "baseline.approve",
        Some(&stored.doc.chain),
        json!({"comment": comment, "token": principal.name, "owner": principal.owner}),
    );
    let decided = state
        .store
        .decide(id, Verdict::Approve, comment, audit)
        .await?;
    republish(state).await;
    Ok(decided)
}

/// Brings this replica's hub up to date after a publication (other replicas hear of it by
/// notification or their catch-up read). The publication is committed either way.
async fn republish(state: &AppState) {
    state.archiver.kick();
    if let Err(e) = state.hub.refresh().await {
        tracing::warn!(error = %e, "hub refresh after a publication failed; the catch-up read will retry");
    }
}

#[tracing::instrument(skip_all, fields(baseline = ?id))]
pub async fn reject(
    state: &AppState,
    principal: &Principal,
    id: &str,
    comment: Option<String>,
) -> ApiResult<StoredBaseline> {
    let comment = comment.filter(|c| !c.trim().is_empty()).ok_or_else(|| {
        ApiError::validation(
            "a rejection needs a comment saying why",
            json!({"violations": [{"pointer": "/comment", "message": "required, non-empty"}]}),
        )
    })?;
    // Whether it is still a draft is decided by the store, in the transaction.
    let stored = state.store.get_baseline(id).await?;
    let audit = audit(
        principal,
        "baseline.reject",
        Some(&stored.doc.chain),
        json!({"comment": comment, "token": principal.name, "owner": principal.owner}),
    );
    let (rejected, _) = state
        .store
        .decide(id, Verdict::Reject, Some(comment), audit)
        .await?;
    state.archiver.kick();
    Ok(rejected)
}

#[tracing::instrument(skip_all, fields(chain = ?chain, baseline = ?id))]
pub async fn rollback(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    id: &str,
) -> ApiResult<Published> {
    check_chain_name(chain)?;
    let target = state.store.get_baseline(id).await?;
    if target.doc.chain != chain {
        return Err(ApiError::not_found(format!(
            "baseline {id} belongs to chain {:?}, not {chain:?}",
            target.doc.chain
        )));
    }
    if target.doc.has_errors() {
        return Err(ApiError::validation(
            format!("baseline {id} has error findings and cannot be published"),
            json!({"findings": target.doc.findings}),
        ));
    }
    let audit = audit(
        principal,
        "chain.rollback",
        Some(chain),
        json!({"token": principal.name, "owner": principal.owner}),
    );
    let published = state.store.rollback(chain, id, audit).await?;
    republish(state).await;
    Ok(published)
}

/// The live config of a chain: its latest publication.
#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn budgets(state: &AppState, chain: &str) -> ApiResult<LiveChain> {
    check_chain_name(chain)?;
    let publication = state
        .store
        .latest_publication(chain)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "chain {chain:?} has no published budgets yet: approve a baseline first"
            ))
        })?;
    let baseline = state.store.get_baseline(&publication.baseline_id).await?;
    Ok(LiveChain::from_baseline(
        &baseline.doc,
        publication.revision,
        &publication.created_at,
    ))
}

#[tracing::instrument(skip_all, fields(baseline = ?id, against = ?against))]
pub async fn diff(state: &AppState, id: &str, against: &str) -> ApiResult<BaselineDiff> {
    let to = state.store.get_baseline(id).await?;
    let from = if against == "current" {
        state
            .store
            .current_baseline(&to.doc.chain)
            .await?
            .ok_or_else(|| {
                ApiError::not_found(format!(
                    "chain {:?} has no approved baseline to compare with",
                    to.doc.chain
                ))
            })?
    } else {
        state.store.get_baseline(against).await?
    };
    Ok(budget_core::diff::diff(&from.doc, &to.doc))
}

/// Records a release citing a baseline: the baseline must exist and have been approved
/// (approved or superseded); its document's SHA-256 is kept with the release.
#[tracing::instrument(skip_all)]
pub async fn record_release(
    state: &AppState,
    principal: &Principal,
    body: Value,
) -> ApiResult<Release> {
    let field = |name: &str, max: usize| -> ApiResult<String> {
        match body.get(name) {
            Some(Value::String(s))
                if !s.trim().is_empty() && s.len() <= max && !s.chars().any(char::is_control) =>
            {
                Ok(s.trim().to_owned())
            }
            _ => Err(ApiError::validation(
                format!("{name} is required: a non-empty string of at most {max} characters"),
                json!({"violations": [{"pointer": format!("/{name}"), "message": format!("required string, 1-{max} characters")}]}),
            )),
        }
    };
    if !body.is_object() {
        return Err(ApiError::validation(
            "the body must be a JSON object",
            json!({"violations": [{"pointer": "", "message": "expected an object"}]}),
        ));
    }
    let release = NewRelease {
        service: field("service", 128)?,
        version: field("version", 128)?,
        baseline_id: field("baseline_id", 64)?,
        ticket: field("ticket", 256)?,
    };
    let baseline = match state.store.get_baseline(&release.baseline_id).await {
        Ok(b) => b,
        Err(StoreError::NotFound(_)) => {
            return Err(ApiError::validation(
                format!(
                    "baseline {} does not exist; a release must cite an approved baseline",
                    release.baseline_id
                ),
                json!({"violations": [{"pointer": "/baseline_id", "message": "unknown baseline"}]}),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    if !matches!(
        baseline.doc.state,
        BaselineState::Approved | BaselineState::Superseded
    ) {
        return Err(ApiError::validation(
            format!(
                "baseline {} is {}; a release must cite an approved baseline",
                release.baseline_id,
                baseline.doc.state.as_str()
            ),
            json!({"violations": [{"pointer": "/baseline_id", "message": format!("baseline is {}", baseline.doc.state.as_str())}]}),
        ));
    }
    let audit = Audit {
        subject: Some(release.baseline_id.clone()),
        ..audit(
            principal,
            "release.record",
            Some(&baseline.doc.chain),
            json!({"service": release.service, "version": release.version, "ticket": release.ticket}),
        )
    };
    Ok(state
        .store
        .create_release(release, &baseline.sha256, audit)
        .await?)
}
