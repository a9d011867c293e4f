//! `budgetctl agents`: every agent seen, every page of the list.

use crate::output::show;
use crate::{render, Client, CtlError};

pub(super) async fn list(client: &Client, json: bool) -> Result<(), CtlError> {
    let v = client.get_all(client.url(&["agents"]), "agents").await?;
    show(json, &v, render::agents);
    Ok(())
}
