//! `Idempotency-Key`s: a repeated request answers what its first run committed.

use std::sync::Arc;

use async_trait::async_trait;

use super::StoreResult;

/// A stored response for an `Idempotency-Key`.
#[derive(Debug, Clone)]
pub struct IdemResponse {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

/// What the store holds for an `Idempotency-Key`.
#[derive(Debug, Clone)]
pub enum IdemLookup {
    /// Nothing committed under the key: run the request.
    Absent,
    /// A write committed under the key and its response was not kept (the request died
    /// between its commit and its answer): run the request again; every write of the store
    /// then answers the committed result instead of writing anew.
    Committed,
    /// The same key and request completed before: its response.
    Done(IdemResponse),
    /// The key was used with another request.
    Mismatch,
}

/// The `Idempotency-Key` of the request being served. The HTTP layer sets it around the
/// handler ([`with_idempotency`]); the first write transaction of that request records its
/// result under the key in the same transaction as its effect, or — when the key already
/// committed — returns that result and writes nothing. So a key is never stuck, and an
/// effect is never applied twice, whenever the request or the process dies.
#[derive(Debug)]
pub struct IdemClaim {
    /// Who the key belongs to: the token's identity (its hash), not its name.
    pub scope: String,
    pub key: String,
    /// SHA-256 of method, URI, content type and body.
    pub request_hash: String,
    /// Set once a write of this request has recorded (or replayed) under the key; later
    /// writes of the same request run normally.
    used: std::sync::atomic::AtomicBool,
}

impl IdemClaim {
    pub fn new(scope: String, key: String, request_hash: String) -> Self {
        Self {
            scope,
            key,
            request_hash,
            used: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

tokio::task_local! {
    static IDEMPOTENCY: Arc<IdemClaim>;
}

/// Runs `f` (a request's handler) with `claim` in scope of every store write it makes.
pub async fn with_idempotency<F: std::future::Future>(claim: IdemClaim, f: F) -> F::Output {
    IDEMPOTENCY.scope(Arc::new(claim), f).await
}

/// The claim in scope that no write of this request has used yet.
pub(crate) fn unused_claim() -> Option<Arc<IdemClaim>> {
    IDEMPOTENCY
        .try_with(Arc::clone)
        .ok()
        .filter(|c| !c.used.load(std::sync::atomic::Ordering::Acquire))
}

pub(crate) fn mark_used(claim: &IdemClaim) {
    claim.used.store(true, std::sync::atomic::Ordering::Release);
}

/// The responses kept under `Idempotency-Key`s.
#[async_trait]
pub trait Idempotency: Send + Sync {
    /// What is stored under `key` for `scope`, compared with `request_hash`.
    async fn idem_lookup(
        &self,
        scope: &str,
        key: &str,
        request_hash: &str,
    ) -> StoreResult<IdemLookup>;
    /// Keeps the response of a request whose write committed under `key`, for repeats.
    async fn idem_finish(&self, scope: &str, key: &str, response: &IdemResponse)
        -> StoreResult<()>;
    /// Forgets keys created before `cutoff`; returns how many.
    async fn idem_expire(&self, cutoff: &str) -> StoreResult<u64>;
}
