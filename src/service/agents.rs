//! Agents: the fleet as seen (`GET /agents`, rollout of a baseline) and the use cases of the
//! gRPC `Watch` and `Ack` calls — every field an agent sends validated and bounded before it is
//! kept or logged, an agent id bound to the token that first watched it, a limited number of
//! streams per token.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::check_chain_name;
use crate::auth::{Principal, Role};
use crate::error::{ApiError, ApiResult, Code};
use crate::fleet::{AckOutcome, Attached, ConnectError, Fleet, TokenPermit};
use crate::publish::Member;
use crate::state::AppState;
use crate::store::{AgentCursor, AgentStatus};

/// Longest agent id or service name.
pub const MAX_ID_LEN: usize = 128;
/// Most chains one Watch may name.
pub const MAX_CHAINS: usize = 256;
/// Longest NACK error kept (bytes); longer ones are cut at a character boundary.
pub const MAX_NACK_ERROR_BYTES: usize = 4096;
/// Most agents read per page when the service walks the fleet.
const WALK_PAGE: i64 = 1000;

/// Up to `limit` agents seen within the retention period, by service and id, after `after`.
/// This replica's news are stored first, so what it just saw is in the answer.
pub async fn list(
    state: &AppState,
    after: Option<&AgentCursor>,
    limit: i64,
) -> ApiResult<Vec<AgentStatus>> {
    state.fleet.flush().await;
    let mut page = state
        .store
        .list_agents(&state.fleet.seen_since(), after, limit)
        .await?;
    Fleet::mark_gone(&mut page, &state.fleet.live_processes().await?);
    Ok(page)
}

/// The agents seen within the retention period that `keep` selects, read page by page.
pub(super) async fn agents_where(
    state: &AppState,
    keep: impl Fn(&AgentStatus) -> bool,
) -> ApiResult<Vec<AgentStatus>> {
    let since = state.fleet.seen_since();
    // Whose replica is alive: read once for the whole walk.
    let live = state.fleet.live_processes().await?;
    let mut kept = Vec::new();
    let mut after = None;
    loop {
        let mut page = state
            .store
            .list_agents(&since, after.as_ref(), WALK_PAGE)
            .await?;
        let done = page.len() < usize::try_from(WALK_PAGE).unwrap_or(usize::MAX);
        after = page.last().map(|a| (a.service.clone(), a.agent_id.clone()));
        Fleet::mark_gone(&mut page, &live);
        kept.extend(page.into_iter().filter(|a| keep(a)));
        if done {
            return Ok(kept);
        }
    }
}

/// How far a baseline has rolled out.
pub use budget_api::baselines::Rollout;

/// How many agents receiving the baseline's chain have ACKed (or NACKed) its publication.
pub async fn rollout(state: &AppState, id: &str) -> ApiResult<Rollout> {
    let baseline = state.store.get_baseline(id).await?;
    let chain = baseline.doc.chain;
    let publication = state.store.baseline_publication(id).await?;
    state.fleet.flush().await;
    let of_chain = agents_where(state, |a| a.chains.contains(&chain)).await?;
    let revision = publication.as_ref().map(|p| p.revision);
    let count = |f: &dyn Fn(&AgentStatus) -> bool| of_chain.iter().filter(|a| f(a)).count() as u64;
    let (acked, nacked, connected) = match revision {
        Some(rev) => (
            count(&|a| a.acked >= rev),
            count(&|a| a.nack_revision.is_some_and(|n| n >= rev)),
            count(&|a| a.connected),
        ),
        None => (0, 0, count(&|a| a.connected)),
    };
    Ok(Rollout {
        baseline_id: id.to_owned(),
        chain,
        state: baseline.doc.state,
        revision,
        kind: publication.as_ref().map(|p| p.kind.clone()),
        published_at: publication.as_ref().map(|p| p.created_at.clone()),
        published_by: publication.map(|p| p.created_by),
        agents: of_chain.len() as u64,
        connected,
        acked,
        nacked,
        canary: super::rollouts::status(state, id).await?,
    })
}

/// The caller of Watch, Ack (and Report) must hold an agent token.
pub fn require_agent(principal: &Principal) -> ApiResult<()> {
    if principal.has_any(&[Role::Agent]) {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "token {:?} has role {}; Watch, Ack and Report need agent",
            principal.name, principal.role
        )))
    }
}

/// Agent ids and service names: 1-128 printable ASCII characters (no spaces, no control
/// characters). The value is not echoed: it may be huge or hostile.
pub(crate) fn check_id(field: &str, v: &str) -> ApiResult<()> {
    if v.is_empty() || v.len() > MAX_ID_LEN || !v.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::bad_request(format!(
            "{field} must be 1-{MAX_ID_LEN} printable ASCII characters (no spaces or control characters)"
        )));
    }
    Ok(())
}

/// The client library: empty (an agent that does not say) or at most 64 printable ASCII
/// characters, e.g. `go/0.1.0`.
fn check_client(client: &str) -> ApiResult<()> {
    if client.len() > MAX_CLIENT_LEN || !client.chars().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::bad_request(format!(
            "client must be at most {MAX_CLIENT_LEN} printable ASCII characters, e.g. \"go/0.1.0\""
        )));
    }
    Ok(())
}

const MAX_CLIENT_LEN: usize = 64;

/// Labels: at most 32, keys ≤ 64 and values ≤ 256 bytes, no control characters.
fn check_labels(labels: &HashMap<String, String>) -> ApiResult<()> {
    let bad = |t: &str, max: usize| t.len() > max || t.chars().any(char::is_control);
    if labels.len() > 32
        || labels
            .iter()
            .any(|(k, v)| k.is_empty() || bad(k, 64) || bad(v, 256))
    {
        return Err(ApiError::bad_request(
            "labels: at most 32, keys 1-64 and values at most 256 bytes, no control characters",
        ));
    }
    Ok(())
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub(super) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn agent_taken(agent_id: &str) -> ApiError {
    ApiError::forbidden(format!(
        "agent_id {agent_id:?} belongs to another token: each agent id is bound to the token that first watched it"
    ))
}

/// Which chains a stream receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Sorted, each once: held by every open stream, so a slice (a `BTreeSet` of one chain
    /// took a 280-byte node per stream).
    Chains(Box<[String]>),
    /// Every chain whose topology involves the service.
    Service(String),
}

/// What a Watch asks for, as received.
#[derive(Debug, Clone, Default)]
pub struct WatchRequest {
    pub agent_id: String,
    pub service: String,
    pub chains: Vec<String>,
    pub known_revision: i64,
    pub labels: HashMap<String, String>,
    /// The client library, "language/version" (may be empty).
    pub client: String,
    /// The chains the agent's config at `known_revision` holds; empty: all of them.
    pub known_chains: Vec<String>,
}

/// An open Watch: the agent's slot in the fleet and its token's stream permit, both held
/// while the stream lives.
pub struct Watch {
    pub selection: Selection,
    pub known_revision: i64,
    /// The chains the agent holds, when it said: any other chain selected is sent at once.
    pub held: Option<BTreeSet<String>>,
    pub slot: Attached,
    pub permit: TokenPermit,
    /// What canary selection looks at (SPEC §9).
    pub member: Member,
}

/// Takes one of `principal`'s Watch streams (an agent token's, at most
/// `agents.max_streams_per_token` on this replica), before its request is read: a token can
/// have no more requests being read than it may hold streams.
pub fn take_stream(state: &AppState, principal: &Principal) -> ApiResult<TokenPermit> {
    require_agent(principal)?;
    state.fleet.open_stream(&principal.token_id).ok_or_else(|| {
        tracing::warn!(token = ?principal.name, "watch refused: the token holds its stream limit");
        ApiError::new(
            Code::TooManyRequests,
            format!(
                "token {:?} already holds {} Watch streams on this replica (agents.max_streams_per_token); close one, or give these agents a token of their own",
                principal.name,
                state.fleet.max_streams_per_token()
            ),
        )
    })
}

/// Takes one of `principal`'s places for an Ack or Report call in flight (an agent token's, at
/// most `2 × agents.max_streams_per_token` on this replica), before its request is read, held
/// until the call ends.
pub fn take_call(state: &AppState, principal: &Principal) -> ApiResult<TokenPermit> {
    require_agent(principal)?;
    state.fleet.open_call(&principal.token_id).ok_or_else(|| {
        tracing::warn!(token = ?principal.name, "call refused: the token holds its call limit");
        ApiError::new(
            Code::TooManyRequests,
            format!(
                "token {:?} already has {} Ack and Report calls in flight on this replica (2 × agents.max_streams_per_token); wait for their answers, or give these agents a token of their own",
                principal.name,
                state.fleet.max_calls_per_token()
            ),
        )
    })
}

/// Opens a Watch stream for `principal` (an agent token) on the stream `permit` it took
/// ([`take_stream`]): validates the request and binds the agent id to the token (or finds it
/// bound to another).
pub async fn watch(
    state: &AppState,
    principal: &Principal,
    req: WatchRequest,
    permit: TokenPermit,
) -> ApiResult<Watch> {
    check_id("agent_id", &req.agent_id)?;
    if req.known_revision < 0 {
        return Err(ApiError::bad_request("known_revision must not be negative"));
    }
    if !req.service.is_empty() || req.chains.is_empty() {
        check_id("service (or chains)", &req.service)?;
    }
    let selection = if req.chains.is_empty() {
        Selection::Service(req.service.clone())
    } else {
        if req.chains.len() > MAX_CHAINS {
            return Err(ApiError::bad_request(format!(
                "chains: at most {MAX_CHAINS}"
            )));
        }
        for c in &req.chains {
            check_watched_chain("chains", c)?;
        }
        let mut chains = req.chains.clone();
        chains.sort_unstable();
        chains.dedup();
        Selection::Chains(chains.into_boxed_slice())
    };
    let held = held_chains(&req.known_chains)?;
    check_labels(&req.labels)?;
    check_client(&req.client)?;
    let known_revision = resume_from(state, &req.agent_id, req.known_revision).await?;
    let labels: BTreeMap<String, String> = req.labels.into_iter().collect();
    let member = Member::new(&req.agent_id, labels.clone());
    let slot = match state
        .fleet
        .connected(
            &req.agent_id,
            &principal.token_id,
            &principal.name,
            &req.service,
            &req.client,
            labels,
            known_revision,
        )
        .await
    {
        Ok(slot) => slot,
        Err(ConnectError::Taken) => {
            tracing::warn!(agent = ?req.agent_id, token = ?principal.name, "watch refused: the agent id belongs to another token");
            return Err(agent_taken(&req.agent_id));
        }
        Err(ConnectError::Store(e)) => return Err(e.into()),
    };
    tracing::info!(agent = ?req.agent_id, service = ?req.service, token = ?principal.name, known = known_revision, "watch opened");
    Ok(Watch {
        selection,
        known_revision,
        held,
        slot,
        permit,
        member,
    })
}

/// The chains an agent says its config holds (`known_chains`), checked like `chains`; `None`
/// when it did not say (every chain counts as held).
fn held_chains(known_chains: &[String]) -> ApiResult<Option<BTreeSet<String>>> {
    if known_chains.is_empty() {
        return Ok(None);
    }
    // Repeats count once (the request's size bounds the list).
    let held: BTreeSet<String> = known_chains.iter().cloned().collect();
    if held.len() > MAX_CHAINS {
        return Err(ApiError::bad_request(format!(
            "known_chains: at most {MAX_CHAINS} (an agent holding more sends none)"
        )));
    }
    for c in &held {
        check_watched_chain("known_chains", c)?;
    }
    Ok(Some(held))
}

/// A chain name an agent sent in `field`, checked like any chain name; refused without echoing
/// it (what agents send is not repeated back, docs/limits.md).
fn check_watched_chain(field: &str, chain: &str) -> ApiResult<()> {
    check_chain_name(chain).map_err(|_| {
        ApiError::bad_request(format!(
            "{field}: invalid chain name: use 1-64 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit"
        ))
    })
}

/// The revision a Watch resumes from: the one the agent says it has, unless no publication
/// here is that new (its config came from another control plane, or this one's store was
/// restored from an older backup). Such an agent is sent the current config, as a new one is:
/// the agents apply it (they log that the revision went back), and its status never
/// shows a revision that does not exist here.
async fn resume_from(state: &AppState, agent_id: &str, known: i64) -> ApiResult<i64> {
    if known <= state.hub.newest_revision() {
        return Ok(known);
    }
    // Another replica may have published it a moment ago: load what the store has first.
    state.hub.refresh().await?;
    let newest = state.hub.newest_revision();
    if known <= newest {
        return Ok(known);
    }
    tracing::warn!(agent = ?agent_id, known, newest, "watch: the agent's known_revision is newer than any publication here (another control plane's config, or a store restored from an older backup); it is sent the current config");
    Ok(0)
}

/// What an Ack (or NACK) says, as received.
#[derive(Debug, Clone, Default)]
pub struct AckRequest {
    pub agent_id: String,
    pub revision: i64,
    pub accepted: bool,
    pub error: String,
}

/// Records an agent's ACK or NACK of a revision it was sent on this replica.
pub async fn ack(state: &AppState, principal: &Principal, req: AckRequest) -> ApiResult<()> {
    require_agent(principal)?;
    check_id("agent_id", &req.agent_id)?;
    if req.revision <= 0 {
        return Err(ApiError::bad_request("revision must be positive"));
    }
    if !req.accepted && req.error.trim().is_empty() {
        return Err(ApiError::bad_request(
            "a NACK (accepted=false) needs the error that made the agent refuse",
        ));
    }
    let error = truncate(&req.error, MAX_NACK_ERROR_BYTES);
    let outcome = state.fleet.acked(
        &req.agent_id,
        &principal.token_id,
        req.revision,
        req.accepted,
        error,
    );
    match outcome {
        AckOutcome::Recorded => {}
        AckOutcome::OtherToken => return Err(agent_taken(&req.agent_id)),
        AckOutcome::NotSent(sent) => {
            return Err(ApiError::new(
                Code::FailedPrecondition,
                format!(
                    "agent {:?} was not sent revision {} on this replica (the newest it was sent is {sent}); ACK or NACK only a revision received on the Watch stream",
                    req.agent_id, req.revision
                ),
            ));
        }
        AckOutcome::Unknown => {
            let bound = state.store.agent_token(&req.agent_id).await?;
            if bound.is_some_and(|t| t != principal.token_id) {
                return Err(agent_taken(&req.agent_id));
            }
            return Err(ApiError::new(
                Code::FailedPrecondition,
                format!(
                    "agent {:?} has no Watch stream on this replica; open one first",
                    req.agent_id
                ),
            ));
        }
    }
    if !req.accepted {
        tracing::warn!(agent = ?req.agent_id, revision = req.revision, error = ?error, "agent refused a config (NACK)");
        super::rollouts::record_nack(state, &req.agent_id, req.revision, error).await?;
    }
    crate::observe::acked(req.accepted);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nack_errors_are_cut_at_a_character_boundary() {
        let check =
            |input: (&str, usize), expect: &str| assert_eq!(truncate(input.0, input.1), expect);
        check(("short", 10), "short");
        check(("abcdef", 3), "abc");
        check(("aé", 2), "a");
        check(("", 0), "");
    }
}
