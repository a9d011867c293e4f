//! Reports sent once that a commit found stored already ([`super::rollup`]): remembered so
//! that the same report sent once more is answered as stored instead of failing another
//! batch.

use std::collections::{HashSet, VecDeque};

/// How many reports sent once and found stored (`rollup::Conflict::FirstStored`) a process
/// remembers, so that the same report sent once more is not counted and fails no batch
/// again (a client that sends a stored report again without `resend`). The oldest is
/// forgotten first; about 100 bytes each.
pub const KNOWN_STORED: usize = 1024;

/// Reports sent once that a commit found stored, by (agent, report id): at most
/// [`KNOWN_STORED`].
#[derive(Default)]
pub(super) struct KnownStored {
    set: HashSet<(String, [u8; 16])>,
    order: VecDeque<(String, [u8; 16])>,
}

impl KnownStored {
    /// Remembers `reports` (agent, report id in hex), forgetting the oldest beyond
    /// [`KNOWN_STORED`].
    pub(super) fn learn(&mut self, reports: &[(String, String)]) {
        for (agent, id) in reports {
            let Some(id) = hex::decode(id)
                .ok()
                .and_then(|id| <[u8; 16]>::try_from(id).ok())
            else {
                continue;
            };
            let key = (agent.clone(), id);
            if self.set.insert(key.clone()) {
                self.order.push_back(key);
            }
            while self.order.len() > KNOWN_STORED {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }

    /// Whether `agent`'s report `id` was found stored.
    pub(super) fn holds(&self, agent: &str, id: &[u8; 16]) -> bool {
        self.set.contains(&(agent.to_owned(), *id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_report_found_stored_is_forgotten_first() {
        let mut known = KnownStored::default();
        let id = |i: usize| {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&(i as u64).to_be_bytes());
            id
        };
        let reports: Vec<(String, String)> = (0..=KNOWN_STORED)
            .map(|i| (format!("agent-{}", i % 7), hex::encode(id(i))))
            .collect();
        known.learn(&reports[..2]);
        // Learnt again: kept once.
        known.learn(&reports[..1]);
        assert!(known.holds("agent-0", &id(0)) && known.holds("agent-1", &id(1)));
        assert!(!known.holds("agent-2", &id(1)), "by agent and id");
        known.learn(&reports[2..]);
        assert_eq!(
            (known.set.len(), known.order.len()),
            (KNOWN_STORED, KNOWN_STORED)
        );
        assert!(!known.holds("agent-0", &id(0)), "the oldest is forgotten");
        assert!(known.holds("agent-1", &id(1)));
        // An id that is not 16 bytes of hex (not from the store) is not kept.
        known.learn(&[
            ("agent-9".into(), "zz".into()),
            ("agent-9".into(), "00".into()),
        ]);
        assert!(known.holds("agent-1", &id(1)));
    }
}
