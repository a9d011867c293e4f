//! `budgetctl token create|rotate|revoke|list`. A new secret is shown once, and alone on
//! stdout, so `$(budgetctl token create …)` captures it.

use serde_json::json;

use super::{body, get_and_show};
use crate::cli::TokenCommand;
use crate::output::{pretty, print, show};
use crate::{render, Client, CtlError};

pub(super) async fn run(
    command: TokenCommand,
    client: &Client,
    json: bool,
) -> Result<(), CtlError> {
    match command {
        TokenCommand::Create { role, name, owner } => {
            let v = client
                .post(
                    client.url(&["tokens"]),
                    Some(body(json!({ "name": name, "role": role, "owner": owner }))),
                )
                .await?;
            if json {
                print(&pretty(&v));
            } else {
                // Only the secret on stdout, so `$(budgetctl token create …)` captures it.
                eprintln!(
                    "created token {} (role {}); its secret is shown once, store it now:",
                    v["name"].as_str().unwrap_or(&name),
                    v["role"].as_str().unwrap_or(&role)
                );
                print(v["token"].as_str().unwrap_or_default());
            }
        }
        TokenCommand::Rotate { name, new_name } => {
            let v = client
                .post(
                    client.url(&["tokens", &name, "rotate"]),
                    Some(body(json!({ "name": new_name }))),
                )
                .await?;
            if json {
                print(&pretty(&v));
            } else {
                eprintln!(
                    "created token {} (role {}, owner {}) in place of {name}; revoke {name} once its clients have switched. The secret is shown once, store it now:",
                    v["name"].as_str().unwrap_or(&new_name),
                    v["role"].as_str().unwrap_or_default(),
                    v["owner"].as_str().unwrap_or_default(),
                );
                print(v["token"].as_str().unwrap_or_default());
            }
        }
        TokenCommand::Revoke { name } => {
            let v = client.delete(client.url(&["tokens", &name])).await?;
            if json {
                show(true, &v, render::tokens);
            } else {
                print(&format!("revoked token {name}"));
            }
        }
        TokenCommand::List => {
            get_and_show(client, client.url(&["tokens"]), json, render::tokens).await?;
        }
    }
    Ok(())
}
