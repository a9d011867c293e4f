//! [`Feedback`] over SQL: rollups written as multi-row upserts, alerts fired and resolved once
//! (a partial unique index on firing rows), webhooks and their delivery outbox.

use std::collections::HashMap;

use async_trait::async_trait;
use base64::Engine as _;
use budget_core::feedback::Counts;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;
use sqlx::{Any, Row};

use super::fleet::json_ids;
use super::tx::{commit, replayed, write_audit};
use super::{internal, placeholders, rows_query, SqlStore, Tx};
use crate::store::feedback::{
    Alert, Delivery, DeliveryJob, EventsOf, Feedback, LastReport, Nacking, NewAlert, Rollup,
    Webhook, WebhookEvent,
};
use crate::store::rollouts::CanaryHealthRow;
use crate::store::{Audit, StoreError, StoreResult};

/// The agents refusing a revision they have not accepted since, through the index of the
/// agents that ever refused one (`agents_nacking`, migration 0017), not the whole fleet.
pub(super) const NACKING: &str = "SELECT a.agent_id, a.chains, a.nack_revision, a.nack_error \
     FROM agents a LEFT JOIN agent_cohorts c ON c.id = a.cohort \
     WHERE a.nack_revision IS NOT NULL AND a.nack_revision > COALESCE(c.acked, a.acked) \
     ORDER BY a.agent_id LIMIT $1";

const ROLLUP_COLUMNS: &str = "chain, segment, minute, writer, calls, attempts, retries_deadline, \
    retries_unavailable, ok, deadline_exceeded, unavailable, business_error, budget_exhausted, \
    retry_refused_no_key, latency_hdr, agent_count, agents, updated_at";
const ROLLUP_WIDTH: usize = 18;
/// Rows per statement: 500 × 18 binds stays far below both backends' limits.
const ROLLUP_CHUNK: usize = 500;
/// Agents' last reports per statement (3 binds each).
const REPORT_CHUNK: usize = 1_000;

const ALERT_COLUMNS: &str =
    "id, rule, chain, segment, state, value, threshold, detail, since, resolved_at";
const DELIVERY_COLUMNS: &str = "id, webhook_id, event, state, attempts, last_status, last_error, \
    next_attempt_at, created_at, delivered_at";

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u64_of(row: &AnyRow, col: &str) -> StoreResult<u64> {
    Ok(u64::try_from(row.try_get::<i64, _>(col)?).unwrap_or(0))
}

/// The counter columns of rollups and canary health, in [`Counts`]' order.
pub(super) const COUNT_COLUMNS: [&str; 10] = [
    "calls",
    "attempts",
    "retries_deadline",
    "retries_unavailable",
    "ok",
    "deadline_exceeded",
    "unavailable",
    "business_error",
    "budget_exhausted",
    "retry_refused_no_key",
];

/// [`Counts`] in [`COUNT_COLUMNS`], as a row holds them.
pub(super) fn counts_from_row(row: &AnyRow) -> StoreResult<Counts> {
    let [calls, attempts, retries_deadline, retries_unavailable, ok, deadline_exceeded, unavailable, business_error, budget_exhausted, retry_refused_no_key] =
        COUNT_COLUMNS;
    Ok(Counts {
        calls: u64_of(row, calls)?,
        attempts: u64_of(row, attempts)?,
        retries_deadline: u64_of(row, retries_deadline)?,
        retries_unavailable: u64_of(row, retries_unavailable)?,
        ok: u64_of(row, ok)?,
        deadline_exceeded: u64_of(row, deadline_exceeded)?,
        unavailable: u64_of(row, unavailable)?,
        business_error: u64_of(row, business_error)?,
        budget_exhausted: u64_of(row, budget_exhausted)?,
        retry_refused_no_key: u64_of(row, retry_refused_no_key)?,
    })
}

/// [`Counts`] in [`COUNT_COLUMNS`]' order, as bound.
pub(super) fn counts_values(c: &Counts) -> [i64; 10] {
    [
        c.calls,
        c.attempts,
        c.retries_deadline,
        c.retries_unavailable,
        c.ok,
        c.deadline_exceeded,
        c.unavailable,
        c.business_error,
        c.budget_exhausted,
        c.retry_refused_no_key,
    ]
    .map(i64_of)
}

fn rollup_from_row(row: &AnyRow) -> StoreResult<Rollup> {
    let hdr: String = row.try_get("latency_hdr")?;
    let agents: String = row.try_get("agents")?;
    Ok(Rollup {
        chain: row.try_get("chain")?,
        segment: row.try_get("segment")?,
        minute: row.try_get("minute")?,
        writer: row.try_get("writer")?,
        counts: counts_from_row(row)?,
        latency_hdr: base64::engine::general_purpose::STANDARD
            .decode(hdr)
            .map_err(internal)?,
        agent_count: u64_of(row, "agent_count")?,
        agents: serde_json::from_str(&agents).map_err(internal)?,
        updated_at: row.try_get("updated_at")?,
    })
}

fn float_of(row: &AnyRow, col: &str) -> StoreResult<f64> {
    let text: String = row.try_get(col)?;
    text.parse().map_err(internal)
}

fn alert_from_row(row: &AnyRow) -> StoreResult<Alert> {
    let detail: String = row.try_get("detail")?;
    Ok(Alert {
        id: row.try_get("id")?,
        rule: row.try_get("rule")?,
        chain: row.try_get("chain")?,
        segment: row.try_get("segment")?,
        state: row.try_get("state")?,
        value: float_of(row, "value")?,
        threshold: float_of(row, "threshold")?,
        detail: serde_json::from_str(&detail).map_err(internal)?,
        since: row.try_get("since")?,
        resolved_at: row.try_get("resolved_at")?,
    })
}

fn webhook_from_row(row: &AnyRow) -> StoreResult<Webhook> {
    let events: String = row.try_get("events")?;
    Ok(Webhook {
        hook: budget_api::feedback::Webhook {
            id: row.try_get("id")?,
            url: row.try_get("url")?,
            events: serde_json::from_str(&events).map_err(internal)?,
            created_at: row.try_get("created_at")?,
            created_by: row.try_get("created_by")?,
        },
        secret: row.try_get("secret")?,
    })
}

fn delivery_from_row(row: &AnyRow) -> StoreResult<Delivery> {
    Ok(Delivery {
        id: row.try_get("id")?,
        webhook_id: row.try_get("webhook_id")?,
        event: row.try_get("event")?,
        state: row.try_get("state")?,
        attempts: row.try_get("attempts")?,
        last_status: row.try_get("last_status")?,
        last_error: row.try_get("last_error")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        created_at: row.try_get("created_at")?,
        delivered_at: row.try_get("delivered_at")?,
    })
}

/// Queues `event` for every webhook subscribed to it (or to `*`), in `tx`.
pub(super) async fn enqueue_in(tx: &mut Tx, event: &WebhookEvent, at: &str) -> StoreResult<u64> {
    let done = sqlx::query(
        "INSERT INTO webhook_deliveries (webhook_id, event, body, state, attempts, next_attempt_at, created_at) \
         SELECT id, $1, $2, 'pending', 0, $3, $3 FROM webhooks \
         WHERE events LIKE '%\"*\"%' OR events LIKE $4",
    )
    .bind(&event.event)
    .bind(&event.body)
    .bind(at)
    .bind(format!("%\"{}\"%", event.event))
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected())
}

async fn alert_by_id(tx: &mut Tx, id: i64) -> StoreResult<Alert> {
    let row = sqlx::query(&format!("SELECT {ALERT_COLUMNS} FROM alerts WHERE id = $1"))
        .bind(id)
        .fetch_one(&mut **tx)
        .await?;
    alert_from_row(&row)
}

/// Runs `change` — an `INSERT` or `UPDATE` of one alert row `… RETURNING id` — in a
/// transaction; when it touched a row, loads that alert, queues its webhook `events` and
/// commits. `None` (nothing written) when it touched none.
async fn change_alert<'q>(
    store: &SqlStore,
    change: Query<'q, Any, AnyArguments<'q>>,
    at: &str,
    events: &EventsOf,
) -> StoreResult<Option<Alert>> {
    let mut tx = store.begin().await?;
    let id: Option<i64> = change
        .fetch_optional(&mut *tx)
        .await?
        .map(|r| r.try_get(0))
        .transpose()?;
    let Some(id) = id else {
        return Ok(None);
    };
    let stored = alert_by_id(&mut tx, id).await?;
    for event in events(&stored) {
        enqueue_in(&mut tx, &event, at).await?;
    }
    tx.commit().await?;
    Ok(Some(stored))
}

#[async_trait]
impl Feedback for SqlStore {
    async fn write_rollups(
        &self,
        rows: &[Rollup],
        health: &[CanaryHealthRow],
        reports: &[LastReport],
    ) -> StoreResult<()> {
        if rows.is_empty() && health.is_empty() && reports.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        for chunk in rows.chunks(ROLLUP_CHUNK) {
            let mut sql = format!(
                "INSERT INTO report_rollups ({ROLLUP_COLUMNS}) VALUES {}",
                placeholders(self.backend, chunk.len(), ROLLUP_WIDTH)
            );
            sql.push_str(
                " ON CONFLICT (chain, segment, minute, writer) DO UPDATE SET calls = excluded.calls, \
                 attempts = excluded.attempts, retries_deadline = excluded.retries_deadline, \
                 retries_unavailable = excluded.retries_unavailable, ok = excluded.ok, \
                 deadline_exceeded = excluded.deadline_exceeded, unavailable = excluded.unavailable, \
                 business_error = excluded.business_error, budget_exhausted = excluded.budget_exhausted, \
                 retry_refused_no_key = excluded.retry_refused_no_key, latency_hdr = excluded.latency_hdr, \
                 agent_count = excluded.agent_count, agents = excluded.agents, updated_at = excluded.updated_at",
            );
            let mut q = rows_query(&sql, chunk.len(), ROLLUP_CHUNK);
            for r in chunk {
                let c = &r.counts;
                q = q
                    .bind(r.chain.clone())
                    .bind(r.segment.clone())
                    .bind(r.minute)
                    .bind(r.writer.clone())
                    .bind(i64_of(c.calls))
                    .bind(i64_of(c.attempts))
                    .bind(i64_of(c.retries_deadline))
                    .bind(i64_of(c.retries_unavailable))
                    .bind(i64_of(c.ok))
                    .bind(i64_of(c.deadline_exceeded))
                    .bind(i64_of(c.unavailable))
                    .bind(i64_of(c.business_error))
                    .bind(i64_of(c.budget_exhausted))
                    .bind(i64_of(c.retry_refused_no_key))
                    .bind(base64::engine::general_purpose::STANDARD.encode(&r.latency_hdr))
                    .bind(i64_of(r.agent_count))
                    .bind(serde_json::to_string(&r.agents).map_err(internal)?)
                    .bind(r.updated_at.clone());
            }
            q.execute(&mut *tx).await?;
        }
        super::rollouts::put_health_in(&mut tx, self.backend, health).await?;
        // An id is written only over another: when another replica stored the report since
        // it was looked for or sent, its row (locked until that replica commits, on
        // PostgreSQL) holds this id, and nothing is written. One statement per chunk, in the
        // callers' order of agents (rows locked in one order on every replica); every chunk
        // before the conflicts are told, so that all are.
        let mut unwritten: Vec<&LastReport> = Vec::new();
        for chunk in reports.chunks(REPORT_CHUNK) {
            let sql = format!(
                "INSERT INTO agent_reports (agent_id, report_id, stored_ms) VALUES {} \
                 ON CONFLICT (agent_id) DO UPDATE SET report_id = excluded.report_id, \
                 stored_ms = excluded.stored_ms \
                 WHERE agent_reports.report_id <> excluded.report_id RETURNING agent_id",
                placeholders(self.backend, chunk.len(), 3)
            );
            let mut q = rows_query(&sql, chunk.len(), REPORT_CHUNK);
            for r in chunk {
                q = q
                    .bind(r.agent_id.clone())
                    .bind(r.report_id.clone())
                    .bind(r.stored_ms);
            }
            let written: std::collections::HashSet<String> = q
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<Result<_, _>>()?;
            unwritten.extend(chunk.iter().filter(|r| !written.contains(&r.agent_id)));
        }
        if !unwritten.is_empty() {
            let first_sends: Vec<String> = unwritten
                .iter()
                .filter(|r| !r.resent)
                .map(|r| r.agent_id.clone())
                .collect();
            return Err(StoreError::ReportStored { first_sends });
        }
        tx.commit().await?;
        Ok(())
    }

    async fn last_reports(&self, agents: &[String]) -> StoreResult<HashMap<String, String>> {
        if agents.is_empty() {
            return Ok(HashMap::new());
        }
        let rows = sqlx::query(&format!(
            "SELECT agent_id, report_id FROM agent_reports WHERE agent_id IN ({})",
            json_ids(self.backend, 1)
        ))
        .bind(serde_json::to_string(agents).map_err(internal)?)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect()
    }

    async fn writer_rollups(&self, writer: &str, from: i64) -> StoreResult<Vec<Rollup>> {
        let rows = sqlx::query(&format!(
            "SELECT {ROLLUP_COLUMNS} FROM report_rollups WHERE writer = $1 AND minute >= $2"
        ))
        .bind(writer)
        .bind(from)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rollup_from_row).collect()
    }

    async fn read_rollups(&self, chain: &str, from: i64, to: i64) -> StoreResult<Vec<Rollup>> {
        let rows = sqlx::query(&format!(
            "SELECT {ROLLUP_COLUMNS} FROM report_rollups WHERE chain = $1 AND minute >= $2 AND minute < $3 \
             ORDER BY segment, minute, writer"
        ))
        .bind(chain)
        .bind(from)
        .bind(to)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(rollup_from_row).collect()
    }

    async fn reporting_chains(&self, from: i64) -> StoreResult<Vec<String>> {
        let rows = sqlx::query(
            "SELECT DISTINCT chain FROM report_rollups WHERE minute >= $1 ORDER BY chain",
        )
        .bind(from)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| r.try_get(0).map_err(StoreError::from))
            .collect()
    }

    async fn expire_rollups(&self, before: i64) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM report_rollups WHERE minute < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        sqlx::query("DELETE FROM agent_reports WHERE stored_ms < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn fire_alert(
        &self,
        alert: &NewAlert,
        at: &str,
        events: &EventsOf,
    ) -> StoreResult<Option<Alert>> {
        let insert = sqlx::query(
            "INSERT INTO alerts (rule, chain, segment, state, value, threshold, detail, since) \
             VALUES ($1, $2, $3, 'firing', $4, $5, $6, $7) ON CONFLICT DO NOTHING RETURNING id",
        )
        .bind(&alert.rule)
        .bind(&alert.chain)
        .bind(&alert.segment)
        .bind(alert.value.to_string())
        .bind(alert.threshold.to_string())
        .bind(alert.detail.to_string())
        .bind(at);
        change_alert(self, insert, at, events).await
    }

    async fn resolve_alert(
        &self,
        rule: &str,
        chain: &str,
        segment: &str,
        at: &str,
        events: &EventsOf,
    ) -> StoreResult<Option<Alert>> {
        let update = sqlx::query(
            "UPDATE alerts SET state = 'resolved', resolved_at = $4 \
             WHERE rule = $1 AND chain = $2 AND segment = $3 AND state = 'firing' RETURNING id",
        )
        .bind(rule)
        .bind(chain)
        .bind(segment)
        .bind(at);
        change_alert(self, update, at, events).await
    }

    async fn nacking_agents(&self, limit: i64) -> StoreResult<Vec<Nacking>> {
        let rows = sqlx::query(NACKING)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let chains: String = r.try_get("chains")?;
                Ok(Nacking {
                    agent_id: r.try_get("agent_id")?,
                    chains: chains
                        .split(',')
                        .filter(|c| !c.is_empty())
                        .map(str::to_owned)
                        .collect(),
                    revision: r.try_get("nack_revision")?,
                    error: r
                        .try_get::<Option<String>, _>("nack_error")?
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    async fn list_alerts(&self, firing_only: bool, limit: i64) -> StoreResult<Vec<Alert>> {
        let rows = sqlx::query(&format!(
            "SELECT {ALERT_COLUMNS} FROM alerts WHERE ($1 = 0 OR state = 'firing') ORDER BY id DESC LIMIT $2"
        ))
        .bind(i64::from(firing_only))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(alert_from_row).collect()
    }

    async fn create_webhook(
        &self,
        hook: &Webhook,
        audit: Audit,
    ) -> StoreResult<budget_api::feedback::Webhook> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        sqlx::query(
            "INSERT INTO webhooks (id, url, secret, events, created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&hook.hook.id)
        .bind(&hook.hook.url)
        .bind(&hook.secret)
        .bind(serde_json::to_string(&hook.hook.events).map_err(internal)?)
        .bind(&hook.hook.created_at)
        .bind(&hook.hook.created_by)
        .execute(&mut *tx)
        .await?;
        write_audit(&mut tx, &audit).await?;
        commit(tx, hook.hook.clone()).await
    }

    async fn list_webhooks(&self) -> StoreResult<Vec<Webhook>> {
        let rows = sqlx::query(
            "SELECT id, url, secret, events, created_at, created_by FROM webhooks ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(webhook_from_row).collect()
    }

    async fn delete_webhook(&self, id: &str, audit: Audit) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        sqlx::query("DELETE FROM webhook_deliveries WHERE webhook_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let done = sqlx::query("DELETE FROM webhooks WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let deleted = done.rows_affected() > 0;
        if deleted {
            write_audit(&mut tx, &audit).await?;
        }
        commit(tx, deleted).await
    }

    async fn enqueue_event(&self, event: &WebhookEvent, at: &str) -> StoreResult<u64> {
        let mut tx = self.begin().await?;
        let n = enqueue_in(&mut tx, event, at).await?;
        tx.commit().await?;
        Ok(n)
    }

    async fn claim_deliveries(
        &self,
        now: &str,
        lease_until: &str,
        limit: i64,
    ) -> StoreResult<Vec<DeliveryJob>> {
        let mut tx = self.begin().await?;
        let ids: Vec<i64> = sqlx::query(
            "UPDATE webhook_deliveries SET locked_until = $2 WHERE id IN ( \
               SELECT id FROM webhook_deliveries WHERE state = 'pending' AND next_attempt_at <= $1 \
               AND (locked_until IS NULL OR locked_until < $1) ORDER BY id LIMIT $3) \
             AND state = 'pending' AND (locked_until IS NULL OR locked_until < $1) RETURNING id",
        )
        .bind(now)
        .bind(lease_until)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
        let mut jobs = Vec::with_capacity(ids.len());
        for id in ids {
            let row = sqlx::query(
                "SELECT d.id, d.webhook_id, w.url, w.secret, d.event, d.body, d.attempts FROM webhook_deliveries d \
                 JOIN webhooks w ON w.id = d.webhook_id WHERE d.id = $1",
            )
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
            jobs.push(DeliveryJob {
                id: row.try_get("id")?,
                webhook_id: row.try_get("webhook_id")?,
                url: row.try_get("url")?,
                secret: row.try_get("secret")?,
                event: row.try_get("event")?,
                body: row.try_get("body")?,
                attempts: row.try_get("attempts")?,
            });
        }
        tx.commit().await?;
        Ok(jobs)
    }

    async fn delivered(&self, id: i64, status: i64, at: &str) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET state = 'delivered', attempts = attempts + 1, last_status = $2, \
             last_error = NULL, delivered_at = $3, locked_until = NULL WHERE id = $1",
        )
        .bind(id)
        .bind(status)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn delivery_failed(
        &self,
        id: i64,
        status: Option<i64>,
        error: &str,
        retry_at: Option<&str>,
    ) -> StoreResult<()> {
        sqlx::query(
            "UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = $2, last_error = $3, \
             state = CASE WHEN $4 = 1 THEN 'pending' ELSE 'failed' END, \
             next_attempt_at = COALESCE($5, next_attempt_at), locked_until = NULL WHERE id = $1",
        )
        .bind(id)
        .bind(status)
        .bind(error)
        .bind(i64::from(retry_at.is_some()))
        .bind(retry_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn list_deliveries(&self, webhook_id: &str, limit: i64) -> StoreResult<Vec<Delivery>> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY id DESC LIMIT $2"
        ))
        .bind(webhook_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }
}
