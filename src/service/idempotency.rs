//! The store's side of `Idempotency-Key` (SPEC §5, §7): the HTTP layer hashes the request and
//! replays responses; the key's record is written by the store in the transaction of the
//! request's effect ([`IdemClaim`]), so a request that died never blocks its key.

use crate::error::ApiResult;
use crate::state::AppState;

pub use crate::store::{with_idempotency, IdemClaim, IdemLookup, IdemResponse};

/// What the store holds for `key` of token identity `scope`, compared with `request_hash`.
pub async fn lookup(
    state: &AppState,
    scope: &str,
    key: &str,
    request_hash: &str,
) -> ApiResult<IdemLookup> {
    Ok(state.store.idem_lookup(scope, key, request_hash).await?)
}

/// Keeps the response of a request that committed under `key` (nothing is kept otherwise).
pub async fn finish(
    state: &AppState,
    scope: &str,
    key: &str,
    response: &IdemResponse,
) -> ApiResult<()> {
    Ok(state.store.idem_finish(scope, key, response).await?)
}

/// Forgets the records of keys used before `cutoff`; returns how many.
pub async fn expire(state: &AppState, cutoff: &str) -> ApiResult<u64> {
    Ok(state.store.idem_expire(cutoff).await?)
}
