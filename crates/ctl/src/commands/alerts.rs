//! `budgetctl alerts [--firing]`: the alerts raised from the agents' reports and budgetd's state.

use super::{get_and_show, with_query};
use crate::{render, Client, CtlError};

pub(super) async fn list(firing: bool, client: &Client, json: bool) -> Result<(), CtlError> {
    let url = with_query(
        client.url(&["alerts"]),
        &[("state", firing.then(|| "firing".to_owned()))],
    );
    get_and_show(client, url, json, render::alerts).await
}
