//! The live view: the config in force now, shared by the [`crate::Agent`] handles (readers)
//! and the watch task (the only writer). Subscribers see the newest [`Snapshot`], never a
//! backlog (STYLE §5).

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::snapshot::{Refusal, Snapshot};

/// The config in force and the last one refused.
pub(crate) struct Live {
    tx: watch::Sender<Arc<Snapshot>>,
    last_refusal: Mutex<Option<(i64, Refusal)>>,
}

impl Live {
    pub(crate) fn new(snapshot: Snapshot) -> Arc<Self> {
        let (tx, _rx) = watch::channel(Arc::new(snapshot));
        Arc::new(Self {
            tx,
            last_refusal: Mutex::new(None),
        })
    }

    /// The config in force now.
    pub(crate) fn current(&self) -> Arc<Snapshot> {
        self.tx.borrow().clone()
    }

    /// A receiver of every config put in force from now on (the newest, never a backlog).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.tx.subscribe()
    }

    /// Puts `next` in force; readers and subscribers see it at once.
    pub(crate) fn publish(&self, next: Arc<Snapshot>) {
        self.tx.send_replace(next);
    }

    /// Records that the config of `revision` was refused (the one in force is kept).
    pub(crate) fn refuse(&self, revision: i64, refusal: Refusal) {
        *self
            .last_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((revision, refusal));
    }

    /// The last config refused, with its revision.
    pub(crate) fn last_refusal(&self) -> Option<(i64, Refusal)> {
        self.last_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
