//! `budgetctl rollout status|promote|abort`: a canary rollout (SPEC §9).

use budget_api::baselines::{CanaryDecision, Rollout};

use super::{body_of, post_and_show, resolve};
use crate::cli::RolloutCommand;
use crate::output::show;
use crate::{render, Client, CtlError};

pub(super) async fn run(
    command: RolloutCommand,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    let (baseline, verb, comment) = match command {
        RolloutCommand::Status { baseline } => {
            let id = resolve::reference(client, &baseline).await?;
            let v = client
                .get(client.url(&["baselines", &id, "rollout"]))
                .await?;
            let rollout: Rollout = serde_json::from_value(v.clone())
                .map_err(|e| CtlError::Internal(format!("unexpected answer: {e}")))?;
            if json {
                show(true, &v, render::rollout);
            } else if let Some(c) = &rollout.canary {
                crate::output::print(&format!(
                    "{} ({})\n{}",
                    rollout.baseline_id,
                    rollout.chain,
                    render::canary(c)
                ));
            } else {
                return Err(CtlError::Input(format!(
                    "{id} was not approved with a canary: it went to every agent at once (budgetctl baseline rollout {id})"
                )));
            }
            return Ok(());
        }
        RolloutCommand::Promote { baseline, comment } => (baseline, "promote", comment),
        RolloutCommand::Abort { baseline, comment } => (baseline, "abort", comment),
    };
    let id = resolve::reference(client, &baseline).await?;
    let url = client.url(&["baselines", &id, verb]);
    let payload = comment.map(|c| body_of(&CanaryDecision { comment: Some(c) }));
    post_and_show(client, url, payload, json, render::canary).await
}
