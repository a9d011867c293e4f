//! [`AgentError`]: why an agent could not start — an unusable [`crate::AgentConfig`], budgets
//! refused by the checks, or no budgets at all.

use crate::snapshot::Refusal;

/// Why an agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The [`crate::AgentConfig`] itself is unusable (bad endpoint, token not a header value …).
    #[error("invalid agent config: {0}")]
    Config(String),
    /// The config received (or cached) has an error finding, e.g. an inversion: a service
    /// refuses to start with it. `message` carries the numbers.
    #[error("refused the budgets of chain {chain:?} at segment {segment:?}: {message}")]
    Refused {
        chain: String,
        segment: String,
        message: String,
    },
    /// Neither the control plane nor a usable cache gave a config.
    #[error("no budgets: control plane unavailable and no usable cached config ({reason})")]
    Unavailable { reason: String },
}

impl From<Refusal> for AgentError {
    fn from(r: Refusal) -> Self {
        Self::Refused {
            chain: r.chain,
            segment: r.segment,
            message: r.message,
        }
    }
}
