//! `/api/v1`: one module per resource, each exposing `router()`.

pub mod agents;
pub mod archive;
pub mod audit;
pub mod baselines;
pub mod chains;
pub mod releases;
pub mod runs;
pub mod tokens;
pub mod upload;

use std::collections::HashMap;

use axum::Router;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(chains::router())
        .merge(runs::router())
        .merge(baselines::router())
        .merge(audit::router())
        .merge(tokens::router())
        .merge(agents::router())
        .merge(archive::router())
        .merge(releases::router())
}

/// Reads an optional integer query parameter within `range`.
pub(crate) fn query_int(
    query: &HashMap<String, String>,
    name: &str,
    range: std::ops::RangeInclusive<i64>,
) -> ApiResult<Option<i64>> {
    let Some(raw) = query.get(name) else {
        return Ok(None);
    };
    match raw.parse::<i64>() {
        Ok(v) if range.contains(&v) => Ok(Some(v)),
        _ => Err(ApiError::bad_request(format!(
            "query parameter {name}={raw:?} must be an integer from {} to {}",
            range.start(),
            range.end()
        ))),
    }
}
