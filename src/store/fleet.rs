//! The fleet: the agents that watch the server, and the tokens they are bound to.

use async_trait::async_trait;
use budget_api::agents::Agent;
use serde::Serialize;

use super::StoreResult;

/// What the fleet knows of one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentStatus {
    pub agent_id: String,
    pub service: String,
    /// The client library, "language/version" (empty when the agent did not say).
    pub client: String,
    pub labels: std::collections::BTreeMap<String, String>,
    /// The chains the agent receives.
    pub chains: Vec<String>,
    /// The replica it streams from (`host:port` of that replica's gRPC listener).
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
    pub last_seen: String,
    /// The name of the token the agent is bound to (none once that token is revoked).
    pub token: Option<String>,
    /// The identity of that token (its hash): only it may update this entry.
    #[serde(skip)]
    pub token_id: String,
    /// The replica process it streams from, unique to one run of that replica (empty in
    /// entries written before processes were recorded): shown `connected` only while that
    /// process beats ([`Fleet::beat_replica`]).
    #[serde(skip)]
    pub process: String,
}

/// What the API shows of an entry: all of it but the identity of its token.
impl From<AgentStatus> for Agent {
    fn from(a: AgentStatus) -> Self {
        Self {
            agent_id: a.agent_id,
            service: a.service,
            client: a.client,
            labels: a.labels,
            chains: a.chains,
            replica: a.replica,
            connected: a.connected,
            delivered: a.delivered,
            acked: a.acked,
            nack_revision: a.nack_revision,
            nack_error: a.nack_error,
            first_seen: a.first_seen,
            last_seen: a.last_seen,
            token: a.token,
        }
    }
}

/// Agents bound to one token whose only news is the revisions they were sent and accepted:
/// after a publication, nearly a whole fleet shares one such group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentProgress {
    /// The identity of the token the agents are bound to.
    pub token_id: String,
    pub delivered: i64,
    pub acked: i64,
    pub agent_ids: Vec<String>,
}

/// A cohort's revisions: the agents of one token on one replica that were sent and accepted
/// the same revisions follow one row, so a publication to all of them updates that row alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CohortProgress {
    /// Unique to one replica's process and one token.
    pub id: String,
    /// The identity of the token its agents are bound to.
    pub token_id: String,
    pub delivered: i64,
    pub acked: i64,
    /// Agents that follow the cohort from now on: their own revisions are no longer read.
    pub joining: Vec<String>,
}

/// Where a page of `GET /agents` starts: after this `(service, agent_id)`.
pub type AgentCursor = (String, String);

/// The outcome of claiming an `agent_id` for a token ([`Fleet::claim_agents`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentClaim {
    /// The id is this token's (now or already): its stored status, to continue from.
    Bound(Box<AgentStatus>),
    /// Another token that still exists holds the id.
    Taken,
}

/// What the fleet knows of its agents.
#[async_trait]
pub trait Fleet: Send + Sync {
    /// Binds each `agent.agent_id` to the token `agent.token_id` — inserting `agent` as its
    /// entry — unless a token that still exists holds it: then `Taken`, and nothing changes.
    /// An entry of a revoked token, or an unbound one, is taken over. One claim per agent, in
    /// the order given; the ids must be distinct. A few statements however many agents (a
    /// fleet reconnecting after a restart claims in batches).
    async fn claim_agents(&self, agents: &[AgentStatus]) -> StoreResult<Vec<AgentClaim>>;
    /// [`Fleet::claim_agents`] of one agent.
    async fn claim_agent(&self, agent: &AgentStatus) -> StoreResult<AgentClaim> {
        let mut claims = self.claim_agents(std::slice::from_ref(agent)).await?;
        Ok(claims.pop().unwrap_or(AgentClaim::Taken))
    }
    /// The identity of the token `agent_id` is bound to, if that token still exists.
    async fn agent_token(&self, agent_id: &str) -> StoreResult<Option<String>>;
    /// The labels `agent_id` last declared, if the fleet knows it.
    async fn agent_labels(
        &self,
        agent_id: &str,
    ) -> StoreResult<Option<std::collections::BTreeMap<String, String>>>;
    /// Records agents' status: inserts new entries, updates those bound to the same token
    /// (an entry bound to another token is left alone).
    async fn upsert_agents(&self, agents: &[AgentStatus]) -> StoreResult<()>;
    /// Records, in one transaction, each cohort's revisions (the agents in its `joining`
    /// follow it from now on), then the revisions each group's agents were sent and accepted
    /// (they follow no cohort any more) and, with `last_seen` (a heartbeat), that the joining
    /// agents and the groups' agents were seen then. Two statements per cohort and one per
    /// group, whatever their sizes. An entry bound to another token, owned by another
    /// process than `process` (the agent's newest stream is elsewhere), or gone, is left alone.
    async fn record_progress(
        &self,
        process: &str,
        last_seen: Option<&str>,
        cohorts: &[CohortProgress],
        groups: &[AgentProgress],
    ) -> StoreResult<()>;
    /// A page of the agents last seen at or after `seen_since`, by service and id: at most
    /// `limit`, after `after`.
    async fn list_agents(
        &self,
        seen_since: &str,
        after: Option<&AgentCursor>,
        limit: i64,
    ) -> StoreResult<Vec<AgentStatus>>;
    /// How many agents follow each of `cohorts` (one scan of the agents; a cohort no agent
    /// follows is left out).
    async fn cohort_sizes(
        &self,
        cohorts: &[String],
    ) -> StoreResult<std::collections::HashMap<String, i64>>;
    /// Those of `agent_ids` whose entry does not follow `cohort` (another replica rewrote it).
    async fn not_following(&self, cohort: &str, agent_ids: &[String]) -> StoreResult<Vec<String>>;
    /// Forgets agents last seen before `cutoff`, and cohorts no agent follows that have not
    /// changed since; returns how many agents.
    async fn expire_agents(&self, cutoff: &str) -> StoreResult<u64>;
    /// Records that the replica process `process` (named `replica`) is alive at `at`, and
    /// forgets the beats of processes silent since before `forget_before`.
    async fn beat_replica(
        &self,
        process: &str,
        replica: &str,
        at: &str,
        forget_before: &str,
    ) -> StoreResult<()>;
    /// The replica processes that beat at or after `since`.
    async fn live_processes(&self, since: &str) -> StoreResult<std::collections::HashSet<String>>;
}
