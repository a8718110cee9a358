//! Inference on the device with tract: a model package (`model.json` + `model.onnx`, or
//! the NNEF archive prepared from it: [`graph`]) in, class scores out. Every model is
//! optimised by `hush_tract_ops::optimize` (tract's passes with hush's kernels swapped in).
//! [`clip`] fits audio to the model's window and computes its features — the one definition
//! the host trainer uses too, so training and inference see the same numbers. [`kws`] loads
//! and runs keyword spotters; [`stream`] runs one over a stream of audio, window by window
//! (incrementally, through the model's streaming form [`frames`], where the package has
//! one), and [`detect`] turns its windows into keyword detections; [`spotter`] puts the two
//! together, the streaming loop `hush-device listen` and the C API (`device/capi`) both run;
//! [`vad`] gates it on speech (Silero VAD); [`asr`] loads and runs CTC speech recognisers
//! over whole utterances.
//!
//! It does not train (that is hush-models' step and the host's trainer) and does not
//! resample: audio at another rate than the model's features is refused.

pub mod asr;
pub mod clip;
pub mod detect;
pub mod frames;
pub mod graph;
pub mod kws;
pub mod spotter;
pub mod stream;
pub mod vad;

use std::path::{Path, PathBuf};

use std::sync::{Arc, Mutex};

use tract_nnef::prelude::*;

/// A loaded, optimised tract model ready to run, and, when no run of it carries anything
/// into the next, a spare state for its next run. A state holds what a run needs besides
/// the model (tract's table of values; the output tensors hush's ops write again on the
/// next run instead of making and zeroing new ones, `hush_tract_ops::KeptOutput`), so
/// reusing one saves every run that work. A model with other state (the recogniser's GRU,
/// whose hidden state tract's `Scan` keeps) runs in a fresh state each time. Runs at the
/// same time each get a state: one takes the spare, the others start their own.
#[derive(Debug, Clone)]
pub struct Plan {
    runnable: Arc<TypedRunnableModel>,
    /// `None` when the model's state must not be reused.
    spare: Option<Arc<Mutex<Option<TypedSimpleState>>>>,
}

impl From<Arc<TypedRunnableModel>> for Plan {
    fn from(runnable: Arc<TypedRunnableModel>) -> Self {
        let spare = runnable.spawn().ok().filter(|state| {
            state
                .op_states
                .iter()
                .flatten()
                .all(|s| hush_tract_ops::is_kept_output(s.as_ref()))
        });
        Plan {
            runnable,
            spare: spare.map(|state| Arc::new(Mutex::new(Some(state)))),
        }
    }
}

impl Plan {
    /// Runs the model on `inputs`, in the spare state if it has one and no other run holds
    /// it. A state a run failed in is dropped.
    pub fn run(&self, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let Some(spare) = &self.spare else {
            return self.runnable.run(inputs);
        };
        let kept = spare.try_lock().ok().and_then(|mut s| s.take());
        let mut state = match kept {
            Some(state) => state,
            None => self.runnable.spawn()?,
        };
        let outputs = state.run(inputs)?;
        if let Ok(mut spare) = spare.try_lock() {
            *spare = Some(state);
        }
        Ok(outputs)
    }

    /// Whether runs may reuse a state: the model keeps nothing from one run to the next.
    pub fn reuses_states(&self) -> bool {
        self.spare.is_some()
    }
}

pub use asr::{utterance_features, AsrRecognizer, Decoder, Transcription};
pub use clip::{clip_features, clip_samples, fit_clip};
pub use detect::{Detection, DetectorOptions, KeywordDetector};
pub use frames::StreamForm;
pub use graph::BuildReads;
pub use kws::{card_features, Classification, KwsClassifier};
#[cfg(feature = "pulse")]
pub use spotter::write_listen_archive;
pub use spotter::{listen_files, listen_pulse, KeywordSpotter, SpotterOptions};
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
    /// tract could not load or optimise a model file (`model.onnx`, or the NNEF archive
    /// read in its place).
    #[error("{path}: tract cannot load this model: {reason}")]
    Load {
        /// The model file.
        path: PathBuf,
        /// What tract said.
        reason: String,
    },
    /// A model file loads but is not the model `model.json` describes.
    #[error("{path}: not the model model.json describes: {reason}")]
    Foreign {
        /// The model file.
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
    /// tract could not load or optimise the model file at `path`.
    pub(crate) fn load(path: &Path, reason: String) -> Self {
        Self::Load {
            path: path.to_path_buf(),
            reason,
        }
    }

    /// The model file at `path` loads but breaks the contract `reason` names.
    pub(crate) fn foreign(path: &Path, reason: String) -> Self {
        Self::Foreign {
            path: path.to_path_buf(),
            reason,
        }
    }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tract_nnef::tract_core::ops::cnn::conv::{Conv, KernelFormat};
    use tract_nnef::tract_core::ops::cnn::{PaddingSpec, PoolSpec};
    use tract_nnef::tract_core::ops::nn::DataFormat;

    /// A depthwise convolution of two 5×5 planes, with hush's op swapped in.
    fn depthwise_plan() -> Arc<TypedRunnableModel> {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact([1, 2, 5, 5])).unwrap();
        let k: Vec<f32> = (0..18).map(|i| i as f32 / 7.0 - 1.0).collect();
        let k = model
            .add_const("k", Tensor::from_shape(&[2, 1, 3, 3], &k).unwrap())
            .unwrap();
        let b = model.add_const("b", tensor1(&[0.5f32, -0.25])).unwrap();
        let conv = Conv {
            pool_spec: PoolSpec {
                data_format: DataFormat::NCHW,
                kernel_shape: tvec![3, 3],
                padding: PaddingSpec::Explicit(tvec![1, 1], tvec![1, 1]),
                dilations: None,
                strides: None,
                input_channels: 2,
                output_channels: 2,
            },
            kernel_fmt: KernelFormat::OIHW,
            group: 2,
            q_params: None,
        };
        let y = model.wire_node("dw", conv, &[x, k, b]).unwrap();
        model.select_output_outlets(&y).unwrap();
        let (model, swapped) = hush_tract_ops::optimize(model).unwrap();
        assert_eq!(swapped.depthwise, 1);
        model.into_runnable().unwrap()
    }

    fn input(seed: usize) -> TValue {
        let v: Vec<f32> = (0..50)
            .map(|i| ((i * 7 + seed) % 11) as f32 - 5.0)
            .collect();
        Tensor::from_shape(&[1, 2, 5, 5], &v).unwrap().into_tvalue()
    }

    /// Runs of one plan, in turn and at the same time, give what a fresh state gives, and
    /// an output still held is not written over by a later run.
    #[test]
    fn runs_in_the_spare_state_equal_fresh_runs() {
        let runnable = depthwise_plan();
        let fresh = |seed| runnable.run(tvec![input(seed)]).unwrap().remove(0);
        let plan = Plan::from(runnable.clone());
        assert!(plan.reuses_states());
        let held = plan.run(tvec![input(0)]).unwrap().remove(0);
        for seed in 1..4 {
            assert_eq!(plan.run(tvec![input(seed)]).unwrap()[0], fresh(seed));
        }
        assert_eq!(held, fresh(0));
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..4)
                .map(|seed| {
                    let plan = plan.clone();
                    s.spawn(move || {
                        (0..20)
                            .map(|_| plan.run(tvec![input(seed)]).unwrap().remove(0))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for (seed, run) in runs.into_iter().enumerate() {
                for out in run.join().unwrap() {
                    assert_eq!(out, fresh(seed));
                }
            }
        });
    }
}
