//! Per-example gradients from saved layer inputs and output gradients, without weight
//! copies (the rule Opacus's grad samplers use, `opacus/grad_sample/linear.py`, `conv.py`).
//!
//! One forward over the batch with the model's own weights, detached (so the backward
//! computes no weight gradient at all), through [`ActivationRecorder`]: every bounded layer
//! saves its input `a` (detached) and adds a zero "probe" leaf `p` to its output, so that
//! the backward of the summed per-example losses yields `δ = ∂L/∂y` as the probe's
//! gradient. Example `b`'s loss depends only on `y_b`, so `δ_b` is its own. Then, per layer
//! kind:
//!
//! | layer | per-example gradient of example `b` |
//! |---|---|
//! | linear `[in, out]` | weight `a_bᵀ δ_b`, never materialised: norm `‖a_b‖·‖δ_b‖`, clipped sum `(f ⊙ a)ᵀ δ` (one matmul); bias `δ_b` |
//! | conv, `g` groups | weight `δ_b · unfold(a_b)ᵀ` per group (a batched matmul, `[B·g, C_out/g, P] × [B·g, P, C_in/g·k]`); bias `Σ_P δ_b` |
//! | batch norm (stored statistics) | `γ`: `Σ_{h,w} δ_b ⊙ x̂_b`; `β`: `Σ_{h,w} δ_b` |
//!
//! Linear layers are where the copies cost most (the leak-CNN's 11 776 × 128 layer is
//! 1.5 M parameters per example); here they cost one `[B, in]` input and one `[B, out]`
//! gradient. Clipping then runs on the tensors exactly as for the copies
//! ([`clip_on_tensors`], shared by both methods): per-example layer norms, the factors of
//! [`ClipBounds::factors`], a weighted sum over the batch.
//!
//! A layer run twice in one forward (none of hush's architectures does) adds its uses'
//! per-example gradients. Tests check this method against the per-example loop for every
//! architecture (`models/hush-models/tests/dp.rs`).

use std::cell::RefCell;
use std::collections::HashMap;

use burn::module::{Param, ParamId};
use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Linear};
use burn::tensor::{Gradients, Tensor, TensorData};

use super::vectorized::{normalize_with_stored_statistics, PhysicalSum};
use super::ClipBounds;
use crate::arch::conv::taps;
use crate::arch::conv::unfold;
use crate::arch::layers::{conv_with, named, LayerRunner, TensorVisitor};
use crate::arch::{is_trainable, KwsModel};
use crate::checkpoint::NamedTensor;
use crate::step::{scalar, soft_cross_entropy, Batch};
use crate::ModelError;

/// One bounded tensor's per-example gradients over a physical batch of `B`.
// A handful live per step, each holding tensor handles (not data): size does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum LayerGrads {
    /// Materialised, `[B, numel]`.
    Rows(Tensor<2>),
    /// A linear weight's `a_bᵀ δ_b`: inputs `[B, in]`, output gradients `[B, out]`.
    Outer(Tensor<2>, Tensor<2>),
}

impl LayerGrads {
    /// Squared per-example norms, `[B, 1]`.
    fn squared_norms(&self) -> Tensor<2> {
        match self {
            Self::Rows(g) => (g.clone() * g.clone()).sum_dim(1),
            Self::Outer(a, d) => {
                (a.clone() * a.clone()).sum_dim(1) * (d.clone() * d.clone()).sum_dim(1)
            }
        }
    }

    /// `Σ_b f_b g_b`, `f` `[B, 1]`, flattened in the tensor's own layout.
    fn weighted_sum(self, f: Tensor<2>) -> Tensor<2> {
        match self {
            Self::Rows(g) => (g * f).sum_dim(0),
            Self::Outer(a, d) => {
                let w = (a * f).transpose().matmul(d);
                let n = w.shape().num_elements();
                w.reshape([1, n])
            }
        }
    }

    /// Materialised `[B, numel]`.
    fn into_rows(self) -> Tensor<2> {
        match self {
            Self::Rows(g) => g,
            Self::Outer(a, d) => {
                let [b, i] = a.dims();
                let [_, o] = d.dims();
                a.reshape([b, i, 1])
                    .matmul(d.reshape([b, 1, o]))
                    .reshape([b, i * o])
            }
        }
    }
}

/// Per-example weight gradients `[B, C_out·(C_in/g)·k]` (the weight's own layout) of conv
/// `c` from its input `x` `[B, C_in, H, W]` and output gradient `d` `[B, C_out, P]`. One
/// input channel per group (depthwise): per tap, `Σ_P δ ⊙ window` (no unfolded copy of the
/// input, no tiny matmuls); otherwise a batched matmul with the unfolded input per group.
fn conv_weight_grads(c: &Conv2d, x: Tensor<4>, d: Tensor<3>) -> Tensor<2> {
    let [b, cin, _, _] = x.dims();
    let [_, cout, p] = d.dims();
    let [kh, kw] = c.kernel_size;
    let k = kh * kw;
    let g = c.groups;
    let (og, ig) = (cout / g, cin / g);
    if ig == 1 {
        let d = d.reshape([b, g, og, p]);
        let per_tap: Vec<Tensor<3>> = taps(c, x)
            .into_iter()
            .map(|t| {
                (d.clone() * t.reshape([b, g, 1, p]))
                    .sum_dim(3)
                    .reshape([b, cout, 1])
            })
            .collect();
        return Tensor::cat(per_tap, 2).reshape([b, cout * k]);
    }
    let cols = unfold(c, x).reshape([b * g, ig * k, p]);
    d.reshape([b * g, og, p])
        .matmul(cols.swap_dims(1, 2))
        .reshape([b, cout * ig * k])
}

/// Clips each example's gradient (`exact = false`) or normalises it (`exact = true`) to
/// `bounds` and sums over the physical batch of `b`, on the tensors. `layers` are in
/// `bounds.layers()` order. `None` when some example's gradient is not finite: the caller
/// then clips on the host, which drops such an example exactly.
pub(crate) fn clip_on_tensors(
    layers: Vec<LayerGrads>,
    bounds: &ClipBounds,
    exact: bool,
    b: usize,
    loss_sum: f32,
) -> Result<Option<PhysicalSum>, ModelError> {
    // norms[layer][example]
    let norms: Vec<Vec<f32>> = layers
        .iter()
        .map(|g| {
            Ok(named("per-example norms", g.squared_norms())?
                .data
                .into_iter()
                .map(f32::sqrt)
                .collect())
        })
        .collect::<Result<_, ModelError>>()?;
    let mut factors = vec![Vec::with_capacity(b); layers.len()];
    let mut clipped = 0;
    for ex in 0..b {
        let n: Vec<f32> = norms.iter().map(|l| l[ex]).collect();
        let f = bounds.factors(&n, exact);
        if f.contains(&0.0) {
            return Ok(None);
        }
        clipped += usize::from(bounds.is_over(&n));
        for (col, v) in factors.iter_mut().zip(f) {
            col.push(v);
        }
    }
    let mut sum = Vec::with_capacity(layers.len());
    for (g, f) in layers.into_iter().zip(factors) {
        let device = match &g {
            LayerGrads::Rows(t) | LayerGrads::Outer(t, _) => t.device(),
        };
        let f = Tensor::<2>::from_data(TensorData::new(f, [b, 1]), &device);
        sum.push(named("clipped sum", g.weighted_sum(f))?.data);
    }
    Ok(Some(PhysicalSum {
        sum,
        loss_sum,
        clipped,
    }))
}

/// What one bounded layer saved in the forward.
// One per bounded layer per step, tensor handles only: size does not matter.
#[allow(clippy::large_enum_variant)]
enum Saved {
    Linear {
        weight: Option<String>,
        bias: Option<String>,
        input: Tensor<2>,
        probe: Tensor<2>,
    },
    Conv {
        weight: Option<String>,
        bias: Option<String>,
        conv: Conv2d,
        /// The layer's input, detached.
        input: Tensor<4>,
        probe: Tensor<4>,
    },
    BatchNorm {
        gamma: Option<String>,
        beta: Option<String>,
        normalized: Tensor<4>,
        probe: Tensor<4>,
    },
}

/// A [`LayerRunner`] that runs every layer with the model's weights, detached, and saves
/// what the per-example gradients of the bounded tensors need (see the module docs).
pub(crate) struct ActivationRecorder {
    /// Bounded tensors by parameter id.
    names: HashMap<ParamId, String>,
    saved: RefCell<Vec<Saved>>,
}

struct NameCollector<'a> {
    only: &'a [String],
    names: HashMap<ParamId, String>,
}

impl TensorVisitor for NameCollector<'_> {
    fn param<const D: usize>(
        &mut self,
        name: &str,
        p: &Param<Tensor<D>>,
    ) -> Result<(), ModelError> {
        if self.only.iter().any(|n| n == name) {
            self.names.insert(p.id, name.to_string());
        }
        Ok(())
    }
}

impl ActivationRecorder {
    /// A recorder for the tensors of `model` named in `only`.
    pub(crate) fn new(model: &KwsModel, only: &[String]) -> Result<Self, ModelError> {
        let mut v = NameCollector {
            only,
            names: HashMap::new(),
        };
        model.visit(&mut v)?;
        Ok(Self {
            names: v.names,
            saved: RefCell::new(Vec::new()),
        })
    }

    /// `y` plus a zero probe leaf (its gradient will be `∂L/∂y`), saving what `save` makes
    /// of the probe.
    fn record<const D: usize>(
        &self,
        y: Tensor<D>,
        save: impl FnOnce(Tensor<D>) -> Saved,
    ) -> Tensor<D> {
        let probe: Tensor<D> = Tensor::zeros(y.shape(), &y.device()).require_grad();
        let out = y + probe.clone();
        self.saved.borrow_mut().push(save(probe));
        out
    }

    fn name<const D: usize>(&self, p: &Param<Tensor<D>>) -> Option<String> {
        self.names.get(&p.id).cloned()
    }

    /// Numbers of the tensors the per-example gradients materialise (all but linear
    /// weights), for a memory budget.
    pub(crate) fn materialised_numel(
        model: &KwsModel,
        only: &[String],
    ) -> Result<usize, ModelError> {
        struct Count<'a> {
            only: &'a [String],
            numel: usize,
        }
        impl TensorVisitor for Count<'_> {
            fn param<const D: usize>(
                &mut self,
                name: &str,
                p: &Param<Tensor<D>>,
            ) -> Result<(), ModelError> {
                if D != 2 && self.only.iter().any(|n| n == name) {
                    self.numel += p.shape().num_elements();
                }
                Ok(())
            }
        }
        let mut c = Count { only, numel: 0 };
        model.visit(&mut c)?;
        Ok(c.numel)
    }

    /// Each bounded tensor's per-example gradients, in `only`'s order.
    fn layer_grads(
        self,
        grads: &Gradients,
        only: &[String],
        b: usize,
    ) -> Result<Vec<LayerGrads>, ModelError> {
        let mut out: HashMap<String, LayerGrads> = HashMap::new();
        let mut put = |name: Option<String>, g: LayerGrads| {
            let Some(name) = name else { return };
            let g = match out.remove(&name) {
                // A second use of the same layer: add the materialised gradients.
                Some(prev) => LayerGrads::Rows(prev.into_rows() + g.into_rows()),
                None => g,
            };
            out.insert(name, g);
        };
        let delta = |p: Tensor<4>| {
            let device = p.device();
            let dims = p.dims();
            p.grad(grads)
                .unwrap_or_else(|| Tensor::zeros(dims, &device))
        };
        for saved in self.saved.into_inner() {
            match saved {
                Saved::Linear {
                    weight,
                    bias,
                    input,
                    probe,
                } => {
                    let device = probe.device();
                    let dims = probe.dims();
                    let d = probe
                        .grad(grads)
                        .unwrap_or_else(|| Tensor::zeros(dims, &device));
                    put(bias, LayerGrads::Rows(d.clone()));
                    put(weight, LayerGrads::Outer(input, d));
                }
                Saved::Conv {
                    weight,
                    bias,
                    conv,
                    input,
                    probe,
                } => {
                    let d = delta(probe);
                    let [_, cout, ho, wo] = d.dims();
                    let p = ho * wo;
                    let d = d.reshape([b, cout, p]);
                    put(
                        bias,
                        LayerGrads::Rows(d.clone().sum_dim(2).reshape([b, cout])),
                    );
                    if weight.is_some() {
                        put(weight, LayerGrads::Rows(conv_weight_grads(&conv, input, d)));
                    }
                }
                Saved::BatchNorm {
                    gamma,
                    beta,
                    normalized,
                    probe,
                } => {
                    let d = delta(probe);
                    let [_, c, h, w] = d.dims();
                    let d = d.reshape([b, c, h * w]);
                    let g = (d.clone() * normalized.reshape([b, c, h * w])).sum_dim(2);
                    put(gamma, LayerGrads::Rows(g.reshape([b, c])));
                    put(beta, LayerGrads::Rows(d.sum_dim(2).reshape([b, c])));
                }
            }
        }
        only.iter()
            .map(|name| {
                out.remove(name).ok_or_else(|| ModelError::TensorData {
                    name: name.clone(),
                    reason: "clip bounds name a tensor the forward pass did not use".into(),
                })
            })
            .collect()
    }
}

impl LayerRunner for ActivationRecorder {
    fn conv(&self, c: &Conv2d, x: Tensor<4>) -> Tensor<4> {
        let bias = c.bias.as_ref().map(|p| p.val().detach());
        let y = conv_with(c, c.weight.val().detach(), bias, x.clone());
        let weight = self.name(&c.weight);
        let bias = c.bias.as_ref().and_then(|p| self.name(p));
        if weight.is_none() && bias.is_none() {
            return y;
        }
        self.record(y, |probe| Saved::Conv {
            weight,
            bias,
            conv: c.clone(),
            input: x.detach(),
            probe,
        })
    }

    fn batch_norm(&self, bn: &BatchNorm, x: Tensor<4>) -> Tensor<4> {
        let [_, c, _, _] = x.dims();
        let gamma = bn.gamma.val().detach().reshape([1, c, 1, 1]);
        let beta = bn.beta.val().detach().reshape([1, c, 1, 1]);
        let normalized = normalize_with_stored_statistics(bn, x);
        let y = normalized.clone() * gamma + beta;
        let (gamma, beta) = (self.name(&bn.gamma), self.name(&bn.beta));
        if gamma.is_none() && beta.is_none() {
            return y;
        }
        self.record(y, |probe| Saved::BatchNorm {
            gamma,
            beta,
            normalized: normalized.detach(),
            probe,
        })
    }

    fn linear(&self, l: &Linear, x: Tensor<2>) -> Tensor<2> {
        let y = x.clone().matmul(l.weight.val().detach());
        let y = match &l.bias {
            Some(p) => y + p.val().detach().unsqueeze_dim(0),
            None => y,
        };
        let weight = self.name(&l.weight);
        let bias = l.bias.as_ref().and_then(|p| self.name(p));
        if weight.is_none() && bias.is_none() {
            return y;
        }
        self.record(y, |probe| Saved::Linear {
            weight,
            bias,
            input: x.detach(),
            probe,
        })
    }
}

/// The clipped (or normalised) sum over `batch` of the per-example gradients of the
/// tensors in `bounds`, computed from activations (see the module docs). Run it on a
/// [`super::per_example_model`].
pub(crate) fn clipped_sum(
    model: &KwsModel,
    batch: &Batch,
    bounds: &ClipBounds,
    exact: bool,
    device: &burn::tensor::Device,
) -> Result<Option<PhysicalSum>, ModelError> {
    let b = batch.batch;
    let recorder = ActivationRecorder::new(model, bounds.layers())?;
    let logits = model.forward_with(batch.features_tensor(device), &recorder);
    let loss = soft_cross_entropy(logits, batch.targets_tensor(device)).mul_scalar(b as f64);
    let grads = loss.backward();
    let loss_sum = scalar(loss)?;
    let layers = recorder.layer_grads(&grads, bounds.layers(), b)?;
    drop(grads);
    clip_on_tensors(layers, bounds, exact, b, loss_sum)
}

/// Every example's gradient of its own loss for the tensors named in `only` (all
/// trainable ones when `None`), materialised, computed from activations; and the sum of
/// the per-example losses. Run it on a [`super::per_example_model`].
pub(crate) fn grads_and_loss_sum(
    model: &KwsModel,
    batch: &Batch,
    only: Option<&[String]>,
    device: &burn::tensor::Device,
) -> Result<(Vec<Vec<NamedTensor>>, f32), ModelError> {
    let b = batch.batch;
    let layout: Vec<(String, Vec<usize>)> = model
        .named_tensors()?
        .into_iter()
        .filter(|t| is_trainable(&t.name) && only.is_none_or(|o| o.contains(&t.name)))
        .map(|t| (t.name, t.shape))
        .collect();
    let names: Vec<String> = layout.iter().map(|(n, _)| n.clone()).collect();
    let recorder = ActivationRecorder::new(model, &names)?;
    let logits = model.forward_with(batch.features_tensor(device), &recorder);
    let loss = soft_cross_entropy(logits, batch.targets_tensor(device)).mul_scalar(b as f64);
    let grads = loss.backward();
    let loss_sum = scalar(loss)?;
    let layers = recorder.layer_grads(&grads, &names, b)?;
    let mut out: Vec<Vec<NamedTensor>> = (0..b).map(|_| Vec::with_capacity(names.len())).collect();
    for ((name, shape), g) in layout.iter().zip(layers) {
        let n: usize = shape.iter().product();
        let data = named(name, g.into_rows())?.data;
        for (ex, row) in out.iter_mut().zip(data.chunks_exact(n.max(1))) {
            ex.push(NamedTensor::new(name, shape.clone(), row.to_vec())?);
        }
    }
    Ok((out, loss_sum))
}
