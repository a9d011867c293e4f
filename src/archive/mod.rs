//! Object storage for baseline documents: one [`Archive`] trait, a local folder backend
//! ([`fs`], the embedded default) and an S3-compatible backend ([`s3`]), chosen by URL.
//!
//! Nothing is uploaded from a request: the store writes an outbox item in the same
//! transaction as the baseline change, and the [`worker`] uploads it with backoff until it
//! succeeds, so a baseline is never lost while the object store is down.

pub mod fs;
pub mod s3;
pub mod verify;
pub mod worker;

use std::sync::Arc;

use async_trait::async_trait;

/// Where archived objects go. Keys look like `gov/bench/2026-11-30/bl-20261130-001.json`.
#[async_trait]
pub trait Archive: Send + Sync + 'static {
    /// Human-readable location, e.g. `file:///var/lib/budgetd/archive` or `s3://bucket`.
    fn describe(&self) -> String;
    /// Fails clearly when the archive cannot be used (missing bucket, bad credentials, a
    /// folder that cannot be written).
    async fn check(&self) -> anyhow::Result<()>;
    /// Stores `body` at `key` (content type `application/json`, SHA-256 as metadata where the
    /// backend keeps metadata), replacing what was there.
    async fn put(&self, key: &str, body: &[u8], sha256: &str) -> anyhow::Result<()>;
    /// The object at `key`, or `None` when there is none.
    async fn get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>>;
}

/// An archive URL: `file://PATH` (or a plain path) or `s3://BUCKET[/PREFIX]`.
/// Returns the archive and the key prefix the URL names, if any.
pub async fn open(url: &str) -> anyhow::Result<(Arc<dyn Archive>, Option<String>)> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        anyhow::ensure!(
            !bucket.is_empty(),
            "archive URL {url:?} names no bucket: use s3://BUCKET[/PREFIX]"
        );
        let prefix = prefix.trim_matches('/');
        let archive = s3::S3Archive::from_env(bucket).await?;
        Ok((
            Arc::new(archive),
            (!prefix.is_empty()).then(|| prefix.to_owned()),
        ))
    } else if url.contains("://") && !url.starts_with("file://") {
        anyhow::bail!("unsupported archive URL {url:?}: use file://PATH or s3://BUCKET[/PREFIX]")
    } else {
        let path = url.strip_prefix("file://").unwrap_or(url);
        anyhow::ensure!(!path.is_empty(), "archive URL {url:?} names no folder");
        Ok((Arc::new(fs::FsArchive::new(path)), None))
    }
}
