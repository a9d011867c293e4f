//! A local folder with the same key layout as the object store (the embedded default).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use async_trait::async_trait;

use super::Archive;

#[derive(Debug, Clone)]
pub struct FsArchive {
    root: PathBuf,
}

impl FsArchive {
    pub fn new(root: impl AsRef<Path>) -> Self {
        Self {
            root: root.as_ref().to_path_buf(),
        }
    }

    /// The file of `key`; keys are relative, `/`-separated, without `..`.
    fn path(&self, key: &str) -> anyhow::Result<PathBuf> {
        anyhow::ensure!(
            !key.is_empty()
                && !key.starts_with('/')
                && !key
                    .split('/')
                    .any(|p| p.is_empty() || p == ".." || p == "."),
            "invalid archive key {key:?}"
        );
        Ok(self.root.join(key))
    }
}

#[async_trait]
impl Archive for FsArchive {
    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }

    async fn check(&self) -> anyhow::Result<()> {
        tokio::fs::create_dir_all(&self.root)
            .await
            .with_context(|| format!("cannot create archive folder {}", self.root.display()))?;
        let probe = self.root.join(".budgetd-write-check");
        tokio::fs::write(&probe, b"ok")
            .await
            .with_context(|| format!("archive folder {} is not writable", self.root.display()))?;
        let _ = tokio::fs::remove_file(&probe).await;
        Ok(())
    }

    async fn put(&self, key: &str, body: &[u8], _sha256: &str) -> anyhow::Result<()> {
        let path = self.path(key)?;
        let dir = path.parent().context("archive key has no folder")?;
        tokio::fs::create_dir_all(dir)
            .await
            .with_context(|| format!("cannot create {}", dir.display()))?;
        // Write aside, then rename: a reader never sees half an object.
        let tmp = dir.join(format!(
            ".{}.tmp-{:016x}",
            path.file_name().unwrap_or_default().to_string_lossy(),
            rand::random::<u64>()
        ));
        // Durable before it counts as uploaded: the file's bytes, then the rename (the folder).
        let (tmp_path, body) = (tmp.clone(), body.to_vec());
        let written = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            use std::io::Write as _;
            let mut file = std::fs::File::create(&tmp_path)?;
            file.write_all(&body)?;
            file.sync_all()
        })
        .await
        .context("archive write task failed")?;
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e).with_context(|| format!("cannot write {}", tmp.display()));
        }
        if let Err(e) = tokio::fs::rename(&tmp, &path).await {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(e).with_context(|| format!("cannot move {} into place", path.display()));
        }
        let dir = dir.to_owned();
        tokio::task::spawn_blocking(move || std::fs::File::open(&dir)?.sync_all())
            .await
            .context("archive fsync task failed")?
            .with_context(|| format!("cannot sync folder {}", path.display()))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        match tokio::fs::read(self.path(key)?).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("cannot read archive object {key}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn put_get_and_refuse_bad_keys() {
        let dir = tempfile::tempdir().unwrap();
        let a = FsArchive::new(dir.path().join("archive"));
        a.check().await.unwrap();
        a.put("gov/bench/2026-11-30/bl-20261130-001.json", b"{}\n", "x")
            .await
            .unwrap();
        a.put(
            "gov/bench/2026-11-30/bl-20261130-001.json",
            b"{\"v\":2}\n",
            "x",
        )
        .await
        .unwrap();
        assert_eq!(
            a.get("gov/bench/2026-11-30/bl-20261130-001.json")
                .await
                .unwrap()
                .unwrap(),
            b"{\"v\":2}\n"
        );
        assert_eq!(a.get("gov/bench/2026-11-30/none.json").await.unwrap(), None);
        let entries: Vec<_> = std::fs::read_dir(dir.path().join("archive/gov/bench/2026-11-30"))
            .unwrap()
            .collect();
        assert_eq!(entries.len(), 1, "no temporary files left behind");
        for bad in ["../x", "/etc/passwd", "a//b", ""] {
            assert!(a.put(bad, b"x", "x").await.is_err(), "{bad}");
        }
    }
}
