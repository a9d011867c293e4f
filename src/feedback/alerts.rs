//! The alert rules of SPEC §8, evaluated now and then on any replica.
//!
//! Each evaluation reads the rollups of the last complete windows (1 and 5 rollups), the
//! agents' outstanding NACKs and the archive backlog, and fires or resolves alerts in the
//! store. The store keeps at most one firing alert per rule, chain and segment, so replicas
//! evaluating at the same time fire (and notify webhooks) once.

use std::collections::{BTreeMap, BTreeSet};

use budget_core::feedback::{evaluate_segment, AlertThresholds, Counts, Rule};
use serde_json::json;

use super::production::{segment_figures, sum_by_segment, Span};
use super::webhooks;
use crate::state::AppState;
use crate::store::feedback::{Alert, NewAlert, WebhookEvent};
use crate::store::StoreResult;

/// Fires `alert` (once) or, when `firing` is false, resolves it.
async fn set(state: &AppState, alert: NewAlert, firing: bool) -> StoreResult<()> {
    let at = crate::clock::now();
    let extra = alert.rule == Rule::Nack.as_str();
    if firing {
        let events = move |a: &Alert| -> Vec<WebhookEvent> {
            let mut out = vec![webhooks::alert_event(a)];
            if extra {
                out.push(webhooks::nack_event(a));
            }
            out
        };
        if let Some(a) = state.store.fire_alert(&alert, &at, &events).await? {
            tracing::warn!(rule = %a.rule, chain = %a.chain, segment = %a.segment, value = a.value, threshold = a.threshold, "alert firing");
            crate::observe::alert_transition(&a.rule, true);
        }
    } else {
        let events = |a: &Alert| vec![webhooks::alert_event(a)];
        if let Some(a) = state
            .store
            .resolve_alert(&alert.rule, &alert.chain, &alert.segment, &at, &events)
            .await?
        {
            tracing::info!(rule = %a.rule, chain = %a.chain, segment = %a.segment, "alert resolved");
            crate::observe::alert_transition(&a.rule, false);
        }
    }
    Ok(())
}

fn counts_json(c: &Counts) -> serde_json::Value {
    serde_json::to_value(c).unwrap_or_default()
}

/// The segment rules over one chain's rollups.
async fn evaluate_chain(
    state: &AppState,
    thresholds: &AlertThresholds,
    chain: &str,
    now_ms: i64,
    rollup_ms: i64,
) -> StoreResult<()> {
    let (from5, to) = Span::FiveMinutes.bounds(now_ms, rollup_ms);
    let from1 = to - rollup_ms;
    let rows = state.store.read_rollups(chain, from5, to).await?;
    let last: Vec<_> = rows.iter().filter(|r| r.minute >= from1).cloned().collect();
    let sums5 = sum_by_segment(&rows);
    let sums1 = sum_by_segment(&last);
    let baseline = state.store.current_baseline(chain).await?;
    let live = baseline.as_ref().map(|b| b.doc.segments.as_slice());
    let segments: BTreeSet<&String> = sums5.keys().chain(sums1.keys()).collect();
    for segment in segments {
        let base = live.and_then(|l| l.iter().find(|b| &b.id == segment));
        let c1 = sums1.get(segment).map(|s| s.counts).unwrap_or_default();
        let five = sums5
            .get(segment)
            .map(|s| segment_figures(segment, s, base));
        let c5 = sums5.get(segment).map(|s| s.counts).unwrap_or_default();
        let drift = five
            .as_ref()
            .and_then(|(_, d, l)| d.as_ref().map(|d| (d, l)));
        for v in evaluate_segment(thresholds, &c1, &c5, drift) {
            let (window, from, counts) = match v.rule {
                Rule::Amplification => ("1m", from1, &c1),
                _ => ("5m", from5, &c5),
            };
            let mut detail = json!({
                "window": window,
                "from": crate::clock::rfc3339_ms(from),
                "to": crate::clock::rfc3339_ms(to),
                "counts": counts_json(counts),
            });
            if let Some((fig, _, _)) = &five {
                detail["p99_ms"] = json!(fig.p99_ms);
                detail["p999_ms"] = json!(fig.p999_ms);
                detail["samples"] = json!(fig.samples);
                detail["baseline_p99_ms"] = json!(fig.baseline_p99_ms);
                detail["baseline_p999_ms"] = json!(fig.baseline_p999_ms);
            }
            let alert = NewAlert {
                rule: v.rule.as_str().to_owned(),
                chain: chain.to_owned(),
                segment: segment.clone(),
                value: (v.value * 1e6).round() / 1e6,
                threshold: v.threshold,
                detail,
            };
            set(state, alert, v.firing).await?;
        }
    }
    Ok(())
}

/// NACKs: a `nack` alert per chain whose live revision an agent refused (and has not
/// accepted since); resolved when none refuses it any more.
async fn evaluate_nacks(state: &AppState) -> StoreResult<()> {
    let nacking = state.store.nacking_agents(10_000).await?;
    let hub = state.hub.current();
    let mut by_chain: BTreeMap<String, Vec<_>> = BTreeMap::new();
    for n in &nacking {
        let mut matched = false;
        for c in &n.chains {
            if hub.get(c).is_some_and(|e| e.serves(n.revision)) {
                by_chain.entry(c.clone()).or_default().push(n);
                matched = true;
            }
        }
        if !matched {
            by_chain.entry(String::new()).or_default().push(n);
        }
    }
    let firing = state.store.list_alerts(true, 1000).await?;
    for a in firing.iter().filter(|a| a.rule == Rule::Nack.as_str()) {
        if !by_chain.contains_key(&a.chain) {
            let alert = NewAlert {
                rule: a.rule.clone(),
                chain: a.chain.clone(),
                segment: String::new(),
                value: 0.0,
                threshold: 0.0,
                detail: json!({}),
            };
            set(state, alert, false).await?;
        }
    }
    for (chain, agents) in by_chain {
        let first = agents[0];
        let alert = NewAlert {
            rule: Rule::Nack.as_str().to_owned(),
            chain,
            segment: String::new(),
            value: agents.len() as f64,
            threshold: 0.0,
            detail: json!({
                "revision": first.revision,
                "error": first.error,
                "agents": agents.iter().take(20).map(|n| &n.agent_id).collect::<Vec<_>>(),
            }),
        };
        set(state, alert, true).await?;
    }
    Ok(())
}

/// The archive backlog: an upload pending longer than the threshold.
async fn evaluate_archive(state: &AppState, thresholds: &AlertThresholds) -> StoreResult<()> {
    let (pending, oldest) = state.store.archive_backlog().await?;
    let age_s = oldest
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds())
        .unwrap_or(0)
        .max(0);
    let threshold = thresholds.archive_backlog_secs as f64;
    let alert = NewAlert {
        rule: Rule::ArchiveBacklog.as_str().to_owned(),
        chain: String::new(),
        segment: String::new(),
        value: age_s as f64,
        threshold,
        detail: json!({"pending": pending, "oldest": oldest}),
    };
    set(state, alert, age_s as f64 > threshold).await
}

/// One evaluation of every rule.
pub async fn evaluate(state: &AppState) -> StoreResult<()> {
    let settings = &state.settings.feedback;
    let rollup_ms = i64::try_from(settings.rollup_ms).unwrap_or(60_000);
    // A rollup counts as complete a while after it ends, once the agents' last windows of it
    // have come in (an agent reports each window when it ends).
    let grace = (rollup_ms / 2).min(15_000);
    let now_ms = crate::clock::now_ms() - grace;
    let (from5, _) = Span::FiveMinutes.bounds(now_ms, rollup_ms);
    for chain in state.store.reporting_chains(from5).await? {
        evaluate_chain(state, &settings.alerts, &chain, now_ms, rollup_ms).await?;
    }
    evaluate_nacks(state).await?;
    evaluate_archive(state, &settings.alerts).await?;
    let mut firing: BTreeMap<String, u64> = BTreeMap::new();
    for a in state.store.list_alerts(true, 10_000).await? {
        *firing.entry(a.rule).or_default() += 1;
    }
    crate::observe::alerts_firing(firing);
    Ok(())
}

/// Evaluates every `evaluate_every_ms`, and deletes rollups older than the retention hourly.
pub fn spawn(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = std::time::Duration::from_millis(state.settings.feedback.evaluate_every_ms);
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_sweep: Option<std::time::Instant> = None;
        loop {
            tick.tick().await;
            if let Err(e) = evaluate(&state).await {
                tracing::warn!(error = %e, "alert evaluation failed; will retry");
            }
            if last_sweep.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(3600)) {
                let days = i64::try_from(state.settings.feedback.retention_days).unwrap_or(7);
                let before = crate::clock::now_ms() - days * 86_400_000;
                match state.store.expire_rollups(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(rows = n, "deleted rollups past their retention"),
                    Err(e) => tracing::warn!(error = %e, "failed to delete old rollups"),
                }
                match state.store.expire_canary_health(before).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(rows = n, "deleted canary rollups past their retention")
                    }
                    Err(e) => tracing::warn!(error = %e, "failed to delete old canary rollups"),
                }
                last_sweep = Some(std::time::Instant::now());
            }
        }
    })
}
