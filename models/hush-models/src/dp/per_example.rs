//! Per-example gradients and the clipped sum that DP-SGD noises.
//!
//! Two ways to the same per-example gradients ([`PerExampleMethod`]):
//!
//! - **vectorised** (the default, [`per_example_grads_vectorized`]): per-example weight
//!   copies, one forward and one backward over the batch ([`super::vectorized`]);
//! - **loop** ([`per_example_grads`]): forward and backward on each example alone — the
//!   reference the fast path is tested against, and the fallback.
//!
//! [`clipped_grad_sum`] clips each example's gradient and adds it to a running sum.
//! **Memory-aware batching** ([`PerExampleConfig::max_grad_memory`]): a logical batch is
//! split into physical batches whose per-example copies and gradients fit the budget; each
//! physical batch's clipped gradients are added to the sum and dropped (gradient
//! accumulation), so the result equals one physical batch of everything. A budget that
//! cannot hold one example's copies falls back to the loop (one example's gradient at a
//! time, no copies). Gradients are [`NamedTensor`]s named and ordered like the trainable
//! entries of [`KwsModel::named_tensors`] ([`KwsModel::named_grads`]); apply them with
//! [`apply_sgd`], or turn them into burn [`GradientsParams`] with [`KwsModel::grads_params`]
//! and step any burn optimizer (AdamW).
//!
//! # Batch norm
//!
//! Batch norm in training mode mixes the examples of a batch (each output depends on the
//! batch mean and variance), so one example's gradient is no longer its own and the
//! running statistics, updated from private data, would be released un-noised. DP code
//! therefore runs the model with **frozen batch statistics**
//! ([`KwsModel::with_batch_statistics`]`(false)`, done by [`per_example_model`]): every
//! batch norm normalises with its stored running statistics (from a non-private public
//! warm start when there is one, otherwise the initial mean 0 / variance 1) and keeps its
//! trainable per-channel `gamma`/`beta`. Each example's output then depends on that example
//! alone, the architecture and ONNX export are unchanged, and nothing private reaches the
//! running statistics. The functions here call [`per_example_model`] themselves, so a
//! caller cannot forget it. The leak-CNN has no batch norm.
//!
//! Dropout draws an independent mask per example, which keeps gradients per-example;
//! configure dropout 0 to compare with a batch gradient (or the two methods) exactly.

use burn::module::Module;
use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::Device;

use super::activations::{self, ActivationRecorder};
use super::vectorized::{clipped_sum, grads_and_loss_sum, PerExampleWeights};
use super::ClipBounds;
use crate::arch::{is_trainable, KwsModel};
use crate::checkpoint::NamedTensor;
use crate::step::{loss_and_grads, Batch};
use crate::ModelError;

/// The sum over a batch of per-example clipped (or normalised) gradients.
#[derive(Debug, Clone, PartialEq)]
pub struct ClippedSum {
    /// Sum of clipped gradients, one tensor per layer of the bounds, in their order.
    pub sum: Vec<NamedTensor>,
    /// Sum of the per-example losses.
    pub loss_sum: f32,
    /// Examples summed.
    pub examples: usize,
    /// Examples whose gradient was over its bound (on any layer, for per-layer bounds)
    /// and was scaled down.
    pub clipped: usize,
}

impl ClippedSum {
    /// Bounds one more example's gradient `grads` (any superset of the bounded layers,
    /// picked by name) and adds it to the sum, counting it: for examples whose gradient
    /// is given rather than computed (an audit's gradient-space canaries).
    pub fn add_example(
        &mut self,
        grads: Vec<NamedTensor>,
        bounds: &ClipBounds,
        bounding: Bounding,
    ) -> Result<(), ModelError> {
        let mut sum = std::mem::take(&mut self.sum);
        let r = add_clipped(self, &mut sum, grads, bounds, bounding);
        self.sum = sum;
        r
    }
}

/// How each example's gradient is bounded before summing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bounding {
    /// Scale down to the bound when over it ([`ClipBounds::clip`]).
    #[default]
    Clip,
    /// Scale every layer (or the whole, when flat) to exactly its bound
    /// ([`ClipBounds::normalize`]): layer-wise gradient normalisation.
    Normalize,
}

/// The model as per-example code must run it: batch norms on their stored statistics (see
/// the module documentation). Idempotent.
pub fn per_example_model(model: &KwsModel) -> KwsModel {
    model.clone().with_batch_statistics(false)
}

/// `(name, parameter count)` of every trainable tensor, in order (the layout for
/// [`ClipBounds::new`]).
pub fn trainable_layout(model: &KwsModel) -> Result<Vec<(String, usize)>, ModelError> {
    Ok(model
        .named_tensors()?
        .into_iter()
        .filter(|t| is_trainable(&t.name))
        .map(|t| (t.name, t.data.len()))
        .collect())
}

/// How per-example gradients are computed (all give the same gradients).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PerExampleMethod {
    /// Per-example weight copies, one forward and backward per physical batch
    /// ([`super::vectorized`]).
    #[default]
    Vectorized,
    /// Forward and backward on one example at a time (reference and fallback).
    Loop,
    /// No weight copies: per-example gradients from each layer's saved input and output
    /// gradient ([`super::activations`]); linear weights' gradients are never
    /// materialised (norms and the clipped sum come from the two factors).
    Activations,
}

impl std::str::FromStr for PerExampleMethod {
    type Err = super::DpError;
    fn from_str(s: &str) -> Result<Self, super::DpError> {
        match s {
            "vectorized" => Ok(Self::Vectorized),
            "loop" => Ok(Self::Loop),
            "activations" => Ok(Self::Activations),
            _ => Err(super::bad(
                "per-example method",
                s,
                "one of vectorized, activations, loop",
            )),
        }
    }
}

/// Per-example gradient computation: the method and the memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerExampleConfig {
    /// Vectorised (default) or the loop.
    pub method: PerExampleMethod,
    /// Most bytes of per-example weight copies and their gradients held at once
    /// ([`PerExampleWeights::bytes`]); a logical batch is split into physical batches that
    /// fit, and their clipped sums are added (gradient accumulation). Activations are not
    /// counted.
    pub max_grad_memory: usize,
    /// Threads the physical batches of a clipped sum ([`clipped_grad_sum_with`]) are shared
    /// over (at least 1; a logical batch is split into at least this many physical
    /// batches; [`per_example_grads_with`] runs them in turn). Each thread sums its own contiguous run
    /// of physical batches on its own fork of the model ([`Module::fork`]), and the
    /// partial sums are added in order, so a result does not depend on scheduling. The
    /// per-thread budget is `max_grad_memory / threads`. Dropout masks come from burn's one
    /// process-wide generator, so with dropout a seeded run repeats bit for bit only at 1.
    pub threads: usize,
}

impl Default for PerExampleConfig {
    /// Vectorised, at most 256 MiB of per-example copies and gradients, one thread.
    fn default() -> Self {
        Self {
            method: PerExampleMethod::Vectorized,
            max_grad_memory: 256 << 20,
            threads: 1,
        }
    }
}

impl PerExampleConfig {
    /// The loop, one example at a time.
    pub fn looped() -> Self {
        Self {
            method: PerExampleMethod::Loop,
            ..Self::default()
        }
    }

    /// Examples per physical batch for `numel` parameters with per-example gradients: as
    /// many as the budget holds, 1 for the loop, and 0 when the budget cannot hold one
    /// example's copies (then the loop runs).
    pub fn physical_batch(&self, numel: usize) -> usize {
        match self.method {
            PerExampleMethod::Loop => 1,
            PerExampleMethod::Vectorized | PerExampleMethod::Activations => {
                self.max_grad_memory
                    / self.threads.max(1)
                    / PerExampleWeights::bytes(1, numel.max(1))
            }
        }
    }
}

/// Examples `range` of `batch`.
fn examples(batch: &Batch, range: std::ops::Range<usize>) -> Batch {
    let per = batch.frames * batch.bins;
    Batch {
        features: batch.features[range.start * per..range.end * per].to_vec(),
        targets: batch.targets[range.start * batch.classes..range.end * batch.classes].to_vec(),
        batch: range.len(),
        frames: batch.frames,
        bins: batch.bins,
        classes: batch.classes,
    }
}

/// The physical batches `per` runs `batch` as, each with whether it is vectorised: the loop
/// (or a budget below one example) gives batches of one, not vectorised. `only` names the
/// tensors with per-example gradients (all trainable ones when `None`).
fn physical_batches(
    model: &KwsModel,
    batch: &Batch,
    only: Option<&[String]>,
    per: &PerExampleConfig,
) -> Result<Vec<(Batch, PerExampleMethod)>, ModelError> {
    check_sizes(batch)?;
    let numel: usize = match (per.method, only) {
        // Linear weights' per-example gradients are not materialised.
        (PerExampleMethod::Activations, Some(names)) => {
            ActivationRecorder::materialised_numel(model, names)?
        }
        (PerExampleMethod::Activations, None) => {
            let names: Vec<String> = trainable_layout(model)?
                .into_iter()
                .map(|(n, _)| n)
                .collect();
            ActivationRecorder::materialised_numel(model, &names)?
        }
        (_, Some(names)) => trainable_layout(model)?
            .iter()
            .filter(|(n, _)| names.contains(n))
            .map(|(_, d)| d)
            .sum(),
        (_, None) => model.num_trainable()?,
    };
    let physical = per.physical_batch(numel);
    let (size, method) = if physical == 0 {
        (1, PerExampleMethod::Loop)
    } else {
        // At least one physical batch per thread.
        let share = batch.batch.div_ceil(per.threads.max(1)).max(1);
        (physical.min(share), per.method)
    };
    Ok((0..batch.batch)
        .step_by(size)
        .map(|start| {
            let end = (start + size).min(batch.batch);
            (examples(batch, start..end), method)
        })
        .collect())
}

/// Per-example gradients `[example][tensor]` (of the tensors in `only`, or all trainable)
/// and the loss sum of one physical batch.
fn physical_grads(
    model: &KwsModel,
    batch: &Batch,
    method: PerExampleMethod,
    only: Option<&[String]>,
    device: &Device,
) -> Result<(Vec<Vec<NamedTensor>>, f32), ModelError> {
    match method {
        PerExampleMethod::Vectorized => grads_and_loss_sum(model, batch, only, device),
        PerExampleMethod::Activations => {
            activations::grads_and_loss_sum(model, batch, only, device)
        }
        PerExampleMethod::Loop => {
            let (loss, grads) = loss_and_grads(model, batch, device)?;
            Ok((vec![model.named_grads(&grads)?], loss))
        }
    }
}

fn check_sizes(batch: &Batch) -> Result<(), ModelError> {
    if batch.features.len() != batch.batch * batch.frames * batch.bins
        || batch.targets.len() != batch.batch * batch.classes
    {
        return Err(ModelError::BadBatch {
            reason: format!(
                "{} feature and {} target values for {} examples of {}×{} and {} classes",
                batch.features.len(),
                batch.targets.len(),
                batch.batch,
                batch.frames,
                batch.bins,
                batch.classes
            ),
        });
    }
    Ok(())
}

/// Every example's gradient of its own loss, each named and ordered like the trainable
/// tensors of [`KwsModel::named_tensors`] (forward and backward per example, on an
/// autodiff `device`, batch norms on stored statistics): the reference loop.
pub fn per_example_grads(
    model: &KwsModel,
    batch: &Batch,
    device: &Device,
) -> Result<Vec<Vec<NamedTensor>>, ModelError> {
    per_example_grads_with(model, batch, &PerExampleConfig::looped(), device)
}

/// [`per_example_grads`] by the vectorised fast path (per-example weight copies; one
/// physical batch of everything).
pub fn per_example_grads_vectorized(
    model: &KwsModel,
    batch: &Batch,
    device: &Device,
) -> Result<Vec<Vec<NamedTensor>>, ModelError> {
    let per = PerExampleConfig {
        method: PerExampleMethod::Vectorized,
        max_grad_memory: usize::MAX,
        threads: 1,
    };
    per_example_grads_with(model, batch, &per, device)
}

/// [`per_example_grads`] by the method and memory budget of `per`.
pub fn per_example_grads_with(
    model: &KwsModel,
    batch: &Batch,
    per: &PerExampleConfig,
    device: &Device,
) -> Result<Vec<Vec<NamedTensor>>, ModelError> {
    let model = per_example_model(model);
    let mut out = Vec::with_capacity(batch.batch);
    for (b, method) in physical_batches(&model, batch, None, per)? {
        out.extend(physical_grads(&model, &b, method, None, device)?.0);
    }
    Ok(out)
}

/// Sum over `batch` of each example's gradient clipped to `bounds` (only the layers the
/// bounds name, in their order: frozen layers are left out of the bounds and of the sum),
/// vectorised within the default memory budget. An empty batch (Poisson sampling can draw
/// none) gives zeros.
pub fn clipped_grad_sum(
    model: &KwsModel,
    batch: &Batch,
    bounds: &ClipBounds,
    device: &Device,
) -> Result<ClippedSum, ModelError> {
    clipped_grad_sum_with(
        model,
        batch,
        bounds,
        Bounding::Clip,
        &PerExampleConfig::default(),
        device,
    )
}

/// [`clipped_grad_sum`] with a choice of clipping or layer-wise normalisation, and of the
/// per-example method and memory budget.
pub fn clipped_grad_sum_with(
    model: &KwsModel,
    batch: &Batch,
    bounds: &ClipBounds,
    bounding: Bounding,
    per: &PerExampleConfig,
    device: &Device,
) -> Result<ClippedSum, ModelError> {
    if per.threads == 0 {
        return Err(ModelError::BadBatch {
            reason: "per-example threads = 0: need at least 1".into(),
        });
    }
    let layout = model.named_tensors()?;
    let model = per_example_model(model);
    let batches = physical_batches(&model, batch, Some(bounds.layers()), per)?;
    let threads = per.threads.min(batches.len()).max(1);
    if threads == 1 {
        return clipped_sum_of(&model, &batches, &layout, bounds, bounding, device);
    }
    // Contiguous runs of physical batches, one per thread, summed in run order. Each
    // thread gets its own fork of the model (detached parameters, fresh autodiff leaves):
    // burn's autodiff deadlocks when two threads' graphs share a parameter's leaf node.
    let run = batches.len().div_ceil(threads);
    let partials: Vec<Result<ClippedSum, ModelError>> = std::thread::scope(|s| {
        let handles: Vec<_> = batches
            .chunks(run)
            .map(|chunk| {
                let (model, layout) = (model.clone().fork(device), &layout);
                s.spawn(move || clipped_sum_of(&model, chunk, layout, bounds, bounding, device))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let mut out = ClippedSum::empty();
    out.sum = zero_sum(&layout, bounds)?;
    for p in partials {
        let p = p?;
        for (s, g) in out.sum.iter_mut().zip(&p.sum) {
            accumulate(s, &g.data);
        }
        out.loss_sum += p.loss_sum;
        out.clipped += p.clipped;
        out.examples += p.examples;
    }
    Ok(out)
}

/// The clipped sum over `batches` (physical batches of one logical batch, each with its
/// method) on one thread; `model` already runs per example.
fn clipped_sum_of(
    model: &KwsModel,
    batches: &[(Batch, PerExampleMethod)],
    layout: &[NamedTensor],
    bounds: &ClipBounds,
    bounding: Bounding,
    device: &Device,
) -> Result<ClippedSum, ModelError> {
    let mut sum = zero_sum(layout, bounds)?;
    let mut out = ClippedSum::empty();
    let only = Some(bounds.layers());
    for (b, method) in batches {
        let method = *method;
        let exact = bounding == Bounding::Normalize;
        let on_tensors = match method {
            PerExampleMethod::Vectorized => clipped_sum(model, b, bounds, exact, device)?,
            PerExampleMethod::Activations => {
                activations::clipped_sum(model, b, bounds, exact, device)?
            }
            PerExampleMethod::Loop => None,
        };
        if let Some(p) = on_tensors {
            for (s, g) in sum.iter_mut().zip(&p.sum) {
                accumulate(s, g);
            }
            out.loss_sum += p.loss_sum;
            out.clipped += p.clipped;
            out.examples += b.batch;
            continue;
        }
        // The loop, or a physical batch with a non-finite gradient: clip on the host.
        let (grads, loss_sum) = physical_grads(model, b, method, only, device)?;
        for all in grads {
            add_clipped(&mut out, &mut sum, all, bounds, bounding)?;
        }
        out.loss_sum += loss_sum;
    }
    out.sum = sum;
    Ok(out)
}

/// `sum += g`, element by element.
fn accumulate(sum: &mut NamedTensor, g: &[f32]) {
    sum.data.iter_mut().zip(g).for_each(|(s, g)| *s += g);
}

/// Zeros shaped like the layers `bounds` names, taken from the model's tensors `layout`
/// (each must be a trainable parameter).
fn zero_sum(layout: &[NamedTensor], bounds: &ClipBounds) -> Result<Vec<NamedTensor>, ModelError> {
    bounds
        .layers()
        .iter()
        .map(|name| {
            let Some(t) = layout
                .iter()
                .find(|t| &t.name == name && is_trainable(&t.name))
            else {
                return Err(ModelError::TensorData {
                    name: name.clone(),
                    reason: "clip bounds name a tensor that is not a trainable parameter".into(),
                });
            };
            NamedTensor::new(name, t.shape.clone(), vec![0.0; t.data.len()])
        })
        .collect()
}

impl ClippedSum {
    fn empty() -> Self {
        Self {
            sum: Vec::new(),
            loss_sum: 0.0,
            examples: 0,
            clipped: 0,
        }
    }
}

/// The per-example loop for any model: the sum over `n` examples of each one's gradient,
/// given by `grad_of(i)` as its loss and its named trainable gradients (a superset of the
/// layers `bounds` names, picked by name), clipped (or normalised) to `bounds`. `layout`
/// is the model's tensors (named as the gradients; for the sum's shapes). Models without a
/// vectorised path (the ASR encoder) use this; [`clipped_grad_sum_with`] falls back to it
/// for keyword spotters. `n = 0` gives zeros.
pub fn clipped_sum_by_loop(
    layout: &[NamedTensor],
    bounds: &ClipBounds,
    bounding: Bounding,
    n: usize,
    mut grad_of: impl FnMut(usize) -> Result<(f32, Vec<NamedTensor>), ModelError>,
) -> Result<ClippedSum, ModelError> {
    let mut sum = zero_sum(layout, bounds)?;
    let mut out = ClippedSum::empty();
    for i in 0..n {
        let (loss, grads) = grad_of(i)?;
        add_clipped(&mut out, &mut sum, grads, bounds, bounding)?;
        out.loss_sum += loss;
    }
    out.sum = sum;
    Ok(out)
}

/// Clips (or normalises) one example's gradients `all` (a superset of the bounded layers,
/// picked by name) and adds them to `sum`, counting the example in `out`.
fn add_clipped(
    out: &mut ClippedSum,
    sum: &mut [NamedTensor],
    all: Vec<NamedTensor>,
    bounds: &ClipBounds,
    bounding: Bounding,
) -> Result<(), ModelError> {
    let mut all: Vec<Option<NamedTensor>> = all.into_iter().map(Some).collect();
    let mut picked = Vec::with_capacity(bounds.layers().len());
    for name in bounds.layers() {
        let t = all
            .iter_mut()
            .find(|t| t.as_ref().is_some_and(|t| &t.name == name))
            .and_then(Option::take)
            .ok_or_else(|| ModelError::TensorData {
                name: name.clone(),
                reason: "no gradient".into(),
            })?;
        picked.push(t);
    }
    let norms = match bounding {
        Bounding::Clip => bounds.clip(&mut picked),
        Bounding::Normalize => bounds.normalize(&mut picked),
    }
    .map_err(|e| ModelError::TensorData {
        name: "per-example gradient".into(),
        reason: e.to_string(),
    })?;
    out.clipped += usize::from(bounds.is_over(&norms));
    for (s, g) in sum.iter_mut().zip(&picked) {
        accumulate(s, &g.data);
    }
    out.examples += 1;
    Ok(())
}

/// Plain SGD on named gradients: `w ← w − lr·g` for every tensor in `grads` (names as in
/// [`KwsModel::named_grads`]; tensors not given are left unchanged). For AdamW or any other
/// burn optimizer, use [`KwsModel::grads_params`] and the optimizer's `step`.
pub fn apply_sgd(model: KwsModel, grads: &[NamedTensor], lr: f32) -> Result<KwsModel, ModelError> {
    let params: GradientsParams = model.grads_params(grads)?;
    let mut sgd = SgdConfig::new().init();
    Ok(sgd.step(f64::from(lr), model, params))
}
