//! A keyword spotter's streaming form: the per-frame trunk (`frames.onnx`) and the head
//! (`head.onnx`) a package carries beside `model.onnx` when its architecture can run
//! incrementally (hush-models' `ArchConfig::stream_geometry`: DS-CNN-S or BC-ResNet with
//! valid time padding, leak-CNN configured `streaming`). The trunk's output frame `j`
//! depends only on input frames `[j·stride, j·stride + receptive_field)`, and the
//! whole-window model is the head over a window's output frames (their mean, or for
//! leak-CNN the frames in order: `HeadInput`), so a stream computes each output frame once
//! and a window costs the frames it adds ([`KwsStream`](super::KwsStream) does the
//! bookkeeping).
//!
//! The trunk's frame count is symbolic in the file; it is fixed per chunk length when a
//! length is first asked for ([`StreamForm::trunk_plan`]), so that tract and hush's kernels
//! see concrete shapes. For a stream fed a fixed number of frames at a time, the trunk runs
//! as a stateful one pulsed by tract ([`StreamForm::pulsed_trunk`]): each layer keeps its
//! own last frames, so every frame goes through every layer once. The host may ship it
//! pulsed (`frames.pulse6.nnef.tar`); otherwise tract-pulse pulses it here, in a build with
//! the `pulse` feature.
//!
//! Each file may be its NNEF archive instead (`frames.nnef.tar`, `head.nnef.tar`:
//! [`super::graph`]).

use std::path::{Path, PathBuf};

use hush_models::arch::StreamGeometry;
use hush_models::export::nnef::pulsed_trunk_archive;
use hush_models::export::onnx::{FRAMES, POOLED, PROBS};
use hush_models::package::{ModelCard, STREAM_FRAMES, STREAM_HEAD};
use tract_nnef::prelude::*;

use super::graph::{self, archive_path, Dim, ModelFile};
use super::{run_plan, InferError, Plan};

/// The streaming form of a keyword spotter, loaded and checked.
#[derive(Debug, Clone)]
pub struct StreamForm {
    /// `frames.onnx` (or its archive) as read, its frame count still symbolic.
    trunk: Arc<ModelFile>,
    trunk_path: PathBuf,
    /// The package.
    dir: PathBuf,
    head: Plan,
    head_path: PathBuf,
    geometry: StreamGeometry,
    channels: usize,
    /// Values the head takes ([`StreamGeometry::head_width`]).
    head_width: usize,
    bins: usize,
}

impl StreamForm {
    /// The streaming form in package `dir` with `card`, if it has one: `None` when neither
    /// `frames.onnx` nor `head.onnx` is there (nor their NNEF archives); an error when only
    /// one is, when the card's architecture has no streaming form, or when a file breaks its
    /// contract.
    pub fn load(dir: &Path, card: &ModelCard) -> Result<Option<Self>, InferError> {
        let (trunk_path, head_path) = (dir.join(STREAM_FRAMES), dir.join(STREAM_HEAD));
        let there = |onnx: &Path| onnx.is_file() || archive_path(onnx).is_file();
        match (there(&trunk_path), there(&head_path)) {
            (false, false) => return Ok(None),
            (true, false) => return Err(InferError::load(&head_path, "missing file".into())),
            (false, true) => return Err(InferError::load(&trunk_path, "missing file".into())),
            (true, true) => {}
        }
        let geometry = card.arch.stream_geometry().ok_or_else(|| {
            InferError::foreign(
                &trunk_path,
                format!(
                    "the package's architecture ({} as model.json configures it) has no \
                     streaming form",
                    card.arch.name()
                ),
            )
        })?;
        let io = card.arch.io();
        let trunk = ModelFile::read(&trunk_path)?;
        let trunk_path = trunk.path().to_path_buf();
        trunk.expect_inputs(&format!("`features` [1, frames, {}]", io.bins))?;
        let names = trunk.output_names();
        if names != [FRAMES] {
            return Err(InferError::foreign(
                &trunk_path,
                format!("outputs are {names:?}; expected one output named `{FRAMES}`"),
            ));
        }
        // A whole window's frames: the shape every later chunk follows. (Typed only: the
        // chunks a stream runs are optimised when it first asks for them.)
        let window = [Dim::Is(1), Dim::Is(io.frames), Dim::Is(io.bins)];
        let shape: Vec<usize> = trunk
            .typed(&[&window])
            .and_then(|m| Ok(m.output_fact(0)?.shape.as_concrete().map(<[usize]>::to_vec)))
            .map_err(|e| {
                InferError::foreign(
                    &trunk_path,
                    format!("input {} f32: {e:#}", graph::shape_text(&window)),
                )
            })?
            .unwrap_or_default();
        let channels = match shape[..] {
            [1, vectors, channels] if vectors == geometry.window_vectors => channels,
            _ => {
                return Err(InferError::foreign(
                    &trunk_path,
                    format!(
                        "a {}-frame window gives frames {shape:?}; model.json's architecture \
                         says [1, {}, channels]",
                        io.frames, geometry.window_vectors
                    ),
                ))
            }
        };
        let head_width = geometry.head_width(channels);
        let (head, head_path) = load_head(&head_path, head_width, io.classes)?;
        let form = Self {
            trunk: Arc::new(trunk),
            trunk_path,
            dir: dir.to_path_buf(),
            head,
            head_path,
            geometry,
            channels,
            head_width,
            bins: io.bins,
        };
        Ok(Some(form))
    }

    /// The time axis: receptive field, stride, frames per window.
    pub fn geometry(&self) -> StreamGeometry {
        self.geometry
    }

    /// Values in one output frame (the trunk's channels; for leak-CNN channels × bins).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// The trunk pulsed for a stream fed `pulse` input frames at a time (a multiple of the
    /// stride): a stateful plan each run of which takes the next `pulse` frames and gives
    /// `pulse / stride` output frames, the first [`PulsedTrunk::delay`] of them before the
    /// stream's first output frame. It is the archive the host prepared for that pulse
    /// (`frames.pulse{pulse}.nnef.tar`, written by `write_listen_archive`) when the
    /// package has one; otherwise tract-pulse pulses the trunk here, in a build with the
    /// `pulse` feature; `None` in a build without it.
    pub fn pulsed_trunk(&self, pulse: usize) -> Result<Option<PulsedTrunk>, InferError> {
        let archive = self.dir.join(pulsed_trunk_archive(pulse));
        let (model, path) = if archive.is_file() {
            let model = graph::nnef_reader()
                .model_for_path(&archive)
                .map_err(|e| InferError::load(&archive, format!("{e:#}")))?;
            (model, archive)
        } else {
            #[cfg(not(feature = "pulse"))]
            return Ok(None);
            #[cfg(feature = "pulse")]
            (self.pulsed_model(pulse)?, self.trunk_path.clone())
        };
        let fail = |e: TractError| {
            InferError::foreign(
                &path,
                format!("the trunk pulsed {pulse} frames at a time: {e:#}"),
            )
        };
        let delay = model
            .properties
            .get("pulse.delay")
            .and_then(|d| {
                d.try_as_plain_ram()
                    .ok()?
                    .as_slice::<i64>()
                    .ok()?
                    .first()
                    .copied()
            })
            .and_then(|d| usize::try_from(d).ok())
            .ok_or_else(|| fail(TractError::msg("no `pulse.delay` for its output")))?;
        let shapes = (
            model
                .input_fact(0)
                .map_err(fail)?
                .shape
                .as_concrete()
                .map(<[usize]>::to_vec),
            model
                .output_fact(0)
                .map_err(fail)?
                .shape
                .as_concrete()
                .map(<[usize]>::to_vec),
        );
        let (input, output) = (
            vec![1, pulse, self.bins],
            vec![1, pulse / self.geometry.stride, self.channels],
        );
        if shapes != (Some(input.clone()), Some(output.clone())) {
            return Err(fail(TractError::msg(format!(
                "takes {:?} and gives {:?}; expected {input:?} and {output:?}",
                shapes.0, shapes.1
            ))));
        }
        let (model, _) = hush_tract_ops::optimize(model).map_err(fail)?;
        let plan = model.into_runnable().map_err(fail)?;
        Ok(Some(PulsedTrunk { plan, pulse, delay }))
    }

    /// The trunk pulsed by tract-pulse `pulse` frames at a time, as tract gives it (before
    /// the device's optimisation).
    #[cfg(feature = "pulse")]
    fn pulsed_model(&self, pulse: usize) -> Result<TypedModel, InferError> {
        self.trunk
            .typed(&[&[Dim::Is(1), Dim::Free("frames"), Dim::Is(self.bins)]])
            .and_then(|m| m.into_decluttered())
            .and_then(|m| hush_models::export::nnef::pulse_trunk(&m, pulse))
            .map_err(|e| {
                InferError::foreign(
                    &self.trunk_path,
                    format!("the trunk pulsed {pulse} frames at a time: {e:#}"),
                )
            })
    }

    /// Runs `state` (of a [`StreamForm::pulsed_trunk`]) on the next pulse of `features`
    /// (`pulse × bins`) and appends its output frames to `out`.
    pub fn pulse_vectors(
        &self,
        state: &mut TypedSimpleState,
        features: &[f32],
        out: &mut Vec<f32>,
    ) -> Result<(), InferError> {
        let pulse = features.len() / self.bins.max(1);
        let run = |reason: String| InferError::Run {
            path: self.trunk_path.clone(),
            reason,
        };
        let input =
            tract_ndarray::ArrayD::from_shape_vec(&[1, pulse, self.bins][..], features.to_vec())
                .map_err(|e| run(e.to_string()))?
                .into_tensor();
        let outputs = state
            .run(tvec!(input.into_tvalue()))
            .map_err(|e| run(format!("{e:#}")))?;
        out.extend_from_slice(&super::output_values(&outputs, 0).map_err(run)?);
        Ok(())
    }

    /// The trunk, optimised for chunks of `frames` input frames (built at each call: a
    /// stream keeps the plans it uses).
    pub fn trunk_plan(&self, frames: usize) -> Result<Plan, InferError> {
        let (path, bins) = (&self.trunk_path, self.bins);
        let model = self
            .trunk
            .typed(&[&[Dim::Is(1), Dim::Is(frames), Dim::Is(bins)]])
            .map_err(|e| {
                InferError::foreign(path, format!("input [1, {frames}, {bins}] f32: {e:#}"))
            })?;
        let (model, _) = hush_tract_ops::optimize(model)
            .map_err(|e| InferError::foreign(path, format!("a {frames}-frame chunk: {e:#}")))?;
        model
            .into_runnable()
            .map(Plan::from)
            .map_err(|e| InferError::load(path, format!("{e:#}")))
    }

    /// Runs `plan` (from [`StreamForm::trunk_plan`] for `frames`) over `features`
    /// (`frames × bins`) and appends its output frames (`channels` values each) to `out`.
    pub fn frame_vectors(
        &self,
        plan: &Plan,
        features: &[f32],
        frames: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), InferError> {
        let v = run_plan(plan, features, &[1, frames, self.bins], 0, &self.trunk_path)?;
        out.extend_from_slice(&v);
        Ok(())
    }

    /// Class probabilities from what the head reads of a window's output frames
    /// ([`StreamGeometry::head_width`] values: their mean, or the frames in order).
    pub fn probs(&self, pooled: &[f32]) -> Result<Vec<f32>, InferError> {
        run_plan(
            &self.head,
            pooled,
            &[1, self.head_width],
            1,
            &self.head_path,
        )
    }
}

/// The trunk as tract-pulse runs it ([`StreamForm::pulsed_trunk`]).
#[derive(Debug, Clone)]
pub struct PulsedTrunk {
    /// The stateful plan (a state per stream: `plan.spawn()`).
    pub plan: Arc<TypedRunnableModel>,
    /// Input frames per run.
    pub pulse: usize,
    /// Output frames a fresh state gives before the first one of its input (they read the
    /// zeros its buffers start with).
    pub delay: usize,
}

/// `head.onnx`, checked: input `pooled` `[1, width]` (what it reads of a window's output
/// frames), outputs `logits` and `probs` `[1, classes]`.
fn load_head(path: &Path, width: usize, classes: usize) -> Result<(Plan, PathBuf), InferError> {
    let file = ModelFile::read(path)?;
    let path = file.path();
    let foreign = |reason: String| InferError::foreign(path, reason);
    file.expect_inputs(&format!("`{POOLED}` [N, {width}]"))?;
    let names = file.output_names();
    if names.iter().position(|n| n == PROBS) != Some(1) {
        return Err(foreign(format!(
            "outputs are {names:?}; expected `logits` and `{PROBS}` [N, {classes}]"
        )));
    }
    let model = file
        .typed(&[&[Dim::Is(1), Dim::Is(width)]])
        .map_err(|e| foreign(format!("input [1, {width}] f32: {e:#}")))?;
    let (model, _) = hush_tract_ops::optimize(model)
        .map_err(|e| foreign(format!("input [1, {width}]: {e:#}")))?;
    let shape: Vec<String> = model
        .output_fact(1)
        .map_err(|e| InferError::load(path, format!("{e:#}")))?
        .shape
        .iter()
        .map(|d| d.to_string())
        .collect();
    if shape != [1.to_string(), classes.to_string()] {
        return Err(foreign(format!(
            "`{PROBS}` has shape [{}] for one window; model.json has {classes} labels",
            shape.join(", ")
        )));
    }
    let plan = model
        .into_runnable()
        .map_err(|e| InferError::load(path, format!("{e:#}")))?;
    Ok((plan.into(), path.to_path_buf()))
}
