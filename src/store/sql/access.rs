//! [`Access`] over SQL: API tokens.

use async_trait::async_trait;

use super::rows::{token_from_row, TOKEN_COLUMNS};
use super::tx::{commit, replayed, write_audit};
use super::{SqlStore, Tx};
use crate::auth::Role;
use crate::store::{Access, Audit, NewToken, StoreError, StoreResult, TokenRecord};

/// Inserts a token; `Conflict` when the name is taken.
pub(super) async fn insert_token(
    tx: &mut Tx,
    token: &NewToken,
    audit: &Audit,
) -> StoreResult<TokenRecord> {
    let done = sqlx::query(
        "INSERT INTO api_tokens (name, role, token_hash, created_at, created_by, owner) VALUES ($1, $2, $3, $4, $5, $6) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(&token.name)
    .bind(token.role.as_str())
    .bind(&token.hash)
    .bind(&audit.at)
    .bind(&audit.actor)
    .bind(&token.owner)
    .execute(&mut **tx)
    .await?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Conflict(format!(
            "a token named {:?} already exists",
            token.name
        )));
    }
    Ok(TokenRecord {
        name: token.name.clone(),
        role: token.role,
        owner: token.owner.clone(),
        created_at: audit.at.clone(),
        created_by: audit.actor.clone(),
        token_id: token.hash.clone(),
    })
}

#[async_trait]
impl Access for SqlStore {
    async fn create_token(&self, token: &NewToken, audit: Audit) -> StoreResult<TokenRecord> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let record = insert_token(&mut tx, token, &audit).await?;
        write_audit(&mut tx, &audit).await?;
        commit(tx, record).await
    }

    async fn rotate_token(
        &self,
        name: &str,
        new_name: &str,
        hash: &str,
        audit: Audit,
    ) -> StoreResult<TokenRecord> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        // Written first, the old token read inside the insert: a SQLite transaction that
        // reads before it writes fails when another connection commits in between.
        let done = sqlx::query(
            "INSERT INTO api_tokens (name, role, token_hash, created_at, created_by, owner) \
             SELECT $1, role, $2, $3, $4, COALESCE(owner, name) FROM api_tokens WHERE name = $5 \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(new_name)
        .bind(hash)
        .bind(&audit.at)
        .bind(&audit.actor)
        .bind(name)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            let old = sqlx::query("SELECT 1 FROM api_tokens WHERE name = $1")
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?;
            return Err(match old {
                None => StoreError::NotFound(format!("token {name:?}")),
                Some(_) => {
                    StoreError::Conflict(format!("a token named {new_name:?} already exists"))
                }
            });
        }
        let row = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE name = $1"
        ))
        .bind(new_name)
        .fetch_one(&mut *tx)
        .await?;
        let record = token_from_row(&row)?;
        let mut audit = audit;
        audit.detail["role"] = serde_json::json!(record.role);
        audit.detail["owner"] = record.owner.clone().into();
        write_audit(&mut tx, &audit).await?;
        commit(tx, record).await
    }

    async fn upsert_token(
        &self,
        name: &str,
        role: Role,
        hash: &str,
        audit: Audit,
    ) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO api_tokens (name, role, token_hash, created_at, created_by, owner) VALUES ($1, $2, $3, $4, $5, $1) \
             ON CONFLICT (name) DO UPDATE SET role = $2, token_hash = $3",
        )
        .bind(name)
        .bind(role.as_str())
        .bind(hash)
        .bind(&audit.at)
        .bind(&audit.actor)
        .execute(&mut *tx)
        .await?;
        write_audit(&mut tx, &audit).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn revoke_token(&self, name: &str, audit: Audit) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        if let Some(done) = replayed(&mut tx).await? {
            return Ok(done);
        }
        let done = sqlx::query("DELETE FROM api_tokens WHERE name = $1")
            .bind(name)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("token {name:?}")));
        }
        write_audit(&mut tx, &audit).await?;
        commit(tx, ()).await
    }

    async fn find_token(&self, hash: &str) -> StoreResult<Option<TokenRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_hash = $1"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(token_from_row).transpose()
    }

    async fn list_tokens(&self) -> StoreResult<Vec<TokenRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY name"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(token_from_row).collect()
    }
}
