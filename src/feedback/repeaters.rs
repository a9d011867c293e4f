//! Agents whose report, sent once (without `resend`), a commit found stored already
//! ([`super::rollup`]): such a report's windows are in its batch's sums, so the batch is
//! dropped. Those agents' later reports are kept apart as resends are, and looked for at the
//! commit, so that an agent fails one batch of a process (two, with two reports in flight),
//! however many reports it repeats. Once [`REPEATERS`] agents have, every report is looked
//! for so (a token binding agent after agent to repeat reports cannot fail batch after
//! batch); that lasts until the process restarts.

use std::collections::HashSet;
use std::sync::Arc;

/// How many such agents a process remembers; beyond, it looks for every report. About 150
/// bytes each (an agent id of up to 128 bytes), under 40 KiB in all. A replica that is slow
/// but alive during a failover makes a few agents such; 256 make an attack or a broken
/// client.
pub const REPEATERS: usize = 256;

/// The agents, at most [`REPEATERS`]; `all` once that many are.
#[derive(Default)]
pub(super) struct Repeaters {
    set: HashSet<Arc<str>>,
    all: bool,
}

impl Repeaters {
    /// Remembers `agents`; at [`REPEATERS`], every agent from then on.
    pub(super) fn learn<'a>(&mut self, agents: impl IntoIterator<Item = &'a str>) {
        for agent in agents {
            if self.all {
                return;
            }
            self.set.insert(Arc::from(agent));
            if self.set.len() >= REPEATERS {
                tracing::warn!(
                    agents = REPEATERS,
                    "this many agents sent stored reports again as new; every report is looked for as a resend is until the process restarts"
                );
                self.all = true;
                self.set = HashSet::new();
            }
        }
    }

    /// Whether `agent`'s reports are looked for as resends are.
    pub(super) fn holds(&self, agent: &str) -> bool {
        self.all || (!self.set.is_empty() && self.set.contains(agent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_every_agent_is_looked_for() {
        let mut known = Repeaters::default();
        assert!(!known.holds("agent-0"));
        let agents: Vec<String> = (0..REPEATERS).map(|i| format!("agent-{i}")).collect();
        known.learn(agents[..2].iter().map(String::as_str));
        // Learnt again: held once.
        known.learn(["agent-0"]);
        assert_eq!(known.set.len(), 2);
        assert!(known.holds("agent-0") && known.holds("agent-1"));
        assert!(!known.holds("agent-2") && !known.holds("never-seen"));
        known.learn(agents[2..REPEATERS - 1].iter().map(String::as_str));
        assert!(!known.all && !known.holds("never-seen"));
        known.learn(agents[REPEATERS - 1..].iter().map(String::as_str));
        assert!(known.all && known.set.is_empty());
        assert!(known.holds("never-seen") && known.holds("agent-0"));
    }
}
