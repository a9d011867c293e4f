//! `budgetctl baseline list|show|rollout|diff|approve|reject|recompute`.

use serde_json::json;

use super::{get_and_show, post_and_show, with_query};
use crate::cli::BaselineCommand;
use crate::output::{print, show};
use crate::{render, Client, CtlError};

pub(super) async fn run(
    command: BaselineCommand,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    match command {
        BaselineCommand::List { chain, state } => {
            let url = with_query(
                client.url(&["chains", &chain, "baselines"]),
                &[("state", state)],
            );
            show(
                json,
                &client.get_all(url, "baselines").await?,
                render::baselines,
            );
            Ok(())
        }
        BaselineCommand::Show { id } => {
            let doc = client.get(client.url(&["baselines", &id])).await?;
            if json {
                // The document only, byte-for-byte what the archive holds (pretty-printed).
                show(true, &doc, render::baseline);
            } else {
                let (archive, releases) = tokio::join!(
                    client.get(client.url(&["baselines", &id, "archive"])),
                    client.get(client.url(&["baselines", &id, "releases"])),
                );
                // The document is shown even when a side view fails (e.g. an older server).
                let archive = match archive {
                    Ok(v) => render::archive_status(&v),
                    Err(e) => format!("archive: unavailable ({e})"),
                };
                let releases = match releases {
                    Ok(v) => render::baseline_releases(&v),
                    Err(e) => format!("releases: unavailable ({e})"),
                };
                print(&[render::baseline(&doc), archive, releases].join("\n"));
            }
            Ok(())
        }
        BaselineCommand::Rollout { id } => {
            let url = client.url(&["baselines", &id, "rollout"]);
            get_and_show(client, url, json, render::rollout).await
        }
        BaselineCommand::Diff { id, against } => {
            let url = with_query(
                client.url(&["baselines", &id, "diff"]),
                &[("against", Some(against))],
            );
            get_and_show(client, url, json, render::diff).await
        }
        BaselineCommand::Approve { id, comment } => {
            let url = client.url(&["baselines", &id, "approve"]);
            let payload = comment.map(|c| json!({ "comment": c }));
            post_and_show(client, url, payload, json, render::approved).await
        }
        BaselineCommand::Reject { id, comment } => {
            let url = client.url(&["baselines", &id, "reject"]);
            let payload = json!({ "comment": comment });
            post_and_show(client, url, Some(payload), json, render::rejected).await
        }
        BaselineCommand::Recompute {
            chain,
            run_id,
            topology_version,
        } => {
            let mut req = json!({ "run_id": run_id });
            if let Some(n) = topology_version {
                req["topology_version"] = json!(n);
            }
            let url = client.url(&["chains", &chain, "baselines"]);
            post_and_show(client, url, Some(req), json, render::recomputed).await
        }
    }
}
