//! Runtime feedback (SPEC §8): the gRPC `Report` call, the production view of a chain,
//! alerts and webhooks.

use base64::Engine as _;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use budget_api::feedback::{
    AlertList, DeliveryList, Production, WebhookList, WebhookRequest, WEBHOOK_EVENTS,
};
use budget_core::feedback::{Counts, MAX_REPORT_WINDOWS, OUTCOMES, RETRY_CAUSES};
use budget_core::run::{RunUpload, SegmentUpload};
use budget_core::{us_to_ms, SegmentClass};
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;

use super::agents::{check_id, require_agent};
use super::check_chain_name;
use crate::auth::Principal;
use crate::error::{ApiError, ApiResult, Code};
use crate::feedback::hdr;
use crate::feedback::production::{self, Span};
use crate::feedback::rollup::{Sent, Window};
use crate::state::AppState;
use crate::store::feedback::Webhook;
use crate::store::StoredBaseline;

/// Most decoded histogram buckets one report may hold (16 bytes each: 16 MiB); windows past it
/// are skipped, as refused windows are (counted out of the answer, not sent again).
pub const MAX_REPORT_BUCKETS: usize = 1 << 20;
/// Most bytes one report's histograms may inflate to (each at most 1 MiB): windows past it
/// are skipped like those past [`MAX_REPORT_BUCKETS`], so a report's decoding work is bounded.
pub const MAX_REPORT_INFLATED: usize = 64 << 20;
/// A window may end this long before it reaches the server (SPEC §8: 10 minutes late).
pub const MAX_LATENESS_MS: i64 = 10 * 60_000;
/// Clocks differ: a window may start this far in the server's future.
const MAX_SKEW_MS: i64 = 60_000;
/// A window (merged windows included) spans at most this long.
const MAX_SPAN_MS: i64 = 11 * 60_000;
/// Webhook fields.
const MAX_URL_LEN: usize = 2048;
const MAX_SECRET_LEN: usize = 512;
/// How long an agent id's token binding, read from the store, is trusted.
const BINDING_TTL: Duration = Duration::from_secs(60);
const MAX_BINDINGS: usize = 100_000;

/// One window of a Report, as received.
#[derive(Debug, Clone, Default)]
pub struct ReportWindow {
    pub chain: String,
    pub segment: String,
    pub start_unix_ms: i64,
    pub end_unix_ms: i64,
    pub calls: u64,
    pub attempts: u64,
    pub retries: HashMap<String, u64>,
    pub outcomes: HashMap<String, u64>,
    pub latency_hdr: Vec<u8>,
}

/// Bytes `windows` hold, as decoded (their structs, strings, maps and histogram bytes).
pub fn held_bytes(windows: &[ReportWindow]) -> usize {
    let map = |m: &HashMap<String, u64>| {
        m.capacity() * (std::mem::size_of::<(String, u64)>() + 1)
            + m.keys().map(String::capacity).sum::<usize>()
    };
    std::mem::size_of_val(windows)
        + windows
            .iter()
            .map(|w| {
                w.chain.capacity()
                    + w.segment.capacity()
                    + w.latency_hdr.capacity()
                    + map(&w.retries)
                    + map(&w.outcomes)
            })
            .sum::<usize>()
}

/// Whether every window names a published chain and one of its live segments.
fn all_known(hub: &crate::publish::HubState, windows: &[ReportWindow]) -> bool {
    windows.iter().all(|w| {
        hub.get(&w.chain)
            .is_some_and(|e| e.live.segments.iter().any(|s| s.id == w.segment))
    })
}

/// Agent ids whose binding was read from the store (agents without a Watch stream here),
/// kept a minute so a Report costs no SQL statement.
#[derive(Debug, Default)]
pub struct Bindings {
    known: std::sync::Mutex<HashMap<String, (Option<String>, Instant)>>,
    /// When a Report last made the hub catch up (at most once a second).
    caught_up: std::sync::Mutex<Option<Instant>>,
}

impl Bindings {
    fn may_catch_up(&self) -> bool {
        let Ok(mut last) = self.caught_up.lock() else {
            return false;
        };
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    async fn token_of(&self, state: &AppState, agent_id: &str) -> ApiResult<Option<String>> {
        if let Some(token) = state.fleet.token_of(agent_id) {
            return Ok(Some(token));
        }
        if let Ok(known) = self.known.lock() {
            if let Some((token, at)) = known.get(agent_id) {
                if at.elapsed() < BINDING_TTL {
                    return Ok(token.clone());
                }
            }
        }
        let token = state.store.agent_token(agent_id).await?;
        if let Ok(mut known) = self.known.lock() {
            if known.len() >= MAX_BINDINGS {
                known.clear();
            }
            known.insert(agent_id.to_owned(), (token.clone(), Instant::now()));
        }
        Ok(token)
    }
}

/// An agent's string in a reason that is logged: quoted, cut to 64 bytes (with its length
/// when cut), so a window's reason is never longer than a few hundred bytes.
fn echo(text: &str) -> String {
    let cut = super::agents::truncate(text, 64);
    if cut.len() == text.len() {
        format!("{text:?}")
    } else {
        format!("{cut:?}… ({} bytes)", text.len())
    }
}

/// Why a window is skipped, or the window checked and converted.
fn check_window(
    hub: &crate::publish::HubState,
    w: ReportWindow,
    now_ms: i64,
    inflated: &mut usize,
) -> Result<Window, String> {
    let entry = hub
        .get(&w.chain)
        .ok_or_else(|| format!("chain {} has no published budgets", echo(&w.chain)))?;
    let known = |e: &crate::publish::ChainEntry| e.live.segments.iter().any(|s| s.id == w.segment);
    // A canary's baseline may hold segments the stable one does not (yet).
    if !known(entry) && !entry.canary().is_some_and(|(_, c)| known(c)) {
        return Err(format!(
            "segment {} is not in {}'s live budgets",
            echo(&w.segment),
            echo(&w.chain)
        ));
    }
    // Checked: a start near i64::MIN must not wrap around into a short span.
    let span = w.end_unix_ms.checked_sub(w.start_unix_ms);
    if !span.is_some_and(|span| (0..=MAX_SPAN_MS).contains(&span)) {
        return Err("a window ends after it starts and spans at most 11 minutes".into());
    }
    if w.end_unix_ms < now_ms - MAX_LATENESS_MS {
        return Err("the window ended more than 10 minutes ago".into());
    }
    if w.start_unix_ms > now_ms + MAX_SKEW_MS {
        return Err("the window starts in the future".into());
    }
    let mut counts = Counts {
        calls: w.calls,
        attempts: w.attempts,
        ..Counts::default()
    };
    for (cause, n) in &w.retries {
        *counts.retry_mut(cause).ok_or_else(|| {
            format!(
                "retry cause {}: one of {}",
                echo(cause),
                RETRY_CAUSES.join(", ")
            )
        })? += n;
    }
    for (outcome, n) in &w.outcomes {
        *counts.outcome_mut(outcome).ok_or_else(|| {
            format!("outcome {}: one of {}", echo(outcome), OUTCOMES.join(", "))
        })? += n;
    }
    let latency = hdr::decode_metered(&w.latency_hdr, "latency_hdr", inflated)?;
    Ok(Window {
        chain: w.chain,
        segment: w.segment,
        start_ms: w.start_unix_ms,
        counts,
        latency,
    })
}

/// `ReportRequest.report_id` and `resend`: 16 bytes or none, and a resend only with an id.
fn sent_of(report_id: &[u8], resend: bool) -> ApiResult<Option<Sent>> {
    match (<[u8; 16]>::try_from(report_id), resend) {
        (Ok(id), _) => Ok(Some(Sent { id, resend })),
        (Err(_), false) if report_id.is_empty() => Ok(None),
        (Err(_), true) if report_id.is_empty() => Err(ApiError::bad_request(
            "resend is set without a report_id: a resend names the report it repeats",
        )),
        (Err(_), _) => Err(ApiError::bad_request(format!(
            "report_id holds {} bytes; it is 16 random bytes, or empty",
            report_id.len()
        ))),
    }
}

/// What a report holds of its call's budgets (the listener's, and its token's share): one
/// permit per budget, given back when dropped.
pub struct Held(Vec<OwnedSemaphorePermit>);

impl Held {
    pub fn new(permits: Vec<OwnedSemaphorePermit>) -> Self {
        Self(permits)
    }

    /// Adds `more`, held of the same budgets in the same order.
    pub fn merge(&mut self, more: Held) {
        for (held, more) in self.0.iter_mut().zip(more.0) {
            held.merge(more);
        }
    }
}

/// `BudgetControl.Report`: merges an agent's windows into the rollups and answers once they
/// are stored. Windows of unknown chains or segments, too late, or malformed are skipped
/// (not counted in the answer) so an agent never resends them; a failure to store answers
/// UNAVAILABLE and the agent keeps its windows.
///
/// `hold` charges memory to the caller's budget until the permit it gives is dropped: the
/// decoded windows (charged before anything waits) until they are checked, then each
/// checked window with its decoded histogram until the windows are merged. A charge the
/// budget cannot take refuses the report, and the agent keeps its windows.
pub async fn report(
    state: &AppState,
    principal: &Principal,
    agent_id: &str,
    (report_id, resend): (&[u8], bool),
    windows: Vec<ReportWindow>,
    hold: &(dyn Fn(usize) -> ApiResult<Held> + Sync),
) -> ApiResult<u64> {
    let decoded = hold(held_bytes(&windows))?;
    require_agent(principal)?;
    check_id("agent_id", agent_id)?;
    let sent = sent_of(report_id, resend)?;
    if windows.len() > MAX_REPORT_WINDOWS {
        return Err(ApiError::bad_request(format!(
            "a report holds at most {MAX_REPORT_WINDOWS} windows; send the rest in another"
        )));
    }
    let bound = state.reports.bindings.token_of(state, agent_id).await?;
    if let Some(token) = &bound {
        if *token != principal.token_id {
            return Err(ApiError::forbidden(format!(
                "agent_id {agent_id:?} belongs to another token: each agent id is bound to the token that first watched it"
            )));
        }
    }
    let mut hub = state.hub.current();
    if !all_known(&hub, &windows) && state.reports.bindings.may_catch_up() {
        // A publication made on another replica may not have reached this one yet.
        state.hub.refresh().await?;
        hub = state.hub.current();
    }
    // Decoded histograms are the bulk of what a report holds: decode a few reports at once,
    // each to the end, rather than all of a burst's together (each holding its decoded part);
    // turns are shared among the waiting tokens by the time they take, so one token's queue
    // delays no other's.
    let decoding = state.reports.turns.take(&principal.token_id).await;
    let now_ms = crate::clock::now_ms();
    let total = windows.len() as u64;
    let mut accepted = Vec::with_capacity(windows.len());
    let mut first_refusal = None;
    // Decoded histograms are held until the merge: their buckets are bounded per report.
    let mut buckets = 0usize;
    let mut checked = hold(0)?;
    let full = || {
        format!(
            "the report's histograms hold more than {MAX_REPORT_BUCKETS} buckets or inflate to \
             more than {} MiB; send the rest in another report",
            MAX_REPORT_INFLATED >> 20
        )
    };
    let mut inflated = 0usize;
    for w in windows {
        // Once full, the rest are not even decoded (decoding is the cost).
        if buckets >= MAX_REPORT_BUCKETS || inflated >= MAX_REPORT_INFLATED {
            first_refusal.get_or_insert_with(full);
            continue;
        }
        // A histogram inflates up to 1 MiB: let the connection's other calls run between two.
        tokio::task::yield_now().await;
        match check_window(&hub, w, now_ms, &mut inflated) {
            Ok(w) if buckets + w.latency.buckets.len() > MAX_REPORT_BUCKETS => {
                // Nothing later fits either: stop decoding.
                buckets = MAX_REPORT_BUCKETS;
                first_refusal.get_or_insert_with(full);
            }
            Ok(w) => {
                buckets += w.latency.buckets.len();
                let bytes = std::mem::size_of::<Window>()
                    + w.latency.buckets.capacity() * std::mem::size_of::<(u64, u64)>();
                checked.merge(hold(bytes)?);
                accepted.push(w);
            }
            Err(reason) => {
                first_refusal.get_or_insert(reason);
            }
        }
    }
    drop(decoded);
    let n = accepted.len() as u64;
    if let Some(reason) = first_refusal {
        tracing::info!(agent = %agent_id, refused = total - n, %reason, "report windows skipped");
    }
    // The windows and their canary sums join the batch at once (no await between): a call
    // reset before then stores nothing, one reset after is stored and sent again.
    let canary = super::rollouts::canary_sums(state, &hub, agent_id, &accepted)
        .await
        .map_err(|e| ApiError::new(Code::Unavailable, format!("report not stored: {e}")))?;
    // Only a bound agent's report id is kept (one row per agent): made-up agent ids cannot
    // add rows. A resend's windows and canary sums stay apart until the commit, charged to
    // the caller until then.
    let sent = sent.filter(|_| bound.is_some());
    let kept = match sent {
        Some(s) if s.resend => {
            let sums: usize = canary
                .values()
                .map(|(_, h)| h.distinct_values() * std::mem::size_of::<u64>())
                .sum();
            checked.merge(hold(sums)?);
            Some(checked)
        }
        _ => {
            drop(checked);
            None
        }
    };
    let commit = state
        .reports
        .rollups
        .merge(agent_id, sent, accepted, canary);
    drop(decoding);
    commit
        .wait()
        .await
        .map_err(|e| ApiError::new(Code::Unavailable, format!("report not stored: {e}")))?;
    drop(kept);
    // The accepted windows are counted by the batch that stored them: a resend found stored
    // before is not counted again.
    crate::observe::report_windows(0, total - n);
    Ok(n)
}

/// `GET /chains/{chain}/production?window=…`.
pub async fn production(state: &AppState, chain: &str, window: &str) -> ApiResult<Production> {
    check_chain_name(chain)?;
    let span = Span::parse(window)
        .ok_or_else(|| ApiError::bad_request(format!("window={window:?}: one of 1m, 5m, 1h")))?;
    super::chains::known(state, chain).await?;
    let rollup_ms = state.reports.rollups.rollup_ms();
    let bounds = span.bounds(crate::clock::now_ms(), rollup_ms);
    let rows = state.store.read_rollups(chain, bounds.0, bounds.1).await?;
    let baseline = state.store.current_baseline(chain).await?;
    let live = baseline
        .as_ref()
        .map(|b| (b.doc.id.as_str(), b.doc.segments.as_slice()));
    Ok(production::view(chain, span, bounds, &rows, live))
}

/// Samples a production draft needs per segment: 1 000 where the timeout comes from p999
/// (volatile), 100 where it comes from p99 (stable).
fn samples_needed(class: SegmentClass) -> u64 {
    match class {
        SegmentClass::Volatile => 1_000,
        SegmentClass::Stable => 100,
    }
}

/// `POST /chains/{chain}/baselines {"from": "production", "window": …}`: a run made from the
/// merged production histograms of the window (its source names the window and the agents)
/// and a draft from it, for the normal review. Refused when a segment has too few samples.
pub async fn production_draft(
    state: &AppState,
    principal: &Principal,
    chain: &str,
    window: &str,
) -> ApiResult<StoredBaseline> {
    check_chain_name(chain)?;
    let span = Span::parse(window)
        .ok_or_else(|| ApiError::bad_request(format!("window={window:?}: one of 1m, 5m, 1h")))?;
    let topo = super::chains::known(state, chain).await?;
    let rollup_ms = state.reports.rollups.rollup_ms();
    let (from, to) = span.bounds(crate::clock::now_ms(), rollup_ms);
    let rows = state.store.read_rollups(chain, from, to).await?;
    let sums = production::sum_by_segment(&rows);
    let mut segments = Vec::new();
    let mut short = Vec::new();
    let mut agents = std::collections::BTreeSet::new();
    for seg in &topo.topology.segments {
        let sum = sums.get(&seg.id);
        let samples = sum.map_or(0, |s| s.latency.len());
        let needed = samples_needed(seg.class);
        match sum {
            Some(sum) if samples >= needed => {
                let l = hdr::latency(&sum.latency);
                agents.extend(sum.agent_ids.iter().cloned());
                segments.push(SegmentUpload {
                    id: seg.id.clone(),
                    samples,
                    failures: Some(sum.counts.calls.saturating_sub(sum.counts.ok)),
                    p50_ms: Some(us_to_ms(l.p50_us)),
                    p99_ms: us_to_ms(l.p99_us),
                    p999_ms: us_to_ms(l.p999_us),
                    // Production drafts keep the merged histogram: their kill rates are the
                    // fleet's own (left out in the unlikely case it is past a run's limit).
                    distribution: Some(
                        base64::engine::general_purpose::STANDARD.encode(hdr::encode(&sum.latency)),
                    )
                    .filter(|b64| b64.len() <= budget_core::run::MAX_HISTOGRAM_BASE64)
                    .map(|hdr| budget_core::Distribution::Histogram { hdr }),
                });
            }
            // The root's measurement is optional, as in any run.
            None if seg.is_root() => {}
            _ => short.push(json!({"segment": seg.id, "samples": samples, "needed": needed})),
        }
    }
    if !short.is_empty() {
        return Err(ApiError::validation(
            format!(
                "production over the last {} has too few samples for a draft of {chain:?}: {} segment(s) short",
                span.as_str(),
                short.len()
            ),
            json!({"window": span.as_str(), "from": crate::clock::rfc3339_ms(from), "to": crate::clock::rfc3339_ms(to), "segments": short}),
        ));
    }
    let named: Vec<String> = agents.into_iter().take(20).collect();
    let agent_count = sums.values().map(|s| s.agents).max().unwrap_or(0);
    let source = format!(
        "production {} {}..{} from {agent_count} agent(s): {}",
        span.as_str(),
        crate::clock::rfc3339_ms(from),
        crate::clock::rfc3339_ms(to),
        named.join(", ")
    );
    let upload = RunUpload {
        tool: Some("production".into()),
        note: Some(source.clone()),
        segments,
    };
    let outcome =
        super::runs::upload_production_run(state, principal, chain, upload, source).await?;
    match outcome.baseline_id {
        Some(id) => Ok(state.store.get_baseline(&id).await?),
        None => super::recompute(state, principal, chain, &outcome.run_id, None).await,
    }
}

/// `GET /alerts[?state=firing]`.
pub async fn alerts(state: &AppState, filter: Option<&str>) -> ApiResult<AlertList> {
    let firing_only = match filter {
        None | Some("") => false,
        Some("firing") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "state={other:?}: only `firing` filters (without it, every alert)"
            )))
        }
    };
    Ok(AlertList {
        alerts: state.store.list_alerts(firing_only, 1000).await?,
    })
}

/// `POST /webhooks` (admin).
pub async fn create_webhook(
    state: &AppState,
    principal: &Principal,
    req: WebhookRequest,
) -> ApiResult<budget_api::feedback::Webhook> {
    let url = req.url.trim();
    let parsed = reqwest::Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if url.len() > MAX_URL_LEN || parsed.is_none() {
        return Err(ApiError::bad_request(format!(
            "url must be an http:// or https:// URL of at most {MAX_URL_LEN} characters"
        )));
    }
    if req.secret.len() < 16 || req.secret.len() > MAX_SECRET_LEN {
        return Err(ApiError::bad_request(format!(
            "secret must be 16-{MAX_SECRET_LEN} bytes (it keys the HMAC-SHA256 signature)"
        )));
    }
    let mut events = req.events;
    if events.is_empty() {
        events.push("*".into());
    }
    if let Some(bad) = events
        .iter()
        .find(|e| !WEBHOOK_EVENTS.contains(&e.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "event {bad:?}: one of {}",
            WEBHOOK_EVENTS.join(", ")
        )));
    }
    events.sort();
    events.dedup();
    let hook = Webhook {
        hook: budget_api::feedback::Webhook {
            id: format!("wh-{}", hex::encode(rand::random::<[u8; 6]>())),
            url: url.to_owned(),
            events,
            created_at: crate::clock::now(),
            created_by: principal.name.clone(),
        },
        secret: req.secret,
    };
    let audit = super::audit(
        principal,
        "webhook.create",
        None,
        json!({"id": hook.hook.id, "url": hook.hook.url, "events": hook.hook.events}),
    );
    let created = state.store.create_webhook(&hook, audit).await?;
    tracing::info!(webhook = %created.id, by = %principal.name, "webhook registered");
    Ok(created)
}

/// `GET /webhooks` (admin).
pub async fn webhooks(state: &AppState) -> ApiResult<WebhookList> {
    Ok(WebhookList {
        webhooks: state
            .store
            .list_webhooks()
            .await?
            .into_iter()
            .map(|w| w.hook)
            .collect(),
    })
}

/// `DELETE /webhooks/{id}` (admin).
pub async fn delete_webhook(state: &AppState, principal: &Principal, id: &str) -> ApiResult<()> {
    let audit = super::audit(principal, "webhook.delete", None, json!({"id": id}));
    if state.store.delete_webhook(id, audit).await? {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("webhook {id:?} not found")))
    }
}

/// `GET /webhooks/{id}/deliveries` (admin): newest first, at most 200.
pub async fn deliveries(state: &AppState, id: &str) -> ApiResult<DeliveryList> {
    if !state
        .store
        .list_webhooks()
        .await?
        .iter()
        .any(|w| w.hook.id == id)
    {
        return Err(ApiError::not_found(format!("webhook {id:?} not found")));
    }
    Ok(DeliveryList {
        deliveries: state.store.list_deliveries(id, 200).await?,
    })
}

#[cfg(test)]
mod tests;
