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

/// What a caller is told of an authorization value that holds no bearer token.
pub const MALFORMED: &str =
    "the authorization value is not `Bearer <token>` (the word Bearer, one space, the token)";

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

/// The bearer token of `authorization`: unauthorized when there is none, saying whether the
/// value is missing or holds something else.
fn token_of(authorization: Option<&str>, via: Via) -> ApiResult<&str> {
    match (authorization, bearer(authorization)) {
        (_, Some(token)) => Ok(token),
        (None, None) => Err(ApiError::new(Code::Unauthorized, via.missing())),
        (Some(_), None) => Err(ApiError::new(Code::Unauthorized, MALFORMED)),
    }
}

/// The caller whose token is in `authorization` (the header's or metadata's value):
/// `unauthorized` when it is missing, unknown or revoked. Roles are checked by the caller.
pub async fn authenticate(
    state: &AppState,
    authorization: Option<&str>,
    via: Via,
) -> ApiResult<Principal> {
    let token = token_of(authorization, via)?;
    match state.store.find_token(&hash_token(token)).await? {
        Some(record) => Ok(Principal::from(record)),
        None => Err(ApiError::new(
            Code::Unauthorized,
            "invalid or revoked token",
        )),
    }
}

/// Agent tokens, resolved once per [`TokenCache::TTL`]: every agent calls Watch when it
/// connects, Ack after every publication and Report every window, so a fleet reconnecting or
/// acknowledging at once costs one SQL read per token, not one per call. Concurrent misses of
/// one token share a single read. A revoked agent token keeps working for at most the TTL;
/// every HTTP request still reads the store.
#[derive(Debug, Default)]
pub struct TokenCache {
    known: std::sync::Mutex<std::collections::HashMap<String, CachedToken>>,
}

/// One token's lookup: filled once, shared by the calls that asked meanwhile.
type CachedToken = (
    std::sync::Arc<tokio::sync::OnceCell<Principal>>,
    std::time::Instant,
);

impl TokenCache {
    pub const TTL: std::time::Duration = std::time::Duration::from_secs(10);
    /// Tokens held at most; past it, expired entries go (all, if none has expired).
    const MAX: usize = 10_000;

    /// [`authenticate`], from the cache when the token was resolved within the TTL.
    pub async fn authenticate(
        &self,
        state: &AppState,
        authorization: Option<&str>,
        via: Via,
    ) -> ApiResult<Principal> {
        let token = token_of(authorization, via)?;
        let hash = hash_token(token);
        let cell = {
            let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            match known.get(&hash) {
                Some((cell, at)) if at.elapsed() < Self::TTL => cell.clone(),
                _ => {
                    if known.len() >= Self::MAX {
                        known.retain(|_, (_, at)| at.elapsed() < Self::TTL);
                        if known.len() >= Self::MAX {
                            known.clear();
                        }
                    }
                    let cell = std::sync::Arc::new(tokio::sync::OnceCell::new());
                    known.insert(hash.clone(), (cell.clone(), std::time::Instant::now()));
                    cell
                }
            }
        };
        let found = cell
            .get_or_try_init(|| authenticate(state, authorization, via))
            .await;
        if found.is_err() {
            // Not kept: a token created a moment later must work at once.
            let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
            if known
                .get(&hash)
                .is_some_and(|(c, _)| std::sync::Arc::ptr_eq(c, &cell))
            {
                known.remove(&hash);
            }
        }
        found.cloned()
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
