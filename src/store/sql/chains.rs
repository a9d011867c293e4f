//! [`Chains`] over SQL: chains and their topology versions.

use async_trait::async_trait;
use budget_api::chains::{ChainSummary, TopologyVersion};
use budget_core::Topology;

use super::rows::{chain_summary_from_row, topology_from_row};
use super::tx::{commit, replayed, write_audit};
use super::{internal, sha256_hex, SqlStore};
use crate::store::{Audit, Chains, StoreError, StoreResult};

#[async_trait]
impl Chains for SqlStore {
    async fn put_topology(
        &self,
        chain: &str,
        topology: &Topology,
        audit: Audit,
    ) -> StoreResult<(TopologyVersion, bool)> {
        let document = serde_json::to_string(topology).map_err(internal)?;
        let sha256 = sha256_hex(document.as_bytes());
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO chains (name, created_at, updated_at) VALUES ($1, $2, $2) \
             ON CONFLICT (name) DO UPDATE SET updated_at = $2",
        )
        .bind(chain)
        .bind(&audit.at)
        .execute(&mut *tx)
        .await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let latest = sqlx::query(
            "SELECT chain, version, document, sha256, created_at, created_by FROM topology_versions \
             WHERE chain = $1 ORDER BY version DESC LIMIT 1",
        )
        .bind(chain)
        .fetch_optional(&mut *tx)
        .await?;
        let next = match &latest {
            Some(row) => {
                let current = topology_from_row(row)?;
                if current.sha256 == sha256 {
                    tx.rollback().await?;
                    return Ok((current, false));
                }
                current.version + 1
            }
            None => 1,
        };
        sqlx::query(
            "INSERT INTO topology_versions (chain, version, document, sha256, created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(chain)
        .bind(next)
        .bind(&document)
        .bind(&sha256)
        .bind(&audit.at)
        .bind(&audit.actor)
        .execute(&mut *tx)
        .await?;
        let mut audit = audit;
        audit.subject = Some(format!("topology v{next}"));
        write_audit(&mut tx, &audit).await?;
        let version = TopologyVersion {
            chain: chain.to_owned(),
            version: next,
            sha256,
            created_at: audit.at.clone(),
            created_by: audit.actor.clone(),
            topology: topology.clone(),
        };
        commit(tx, (version, true)).await
    }

    async fn get_topology(
        &self,
        chain: &str,
        version: Option<i64>,
    ) -> StoreResult<TopologyVersion> {
        let row = sqlx::query(
            "SELECT chain, version, document, sha256, created_at, created_by FROM topology_versions \
             WHERE chain = $1 AND ($2 < 0 OR version = $2) ORDER BY version DESC LIMIT 1",
        )
        .bind(chain)
        .bind(version.unwrap_or(-1))
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => topology_from_row(&row),
            None => Err(StoreError::NotFound(match version {
                Some(v) => format!("topology version {v} of chain {chain:?}"),
                None => format!("chain {chain:?}"),
            })),
        }
    }

    async fn list_chains(&self) -> StoreResult<Vec<ChainSummary>> {
        let rows = sqlx::query(
            "SELECT c.name, c.updated_at, \
               (SELECT MAX(t.version) FROM topology_versions t WHERE t.chain = c.name) AS topology_version, \
               (SELECT b.id FROM baselines b WHERE b.chain = c.name AND b.state = 'approved') AS current_baseline, \
               (SELECT MAX(p.revision) FROM publications p WHERE p.chain = c.name) AS revision, \
               (SELECT COUNT(*) FROM baselines b WHERE b.chain = c.name AND b.state = 'draft') AS drafts, \
               (SELECT COUNT(*) FROM runs r WHERE r.chain = c.name) AS runs \
             FROM chains c ORDER BY c.name",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(chain_summary_from_row).collect()
    }
}
