//! `budgetctl token create|rotate|revoke|list`. A new secret is shown once, and alone on
//! stdout, so `$(budgetctl token create …)` captures it.

use budget_api::tokens::{TokenCreateRequest, TokenCreated, TokenRotateRequest};
use serde::Deserialize as _;
use serde_json::Value;

use super::{body, body_of, get_and_show};
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
            let request = TokenCreateRequest {
                name: name.clone(),
                role: role.clone(),
                owner,
            };
            let v = client
                .post(client.url(&["tokens"]), Some(body(body_of(&request))))
                .await?;
            show_secret(&v, json, |created| {
                format!(
                    "created token {} (role {}); its secret is shown once, store it now:",
                    or(&created.name, &name),
                    or(&created.role, &role)
                )
            });
        }
        TokenCommand::Rotate { name, new_name } => {
            let request = TokenRotateRequest {
                name: new_name.clone(),
            };
            let v = client
                .post(
                    client.url(&["tokens", &name, "rotate"]),
                    Some(body(body_of(&request))),
                )
                .await?;
            show_secret(&v, json, |created| {
                format!(
                    "created token {} (role {}, owner {}) in place of {name}; revoke {name} once its clients have switched. The secret is shown once, store it now:",
                    or(&created.name, &new_name),
                    created.role,
                    created.owner,
                )
            });
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

/// A new token's answer: as is with `--json`; else `note` (what was created) on stderr and
/// only the secret on stdout, so `$(budgetctl token create …)` captures it.
fn show_secret(v: &Value, json: bool, note: impl FnOnce(&TokenCreated) -> String) {
    if json {
        print(&pretty(v));
    } else {
        let created = TokenCreated::deserialize(v).unwrap_or_default();
        eprintln!("{}", note(&created));
        print(created.token.as_deref().unwrap_or_default());
    }
}

/// `value`, or `fallback` when the answer had none.
fn or<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    if value.is_empty() {
        fallback
    } else {
        value
    }
}
