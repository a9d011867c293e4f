//! The fleet: `GET /agents`, every agent seen within the retention period, paginated. (A
//! baseline's rollout is in [`crate::baselines::Rollout`].)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What the fleet knows of one agent (OpenAPI `Agent`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Agent {
    pub agent_id: String,
    pub service: String,
    /// The client library and its version, e.g. `go/0.1.0` or `rust/0.1.0` (empty for an
    /// agent that does not say).
    pub client: String,
    pub labels: BTreeMap<String, String>,
    /// The chains the agent receives.
    pub chains: Vec<String>,
    /// `host:port` of the gRPC listener of the replica it streams from.
    pub replica: String,
    pub connected: bool,
    /// Last revision sent to it.
    pub delivered: i64,
    /// Last revision it accepted (ACK).
    pub acked: i64,
    /// Last revision it refused (NACK), and why.
    pub nack_revision: Option<i64>,
    pub nack_error: Option<String>,
    pub first_seen: String,
    /// When the entry was last written while the agent was seen: at each connect, disconnect
    /// and NACK, and every heartbeat (a quarter of `agents.retention_secs`, at most an hour)
    /// while it stays connected; a publication changes only `delivered` and `acked`.
    pub last_seen: String,
    /// The name of the token the agent is bound to (`null` once that token is revoked).
    pub token: Option<String>,
}

/// A page of agents, by service and id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentList {
    pub agents: Vec<Agent>,
    /// Pass as `?cursor=` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// `GET /agents`'s query: a page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentListQuery {
    /// At most this many agents (1 to 1000, default 100).
    pub limit: Option<i64>,
    /// The previous page's `next_cursor`, unchanged.
    pub cursor: Option<String>,
}
