//! `budgetctl production`: what a chain's agents reported over the last complete window.

use super::{get_and_show, with_query};
use crate::{render, Client, CtlError};

pub(super) async fn show(
    chain: &str,
    window: String,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    let url = with_query(
        client.url(&["chains", chain, "production"]),
        &[("window", Some(window))],
    );
    get_and_show(client, url, json, render::production).await
}
