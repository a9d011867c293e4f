//! The approved baseline each upload compares with, kept parsed between uploads. Its document
//! is about a megabyte for a 1,000-segment chain: reading and parsing it took 1.6 ms of every
//! upload. Each use asks the store for the approved baseline's id and SHA-256 (a row, not the
//! document) and reads the document again only when they changed, so an approval, rollback or
//! canary on any replica is seen at the next upload.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::store::{Store, StoreResult, StoredBaseline};

/// Chains whose approved baseline is kept: at most this many documents, each as its bytes and
/// parsed (a chain has at most 1,000 segments; such a document is about 0.9 MB of bytes).
pub const KEPT_CHAINS: usize = 8;

/// Approved baselines by chain, at most [`KEPT_CHAINS`].
#[derive(Default)]
pub struct ApprovedBaselines {
    by_chain: Mutex<HashMap<String, Arc<StoredBaseline>>>,
}

impl ApprovedBaselines {
    /// The chain's approved baseline, if any: the one kept when the store's id and SHA-256
    /// still match it, else read and kept.
    pub async fn current(
        &self,
        store: &dyn Store,
        chain: &str,
    ) -> StoreResult<Option<Arc<StoredBaseline>>> {
        let Some((id, sha256)) = store.current_baseline_ref(chain).await? else {
            self.map().remove(chain);
            return Ok(None);
        };
        let kept = self.map().get(chain).cloned();
        if let Some(kept) = kept.filter(|b| b.doc.id == id && b.sha256 == sha256) {
            return Ok(Some(kept));
        }
        let Some(read) = store.current_baseline(chain).await? else {
            return Ok(None);
        };
        let read = Arc::new(read);
        let mut map = self.map();
        if map.len() >= KEPT_CHAINS && !map.contains_key(chain) {
            let evicted = map.keys().next().cloned();
            if let Some(evicted) = evicted {
                map.remove(&evicted);
            }
        }
        map.insert(chain.to_owned(), read.clone());
        Ok(Some(read))
    }

    /// How many chains' baselines are kept.
    pub fn kept(&self) -> usize {
        self.map().len()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<StoredBaseline>>> {
        self.by_chain.lock().unwrap_or_else(|e| e.into_inner())
    }
}
