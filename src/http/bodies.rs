//! The memory that request bodies read whole (JSON bodies, and every body with an
//! `Idempotency-Key`) hold: their bytes as they arrive, and what a JSON body takes once parsed,
//! estimated before it is ([`super::json_cost`]). Each is bounded for all bodies together and
//! for each token's (docs/limits.md, "What this bounds").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use bytes::BytesMut;
use http_body_util::BodyExt as _;
use serde_json::json;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::json_cost::parsed_bytes;
use crate::error::{ApiError, ApiResult, Code};

/// What request bodies' bytes hold at most together, unless twice `max_body_bytes` is larger
/// (a body of unknown length grows by doubling).
pub const BODIES_HELD: usize = 64 * 1024 * 1024;

/// What JSON bodies hold at most together once parsed, estimated, unless 32 times
/// `max_body_bytes` is larger.
pub const PARSED_HELD: usize = 256 * 1024 * 1024;

/// The bodies' two bounds: [`BODIES_HELD`] for their bytes as they arrive, until the handler
/// has parsed them (a schema-checked body: until the handler is done); [`PARSED_HELD`] for
/// what parsing makes of them, charged before it starts, for as long as the parsed value is
/// held. One token's bodies hold at most a quarter of each, or more when one body needs it
/// (twice `max_body_bytes` of bytes). A body that does not fit is answered 503 at once; one
/// that would take more than a token's share parsed, 413.
#[derive(Clone)]
pub struct Bodies {
    raw: Pool,
    parsed: Pool,
}

/// A body's charges, in KiB: to all bodies and to its token's share, for its bytes and for
/// what they take parsed.
#[derive(Default)]
pub struct Held {
    raw: Charge,
    parsed: Charge,
}

#[derive(Default)]
struct Charge {
    all: Option<OwnedSemaphorePermit>,
    share: Option<OwnedSemaphorePermit>,
}

/// Marks a request whose body its reader has charged already (the idempotency layer).
#[derive(Clone)]
pub struct Charged;

impl Bodies {
    pub fn new(max_body_bytes: usize) -> Self {
        let bytes = BODIES_HELD.max(max_body_bytes.saturating_mul(2));
        let parsed = PARSED_HELD.max(max_body_bytes.saturating_mul(32));
        Self {
            // A body of unknown length may take twice its bytes as it grows.
            raw: Pool::new(
                bytes,
                (bytes / 4).max(max_body_bytes.saturating_mul(2)).min(bytes),
                "request bodies being read",
                "request bodies",
            ),
            parsed: Pool::new(
                parsed,
                parsed / 4,
                "request bodies parsed",
                "parsed request bodies",
            ),
        }
    }

    /// Reads `body` whole, at most `limit` bytes, charging it as it arrives (to the share of
    /// the token `token_id`, when the caller is known) unless it is `charged` already; `known`
    /// is its length when its headers say it (`Content-Length`).
    pub async fn read(
        &self,
        mut body: Body,
        known: Option<usize>,
        limit: usize,
        charged: bool,
        token_id: Option<&str>,
    ) -> ApiResult<(Bytes, Held)> {
        // Sized once when the length is known, at its first bytes; what is charged is what is
        // allocated.
        let known = known.unwrap_or(0).min(limit);
        let mut bytes = BytesMut::new();
        let mut held = Held::default();
        let share = token_id.filter(|_| !charged).map(|id| self.raw.share(id));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| body_error(e, limit, "max_body_bytes"))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let len = bytes.len() + data.len();
            if len > limit {
                return Err(too_large(limit, "max_body_bytes"));
            }
            if bytes.capacity() == 0 {
                bytes.reserve(known.max(data.len()));
            } else {
                bytes.reserve(data.len());
            }
            let has = held.raw.all.as_ref().map_or(0, |p| p.num_permits());
            let need = bytes.capacity().div_ceil(1024).saturating_sub(has);
            if !charged && need > 0 {
                self.raw.charge(need, share.as_ref(), &mut held.raw)?;
            }
            bytes.extend_from_slice(&data);
        }
        Ok((bytes.freeze(), held))
    }

    /// Charges to `held` what `raw` takes once parsed into JSON, estimated, before it is
    /// parsed: 413 when that is more than a token's share (with a caller or without), 503
    /// while other bodies hold it.
    pub fn parsing(&self, raw: &[u8], token_id: Option<&str>, held: &mut Held) -> ApiResult<()> {
        let estimate = parsed_bytes(raw);
        let kib = estimate.div_ceil(1024);
        let most = self.parsed.share_kib;
        if kib > most {
            return Err(ApiError::new(
                Code::PayloadTooLarge,
                format!(
                    "this body would take about {} parsed (each value a slot of 32 bytes, an \
                     object with members 640 or more), more than the {} one request's JSON may \
                     take; send fewer values in one request",
                    mib(kib),
                    mib(most)
                ),
            )
            .with_details(json!({"parsed_bytes": estimate, "limit_bytes": most * 1024})));
        }
        let share = token_id.map(|id| self.parsed.share(id));
        self.parsed.charge(kib, share.as_ref(), &mut held.parsed)
    }
}

/// A semaphore per token, of the same permits each: made when the token first asks for it,
/// dropped at a later ask once nothing holds it (a permit holds its semaphore).
#[derive(Clone)]
pub(crate) struct TokenShares {
    permits: usize,
    tokens: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

impl TokenShares {
    /// No token yet; each gets `permits`.
    pub(crate) fn new(permits: usize) -> Self {
        Self {
            permits,
            tokens: Arc::default(),
        }
    }

    /// The semaphore of the token `token_id`.
    pub(crate) fn of(&self, token_id: &str) -> Arc<Semaphore> {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.retain(|_, share| Arc::strong_count(share) > 1);
        Arc::clone(
            tokens
                .entry(token_id.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.permits))),
        )
    }
}

/// One bound: a semaphore of KiB for all bodies, and one per token whose bodies hold some.
#[derive(Clone)]
struct Pool {
    all: Arc<Semaphore>,
    kib_all: usize,
    /// Each token whose bodies hold part of this: its share, of `share_kib`.
    tokens: TokenShares,
    share_kib: usize,
    /// What is held, in the answers' words: "request bodies being read".
    holders: &'static str,
    /// What the server holds as many of as it may: "request bodies".
    things: &'static str,
}

impl Pool {
    fn new(bytes: usize, share: usize, holders: &'static str, things: &'static str) -> Self {
        Self {
            all: Arc::new(Semaphore::new(bytes.div_ceil(1024))),
            kib_all: bytes.div_ceil(1024),
            tokens: TokenShares::new(share.div_ceil(1024)),
            share_kib: share.div_ceil(1024),
            holders,
            things,
        }
    }

    /// The share of the token `token_id`.
    fn share(&self, token_id: &str) -> Arc<Semaphore> {
        self.tokens.of(token_id)
    }

    /// Adds `kib` to `to`, from the token's `share` (when known) and from all.
    fn charge(&self, kib: usize, share: Option<&Arc<Semaphore>>, to: &mut Charge) -> ApiResult<()> {
        if kib == 0 {
            return Ok(());
        }
        let n = u32::try_from(kib).map_err(|_| self.busy())?;
        if let Some(share) = share {
            let more = Arc::clone(share)
                .try_acquire_many_owned(n)
                .map_err(|_| self.token_busy())?;
            merge(&mut to.share, more);
        }
        let more = Arc::clone(&self.all)
            .try_acquire_many_owned(n)
            .map_err(|_| self.busy())?;
        merge(&mut to.all, more);
        Ok(())
    }

    fn token_busy(&self) -> ApiError {
        ApiError::new(
            Code::Unavailable,
            format!(
                "this token's {} hold its share of the server's ({} of {} together); send this \
                 one again once they are answered",
                self.holders,
                mib(self.share_kib),
                mib(self.kib_all)
            ),
        )
    }

    fn busy(&self) -> ApiError {
        ApiError::new(
            Code::Unavailable,
            format!(
                "the server holds as many {} as it may at once ({} together); send this one \
                 again shortly",
                self.things,
                mib(self.kib_all)
            ),
        )
    }
}

/// `kib` in MiB: `16 MiB`, `23.5 MiB`.
fn mib(kib: usize) -> String {
    let tenths = (kib * 10).div_ceil(1024);
    if tenths % 10 == 0 {
        format!("{} MiB", tenths / 10)
    } else {
        format!("{}.{} MiB", tenths / 10, tenths % 10)
    }
}

fn merge(held: &mut Option<OwnedSemaphorePermit>, more: OwnedSemaphorePermit) {
    match held.as_mut() {
        Some(held) => held.merge(more),
        None => *held = Some(more),
    }
}

fn too_large(limit: usize, setting: &str) -> ApiError {
    ApiError::new(
        Code::PayloadTooLarge,
        format!("request body exceeds the limit of {limit} bytes ({setting})"),
    )
    .with_details(json!({"limit_bytes": limit}))
}

/// Why a request body could not be read: over `limit` (413), stalled past the body-read
/// timeout (408), or cut off by the client (400).
pub fn body_error(e: axum::Error, limit: usize, setting: &str) -> ApiError {
    let source = e.into_inner();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
    while let Some(err) = cause {
        if err.is::<http_body_util::LengthLimitError>() {
            return too_large(limit, setting);
        }
        if err.is::<super::read_timeout::Stalled>() {
            return ApiError::new(
                Code::RequestTimeout,
                "the request body stopped arriving (body_read_timeout_secs)",
            );
        }
        cause = err.source();
    }
    ApiError::bad_request(format!("failed to read the request body: {source}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1,000 one-key objects: about 860 KiB parsed, estimated, for 8 KiB of body.
    fn objects(n: usize) -> Vec<u8> {
        format!("[{}]", vec![r#"{"a":1}"#; n].join(",")).into_bytes()
    }

    #[test]
    fn parsed_bodies_are_charged_until_dropped() {
        let bodies = Bodies::new(256 * 1024);
        // A quarter of 256 MiB each token: 76 bodies of 1,000 objects fit, the next does not.
        let body = objects(1000);
        let kib = parsed_bytes(&body).div_ceil(1024);
        let fit = (PARSED_HELD / 4 / 1024) / kib;
        let mut held: Vec<Held> = (0..fit)
            .map(|_| {
                let mut held = Held::default();
                bodies.parsing(&body, Some("a"), &mut held).unwrap();
                held
            })
            .collect();
        let busy = bodies
            .parsing(&body, Some("a"), &mut Held::default())
            .unwrap_err();
        assert_eq!(busy.code, Code::Unavailable);
        assert!(busy
            .message
            .contains("this token's request bodies parsed hold its share"));
        assert!(
            busy.message.contains("(64 MiB of 256 MiB together)"),
            "{}",
            busy.message
        );
        // Another token's is charged; once the first token's are dropped, so is its.
        bodies
            .parsing(&body, Some("b"), &mut Held::default())
            .unwrap();
        held.pop();
        bodies
            .parsing(&body, Some("a"), &mut Held::default())
            .unwrap();
        drop(held);
        assert_eq!(bodies.parsed.all.available_permits(), bodies.parsed.kib_all);
    }

    #[test]
    fn a_body_too_large_parsed_is_refused_at_once() {
        let bodies = Bodies::new(8 * 1024 * 1024);
        // 100,000 one-key objects: 800 KB of body, about 85 MiB parsed.
        let body = objects(100_000);
        let error = bodies
            .parsing(&body, Some("a"), &mut Held::default())
            .unwrap_err();
        assert_eq!(error.code, Code::PayloadTooLarge);
        assert!(
            error
                .message
                .contains("more than the 64 MiB one request's JSON may take"),
            "{}",
            error.message
        );
        // Nothing is left charged.
        assert_eq!(bodies.parsed.all.available_permits(), bodies.parsed.kib_all);
        // A larger max_body_bytes raises both bounds: 32 times it together.
        let larger = Bodies::new(16 * 1024 * 1024);
        assert_eq!(larger.parsed.kib_all, 512 * 1024);
        larger
            .parsing(&body, Some("a"), &mut Held::default())
            .unwrap();
    }
}
