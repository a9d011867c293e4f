//! `/api/v1`: one module per resource, each exposing `router()`.

pub mod agents;
pub mod archive;
pub mod audit;
pub mod baselines;
pub mod chains;
pub mod feedback;
pub mod page;
pub mod releases;
pub mod runs;
pub mod tokens;
pub mod turns;
pub mod upload;

use axum::http::Method;
use axum::Router;

use crate::auth::Role;
use crate::state::AppState;

/// Typed JSON bodies and answers: `budget_api`'s types.
pub use crate::http::extract::Json;

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
        (true, "/tokens" | "/webhooks" | "/webhooks/{id}/deliveries") => ADMIN,
        (true, _) => ANY,
        (false, "/chains/{chain}/topology" | "/chains/{chain}/runs") => UPLOADER,
        (false, "/chains/{chain}/baselines" | "/releases") => UPLOADER_OR_APPROVER,
        (
            false,
            "/baselines/{id}/approve"
            | "/baselines/{id}/reject"
            | "/baselines/{id}/promote"
            | "/baselines/{id}/abort"
            | "/chains/{chain}/rollback",
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
        .merge(feedback::router())
}

#[cfg(test)]
mod tests {
    //! `budget_api`'s query types against the OpenAPI document: each has exactly the query
    //! parameters its route documents (the bodies and answers are checked by
    //! `tests/api/openapi.rs`).

    use std::collections::BTreeSet;

    use budget_api::{agents, archive, audit, baselines, chains, feedback, releases, runs};
    use serde::Serialize;
    use serde_json::Value;

    /// The names of the query parameters of `method path`, `$ref`s followed.
    fn documented(doc: &Value, path: &str, method: &str) -> BTreeSet<String> {
        let parameters = doc["paths"][path][method]["parameters"].as_array();
        parameters
            .into_iter()
            .flatten()
            .map(|p| match p["$ref"].as_str() {
                Some(r) => doc.pointer(&r[1..]).expect("a resolvable $ref"),
                None => p,
            })
            .filter(|p| p["in"] == "query")
            .map(|p| p["name"].as_str().expect("a named parameter").to_owned())
            .collect()
    }

    /// The field names of `T` (every field of a query type is an option, written as `null`
    /// when absent).
    fn fields<T: Serialize + Default>() -> BTreeSet<String> {
        match serde_json::to_value(T::default()).expect("a query serialises") {
            Value::Object(m) => m.keys().cloned().collect(),
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn query_types_match_the_documented_parameters() {
        let doc: Value = serde_json::from_str(crate::schemas::OPENAPI).unwrap();
        let checks = [
            ("/api/v1/agents", "get", fields::<agents::AgentListQuery>()),
            ("/api/v1/audit", "get", fields::<audit::AuditQuery>()),
            (
                "/api/v1/archive/verify",
                "get",
                fields::<archive::VerifyQuery>(),
            ),
            (
                "/api/v1/chains/{chain}/baselines",
                "get",
                fields::<baselines::BaselineListQuery>(),
            ),
            (
                "/api/v1/baselines/{id}/diff",
                "get",
                fields::<baselines::DiffQuery>(),
            ),
            (
                "/api/v1/chains/{chain}/topology",
                "get",
                fields::<chains::TopologyQuery>(),
            ),
            (
                "/api/v1/releases",
                "get",
                fields::<releases::ReleaseListQuery>(),
            ),
            (
                "/api/v1/chains/{chain}/runs",
                "get",
                fields::<runs::RunListQuery>(),
            ),
            (
                "/api/v1/chains/{chain}/runs",
                "post",
                fields::<runs::UploadQuery>(),
            ),
            (
                "/api/v1/chains/{chain}/production",
                "get",
                fields::<feedback::ProductionQuery>(),
            ),
            ("/api/v1/alerts", "get", fields::<feedback::AlertQuery>()),
        ];
        for (path, method, fields) in checks {
            assert_eq!(documented(&doc, path, method), fields, "{method} {path}");
        }
    }
}
