//! Webhooks: the JSON events, their signature, and the worker delivering the outbox.
//!
//! An event is queued in the transaction of what it reports (an alert firing, an approval),
//! one delivery per subscribed webhook. The worker claims due deliveries with a lease (any
//! replica may run it; a delivery claimed by a process that died is taken over when its lease
//! ends), posts each with `X-Budgetd-Signature: sha256=<hex HMAC-SHA256 of the body>`, and on
//! anything but a 2xx answer tries again with a doubling backoff (1 s up to 10 min) until the
//! configured attempts are spent (`failed`). Receivers should expect an event more than once
//! (a receiver that answers after the lease ends, or a crash after the POST); the
//! `X-Budgetd-Delivery` header identifies a delivery. One receiver gets its deliveries in the
//! order they were queued, except that a retried delivery comes after those queued since.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use crate::config::FeedbackSettings;
use crate::store::feedback::{Alert, DeliveryJob, WebhookEvent};
use crate::store::Store;

/// `sha256=<hex HMAC-SHA256 of body with secret>`.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn event(name: &str, text: String, extra: serde_json::Value) -> WebhookEvent {
    WebhookEvent::new(name, text, extra)
}

fn place(a: &Alert) -> String {
    match (a.chain.as_str(), a.segment.as_str()) {
        ("", _) => String::new(),
        (c, "") => format!(" on {c}"),
        (c, s) => format!(" on {c} {s}"),
    }
}

/// `alert.firing` or `alert.resolved` for `a`.
pub fn alert_event(a: &Alert) -> WebhookEvent {
    let firing = a.state == "firing";
    let name = if firing {
        "alert.firing"
    } else {
        "alert.resolved"
    };
    let text = if firing {
        format!(
            "[budgetd] FIRING {}{}: {} > {}",
            a.rule,
            place(a),
            a.value,
            a.threshold
        )
    } else {
        format!("[budgetd] resolved {}{}", a.rule, place(a))
    };
    event(
        name,
        text,
        json!({"alert": {
            "id": a.id, "rule": a.rule, "chain": a.chain, "segment": a.segment,
            "state": a.state, "value": a.value, "threshold": a.threshold,
            "since": a.since, "resolved_at": a.resolved_at, "detail": a.detail,
        }}),
    )
}

/// `agent.nack`: agents refused a chain's config (from the `nack` alert that says so).
pub fn nack_event(a: &Alert) -> WebhookEvent {
    let text = format!(
        "[budgetd] {} agent(s) refused the config{} (revision {}): {}",
        a.value,
        place(a),
        a.detail["revision"],
        a.detail["error"].as_str().unwrap_or("")
    );
    event(
        "agent.nack",
        text,
        json!({"chain": a.chain, "nack": a.detail}),
    )
}

/// Sends due deliveries.
#[derive(Clone)]
pub struct Deliverer {
    store: std::sync::Arc<dyn Store>,
    client: reqwest::Client,
    timeout: Duration,
    max_attempts: i64,
}

impl Deliverer {
    pub fn new(store: std::sync::Arc<dyn Store>, settings: &FeedbackSettings) -> Self {
        let timeout = Duration::from_secs(settings.webhook_timeout_secs);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Self {
            store,
            client,
            timeout,
            max_attempts: i64::from(settings.webhook_max_attempts),
        }
    }

    async fn send(&self, job: &DeliveryJob) -> Result<u16, (Option<u16>, String)> {
        let answer = self
            .client
            .post(&job.url)
            .header("content-type", "application/json")
            .header("x-budgetd-event", &job.event)
            .header("x-budgetd-delivery", job.id.to_string())
            .header(
                "x-budgetd-signature",
                signature(&job.secret, job.body.as_bytes()),
            )
            .body(job.body.clone())
            .send()
            .await
            .map_err(|e| (None, e.without_url().to_string()))?;
        let status = answer.status().as_u16();
        if answer.status().is_success() {
            Ok(status)
        } else {
            Err((Some(status), format!("answered HTTP {status}")))
        }
    }

    async fn deliver(&self, job: DeliveryJob) {
        let result = self.send(&job).await;
        let stored = match result {
            Ok(status) => {
                self.store
                    .delivered(job.id, i64::from(status), &crate::clock::now())
                    .await
            }
            Err((status, error)) => {
                let attempts = job.attempts + 1;
                let retry_at = (attempts < self.max_attempts).then(|| {
                    let secs = 1u64 << attempts.clamp(0, 10);
                    crate::clock::after(Duration::from_secs(secs.min(600)))
                });
                tracing::warn!(delivery = job.id, event = %job.event, attempts, error = %error, gave_up = retry_at.is_none(), "webhook delivery failed");
                self.store
                    .delivery_failed(job.id, status.map(i64::from), &error, retry_at.as_deref())
                    .await
            }
        };
        if let Err(e) = stored {
            tracing::warn!(delivery = job.id, error = %e, "failed to record a webhook delivery; its lease will expire and it is sent again");
        }
    }

    /// Claims and sends what is due; returns how many were tried.
    pub async fn run_once(&self) -> usize {
        let lease = crate::clock::after(self.timeout * 2 + Duration::from_secs(5));
        let jobs = match self
            .store
            .claim_deliveries(&crate::clock::now(), &lease, 32)
            .await
        {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(error = %e, "failed to claim webhook deliveries; will retry");
                return 0;
            }
        };
        let n = jobs.len();
        // One receiver gets its events one after another, in the order they were queued;
        // receivers are served side by side.
        let mut by_hook: std::collections::BTreeMap<String, Vec<DeliveryJob>> = Default::default();
        for job in jobs {
            by_hook.entry(job.webhook_id.clone()).or_default().push(job);
        }
        futures_util::future::join_all(by_hook.into_values().map(|jobs| async move {
            for job in jobs {
                self.deliver(job).await;
            }
        }))
        .await;
        n
    }

    pub fn spawn(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                if me.run_once().await == 0 {
                    tokio::time::sleep(every).await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_sha256_of_the_body() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature("Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn alert_events_carry_the_numbers_and_a_text() {
        let a = Alert {
            id: 7,
            rule: "amplification".into(),
            chain: "checkout".into(),
            segment: "order->inventory".into(),
            state: "firing".into(),
            value: 2.4,
            threshold: 2.0,
            detail: json!({"window": "1m"}),
            since: "2026-12-01T00:00:00.000Z".into(),
            resolved_at: None,
        };
        let e = alert_event(&a);
        assert_eq!(e.event, "alert.firing");
        let body: serde_json::Value = serde_json::from_str(&e.body).unwrap();
        assert_eq!(body["event"], "alert.firing");
        assert_eq!(body["alert"]["value"], 2.4);
        assert_eq!(body["alert"]["segment"], "order->inventory");
        assert_eq!(
            body["text"],
            "[budgetd] FIRING amplification on checkout order->inventory: 2.4 > 2"
        );
    }
}
