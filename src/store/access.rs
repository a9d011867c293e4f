//! Access: API tokens, stored by the hash of their secret.

use async_trait::async_trait;
use serde::Serialize;

use super::{Audit, StoreResult};
use crate::auth::Role;

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct TokenRecord {
    pub name: String,
    pub role: Role,
    /// The person or pipeline the token belongs to (defaults to its name).
    pub owner: String,
    pub created_at: String,
    pub created_by: String,
    /// The token's identity: the hash of its secret (never shown).
    #[serde(skip)]
    pub token_id: String,
}

/// A token to create: its secret is given as its hash only.
#[derive(Debug, Clone)]
pub struct NewToken {
    pub name: String,
    pub role: Role,
    pub owner: String,
    pub hash: String,
}

/// API tokens: create, rotate, revoke and look up by hash.
#[async_trait]
pub trait Access: Send + Sync {
    async fn create_token(&self, token: &NewToken, audit: Audit) -> StoreResult<TokenRecord>;
    /// Rotation: creates `new_name` (secret hash `hash`) with the role and owner of the token
    /// `name`, which stays valid until revoked.
    async fn rotate_token(
        &self,
        name: &str,
        new_name: &str,
        hash: &str,
        audit: Audit,
    ) -> StoreResult<TokenRecord>;
    /// Creates or replaces a token (start-up bootstrap of the admin token); a new token's
    /// owner is its name.
    async fn upsert_token(
        &self,
        name: &str,
        role: Role,
        hash: &str,
        audit: Audit,
    ) -> StoreResult<()>;
    async fn revoke_token(&self, name: &str, audit: Audit) -> StoreResult<()>;
    async fn find_token(&self, hash: &str) -> StoreResult<Option<TokenRecord>>;
    async fn list_tokens(&self) -> StoreResult<Vec<TokenRecord>>;
}
