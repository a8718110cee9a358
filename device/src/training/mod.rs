//! Local training on the device, for one federated round: the device's own labelled
//! recordings ([`LocalData`]) → a few epochs of SGD from the round's model (optionally
//! with per-example clipping) → the weight delta, clipped to the user-level bound (flat
//! or per layer; optionally normalized per layer) with optional local noise → an
//! [`Update`](crate::protocol::Update) ready to encode.
//!
//! The clipping and noise are hush-models' ([`hush_models::dp`]), the same code the
//! host uses to re-check the update, so device and host cannot disagree about the bound.

mod data;
mod round;

pub use data::{LabelledClip, LocalData};
pub use round::{
    encoded_update_len, given_update, local_update, local_updates, CohortSplit, LocalRoundReport,
};

use std::path::PathBuf;

/// Why local training failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainingError {
    /// The local corpus could not be read.
    #[error(transparent)]
    Dataset(#[from] crate::dataset::DatasetError),
    /// A recording could not be decoded.
    #[error(transparent)]
    Audio(#[from] crate::audio::AudioError),
    /// The model package is unusable.
    #[error(transparent)]
    Infer(#[from] crate::infer::InferError),
    /// Features could not be computed.
    #[error("{path}: {source}")]
    Features {
        /// The recording.
        path: PathBuf,
        /// The front-end's error.
        source: crate::features::FeatureError,
    },
    /// The learning core failed.
    #[error(transparent)]
    Model(#[from] hush_models::ModelError),
    /// Clipping or noise refused the task's parameters.
    #[error("round task: {0}")]
    Dp(#[from] hush_models::dp::DpError),
    /// The data or task does not allow training.
    #[error("{0}")]
    Unusable(String),
}
