//! Per-example gradients and the clipped sum that DP-SGD noises.
//!
//! [`per_example_grads`] runs forward and backward on each example alone (the reference and
//! the fallback); [`clipped_grad_sum`] does the same but clips each example's gradient as
//! soon as it exists and adds it to a running sum, so memory holds one example's gradient
//! and the sum, never the whole batch of per-example gradients (gradient accumulation over
//! physical batches of one). Gradients are [`NamedTensor`]s named and ordered like the
//! trainable entries of [`KwsModel::named_tensors`] ([`KwsModel::named_grads`]); apply them
//! with [`apply_sgd`], or turn them into burn [`GradientsParams`] with
//! [`KwsModel::grads_params`] and step any burn optimizer (AdamW).
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
//! configure dropout 0 to compare with a batch gradient exactly.
//!
//! The vectorised fast path (per-example weight copies, grouped conv with `groups = B`) is
//! not implemented yet; the loop is what runs.

use burn::optim::{GradientsParams, SgdConfig};
use burn::tensor::Device;

use super::{l2_norm, ClipBounds};
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

/// Example `i` of `batch` as a batch of one.
fn example(batch: &Batch, i: usize) -> Batch {
    let per = batch.frames * batch.bins;
    Batch {
        features: batch.features[i * per..(i + 1) * per].to_vec(),
        targets: batch.targets[i * batch.classes..(i + 1) * batch.classes].to_vec(),
        batch: 1,
        frames: batch.frames,
        bins: batch.bins,
        classes: batch.classes,
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
/// autodiff `device`, batch norms on stored statistics).
pub fn per_example_grads(
    model: &KwsModel,
    batch: &Batch,
    device: &Device,
) -> Result<Vec<Vec<NamedTensor>>, ModelError> {
    check_sizes(batch)?;
    let model = per_example_model(model);
    (0..batch.batch)
        .map(|i| {
            let (_, grads) = loss_and_grads(&model, &example(batch, i), device)?;
            model.named_grads(&grads)
        })
        .collect()
}

/// Sum over `batch` of each example's gradient clipped to `bounds` (only the layers the
/// bounds name, in their order: frozen layers are left out of the bounds and of the sum).
/// An empty batch (Poisson sampling can draw none) gives zeros.
pub fn clipped_grad_sum(
    model: &KwsModel,
    batch: &Batch,
    bounds: &ClipBounds,
    device: &Device,
) -> Result<ClippedSum, ModelError> {
    clipped_grad_sum_with(model, batch, bounds, Bounding::Clip, device)
}

/// [`clipped_grad_sum`] with a choice of clipping or layer-wise normalisation.
pub fn clipped_grad_sum_with(
    model: &KwsModel,
    batch: &Batch,
    bounds: &ClipBounds,
    bounding: Bounding,
    device: &Device,
) -> Result<ClippedSum, ModelError> {
    check_sizes(batch)?;
    let model = per_example_model(model);
    let layout = model.named_tensors()?;
    let trainable: Vec<&NamedTensor> = layout.iter().filter(|t| is_trainable(&t.name)).collect();
    // Position of each bounded layer among the trainable tensors.
    let mut picks = Vec::with_capacity(bounds.layers().len());
    for name in bounds.layers() {
        let Some(i) = trainable.iter().position(|t| &t.name == name) else {
            return Err(ModelError::TensorData {
                name: name.clone(),
                reason: "clip bounds name a tensor that is not a trainable parameter".into(),
            });
        };
        picks.push(i);
    }
    let mut sum: Vec<NamedTensor> = picks
        .iter()
        .map(|&i| {
            let t = trainable[i];
            NamedTensor::new(&t.name, t.shape.clone(), vec![0.0; t.data.len()])
        })
        .collect::<Result<_, _>>()?;
    let mut out = ClippedSum {
        sum: Vec::new(),
        loss_sum: 0.0,
        examples: 0,
        clipped: 0,
    };
    let dp_err = |e: super::DpError| ModelError::TensorData {
        name: "per-example gradient".into(),
        reason: e.to_string(),
    };
    for i in 0..batch.batch {
        let (loss, grads) = loss_and_grads(&model, &example(batch, i), device)?;
        let all = model.named_grads(&grads)?;
        drop(grads);
        let mut all: Vec<Option<NamedTensor>> = all.into_iter().map(Some).collect();
        let mut picked: Vec<NamedTensor> = picks
            .iter()
            .map(|&j| {
                all.get_mut(j)
                    .and_then(Option::take)
                    .ok_or_else(|| ModelError::TensorData {
                        name: trainable[j].name.clone(),
                        reason: "no gradient".into(),
                    })
            })
            .collect::<Result<_, _>>()?;
        let norms = match bounding {
            Bounding::Clip => bounds.clip(&mut picked),
            Bounding::Normalize => bounds.normalize(&mut picked),
        }
        .map_err(dp_err)?;
        let over = if bounds.is_flat() {
            l2_norm(&norms) > bounds.bounds()[0]
        } else {
            norms.iter().zip(bounds.bounds()).any(|(n, b)| n > b)
        };
        out.clipped += usize::from(over);
        for (s, g) in sum.iter_mut().zip(&picked) {
            s.data.iter_mut().zip(&g.data).for_each(|(s, g)| *s += g);
        }
        out.loss_sum += loss;
        out.examples += 1;
    }
    out.sum = sum;
    Ok(out)
}

/// Plain SGD on named gradients: `w ← w − lr·g` for every tensor in `grads` (names as in
/// [`KwsModel::named_grads`]; tensors not given are left unchanged). For AdamW or any other
/// burn optimizer, use [`KwsModel::grads_params`] and the optimizer's `step`.
pub fn apply_sgd(model: KwsModel, grads: &[NamedTensor], lr: f32) -> Result<KwsModel, ModelError> {
    let params: GradientsParams = model.grads_params(grads)?;
    let mut sgd = SgdConfig::new().init();
    Ok(sgd.step(f64::from(lr), model, params))
}
