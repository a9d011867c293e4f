//! Releases citing baseline ids (SPEC §1.6): recorded only for a baseline that was approved.

use budget_api::releases::{Release, ReleaseRequest};
use budget_core::baseline::BaselineState;
use serde_json::json;

use super::{audit, violation};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::{Audit, StoreError};

/// The most bytes field `name` of a release request may hold.
fn max_len(name: &str) -> usize {
    match name {
        "service" | "version" => 128,
        "baseline_id" => 64,
        _ => 256,
    }
}

/// Why field `name` of a release request is refused: missing, not a string, blank, too long or
/// holding a control character.
pub fn refused(name: &str) -> ApiError {
    let max = max_len(name);
    violation(
        &format!("/{name}"),
        format!("{name} is required: a non-empty string of at most {max} characters"),
        format!("required string, 1-{max} characters"),
    )
}

/// The request with every field checked and trimmed, or the first field refused.
fn checked(request: &ReleaseRequest) -> ApiResult<ReleaseRequest> {
    let field = |name: &str, value: &str| {
        if value.trim().is_empty()
            || value.len() > max_len(name)
            || value.chars().any(char::is_control)
        {
            Err(refused(name))
        } else {
            Ok(value.trim().to_owned())
        }
    };
    Ok(ReleaseRequest {
        service: field("service", &request.service)?,
        version: field("version", &request.version)?,
        baseline_id: field("baseline_id", &request.baseline_id)?,
        ticket: field("ticket", &request.ticket)?,
    })
}

/// Records a release citing a baseline: the baseline must exist and have been approved
/// (approved or superseded); its document's SHA-256 is kept with the release.
#[tracing::instrument(skip_all)]
pub async fn record_release(
    state: &AppState,
    principal: &Principal,
    request: ReleaseRequest,
) -> ApiResult<Release> {
    let release = checked(&request)?;
    let baseline = match state.store.get_baseline(&release.baseline_id).await {
        Ok(b) => b,
        Err(StoreError::NotFound(_)) => {
            return Err(violation(
                "/baseline_id",
                format!(
                    "baseline {} does not exist; a release must cite an approved baseline",
                    release.baseline_id
                ),
                "unknown baseline",
            ))
        }
        Err(e) => return Err(e.into()),
    };
    if !budget_core::lifecycle::citable(&baseline.doc) {
        let state = match baseline.doc.state {
            BaselineState::Superseded => "a superseded draft (never approved)",
            other => other.as_str(),
        };
        return Err(violation(
            "/baseline_id",
            format!(
                "baseline {} is {state}; a release must cite an approved baseline",
                release.baseline_id,
            ),
            format!("baseline is {state}"),
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

/// Releases, newest first: of one baseline and/or one service, at most `limit`.
pub async fn list(
    state: &AppState,
    baseline_id: Option<&str>,
    service: Option<&str>,
    limit: i64,
) -> ApiResult<Vec<Release>> {
    Ok(state
        .store
        .list_releases(baseline_id, service, limit)
        .await?)
}

/// Every release citing baseline `id` (at most 1000); `404` for an unknown baseline.
pub async fn of_baseline(state: &AppState, id: &str) -> ApiResult<Vec<Release>> {
    state.store.get_baseline(id).await?;
    Ok(state.store.list_releases(Some(id), None, 1000).await?)
}
