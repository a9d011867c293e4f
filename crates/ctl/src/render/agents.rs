//! The fleet: every agent seen, with its delivered and acknowledged revisions.

use budget_api::agents::AgentList;

use super::{flag, opt, table, text};

/// `GET /agents`: the fleet.
pub fn agents(v: &AgentList) -> String {
    if v.agents.is_empty() {
        return "no agents seen yet".into();
    }
    let mut t = table(
        &[
            "agent",
            "service",
            "client",
            "token",
            "chains",
            "replica",
            "connected",
            "delivered",
            "acked",
            "nack",
            "last seen",
        ],
        &[7, 8],
    );
    for a in &v.agents {
        let nack = match a.nack_revision {
            None => "-".into(),
            Some(rev) => format!("r{rev}: {}", opt(&a.nack_error)),
        };
        t.add_row(vec![
            text(&a.agent_id),
            text(&a.service),
            if a.client.is_empty() {
                "-".into()
            } else {
                text(&a.client)
            },
            opt(&a.token),
            if a.chains.is_empty() {
                "-".into()
            } else {
                a.chains
                    .iter()
                    .map(|c| text(c))
                    .collect::<Vec<_>>()
                    .join(",")
            },
            text(&a.replica),
            flag(a.connected).into(),
            a.delivered.to_string(),
            a.acked.to_string(),
            nack,
            text(&a.last_seen),
        ]);
    }
    t.to_string()
}
