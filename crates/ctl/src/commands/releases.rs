//! `budgetctl release record|list|check`. `check` gates a release pipeline: the verdict is
//! decided here ([`release_verdict`]) from the baseline's state and its chain's current one.

use budget_api::releases::ReleaseRequest;
use serde_json::{json, Value};

use super::resolve::{self, CURRENT, LATEST_DRAFT};
use super::{body_of, get_and_show, post_and_show, with_query};
use crate::cli::ReleaseCommand;
use crate::output::show;
use crate::{render, Client, CtlError};

pub(super) async fn run(
    command: ReleaseCommand,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    match command {
        ReleaseCommand::Record {
            service,
            release_version,
            baseline_id,
            chain,
            ticket,
        } => {
            let baseline_id = resolve::baseline_id(client, &baseline_id, chain.as_deref()).await?;
            let req = body_of(&ReleaseRequest {
                service,
                version: release_version,
                baseline_id,
                ticket,
            });
            let url = client.url(&["releases"]);
            post_and_show(client, url, Some(req), json, render::release).await
        }
        ReleaseCommand::List {
            baseline_id,
            chain,
            service,
            limit,
        } => {
            let baseline_id = match baseline_id {
                Some(id) => Some(resolve::baseline_id(client, &id, chain.as_deref()).await?),
                None => None,
            };
            let url = with_query(
                client.url(&["releases"]),
                &[
                    ("baseline_id", baseline_id),
                    ("service", service),
                    ("limit", limit.map(|n| n.to_string())),
                ],
            );
            get_and_show(client, url, json, render::releases).await
        }
        ReleaseCommand::Check {
            baseline_id,
            chain,
            allow_superseded,
        } => {
            // An alias is resolved on --chain (which the check then applies as well).
            let baseline_id = if [CURRENT, LATEST_DRAFT].contains(&baseline_id.as_str()) {
                resolve::baseline_id(client, &baseline_id, chain.as_deref()).await?
            } else {
                baseline_id
            };
            // 404 → exit 3 (unknown baseline).
            let doc = client.get(client.url(&["baselines", &baseline_id])).await?;
            let own_chain = doc["chain"].as_str().unwrap_or_default();
            let state = doc["state"].as_str().unwrap_or_default();
            let chain_ok = chain.as_deref().is_none_or(|c| c == own_chain);
            // Name the chain's current baseline whenever this one is not it.
            let current = if chain_ok && state != "approved" && !own_chain.is_empty() {
                let url = with_query(
                    client.url(&["chains", own_chain, "baselines"]),
                    &[("state", Some("approved".into()))],
                );
                let list = client.get(url).await?;
                list["baselines"][0]["id"].as_str().map(str::to_owned)
            } else {
                None
            };
            let verdict =
                release_verdict(&doc, chain.as_deref(), current.as_deref(), allow_superseded)?;
            show(json, &verdict, render::release_check);
            Ok(())
        }
    }
}

/// Whether a release may cite the baseline `doc`: the verdict when it may (exit 0), else the
/// failed check (exit 5). `current` is the chain's approved baseline, when it has one.
fn release_verdict(
    doc: &Value,
    chain: Option<&str>,
    current: Option<&str>,
    allow_superseded: bool,
) -> Result<Value, CtlError> {
    let id = doc["id"].as_str().unwrap_or_default();
    let own_chain = doc["chain"].as_str().unwrap_or_default();
    let state = doc["state"].as_str().unwrap_or_default();
    // An approved baseline is its chain's current one.
    let current = if state == "approved" {
        Some(id)
    } else {
        current
    };
    let details = json!({
        "baseline_id": id,
        "chain": own_chain,
        "state": state,
        "current_baseline_id": current,
    });
    if let Some(wanted) = chain.filter(|c| *c != own_chain) {
        return Err(CtlError::conflict(
            "wrong_chain",
            format!("baseline {id} belongs to chain {own_chain}, not {wanted}"),
            json!({ "baseline_id": id, "chain": own_chain, "state": state, "wanted_chain": wanted }),
        ));
    }
    let current_is = match current {
        Some(c) => format!("the current baseline of {own_chain} is {c}"),
        None => format!("{own_chain} has no approved baseline"),
    };
    let ok = |message: String| {
        let mut v = details.clone();
        v["ok"] = json!(true);
        v["message"] = json!(message);
        v
    };
    // A draft a newer draft replaced is superseded too, but was never approved.
    let never_approved = state == "superseded" && doc["decision"].is_null();
    match state {
        "superseded" if never_approved => Err(CtlError::conflict(
            "not_approved",
            format!(
                "baseline {id} is a draft that a newer draft ({}) replaced, never approved: {current_is}",
                doc["superseded_by"].as_str().unwrap_or("-")
            ),
            details,
        )),
        "approved" => Ok(ok(format!(
            "{id} is the approved, current baseline of {own_chain}"
        ))),
        "superseded" if allow_superseded => Ok(ok(format!(
            "{id} is superseded ({current_is}), allowed by --allow-superseded"
        ))),
        "superseded" => Err(CtlError::conflict(
            "superseded",
            format!(
                "baseline {id} is superseded: {current_is} (cite it, or pass --allow-superseded)"
            ),
            details,
        )),
        "draft" => Err(CtlError::conflict(
            "not_approved",
            format!("baseline {id} is a draft, not approved: {current_is}"),
            details,
        )),
        "rejected" => Err(CtlError::conflict(
            "not_approved",
            format!("baseline {id} was rejected: {current_is}"),
            details,
        )),
        other => Err(CtlError::conflict(
            "not_approved",
            format!("baseline {id} is {other:?}, not approved: {current_is}"),
            details,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Exit;

    fn doc(state: &str) -> Value {
        let decided = state != "draft";
        let decision = decided.then(|| json!({"by": "abe", "at": "2026-11-30T10:00:00Z"}));
        json!({"id": "bl-20261130-001", "chain": "checkout", "state": state, "decision": decision})
    }

    fn refused(r: Result<Value, CtlError>) -> (String, String) {
        match r {
            Err(CtlError::Refused {
                exit: Exit::Conflict,
                code,
                message,
                ..
            }) => (code, message),
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn release_check_passes_only_the_current_baseline() {
        let v = release_verdict(&doc("approved"), Some("checkout"), None, false).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["current_baseline_id"], "bl-20261130-001");
        assert_eq!(
            v["message"],
            "bl-20261130-001 is the approved, current baseline of checkout"
        );

        let (code, message) = refused(release_verdict(
            &doc("superseded"),
            None,
            Some("bl-20261130-002"),
            false,
        ));
        assert_eq!(code, "superseded");
        assert_eq!(
            message,
            "baseline bl-20261130-001 is superseded: the current baseline of checkout is \
             bl-20261130-002 (cite it, or pass --allow-superseded)"
        );
        let v = release_verdict(&doc("superseded"), None, Some("bl-20261130-002"), true).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["current_baseline_id"], "bl-20261130-002");

        let (code, message) = refused(release_verdict(
            &doc("draft"),
            None,
            Some("bl-20261130-002"),
            true,
        ));
        assert_eq!(code, "not_approved");
        assert!(message.contains("is a draft"), "{message}");
        assert!(message.contains("bl-20261130-002"), "{message}");
        // a draft replaced by a newer draft: superseded, never approved, whatever the flag
        let replaced = json!({"id": "bl-20261130-001", "chain": "checkout", "state": "superseded",
            "superseded_by": "bl-20261130-003"});
        let (code, message) = refused(release_verdict(&replaced, None, None, true));
        assert_eq!(code, "not_approved");
        assert_eq!(
            message,
            "baseline bl-20261130-001 is a draft that a newer draft (bl-20261130-003) replaced, \
             never approved: checkout has no approved baseline"
        );
        let (_, message) = refused(release_verdict(&doc("rejected"), None, None, true));
        assert_eq!(
            message,
            "baseline bl-20261130-001 was rejected: checkout has no approved baseline"
        );

        let (code, message) = refused(release_verdict(
            &doc("approved"),
            Some("search"),
            None,
            false,
        ));
        assert_eq!(code, "wrong_chain");
        assert_eq!(
            message,
            "baseline bl-20261130-001 belongs to chain checkout, not search"
        );
    }
}
