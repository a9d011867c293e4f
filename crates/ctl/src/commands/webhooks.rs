//! `budgetctl webhook add|list|rm|deliveries` (admin): receivers of signed events.

use budget_api::feedback::WebhookRequest;

use super::{body_of, get_and_show, post_and_show};
use crate::cli::WebhookCommand;
use crate::output::{print, show};
use crate::{render, Client, CtlError};

pub(super) async fn run(
    command: WebhookCommand,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    match command {
        WebhookCommand::Add {
            url,
            secret,
            events,
        } => {
            let req = body_of(&WebhookRequest {
                url,
                secret,
                events,
            });
            let url = client.url(&["webhooks"]);
            post_and_show(client, url, Some(req), json, render::webhook).await
        }
        WebhookCommand::List => {
            get_and_show(client, client.url(&["webhooks"]), json, render::webhooks).await
        }
        WebhookCommand::Rm { id } => {
            let v = client.delete(client.url(&["webhooks", &id])).await?;
            if json {
                show(true, &v, render::webhooks);
            } else {
                print(&format!(
                    "removed webhook {id} and its delivery log; no further events go to it"
                ));
            }
            Ok(())
        }
        WebhookCommand::Deliveries { id } => {
            let url = client.url(&["webhooks", &id, "deliveries"]);
            get_and_show(client, url, json, render::deliveries).await
        }
    }
}
