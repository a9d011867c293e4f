//! The agent's view of the live config: one revision, the complete budgets of every chain it
//! watches, and how a received update is validated and applied.

use std::collections::BTreeMap;
use std::time::Duration;

use budget_core::checks::Severity;
use budget_core::live::{LiveChain, LiveSegment};
use budget_proto::v1;
use serde::{Deserialize, Serialize};

/// The live budgets an agent enforces: a revision and the complete config of each chain.
///
/// Serialized as is into the on-disk cache (`{"revision": …, "chains": {name: LiveChain}}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The publication revision this snapshot is at (0 for none).
    pub revision: i64,
    pub chains: BTreeMap<String, LiveChain>,
}

/// Why a config was refused: the first chain and segment with an error finding, and every
/// error message (with its numbers, e.g. "need 909 ms … 109 ms over").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("chain {chain:?}, segment {segment:?}: {message}")]
pub struct Refusal {
    pub chain: String,
    /// Empty when the problem is not tied to one segment (e.g. a malformed message).
    pub segment: String,
    pub message: String,
}

impl Snapshot {
    /// A snapshot of `chains` at the highest of their revisions.
    pub fn from_chains(chains: impl IntoIterator<Item = LiveChain>) -> Self {
        let chains: BTreeMap<String, LiveChain> =
            chains.into_iter().map(|c| (c.chain.clone(), c)).collect();
        let revision = chains.values().map(|c| c.revision).max().unwrap_or(0);
        Self { revision, chains }
    }

    /// The segment `id` (`caller->callee`) in any chain. When several chains define it, the
    /// one with the smallest budget wins: the agent never exceeds any chain's budget.
    pub fn segment(&self, id: &str) -> Option<&LiveSegment> {
        self.locate(id).map(|(_, segment)| segment)
    }

    /// The segment `id` as [`Snapshot::segment`] picks it, with the name of its chain (the
    /// chain its calls are counted under).
    pub(crate) fn locate(&self, id: &str) -> Option<(&str, &LiveSegment)> {
        self.chains
            .iter()
            .filter_map(|(name, c)| c.segment(id).map(|s| (name.as_str(), s)))
            .min_by_key(|(_, s)| (s.budget_ms, s.timeout_ms))
    }

    /// The budget of segment `id`, retries included (R-budget).
    pub fn budget(&self, id: &str) -> Option<Duration> {
        self.segment(id).map(|s| Duration::from_millis(s.budget_ms))
    }

    /// Validates every chain with the same checks as the server (`LiveChain::findings`):
    /// any error finding refuses the whole snapshot.
    pub fn check(&self) -> Result<(), Refusal> {
        self.chains.values().try_for_each(check_chain)
    }

    /// The snapshot after `update`: each chain present replaces the one held; the revision
    /// becomes the update's. Refused — leaving `self` as it was — when a chain is malformed or
    /// has an error finding.
    pub(crate) fn apply(&self, update: v1::BudgetUpdate) -> Result<Snapshot, Refusal> {
        let mut next = self.clone();
        for wire in update.chains {
            let name = wire.chain.clone();
            let chain = LiveChain::try_from(wire).map_err(|e| Refusal {
                chain: name.clone(),
                segment: String::new(),
                message: format!("malformed config: {e}"),
            })?;
            check_chain(&chain)?;
            next.chains.insert(name, chain);
        }
        next.revision = update.revision;
        Ok(next)
    }
}

fn check_chain(chain: &LiveChain) -> Result<(), Refusal> {
    let errors: Vec<_> = chain
        .findings()
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    match errors.first() {
        None => Ok(()),
        Some(first) => Err(Refusal {
            chain: chain.chain.clone(),
            segment: first.segment.clone(),
            message: errors
                .iter()
                .map(|f| format!("{}: {}", f.kind.check_name(), f.message))
                .collect::<Vec<_>>()
                .join("; "),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{example_a, example_b};

    fn update(revision: i64, chains: &[&LiveChain]) -> v1::BudgetUpdate {
        v1::BudgetUpdate {
            revision,
            chains: chains.iter().map(|c| v1::ChainBudget::from(*c)).collect(),
        }
    }

    #[test]
    fn a_good_update_replaces_its_chains() {
        let a = example_a();
        let s = Snapshot::default().apply(update(7, &[&a])).unwrap();
        assert_eq!(s.revision, 7);
        assert_eq!(s.chains["checkout"], a);
        assert_eq!(
            s.budget("order->inventory"),
            Some(Duration::from_millis(208))
        );
        assert_eq!(s.budget("order->payment"), Some(Duration::from_millis(390)));
        assert_eq!(s.budget("order->user"), Some(Duration::from_millis(9)));
        assert_eq!(s.budget("order->nowhere"), None);

        // Another chain arrives; checkout is kept, the revision moves on.
        let mut refund = example_a();
        refund.chain = "refund".into();
        refund.revision = 8;
        refund.segments[1].timeout_ms = 30;
        refund.segments[1].budget_ms = 180;
        let s2 = s.apply(update(8, &[&refund])).unwrap();
        assert_eq!(s2.revision, 8);
        assert_eq!(s2.chains.len(), 2);
        // the strictest budget of the two chains wins
        assert_eq!(
            s2.budget("order->inventory"),
            Some(Duration::from_millis(180))
        );
    }

    #[test]
    fn an_inverted_update_is_refused_with_its_numbers() {
        let s = Snapshot::default()
            .apply(update(7, &[&example_a()]))
            .unwrap();
        let refusal = s.apply(update(8, &[&example_b()])).unwrap_err();
        assert_eq!(refusal.chain, "checkout");
        assert_eq!(refusal.segment, "gateway->order");
        assert!(
            refusal.message.contains("inversion")
                && refusal.message.contains("909")
                && refusal.message.contains("109"),
            "{refusal}"
        );
        // the snapshot itself is untouched
        assert_eq!(s.revision, 7);
        assert!(Snapshot::from_chains([example_b()]).check().is_err());
        assert!(Snapshot::from_chains([example_a()]).check().is_ok());
    }

    #[test]
    fn a_malformed_update_is_refused() {
        let mut wire = update(8, &[&example_a()]);
        wire.chains[0].segments[1].class = "wobbly".into();
        let refusal = Snapshot::default().apply(wire).unwrap_err();
        assert_eq!(refusal.chain, "checkout");
        assert!(
            refusal.message.contains("segments[1].class"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn from_chains_takes_the_highest_revision() {
        let mut other = example_a();
        other.chain = "refund".into();
        other.revision = 12;
        let s = Snapshot::from_chains([example_a(), other]);
        assert_eq!(s.revision, 12);
        assert_eq!(Snapshot::from_chains([]).revision, 0);
    }
}
