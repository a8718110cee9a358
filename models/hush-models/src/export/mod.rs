//! Export to inference formats. [`onnx`] writes ONNX (opset 17) from hush's own
//! builder over the public `tract_onnx::pb` prost types; each architecture lays out its
//! graph with it (`write_onnx` in `crate::arch`), so the builder lives in
//! [`crate::arch::onnx`] and is re-exported here. [`nnef`] turns that ONNX into an NNEF
//! archive with tract's NNEF writer. [`export_package`] does either for a model package,
//! from its `weights.safetensors` (what `hush-host export` runs).
//!
//! ```no_run
//! use hush_models::export::{export_package, ExportFormat};
//! let done = export_package("models/asr".as_ref(), ExportFormat::Nnef, None)?;
//! println!("{} ({} bytes)", done.path.display(), done.bytes);
//! # Ok::<(), hush_models::ModelError>(())
//! ```

pub mod nnef;
pub use crate::arch::onnx;

use std::io::Write;
use std::path::{Path, PathBuf};

use burn::tensor::Device;

use crate::package::{
    load_asr_package, load_package, package_task, Task, ONNX, STREAM_FRAMES, STREAM_HEAD,
};
use crate::ModelError;

/// A format [`export_package`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// ONNX, opset 17 ([`onnx`]).
    Onnx,
    /// NNEF as a tar archive, through tract ([`nnef`]).
    Nnef,
}

impl ExportFormat {
    /// The format's name: `onnx` or `nnef`.
    pub fn name(self) -> &'static str {
        match self {
            ExportFormat::Onnx => "onnx",
            ExportFormat::Nnef => "nnef",
        }
    }

    /// The file name the format has inside a package.
    pub fn file_name(self) -> &'static str {
        match self {
            ExportFormat::Onnx => ONNX,
            ExportFormat::Nnef => nnef::NNEF,
        }
    }
}

/// What [`export_package`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    /// The file written.
    pub path: PathBuf,
    /// The package's task.
    pub task: Task,
    /// The architecture's name.
    pub arch: String,
    /// Bytes written.
    pub bytes: usize,
    /// The streaming form's files written beside it in the same format (the trunk, then the
    /// head: `frames.onnx`/`head.onnx` or their NNEF archives), when the architecture has
    /// one and the export went to the package or a directory; empty otherwise.
    pub stream: Vec<PathBuf>,
}

/// Rebuilds the model of the package in `dir` from its `weights.safetensors` (every tensor
/// checked against `model.json`) and writes it in `format` to `out`: by default the
/// package's own file ([`ExportFormat::file_name`] in `dir`, so `onnx` rewrites
/// `model.onnx`); an existing directory gets that file name inside it, and the streaming
/// form's files too where the architecture has one ([`Exported::stream`]). Each file is
/// written whole to a temporary file beside it, then renamed, so a failed export leaves no
/// partial file and an existing one untouched.
pub fn export_package(
    dir: &Path,
    format: ExportFormat,
    out: Option<&Path>,
) -> Result<Exported, ModelError> {
    let task = package_task(dir)?;
    let device = Device::flex();
    let (arch, onnx, stream) = match task {
        Task::Kws => {
            let (card, model) = load_package(dir, &device)?;
            let stream = model.to_onnx_stream(&card.arch)?;
            (card.arch.name(), model.to_onnx(&card.arch)?, stream)
        }
        Task::Asr => {
            let (card, model) = load_asr_package(dir, &device)?;
            (card.arch.name(), model.to_onnx(&card.arch)?, None)
        }
    };
    let encode = |onnx: Vec<u8>| match format {
        ExportFormat::Onnx => Ok(onnx),
        ExportFormat::Nnef => nnef::onnx_to_nnef(&onnx, dir),
    };
    let folder = match out {
        None => Some(dir),
        Some(p) if p.is_dir() => Some(p),
        Some(_) => None,
    };
    let path = match (folder, out) {
        (Some(folder), _) => folder.join(format.file_name()),
        (None, p) => p.unwrap_or(dir).to_path_buf(),
    };
    let bytes = encode(onnx)?;
    write_atomic(&path, &bytes, format)?;
    let mut written = Vec::new();
    if let (Some(folder), Some(stream)) = (folder, stream) {
        let names = match format {
            ExportFormat::Onnx => [STREAM_FRAMES, STREAM_HEAD],
            ExportFormat::Nnef => [nnef::STREAM_FRAMES_NNEF, nnef::STREAM_HEAD_NNEF],
        };
        for (name, onnx) in names.into_iter().zip([stream.frames, stream.head]) {
            let p = folder.join(name);
            write_atomic(&p, &encode(onnx)?, format)?;
            written.push(p);
        }
    }
    Ok(Exported {
        path,
        task,
        arch: arch.to_string(),
        bytes: bytes.len(),
        stream: written,
    })
}

/// Writes the NNEF archive of the ONNX file at `onnx` (any model tract reads, such as the
/// bundled Silero VAD) to `out`, by default beside it ([`nnef::archive_path`]); an existing
/// directory gets that file name inside it. Returns the path written and its size. Written
/// whole and renamed, as [`export_package`] writes.
pub fn export_onnx_file(onnx: &Path, out: Option<&Path>) -> Result<(PathBuf, usize), ModelError> {
    let bytes = std::fs::read(onnx).map_err(ModelError::io(onnx))?;
    let archive = nnef::onnx_to_nnef(&bytes, onnx)?;
    let beside = nnef::archive_path(onnx);
    let path = match out {
        None => beside,
        Some(p) if p.is_dir() => p.join(beside.file_name().unwrap_or_default()),
        Some(p) => p.to_path_buf(),
    };
    write_atomic(&path, &archive, ExportFormat::Nnef)?;
    Ok((path, archive.len()))
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename.
pub(crate) fn write_atomic(
    path: &Path,
    bytes: &[u8],
    format: ExportFormat,
) -> Result<(), ModelError> {
    let export_err = |reason: String| ModelError::Export {
        path: path.to_path_buf(),
        format: format.name(),
        reason,
    };
    let name = path
        .file_name()
        .ok_or_else(|| export_err("not a file path".into()))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        let what = if parent.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(export_err(format!("{} {what}", parent.display())));
    }
    let tmp = parent.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        // Nothing partial stays behind; the error is the one that matters.
        let _ = std::fs::remove_file(&tmp);
        ModelError::Io {
            path: path.to_path_buf(),
            source: e,
        }
    })
}
