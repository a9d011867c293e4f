//! Releases citing baseline ids (SPEC §1.6): recorded only for a baseline that was approved.

use budget_core::baseline::BaselineState;
use serde_json::{json, Value};

use super::{audit, violation};
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::state::AppState;
use crate::store::{Audit, NewRelease, Release, StoreError};

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
            _ => Err(violation(
                &format!("/{name}"),
                format!("{name} is required: a non-empty string of at most {max} characters"),
                format!("required string, 1-{max} characters"),
            )),
        }
    };
    if !body.is_object() {
        return Err(violation(
            "",
            "the body must be a JSON object",
            "expected an object",
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
    if !matches!(
        baseline.doc.state,
        BaselineState::Approved | BaselineState::Superseded
    ) {
        return Err(violation(
            "/baseline_id",
            format!(
                "baseline {} is {}; a release must cite an approved baseline",
                release.baseline_id,
                baseline.doc.state.as_str()
            ),
            format!("baseline is {}", baseline.doc.state.as_str()),
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
