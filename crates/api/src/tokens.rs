//! API tokens (admin): `GET|POST /tokens`, `POST /tokens/{name}/rotate`,
//! `DELETE /tokens/{name}`, and `GET /whoami` (any token).

use serde::{Deserialize, Serialize};

/// A token as listed (OpenAPI `Token`); never its secret. `role` is one of `reader`,
/// `uploader`, `approver`, `agent`, `admin`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Token {
    pub name: String,
    pub role: String,
    /// The person or pipeline the token belongs to (defaults to its name).
    pub owner: String,
    pub created_at: String,
    pub created_by: String,
}

/// `GET /tokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenList {
    pub tokens: Vec<Token>,
}

/// `POST /tokens` (OpenAPI `TokenCreateRequest`); `owner` defaults to the name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCreateRequest {
    pub name: String,
    pub role: String,
    #[serde(default)]
    pub owner: Option<String>,
}

/// `POST /tokens/{name}/rotate` (OpenAPI `TokenRotateRequest`): the new token's name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRotateRequest {
    pub name: String,
}

/// A token just created or rotated (OpenAPI `TokenCreated`), with its secret: shown once.
/// A repeat of the creation under its `Idempotency-Key` answers `token: null` and a `message`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TokenCreated {
    pub name: String,
    pub role: String,
    pub owner: String,
    pub created_at: String,
    pub token: Option<String>,
    /// Why `token` is null (a repeat); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// What the caller's role may do (for clients to offer only that; the server enforces it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct May {
    pub read: bool,
    pub upload: bool,
    pub approve: bool,
    pub admin: bool,
}

/// `GET /whoami`: the caller's token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WhoAmI {
    pub name: String,
    pub role: String,
    pub owner: String,
    pub may: May,
}
