//! Canary rollouts (SPEC §9): approve for a few agents first, then promote to all or abort —
//! by a person, or by the evaluator any replica runs ([`spawn`]) on what the canary agents
//! did: their ACKs and NACKs (fleet status) and their reports' counts (summed per canary by
//! [`canary_sums`], stored with the rollups). The state machine is `budget_core::canary`'s; the state is the
//! store's, so it survives restarts and every replica sees the same.

use std::collections::BTreeMap;
use std::time::Duration;

use budget_api::baselines::{Canary, CanaryHealth};
use budget_core::canary::{self, Evidence, Judgement, Rollout, SegmentHealth, Spans};
use budget_core::feedback::{production_drift, Counts};
use serde_json::json;

use super::{audit, republish};
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult};
use crate::feedback::hdr;
use crate::feedback::production::Span;
use crate::feedback::rollup::{CanarySums, Window};
use crate::publish::HubState;
use crate::state::AppState;
pub use crate::store::CanaryEnd;
use crate::store::{
    AgentStatus, Audit, Published, StoreError, StoredBaseline, StoredRollout, WHOLE_BAKE,
};

/// How often the evaluator looks at baking canaries.
pub const EVALUATE_EVERY: Duration = Duration::from_secs(1);

/// The actor the evaluator's decisions are audited under.
pub const EVALUATOR: &str = "budgetd (canary evaluator)";

/// Most member ids a rollout answer lists.
pub const MAX_MEMBERS_LISTED: usize = 10_000;

/// Approves a draft for the agents `rollout` selects; the others keep the chain's approved
/// baseline until the canary is promoted.
pub async fn approve(
    state: &AppState,
    principal: &Principal,
    stored: &StoredBaseline,
    comment: Option<String>,
    rollout: &Rollout,
) -> ApiResult<(StoredBaseline, Published)> {
    rollout
        .check()
        .map_err(|e| super::violation(e.pointer(), e.to_string(), e.to_string()))?;
    let bake_ends_at = crate::clock::after(Duration::from_secs(rollout.bake_s));
    let audit = audit(
        principal,
        "baseline.approve",
        Some(&stored.doc.chain),
        json!({"comment": comment, "token": principal.name, "owner": principal.owner,
               "rollout": rollout, "bake_ends_at": bake_ends_at}),
    );
    let (approved, published) = state
        .store
        .approve_canary(&stored.doc.id, comment, rollout, &bake_ends_at, audit)
        .await?;
    republish(state).await;
    Ok((approved, published))
}

/// A person promotes (`Promote`) or aborts a baking canary.
pub async fn decide(
    state: &AppState,
    principal: &Principal,
    id: &str,
    end: CanaryEnd,
    comment: Option<String>,
) -> ApiResult<Canary> {
    let verb = match end {
        CanaryEnd::Promote => "promoted",
        CanaryEnd::Abort => "aborted",
    };
    let reason = match comment.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) => format!("{verb} by {}: {c}", principal.name),
        None => format!("{verb} by {}", principal.name),
    };
    let action = match end {
        CanaryEnd::Promote => "rollout.promote",
        CanaryEnd::Abort => "rollout.abort",
    };
    let audit = audit(
        principal,
        action,
        None,
        json!({"comment": comment, "token": principal.name, "owner": principal.owner}),
    );
    let rollout = state.store.get_rollout(id).await?.ok_or_else(|| {
        ApiError::not_found(format!(
            "baseline {id:?} was not approved with a canary rollout"
        ))
    })?;
    let (e, members) = evidence(state, &rollout).await?;
    end_it(state, id, end, &reason, &frozen(&e, members), audit).await?;
    status(state, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("baseline {id:?} has no canary rollout")))
}

async fn end_it(
    state: &AppState,
    id: &str,
    end: CanaryEnd,
    reason: &str,
    figures: &Figures,
    audit: Audit,
) -> ApiResult<()> {
    let figures = serde_json::to_value(figures).map_err(|e| ApiError::internal(e.into()))?;
    let (ended, published) = state
        .store
        .end_rollout(id, end, reason, &figures, audit)
        .await?;
    tracing::info!(baseline = %id, chain = %ended.chain, state = ended.state.as_str(), revision = published.revision, %reason, "canary ended");
    republish(state).await;
    Ok(())
}

/// The agents of the chain the rollout selects, as the fleet knows them (every replica's,
/// connected or not).
async fn members(state: &AppState, r: &StoredRollout) -> ApiResult<Vec<AgentStatus>> {
    state.fleet.flush().await;
    super::agents::agents_where(state, |a| {
        a.chains.contains(&r.chain) && r.selector.selects(&a.agent_id, &a.labels)
    })
    .await
}

/// The canary agents' figures per segment over the last complete minute, the last five and
/// the whole bake: every writer's rows added up, each span's merged histogram compared with
/// the canary's baseline.
async fn health(state: &AppState, r: &StoredRollout) -> ApiResult<BTreeMap<String, Spans>> {
    let rollup_ms = state.reports.rollups.rollup_ms();
    let (from5, to) = Span::FiveMinutes.bounds(crate::clock::now_ms(), rollup_ms);
    let from1 = to - rollup_ms;
    let rows = state.store.canary_health(&r.baseline_id, from5).await?;
    if rows.is_empty() {
        return Ok(BTreeMap::new());
    }
    type Sum = (Counts, hdrhistogram::Histogram<u64>);
    let empty = || (Counts::default(), hdr::empty());
    // Per segment: the last minute's counts, the last five minutes', the whole bake's.
    let mut sums: BTreeMap<String, (Counts, Sum, Sum)> = BTreeMap::new();
    for row in &rows {
        let (last, five, bake) = sums
            .entry(row.segment.clone())
            .or_insert_with(|| (Counts::default(), empty(), empty()));
        let into = match row.minute {
            WHOLE_BAKE => bake,
            m if m >= to => continue,
            m => {
                if m >= from1 {
                    last.add(&row.counts);
                }
                five
            }
        };
        into.0.add(&row.counts);
        match hdr::decode(&row.latency_hdr) {
            Ok(h) => hdr::add(&mut into.1, &h),
            Err(e) => {
                tracing::warn!(baseline = %r.baseline_id, segment = %row.segment, error = %e, "skipping a canary histogram that does not decode")
            }
        }
    }
    let doc = state.store.get_baseline(&r.baseline_id).await?.doc;
    let judged = |segment: &str, (counts, h): Sum| {
        let latency = hdr::latency(&h);
        let drift = doc
            .segments
            .iter()
            .find(|s| s.id == segment)
            .and_then(|b| production_drift(b, &latency));
        SegmentHealth {
            counts,
            latency,
            drift,
        }
    };
    Ok(sums
        .into_iter()
        .map(|(segment, (last_minute, five, bake))| {
            let spans = Spans {
                last_minute,
                last_5m: judged(&segment, five),
                bake: judged(&segment, bake),
            };
            (segment, spans)
        })
        .collect())
}

/// What the canary's agents reported and refused, without walking the fleet: all the state
/// machine needs before the bake is over (members and their ACKs count at its end only).
async fn reports(state: &AppState, r: &StoredRollout) -> ApiResult<Evidence> {
    Ok(Evidence {
        nacks: state.store.canary_nacks(&r.baseline_id).await?,
        health: health(state, r).await?,
        ..Evidence::default()
    })
}

/// What the fleet says of the rollout now.
async fn evidence(state: &AppState, r: &StoredRollout) -> ApiResult<(Evidence, Vec<String>)> {
    let members = members(state, r).await?;
    let acked = members.iter().filter(|a| a.acked >= r.revision).count() as u64;
    let nacks = state.store.canary_nacks(&r.baseline_id).await?;
    let health = health(state, r).await?;
    let evidence = Evidence {
        members: members.len() as u64,
        acked,
        nacks,
        health,
        bake_over: crate::clock::now() >= r.bake_ends_at,
    };
    Ok((evidence, members.into_iter().map(|a| a.agent_id).collect()))
}

/// The canary of baseline `id` as `GET /baselines/{id}/rollout` shows it; `None` when it
/// was published to every agent at once.
pub async fn status(state: &AppState, id: &str) -> ApiResult<Option<Canary>> {
    let Some(r) = state.store.get_rollout(id).await? else {
        return Ok(None);
    };
    // An ended canary shows what decided it; a baking one (or one a rollback ended) the fleet
    // as it is now.
    let ended: Option<Figures> = r
        .figures
        .clone()
        .and_then(|f| serde_json::from_value(f).ok());
    let Figures {
        mut members,
        acked,
        nacked,
        health,
    } = match ended {
        Some(f) => f,
        None => {
            let (e, members) = evidence(state, &r).await?;
            frozen(&e, members)
        }
    };
    members.truncate(MAX_MEMBERS_LISTED);
    Ok(Some(Canary {
        state: r.state,
        selector: r.selector,
        bake_s: r.bake_s,
        auto: r.auto,
        revision: r.revision,
        previous_baseline_id: r.previous_baseline_id,
        started_at: r.started_at,
        started_by: r.started_by,
        bake_ends_at: r.bake_ends_at,
        members,
        acked,
        nacked,
        health,
        reason: r.reason,
        ended_at: r.ended_at,
        ended_by: r.ended_by,
        end_revision: r.end_revision,
    }))
}

/// What a canary's status shows of the fleet, and what is kept when it ends.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Figures {
    members: Vec<String>,
    acked: u64,
    nacked: u64,
    health: Vec<CanaryHealth>,
}

fn frozen(e: &Evidence, members: Vec<String>) -> Figures {
    let health = e
        .health
        .iter()
        .map(|(segment, spans)| {
            let h = &spans.bake;
            let ms = |us: u64| (h.latency.samples > 0).then(|| us as f64 / 1000.0);
            CanaryHealth {
                segment: segment.clone(),
                calls: h.counts.calls,
                attempts: h.counts.attempts,
                amplification: h.counts.amplification(),
                kill_rate: h.counts.kill_rate(),
                samples: h.latency.samples,
                p99_ms: ms(h.latency.p99_us),
                p999_ms: ms(h.latency.p999_us),
                drift_pct: h.drift.as_ref().and_then(|d| d.drift_pct),
            }
        })
        .collect();
    Figures {
        members,
        acked: e.acked,
        nacked: e.nacks.len() as u64,
        health,
    }
}

/// One pass of the evaluator: every baking canary with `auto` promoted or aborted when its
/// evidence says so (`budget_core::canary::judge`). Another replica ending the same canary
/// first is not an error.
pub async fn evaluate(state: &AppState) -> ApiResult<()> {
    for r in state.store.baking_rollouts().await? {
        if !r.auto {
            continue;
        }
        // The fleet is walked only when the members count: at the bake's end, or to keep the
        // figures of a canary that ends now.
        let bake_over = crate::clock::now() >= r.bake_ends_at;
        let (seen, members) = if bake_over {
            let (e, members) = evidence(state, &r).await?;
            (e, Some(members))
        } else {
            (reports(state, &r).await?, None)
        };
        let (end, reason) = match canary::judge(&state.settings.feedback.alerts, &seen) {
            Judgement::Wait => continue,
            Judgement::Promote(reason) => (CanaryEnd::Promote, reason),
            Judgement::Abort(reason) => (CanaryEnd::Abort, reason),
        };
        let (e, members) = match members {
            Some(members) => (seen, members),
            None => evidence(state, &r).await?,
        };
        let action = match end {
            CanaryEnd::Promote => "rollout.promote",
            CanaryEnd::Abort => "rollout.abort",
        };
        let audit = Audit {
            actor: EVALUATOR.to_owned(),
            action,
            chain: Some(r.chain.clone()),
            subject: Some(r.baseline_id.clone()),
            detail: json!({"members": e.members, "acked": e.acked, "nacked": e.nacks.len(),
                           "counts": e.health.iter().map(|(s, h)| (s.clone(), h.bake.counts)).collect::<BTreeMap<_, _>>()}),
            at: crate::clock::now(),
        };
        let figures = frozen(&e, members);
        match end_it(state, &r.baseline_id, end, &reason, &figures, audit).await {
            Ok(()) => {}
            Err(e) if e.code == crate::error::Code::Conflict => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An agent refused `revision`: if it is a canary's revision here, the refusal is kept for
/// that canary (the fleet's status keeps only an agent's latest ACK and NACK, of any chain).
pub async fn record_nack(
    state: &AppState,
    agent_id: &str,
    revision: i64,
    error: &str,
) -> Result<(), StoreError> {
    let hub = state.hub.current();
    let canaries = hub
        .values()
        .filter_map(|e| e.canary())
        .filter(|(_, c)| c.revision() == revision);
    for (_, canary) in canaries {
        let at = crate::clock::now();
        state
            .store
            .record_canary_nack(&canary.live.baseline_id, agent_id, error, &at)
            .await?;
        tracing::warn!(agent = %agent_id, baseline = %canary.live.baseline_id, revision, "a canary agent refused the canary");
    }
    Ok(())
}

/// Runs [`evaluate`] every [`EVALUATE_EVERY`].
pub fn spawn(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(EVALUATE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = evaluate(&state).await {
                tracing::warn!(error = %e, "canary evaluation failed; will retry");
            }
        }
    })
}

/// The windows of a canary agent's report summed for its canaries' totals: windows of a chain
/// whose canary selects `agent_id`, begun after the canary was published, per rollup and for
/// the whole bake. They are stored with the report's rollups, in the same transaction
/// ([`crate::feedback::rollup`]); this process keeps rows of its own (its running totals), so
/// replicas never contend. Labels are those the agent declared on its Watch stream to this
/// replica or, when it watches another, as the fleet last stored them; percent selection needs
/// none.
pub async fn canary_sums(
    state: &AppState,
    hub: &HubState,
    agent_id: &str,
    windows: &[Window],
) -> Result<CanarySums, StoreError> {
    let mut sums = CanarySums::new();
    let mut labels = None;
    let empty = BTreeMap::new();
    for w in windows {
        let Some((selector, entry)) = hub.get(&w.chain).and_then(|e| e.canary()) else {
            continue;
        };
        if labels.is_none() {
            // Declared on a Watch stream here, or, for an agent that watches elsewhere, as
            // the fleet last stored them.
            labels = Some(match state.fleet.labels_of(agent_id) {
                Some(l) => l,
                None => state
                    .store
                    .agent_labels(agent_id)
                    .await?
                    .unwrap_or_default(),
            });
        }
        if !selector.selects(agent_id, labels.as_ref().unwrap_or(&empty)) {
            continue;
        }
        let published_ms = entry
            .published
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        if w.start_ms < published_ms.saturating_sub(published_ms % 1000) {
            continue;
        }
        // The window's rollup, and the whole bake.
        for minute in [state.reports.rollups.rollup_of(w.start_ms), WHOLE_BAKE] {
            let (counts, latency) = sums
                .entry((entry.live.baseline_id.clone(), w.segment.clone(), minute))
                .or_insert_with(|| (Counts::default(), hdr::empty()));
            counts.add(&w.counts);
            hdr::add(latency, &w.latency);
        }
    }
    Ok(sums)
}
