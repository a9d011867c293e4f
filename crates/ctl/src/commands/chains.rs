//! `budgetctl topology apply|show` (a chain's call tree and policy) and `budgetctl chains`.

use super::{get_and_show, read_input, with_query};
use crate::cli::TopologyCommand;
use crate::output::show;
use crate::{render, Client, CtlError};

pub(super) async fn topology(
    command: TopologyCommand,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    match command {
        TopologyCommand::Apply { chain, file } => {
            let bytes = read_input(&file)?;
            let v = client
                .put(client.url(&["chains", &chain, "topology"]), bytes)
                .await?;
            show(json, &v, render::topology);
            Ok(())
        }
        TopologyCommand::Show {
            chain,
            topology_version,
        } => {
            let url = with_query(
                client.url(&["chains", &chain, "topology"]),
                &[("version", topology_version.map(|n| n.to_string()))],
            );
            get_and_show(client, url, json, render::topology).await
        }
    }
}

/// `budgetctl chains`: every chain with its topology version, live baseline and counts.
pub(super) async fn list(client: &Client, json: bool) -> Result<(), CtlError> {
    get_and_show(client, client.url(&["chains"]), json, render::chains).await
}
