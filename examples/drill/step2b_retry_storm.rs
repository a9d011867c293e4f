//! Step 2b: more retries (topology change) and inventory dropping traffic; step 4 (no
//! idempotency key) and step 5 (budgetd restarted) run inside it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use budget_api::feedback::Alert;
use serde_json::{json, Value};

use crate::control::eventually;
use crate::load::Entry;
use crate::proxy::Fault;
use crate::scenario::Drill;
use crate::tally::{opt, Tally};

/// SPEC §4's topology with inventory volatile (timeout 195, budget 510) and run in parallel
/// with payment: 2 unavailable retries (100 + 300 ms backoffs) now fit inventory's budget.
fn topology_more_retries() -> anyhow::Result<Value> {
    let mut t: Value = serde_json::from_str(budget_core::example::CHECKOUT_TOPOLOGY)?;
    for s in t["segments"]
        .as_array_mut()
        .ok_or_else(|| anyhow!("no segments"))?
    {
        match s["id"].as_str() {
            Some("order->inventory") => {
                s["class"] = json!("volatile");
                s["stage"] = json!(1);
            }
            Some("order->payment") => s["stage"] = json!(1),
            Some("order->user") => s["stage"] = json!(2),
            _ => {}
        }
    }
    Ok(t)
}

impl Drill {
    pub(crate) async fn step2b_retry_storm_and_restart(&mut self) -> anyhow::Result<()> {
        println!(
            "\n== step 2b: more retries (topology change), inventory dropping traffic; step 4 (no key) and step 5 (restart) inside"
        );
        let revision = self.publish(&topology_more_retries()?, true).await?;
        println!("  published revision {revision}: inventory volatile, in parallel with payment");
        self.print_budgets().await?;
        self.receiver.refuse_next("alert.firing", "amplification");
        self.fault("inventory-proxy", Fault::Drop).await?;
        let t_storm = self.since_start();
        let load = self.start_load(self.plan.storm_rps);
        let alert = eventually(
            "the amplification alert fires",
            Duration::from_secs(30),
            async || {
                Ok(self
                    .api
                    .alerts()
                    .await?
                    .into_iter()
                    .find(|a| a.rule == "amplification" && a.state == "firing"))
            },
        )
        .await?;
        let t_fired = self.since_start();
        println!(
            "  alert #{} {} on {}: {} > {} ({:.1} s into the storm), counts {}",
            alert.id,
            alert.rule,
            alert.segment,
            alert.value,
            alert.threshold,
            t_fired - t_storm,
            alert.detail["counts"]
        );
        // Step 4: from now on every n-th entry request has no idempotency key.
        load.keyless.store(true, Ordering::Relaxed);
        // The first delivery of the firing event is refused; once it is recorded as failed,
        // budgetd is restarted before the retry (2 s later) is due.
        let refused = eventually(
            "the receiver refuses the first firing delivery",
            Duration::from_secs(15),
            async || {
                Ok(self
                    .receiver
                    .got()
                    .into_iter()
                    .find(|r| r.event == "alert.firing" && r.status == 503))
            },
        )
        .await?;
        let delivery_id: i64 = refused.delivery.parse().unwrap_or(-1);
        eventually(
            "the refused delivery is recorded",
            Duration::from_secs(10),
            async || {
                Ok(self
                    .api
                    .deliveries(&self.hook)
                    .await?
                    .into_iter()
                    .find(|d| d.id == delivery_id && d.attempts >= 1 && d.state == "pending")
                    .map(|_| ()))
            },
        )
        .await?;
        let failed_before: u64 = {
            let mut n = 0;
            for s in self.services() {
                n += self.stats(&s.name, false).await?.report.failed_reports;
            }
            n
        };
        println!("\n== step 5: control plane restarted mid-storm");
        let t_down = Instant::now();
        let stopped_in = tokio::task::block_in_place(|| self.budgetd.stop())?;
        tokio::time::sleep(self.plan.restart_down).await;
        tokio::task::block_in_place(|| self.budgetd.restart())?;
        let t_up = Instant::now();
        println!(
            "  budgetd stopped (SIGTERM) in {:.0} ms, down {:.1} s, up again on the same database and ports",
            stopped_in.as_secs_f64() * 1000.0,
            t_down.elapsed().as_secs_f64()
        );
        let delivered = eventually(
            "the firing event is delivered after the restart",
            Duration::from_secs(30),
            async || {
                Ok(self.receiver.got().into_iter().find(|r| {
                    r.event == "alert.firing" && r.status == 200 && r.delivery == refused.delivery
                }))
            },
        )
        .await?;
        // The agents resend what they could not deliver while it was down.
        let failed_after = eventually(
            "every agent delivers its pending windows",
            Duration::from_secs(30),
            async || {
                let mut failed = 0;
                for s in self.services() {
                    let st = self.stats(&s.name, false).await?;
                    if st.report.pending_windows > 0 {
                        return Ok(None);
                    }
                    failed += st.report.failed_reports;
                }
                Ok((failed > failed_before).then_some(failed))
            },
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(2 * self.plan.rollup_ms)).await;
        let during: Vec<Alert> = self
            .api
            .alerts()
            .await?
            .into_iter()
            .filter(|a| a.rule == "amplification")
            .collect();
        self.check(
            "step 5: after the restart the same single amplification alert is still firing",
            during.len() == 1 && during[0].id == alert.id && during[0].state == "firing",
            format!(
                "{:?}",
                during
                    .iter()
                    .map(|a| (a.id, a.state.clone(), a.value))
                    .collect::<Vec<_>>()
            ),
        );
        load.keyless.store(false, Ordering::Relaxed);
        let t_keyless_end = self.since_start();
        println!("\n== step 2b (recovery): inventory healthy again");
        self.fault("inventory-proxy", Fault::Pass).await?;
        let t_recovered = self.since_start();
        let resolved = eventually(
            "the amplification alert resolves",
            Duration::from_secs(30),
            async || {
                Ok(self
                    .api
                    .alerts()
                    .await?
                    .into_iter()
                    .find(|a| a.id == alert.id && a.state == "resolved"))
            },
        )
        .await?;
        let t_resolved = self.since_start();
        eventually(
            "the resolved event is delivered",
            Duration::from_secs(30),
            async || {
                Ok(self
                    .receiver
                    .got()
                    .into_iter()
                    .find(|r| {
                        r.event == "alert.resolved"
                            && r.status == 200
                            && r.body["alert"]["id"] == alert.id
                    })
                    .map(|_| ()))
            },
        )
        .await?;
        let (entries, _) = load.stop().await?;
        let cp = self.checkpoint("step 2b+5").await?;
        self.print_segments(&cp, false);
        let (n, by) = Self::entry_summary(&entries);
        println!("  entry: {n} requests, {by:?}");

        // The storm as the agents saw it, and the alert's own figures.
        let storm: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.keyed && e.sent < t_keyless_end)
            .filter(|e| e.body["order"]["failed"]["segment"] == "order->inventory")
            .collect();
        let mut attempts: BTreeMap<u64, usize> = BTreeMap::new();
        for e in &storm {
            *attempts
                .entry(e.body["order"]["failed"]["attempts"].as_u64().unwrap_or(0))
                .or_default() += 1;
        }
        let three = attempts.get(&3).copied().unwrap_or(0);
        self.check(
            "step 2b: keyed calls on a dropped inventory make 3 attempts (2 unavailable retries, 100 + 300 ms backoffs)",
            !storm.is_empty() && three as f64 >= 0.9 * storm.len() as f64,
            format!("attempts per failed call: {attempts:?}"),
        );
        let counts = &alert.detail["counts"];
        let detail_amp = counts["attempts"].as_f64().unwrap_or(0.0)
            / counts["calls"].as_f64().unwrap_or(f64::NAN);
        self.check(
            "step 2b: the amplification alert fired above 2× on order->inventory, with its counts",
            alert.segment == "order->inventory"
                && alert.value > 2.0
                && (detail_amp - alert.value).abs() < 1e-6,
            format!(
                "value {} = {} / {}",
                alert.value, counts["attempts"], counts["calls"]
            ),
        );
        let amp_alerts: Vec<Alert> = self
            .api
            .alerts()
            .await?
            .into_iter()
            .filter(|a| a.rule == "amplification")
            .collect();
        self.check(
            "step 2b: exactly one amplification alert, fired once and resolved once",
            amp_alerts.len() == 1 && amp_alerts[0].id == alert.id && resolved.resolved_at.is_some(),
            format!(
                "since {}, resolved {:?}",
                resolved.since, resolved.resolved_at
            ),
        );
        let got = self.receiver.got();
        let about = |event: &str, status: u16| -> Vec<String> {
            got.iter()
                .filter(|r| {
                    r.event == event && r.status == status && r.body["alert"]["id"] == alert.id
                })
                .map(|r| r.delivery.clone())
                .collect()
        };
        let (fired_ok, fired_refused, resolved_ok) = (
            about("alert.firing", 200),
            about("alert.firing", 503),
            about("alert.resolved", 200),
        );
        let signed = got.iter().all(|r| r.signed);
        self.check(
            "step 2b: the webhook got exactly one signed firing event and one resolved event",
            fired_ok.len() == 1 && resolved_ok.len() == 1 && signed,
            format!(
                "firing accepted {fired_ok:?} (refused once before the restart: {fired_refused:?}), resolved {resolved_ok:?}, every signature valid: {signed}"
            ),
        );
        println!(
            "  firing event delivered {:.1} s after budgetd came back ({}), by delivery {}",
            delivered.at.saturating_duration_since(t_up).as_secs_f64(),
            if delivered.at > t_up {
                "by the new process"
            } else {
                "before the restart"
            },
            delivered.delivery
        );

        // Step 4: the calls without a key (only this load sends them, only during step 4).
        // Those still in flight when inventory was let through again may have reached it
        // healthy, so only the calls answered before that must have been refused; every
        // refusal, answered before or after, is counted by both sides. The dropping proxy
        // resets each connection at once (UNAVAILABLE); on a host too busy to run it within
        // the attempt's 195 ms timeout the attempt times out instead: not retried either (a
        // quarter of them at most: a proxy that stopped resetting would time them all out).
        let keyless: Vec<&Entry> = entries.iter().filter(|e| !e.keyed).collect();
        let refused = |e: &&&Entry| {
            let f = &e.body["order"]["failed"];
            f["segment"] == "order->inventory"
                && (f["cause"] == "unavailable" || f["cause"] == "deadline")
                && f["attempts"] == 1
        };
        let timed_out = keyless
            .iter()
            .filter(|e| refused(e) && e.body["order"]["failed"]["cause"] == "deadline")
            .count();
        let settled: Vec<&&Entry> = keyless
            .iter()
            .filter(|e| e.sent + e.ms / 1000.0 < t_keyless_end)
            .collect();
        let not_refused: Vec<String> = settled
            .iter()
            .filter(|e| !refused(e))
            .map(|e| format!("sent at {:.3} s: HTTP {} {}", e.sent, e.status, e.body))
            .collect();
        let refused_calls: Vec<&&Entry> = keyless.iter().filter(refused).collect();
        let inv = cp.delta(&self.last, "order->inventory");
        let agent_refused = {
            let z = Tally::default();
            cp.agent
                .get("order->inventory")
                .unwrap_or(&z)
                .minus(self.last.agent.get("order->inventory").unwrap_or(&z))
                .outcome("retry_refused_no_key")
        };
        println!("\n== step 4: calls without an idempotency key (every {}th entry request during the storm)", self.plan.keyless_every);
        self.check(
            "step 4: a call without a key fails after 1 attempt (no retry)",
            !settled.is_empty() && not_refused.is_empty() && timed_out * 4 <= keyless.len(),
            format!(
                "{} of {} keyless requests answered before inventory recovered failed after 1 attempt ({} more in flight then; {timed_out} of all timed out rather than UNAVAILABLE: the proxy ran late){}",
                settled.len() - not_refused.len(),
                settled.len(),
                keyless.len() - settled.len(),
                if not_refused.is_empty() {
                    String::new()
                } else {
                    format!("; not refused: {}", not_refused.join("; "))
                }
            ),
        );
        self.check(
            "step 4: retry_refused_no_key counts each of them (server = agent = requests)",
            inv.outcome("retry_refused_no_key") == refused_calls.len() as u64
                && agent_refused == refused_calls.len() as u64,
            format!(
                "server {}, agent {}, requests {}; key coverage {}",
                inv.outcome("retry_refused_no_key"),
                agent_refused,
                refused_calls.len(),
                opt(cp
                    .production
                    .segments
                    .iter()
                    .find(|s| s.segment == "order->inventory")
                    .and_then(|s| s.key_coverage))
            ),
        );
        let mut dropped = 0;
        let mut pending = 0;
        for s in cp.stats.values() {
            dropped += s.report.dropped_windows;
            pending += s.report.pending_windows;
        }
        self.check(
            "step 5: no report window lost (agents resent what failed; none dropped or pending)",
            dropped == 0 && pending == 0 && failed_after > failed_before,
            format!(
                "failed reports during the outage {}, dropped windows {dropped}, pending {pending}",
                failed_after - failed_before
            ),
        );
        self.figure(format!(
            "step 2b, more retries allowed and inventory dropped: the amplification alert fired at {} ({} attempts / {} calls) {:.1} s into the storm, resolved {:.1} s after inventory recovered; webhook deliveries accepted: firing {}, resolved {} (the firing one refused once before the restart)",
            alert.value,
            counts["attempts"],
            counts["calls"],
            t_fired - t_storm,
            t_resolved - t_recovered,
            fired_ok.len(),
            resolved_ok.len()
        ));
        self.figure(format!(
            "step 4, no idempotency key: {} calls, 1 attempt each, UNAVAILABLE ({timed_out} of them timed out instead); retry_refused_no_key {} on the server (key coverage {})",
            refused_calls.len(),
            inv.outcome("retry_refused_no_key"),
            opt(cp
                .production
                .segments
                .iter()
                .find(|s| s.segment == "order->inventory")
                .and_then(|s| s.key_coverage))
        ));
        self.figure(format!(
            "step 5, budgetd restarted mid-storm (SIGTERM, stopped in {:.0} ms, down {:.1} s): {} agent reports failed and were sent again, {dropped} windows dropped, {} amplification alert(s)",
            stopped_in.as_secs_f64() * 1000.0,
            t_up.saturating_duration_since(t_down).as_secs_f64(),
            failed_after - failed_before,
            amp_alerts.len()
        ));
        self.last = cp;
        Ok(())
    }
}
