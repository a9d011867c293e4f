//! The use cases: what the transports (HTTP, gRPC) and the `budgetd` commands call, one
//! function per operation, reads included. Each validates its input, loads what the rules
//! need, calls the rules of `budget-core` (`intake`, `lifecycle`, …) with the time and the
//! actor, and stores the result. Handlers only extract, call one function here and map its
//! result; they never name the store (a test checks it).
//!
//! One file per resource: [`chains`] (topologies, live budgets), [`runs`], [`baselines`]
//! (recompute, decisions, rollback, diff), [`rollouts`] (canary approval, promote, abort and
//! their evaluator), [`releases`], [`tokens`], [`agents`] (fleet,
//! Watch and Ack), [`archive`], [`audit`], [`admin`] (readiness, gauges, export and import)
//! and [`idempotency`] (the store's side of `Idempotency-Key`).

pub mod admin;
pub mod agents;
pub mod approved;
pub mod archive;
pub mod audit;
pub mod baselines;
pub mod chains;
pub mod distributions;
pub mod feedback;
pub mod idempotency;
pub mod releases;
pub mod rollouts;
pub mod runs;
pub mod tokens;

use serde::Serialize;
use serde_json::{json, Value};

pub use self::baselines::{approve, diff, recompute, reject, rollback};
pub use self::chains::{budgets, check_chain_name, put_topology};
pub use self::releases::record_release;
pub use self::runs::{upload_run, upload_tool_run, RunOutcome};
pub use crate::clock::now;

use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::schemas::Schema;
use crate::state::AppState;
use crate::store::Audit;

/// The audit entry of an action by `principal`, now.
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

/// Schema check, then typed parse: the violations with their JSON pointers
/// ([`Schema::check`]: the first 100, or of a large document the first).
fn parse_with_schema<T: serde::de::DeserializeOwned>(schema: Schema, body: Value) -> ApiResult<T> {
    let (violations, total) = schema.check(&body);
    if !violations.is_empty() {
        let count = match total {
            Some(total) if total > violations.len() => {
                format!("{total} violations; the first {} listed", violations.len())
            }
            Some(total) => format!("{total} violations"),
            None => format!(
                "the first violation; a document of more than {} values is checked up to its \
                 first",
                crate::schemas::LISTED_VALUES
            ),
        };
        return Err(ApiError::validation(
            format!(
                "the document does not match the {} schema ({count})",
                schema.name(),
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

/// `422` with one violation at `pointer`.
pub fn violation(pointer: &str, message: impl Into<String>, detail: impl Into<String>) -> ApiError {
    ApiError::validation(
        message,
        json!({"violations": [{"pointer": pointer, "message": detail.into()}]}),
    )
}

/// Brings this replica's hub up to date after a publication (other replicas hear of it by
/// notification or their catch-up read). The publication is committed either way.
async fn republish(state: &AppState) {
    state.archiver.kick();
    if let Err(e) = state.hub.refresh().await {
        tracing::warn!(error = %e, "hub refresh after a publication failed; the catch-up read will retry");
    }
}

#[cfg(test)]
mod tests {
    //! Architecture invariant: the transports reach the store only through this module.

    use std::path::{Path, PathBuf};

    /// What a transport file must not name: the store handle of the state, or the `Store`
    /// trait (as a whole word: `StoredRun` is a type the service returns, and fine).
    const FORBIDDEN: [&str; 3] = ["state.store", ".store.", "Store"];

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }

    /// Whether `line` holds `pattern` as a whole name (`Store` is not `StoredRun`).
    fn names(line: &str, pattern: &str) -> bool {
        let ident = |c: char| c.is_alphanumeric() || c == '_';
        line.match_indices(pattern).any(|(at, _)| {
            !line[at + pattern.len()..].starts_with(ident) && !line[..at].ends_with(ident)
        })
    }

    /// Every `(file, line number, pattern)` under `dirs` naming a forbidden pattern.
    fn offences(dirs: &[&str]) -> Vec<(String, usize, &'static str)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in dirs {
            rust_files(&root.join(dir), &mut files);
        }
        assert!(files.len() > 5, "no transport files found under {dirs:?}");
        let mut found = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                for pattern in FORBIDDEN.iter().filter(|p| names(line, p)) {
                    let name = file.strip_prefix(root).unwrap_or(&file);
                    found.push((name.display().to_string(), n + 1, *pattern));
                }
            }
        }
        found
    }

    #[test]
    fn transports_never_name_the_store() {
        let found = offences(&["src/http", "src/grpc"]);
        assert!(
            found.is_empty(),
            "HTTP and gRPC handlers must call one function of crate::service instead of the \
             store; found: {found:#?}"
        );
    }

    #[test]
    fn whole_names_only() {
        let check = |line: &str, expect: bool| {
            assert_eq!(FORBIDDEN.iter().any(|p| names(line, p)), expect, "{line}");
        };
        check("let b = state.store.get_baseline(id).await?;", true);
        check("self.state.store.find_token(&hash)", true);
        check("use crate::store::Store;", true);
        check("use crate::store::{Store, StoredRun};", true);
        check("store: Arc<dyn Store>,", true);
        check("use crate::store::StoredBaseline;", false);
        check("activity.served.store(true, Ordering::SeqCst);", false);
    }

    #[test]
    fn the_check_sees_an_offence() {
        // The scanner itself: the service names the store, so it is found there.
        let found = offences(&["src/service"]);
        assert!(
            found.iter().any(|(_, _, p)| *p == "state.store"),
            "{found:?}"
        );
    }
}
