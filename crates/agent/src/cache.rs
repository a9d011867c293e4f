//! The last good config on disk: what an agent starts from when the control plane is down.
//!
//! The file is the JSON of a [`Snapshot`]. It is replaced atomically — written to a temporary
//! file in the same directory, synced, then renamed over the old one — so a crash mid-write
//! leaves either the old config or the new one, never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use tracing::{debug, warn};

use crate::snapshot::Snapshot;

/// A cache file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("failed to read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a cached budget config: {source}")]
    Format {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// Reads the snapshot cached at `path`. Not validated: callers check it before use.
pub fn read(path: &Path) -> Result<Snapshot, CacheError> {
    let bytes = std::fs::read(path).map_err(|source| CacheError::Io {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| CacheError::Format {
        path: path.to_owned(),
        source,
    })
}

/// Writes `snapshot` to `path` atomically (temporary file in the same directory + rename),
/// creating the directory if needed.
pub fn write(path: &Path, snapshot: &Snapshot) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{} names no file", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{:08x}",
        name.to_string_lossy(),
        std::process::id(),
        rand::random::<u32>()
    ));
    let result = write_then_rename(&tmp, path, snapshot);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_then_rename(tmp: &Path, path: &Path, snapshot: &Snapshot) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(snapshot)?;
    bytes.push(b'\n');
    let mut file = std::fs::File::create(tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(tmp, path)?;
    sync_dir(path);
    Ok(())
}

/// Reads the snapshot cached at `path` off the async runtime, as the agent does when it
/// starts without the control plane. The error is a one-line reason.
pub(crate) async fn load(path: PathBuf) -> Result<Snapshot, String> {
    match tokio::task::spawn_blocking(move || read(&path)).await {
        Ok(read) => read.map_err(|e| e.to_string()),
        Err(e) => Err(format!("cache read failed: {e}")),
    }
}

/// Caches `snapshot` at `path` off the async runtime, as the agent does after each config it
/// accepts. Failures are only logged: the live config never depends on the disk.
pub(crate) async fn save(path: PathBuf, snapshot: Snapshot) {
    let shown = path.display().to_string();
    match tokio::task::spawn_blocking(move || write(&path, &snapshot)).await {
        Ok(Ok(())) => debug!(path = %shown, "cached the budgets"),
        Ok(Err(e)) => warn!(path = %shown, error = %e, "failed to cache the budgets"),
        Err(e) => warn!(path = %shown, error = %e, "failed to cache the budgets"),
    }
}

/// Makes the rename itself durable where directories can be synced (best effort).
#[cfg(unix)]
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

#[cfg(not(unix))]
fn sync_dir(_path: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::example_a;

    fn files_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/budgets.json");
        let snapshot = Snapshot::from_chains([example_a()]);
        write(&path, &snapshot).unwrap();
        assert_eq!(read(&path).unwrap(), snapshot);

        // A second write replaces the first.
        let mut next = snapshot.clone();
        next.revision = 9;
        write(&path, &next).unwrap();
        assert_eq!(read(&path).unwrap(), next);
    }

    #[test]
    fn atomic_write_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("budgets.json");
        for revision in 1..=3 {
            let mut s = Snapshot::from_chains([example_a()]);
            s.revision = revision;
            write(&path, &s).unwrap();
        }
        assert_eq!(files_in(dir.path()), ["budgets.json"]);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("budgets.json");
        let s = Snapshot::from_chains([example_a()]);
        write(&path, &s).unwrap();
        // Renaming a file over a non-empty directory fails.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("x"), b"x").unwrap();
        assert!(write(&blocked, &s).is_err());
        assert_eq!(files_in(dir.path()), ["blocked", "budgets.json"]);
        assert_eq!(read(&path).unwrap(), s);
    }

    #[test]
    fn unreadable_caches_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        assert!(matches!(read(&missing), Err(CacheError::Io { .. })));
        let garbage = dir.path().join("garbage.json");
        std::fs::write(&garbage, b"{\"revision\": ").unwrap();
        let err = read(&garbage).unwrap_err();
        assert!(matches!(err, CacheError::Format { .. }));
        assert!(err.to_string().contains("garbage.json"), "{err}");
    }
}
