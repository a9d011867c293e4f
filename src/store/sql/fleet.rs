//! [`Fleet`] over SQL: agents' entries and the tokens they are bound to.

use async_trait::async_trait;
use sqlx::Row;

use super::rows::{agent_from_row, AGENT_SELECT};
use super::{internal, placeholders, rows_query, Backend, SqlStore, YIELD_AT_MOST};

/// Agents written by one statement (15 columns each: 15 000 binds).
const AGENT_CHUNK: usize = 1000;
use crate::store::{
    AgentClaim, AgentCursor, AgentProgress, AgentStatus, CohortProgress, Fleet, StoreResult,
};

#[async_trait]
impl Fleet for SqlStore {
    async fn claim_agents(&self, agents: &[AgentStatus]) -> StoreResult<Vec<AgentClaim>> {
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        let until = tokio::time::Instant::now() + YIELD_AT_MOST;
        let mut claims: Vec<Option<AgentClaim>> = vec![None; agents.len()];
        // Most Watch streams are reconnects of agents bound to the same token: one read.
        let ids: Vec<&str> = agents.iter().map(|a| a.agent_id.as_str()).collect();
        let mut stored = self.agents_by_id(&ids).await?;
        let mut unclaimed = Vec::new();
        for (i, agent) in agents.iter().enumerate() {
            match stored.remove(&agent.agent_id) {
                Some(row) if row.token_id == agent.token_id => {
                    claims[i] = Some(AgentClaim::Bound(Box::new(row)));
                }
                _ => unclaimed.push(i),
            }
        }
        // The agent's newest stream is this one: its process owns the entry from now on, and
        // a later write of a replica the agent left (its stream's end, a late flush) changes
        // nothing (`upsert_agents`, `record_progress`).
        self.own_agents(agents, &claims, until).await?;
        // New, unbound, or bound to a token that no longer exists: taken in one statement per
        // chunk, so two tokens racing for an id cannot both win (on any replica). A taken-over
        // entry keeps the revisions it showed and follows the old token's cohort no more.
        // In agent-id order, as every write of agents: two replicas writing the same agents
        // then lock their rows in one order and cannot deadlock (PostgreSQL).
        unclaimed.sort_by(|&x, &y| agents[x].agent_id.cmp(&agents[y].agent_id));
        let mut won = std::collections::HashSet::new();
        for chunk in unclaimed.chunks(AGENT_CHUNK) {
            self.after_transactions(until).await;
            let sql = format!(
                "INSERT INTO agents (agent_id, service, labels, chains, replica, connected, delivered, acked, nack_revision, nack_error, first_seen, last_seen, token_hash, client, process) \
                 VALUES {} \
                 ON CONFLICT (agent_id) DO UPDATE SET token_hash = excluded.token_hash, service = excluded.service, client = excluded.client, \
                   labels = excluded.labels, replica = excluded.replica, process = excluded.process, \
                   connected = excluded.connected, last_seen = excluded.last_seen, \
                   delivered = COALESCE((SELECT c.delivered FROM agent_cohorts c WHERE c.id = agents.cohort), agents.delivered), \
                   acked = COALESCE((SELECT c.acked FROM agent_cohorts c WHERE c.id = agents.cohort), agents.acked), \
                   cohort = NULL \
                 WHERE agents.token_hash IS NULL OR agents.token_hash = excluded.token_hash \
                   OR NOT EXISTS (SELECT 1 FROM api_tokens t WHERE t.token_hash = agents.token_hash) \
                 RETURNING agent_id",
                placeholders(self.backend, chunk.len(), 15)
            );
            let mut q = rows_query(&sql, chunk.len(), AGENT_CHUNK);
            for &i in chunk {
                let a = &agents[i];
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
                    .bind(a.client.clone())
                    .bind(a.process.clone());
            }
            for row in q.fetch_all(&self.pool).await? {
                won.insert(row.try_get::<String, _>(0)?);
            }
        }
        let won_ids: Vec<&str> = won.iter().map(String::as_str).collect();
        let mut claimed = self.agents_by_id(&won_ids).await?;
        for i in unclaimed {
            claims[i] = Some(match claimed.remove(&agents[i].agent_id) {
                Some(row) if won.contains(&agents[i].agent_id) => AgentClaim::Bound(Box::new(row)),
                _ => AgentClaim::Taken,
            });
        }
        Ok(claims
            .into_iter()
            .map(|c| c.unwrap_or(AgentClaim::Taken))
            .collect())
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

    async fn agent_labels(
        &self,
        agent_id: &str,
    ) -> StoreResult<Option<std::collections::BTreeMap<String, String>>> {
        let labels: Option<String> =
            sqlx::query_scalar("SELECT labels FROM agents WHERE agent_id = $1")
                .bind(agent_id)
                .fetch_optional(&self.pool)
                .await?;
        labels
            .map(|l| serde_json::from_str(&l).map_err(internal))
            .transpose()
    }

    async fn upsert_agents(&self, agents: &[AgentStatus]) -> StoreResult<()> {
        if agents.is_empty() {
            return Ok(());
        }
        // One statement per 1 000 agents, however many changed: a publication delivered to a
        // whole fleet costs a few statements, not one per agent.
        // In agent-id order: the rows are locked in one order on every replica (see
        // `claim_agents`).
        // One transaction per statement: a write that waits for SQLite's lock (an approval, an
        // upload) waits for one chunk, not for the whole fleet after an opening storm. Each row
        // stands alone, so a failure part-way leaves rows that are right, and the next flush
        // writes them all again.
        let mut agents: Vec<&AgentStatus> = agents.iter().collect();
        agents.sort_by(|x, y| x.agent_id.cmp(&y.agent_id));
        let until = tokio::time::Instant::now() + YIELD_AT_MOST;
        for chunk in agents.chunks(AGENT_CHUNK) {
            self.after_transactions(until).await;
            let mut tx = self.begin().await?;
            // An entry bound to another token is never overwritten (nor one that was expired
            // and claimed by another token since). The entry's own revisions are written: it
            // follows no cohort any more.
            let sql = format!(
                "INSERT INTO agents (agent_id, service, labels, chains, replica, connected, delivered, acked, nack_revision, nack_error, first_seen, last_seen, token_hash, client, process) \
                 VALUES {} \
                 ON CONFLICT (agent_id) DO UPDATE SET service = excluded.service, client = excluded.client, labels = excluded.labels, \
                   chains = excluded.chains, replica = excluded.replica, process = excluded.process, \
                   connected = excluded.connected, \
                   delivered = excluded.delivered, acked = excluded.acked, nack_revision = excluded.nack_revision, \
                   nack_error = excluded.nack_error, last_seen = excluded.last_seen, cohort = NULL \
                 WHERE agents.token_hash = excluded.token_hash \
                   AND (agents.process = excluded.process OR agents.process IS NULL OR agents.process = '')",
                placeholders(self.backend, chunk.len(), 15)
            );
            let mut q = rows_query(&sql, chunk.len(), AGENT_CHUNK);
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
                    .bind(a.client.clone())
                    .bind(a.process.clone());
            }
            q.execute(&mut *tx).await?;
            tx.commit().await?;
        }
        Ok(())
    }

    async fn record_progress(
        &self,
        process: &str,
        last_seen: Option<&str>,
        cohorts: &[CohortProgress],
        groups: &[AgentProgress],
    ) -> StoreResult<()> {
        if cohorts.is_empty() && groups.is_empty() {
            return Ok(());
        }
        // Without a heartbeat, last_seen (and its index) is left alone: after a publication
        // only the cohort's row changes, and the revisions of the agents not at its own.
        // Only the entries this process owns (the agents' newest streams are here).
        let seen = if last_seen.is_some() {
            ", last_seen = $5"
        } else {
            ""
        };
        let ids = json_ids(self.backend, 3);
        let join = format!(
            "UPDATE agents SET cohort = $1{seen} WHERE token_hash = $2 AND agent_id IN ({ids}) \
             AND (process = $4 OR process IS NULL OR process = '')"
        );
        let seen = if last_seen.is_some() {
            ", last_seen = $6"
        } else {
            ""
        };
        let ids = json_ids(self.backend, 4);
        let own = format!(
            "UPDATE agents SET delivered = $1, acked = $2, cohort = NULL{seen} \
             WHERE token_hash = $3 AND agent_id IN ({ids}) \
             AND (process = $5 OR process IS NULL OR process = '')"
        );
        let updated_at = crate::clock::now();
        self.after_transactions(tokio::time::Instant::now() + YIELD_AT_MOST)
            .await;
        let mut tx = self.begin().await?;
        if self.backend == Backend::Postgres {
            // The statements below lock the agents' rows group by group, in an order of their
            // own; another replica writing some of the same agents (an agent streaming from
            // both) could lock them in another, and the two would deadlock. Locked first, in
            // agent-id order, as every other write of agents takes them: byte order (`COLLATE
            // "C"`), as Rust sorts the ids of the multi-row writes, whatever the database's
            // collation.
            let mut ids: Vec<&str> = cohorts
                .iter()
                .flat_map(|c| c.joining.iter())
                .chain(groups.iter().flat_map(|g| g.agent_ids.iter()))
                .map(String::as_str)
                .collect();
            ids.sort_unstable();
            sqlx::query(&format!(
                "SELECT agent_id FROM agents WHERE agent_id IN ({}) ORDER BY agent_id COLLATE \"C\" FOR UPDATE",
                json_ids(self.backend, 1)
            ))
            .bind(serde_json::to_string(&ids).map_err(internal)?)
            .execute(&mut *tx)
            .await?;
        }
        for cohort in cohorts {
            // Written whenever agents join, so that they never follow a cohort that was
            // removed meanwhile (expire_agents).
            sqlx::query(
                "INSERT INTO agent_cohorts (id, delivered, acked, updated_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (id) DO UPDATE SET delivered = excluded.delivered, \
                   acked = excluded.acked, updated_at = excluded.updated_at",
            )
            .bind(&cohort.id)
            .bind(cohort.delivered)
            .bind(cohort.acked)
            .bind(&updated_at)
            .execute(&mut *tx)
            .await?;
            if cohort.joining.is_empty() {
                continue;
            }
            let mut q = sqlx::query(&join)
                .bind(&cohort.id)
                .bind(&cohort.token_id)
                .bind(serde_json::to_string(&cohort.joining).map_err(internal)?)
                .bind(process);
            if let Some(at) = last_seen {
                q = q.bind(at);
            }
            q.execute(&mut *tx).await?;
        }
        for group in groups {
            let mut q = sqlx::query(&own)
                .bind(group.delivered)
                .bind(group.acked)
                .bind(&group.token_id)
                .bind(serde_json::to_string(&group.agent_ids).map_err(internal)?)
                .bind(process);
            if let Some(at) = last_seen {
                q = q.bind(at);
            }
            q.execute(&mut *tx).await?;
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

    async fn cohort_sizes(
        &self,
        cohorts: &[String],
    ) -> StoreResult<std::collections::HashMap<String, i64>> {
        if cohorts.is_empty() {
            return Ok(Default::default());
        }
        let rows = sqlx::query(&format!(
            "SELECT cohort, COUNT(*) AS n FROM agents WHERE cohort IN ({}) GROUP BY cohort",
            json_ids(self.backend, 1)
        ))
        .bind(serde_json::to_string(cohorts).map_err(internal)?)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("cohort")?, r.try_get("n")?)))
            .collect()
    }

    async fn not_following(&self, cohort: &str, agent_ids: &[String]) -> StoreResult<Vec<String>> {
        if agent_ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT agent_id FROM agents WHERE agent_id IN ({}) \
             AND (cohort IS NULL OR cohort <> $1)",
            json_ids(self.backend, 2)
        ))
        .bind(cohort)
        .bind(serde_json::to_string(agent_ids).map_err(internal)?)
        .fetch_all(&self.pool)
        .await?;
        Ok(ids)
    }

    async fn expire_agents(&self, cutoff: &str) -> StoreResult<u64> {
        // PostgreSQL: the rows locked in agent-id order, as every write of agents takes them.
        let sql = match self.backend {
            Backend::Sqlite => "DELETE FROM agents WHERE last_seen < $1",
            Backend::Postgres => {
                "DELETE FROM agents WHERE agent_id IN (SELECT agent_id FROM agents \
                 WHERE last_seen < $1 ORDER BY agent_id COLLATE \"C\" FOR UPDATE)"
            }
        };
        let done = sqlx::query(sql).bind(cutoff).execute(&self.pool).await?;
        // A cohort that changed since the cutoff may be about to be joined (its replica
        // writes it in the same transaction as the agents joining it). One scan of the
        // agents: their cohort is not indexed.
        sqlx::query(
            "DELETE FROM agent_cohorts WHERE updated_at < $1 \
             AND id NOT IN (SELECT cohort FROM agents WHERE cohort IS NOT NULL)",
        )
        .bind(cutoff)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected())
    }

    async fn beat_replica(
        &self,
        process: &str,
        replica: &str,
        at: &str,
        forget_before: &str,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO replica_beats (process, replica, beat_at) VALUES ($1, $2, $3) \
             ON CONFLICT (process) DO UPDATE SET beat_at = excluded.beat_at",
        )
        .bind(process)
        .bind(replica)
        .bind(at)
        .execute(&self.pool)
        .await?;
        sqlx::query("DELETE FROM replica_beats WHERE beat_at < $1")
            .bind(forget_before)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn live_processes(&self, since: &str) -> StoreResult<std::collections::HashSet<String>> {
        let live: Vec<String> =
            sqlx::query_scalar("SELECT process FROM replica_beats WHERE beat_at >= $1")
                .bind(since)
                .fetch_all(&self.pool)
                .await?;
        Ok(live.into_iter().collect())
    }
}

impl SqlStore {
    /// Gives the entries of the `agents` already bound to their token (`claims`) to the process
    /// and replica of the stream opening now, connected: one statement per token and chunk, the
    /// rows locked in agent-id order.
    async fn own_agents(
        &self,
        agents: &[AgentStatus],
        claims: &[Option<AgentClaim>],
        until: tokio::time::Instant,
    ) -> StoreResult<()> {
        let mut by_owner: std::collections::BTreeMap<(&str, &str, &str), Vec<&str>> =
            std::collections::BTreeMap::new();
        for (agent, claim) in agents.iter().zip(claims) {
            if claim.is_some() {
                by_owner
                    .entry((&agent.token_id, &agent.replica, &agent.process))
                    .or_default()
                    .push(&agent.agent_id);
            }
        }
        let rows = match self.backend {
            Backend::Sqlite => "SELECT value FROM json_each($1)".to_owned(),
            Backend::Postgres => format!(
                "SELECT agent_id FROM agents WHERE agent_id IN ({}) ORDER BY agent_id COLLATE \"C\" FOR UPDATE",
                json_ids(self.backend, 1)
            ),
        };
        let sql = format!(
            "UPDATE agents SET replica = $2, process = $3, connected = 1 \
             WHERE token_hash = $4 AND agent_id IN ({rows})"
        );
        for ((token, replica, process), mut ids) in by_owner {
            ids.sort_unstable();
            for chunk in ids.chunks(AGENT_CHUNK) {
                self.after_transactions(until).await;
                sqlx::query(&sql)
                    .bind(serde_json::to_string(chunk).map_err(internal)?)
                    .bind(replica)
                    .bind(process)
                    .bind(token)
                    .execute(&self.pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// The stored entries of `ids` (those that exist), by agent id: one statement, in chunks.
    async fn agents_by_id(
        &self,
        ids: &[&str],
    ) -> StoreResult<std::collections::HashMap<String, AgentStatus>> {
        let mut found = std::collections::HashMap::new();
        let sql = format!(
            "{AGENT_SELECT} WHERE a.agent_id IN ({})",
            json_ids(self.backend, 1)
        );
        for chunk in ids.chunks(AGENT_CHUNK) {
            let rows = sqlx::query(&sql)
                .bind(serde_json::to_string(chunk).map_err(internal)?)
                .fetch_all(&self.pool)
                .await?;
            for row in &rows {
                let agent = agent_from_row(row)?;
                found.insert(agent.agent_id.clone(), agent);
            }
        }
        Ok(found)
    }
}

/// A subquery giving the strings of the JSON array bound as parameter `$n`: a list of ids
/// travels as one bound value however long it is.
pub(super) fn json_ids(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => format!("SELECT value FROM json_each(${n})"),
        Backend::Postgres => format!("SELECT jsonb_array_elements_text(CAST(${n} AS jsonb))"),
    }
}
