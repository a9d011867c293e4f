//! What each command does: one module per resource builds the URL, calls the server and shows
//! the answer (a table through [`crate::render`], or the JSON with `--json`).
//!
//! Most commands are one request; [`get_and_show`] and [`post_and_show`] are that pattern, and
//! [`with_query`] adds the optional query parameters.

mod agents;
mod alerts;
mod archive;
mod audit;
mod baselines;
mod bench;
mod budgets;
mod chains;
mod production;
mod releases;
mod resolve;
mod rollouts;
mod runs;
mod tokens;
mod webhooks;

use std::path::Path;

use reqwest::Url;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cli::{BenchCommand, Command};
use crate::output::show;
use crate::{Client, CtlError};

/// Runs one command against the server behind `client`.
pub(crate) async fn execute(command: Command, client: &Client, json: bool) -> Result<(), CtlError> {
    match command {
        Command::Topology(cmd) => chains::topology(cmd, client, json).await,
        Command::Run(cmd) => runs::run(cmd, client, json).await,
        Command::Baseline(cmd) => baselines::run(cmd, client, json).await,
        Command::Budgets(cmd) => budgets::run(cmd, client, json).await,
        Command::Rollout(cmd) => rollouts::run(cmd, client, json).await,
        Command::Rollback { chain, baseline_id } => {
            budgets::rollback(&chain, &baseline_id, client, json).await
        }
        Command::Release(cmd) => releases::run(cmd, client, json).await,
        Command::Archive(cmd) => archive::run(cmd, client, json).await,
        Command::Chains => chains::list(client, json).await,
        Command::Audit {
            chain,
            limit,
            before,
        } => audit::list(chain, limit, before, client, json).await,
        Command::Token(cmd) => tokens::run(cmd, client, json).await,
        Command::Agents => agents::list(client, json).await,
        Command::Production { chain, window } => {
            production::show(&chain, window, client, json).await
        }
        Command::Alerts { firing } => alerts::list(firing, client, json).await,
        Command::Webhook(cmd) => webhooks::run(cmd, client, json).await,
        Command::Bench(BenchCommand::Watch(args)) => bench::watch(args, client, json).await,
        Command::Bench(BenchCommand::Report(args)) => bench::report(args, client, json).await,
    }
}

/// `GET url`, then show the answer through `view`.
async fn get_and_show<T: DeserializeOwned>(
    client: &Client,
    url: Url,
    json: bool,
    view: fn(&T) -> String,
) -> Result<(), CtlError> {
    show(json, &client.get(url).await?, view);
    Ok(())
}

/// `POST url` with a JSON body (or none), then show the answer through `view`.
async fn post_and_show<T: DeserializeOwned>(
    client: &Client,
    url: Url,
    payload: Option<Value>,
    json: bool,
    view: fn(&T) -> String,
) -> Result<(), CtlError> {
    let v = client.post(url, payload.map(body)).await?;
    show(json, &v, view);
    Ok(())
}

/// `url` with the query parameters that have a value; without a `?` when none has.
fn with_query(mut url: Url, params: &[(&str, Option<String>)]) -> Url {
    let present: Vec<(&str, &str)> = params
        .iter()
        .filter_map(|(name, value)| value.as_deref().map(|v| (*name, v)))
        .collect();
    if !present.is_empty() {
        url.query_pairs_mut().extend_pairs(present);
    }
    url
}

/// The bytes of an input file; `-` reads stdin.
fn read_input(path: &Path) -> Result<Vec<u8>, CtlError> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut buf)
            .map_err(|e| CtlError::Input(format!("cannot read stdin: {e}")))?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|e| CtlError::Input(format!("cannot read {}: {e}", path.display())))
}

/// A typed request (one of `budget_api`'s) as the JSON value sent.
fn body_of<T: serde::Serialize>(req: &T) -> Value {
    serde_json::to_value(req).unwrap_or_default()
}

/// A JSON request body.
fn body(v: Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_present_query_parameters_are_sent() {
        let base = crate::parse_base_url("http://127.0.0.1:8080").unwrap();
        let url = crate::api_url(&base, &["audit"]);
        assert_eq!(
            with_query(url.clone(), &[("chain", None), ("limit", None)]).as_str(),
            "http://127.0.0.1:8080/api/v1/audit"
        );
        assert_eq!(
            with_query(
                url,
                &[
                    ("chain", Some("check out".into())),
                    ("limit", None),
                    ("before", Some("7".into()))
                ]
            )
            .as_str(),
            "http://127.0.0.1:8080/api/v1/audit?chain=check+out&before=7"
        );
    }
}
