//! Agents whose report, sent once (without `resend`), a commit found stored already
//! ([`super::rollup`]): such a report's windows are in its batch's sums, so the batch is
//! dropped. Those agents' later reports are kept apart as resends are, and looked for at the
//! commit, so that an agent fails at most one batch of a process while it is remembered,
//! however many reports it repeats.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

/// How many such agents a process remembers, the oldest forgotten first: at most about
/// 200 bytes each (an agent id of up to 128 bytes, held once), under 1 MiB in all.
pub const REPEATERS: usize = 4096;

/// The agents, at most [`REPEATERS`].
#[derive(Default)]
pub(super) struct Repeaters {
    set: HashSet<Arc<str>>,
    order: VecDeque<Arc<str>>,
}

impl Repeaters {
    /// Remembers `agents`, forgetting the oldest beyond [`REPEATERS`].
    pub(super) fn learn<'a>(&mut self, agents: impl IntoIterator<Item = &'a str>) {
        for agent in agents {
            if self.set.contains(agent) {
                continue;
            }
            let agent: Arc<str> = Arc::from(agent);
            self.set.insert(agent.clone());
            self.order.push_back(agent);
            while self.order.len() > REPEATERS {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }

    /// Whether `agent` is remembered.
    pub(super) fn holds(&self, agent: &str) -> bool {
        !self.set.is_empty() && self.set.contains(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_agent_is_forgotten_first() {
        let mut known = Repeaters::default();
        assert!(!known.holds("agent-0"));
        let agents: Vec<String> = (0..=REPEATERS).map(|i| format!("agent-{i}")).collect();
        known.learn(agents[..2].iter().map(String::as_str));
        // Learnt again: kept once.
        known.learn(["agent-0"]);
        assert!(known.holds("agent-0") && known.holds("agent-1"));
        assert!(!known.holds("agent-2"));
        known.learn(agents[2..].iter().map(String::as_str));
        assert_eq!((known.set.len(), known.order.len()), (REPEATERS, REPEATERS));
        assert!(!known.holds("agent-0"), "the oldest is forgotten");
        assert!(known.holds("agent-1") && known.holds(&agents[REPEATERS]));
    }
}
