//! Model versions on disk, published so that a crash at any point can be finished or
//! undone by the next start.
//!
//! A release writes its files into `models/.staging/v{N}/` ([`ModelDirs::stage`]: each
//! file fsynced, then the directory), commits the store's transaction naming version N
//! with the files' SHA-256 ([`digest`]), and only then renames the staging directory to
//! `models/v{N}` and fsyncs `models/` ([`ModelDirs::make_visible`]). On start,
//! [`ModelDirs::recover`] compares the store with the disk:
//!
//! | found | meaning | action |
//! |---|---|---|
//! | staged `vN`, version N recorded, `vN` missing, digest matches | killed after the commit | rename into place (finish) |
//! | staged `vN`, version N not recorded | killed before the commit: no ε was recorded | delete (undo) |
//! | staged `vN`, `vN` already visible | killed after the rename | delete the leftover |
//! | `vN` (or `vN.partial`) not recorded | left by a host before the one-transaction release | moved to `models/.orphaned/` |
//! | version N recorded, neither `vN` nor a matching staged copy | the disk lost it | refuse to start, naming it |
//!
//! Hence, after recovery: ε recorded ⇔ round released ⇔ version row ⇔ files visible.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::store::ModelVersionRow;
use crate::FlError;

/// Directory of staged (not yet committed or not yet visible) versions under `models/`.
pub const STAGING: &str = ".staging";
/// Directory unrecorded version directories are moved to under `models/`.
pub const ORPHANED: &str = ".orphaned";

/// The `models/` directory of a data directory.
#[derive(Debug, Clone)]
pub struct ModelDirs {
    root: PathBuf,
}

/// File in a published model version holding the server optimizer's state after the step
/// that made it (postcard; host-only, never served to devices, and removed from a version
/// once a newer one exists — so not part of the [`digest`]).
pub const OPTIMIZER_STATE: &str = "server-optimizer.postcard";

/// SHA-256 hex over the regular files of `dir` but [`OPTIMIZER_STATE`], in name order
/// (each file's name, length and bytes).
pub fn digest(dir: &Path) -> Result<String, FlError> {
    let mut names: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(FlError::io(dir))? {
        let entry = entry.map_err(FlError::io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().map_err(FlError::io(dir))?.is_file() && name != OPTIMIZER_STATE {
            names.push(name);
        }
    }
    names.sort();
    let mut h = Sha256::new();
    for name in names {
        let path = dir.join(&name);
        let bytes = std::fs::read(&path).map_err(FlError::io(&path))?;
        h.update(name.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn sync_path(path: &Path) -> Result<(), FlError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(FlError::io(path))
}

fn version_of(name: &str) -> Option<u64> {
    name.strip_prefix('v')?.parse().ok()
}

impl ModelDirs {
    /// The versions under `root` (`<data_dir>/models`), created if missing.
    pub fn new(root: PathBuf) -> Result<Self, FlError> {
        std::fs::create_dir_all(&root).map_err(FlError::io(&root))?;
        Ok(Self { root })
    }

    /// `models/v{version}`: where a published version's files are.
    pub fn version_dir(&self, version: u64) -> PathBuf {
        self.root.join(format!("v{version}"))
    }

    /// `models/.staging/v{version}`.
    pub fn staging_dir(&self, version: u64) -> PathBuf {
        self.root.join(STAGING).join(format!("v{version}"))
    }

    /// Writes version `version` into its staging directory with `write` (which gets the
    /// directory), syncs every file and the directory, and returns the files' digest.
    pub fn stage(
        &self,
        version: u64,
        write: impl FnOnce(&Path) -> Result<(), FlError>,
    ) -> Result<String, FlError> {
        let dir = self.staging_dir(version);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(FlError::io(&dir))?;
        }
        std::fs::create_dir_all(&dir).map_err(FlError::io(&dir))?;
        write(&dir)?;
        for entry in std::fs::read_dir(&dir).map_err(FlError::io(&dir))? {
            let path = entry.map_err(FlError::io(&dir))?.path();
            sync_path(&path)?;
        }
        sync_path(&dir)?;
        sync_path(&self.root.join(STAGING))?;
        digest(&dir)
    }

    /// Discards a staged version that will not be committed.
    pub fn discard(&self, version: u64) {
        let dir = self.staging_dir(version);
        if dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                warn!(path = %dir.display(), "could not remove a discarded staged model: {e}");
            }
        }
    }

    /// Makes a committed, staged version visible: rename into place, sync `models/`.
    pub fn make_visible(&self, version: u64) -> Result<PathBuf, FlError> {
        let from = self.staging_dir(version);
        let to = self.version_dir(version);
        std::fs::rename(&from, &to).map_err(FlError::io(&to))?;
        sync_path(&self.root)?;
        Ok(to)
    }

    /// Brings the disk in line with the store's `versions` after a crash (the table in
    /// the module doc). Returns what it did, one line per action.
    pub fn recover(&self, versions: &[ModelVersionRow]) -> Result<Vec<String>, FlError> {
        let mut done = Vec::new();
        let recorded = |v: u64| versions.iter().find(|r| r.version == v);
        let staging = self.root.join(STAGING);
        if staging.is_dir() {
            for entry in std::fs::read_dir(&staging).map_err(FlError::io(&staging))? {
                let path = entry.map_err(FlError::io(&staging))?.path();
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let row = version_of(&name).and_then(recorded);
                match row {
                    Some(row) if !self.version_dir(row.version).exists() => {
                        let found = digest(&path)?;
                        if found != row.digest {
                            return Err(FlError::Corrupt(format!(
                                "{}: model v{} was committed with files of SHA-256 {} but \
                                 its staged copy has {found}; restore the data directory \
                                 from a backup",
                                path.display(),
                                row.version,
                                row.digest
                            )));
                        }
                        self.make_visible(row.version)?;
                        done.push(format!(
                            "model v{} was committed but not yet visible: finished publishing it",
                            row.version
                        ));
                    }
                    _ => {
                        std::fs::remove_dir_all(&path).map_err(FlError::io(&path))?;
                        done.push(format!(
                            "removed {} (staged, never committed or already visible)",
                            path.display()
                        ));
                    }
                }
            }
        }
        for entry in std::fs::read_dir(&self.root).map_err(FlError::io(&self.root))? {
            let path = entry.map_err(FlError::io(&self.root))?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let base = name.strip_suffix(".partial").unwrap_or(&name);
            let Some(v) = version_of(base) else {
                continue;
            };
            if base != name || recorded(v).is_none() {
                let aside = self.root.join(ORPHANED);
                std::fs::create_dir_all(&aside).map_err(FlError::io(&aside))?;
                let to = aside.join(format!("{name}-{}", std::process::id()));
                std::fs::rename(&path, &to).map_err(FlError::io(&to))?;
                warn!(from = %path.display(), to = %to.display(), "unrecorded model version moved aside");
                done.push(format!(
                    "moved the unrecorded {} aside to {}",
                    path.display(),
                    to.display()
                ));
            }
        }
        for row in versions {
            let dir = self.version_dir(row.version);
            if !dir.is_dir() {
                return Err(FlError::Corrupt(format!(
                    "model v{} is recorded as published but {} is missing and no staged copy \
                     was found; restore the data directory from a backup",
                    row.version,
                    dir.display()
                )));
            }
        }
        for line in &done {
            info!("recovery: {line}");
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: u64, digest: &str) -> ModelVersionRow {
        ModelVersionRow {
            version,
            round: Some(version),
            digest: digest.into(),
        }
    }

    fn write(dir: &Path, text: &str) -> Result<(), FlError> {
        std::fs::write(dir.join("weights"), text).map_err(FlError::io(dir))
    }

    #[test]
    fn recovery_finishes_committed_versions_and_undoes_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = ModelDirs::new(tmp.path().join("models")).unwrap();
        std::fs::create_dir_all(dirs.version_dir(0)).unwrap();
        // v1: committed, still staged. v2: staged, never committed.
        let d1 = dirs.stage(1, |d| write(d, "one")).unwrap();
        dirs.stage(2, |d| write(d, "two")).unwrap();
        // v9: an unrecorded directory an old host left.
        std::fs::create_dir_all(dirs.version_dir(9)).unwrap();
        let versions = [row(0, ""), row(1, &d1)];
        let done = dirs.recover(&versions).unwrap();
        assert_eq!(done.len(), 3, "{done:?}");
        assert_eq!(
            std::fs::read_to_string(dirs.version_dir(1).join("weights")).unwrap(),
            "one"
        );
        assert!(!dirs.version_dir(2).exists() && !dirs.staging_dir(2).exists());
        assert!(!dirs.version_dir(9).exists());
        // A second recovery has nothing to do.
        assert!(dirs.recover(&versions).unwrap().is_empty());
    }

    #[test]
    fn recovery_refuses_a_staged_copy_that_does_not_match_or_a_lost_version() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = ModelDirs::new(tmp.path().join("models")).unwrap();
        dirs.stage(1, |d| write(d, "one")).unwrap();
        let err = dirs.recover(&[row(1, "0000")]).unwrap_err().to_string();
        assert!(err.contains("SHA-256"), "{err}");
        let err = dirs.recover(&[row(3, "")]).unwrap_err().to_string();
        assert!(err.contains("v3") && err.contains("missing"), "{err}");
    }
}
