//! The fleet: every agent seen, with its delivered and acknowledged revisions.

use serde_json::Value;

use super::{arr, s, table};

/// `GET /agents`: the fleet.
pub fn agents(v: &Value) -> String {
    let list = arr(&v["agents"]);
    if list.is_empty() {
        return "no agents seen yet".into();
    }
    let mut t = table(
        &[
            "agent",
            "service",
            "token",
            "chains",
            "replica",
            "connected",
            "delivered",
            "acked",
            "nack",
            "last seen",
        ],
        &[6, 7],
    );
    for a in list {
        let chains: Vec<String> = arr(&a["chains"]).iter().map(s).collect();
        let nack = match (&a["nack_revision"], &a["nack_error"]) {
            (Value::Null, _) => "-".into(),
            (rev, err) => format!("r{}: {}", s(rev), s(err)),
        };
        t.add_row(vec![
            s(&a["agent_id"]),
            s(&a["service"]),
            s(&a["token"]),
            if chains.is_empty() {
                "-".into()
            } else {
                chains.join(",")
            },
            s(&a["replica"]),
            if a["connected"].as_bool() == Some(true) {
                "yes".into()
            } else {
                "no".into()
            },
            s(&a["delivered"]),
            s(&a["acked"]),
            nack,
            s(&a["last_seen"]),
        ]);
    }
    t.to_string()
}
