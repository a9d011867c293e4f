//! [`Fleet`] over SQL: agents' entries and the tokens they are bound to.

use async_trait::async_trait;
use sqlx::Row;

use super::rows::{agent_from_row, AGENT_SELECT};
use super::{internal, placeholders, Backend, SqlStore};

/// Agents written by one statement (13 columns each: 13 000 binds).
const AGENT_CHUNK: usize = 1000;
use crate::store::{AgentClaim, AgentCursor, AgentProgress, AgentStatus, Fleet, StoreResult};

#[async_trait]
impl Fleet for SqlStore {
    async fn claim_agent(&self, agent: &AgentStatus) -> StoreResult<AgentClaim> {
        // Most Watch streams are reconnects of an agent bound to the same token: a read.
        let row = sqlx::query(&format!(
            "{AGENT_SELECT} WHERE a.agent_id = $1 AND a.token_hash = $2"
        ))
        .bind(&agent.agent_id)
        .bind(&agent.token_id)
        .bind(&agent.client)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(row) = row {
            return Ok(AgentClaim::Bound(Box::new(agent_from_row(&row)?)));
        }
        // New, unbound, or bound to a token that no longer exists: take it, in one statement
        // so two tokens racing for the id cannot both win (on any replica).
        let claimed = sqlx::query(
            "INSERT INTO agents (agent_id, service, labels, chains, replica, connected, delivered, acked, nack_revision, nack_error, first_seen, last_seen, token_hash, client) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
             ON CONFLICT (agent_id) DO UPDATE SET token_hash = excluded.token_hash, service = excluded.service, client = excluded.client, \
               labels = excluded.labels, replica = excluded.replica, connected = excluded.connected, \
               last_seen = excluded.last_seen \
             WHERE agents.token_hash IS NULL OR agents.token_hash = excluded.token_hash \
               OR NOT EXISTS (SELECT 1 FROM api_tokens t WHERE t.token_hash = agents.token_hash) \
             RETURNING agent_id",
        )
        .bind(&agent.agent_id)
        .bind(&agent.service)
        .bind(serde_json::to_string(&agent.labels).map_err(internal)?)
        .bind(agent.chains.join(","))
        .bind(&agent.replica)
        .bind(i64::from(agent.connected))
        .bind(agent.delivered)
        .bind(agent.acked)
        .bind(agent.nack_revision)
        .bind(agent.nack_error.clone())
        .bind(&agent.first_seen)
        .bind(&agent.last_seen)
        .bind(&agent.token_id)
        .bind(&agent.client)
        .fetch_optional(&self.pool)
        .await?;
        if claimed.is_none() {
            return Ok(AgentClaim::Taken);
        }
        let row = sqlx::query(&format!("{AGENT_SELECT} WHERE a.agent_id = $1"))
            .bind(&agent.agent_id)
            .fetch_one(&self.pool)
            .await?;
        Ok(AgentClaim::Bound(Box::new(agent_from_row(&row)?)))
    }

    async fn agent_token(&self, agent_id: &str) -> StoreResult<Option<String>> {
        let row = sqlx::query(
            "SELECT a.token_hash FROM agents a JOIN api_tokens t ON t.token_hash = a.token_hash \
             WHERE a.agent_id = $1",
        )
        .bind(agent_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| r.try_get(0)).transpose()?)
    }

    async fn upsert_agents(&self, agents: &[AgentStatus]) -> StoreResult<()> {
        if agents.is_empty() {
            return Ok(());
        }
        // One statement per 1 000 agents, however many changed: a publication delivered to a
        // whole fleet costs a few statements, not one per agent.
        let mut tx = self.begin().await?;
        for chunk in agents.chunks(AGENT_CHUNK) {
            // An entry bound to another token is never overwritten (nor one that was expired
            // and claimed by another token since).
            let sql = format!(
                "INSERT INTO agents (agent_id, service, labels, chains, replica, connected, delivered, acked, nack_revision, nack_error, first_seen, last_seen, token_hash, client) \
                 VALUES {} \
                 ON CONFLICT (agent_id) DO UPDATE SET service = excluded.service, client = excluded.client, labels = excluded.labels, \
                   chains = excluded.chains, replica = excluded.replica, connected = excluded.connected, \
                   delivered = excluded.delivered, acked = excluded.acked, nack_revision = excluded.nack_revision, \
                   nack_error = excluded.nack_error, last_seen = excluded.last_seen \
                 WHERE agents.token_hash = excluded.token_hash",
                placeholders(self.backend, chunk.len(), 14)
            );
            let mut q = sqlx::query(&sql);
            for a in chunk {
                q = q
                    .bind(a.agent_id.clone())
                    .bind(a.service.clone())
                    .bind(serde_json::to_string(&a.labels).map_err(internal)?)
                    .bind(a.chains.join(","))
                    .bind(a.replica.clone())
                    .bind(i64::from(a.connected))
                    .bind(a.delivered)
                    .bind(a.acked)
                    .bind(a.nack_revision)
                    .bind(a.nack_error.clone())
                    .bind(a.first_seen.clone())
                    .bind(a.last_seen.clone())
                    .bind(a.token_id.clone())
                    .bind(a.client.clone());
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn record_progress(&self, last_seen: &str, groups: &[AgentProgress]) -> StoreResult<()> {
        if groups.is_empty() {
            return Ok(());
        }
        // The ids travel as one JSON array: one bound parameter however many agents.
        let ids = match self.backend {
            Backend::Sqlite => "SELECT value FROM json_each($5)",
            Backend::Postgres => "SELECT jsonb_array_elements_text(CAST($5 AS jsonb))",
        };
        let sql = format!(
            "UPDATE agents SET delivered = $1, acked = $2, last_seen = $3 \
             WHERE token_hash = $4 AND agent_id IN ({ids})"
        );
        let mut tx = self.begin().await?;
        for group in groups {
            sqlx::query(&sql)
                .bind(group.delivered)
                .bind(group.acked)
                .bind(last_seen)
                .bind(&group.token_id)
                .bind(serde_json::to_string(&group.agent_ids).map_err(internal)?)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn list_agents(
        &self,
        seen_since: &str,
        after: Option<&AgentCursor>,
        limit: i64,
    ) -> StoreResult<Vec<AgentStatus>> {
        let (after_service, after_id) = after.map_or(("", ""), |(s, id)| (s, id));
        let rows = sqlx::query(&format!(
            "{AGENT_SELECT} WHERE a.last_seen >= $1 \
             AND ($2 = 0 OR a.service > $3 OR (a.service = $3 AND a.agent_id > $4)) \
             ORDER BY a.service, a.agent_id LIMIT $5"
        ))
        .bind(seen_since)
        .bind(i64::from(after.is_some()))
        .bind(after_service)
        .bind(after_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(agent_from_row).collect()
    }

    async fn expire_agents(&self, cutoff: &str) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM agents WHERE last_seen < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
