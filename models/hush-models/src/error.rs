//! The one error type of hush-models: every variant names the thing (file, tensor, layer)
//! and what was expected.

use std::path::PathBuf;

/// Why a model operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A safetensors file could not be parsed or written.
    #[error("{path}: not a valid safetensors file: {reason}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What the safetensors reader said.
        reason: String,
    },
    /// A tensor the model needs is missing from a checkpoint.
    #[error("{path}: tensor `{name}` is missing (expected shape {expected:?})")]
    MissingTensor {
        /// The checkpoint.
        path: PathBuf,
        /// The parameter name.
        name: String,
        /// The shape the architecture needs.
        expected: Vec<usize>,
    },
    /// A checkpoint holds a tensor the model does not have.
    #[error("{path}: unexpected tensor `{name}` (not a parameter of architecture {arch})")]
    UnexpectedTensor {
        /// The checkpoint.
        path: PathBuf,
        /// The tensor name.
        name: String,
        /// The architecture being loaded.
        arch: String,
    },
    /// A tensor read from a file has the wrong shape for the architecture.
    #[error("{path}: tensor `{name}` has shape {got:?}, but the architecture needs {expected:?}")]
    FileTensorShape {
        /// The file (checkpoint, weights).
        path: PathBuf,
        /// The parameter name.
        name: String,
        /// The shape the architecture needs.
        expected: Vec<usize>,
        /// The shape found.
        got: Vec<usize>,
    },
    /// A tensor has the wrong shape.
    #[error("tensor `{name}`: expected shape {expected:?}, got {got:?}")]
    ShapeMismatch {
        /// The parameter name.
        name: String,
        /// The shape the architecture needs.
        expected: Vec<usize>,
        /// The shape found.
        got: Vec<usize>,
    },
    /// A tensor has the wrong element type.
    #[error("tensor `{name}`: expected dtype F32, got {got}")]
    DtypeMismatch {
        /// The tensor name.
        name: String,
        /// The dtype found.
        got: String,
    },
    /// A tensor's values could not be read out of burn.
    #[error("tensor `{name}`: cannot read values: {reason}")]
    TensorData {
        /// The tensor name.
        name: String,
        /// What burn said.
        reason: String,
    },
    /// An architecture configuration is not usable.
    #[error("architecture {arch}: bad option `{option}`: {reason}")]
    BadConfig {
        /// The architecture.
        arch: String,
        /// The option.
        option: String,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// A model package (`model.json`) is malformed or inconsistent.
    #[error("{path}: {reason}")]
    BadPackage {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong and what was expected.
        reason: String,
    },
    /// A model could not be exported to an inference format.
    #[error("{path}: cannot export to {format}: {reason}")]
    Export {
        /// The package or file being exported.
        path: PathBuf,
        /// The target format (`onnx`, `nnef`).
        format: &'static str,
        /// What failed.
        reason: String,
    },
    /// A batch handed to training or inference has the wrong shape or labels.
    #[error("bad batch: {reason}")]
    BadBatch {
        /// What is wrong and what was expected.
        reason: String,
    },
    /// A lexicon (the words a small-vocabulary decoder may spell) is unusable.
    #[error("lexicon: {reason}")]
    BadLexicon {
        /// What is wrong and what was expected.
        reason: String,
    },
}

impl ModelError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ModelError {
        let path = path.into();
        move |source| ModelError::Io { path, source }
    }

    pub(crate) fn config(arch: &str, option: &str, reason: impl Into<String>) -> ModelError {
        ModelError::BadConfig {
            arch: arch.to_string(),
            option: option.to_string(),
            reason: reason.into(),
        }
    }
}
