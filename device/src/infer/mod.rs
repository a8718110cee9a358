//! Inference on the device with tract: a model package (`model.json` +
//! `model.onnx`) in, class scores out. [`clip`] fits audio to the model's window and
//! computes its features — the one definition the host trainer uses too, so training
//! and inference see the same numbers. [`kws`] loads and runs keyword spotters;
//! [`stream`] runs one over a stream of audio, window by window; [`asr`] loads and runs
//! CTC speech recognisers over whole utterances.
//!
//! It does not train (that is hush-models' step and the host's trainer) and does not
//! resample: audio at another rate than the model's features is refused.

pub mod asr;
pub mod clip;
pub mod kws;
pub mod stream;

use std::path::PathBuf;

pub use asr::{utterance_features, AsrRecognizer, Decoder, Transcription};
pub use clip::{clip_features, clip_samples, fit_clip};
pub use kws::{card_features, Classification, KwsClassifier};
pub use stream::{KwsStream, WindowVerdict};

/// Why a model could not be loaded or run. Every variant names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum InferError {
    /// The model package is missing, malformed or inconsistent.
    #[error(transparent)]
    Package(#[from] hush_models::ModelError),
    /// `model.json`'s `features` is not a feature config this front-end reads.
    #[error("{path}: `features` is not a hush feature config: {reason}")]
    FeatureConfig {
        /// The model.json.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The feature config and the architecture disagree.
    #[error("{path}: {reason}")]
    Mismatch {
        /// The model.json.
        path: PathBuf,
        /// What disagrees, with both values.
        reason: String,
    },
    /// tract could not load or optimise `model.onnx`.
    #[error("{path}: tract cannot load this ONNX model: {reason}")]
    Onnx {
        /// The model.onnx.
        path: PathBuf,
        /// What tract said.
        reason: String,
    },
    /// `model.onnx` loads but is not the model `model.json` describes.
    #[error("{path}: not the model model.json describes: {reason}")]
    ForeignOnnx {
        /// The model.onnx.
        path: PathBuf,
        /// Which contract it breaks.
        reason: String,
    },
    /// The audio is at another sample rate than the model's features.
    #[error("{path}: audio is {got} Hz but the model's features are computed at {expected} Hz (resample it first)")]
    SampleRate {
        /// The audio file.
        path: PathBuf,
        /// Its rate.
        got: u32,
        /// The model's rate.
        expected: u32,
    },
    /// The audio file could not be read.
    #[error(transparent)]
    Audio(#[from] crate::audio::AudioError),
    /// Features could not be computed.
    #[error("{path}: {source}")]
    Features {
        /// The audio file (or `<samples>`).
        path: PathBuf,
        /// The front-end's error.
        source: crate::features::FeatureError,
    },
    /// tract failed while running the model.
    #[error("{path}: inference failed: {reason}")]
    Run {
        /// The audio file (or `<samples>`).
        path: PathBuf,
        /// What tract said.
        reason: String,
    },
}
