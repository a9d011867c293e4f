//! Webhooks (`budgetctl webhook …`): a registered one, the list, and a webhook's deliveries.

use budget_api::feedback::{Delivery, DeliveryList, Webhook, WebhookList};

use super::{fields, opt, table, text};

/// `POST /webhooks`: the registered webhook (its secret is never shown).
pub fn webhook(v: &Webhook) -> String {
    fields(&[
        ("webhook", text(&v.id)),
        ("url", text(&v.url)),
        ("events", events(&v.events)),
        (
            "created",
            format!("{} by {}", text(&v.created_at), text(&v.created_by)),
        ),
        (
            "signature",
            "X-Budgetd-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the secret>"
                .into(),
        ),
    ])
}

/// `GET /webhooks`.
pub fn webhooks(v: &WebhookList) -> String {
    if v.webhooks.is_empty() {
        return "no webhooks".into();
    }
    let mut t = table(&["id", "url", "events", "created by", "created at"], &[]);
    for w in &v.webhooks {
        t.add_row(vec![
            text(&w.id),
            text(&w.url),
            events(&w.events),
            text(&w.created_by),
            text(&w.created_at),
        ]);
    }
    t.to_string()
}

/// `GET /webhooks/{id}/deliveries`: newest first.
pub fn deliveries(v: &DeliveryList) -> String {
    if v.deliveries.is_empty() {
        return "no deliveries yet".into();
    }
    let mut t = table(
        &[
            "id",
            "event",
            "state",
            "attempts",
            "last answer",
            "next attempt",
            "created at",
            "delivered at",
        ],
        &[0, 3],
    );
    for d in &v.deliveries {
        t.add_row(vec![
            d.id.to_string(),
            text(&d.event),
            text(&d.state),
            d.attempts.to_string(),
            last_answer(d),
            if d.state == "pending" {
                text(&d.next_attempt_at)
            } else {
                "-".into()
            },
            text(&d.created_at),
            opt(&d.delivered_at),
        ]);
    }
    t.to_string()
}

/// `*` means every event.
fn events(e: &[String]) -> String {
    match e {
        [] => "-".into(),
        [all] if all == "*" => "* (every event)".into(),
        _ => e.join(", "),
    }
}

/// The receiver's last status (`HTTP 503`), the error when there was no answer, or `-`.
fn last_answer(d: &Delivery) -> String {
    match (
        d.last_status,
        d.last_error.as_deref().filter(|e| !e.is_empty()),
    ) {
        (Some(status), Some(error)) => format!("HTTP {status}: {error}"),
        (Some(status), None) => format!("HTTP {status}"),
        (None, Some(error)) => error.to_owned(),
        (None, None) => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::check;
    use serde_json::{json, Value};

    fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn a_webhook() -> Value {
        json!({"id": "wh-0a1b2c3d4e5f", "url": "https://hooks.example.com/budgetd",
               "events": ["alert.firing", "alert.resolved"], "created_at": "2026-11-30T10:00:00Z",
               "created_by": "admin"})
    }

    #[test]
    fn a_registered_webhook_shows_how_it_is_signed() {
        check(
            &webhook(&typed(a_webhook())),
            &[
                "webhook:   wh-0a1b2c3d4e5f",
                "url:       https://hooks.example.com/budgetd",
                "events:    alert.firing, alert.resolved",
                "created:   2026-11-30T10:00:00Z by admin",
                "signature: X-Budgetd-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the secret>",
            ],
        );
    }

    #[test]
    fn webhooks_list_as_a_table() {
        let every = json!({"id": "wh-ffffffffffff", "url": "http://10.0.0.7:9000/hook",
            "events": ["*"], "created_at": "2026-11-30T11:00:00Z", "created_by": "ops"});
        check(
            &webhooks(&typed(json!({"webhooks": [a_webhook(), every]}))),
            &[
                "┌─────────────────┬───────────────────────────────────┬──────────────────────────────┬────────────┬──────────────────────┐",
                "│ id              ┆ url                               ┆ events                       ┆ created by ┆ created at           │",
                "╞═════════════════╪═══════════════════════════════════╪══════════════════════════════╪════════════╪══════════════════════╡",
                "│ wh-0a1b2c3d4e5f ┆ https://hooks.example.com/budgetd ┆ alert.firing, alert.resolved ┆ admin      ┆ 2026-11-30T10:00:00Z │",
                "│ wh-ffffffffffff ┆ http://10.0.0.7:9000/hook         ┆ * (every event)              ┆ ops        ┆ 2026-11-30T11:00:00Z │",
                "└─────────────────┴───────────────────────────────────┴──────────────────────────────┴────────────┴──────────────────────┘",
            ],
        );
        assert_eq!(webhooks(&typed(json!({"webhooks": []}))), "no webhooks");
    }

    #[test]
    fn deliveries_show_the_receivers_last_answer() {
        let v = json!({"deliveries": [
            {"id": 3, "webhook_id": "wh-0a1b2c3d4e5f", "event": "alert.firing", "state": "pending",
             "attempts": 2, "last_status": 503, "last_error": null,
             "next_attempt_at": "2026-11-30T10:00:04Z", "created_at": "2026-11-30T10:00:00Z",
             "delivered_at": null},
            {"id": 2, "webhook_id": "wh-0a1b2c3d4e5f", "event": "baseline.approved", "state": "failed",
             "attempts": 20, "last_status": null, "last_error": "connection refused",
             "next_attempt_at": "2026-11-30T09:00:00Z", "created_at": "2026-11-30T08:00:00Z",
             "delivered_at": null},
            {"id": 1, "webhook_id": "wh-0a1b2c3d4e5f", "event": "alert.resolved", "state": "delivered",
             "attempts": 1, "last_status": 200, "last_error": null,
             "next_attempt_at": "2026-11-30T07:00:00Z", "created_at": "2026-11-30T07:00:00Z",
             "delivered_at": "2026-11-30T07:00:01Z"}
        ]});
        check(
            &deliveries(&typed(v)),
            &[
                "┌────┬───────────────────┬───────────┬──────────┬────────────────────┬──────────────────────┬──────────────────────┬──────────────────────┐",
                "│ id ┆ event             ┆ state     ┆ attempts ┆ last answer        ┆ next attempt         ┆ created at           ┆ delivered at         │",
                "╞════╪═══════════════════╪═══════════╪══════════╪════════════════════╪══════════════════════╪══════════════════════╪══════════════════════╡",
                "│  3 ┆ alert.firing      ┆ pending   ┆        2 ┆ HTTP 503           ┆ 2026-11-30T10:00:04Z ┆ 2026-11-30T10:00:00Z ┆ -                    │",
                "│  2 ┆ baseline.approved ┆ failed    ┆       20 ┆ connection refused ┆ -                    ┆ 2026-11-30T08:00:00Z ┆ -                    │",
                "│  1 ┆ alert.resolved    ┆ delivered ┆        1 ┆ HTTP 200           ┆ -                    ┆ 2026-11-30T07:00:00Z ┆ 2026-11-30T07:00:01Z │",
                "└────┴───────────────────┴───────────┴──────────┴────────────────────┴──────────────────────┴──────────────────────┴──────────────────────┘",
            ],
        );
        assert_eq!(deliveries(&typed(json!({}))), "no deliveries yet");
    }
}
