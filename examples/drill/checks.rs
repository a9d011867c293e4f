//! The drill's shared checks and reporting: verdicts, notes, figures, checkpoints (every
//! agent flushed, the server's `1h` view and every service's counts) and the per-segment
//! figures printed at each step.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;

use crate::control::eventually;
use crate::load::Entry;
use crate::scenario::{run_a, unix_ms, wall_ms, Check, Drill, Kind, SEGMENTS};
use crate::tally::{opt, pct, Checkpoint, Tally};

impl Drill {
    pub(crate) fn check(&mut self, name: &str, pass: bool, detail: impl Into<String>) {
        let detail = detail.into();
        println!(
            "  [{}] {name}{}",
            if pass { "PASS" } else { "FAIL" },
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            }
        );
        self.checks.push(Check {
            name: name.to_owned(),
            pass,
            detail,
            kind: Kind::Verdict,
        });
    }

    pub(crate) fn note(&mut self, text: String) {
        println!("  [NOTE] {text}");
        self.checks.push(Check {
            name: text,
            pass: true,
            detail: String::new(),
            kind: Kind::Note,
        });
    }

    /// A figure for the closing note (printed in the summary).
    pub(crate) fn figure(&mut self, text: String) {
        self.checks.push(Check {
            name: text,
            pass: true,
            detail: String::new(),
            kind: Kind::Figure,
        });
    }

    /// Every agent flushes; then waits for the rollup holding the flush to complete, and
    /// reads the server's `1h` view and every service's counts.
    pub(crate) async fn checkpoint(&mut self, step: &str) -> anyhow::Result<Checkpoint> {
        for s in self.services() {
            let url = format!("{}/flush", s.url);
            eventually(
                &format!("{} flushes its report", s.name),
                Duration::from_secs(15),
                async || {
                    Ok(self
                        .client
                        .post(&url)
                        .send()
                        .await?
                        .status()
                        .is_success()
                        .then_some(()))
                },
            )
            .await?;
        }
        let r = self.plan.rollup_ms as i64;
        let boundary = (wall_ms() / r + 1) * r;
        let wait = (boundary - wall_ms() + 150).max(0) as u64;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let production = self.api.production("1h").await?;
        let mut cp = Checkpoint {
            production: production.clone(),
            ..Checkpoint::default()
        };
        for s in &production.segments {
            cp.server.insert(s.segment.clone(), Tally::from_server(s));
        }
        for s in self.services() {
            let stats = self.stats(&s.name, false).await?;
            // Every agent has counters for every segment of its config; the callers' hold
            // the calls.
            for (segment, counts) in &stats.agent {
                let sum = cp.agent.entry(segment.clone()).or_default();
                *sum = sum.plus(&Tally::from_agent(counts));
            }
            for (segment, own) in &stats.own {
                let sum = cp.own.entry(segment.clone()).or_default();
                *sum = sum.plus(&Tally::from_own(own));
            }
            cp.stats.insert(s.name.clone(), stats);
        }
        // The 1h window must still hold the drill's first traffic.
        let from = unix_ms(&production.from);
        if let Some(first) = self.first_traffic_ms {
            if from > first {
                bail!(
                    "the drill ran longer than 60 rollups: the 1h view no longer holds its start"
                );
            }
        }
        // Three sources, compared on what each knows: the server's rollups (what the agents
        // sent), the agents' metrics (calls by outcome, retries by cause) and the services'
        // own view of their calls (calls, attempts really made, retries really made).
        let mut vs_agents = Vec::new();
        let mut vs_services = Vec::new();
        let mut phantom = Vec::new();
        for segment in SEGMENTS {
            let z = Tally::default();
            let server = cp.server.get(segment).unwrap_or(&z);
            let agent = cp.agent.get(segment).unwrap_or(&z);
            let own = cp.own.get(segment).unwrap_or(&z);
            if (server.calls, &server.retries, &server.outcomes)
                != (agent.calls, &agent.retries, &agent.outcomes)
            {
                vs_agents.push(format!(
                    "{segment}: server calls {} retries {:?} outcomes {:?} ≠ agent calls {} retries {:?} outcomes {:?}",
                    server.calls, server.retries, server.outcomes, agent.calls, agent.retries, agent.outcomes
                ));
            }
            if (server.calls, server.attempts) != (own.calls, own.attempts) {
                vs_services.push(format!(
                    "{segment}: server {}/{} ≠ service {}/{} (attempts/calls)",
                    server.attempts, server.calls, own.attempts, own.calls
                ));
            }
            // The agent's own rule, over this step: attempts = calls − budget_exhausted +
            // Σ retries. A retry counted without the attempt it announces breaks it.
            let server = cp.delta(&self.last, segment);
            let own = cp.own_delta(&self.last, segment);
            let counted: u64 = server.retries.values().sum();
            let made: u64 = own.retries.values().sum();
            let expected = server.calls - server.outcome("budget_exhausted") + counted;
            if expected != server.attempts || counted != made {
                phantom.push(format!(
                    "{segment}: {counted} retries counted {:?}, {made} made {:?}; attempts {} (calls − budget_exhausted + retries = {expected})",
                    server.retries, own.retries, server.attempts
                ));
            }
        }
        let totals: Vec<String> = SEGMENTS
            .iter()
            .map(|s| {
                let t = cp.server.get(*s).cloned().unwrap_or_default();
                format!("{s} {}/{}", t.attempts, t.calls)
            })
            .collect();
        let detail = |bad: &[String]| {
            if bad.is_empty() {
                String::new()
            } else {
                bad.join("; ")
            }
        };
        self.check(
            &format!("{step}: server = agents (calls, retries by cause, outcomes), exactly"),
            vs_agents.is_empty(),
            detail(&vs_agents),
        );
        self.check(
            &format!("{step}: server = services (calls, attempts made), exactly"),
            vs_services.is_empty(),
            if vs_services.is_empty() {
                format!("cumulative attempts/calls: {}", totals.join(", "))
            } else {
                detail(&vs_services)
            },
        );
        self.check(
            &format!("{step}: every retry counted was made (attempts = calls − budget_exhausted + retries in the step)"),
            phantom.is_empty(),
            if phantom.is_empty() {
                String::new()
            } else {
                format!(
                    "{} — budget-agent counts a retry before its backoff; a backoff that wakes past the budget makes no attempt but the retry stays counted",
                    detail(&phantom)
                )
            },
        );
        Ok(cp)
    }

    /// The step's figures per segment (differences of the server's cumulative counts); with
    /// `latency`, the production percentiles of the `1h` view too (meaningful in step 1,
    /// whose traffic is all of it).
    pub(crate) fn print_segments(&self, cp: &Checkpoint, latency: bool) {
        let header = format!(
            "  {:<18} {:>6} {:>8} {:>7} {:>8}",
            "segment", "calls", "attempts", "amplif", "kill"
        );
        if latency {
            println!(
                "{header} {:>8} {:>16} {:>16} {:>6}",
                "p50 ms", "p99 ms (run A)", "p999 ms (run A)", "drift"
            );
        } else {
            println!("{header}");
        }
        for segment in SEGMENTS {
            let t = cp.delta(&self.last, segment);
            let line = format!(
                "  {:<18} {:>6} {:>8} {:>7} {:>8}",
                segment,
                t.calls,
                t.attempts,
                opt(t.amplification()),
                t.kill_rate().map_or("-".into(), pct),
            );
            let view = cp.production.segments.iter().find(|s| s.segment == segment);
            let (p99, p999) = run_a(segment);
            if latency {
                println!(
                    "{line} {:>8} {:>16} {:>16} {:>6}",
                    opt(view.and_then(|v| v.p50_ms)),
                    format!("{} ({p99})", opt(view.and_then(|v| v.p99_ms))),
                    format!("{} ({p999})", opt(view.and_then(|v| v.p999_ms))),
                    view.map_or("-".into(), |v| v.drift.to_string()),
                );
            } else {
                println!("{line}");
            }
        }
    }

    pub(crate) fn entry_summary(entries: &[Entry]) -> (usize, BTreeMap<String, usize>) {
        let mut by: BTreeMap<String, usize> = BTreeMap::new();
        for e in entries {
            *by.entry(e.outcome().to_owned()).or_default() += 1;
        }
        (entries.len(), by)
    }

    /// A check about timings: judged on a quiet host, shown as skipped on a busy one.
    pub(crate) fn timing_check(&mut self, quiet: bool, name: &str, pass: bool, detail: String) {
        if quiet {
            self.check(name, pass, detail);
        } else {
            println!("  [SKIP] {name}: {detail}");
        }
    }
}
