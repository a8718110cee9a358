//! The on-disk form of a population: `population.json` (what was built and from what, and
//! each user's clips) and `features.f32` (every clip's features, little-endian, users in
//! order), memory-mapped when read so that a drawn user's clips are paged in from disk,
//! not held in memory. Both files are written under temporary names and renamed into place,
//! the index last: a cache is complete or absent, never half written.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::simulate::{io_err, SimulateError};

/// The index file.
pub const INDEX_FILE: &str = "population.json";
/// The features file.
pub const FEATURES_FILE: &str = "features.f32";

/// Appends clips' features to a new features file.
pub struct FeatureWriter {
    out: BufWriter<File>,
    tmp: PathBuf,
    values: u64,
}

fn tmp_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

impl FeatureWriter {
    /// Starts `dir`'s features file (under a temporary name). A cache already there loses
    /// its index first, so that no crash from here on can leave an old index beside new
    /// features.
    pub fn create(dir: &Path) -> Result<Self, SimulateError> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let index = dir.join(INDEX_FILE);
        match std::fs::remove_file(&index) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&index, e)),
        }
        let tmp = tmp_name(&dir.join(FEATURES_FILE));
        let file = File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
        Ok(Self {
            out: BufWriter::with_capacity(1 << 20, file),
            tmp,
            values: 0,
        })
    }

    /// Appends `values`.
    pub fn append(&mut self, values: &[f32]) -> Result<(), SimulateError> {
        for v in values {
            self.out
                .write_all(&v.to_le_bytes())
                .map_err(|e| io_err(&self.tmp, e))?;
        }
        self.values += values.len() as u64;
        Ok(())
    }

    /// Values written so far.
    pub fn values(&self) -> u64 {
        self.values
    }

    /// Flushes and syncs the features, then writes `index` (JSON) and renames both into
    /// place, the index last.
    pub fn finish(self, dir: &Path, index: &[u8]) -> Result<(), SimulateError> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| io_err(&self.tmp, e.error()))?;
        file.sync_all().map_err(|e| io_err(&self.tmp, e))?;
        let features = dir.join(FEATURES_FILE);
        std::fs::rename(&self.tmp, &features).map_err(|e| io_err(&features, e))?;
        let index_path = dir.join(INDEX_FILE);
        let tmp = tmp_name(&index_path);
        std::fs::write(&tmp, index).map_err(|e| io_err(&tmp, e))?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_err(&tmp, e))?;
        std::fs::rename(&tmp, &index_path).map_err(|e| io_err(&index_path, e))
    }
}

/// A features file, mapped read-only.
#[derive(Debug)]
pub struct FeatureMap {
    map: Mmap,
    path: PathBuf,
}

impl FeatureMap {
    /// Maps `dir`'s features file, which must hold exactly `values` values.
    pub fn open(dir: &Path, values: u64) -> Result<Self, SimulateError> {
        let path = dir.join(FEATURES_FILE);
        let file = File::open(&path).map_err(|e| io_err(&path, e))?;
        let len = file.metadata().map_err(|e| io_err(&path, e))?.len();
        if len != values * 4 {
            return Err(SimulateError::Io {
                path,
                reason: format!(
                    "{len} bytes; the index next to it describes {values} features ({} bytes): \
                     the cache is damaged, delete the folder to rebuild it",
                    values * 4
                ),
            });
        }
        // SAFETY: the file is only ever created whole under a temporary name and renamed
        // into place (FeatureWriter::finish); nothing writes to it afterwards, so the
        // mapped bytes cannot change under the map. (Deleting the folder while a run maps
        // it leaves the old inode mapped, as for any reader.)
        #[allow(unsafe_code)]
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io_err(&path, e))?;
        Ok(Self { map, path })
    }

    /// Values `start..start + len` (in values, not bytes), copied out.
    pub fn read(&self, start: u64, len: usize) -> Result<Vec<f32>, SimulateError> {
        let from = usize::try_from(start * 4).unwrap_or(usize::MAX);
        let bytes = from
            .checked_add(len * 4)
            .and_then(|to| self.map.get(from..to))
            .ok_or_else(|| SimulateError::Io {
                path: self.path.clone(),
                reason: format!("values {start}..{} are past its end", start + len as u64),
            })?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}
