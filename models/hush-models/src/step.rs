//! The training step every trainer shares (host central training now; device local
//! training and DP-SGD later): soft-target cross-entropy, loss and gradients, and the
//! optimizer update, as separate pieces.
//!
//! DP-SGD replaces [`loss_and_grads`] (a mean over the batch) with per-example
//! gradients, clipping and noise, and keeps [`apply_grads`]: the seam is the
//! [`GradientsParams`] handed from one to the other.

use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{Device, Tensor, TensorData};

use crate::arch::KwsModel;
use crate::ModelError;

/// A batch in host memory: features `[batch, frames, bins]` and soft targets
/// `[batch, classes]` (one-hot, label-smoothed or mixed), both row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Features, `batch × frames × bins`.
    pub features: Vec<f32>,
    /// Target distributions, `batch × classes`.
    pub targets: Vec<f32>,
    /// Examples.
    pub batch: usize,
    /// Frames per example.
    pub frames: usize,
    /// Values per frame.
    pub bins: usize,
    /// Classes.
    pub classes: usize,
}

impl Batch {
    fn check(&self) -> Result<(), ModelError> {
        if self.batch == 0 {
            return Err(ModelError::BadBatch {
                reason: "empty batch".into(),
            });
        }
        if self.features.len() != self.batch * self.frames * self.bins {
            return Err(ModelError::BadBatch {
                reason: format!(
                    "{} feature values for {}×{}×{}",
                    self.features.len(),
                    self.batch,
                    self.frames,
                    self.bins
                ),
            });
        }
        if self.targets.len() != self.batch * self.classes {
            return Err(ModelError::BadBatch {
                reason: format!(
                    "{} target values for {}×{}",
                    self.targets.len(),
                    self.batch,
                    self.classes
                ),
            });
        }
        Ok(())
    }

    /// The features as a burn tensor on `device`.
    pub fn features_tensor(&self, device: &Device) -> Tensor<3> {
        Tensor::from_data(
            TensorData::new(self.features.clone(), [self.batch, self.frames, self.bins]),
            device,
        )
    }

    /// The targets as a burn tensor on `device`.
    pub fn targets_tensor(&self, device: &Device) -> Tensor<2> {
        Tensor::from_data(
            TensorData::new(self.targets.clone(), [self.batch, self.classes]),
            device,
        )
    }
}

/// Mean over the batch of `−Σ_c y_c · log softmax(logits)_c`.
pub fn soft_cross_entropy(logits: Tensor<2>, targets: Tensor<2>) -> Tensor<1> {
    let [b, _] = logits.dims();
    (log_softmax(logits, 1) * targets)
        .sum()
        .mul_scalar(-1.0 / b as f64)
}

/// Forward, loss and backward on an autodiff device: the batch-mean loss and the
/// gradients of every trainable parameter.
pub fn loss_and_grads(
    model: &KwsModel,
    batch: &Batch,
    device: &Device,
) -> Result<(f32, GradientsParams), ModelError> {
    batch.check()?;
    let logits = model.forward(batch.features_tensor(device));
    let loss = soft_cross_entropy(logits, batch.targets_tensor(device));
    let grads = GradientsParams::from_grads(loss.backward(), model);
    let value = scalar(loss)?;
    Ok((value, grads))
}

/// One optimizer update with learning rate `lr` (any model: keyword spotters, the CTC
/// recogniser).
pub fn apply_grads<M: burn::module::Module>(
    optimizer: &mut ModuleOptimizer,
    lr: f64,
    model: M,
    grads: GradientsParams,
) -> M {
    optimizer.step(lr, model, grads)
}

/// Class probabilities `[batch][classes]` (run on a model in inference mode,
/// [`burn::module::Module::valid`]).
pub fn predict(
    model: &KwsModel,
    features: &[f32],
    batch: usize,
    frames: usize,
    bins: usize,
    device: &Device,
) -> Result<Vec<Vec<f32>>, ModelError> {
    if features.len() != batch * frames * bins || batch == 0 {
        return Err(ModelError::BadBatch {
            reason: format!(
                "{} feature values for {batch}×{frames}×{bins}",
                features.len()
            ),
        });
    }
    let x = Tensor::from_data(
        TensorData::new(features.to_vec(), [batch, frames, bins]),
        device,
    );
    let probs = softmax(model.forward(x), 1);
    let [_, classes] = probs.dims();
    let data = values(probs, "probs")?;
    Ok(data.chunks(classes).map(<[f32]>::to_vec).collect())
}

/// Logits `[batch][classes]` (as [`predict`], before softmax).
pub fn logits(model: &KwsModel, x: Tensor<3>) -> Result<Vec<Vec<f32>>, ModelError> {
    let out = model.forward(x);
    let [_, classes] = out.dims();
    let data = values(out, "logits")?;
    Ok(data.chunks(classes).map(<[f32]>::to_vec).collect())
}

fn values<const D: usize>(t: Tensor<D>, name: &str) -> Result<Vec<f32>, ModelError> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| ModelError::TensorData {
            name: name.into(),
            reason: format!("{e:?}"),
        })
}

/// The single value of a one-element tensor (a loss).
pub fn scalar(t: Tensor<1>) -> Result<f32, ModelError> {
    values(t, "loss")?
        .first()
        .copied()
        .ok_or_else(|| ModelError::TensorData {
            name: "loss".into(),
            reason: "empty".into(),
        })
}
