//! Baselines: recompute, read, list, diff, the call tree's numbers, and the decisions —
//! approve, reject, roll back. Eligibility is `budget_core::lifecycle`'s; whether the baseline
//! is still a draft (or superseded, for a rollback) is decided by the store inside the
//! transaction that moves it, so a repeat of a committed request finds its result.

use budget_api::baselines::{ApprovalBlocker, ApprovalCheck, BaselineSummary};
use budget_core::baseline::BaselineState;
use budget_core::canary::Rollout;
use budget_core::capacity;
use budget_core::diff::BaselineDiff;
use budget_core::intake::{self, DraftOf};
use budget_core::lifecycle::{self, ApproveError, Policy, PublishError, RejectError, Uploader};
use serde_json::json;

use super::{audit, now, republish, violations_of};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::{BaselineCursor, Published, StoredBaseline, Verdict};

impl From<ApproveError> for ApiError {
    fn from(e: ApproveError) -> Self {
        let message = e.to_string();
        match e {
            ApproveError::ErrorFindings { errors, .. } => {
                ApiError::validation(message, json!({ "findings": errors }))
            }
            ApproveError::FourEyes { .. } => ApiError::forbidden(message),
        }
    }
}

impl From<RejectError> for ApiError {
    fn from(e: RejectError) -> Self {
        match e {
            RejectError::CommentRequired => {
                super::violation("/comment", e.to_string(), "required, non-empty")
            }
        }
    }
}

impl From<PublishError> for ApiError {
    fn from(e: PublishError) -> Self {
        let message = e.to_string();
        match e {
            PublishError::OtherChain { .. } => ApiError::not_found(message),
            PublishError::ErrorFindings { findings, .. } => {
                ApiError::validation(message, json!({ "findings": findings }))
            }
        }
    }
}

/// A new draft computed from a stored run, on the chain's newest topology or `topology_version`.
#[tracing::instrument(skip_all, fields(chain = ?chain, run = ?run_id))]
pub async fn recompute(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    run_id: &str,
    topology_version: Option<i64>,
) -> ApiResult<StoredBaseline> {
    let latest = super::chains::known(state, chain).await?;
    let run = state.store.get_run(chain, run_id).await?;
    let topo = match topology_version {
        Some(v) if v != latest.version => state.store.get_topology(chain, Some(v)).await?,
        _ => latest,
    };
    let tails = super::distributions::tails(&run.data);
    let doc = intake::recompute(&DraftOf {
        chain,
        topology_version: topo.version,
        topology: &topo.topology,
        run_id: &run.id,
        run: &run.data,
        tails: &tails,
        created_by: &principal.name,
        created_at: &now(),
    })
    .map_err(|errs| {
        violations_of(
            format!("the run does not cover the topology of {chain:?}"),
            errs,
        )
    })?;
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

/// A baseline as stored (its document's bytes are served as they are archived).
#[tracing::instrument(skip_all, fields(baseline = ?id))]
pub async fn get(state: &AppState, id: &str) -> ApiResult<StoredBaseline> {
    Ok(state.store.get_baseline(id).await?)
}

/// Up to `limit` baselines of a chain, newest first, after `before` (a page's last key),
/// of one `state` or all.
#[tracing::instrument(skip_all, fields(chain = ?chain))]
pub async fn list(
    state: &AppState,
    chain: &str,
    filter: Option<BaselineState>,
    before: Option<&BaselineCursor>,
    limit: i64,
) -> ApiResult<Vec<BaselineSummary>> {
    super::chains::known(state, chain).await?;
    Ok(state
        .store
        .list_baselines(chain, filter, before, limit)
        .await?)
}

/// What changes from `against` (a baseline id, or `current`: the chain's approved baseline)
/// to baseline `id`.
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

/// The call tree of a baseline, in numbers: every parent's need against its time, and how
/// each budget is made. What the console draws.
pub use budget_api::baselines::BaselineTree as Tree;

#[tracing::instrument(skip_all, fields(baseline = ?id))]
pub async fn tree(state: &AppState, id: &str) -> ApiResult<Tree> {
    let baseline = state.store.get_baseline(id).await?;
    let doc = baseline.doc;
    let topo = state
        .store
        .get_topology(&doc.chain, Some(doc.topology_version))
        .await?;
    Ok(Tree {
        capacity: capacity::capacity(&topo.topology, &doc.segments),
        baseline_id: doc.id,
    })
}

/// Whether `principal` may approve baseline `id` now, with every reason they may not
/// (`lifecycle::approval_blockers`, on what the store holds now; the approval itself checks
/// again in its transaction).
#[tracing::instrument(skip_all, fields(baseline = ?id))]
pub async fn approval(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> ApiResult<ApprovalCheck> {
    let stored = state.store.get_baseline(id).await?;
    let newest = state.store.newest_baseline(&stored.doc.chain).await?;
    let uploader = Uploader {
        token: &stored.run_uploaded_by,
        owner: &stored.run_uploaded_by_owner,
    };
    let policy = Policy {
        require_distinct_approver: state.settings.approval.require_distinct_approver,
    };
    let blockers: Vec<ApprovalBlocker> = lifecycle::approval_blockers(
        &stored.doc,
        uploader,
        &principal.owner,
        policy,
        newest.as_deref(),
    )
    .iter()
    .map(|b| ApprovalBlocker {
        code: b.code().into(),
        message: b.to_string(),
    })
    .collect();
    let mut blockers = blockers;
    let chain = &stored.doc.chain;
    if let Some(r) = state
        .store
        .baking_rollouts()
        .await?
        .into_iter()
        .find(|r| &r.chain == chain)
    {
        blockers.push(ApprovalBlocker {
            code: "canary_baking".into(),
            message: format!(
                "a canary of {chain} is baking (baseline {}, until {}): promote or abort it first",
                r.baseline_id, r.bake_ends_at
            ),
        });
    }
    Ok(ApprovalCheck {
        baseline_id: stored.doc.id,
        chain: stored.doc.chain,
        may_approve: blockers.is_empty(),
        blockers,
        newest_baseline: newest,
    })
}

/// Approves a draft and publishes it: no error finding, four eyes by owner (SPEC §7); with a
/// `rollout`, to the canary's agents first (SPEC §9).
#[tracing::instrument(skip_all, fields(baseline = ?id))]
pub async fn approve(
    state: &AppState,
    principal: &Principal,
    id: &str,
    comment: Option<String>,
    rollout: Option<&Rollout>,
) -> ApiResult<(StoredBaseline, Option<Published>)> {
    let stored = state.store.get_baseline(id).await?;
    let uploader = Uploader {
        token: &stored.run_uploaded_by,
        owner: &stored.run_uploaded_by_owner,
    };
    let policy = Policy {
        require_distinct_approver: state.settings.approval.require_distinct_approver,
    };
    lifecycle::approve(&stored.doc, uploader, &principal.owner, policy)?;
    if let Some(rollout) = rollout {
        let (approved, published) =
            super::rollouts::approve(state, principal, &stored, comment, rollout).await?;
        return Ok((approved, Some(published)));
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

/// Rejects a draft; the comment says why.
#[tracing::instrument(skip_all, fields(baseline = ?id))]
pub async fn reject(
    state: &AppState,
    principal: &Principal,
    id: &str,
    comment: Option<String>,
) -> ApiResult<StoredBaseline> {
    let comment = lifecycle::rejection_comment(comment)?;
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

/// Publishes an older approved baseline of `chain` again.
#[tracing::instrument(skip_all, fields(chain = ?chain, baseline = ?id))]
pub async fn rollback(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    id: &str,
) -> ApiResult<Published> {
    super::chains::known(state, chain).await?;
    let target = state.store.get_baseline(id).await?;
    lifecycle::publish(&target.doc, chain)?;
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
