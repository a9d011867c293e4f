//! `budgetctl budgets show` (a chain's live config) and `budgetctl rollback` (serve an older
//! approved baseline again).

use budget_api::chains::RollbackRequest;

use super::{body_of, get_and_show, post_and_show, resolve};
use crate::cli::BudgetsCommand;
use crate::{render, Client, CtlError};

pub(super) async fn run(
    command: BudgetsCommand,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    match command {
        BudgetsCommand::Show { chain } => {
            let url = client.url(&["chains", &chain, "budgets"]);
            get_and_show(client, url, json, render::budgets).await
        }
    }
}

pub(super) async fn rollback(
    chain: &str,
    baseline_id: &str,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    // An alias is resolved on the chain; an id goes as it is (the server checks its chain).
    let baseline_id = if [resolve::CURRENT, resolve::LATEST_DRAFT].contains(&baseline_id) {
        resolve::baseline_id(client, baseline_id, Some(chain)).await?
    } else {
        baseline_id.to_owned()
    };
    let url = client.url(&["chains", chain, "rollback"]);
    let payload = body_of(&RollbackRequest { baseline_id });
    post_and_show(client, url, Some(payload), json, render::rolled_back).await
}
