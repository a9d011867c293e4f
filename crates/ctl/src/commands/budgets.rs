//! `budgetctl budgets show` (a chain's live config) and `budgetctl rollback` (serve an older
//! approved baseline again).

use serde_json::json;

use super::{get_and_show, post_and_show};
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
    let url = client.url(&["chains", chain, "rollback"]);
    let payload = json!({ "baseline_id": baseline_id });
    post_and_show(client, url, Some(payload), json, render::rolled_back).await
}
