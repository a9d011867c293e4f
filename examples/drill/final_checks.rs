//! The final checks over the whole drill: alerts and webhook deliveries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use budget_api::feedback::Alert;

use crate::control::eventually;
use crate::scenario::Drill;

impl Drill {
    /// Every alert's transitions reached the webhook exactly once; no two alerts of one rule
    /// and segment overlap; the deliveries are all done.
    pub(crate) async fn final_checks(&mut self) -> anyhow::Result<()> {
        println!("\n== final: alerts and webhook deliveries over the whole drill");
        let deliveries = eventually(
            "every webhook delivery is done",
            Duration::from_secs(40),
            async || {
                let d = self.api.deliveries(&self.hook).await?;
                Ok(d.iter().all(|d| d.state == "delivered").then_some(d))
            },
        )
        .await;
        let alerts = self.api.alerts().await?;
        let got = self.receiver.got();
        let mut problems = Vec::new();
        for a in &alerts {
            let accepted = |event: &str| -> BTreeSet<String> {
                got.iter()
                    .filter(|r| {
                        r.event == event && r.status == 200 && r.body["alert"]["id"] == a.id
                    })
                    .map(|r| r.delivery.clone())
                    .collect()
            };
            let fired = accepted("alert.firing").len();
            let resolved = accepted("alert.resolved").len();
            let want_resolved = usize::from(a.state == "resolved");
            println!(
                "  alert #{} {:<13} {:<17} {:<8} value {:<10} since {} resolved {}",
                a.id,
                a.rule,
                a.segment,
                a.state,
                a.value,
                a.since,
                a.resolved_at.as_deref().unwrap_or("-")
            );
            if fired != 1 || resolved != want_resolved {
                problems.push(format!(
                    "alert #{} ({} {}): {fired} firing and {resolved} resolved deliveries",
                    a.id, a.rule, a.segment
                ));
            }
        }
        let mut by_key: BTreeMap<(String, String), Vec<&Alert>> = BTreeMap::new();
        for a in &alerts {
            by_key
                .entry((a.rule.clone(), a.segment.clone()))
                .or_default()
                .push(a);
        }
        for ((rule, segment), list) in &by_key {
            let mut list = list.clone();
            list.sort_by(|a, b| a.since.cmp(&b.since));
            for pair in list.windows(2) {
                let ended = pair[0].resolved_at.as_deref().unwrap_or("9999");
                if ended > pair[1].since.as_str() {
                    problems.push(format!(
                        "{rule} {segment}: alerts #{} and #{} overlap",
                        pair[0].id, pair[1].id
                    ));
                }
            }
        }
        let repeats = got.len()
            - got
                .iter()
                .map(|r| (r.delivery.clone(), r.status))
                .collect::<BTreeSet<_>>()
                .len();
        let all_delivered = deliveries.is_ok();
        self.check(
            "final: no alert duplicated and no webhook lost (every transition delivered once, signed)",
            problems.is_empty() && all_delivered && got.iter().all(|r| r.signed),
            if problems.is_empty() {
                format!(
                    "{} alerts, {} deliveries received ({} refused on purpose, {repeats} repeats), all delivered: {all_delivered}",
                    alerts.len(),
                    got.len(),
                    got.iter().filter(|r| r.status != 200).count()
                )
            } else {
                problems.join("; ")
            },
        );
        println!(
            "  budgetd started {} times; drill wall time {:.1} s",
            self.budgetd.starts,
            self.since_start()
        );
        Ok(())
    }
}
