//! Inference on the device with tract: a model package (`model.json` +
//! `model.onnx`) in, class scores out. [`clip`] fits audio to the model's window and
//! computes its features — the one definition the host trainer uses too, so training
//! and inference see the same numbers. [`kws`] loads and runs keyword spotters;
//! [`stream`] runs one over a stream of audio, window by window (incrementally, through the
//! model's streaming form [`frames`], where the package has one), and [`detect`] turns its
//! windows into keyword detections; [`spotter`] puts the two together, the streaming loop
//! `hush-device listen` and the C API (`device/capi`) both run; [`vad`] gates it on speech
//! (Silero VAD); [`asr`] loads and runs
//! CTC speech recognisers over whole utterances.
//!
//! It does not train (that is hush-models' step and the host's trainer) and does not
//! resample: audio at another rate than the model's features is refused.

pub mod asr;
pub mod clip;
pub mod detect;
pub mod frames;
pub mod kws;
pub mod spotter;
pub mod stream;
pub mod vad;

use std::path::{Path, PathBuf};

use std::sync::Arc;

use tract_onnx::prelude::*;

/// A loaded, optimised tract model ready to run.
pub(crate) type Plan = Arc<TypedRunnableModel>;

pub use asr::{utterance_features, AsrRecognizer, Decoder, Transcription};
pub use clip::{clip_features, clip_samples, fit_clip};
pub use detect::{Detection, DetectorOptions, KeywordDetector};
pub use frames::StreamForm;
pub use kws::{card_features, Classification, KwsClassifier};
pub use spotter::{KeywordSpotter, SpotterOptions};
pub use stream::{KwsStream, WindowVerdict};
pub use vad::{SileroVad, VoiceGate};

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
    /// Streaming options are out of range.
    #[error("{reason}")]
    Options {
        /// Which option, its value and what it must be.
        reason: String,
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

impl InferError {
    /// tract could not load or optimise the ONNX file at `path`.
    pub(crate) fn onnx(path: &Path, reason: String) -> Self {
        Self::Onnx {
            path: path.to_path_buf(),
            reason,
        }
    }

    /// The ONNX file at `path` loads but breaks the contract `reason` names.
    pub(crate) fn foreign(path: &Path, reason: String) -> Self {
        Self::ForeignOnnx {
            path: path.to_path_buf(),
            reason,
        }
    }
}

/// Reads the ONNX file at `path` with tract and checks what every model of ours has: one
/// input (`input` describes it for the error). Returns the model and its output names.
pub(crate) fn read_onnx(
    path: &Path,
    input: &str,
) -> Result<(InferenceModel, Vec<String>), InferError> {
    let onnx = |e: anyhow::Error| InferError::onnx(path, format!("{e:#}"));
    if !path.is_file() {
        return Err(InferError::onnx(path, "missing file".into()));
    }
    let model = tract_onnx::onnx().model_for_path(path).map_err(onnx)?;
    let inputs = model.input_outlets().map_err(onnx)?.len();
    if inputs != 1 {
        return Err(InferError::foreign(
            path,
            format!("{inputs} inputs; expected one, {input}"),
        ));
    }
    let names = model
        .output_outlets()
        .map_err(onnx)?
        .iter()
        .map(|o| model.node(o.node).name.clone())
        .collect();
    Ok((model, names))
}

/// Optimises a model for this device: tract's passes with the kernels tract lacks swapped
/// in (`hush_tract_ops::optimize`: depthwise convolutions with what follows them folded in,
/// max pooling, sums over trailing axes, elementwise chains along one axis).
/// Returns the model and which of tract's ops it swapped.
pub(crate) fn optimize_for_device(
    model: InferenceModel,
) -> TractResult<(TypedModel, hush_tract_ops::Swapped)> {
    hush_tract_ops::optimize(model.into_typed()?)
}

/// Runs `plan` on one input of `shape` (e.g. `[1, frames, bins]` features) and returns its
/// output number `output`, flattened; errors name `origin`.
pub(crate) fn run_plan(
    plan: &Plan,
    values: &[f32],
    shape: &[usize],
    output: usize,
    origin: &Path,
) -> Result<Vec<f32>, InferError> {
    let run = |reason: String| InferError::Run {
        path: origin.to_path_buf(),
        reason,
    };
    let input = tract_ndarray::ArrayD::from_shape_vec(shape, values.to_vec())
        .map_err(|e| run(e.to_string()))?
        .into_tensor();
    let out = plan
        .run(tvec!(input.into_tvalue()))
        .map_err(|e| run(format!("{e:#}")))?;
    output_values(&out, output).map_err(run)
}

/// Output number `i` of a plan's run, flattened to f32s (or why not).
pub(crate) fn output_values(out: &TVec<TValue>, i: usize) -> Result<Vec<f32>, String> {
    Ok(out
        .get(i)
        .ok_or_else(|| format!("no output {i}"))?
        .to_plain_array_view::<f32>()
        .map_err(|e| format!("{e:#}"))?
        .iter()
        .copied()
        .collect())
}
