//! `/api/v1`: one module per resource, each exposing `router()`.

pub mod agents;
pub mod archive;
pub mod audit;
pub mod baselines;
pub mod chains;
pub mod page;
pub mod releases;
pub mod runs;
pub mod tokens;
pub mod upload;

use std::collections::HashMap;

use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde::Serialize;

use crate::auth::Role;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// The roles that may call a route besides `admin`, who may call every route.
const ANY: &[Role] = &Role::ALL;
const UPLOADER: &[Role] = &[Role::Uploader];
const APPROVER: &[Role] = &[Role::Approver];
const UPLOADER_OR_APPROVER: &[Role] = &[Role::Uploader, Role::Approver];
const ADMIN: &[Role] = &[Role::Admin];

/// Who may call `method route` (`route` is the template under `/api/v1`, e.g.
/// `/baselines/{id}/approve`). The one place roles are decided: a route layer checks it
/// before the handler runs, so a caller without the role never gets a body read. Reads are
/// open to every role unless listed; a write missing from this table is refused to all but
/// admin, so a new route fails closed.
pub fn roles_for(method: &Method, route: &str) -> &'static [Role] {
    let read = matches!(*method, Method::GET | Method::HEAD);
    match (read, route) {
        // Every object is read in full to compare it: costly, so not for every reader.
        (true, "/archive/verify") => APPROVER,
        (true, "/tokens") => ADMIN,
        (true, _) => ANY,
        (false, "/chains/{chain}/topology" | "/chains/{chain}/runs") => UPLOADER,
        (false, "/chains/{chain}/baselines" | "/releases") => UPLOADER_OR_APPROVER,
        (
            false,
            "/baselines/{id}/approve" | "/baselines/{id}/reject" | "/chains/{chain}/rollback",
        ) => APPROVER,
        (false, _) => ADMIN,
    }
}

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

/// A typed JSON answer: one of `budget_api`'s types, written with its object keys sorted (as
/// `serde_json::Value` writes them), so the bytes on the wire do not depend on field order.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        match serde_json::to_value(&self.0) {
            Ok(v) => axum::Json(v).into_response(),
            Err(e) => ApiError::internal(e.into()).into_response(),
        }
    }
}
