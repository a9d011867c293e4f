//! API tokens: created, rotated and revoked over HTTP (admin) and by `budgetd token`, and the
//! admin token installed at start. A secret is generated here, shown once, and stored only as
//! its hash.
//!
//! Every token belongs to an owner — a person or a pipeline, `owner` at creation, its name by
//! default — and rotating a token keeps it: four eyes compares owners (SPEC §7).

use budget_api::tokens::TokenCreateRequest;
use serde_json::json;

use super::{now, violation};
use crate::auth::{generate_token, hash_token, valid_token_name, Principal, Role};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::store::{self, Audit, NewToken, Store, TokenRecord};

/// A token just created, with its secret — `None` when a repeat of an `Idempotency-Key`
/// request found the token already created: the secret was answered once and is kept nowhere.
#[derive(Debug)]
pub struct Issued {
    pub record: TokenRecord,
    pub secret: Option<String>,
}

const NAME_RULE: &str = "1-64 letters, digits, '-', '_', '.', '@'";

fn token_audit(
    actor: &Principal,
    action: &'static str,
    subject: &str,
    detail: serde_json::Value,
) -> Audit {
    Audit {
        actor: actor.name.clone(),
        action,
        chain: None,
        subject: Some(subject.to_owned()),
        detail,
        at: now(),
    }
}

/// The name, role and owner of a new token (the owner defaults to the name), or why not.
pub fn validate(req: TokenCreateRequest) -> ApiResult<(String, Role, String)> {
    let TokenCreateRequest {
        name,
        role: role_name,
        owner,
    } = req;
    if !valid_token_name(&name) {
        let message = format!("invalid token name {name:?}: {NAME_RULE}");
        return Err(violation("/name", message.clone(), message));
    }
    let role = Role::parse(&role_name).ok_or_else(|| {
        let message =
            format!("unknown role {role_name:?}: use reader, uploader, approver, agent or admin");
        violation("/role", message.clone(), message)
    })?;
    let owner = owner.unwrap_or_else(|| name.clone());
    if !valid_token_name(&owner) {
        let message = format!("invalid owner {owner:?}: {NAME_RULE}");
        return Err(violation("/owner", message.clone(), message));
    }
    Ok((name, role, owner))
}

/// Creates a token (`POST /tokens`).
pub async fn create(
    state: &AppState,
    actor: &Principal,
    req: TokenCreateRequest,
) -> ApiResult<Issued> {
    create_in(&*state.store, actor, req).await
}

/// Creates a token in `store` (also `budgetd token create`, without a server).
pub async fn create_in(
    store: &dyn Store,
    actor: &Principal,
    req: TokenCreateRequest,
) -> ApiResult<Issued> {
    let (name, role, owner) = validate(req)?;
    let secret = generate_token();
    let audit = token_audit(
        actor,
        "token.create",
        &name,
        json!({"role": role, "owner": owner, "by_owner": actor.owner}),
    );
    let new = NewToken {
        name,
        role,
        owner,
        hash: hash_token(&secret),
    };
    let record = store.create_token(&new, audit).await?;
    issued(store, record, secret).await
}

/// A new token with the role and owner of token `old` and a new secret, named `name`. The old
/// token keeps working until it is revoked, so clients can switch first.
pub async fn rotate(
    state: &AppState,
    actor: &Principal,
    old: &str,
    name: &str,
) -> ApiResult<Issued> {
    if !valid_token_name(name) {
        return Err(violation(
            "/name",
            format!("invalid token name {name:?}: {NAME_RULE}"),
            NAME_RULE,
        ));
    }
    let secret = generate_token();
    let audit = token_audit(
        actor,
        "token.rotate",
        name,
        json!({"rotated": old, "by_owner": actor.owner}),
    );
    let record = state
        .store
        .rotate_token(old, name, &hash_token(&secret), audit)
        .await?;
    issued(&*state.store, record, secret).await
}

/// The secret goes with the record only if the store holds its hash: otherwise this was a
/// repeat of a creation committed under its `Idempotency-Key`, which answered it already.
async fn issued(store: &dyn Store, record: TokenRecord, secret: String) -> ApiResult<Issued> {
    let ours = store.find_token(&hash_token(&secret)).await?.is_some();
    Ok(Issued {
        record,
        secret: ours.then_some(secret),
    })
}

/// Revokes token `name` (`DELETE /tokens/{name}`).
pub async fn revoke(state: &AppState, actor: &Principal, name: &str) -> ApiResult<()> {
    revoke_in(&*state.store, actor, name).await
}

/// Revokes token `name` in `store` (also `budgetd token revoke`).
pub async fn revoke_in(store: &dyn Store, actor: &Principal, name: &str) -> ApiResult<()> {
    let audit = token_audit(actor, "token.revoke", name, json!({}));
    Ok(store.revoke_token(name, audit).await?)
}

/// The actor of `budgetd token …` in the audit log.
const CLI: &str = "budgetd-cli";

/// `budgetd token create`: creates a token directly in the store at `database_url` (no server
/// needed). The request is checked before the store is opened.
pub async fn create_offline(database_url: &str, req: TokenCreateRequest) -> anyhow::Result<Issued> {
    validate(req.clone()).map_err(ApiError::into_anyhow)?;
    let store = store::connect(database_url).await?;
    let actor = Principal::internal(CLI, Role::Admin);
    create_in(&*store, &actor, req)
        .await
        .map_err(ApiError::into_anyhow)
}

/// `budgetd token revoke`: revokes token `name` directly in the store at `database_url`.
pub async fn revoke_offline(database_url: &str, name: &str) -> anyhow::Result<()> {
    let store = store::connect(database_url).await?;
    let actor = Principal::internal(CLI, Role::Admin);
    revoke_in(&*store, &actor, name)
        .await
        .map_err(ApiError::into_anyhow)
}

/// Every token (never a secret or a hash).
pub async fn list(state: &AppState) -> ApiResult<Vec<TokenRecord>> {
    Ok(state.store.list_tokens().await?)
}

/// Whether `store` has an admin token.
pub async fn has_admin(store: &dyn Store) -> ApiResult<bool> {
    Ok(store
        .list_tokens()
        .await?
        .iter()
        .any(|t| t.role == Role::Admin))
}

/// Installs `secret` as the token named `admin` (replacing one of that name); `action` names
/// why in the audit log (`token.bootstrap`: configured; `token.generate`: generated at start).
pub async fn install_admin(store: &dyn Store, secret: &str, action: &'static str) -> ApiResult<()> {
    let audit = token_audit(
        &Principal::internal("budgetd", Role::Admin),
        action,
        "admin",
        json!({}),
    );
    store
        .upsert_token("admin", Role::Admin, &hash_token(secret), audit)
        .await?;
    Ok(())
}
