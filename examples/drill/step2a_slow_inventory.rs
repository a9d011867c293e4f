//! Step 2a: inventory slowed past its timeout.

use std::time::{Duration, Instant};

use budget_api::feedback::Alert;

use crate::control::eventually;
use crate::proxy::Fault;
use crate::scenario::{unix_ms, wall_ms, Drill, HOST_LAG_P90_MS};
use crate::tally::{opt, quantile, sorted, NO_SAMPLES};

impl Drill {
    pub(crate) async fn step2a_slow_inventory(&mut self) -> anyhow::Result<()> {
        let delay = self.plan.slow_delay_ms;
        println!(
            "\n== step 2a: inventory slowed to +{delay} ms (its timeout is 44 ms; 库存接口 400ms), {} rps for {:?}",
            self.plan.storm_rps, self.plan.slow
        );
        self.fault("inventory-proxy", Fault::Delay { ms: delay })
            .await?;
        let started = Instant::now();
        let started_ms = wall_ms();
        let load = self.start_load(self.plan.storm_rps);
        // The server's figure for the last complete rollup, while the storm runs: the first
        // rollup that starts after the step did.
        let live = eventually(
            "a complete rollup of the slow inventory",
            self.plan.slow + Duration::from_millis(2 * self.plan.rollup_ms + 2000),
            async || {
                let v = self.api.production("1m").await?;
                if unix_ms(&v.from) < started_ms {
                    return Ok(None);
                }
                Ok(v.segments
                    .into_iter()
                    .find(|s| s.segment == "order->inventory" && s.calls > 0))
            },
        )
        .await;
        tokio::time::sleep(self.plan.slow.saturating_sub(started.elapsed())).await;
        let (entries, _) = load.stop().await?;
        self.fault("inventory-proxy", Fault::Pass).await?;
        let live = live?;
        let cp = self.checkpoint("step 2a").await?;
        self.print_segments(&cp, false);
        let (n, by) = Self::entry_summary(&entries);
        println!("  entry: {n} requests, {by:?} (no fallback without stock)");
        let inv = cp.delta(&self.last, "order->inventory");
        let made = cp.own_delta(&self.last, "order->inventory");
        // How late the timed-out calls came back after their deadline: the host's lag. A call
        // keeps its retry only when the lags of its timeout and its backoff leave room in the
        // 208 ms budget (宁兜底不超预算), so "every call retried" is a timing check.
        let lag = sorted(cp.new_samples(&self.last, "order->inventory", |o| &o.release_lag_ms));
        let lag_p90 = quantile(&lag, 0.9);
        let quiet = lag_p90 <= HOST_LAG_P90_MS;
        println!(
            "  timed-out inventory calls came back p50 {:.1} / p90 {lag_p90:.1} / p99 {:.1} ms after their deadline",
            quantile(&lag, 0.5),
            quantile(&lag, 0.99)
        );
        if !quiet {
            self.note(format!(
                "step 2a: host too busy to judge timings (timed-out calls came back {lag_p90:.1} ms late at p90, over {HOST_LAG_P90_MS} ms)"
            ));
        }
        self.check(
            "step 2a: every inventory call times out, with one deadline retry at most",
            inv.calls > 0
                && inv.attempts <= 2 * inv.calls
                && inv.outcome("deadline_exceeded") == inv.calls,
            format!(
                "calls {}, attempts {}, deadline retries made {} (counted {}), deadline_exceeded {}",
                inv.calls,
                inv.attempts,
                made.retries("deadline"),
                inv.retries("deadline"),
                inv.outcome("deadline_exceeded")
            ),
        );
        self.timing_check(
            quiet,
            "step 2a: the retry fits the budget: ≥ 98 % of the calls retried once",
            inv.attempts as f64 >= 1.98 * inv.calls as f64,
            format!("{} attempts / {} calls", inv.attempts, inv.calls),
        );
        self.check(
            "step 2a: the server's last-minute amplification is 2× at most, as the agents counted",
            live.amplification.is_some_and(|a| a > 1.0 && a <= 2.0),
            format!(
                "production?window=1m: {} ({} attempts / {} calls)",
                opt(live.amplification),
                live.attempts,
                live.calls
            ),
        );
        let backoffs = sorted(cp.new_samples(&self.last, "order->inventory", |o| {
            o.backoffs_ms.get("deadline").unwrap_or(&NO_SAMPLES)
        }));
        let (lo, p50, p90) = (
            backoffs.first().copied().unwrap_or(f64::NAN),
            quantile(&backoffs, 0.5),
            quantile(&backoffs, 0.9),
        );
        // R-retry: 100 ms stretched by 0–20 % (100–120 ms), observed from the timed-out
        // attempt's deadline to the next attempt's start, so the timer's and the scheduler's
        // lag add to it: never under 100 ms, and spread by the jitter; on a quiet host the
        // middle of 100–120 ms at the median.
        self.check(
            "step 2a: backoff 100 ms + jitter before each deadline retry (never under 100 ms, spread ≥ 10 ms)",
            backoffs.len() as u64 == made.retries("deadline") && lo >= 100.0 && p90 - lo >= 10.0,
            format!(
                "{} backoffs: min {lo:.1}, p50 {p50:.1}, p90 {p90:.1}, max {:.1} ms",
                backoffs.len(),
                backoffs.last().copied().unwrap_or(f64::NAN)
            ),
        );
        self.timing_check(
            quiet,
            "step 2a: median backoff 105–130 ms (100 ms + 0–20 %, plus the timer's lag)",
            (105.0..=130.0).contains(&p50),
            format!("p50 {p50:.1} ms"),
        );
        let amp_alerts: Vec<Alert> = self
            .api
            .alerts()
            .await?
            .into_iter()
            .filter(|a| a.rule == "amplification")
            .collect();
        self.check(
            "step 2a: no amplification alert at 2.0× (the rule fires above 2)",
            amp_alerts.is_empty(),
            format!("{} amplification alert(s)", amp_alerts.len()),
        );
        self.figure(format!(
            "step 2a, inventory +{}ms: amplification {} on the server ({} attempts / {} calls) = the agents' and services' counts; last-minute figure {}; no amplification alert; backoffs before the deadline retries min {lo:.1} / p50 {p50:.1} / p90 {p90:.1} ms",
            self.plan.slow_delay_ms,
            opt(inv.amplification()),
            inv.attempts,
            inv.calls,
            opt(live.amplification),
        ));
        self.last = cp;
        Ok(())
    }
}
