//! Bearer tokens and roles. Tokens are random, shown once, and stored as SHA-256 hashes.
//!
//! [`authenticate`] resolves a caller for both transports: the HTTP middleware passes the
//! `Authorization` header, gRPC the `authorization` metadata.

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use crate::error::{ApiError, ApiResult, Code};
use crate::state::AppState;

/// What a token may do. Every role may read; writes need the role named on each route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Reader,
    Uploader,
    Approver,
    Agent,
    Admin,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Reader,
        Role::Uploader,
        Role::Approver,
        Role::Agent,
        Role::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reader => "reader",
            Self::Uploader => "uploader",
            Self::Approver => "approver",
            Self::Agent => "agent",
            Self::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The caller of a request, resolved from its bearer token.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The token's name; recorded as the actor of everything the caller does.
    pub name: String,
    pub role: Role,
    /// The person or pipeline the token belongs to (SPEC §7): four eyes compares owners, so
    /// a second token of the same owner is still the same person.
    pub owner: String,
    /// The token's identity: the SHA-256 of its secret, as stored ([`hash_token`]). Unlike
    /// the name, it is never inherited by a token issued later under the same name.
    pub token_id: String,
}

impl From<crate::store::TokenRecord> for Principal {
    fn from(record: crate::store::TokenRecord) -> Self {
        Self {
            name: record.name,
            role: record.role,
            owner: record.owner,
            token_id: record.token_id,
        }
    }
}

impl Principal {
    /// A caller inside the server (start-up tasks such as the demo): its own owner, and an
    /// identity no token can have (a token's identity is a hex hash).
    pub fn internal(name: &str, role: Role) -> Self {
        Self {
            name: name.to_owned(),
            role,
            owner: name.to_owned(),
            token_id: format!("internal:{name}"),
        }
    }

    /// Whether the caller has one of `roles`; `admin` may do everything.
    pub fn has_any(&self, roles: &[Role]) -> bool {
        self.role == Role::Admin || roles.contains(&self.role)
    }
}

/// Where a caller's bearer token travels; only the explanation of a missing token differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The HTTP `Authorization` header.
    Header,
    /// The gRPC `authorization` metadata.
    Metadata,
}

impl Via {
    fn missing(self) -> &'static str {
        match self {
            Self::Header => "missing bearer token: send Authorization: Bearer <token>",
            Self::Metadata => "missing bearer token in the authorization metadata",
        }
    }
}

/// The token of an `Authorization` value `Bearer <token>` (or `bearer <token>`), trimmed;
/// `None` when absent or empty.
pub fn bearer(authorization: Option<&str>) -> Option<&str> {
    authorization
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The caller whose token is in `authorization` (the header's or metadata's value):
/// `unauthorized` when it is missing, unknown or revoked. Roles are checked by the caller.
pub async fn authenticate(
    state: &AppState,
    authorization: Option<&str>,
    via: Via,
) -> ApiResult<Principal> {
    let token =
        bearer(authorization).ok_or_else(|| ApiError::new(Code::Unauthorized, via.missing()))?;
    match state.store.find_token(&hash_token(token)).await? {
        Some(record) => Ok(Principal::from(record)),
        None => Err(ApiError::new(
            Code::Unauthorized,
            "invalid or revoked token",
        )),
    }
}

/// Tokens resolved for agents' Reports, kept [`TokenCache::TTL`] so a Report (every agent,
/// every window) costs no SQL statement. A revoked token keeps reporting for at most that
/// long; Watch, Ack and every HTTP request still read the store each time.
#[derive(Debug, Default)]
pub struct TokenCache {
    known: std::sync::Mutex<std::collections::HashMap<String, (Principal, std::time::Instant)>>,
}

impl TokenCache {
    pub const TTL: std::time::Duration = std::time::Duration::from_secs(10);
    const MAX: usize = 10_000;

    /// [`authenticate`], from the cache when the token was resolved within the TTL.
    pub async fn authenticate(
        &self,
        state: &AppState,
        authorization: Option<&str>,
        via: Via,
    ) -> ApiResult<Principal> {
        let token = bearer(authorization)
            .ok_or_else(|| ApiError::new(Code::Unauthorized, via.missing()))?;
        let hash = hash_token(token);
        if let Ok(known) = self.known.lock() {
            if let Some((p, at)) = known.get(&hash) {
                if at.elapsed() < Self::TTL {
                    return Ok(p.clone());
                }
            }
        }
        let principal = authenticate(state, authorization, via).await?;
        if let Ok(mut known) = self.known.lock() {
            if known.len() >= Self::MAX {
                known.retain(|_, (_, at)| at.elapsed() < Self::TTL);
                if known.len() >= Self::MAX {
                    known.clear();
                }
            }
            known.insert(hash, (principal.clone(), std::time::Instant::now()));
        }
        Ok(principal)
    }
}

/// A fresh token: `bgt_` and 64 hex digits (256 random bits).
pub fn generate_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("bgt_{}", hex::encode(bytes))
}

/// What the store keeps of a token.
pub fn hash_token(token: &str) -> String {
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// Token names and owners: short, printable, no spaces (they appear in audit logs and URLs).
pub fn valid_token_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
}
