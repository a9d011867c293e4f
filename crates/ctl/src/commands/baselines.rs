//! `budgetctl baseline list|show|rollout|diff|whatif|approve|reject|recompute`.

use budget_api::baselines::{ApproveRequest, Comment, RecomputeRequest};
use budget_core::canary::Rollout;

use super::resolve::{self, LATEST_DRAFT};
use super::{body_of, get_and_show, post_and_show, with_query};
use crate::cli::BaselineCommand;
use crate::output::{print, render_as, show};
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
        BaselineCommand::Show { baseline } => {
            let id = resolve::reference(client, &baseline).await?;
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
                    Ok(v) => render_as(&v, render::archive_status),
                    Err(e) => format!("archive: unavailable ({e})"),
                };
                let releases = match releases {
                    Ok(v) => render_as(&v, render::baseline_releases),
                    Err(e) => format!("releases: unavailable ({e})"),
                };
                let doc = render_as(&doc, render::baseline);
                print(&[doc, archive, releases].join("\n"));
            }
            Ok(())
        }
        BaselineCommand::Whatif {
            baseline,
            segment,
            timeout,
        } => {
            let id = resolve::reference(client, &baseline).await?;
            let url = with_query(
                client.url(&["baselines", &id, "whatif"]),
                &[
                    ("segment", Some(segment)),
                    ("timeout_ms", Some(timeout.to_string())),
                ],
            );
            get_and_show(client, url, json, render::whatif).await
        }
        BaselineCommand::Rollout { baseline } => {
            let id = resolve::reference(client, &baseline).await?;
            let url = client.url(&["baselines", &id, "rollout"]);
            get_and_show(client, url, json, render::rollout).await
        }
        BaselineCommand::Diff { baseline, against } => {
            let id = resolve::reference(client, &baseline).await?;
            // `current` is the server's own (the live baseline of the compared one's chain).
            let against = if against == LATEST_DRAFT {
                resolve::baseline_id(client, &against, baseline.chain.as_deref()).await?
            } else {
                against
            };
            let url = with_query(
                client.url(&["baselines", &id, "diff"]),
                &[("against", Some(against))],
            );
            get_and_show(client, url, json, render::diff).await
        }
        BaselineCommand::Approve {
            baseline,
            comment,
            canary,
            bake,
            manual,
        } => {
            let id = resolve::reference(client, &baseline).await?;
            let url = client.url(&["baselines", &id, "approve"]);
            let rollout = canary.map(|canary| Rollout {
                canary,
                bake_s: bake,
                auto: !manual,
            });
            let hint = rollout.as_ref().map(|r| {
                format!(
                    "canary: {} for {} s, {}; follow it with: budgetctl rollout status {id}",
                    render::selector(&r.canary),
                    r.bake_s,
                    if r.auto {
                        "then promoted or aborted by what its agents do"
                    } else {
                        "then a person promotes or aborts it"
                    }
                )
            });
            let payload = (comment.is_some() || rollout.is_some())
                .then(|| body_of(&ApproveRequest { comment, rollout }));
            post_and_show(client, url, payload, json, render::approved).await?;
            if let (Some(hint), false) = (hint, json) {
                print(&hint);
            }
            Ok(())
        }
        BaselineCommand::Reject { baseline, comment } => {
            let id = resolve::reference(client, &baseline).await?;
            let url = client.url(&["baselines", &id, "reject"]);
            let payload = body_of(&Comment {
                comment: Some(comment),
            });
            post_and_show(client, url, Some(payload), json, render::rejected).await
        }
        BaselineCommand::Recompute {
            chain,
            run_id,
            topology_version,
        } => {
            let req = body_of(&RecomputeRequest {
                run_id,
                topology_version,
                // a draft from a stored run (not from production reports)
                from: None,
                window: None,
            });
            let url = client.url(&["chains", &chain, "baselines"]);
            post_and_show(client, url, Some(req), json, render::recomputed).await
        }
    }
}
