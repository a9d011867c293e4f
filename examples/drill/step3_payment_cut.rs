//! Step 3: payment's network cut.

use std::time::Duration;

use serde_json::Value;

use crate::load::Entry;
use crate::proxy::Fault;
use crate::scenario::Drill;
use crate::tally::{pct, quantile, sorted};

impl Drill {
    pub(crate) async fn step3_payment_cut(&mut self) -> anyhow::Result<()> {
        let topology: Value = serde_json::from_str(budget_core::example::CHECKOUT_TOPOLOGY)?;
        let revision = self.publish(&topology, true).await?;
        println!(
            "\n== step 3: payment's network cut for {:?} (R3 replay: 断下游网络), {} rps; SPEC §4 budgets again (revision {revision})",
            self.plan.cut, self.plan.storm_rps
        );
        let load = self.start_load(self.plan.storm_rps);
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.stats("gateway", true).await?;
        self.fault("payment-proxy", Fault::Blackhole).await?;
        let t_cut = self.since_start();
        tokio::time::sleep(self.plan.cut).await;
        let gateway = self.stats("gateway", true).await?;
        self.fault("payment-proxy", Fault::Pass).await?;
        let t_heal = self.since_start();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (entries, _) = load.stop().await?;
        let cp = self.checkpoint("step 3").await?;
        self.print_segments(&cp, false);
        // Requests whose payment call met the cut: sent from just before it (in flight at
        // the cut) until shortly before the heal.
        let cut: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.sent >= t_cut - 0.3 && e.sent <= t_heal - 0.8)
            .collect();
        let n = cut.len();
        let errors = cut
            .iter()
            .filter(|e| !matches!(e.outcome(), "ok" | "fallback"))
            .count();
        let fallbacks = cut.iter().filter(|e| e.outcome() == "fallback").count();
        let held = sorted(
            cut.iter()
                .filter_map(|e| e.body["held_ms"].as_f64())
                .collect(),
        );
        let lags = sorted(
            cut.iter()
                .filter_map(|e| e.body["order"]["failed"]["release_lag_ms"].as_f64())
                .collect(),
        );
        let answered = sorted(cut.iter().map(|e| e.ms).collect());
        let error_rate = errors as f64 / n.max(1) as f64;
        println!(
            "  {n} entry requests met the cut: {} ok, {fallbacks} fallback (payment pending), {errors} errors",
            n - errors - fallbacks
        );
        println!(
            "  entry error rate {} with the gateway's fallback (without it: {}); gateway pool use peak {}/{} ({})",
            pct(error_rate),
            pct((errors + fallbacks) as f64 / n.max(1) as f64),
            gateway.max_in_flight,
            gateway.pool,
            pct(gateway.max_in_flight as f64 / gateway.pool as f64)
        );
        println!(
            "  release: gateway calls held p50 {:.0} / max {:.0} ms (entry deadline 800 ms); payment attempts returned max {:.1} ms after their 390 ms deadline; the cut lasted {:?}",
            quantile(&held, 0.5),
            held.last().copied().unwrap_or(f64::NAN),
            lags.last().copied().unwrap_or(f64::NAN),
            self.plan.cut
        );
        self.check(
            "step 3: entry error rate < 5 % with the fallback (the handbook's acceptance line)",
            n > 0 && error_rate < 0.05,
            format!("{errors}/{n} = {}", pct(error_rate)),
        );
        self.check(
            "step 3: in-flight calls released within 1 s of their deadline, not after the cut",
            !lags.is_empty()
                && lags.last().is_some_and(|l| *l <= 1000.0)
                && held.last().is_some_and(|h| *h <= 800.0 + 1000.0)
                && answered.last().is_some_and(|a| *a <= 800.0 + 1000.0),
            format!(
                "payment release lag max {:.1} ms over {} timed-out calls; gateway held max {:.0} ms; client saw max {:.0} ms",
                lags.last().copied().unwrap_or(f64::NAN),
                lags.len(),
                held.last().copied().unwrap_or(f64::NAN),
                answered.last().copied().unwrap_or(f64::NAN)
            ),
        );
        self.check(
            "step 3: gateway pool use under 80 % during the cut (the handbook's line)",
            (gateway.max_in_flight as f64) < 0.8 * gateway.pool as f64,
            format!("{}/{}", gateway.max_in_flight, gateway.pool),
        );
        self.figure(format!(
            "step 3, payment cut {:?}: entry error rate {} with the gateway's fallback ({} without it, {n} requests); gateway calls held p50 {:.0} / max {:.0} ms (deadline 800 ms); payment attempts released ≤ {:.1} ms after their 390 ms deadline; gateway pool peak {}/{}",
            self.plan.cut,
            pct(error_rate),
            pct((errors + fallbacks) as f64 / n.max(1) as f64),
            quantile(&held, 0.5),
            held.last().copied().unwrap_or(f64::NAN),
            lags.last().copied().unwrap_or(f64::NAN),
            gateway.max_in_flight,
            gateway.pool
        ));
        self.last = cp;
        Ok(())
    }
}
