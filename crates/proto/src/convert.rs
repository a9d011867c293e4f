//! Wire ↔ core conversions. Incoming messages are validated: `TryFrom` names the bad field.

use budget_core::live::{LiveChain, LiveSegment};
use budget_core::rules::{RetryPlan, RetryRule};
use budget_core::topology::{Idempotency, SegmentClass};
use budget_core::HumanDuration;

use crate::v1;

/// A field of a received message that cannot become a core value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConvertError {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> ConvertError {
    ConvertError {
        field: field.into(),
        message: message.into(),
    }
}

impl From<&RetryRule> for v1::RetryRule {
    fn from(r: &RetryRule) -> Self {
        Self {
            max_retries: r.max_retries,
            backoffs_ms: r.backoffs_ms.clone(),
            jitter_pct: r.jitter_pct,
            worst_case_backoff_ms: r.worst_case_backoff_ms,
        }
    }
}

impl From<v1::RetryRule> for RetryRule {
    fn from(r: v1::RetryRule) -> Self {
        Self {
            max_retries: r.max_retries,
            backoffs_ms: r.backoffs_ms,
            jitter_pct: r.jitter_pct,
            worst_case_backoff_ms: r.worst_case_backoff_ms,
        }
    }
}

impl From<&LiveSegment> for v1::SegmentBudget {
    fn from(s: &LiveSegment) -> Self {
        Self {
            id: s.id.clone(),
            caller: s.caller.clone(),
            callee: s.callee.clone(),
            parent: s.parent.clone().unwrap_or_default(),
            stage: s.stage,
            class: s.class.as_str().to_owned(),
            timeout_ms: s.timeout_ms,
            budget_ms: s.budget_ms,
            reserve_ms: s.reserve_ms,
            retry: Some(v1::RetryPlan {
                idempotent: s.retry.idempotent,
                on_deadline: s.retry.on_deadline.as_ref().map(Into::into),
                on_unavailable: s.retry.on_unavailable.as_ref().map(Into::into),
            }),
            idempotency: s.idempotency.as_ref().map(|i| v1::Idempotency {
                key: i.key.clone(),
                ttl_ms: i.ttl.as_ms(),
            }),
        }
    }
}

impl From<&LiveChain> for v1::ChainBudget {
    fn from(c: &LiveChain) -> Self {
        Self {
            chain: c.chain.clone(),
            baseline_id: c.baseline_id.clone(),
            revision: c.revision,
            published_at: c.published_at.clone(),
            entry_budget_ms: c.entry_budget_ms,
            breaker_window_ms: c.breaker_window_ms,
            max_recovery_ms: c.max_recovery.as_ms(),
            segments: c.segments.iter().map(Into::into).collect(),
        }
    }
}

/// A chain's config encoded as a `budget.v1.ChainBudget`, ready for
/// [`crate::wire::BudgetUpdate::chains`].
pub fn encode_chain(c: &LiveChain) -> Vec<u8> {
    prost::Message::encode_to_vec(&v1::ChainBudget::from(c))
}

fn segment(i: usize, s: v1::SegmentBudget) -> Result<LiveSegment, ConvertError> {
    let at = |f: &str| format!("segments[{i}].{f}");
    if s.id.is_empty() {
        return Err(err(at("id"), "must not be empty"));
    }
    let class = match s.class.as_str() {
        "volatile" => SegmentClass::Volatile,
        "stable" => SegmentClass::Stable,
        other => return Err(err(at("class"), format!("unknown class {other:?}"))),
    };
    if s.timeout_ms == 0 {
        return Err(err(at("timeout_ms"), "must be greater than 0"));
    }
    if s.budget_ms < s.timeout_ms {
        return Err(err(
            at("budget_ms"),
            format!("{} is below the timeout {}", s.budget_ms, s.timeout_ms),
        ));
    }
    let retry = s.retry.ok_or_else(|| err(at("retry"), "missing"))?;
    let idempotency = s
        .idempotency
        .map(|i| {
            if i.key.is_empty() {
                Err(err(at("idempotency.key"), "must not be empty"))
            } else {
                Ok(Idempotency {
                    key: i.key,
                    ttl: HumanDuration::from_ms(i.ttl_ms),
                })
            }
        })
        .transpose()?;
    if (retry.on_deadline.is_some() || retry.on_unavailable.is_some()) && idempotency.is_none() {
        return Err(err(
            at("retry"),
            "retries on a segment without an idempotency key",
        ));
    }
    Ok(LiveSegment {
        id: s.id,
        caller: s.caller,
        callee: s.callee,
        parent: Some(s.parent).filter(|p| !p.is_empty()),
        stage: s.stage,
        class,
        timeout_ms: s.timeout_ms,
        budget_ms: s.budget_ms,
        reserve_ms: s.reserve_ms,
        retry: RetryPlan {
            idempotent: retry.idempotent,
            on_deadline: retry.on_deadline.map(Into::into),
            on_unavailable: retry.on_unavailable.map(Into::into),
        },
        idempotency,
    })
}

impl TryFrom<v1::ChainBudget> for LiveChain {
    type Error = ConvertError;

    fn try_from(c: v1::ChainBudget) -> Result<Self, ConvertError> {
        if c.chain.is_empty() {
            return Err(err("chain", "must not be empty"));
        }
        if c.entry_budget_ms == 0 {
            return Err(err("entry_budget_ms", "must be greater than 0"));
        }
        if c.revision <= 0 {
            return Err(err("revision", "must be positive"));
        }
        let segments = c
            .segments
            .into_iter()
            .enumerate()
            .map(|(i, s)| segment(i, s))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LiveChain {
            chain: c.chain,
            revision: c.revision,
            baseline_id: c.baseline_id,
            published_at: c.published_at,
            entry_budget_ms: c.entry_budget_ms,
            breaker_window_ms: c.breaker_window_ms,
            max_recovery: HumanDuration::from_ms(c.max_recovery_ms),
            segments,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use budget_core::example::{checkout_live, CHECKOUT_TOPOLOGY, CHECKOUT_TOPOLOGY_B};

    fn live(topology: &str) -> LiveChain {
        checkout_live(topology, 7).expect("the SPEC example computes")
    }

    #[test]
    fn round_trip_is_lossless() {
        let a = live(CHECKOUT_TOPOLOGY);
        let wire = v1::ChainBudget::from(&a);
        assert_eq!(LiveChain::try_from(wire).unwrap(), a);
        assert!(a.findings().is_empty(), "{:?}", a.findings());
    }

    #[test]
    fn inverted_config_is_found_after_the_wire() {
        let b = LiveChain::try_from(v1::ChainBudget::from(&live(CHECKOUT_TOPOLOGY_B))).unwrap();
        let f = b.findings();
        assert_eq!(f.len(), 1);
        assert!(
            f[0].message.contains("909") && f[0].message.contains("109"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let mut wire = v1::ChainBudget::from(&live(CHECKOUT_TOPOLOGY));
        wire.segments[1].class = "wobbly".into();
        assert_eq!(
            LiveChain::try_from(wire.clone()).unwrap_err().field,
            "segments[1].class"
        );
        wire.segments[1].class = "stable".into();
        wire.segments[3].retry.as_mut().unwrap().on_deadline = Some(v1::RetryRule::default());
        assert_eq!(
            LiveChain::try_from(wire.clone()).unwrap_err().field,
            "segments[3].retry"
        );
        wire.segments[3].retry = None;
        assert_eq!(
            LiveChain::try_from(wire).unwrap_err().field,
            "segments[3].retry"
        );
    }
}
