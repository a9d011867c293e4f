//! Per-token quotas on this replica: Watch streams held, and Ack and Report calls in flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::lock;

/// Places taken per token on this replica (open Watch streams, or Ack and Report calls in
/// flight), and in all.
#[derive(Debug, Default)]
pub(super) struct TokenCounts {
    /// Keyed by the token id its permits share (one copy per token, not per stream).
    per_token: Mutex<HashMap<Arc<str>, usize>>,
    total: AtomicUsize,
}

impl TokenCounts {
    /// Places taken, all tokens together.
    pub(super) fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// One more place for `token_id`, or `None` when it holds `limit` already.
    pub(super) fn take(self: &Arc<Self>, token_id: &str, limit: usize) -> Option<TokenPermit> {
        let mut counts = lock(&self.per_token);
        let (key, n) = match counts.get_key_value(token_id) {
            Some((key, &n)) => (key.clone(), n),
            None => (Arc::from(token_id), 0),
        };
        if n >= limit {
            return None;
        }
        counts.insert(key.clone(), n + 1);
        self.total.fetch_add(1, Ordering::AcqRel);
        Some(TokenPermit {
            counts: self.clone(),
            token_id: key,
        })
    }
}

/// One place in a token's quota (a Watch stream, or an Ack or Report call), given back when
/// dropped.
#[derive(Debug)]
pub struct TokenPermit {
    counts: Arc<TokenCounts>,
    token_id: Arc<str>,
}

/// Ack and Report calls one agent token may have in flight on a replica, per Watch stream it
/// may hold (`agents.max_streams_per_token`): an agent sends one Report at a time and acks
/// each revision once. This bounds a token's calls; their bytes are bounded by its share of
/// `agents.max_call_bytes` (`grpc::serve::TOKEN_SHARE`).
pub const CALLS_PER_STREAM: usize = 2;

impl Drop for TokenPermit {
    fn drop(&mut self) {
        let mut counts = lock(&self.counts.per_token);
        if let Some(n) = counts.get_mut(&*self.token_id) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&*self.token_id);
            }
        }
        self.counts.total.fetch_sub(1, Ordering::AcqRel);
    }
}
