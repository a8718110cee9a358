//! Model packages at the boundary: the directory checked before anything is loaded, and
//! hush's errors sorted into status codes (the message keeps hush's own text, which
//! names the file and what was expected).

use std::path::PathBuf;

use hush::infer::InferError;
use hush::training::TrainingError;
use hush_models::package::{package_task, Task};
use hush_models::ModelError;

use crate::status::{fail, ApiError, HushStatus};

/// What each kind of package is for, in errors.
fn kind(task: Task) -> &'static str {
    match task {
        Task::Kws => "a keyword spotter (task `kws`)",
        Task::Asr => "a speech recogniser (task `asr`)",
    }
}

/// The package directory `path` for `caller`, which needs a model of `want`: it exists,
/// is a directory, and its model.json names that task.
pub(crate) fn checked_package(path: &str, want: Task, caller: &str) -> Result<PathBuf, ApiError> {
    if path.is_empty() {
        return fail(HushStatus::InvalidArgument, "`package_dir` is empty");
    }
    let dir = PathBuf::from(path);
    if !dir.exists() {
        return fail(
            HushStatus::NotFound,
            format!("{path}: no such model package directory"),
        );
    }
    let found = package_task(&dir).map_err(model_error)?;
    if found != want {
        return fail(
            HushStatus::WrongModelKind,
            format!(
                "{path}: this package is {}; {caller} needs {}",
                kind(found),
                kind(want)
            ),
        );
    }
    Ok(dir)
}

/// A hush-models error's status: a package's files (BAD_PACKAGE), or training
/// (TRAINING_FAILED).
fn model_status(e: &ModelError) -> HushStatus {
    match e {
        ModelError::Io { .. }
        | ModelError::Safetensors { .. }
        | ModelError::MissingTensor { .. }
        | ModelError::UnexpectedTensor { .. }
        | ModelError::FileTensorShape { .. }
        | ModelError::BadConfig { .. }
        | ModelError::BadPackage { .. } => HushStatus::BadPackage,
        _ => HushStatus::TrainingFailed,
    }
}

/// A hush-models error.
pub(crate) fn model_error(e: ModelError) -> ApiError {
    ApiError::new(model_status(&e), e.to_string())
}

/// An inference error: loading (BAD_PACKAGE), options (INVALID_ARGUMENT) or running.
pub(crate) fn infer_error(e: InferError) -> ApiError {
    let status = match &e {
        InferError::Package(inner) => model_status(inner),
        InferError::FeatureConfig { .. }
        | InferError::Mismatch { .. }
        | InferError::Load { .. }
        | InferError::Foreign { .. } => HushStatus::BadPackage,
        InferError::Options { .. } => HushStatus::InvalidArgument,
        InferError::SampleRate { .. } => HushStatus::UnsupportedSampleRate,
        _ => HushStatus::InferenceFailed,
    };
    ApiError::new(status, e.to_string())
}

/// A local-training error: the task or clips (INVALID_ARGUMENT), the package
/// (BAD_PACKAGE), or training itself (TRAINING_FAILED).
pub(crate) fn training_error(e: TrainingError) -> ApiError {
    match e {
        TrainingError::Model(m) => model_error(m),
        TrainingError::Infer(i) => infer_error(i),
        TrainingError::Unusable(_) | TrainingError::Dp(_) | TrainingError::Features { .. } => {
            ApiError::new(HushStatus::InvalidArgument, e.to_string())
        }
        other => ApiError::new(HushStatus::TrainingFailed, other.to_string()),
    }
}
