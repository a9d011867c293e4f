//! `budgetctl audit`: the audit log, newest first, optionally of one chain, paged by id.

use super::{get_and_show, with_query};
use crate::{render, Client, CtlError};

pub(super) async fn list(
    chain: Option<String>,
    limit: Option<u16>,
    before: Option<u64>,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    let url = with_query(
        client.url(&["audit"]),
        &[
            ("chain", chain),
            ("limit", limit.map(|n| n.to_string())),
            ("before", before.map(|id| id.to_string())),
        ],
    );
    get_and_show(client, url, json, render::audit).await
}
