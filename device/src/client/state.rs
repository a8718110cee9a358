//! The device's state directory: `device.json` (server, device id, token; written
//! atomically, readable only by its owner) and `models/v{N}/` (downloaded packages: the
//! card, the weights and the model files this build listens with; each renamed into place
//! only when complete).

use std::fs;
use std::path::{Path, PathBuf};

use hush_models::package::{MODEL_JSON, WEIGHTS};
use serde::{Deserialize, Serialize};

use super::{ClientError, HostClient};
use crate::infer::BuildReads;

/// Files of a model package a device downloads whatever its build: the card, then the
/// weights it trains. The model files it listens with follow
/// ([`crate::infer::listen_files`]).
pub const PACKAGE_FILES: [&str; 2] = [MODEL_JSON, WEIGHTS];

/// Who this device is to a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceIdentity {
    /// The host it registered with.
    pub server: String,
    /// Its device id there.
    pub device_id: u64,
    /// Its bearer token.
    pub token: String,
}

/// A state directory.
#[derive(Debug, Clone)]
pub struct DeviceState {
    dir: PathBuf,
}

fn state_err(path: &Path, e: impl std::fmt::Display) -> ClientError {
    ClientError::State {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    let tmp = path.with_extension("partial");
    fs::write(&tmp, bytes).map_err(|e| state_err(&tmp, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))
            .map_err(|e| state_err(&tmp, e))?;
    }
    fs::rename(&tmp, path).map_err(|e| state_err(path, e))
}

impl DeviceState {
    /// Opens (creating) the state directory.
    pub fn open(dir: &Path) -> Result<Self, ClientError> {
        fs::create_dir_all(dir.join("models")).map_err(|e| state_err(dir, e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn identity_path(&self) -> PathBuf {
        self.dir.join("device.json")
    }

    /// The stored identity for `server`, if this device registered there before.
    pub fn identity(&self, server: &str) -> Result<Option<DeviceIdentity>, ClientError> {
        let path = self.identity_path();
        if !path.exists() {
            return Ok(None);
        }
        let bytes = fs::read(&path).map_err(|e| state_err(&path, e))?;
        let id: DeviceIdentity = serde_json::from_slice(&bytes)
            .map_err(|e| state_err(&path, format!("not a device identity: {e}")))?;
        Ok((id.server == server).then_some(id))
    }

    /// Stores an identity.
    pub fn save_identity(&self, id: &DeviceIdentity) -> Result<(), ClientError> {
        let path = self.identity_path();
        let bytes = serde_json::to_vec_pretty(id).map_err(|e| state_err(&path, e))?;
        write_atomic(&path, &bytes)
    }

    /// Directory of model version `v` (complete only if it exists).
    pub fn model_dir(&self, version: u64) -> PathBuf {
        self.dir.join("models").join(format!("v{version}"))
    }

    /// Model version `v`, downloaded from the host unless already held: the card, the
    /// weights, and the model files a build reading as `build` says listens with
    /// ([`crate::infer::listen_files`]; a device passes [`BuildReads::THIS_BUILD`]). Older
    /// versions are removed once the new one is complete.
    pub fn ensure_model(
        &self,
        client: &HostClient,
        version: u64,
        build: BuildReads,
    ) -> Result<PathBuf, ClientError> {
        let dir = self.model_dir(version);
        if dir.is_dir() {
            return Ok(dir);
        }
        let partial = self.dir.join("models").join(format!("v{version}.partial"));
        if partial.exists() {
            fs::remove_dir_all(&partial).map_err(|e| state_err(&partial, e))?;
        }
        fs::create_dir_all(&partial).map_err(|e| state_err(&partial, e))?;
        for file in PACKAGE_FILES {
            let bytes = client.download(version, file)?;
            let path = partial.join(file);
            fs::write(&path, bytes).map_err(|e| state_err(&path, e))?;
        }
        // The model files this build listens with; training needs none of them, so one the
        // host does not publish (a package without NNEF archives, for a build that reads
        // only those) is left out, and `listen` names it.
        let listen = crate::infer::listen_files(&partial, build)
            .map_err(|e| state_err(&partial, format!("model v{version}: {e}")))?;
        for file in listen {
            let bytes = match client.download(version, &file) {
                Ok(bytes) => bytes,
                Err(ClientError::Refused { status: 404, .. }) => continue,
                Err(e) => return Err(e),
            };
            let path = partial.join(&file);
            fs::write(&path, bytes).map_err(|e| state_err(&path, e))?;
        }
        fs::rename(&partial, &dir).map_err(|e| state_err(&dir, e))?;
        let models = self.dir.join("models");
        if let Ok(entries) = fs::read_dir(&models) {
            for e in entries.flatten() {
                let p = e.path();
                if p != dir && p.is_dir() {
                    let _ = fs::remove_dir_all(&p);
                }
            }
        }
        Ok(dir)
    }
}
