//! SPEC §9, canary rollout: which agents receive an approved baseline first, and what ends
//! the bake.
//!
//! Pure: the server passes what the fleet reported (members, ACKs, NACKs, the canary agents'
//! counts) and the time; [`judge`] says whether to wait, promote or abort, with the reason in
//! numbers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::feedback::{evaluate_segment, AlertThresholds, Counts, Latency, ProductionDrift, Rule};

/// Most labels a selector names (an agent declares at most 32).
pub const MAX_LABELS: usize = 32;
/// Longest bake: a week.
pub const MAX_BAKE_S: u64 = 7 * 24 * 3600;

/// Which agents are in the canary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Selector {
    /// `hash(agent_id) mod 100 < percent` ([`bucket`]): the same agents stay in while the
    /// fleet changes.
    Percent(u8),
    /// Agents whose `WatchRequest.labels` hold every one of these pairs.
    Labels(BTreeMap<String, String>),
}

/// A rollout as asked for at approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    pub canary: Selector,
    /// How long canary agents run the new baseline before it is promoted.
    pub bake_s: u64,
    /// Promote or abort by itself when the bake ends (or earlier, on a NACK or alert);
    /// `false`: a person decides.
    #[serde(default = "yes")]
    pub auto: bool,
}

fn yes() -> bool {
    true
}

/// Where a canary stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CanaryState {
    Baking,
    Promoted,
    Aborted,
}

impl CanaryState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Baking => "baking",
            Self::Promoted => "promoted",
            Self::Aborted => "aborted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Baking, Self::Promoted, Self::Aborted]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// A rollout request that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RolloutError {
    #[error("canary percent must be 1-99 (0 selects no agent, 100 every agent: approve without a rollout)")]
    Percent,
    #[error("canary labels: 1-{MAX_LABELS} pairs, keys 1-64 and values at most 256 bytes, no control characters")]
    Labels,
    #[error("bake_s must be 1-{MAX_BAKE_S} seconds")]
    Bake,
}

impl RolloutError {
    /// The JSON pointer of the field at fault in the approve body.
    pub fn pointer(&self) -> &'static str {
        match self {
            Self::Percent => "/rollout/canary/percent",
            Self::Labels => "/rollout/canary/labels",
            Self::Bake => "/rollout/bake_s",
        }
    }
}

impl Rollout {
    pub fn check(&self) -> Result<(), RolloutError> {
        match &self.canary {
            Selector::Percent(p) if !(1..=99).contains(p) => return Err(RolloutError::Percent),
            Selector::Labels(l) => {
                let bad = |t: &str, max: usize| t.len() > max || t.chars().any(char::is_control);
                if l.is_empty()
                    || l.len() > MAX_LABELS
                    || l.iter()
                        .any(|(k, v)| k.is_empty() || bad(k, 64) || bad(v, 256))
                {
                    return Err(RolloutError::Labels);
                }
            }
            Selector::Percent(_) => {}
        }
        if !(1..=MAX_BAKE_S).contains(&self.bake_s) {
            return Err(RolloutError::Bake);
        }
        Ok(())
    }
}

/// An agent's place in 0..100 for percent selection: FNV-1a (64 bit) of its id's UTF-8
/// bytes, mod 100. Stable across processes, replicas and versions.
pub fn bucket(agent_id: &str) -> u8 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in agent_id.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % 100) as u8
}

impl Selector {
    /// Whether the agent `agent_id`, declaring `labels`, is in the canary.
    pub fn selects(&self, agent_id: &str, labels: &BTreeMap<String, String>) -> bool {
        self.selects_bucket(bucket(agent_id), labels)
    }

    /// [`Selector::selects`] of an agent whose [`bucket`] is known.
    pub fn selects_bucket(&self, bucket: u8, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Self::Percent(p) => bucket < *p,
            Self::Labels(want) => want.iter().all(|(k, v)| labels.get(k) == Some(v)),
        }
    }
}

/// What the fleet says of a baking canary.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    /// Canary agents (selected, connected or not).
    pub members: u64,
    /// Of those, how many ACKed the canary revision (or a later one).
    pub acked: u64,
    /// Canary agents that refused the canary revision, with their error (a few).
    pub nacks: Vec<(String, String)>,
    /// What the canary agents did, per segment.
    pub health: BTreeMap<String, Spans>,
    /// Whether the bake time is over.
    pub bake_over: bool,
}

/// One segment on canary agents: their counts and, when they reported latencies, the
/// percentiles of the merged histogram against the canary's baseline (R-drift).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SegmentHealth {
    pub counts: Counts,
    pub latency: Latency,
    pub drift: Option<ProductionDrift>,
}

/// One segment on canary agents over the spans SPEC §8's rules look at (the last complete
/// minute and five minutes) and over the whole bake so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spans {
    pub last_minute: Counts,
    pub last_5m: SegmentHealth,
    pub bake: SegmentHealth,
}

/// What to do with a baking canary.
#[derive(Debug, Clone, PartialEq)]
pub enum Judgement {
    Wait,
    Promote(String),
    Abort(String),
}

/// The first SPEC §8 rule the canary agents break, in words with its numbers: amplification
/// over the last complete minute, kill rate and drift (with the alert rules' sample minimum)
/// over the last five — as the alerts see them — and each over the whole bake so far (a bake
/// shorter than a window is judged too), against the alert thresholds.
pub fn unhealthy(thresholds: &AlertThresholds, health: &BTreeMap<String, Spans>) -> Option<String> {
    for (segment, s) in health {
        let spans = [
            (
                ["over the last minute", "over the last 5 minutes"],
                &s.last_minute,
                &s.last_5m,
            ),
            (["over the bake so far"; 2], &s.bake.counts, &s.bake),
        ];
        for (words, c1, h) in spans {
            let drift = h.drift.as_ref().map(|d| (d, &h.latency));
            for v in evaluate_segment(thresholds, c1, &h.counts, drift) {
                if !v.firing {
                    continue;
                }
                let (value, threshold) = (v.value, v.threshold);
                return Some(match v.rule {
                    Rule::Drift => format!(
                        "drift on {segment}: {value:+.1} % > {threshold} % from the canary's baseline on canary agents {} (p99 {} µs, p999 {} µs, {} samples)",
                        words[1], h.latency.p99_us, h.latency.p999_us, h.latency.samples
                    ),
                    Rule::Amplification => format!(
                        "amplification on {segment}: {value:.3} > {threshold} on canary agents {} ({} calls, {} attempts)",
                        words[0], c1.calls, c1.attempts
                    ),
                    rule => format!(
                        "{} on {segment}: {value:.3} > {threshold} on canary agents {} ({} attempts, {} deadline-exceeded)",
                        rule.as_str(),
                        words[1],
                        h.counts.attempts,
                        h.counts.deadline_attempts()
                    ),
                });
            }
        }
    }
    None
}

/// The state machine of a baking canary with `auto`: abort on any NACK or broken rule at
/// once; at the end of the bake, promote when every canary agent ACKed, abort otherwise
/// (no agent selected, or some never ACKed).
pub fn judge(thresholds: &AlertThresholds, e: &Evidence) -> Judgement {
    if let Some((agent, error)) = e.nacks.first() {
        return Judgement::Abort(format!(
            "{} canary agent(s) refused the config (NACK); first: {agent}: {error}",
            e.nacks.len()
        ));
    }
    if let Some(reason) = unhealthy(thresholds, &e.health) {
        return Judgement::Abort(reason);
    }
    if !e.bake_over {
        return Judgement::Wait;
    }
    if e.members == 0 {
        return Judgement::Abort("the bake ended with no agent selected for the canary".into());
    }
    if e.acked < e.members {
        return Judgement::Abort(format!(
            "the bake ended with {} of {} canary agents not having ACKed",
            e.members - e.acked,
            e.members
        ));
    }
    Judgement::Promote(format!(
        "the bake ended: all {} canary agents ACKed, no rule broken",
        e.members
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn buckets_are_fnv1a_mod_100() {
        // FNV-1a 64 of "" is the offset basis 0xcbf29ce484222325 = 14695981039346656037.
        assert_eq!(bucket(""), 37);
        // Of "a": 0xaf63dc4c8601ec8c = 12638187200555641996.
        assert_eq!(bucket("a"), 96);
        let ids: Vec<String> = (0..10_000).map(|i| format!("agent-{i}")).collect();
        let in10 = ids.iter().filter(|i| bucket(i) < 10).count();
        assert!((800..1200).contains(&in10), "{in10} of 10 000 in 10 %");
    }

    #[test]
    fn selectors() {
        let p = Selector::Percent(10);
        let any = BTreeMap::new();
        assert_eq!(p.selects("a", &any), bucket("a") < 10);
        let l = Selector::Labels(labels(&[("zone", "a")]));
        assert!(l.selects("x", &labels(&[("zone", "a"), ("host", "h")])));
        assert!(!l.selects("x", &labels(&[("zone", "b")])));
        assert!(!l.selects("x", &any));
    }

    #[test]
    fn rollouts_parse_and_check() {
        let r: Rollout =
            serde_json::from_str(r#"{"canary": {"percent": 10}, "bake_s": 300}"#).unwrap();
        assert_eq!(r.canary, Selector::Percent(10));
        assert!(r.auto);
        assert_eq!(r.check(), Ok(()));
        let bad = |json: &str| serde_json::from_str::<Rollout>(json).unwrap().check();
        assert_eq!(
            bad(r#"{"canary": {"percent": 0}, "bake_s": 1}"#),
            Err(RolloutError::Percent)
        );
        assert_eq!(
            bad(r#"{"canary": {"labels": {}}, "bake_s": 1}"#),
            Err(RolloutError::Labels)
        );
        assert_eq!(
            bad(r#"{"canary": {"percent": 5}, "bake_s": 0}"#),
            Err(RolloutError::Bake)
        );
        assert!(serde_json::from_str::<Rollout>(
            r#"{"canary": {"percent": 5, "labels": {}}, "bake_s": 1}"#
        )
        .is_err());
    }

    fn counts(calls: u64, attempts: u64, deadline_exceeded: u64) -> Counts {
        Counts {
            calls,
            attempts,
            deadline_exceeded,
            ..Counts::default()
        }
    }

    #[test]
    fn the_state_machine() {
        let t = AlertThresholds::default();
        let base = Evidence {
            members: 3,
            acked: 3,
            ..Evidence::default()
        };
        assert_eq!(judge(&t, &base), Judgement::Wait);
        let over = Evidence {
            bake_over: true,
            ..base.clone()
        };
        assert!(matches!(judge(&t, &over), Judgement::Promote(_)));
        let unacked = Evidence {
            acked: 2,
            ..over.clone()
        };
        assert!(matches!(judge(&t, &unacked), Judgement::Abort(r) if r.contains("1 of 3")));
        let empty = Evidence {
            members: 0,
            acked: 0,
            ..over.clone()
        };
        assert!(matches!(judge(&t, &empty), Judgement::Abort(_)));
        let nack = Evidence {
            nacks: vec![("a1".into(), "inversion".into())],
            ..base.clone()
        };
        assert!(matches!(judge(&t, &nack), Judgement::Abort(r) if r.contains("a1: inversion")));
        // The counts over the whole bake (the windows empty).
        let health = |segment: &str, counts| {
            BTreeMap::from([(
                segment.to_owned(),
                Spans {
                    bake: SegmentHealth {
                        counts,
                        ..SegmentHealth::default()
                    },
                    ..Spans::default()
                },
            )])
        };
        let amplified = Evidence {
            health: health("order->inventory", counts(100, 250, 0)),
            ..base.clone()
        };
        assert!(
            matches!(judge(&t, &amplified), Judgement::Abort(r) if r == "amplification on order->inventory: 2.500 > 2 on canary agents over the bake so far (100 calls, 250 attempts)")
        );
        let killing = Evidence {
            health: health("a->b", counts(100, 100, 2)),
            ..base.clone()
        };
        assert!(matches!(judge(&t, &killing), Judgement::Abort(r) if r.starts_with("kill_rate")));
        // A healthy bake whose last minute amplifies: the window's rule fires.
        let mut late = health("a->b", counts(1000, 1100, 0));
        late.get_mut("a->b").unwrap().last_minute = counts(10, 30, 0);
        let late = Evidence {
            health: late,
            ..base.clone()
        };
        assert_eq!(
            judge(&t, &late),
            Judgement::Abort(
                "amplification on a->b: 3.000 > 2 on canary agents over the last minute (10 calls, 30 attempts)"
                    .into()
            )
        );
        // Drift counts with the alert rule's sample minimum only.
        let drifted = |samples| {
            let mut h = health("a->b", counts(10, 10, 0));
            let s = &mut h.get_mut("a->b").unwrap().bake;
            s.latency = Latency {
                samples,
                p50_us: 1_000,
                p99_us: 130_000,
                p999_us: 200_000,
            };
            s.drift = Some(ProductionDrift {
                entries: Vec::new(),
                drift_pct: Some(30.0),
                drift: true,
            });
            Evidence {
                health: h,
                ..base.clone()
            }
        };
        assert_eq!(judge(&t, &drifted(999)), Judgement::Wait);
        assert!(
            matches!(judge(&t, &drifted(1000)), Judgement::Abort(r) if r.starts_with("drift on a->b: +30.0 % > 20 % from the canary's baseline on canary agents over the bake so far")),
            "{:?}",
            judge(&t, &drifted(1000))
        );
    }
}
