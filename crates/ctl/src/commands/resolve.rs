//! Baseline aliases: `current` (a chain's approved baseline) and `latest-draft` (its newest
//! pending draft) name a baseline with `--chain`; they are resolved to an id here, before the
//! command acts on that id. The server's API takes ids only (releases must cite the id), so the
//! alias never reaches it.

use budget_api::baselines::BaselineList;
use budget_core::baseline::BaselineDocument;
use serde::Deserialize as _;
use serde_json::json;

use super::with_query;
use crate::cli::BaselineRef;
use crate::{Client, CtlError, Exit};

/// The chain's approved baseline.
pub(super) const CURRENT: &str = "current";
/// The chain's newest pending draft.
pub(super) const LATEST_DRAFT: &str = "latest-draft";

/// The state an alias names, if `id` is one.
fn alias_state(id: &str) -> Option<&'static str> {
    match id {
        CURRENT => Some("approved"),
        LATEST_DRAFT => Some("draft"),
        _ => None,
    }
}

/// The baseline id `id` names: an alias resolved on `chain`, or the id itself (checked to
/// belong to `chain` when one is given).
pub(super) async fn baseline_id(
    client: &Client,
    id: &str,
    chain: Option<&str>,
) -> Result<String, CtlError> {
    match (alias_state(id), chain) {
        (Some(_), None) => Err(CtlError::Input(format!(
            "`{id}` names a baseline of a chain: add --chain CHAIN (e.g. --chain checkout)"
        ))),
        (Some(state), Some(chain)) => {
            let url = with_query(
                client.url(&["chains", chain, "baselines"]),
                &[("state", Some(state.into())), ("limit", Some("1".into()))],
            );
            let answer = client.get(url).await?;
            let list = BaselineList::deserialize(&answer).map_err(|e| {
                CtlError::Internal(format!(
                    "the baseline list is not what budgetctl reads: {e}"
                ))
            })?;
            match list.baselines.into_iter().next() {
                Some(b) => Ok(b.id),
                None => Err(CtlError::Refused {
                    exit: Exit::NotFound,
                    code: "not_found".into(),
                    message: match state {
                        "approved" => format!("chain {chain} has no approved baseline yet"),
                        _ => format!("chain {chain} has no pending draft"),
                    },
                    details: json!({"chain": chain, "alias": id}),
                }),
            }
        }
        (None, None) => Ok(id.to_owned()),
        (None, Some(chain)) => {
            let answer = client.get(client.url(&["baselines", id])).await?;
            let doc = BaselineDocument::deserialize(&answer).map_err(|e| {
                CtlError::Internal(format!(
                    "baseline {id} is not a document budgetctl reads: {e}"
                ))
            })?;
            if doc.chain == chain {
                Ok(doc.id)
            } else {
                Err(CtlError::conflict(
                    "wrong_chain",
                    format!("baseline {id} belongs to chain {}, not {chain}", doc.chain),
                    json!({"baseline_id": id, "chain": doc.chain, "wanted_chain": chain}),
                ))
            }
        }
    }
}

/// The id a [`BaselineRef`] names.
pub(super) async fn reference(client: &Client, r: &BaselineRef) -> Result<String, CtlError> {
    baseline_id(client, &r.id, r.chain.as_deref()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_name_a_state() {
        assert_eq!(alias_state("current"), Some("approved"));
        assert_eq!(alias_state("latest-draft"), Some("draft"));
        assert_eq!(alias_state("bl-20261130-001"), None);
        assert_eq!(alias_state("Current"), None);
    }
}
