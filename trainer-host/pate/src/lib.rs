//! PATE (Papernot et al. 2017, 2018): teachers trained on disjoint speakers of the private
//! data vote on public, unlabelled examples; a noisy aggregate of their votes labels the
//! public data, and a student learns from those labels only. The privacy cost is the
//! accountant's PATE analysis of the votes ([`hush_privacy::accountant::pate`]).
//!
//! One concept per module: [`partition`] (teachers' speakers), [`teachers`] (training
//! the ensemble, and its votes), [`aggregate`] (noisy votes and their cost), [`label`]
//! (labelling public clips, recorded in the ledger), [`student`]; for ASR, [`asr`] (CTC
//! teachers through the same ensemble trainer, noisy averaging of their frame posteriors
//! or a thresholded noisy vote over their transcripts, each with its cost in the ledger,
//! and the student).

pub mod aggregate;
pub mod asr;
pub mod label;
pub mod partition;
pub mod student;
pub mod teachers;

use std::path::PathBuf;

pub use aggregate::{disagreement, vote_histogram, Aggregator, Answer, SmoothRelease};
pub use label::{
    finished_teachers, label_public, LabelConfig, LabelFile, LabelReport, ReleasedEpsilon,
};
pub use partition::partition_by_speaker;
pub use student::{train_student, train_student_self_training, SelfTraining, SelfTrainingReport};
pub use teachers::{
    package_probabilities, teacher_dir, teacher_votes, train_teachers, train_teachers_in_parallel,
    Partition, Progress, PARTITION_JSON,
};

/// What can go wrong in a PATE run.
#[derive(Debug, thiserror::Error)]
pub enum PateError {
    /// A bad option, named.
    #[error("{option}: {reason}")]
    Option {
        /// The option (CLI spelling).
        option: &'static str,
        /// What was expected.
        reason: String,
    },
    /// A file or directory that could not be used, named.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// An I/O error on a named path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Training a teacher or the student failed.
    #[error(transparent)]
    Train(#[from] hush_train::TrainError),
    /// A model package could not be read or used.
    #[error(transparent)]
    Model(#[from] hush_models::ModelError),
    /// A teacher's feature config is unusable.
    #[error(transparent)]
    Infer(#[from] hush_device::infer::InferError),
}

impl From<hush_privacy::ledger::LedgerError> for PateError {
    /// The ledger (`--ledger`) refused or failed.
    fn from(e: hush_privacy::ledger::LedgerError) -> Self {
        PateError::Option {
            option: "--ledger",
            reason: e.to_string(),
        }
    }
}

/// Reads a JSON file of `what` (a labels file, a partition), naming the file in errors.
pub(crate) fn read_json_file<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
    what: &str,
) -> Result<T, PateError> {
    let bad = |reason: String| PateError::File {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| bad(format!("not {what}: {e}")))
}
