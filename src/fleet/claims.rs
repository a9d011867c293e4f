//! Claims of agent ids, batched: a fleet opening its Watch streams at once (a first rollout,
//! every agent reconnecting after a restart) binds its ids in a few statements, not one
//! round trip (and, for a new agent, one durable commit) per stream.
//!
//! One task per process takes what is queued — up to [`MAX_BATCH`] claims — and runs them as
//! one [`Fleet::claim_agents`](crate::store::Fleet::claim_agents); each caller waits for its
//! own answer. A claim queued while a batch runs goes into the next one, so a single Watch
//! waits for at most one batch before its own.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::store::{AgentClaim, AgentStatus, Store, StoreError};

/// Claims run by one batch (the store chunks its statements below that).
pub const MAX_BATCH: usize = 2000;
/// Claims waiting at most; a Watch waits for room beyond that.
const QUEUE: usize = 16_384;

type Answer = oneshot::Sender<Result<AgentClaim, StoreError>>;

/// The queue of claims and the task that runs them.
#[derive(Clone)]
pub struct Claims {
    tx: mpsc::Sender<(AgentStatus, Answer)>,
}

impl Claims {
    /// Starts the task (on the current tokio runtime); it ends when every `Claims` is dropped.
    pub fn spawn(store: Arc<dyn Store>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(store, rx));
        Self { tx }
    }

    /// Binds `agent.agent_id` to `agent.token_id` (see `Fleet::claim_agents`).
    pub async fn claim(&self, agent: AgentStatus) -> Result<AgentClaim, StoreError> {
        let (answer, answered) = oneshot::channel();
        let stopped = || StoreError::Internal(anyhow::anyhow!("the agent claim task has stopped"));
        self.tx.send((agent, answer)).await.map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

async fn run(store: Arc<dyn Store>, mut rx: mpsc::Receiver<(AgentStatus, Answer)>) {
    // Claims of an id already in the batch being formed wait for the next one: the store
    // takes distinct ids, and the second claim must see what the first did.
    let mut later: VecDeque<(AgentStatus, Answer)> = VecDeque::new();
    loop {
        if later.is_empty() {
            match rx.recv().await {
                Some(first) => later.push_back(first),
                None => return,
            }
        }
        let mut ids = HashSet::new();
        let mut batch = Vec::new();
        let mut next = VecDeque::new();
        let mut take = |claim: (AgentStatus, Answer), batch: &mut Vec<_>| {
            if ids.insert(claim.0.agent_id.clone()) {
                batch.push(claim);
            } else {
                next.push_back(claim);
            }
        };
        while batch.len() < MAX_BATCH {
            let Some(claim) = later.pop_front() else {
                break;
            };
            take(claim, &mut batch);
        }
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(claim) => take(claim, &mut batch),
                Err(_) => break,
            }
        }
        next.extend(later.drain(..));
        later = next;
        let (agents, answers): (Vec<AgentStatus>, Vec<Answer>) = batch.into_iter().unzip();
        crate::observe::agent_claims(agents.len());
        match store.claim_agents(&agents).await {
            Ok(claims) if claims.len() == answers.len() => {
                for (answer, claim) in answers.into_iter().zip(claims) {
                    // A caller that went away (its Watch was cancelled) needs no answer.
                    let _ = answer.send(Ok(claim));
                }
            }
            Ok(claims) => {
                let e = format!(
                    "{} claims answered for {} agents",
                    claims.len(),
                    answers.len()
                );
                fail(answers, &e);
            }
            Err(e) => {
                tracing::warn!(error = %e, agents = agents.len(), "failed to claim agent ids");
                fail(answers, &format!("{e:#}"));
            }
        }
    }
}

fn fail(answers: Vec<Answer>, why: &str) {
    for answer in answers {
        let _ = answer.send(Err(StoreError::Internal(anyhow::anyhow!(
            "failed to claim the agent id: {why}"
        ))));
    }
}
