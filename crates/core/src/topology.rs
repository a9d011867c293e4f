//! A chain's call tree and its structural validation.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::distribution::KillRateThresholds;
use crate::duration::HumanDuration;

/// Default circuit-breaker window (seed §"联动纪律": a 5 s window).
pub const DEFAULT_BREAKER_WINDOW_MS: u64 = 5_000;
/// Default longest downstream recovery (seed: a primary/replica switch-over took 18 h).
pub const DEFAULT_MAX_RECOVERY: HumanDuration = HumanDuration::from_ms(18 * 3_600_000);

/// One version of a chain's topology, as uploaded (and validated by the JSON Schema first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// The root segment's timeout, fixed by policy (R3: 800 ms).
    pub entry_budget_ms: u64,
    #[serde(default = "default_breaker_window_ms")]
    pub breaker_window_ms: u64,
    #[serde(default = "default_max_recovery")]
    pub max_recovery: HumanDuration,
    /// Thresholds of the `timeout_kill_rate` check; 1 % and 10 % when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_rate: Option<KillRateThresholds>,
    pub segments: Vec<Segment>,
}

fn default_breaker_window_ms() -> u64 {
    DEFAULT_BREAKER_WINDOW_MS
}

fn default_max_recovery() -> HumanDuration {
    DEFAULT_MAX_RECOVERY
}

/// One call (`caller->callee`) in the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    pub id: String,
    pub caller: String,
    pub callee: String,
    /// The segment whose handler makes this call; `None` for the root.
    #[serde(default)]
    pub parent: Option<String>,
    pub class: SegmentClass,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<Idempotency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryFlags>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reserve_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<u32>,
    /// Load-tool labels (request names, tags, endpoints) whose measurements are this segment's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentClass {
    /// Large fluctuation: P999 + 30 %.
    Volatile,
    /// Small fluctuation: P99 + 10 %.
    Stable,
}

impl SegmentClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Volatile => "volatile",
            Self::Stable => "stable",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Idempotency {
    /// The de-duplication key the caller sends, e.g. `order_id`.
    pub key: String,
    pub ttl: HumanDuration,
}

/// Which failures an idempotent segment retries on; both default to true.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryFlags {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_deadline: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_unavailable: Option<bool>,
}

impl Topology {
    /// The chain's kill-rate thresholds, or the defaults.
    pub fn kill_rate_thresholds(&self) -> KillRateThresholds {
        self.kill_rate.unwrap_or_default()
    }
}

impl Segment {
    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }

    pub fn is_idempotent(&self) -> bool {
        self.idempotency.is_some()
    }

    /// Whether this segment retries after DEADLINE_EXCEEDED (only idempotent segments retry).
    pub fn retries_on_deadline(&self) -> bool {
        self.is_idempotent() && self.retry.and_then(|r| r.on_deadline).unwrap_or(true)
    }

    /// Whether this segment retries after UNAVAILABLE (only idempotent segments retry).
    pub fn retries_on_unavailable(&self) -> bool {
        self.is_idempotent() && self.retry.and_then(|r| r.on_unavailable).unwrap_or(true)
    }

    /// Whether the topology asks for any retry, idempotent or not.
    fn requests_retry(&self) -> bool {
        self.retry
            .is_some_and(|r| r.on_deadline.unwrap_or(true) || r.on_unavailable.unwrap_or(true))
    }
}

/// One structural problem, located by a JSON pointer into the topology document.
/// The most segments a chain may have (`schemas/topology.json`'s `maxItems`): an upload past it
/// is refused, and so is a received config, before any check whose cost grows faster.
pub const MAX_SEGMENTS: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopologyError {
    pub pointer: String,
    pub message: String,
}

impl std::fmt::Display for TopologyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pointer, self.message)
    }
}

impl Topology {
    /// The root segment. Only meaningful on a validated topology.
    pub fn root(&self) -> Option<&Segment> {
        self.segments.iter().find(|s| s.is_root())
    }

    pub fn segment(&self, id: &str) -> Option<&Segment> {
        self.segments.iter().find(|s| s.id == id)
    }

    /// Children of `parent` in document order.
    pub fn children<'a>(&'a self, parent: &'a str) -> impl Iterator<Item = &'a Segment> + 'a {
        self.segments
            .iter()
            .filter(move |s| s.parent.as_deref() == Some(parent))
    }

    /// Every service named as a caller or callee.
    pub fn services(&self) -> std::collections::BTreeSet<&str> {
        self.segments
            .iter()
            .flat_map(|s| [s.caller.as_str(), s.callee.as_str()])
            .collect()
    }

    /// Structural validation; returns every violation, not only the first.
    pub fn validate(&self) -> Result<(), Vec<TopologyError>> {
        if self.segments.len() > MAX_SEGMENTS {
            // Refused before any check whose cost grows faster than the segments.
            return Err(vec![TopologyError {
                pointer: "/segments".into(),
                message: format!("a chain has at most {MAX_SEGMENTS} segments"),
            }]);
        }
        let mut errors = Vec::new();
        let mut push =
            |pointer: String, message: String| errors.push(TopologyError { pointer, message });

        if self.entry_budget_ms == 0 {
            push("/entry_budget_ms".into(), "must be greater than 0".into());
        }
        if self.breaker_window_ms == 0 {
            push("/breaker_window_ms".into(), "must be greater than 0".into());
        }
        if let Some(Err((field, why))) = self.kill_rate.map(|t| t.check()) {
            push(format!("/kill_rate/{field}"), why);
        }
        if self.segments.is_empty() {
            push(
                "/segments".into(),
                "a chain needs at least its root segment".into(),
            );
        }

        let mut first_index: HashMap<&str, usize> = HashMap::new();
        for (i, s) in self.segments.iter().enumerate() {
            let at = |field: &str| format!("/segments/{i}/{field}");
            if let Some(prev) = first_index.get(s.id.as_str()) {
                push(
                    at("id"),
                    format!(
                        "duplicate segment id {:?} (first at /segments/{prev})",
                        s.id
                    ),
                );
            } else {
                first_index.insert(&s.id, i);
            }
            if s.caller.is_empty() || s.callee.is_empty() {
                push(at("caller"), "caller and callee must not be empty".into());
            }
            let expected = format!("{}->{}", s.caller, s.callee);
            if s.id != expected {
                push(
                    at("id"),
                    format!("id {:?} does not match caller->callee {expected:?}", s.id),
                );
            }
            if s.requests_retry() && !s.is_idempotent() {
                push(
                    at("retry"),
                    format!("segment {:?} retries but has no idempotency key; only idempotent calls may retry", s.id),
                );
            }
            if s.pinned_timeout_ms == Some(0) {
                push(at("pinned_timeout_ms"), "must be greater than 0".into());
            }
            if let Some(idem) = &s.idempotency {
                if idem.key.trim().is_empty() {
                    push(at("idempotency/key"), "must not be empty".into());
                }
                if idem.ttl.as_ms() == 0 {
                    push(at("idempotency/ttl"), "must be greater than 0".into());
                }
            }
            if s.is_root() {
                if s.pinned_timeout_ms.is_some() {
                    push(
                        at("pinned_timeout_ms"),
                        "the root's timeout is entry_budget_ms; set that instead of pinning the root".into(),
                    );
                }
                if s.stage.is_some() {
                    push(
                        at("stage"),
                        "the root segment has no siblings; stage does not apply".into(),
                    );
                }
            }
        }

        let roots: Vec<usize> = (0..self.segments.len())
            .filter(|&i| self.segments[i].is_root())
            .collect();
        match roots.len() {
            0 if !self.segments.is_empty() => push(
                "/segments".into(),
                "no root segment: exactly one segment must have \"parent\": null".into(),
            ),
            0 | 1 => {}
            _ => {
                // Each extra root names the first one only: listing every root on every
                // extra one made the errors grow with the square of the roots.
                let first = &self.segments[roots[0]].id;
                for &i in &roots[1..] {
                    push(
                        format!("/segments/{i}/parent"),
                        format!(
                            "more than one root segment ({first:?} is already the root); exactly one may have no parent"
                        ),
                    );
                }
            }
        }

        // A load-tool label names one segment only.
        let mut label_owner: HashMap<&str, &str> = HashMap::new();
        for (i, s) in self.segments.iter().enumerate() {
            for (j, label) in s.labels.iter().enumerate() {
                match label_owner.get(label.as_str()) {
                    Some(owner) if *owner != s.id => push(
                        format!("/segments/{i}/labels/{j}"),
                        format!("label {label:?} is already a label of {owner:?}; a label names one segment"),
                    ),
                    _ => {
                        label_owner.insert(label, &s.id);
                    }
                }
            }
        }

        // Parents exist and the child's caller is the parent's callee.
        let by_id: BTreeMap<&str, &Segment> =
            self.segments.iter().map(|s| (s.id.as_str(), s)).collect();
        for (i, s) in self.segments.iter().enumerate() {
            let Some(parent_id) = &s.parent else { continue };
            match by_id.get(parent_id.as_str()) {
                None => push(
                    format!("/segments/{i}/parent"),
                    format!(
                        "parent {parent_id:?} of {:?} is not a segment of this chain",
                        s.id
                    ),
                ),
                Some(parent) if parent.callee != s.caller => push(
                    format!("/segments/{i}/caller"),
                    format!(
                        "{:?} is called by {:?}, but its parent {:?} is handled by {:?}",
                        s.id, s.caller, parent.id, parent.callee
                    ),
                ),
                Some(_) => {}
            }
        }

        // Cycles: follow parents from every segment; a walk longer than the chain loops.
        let mut reported: std::collections::BTreeSet<&str> = Default::default();
        for (i, s) in self.segments.iter().enumerate() {
            let mut cur = s;
            let mut steps = 0;
            while let Some(p) = cur.parent.as_deref().and_then(|p| by_id.get(p)) {
                steps += 1;
                if p.id == s.id || steps > self.segments.len() {
                    if p.id == s.id && reported.insert(s.id.as_str()) {
                        push(
                            format!("/segments/{i}/parent"),
                            format!(
                                "segment {:?} is its own ancestor: parents form a cycle",
                                s.id
                            ),
                        );
                    }
                    break;
                }
                cur = p;
            }
        }

        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn topo(v: serde_json::Value) -> Topology {
        serde_json::from_value(v).unwrap()
    }

    fn check(v: serde_json::Value, expect: &[&str]) {
        let got: Vec<String> = match topo(v).validate() {
            Ok(()) => vec![],
            Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
        };
        assert_eq!(got.len(), expect.len(), "got {got:#?}");
        for (g, e) in got.iter().zip(expect) {
            assert!(g.contains(e), "{g:?} should contain {e:?}");
        }
    }

    fn seg(caller: &str, callee: &str, parent: Option<&str>) -> serde_json::Value {
        json!({"id": format!("{caller}->{callee}"), "caller": caller, "callee": callee,
               "parent": parent, "class": "stable"})
    }

    #[test]
    fn valid_chain() {
        check(
            json!({"entry_budget_ms": 800, "segments": [
                seg("gateway", "order", None),
                seg("order", "inventory", Some("gateway->order")),
            ]}),
            &[],
        );
    }

    #[test]
    fn structural_errors_are_all_reported() {
        check(
            json!({"entry_budget_ms": 800, "segments": [
                seg("gateway", "order", None),
                seg("gateway", "audit", None),
                seg("order", "inventory", Some("nowhere")),
                {"id": "order->pay", "caller": "order", "callee": "payment", "parent": "gateway->order", "class": "volatile"},
            ]}),
            &[
                "/segments/3/id: id \"order->pay\" does not match",
                "/segments/1/parent: more than one root",
                "/segments/2/parent: parent \"nowhere\"",
            ],
        );
    }

    #[test]
    fn duplicate_ids_and_cycles() {
        check(
            json!({"entry_budget_ms": 800, "segments": [
                seg("gateway", "order", None),
                seg("a", "a", Some("a->a")),
                seg("order", "x", Some("gateway->order")),
                seg("order", "x", Some("gateway->order")),
            ]}),
            &[
                "/segments/3/id: duplicate segment id",
                "/segments/1/parent: segment \"a->a\" is its own ancestor",
            ],
        );
    }

    #[test]
    fn caller_must_be_parents_callee() {
        check(
            json!({"entry_budget_ms": 800, "segments": [
                seg("gateway", "order", None),
                seg("payment", "bank", Some("gateway->order")),
            ]}),
            &["/segments/1/caller: \"payment->bank\" is called by \"payment\", but its parent"],
        );
    }

    #[test]
    fn retry_needs_idempotency() {
        let mut s = seg("order", "user", Some("gateway->order"));
        s["retry"] = json!({"on_deadline": true});
        check(
            json!({"entry_budget_ms": 800, "segments": [seg("gateway", "order", None), s]}),
            &["/segments/1/retry: segment \"order->user\" retries but has no idempotency key"],
        );
        let mut off = seg("order", "user", Some("gateway->order"));
        off["retry"] = json!({"on_deadline": false, "on_unavailable": false});
        check(
            json!({"entry_budget_ms": 800, "segments": [seg("gateway", "order", None), off]}),
            &[],
        );
    }

    #[test]
    fn no_root_and_zero_budgets() {
        check(
            json!({"entry_budget_ms": 0, "breaker_window_ms": 0, "segments": [seg("a", "b", Some("b->a")), seg("b", "a", Some("a->b"))]}),
            &[
                "/entry_budget_ms",
                "/breaker_window_ms",
                "/segments: no root segment",
                "cycle",
                "cycle",
            ],
        );
    }
}
