//! Vectorised per-example gradients: one forward and one backward over a batch of `B`
//! examples give every example's own gradient.
//!
//! Each trainable tensor gets `B` copies, one per example, held as one `[B, numel]`
//! autodiff leaf ([`PerExampleWeights`]); the model runs over them through
//! [`KwsModel::forward_with`], one rule per layer kind:
//!
//! | layer | rule |
//! |---|---|
//! | linear `[in, out]` | batched matmul: `[B, 1, in] × [B, in, out]` |
//! | dense conv (`groups = 1`) | batched matmul over the unfolded input: `[B, C_out, C_in·k] × [B, C_in·k, H'·W']` |
//! | grouped conv (`g`, depthwise included) | grouped conv with `groups = B·g`: the batch folded into channels, `[1, B·C_in, H, W]`, weights `[B·C_out, C_in/g, kh, kw]` |
//! | batch norm (stored statistics) | per-channel affine with per-example `gamma`/`beta` `[B, C, 1, 1]` |
//!
//! The loss is the **sum** of the per-example losses, so the gradient of copy `b` is the
//! gradient of example `b`'s own loss: exactly what the per-example loop
//! ([`super::per_example_grads`]) computes, one example at a time. The loop stays as the
//! reference (tests check the two agree to 1e-5 for every architecture) and as the
//! fallback when a memory budget cannot hold one example's copies.
//!
//! Batch norms always normalise with their stored running statistics here (whatever their
//! training flag): the semantics of [`super::per_example_model`], so no example influences
//! another's output. Everything between the parametrised layers (activations, pooling,
//! residual sums, dropout, the input normalisation) is elementwise or per example already
//! and runs unchanged on the batch.
//!
//! Memory: the copies and their gradients take `2 × 4 × B × numel` bytes (for the
//! 1.5 M-parameter leak-CNN, 12 MB per example); [`super::PerExampleConfig`] splits a
//! logical batch into physical batches that fit a budget.
//!
//! [`clipped_sum`] clips on the tensors: per-example layer norms are reduced from the
//! `[B, numel]` gradients, the per-example factors come from [`ClipBounds::factors`] (the
//! one definition of clipping), and the sum is a weighted reduction over the batch, so
//! per-example gradients never leave the backend.

use std::collections::{BTreeSet, HashMap};

use burn::module::{Param, ParamId};
use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Linear};
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Gradients, Tensor, TensorData};

use super::activations::{clip_on_tensors, LayerGrads};
use super::ClipBounds;
use crate::arch::conv::{padding_pairs, unfold};
use crate::arch::depthwise::depthwise;
use crate::arch::layers::{named, LayerRunner, TensorVisitor};
use crate::arch::KwsModel;
use crate::checkpoint::NamedTensor;
use crate::step::{scalar, soft_cross_entropy, Batch};
use crate::ModelError;

/// `B` copies of (some of) a model's trainable tensors, each tensor as one `[B, numel]`
/// autodiff leaf that keeps its gradient; a [`LayerRunner`] that computes every layer with
/// example `b`'s copy for example `b`. Tensors without copies (frozen layers) run with the
/// model's own values, broadcast and detached (no gradient).
#[derive(Debug)]
pub struct PerExampleWeights {
    batch: usize,
    copies: HashMap<ParamId, Tensor<2>>,
    /// Name, shape and id of every copied tensor, in the model's visiting order.
    order: Vec<(String, Vec<usize>, ParamId)>,
}

/// Where a copied tensor's `[B, numel]` rows come from: its value and name → the rows.
type RowSource<'a> = dyn FnMut(&NamedTensor) -> Result<Tensor<2>, ModelError> + 'a;

struct CopyMaker<'a> {
    only: Option<&'a BTreeSet<&'a str>>,
    rows: &'a mut RowSource<'a>,
    out: PerExampleWeights,
}

impl TensorVisitor for CopyMaker<'_> {
    fn param<const D: usize>(
        &mut self,
        name: &str,
        p: &Param<Tensor<D>>,
    ) -> Result<(), ModelError> {
        if self.only.is_some_and(|s| !s.contains(name)) {
            return Ok(());
        }
        let t = named(name, p.val())?;
        let copies = (self.rows)(&t)?;
        self.out.copies.insert(p.id, copies);
        self.out.order.push((t.name, t.shape, p.id));
        Ok(())
    }
}

/// Rows that are `batch` copies of a tensor's value, as one gradient-keeping leaf.
fn repeated_rows(
    batch: usize,
    device: &Device,
) -> impl FnMut(&NamedTensor) -> Result<Tensor<2>, ModelError> + '_ {
    move |t: &NamedTensor| {
        let n = t.data.len();
        Ok(
            Tensor::<2>::from_data(TensorData::new(t.data.repeat(batch), [batch, n]), device)
                .require_grad(),
        )
    }
}

impl PerExampleWeights {
    /// `batch` copies of the trainable tensors of `model` named in `only` (all of them when
    /// `None`), as gradient-keeping leaves on the autodiff `device`.
    pub fn new(
        model: &KwsModel,
        batch: usize,
        only: Option<&[String]>,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let only: Option<BTreeSet<&str>> = only.map(|o| o.iter().map(String::as_str).collect());
        let mut repeat = repeated_rows(batch, device);
        Self::from_rows(model, batch, only.as_ref(), &mut repeat)
    }

    /// Copies of the trainable tensors of `model` (those in `only`, all when `None`) whose
    /// `[batch, numel]` rows `rows` gives from each tensor's value: e.g. rows gathered from
    /// per-device leaves, so that a device's examples share its weights
    /// ([`crate::cohort`]).
    pub(crate) fn from_rows<'a>(
        model: &KwsModel,
        batch: usize,
        only: Option<&'a BTreeSet<&'a str>>,
        rows: &'a mut RowSource<'a>,
    ) -> Result<Self, ModelError> {
        let mut v = CopyMaker {
            only,
            rows,
            out: Self {
                batch,
                copies: HashMap::new(),
                order: Vec::new(),
            },
        };
        model.visit(&mut v)?;
        Ok(v.out)
    }

    /// Bytes that `examples` copies of `numel` parameters and their gradients take (f32).
    pub fn bytes(examples: usize, numel: usize) -> usize {
        2 * std::mem::size_of::<f32>() * examples * numel
    }

    /// Example `b`'s value of `p` in row `b`: its copy, or the shared value broadcast.
    fn rows<const D: usize>(&self, p: &Param<Tensor<D>>) -> Tensor<2> {
        match self.copies.get(&p.id) {
            Some(t) => t.clone(),
            None => {
                let v = p.val().detach();
                let n = v.shape().num_elements();
                v.reshape([1, n]).repeat_dim(0, self.batch)
            }
        }
    }

    /// The `[B, numel]` gradient of the copy of the tensor named `name` (zeros if the loss
    /// did not reach it); `None` if it has no copy.
    fn grad_rows(&self, name: &str, grads: &Gradients) -> Option<Tensor<2>> {
        let (_, shape, id) = self.order.iter().find(|(n, _, _)| n == name)?;
        let copy = self.copies.get(id)?;
        Some(
            copy.grad(grads).unwrap_or_else(|| {
                Tensor::zeros([self.batch, shape.iter().product()], &copy.device())
            }),
        )
    }

    /// Every copied tensor's per-example gradient: `[example][tensor]`, tensors named and
    /// shaped like the model's and in its order. A tensor the loss did not reach reads as
    /// zeros.
    pub fn grads(&self, grads: &Gradients) -> Result<Vec<Vec<NamedTensor>>, ModelError> {
        let mut out: Vec<Vec<NamedTensor>> = (0..self.batch)
            .map(|_| Vec::with_capacity(self.order.len()))
            .collect();
        for (name, shape, id) in &self.order {
            let n: usize = shape.iter().product();
            let data = match self.copies.get(id).and_then(|t| t.grad(grads)) {
                Some(g) => named(name, g)?.data,
                None => vec![0.0; self.batch * n],
            };
            for (ex, row) in out.iter_mut().zip(data.chunks_exact(n.max(1))) {
                ex.push(NamedTensor::new(name, shape.clone(), row.to_vec())?);
            }
        }
        Ok(out)
    }
}

/// A batch norm's stored statistics as `[1, C]` rows on `device`: the running mean and
/// `1 / sqrt(running var + ε)`.
fn stored_statistics(bn: &BatchNorm, c: usize, device: &Device) -> (Tensor<2>, Tensor<2>) {
    let stat = |t: Tensor<1>| t.to_device(device).reshape([1, c]);
    let mean = stat(bn.running_mean.value());
    let inv_std = stat(bn.running_var.value().add_scalar(bn.epsilon).sqrt().recip());
    (mean, inv_std)
}

/// `(x − running mean) / sqrt(running var + ε)`, per channel: batch norm on its stored
/// statistics (what DP runs, see [`super::per_example`]), before `gamma` and `beta`.
pub(crate) fn normalize_with_stored_statistics(bn: &BatchNorm, x: Tensor<4>) -> Tensor<4> {
    let [_, c, _, _] = x.dims();
    let (mean, inv_std) = stored_statistics(bn, c, &x.device());
    (x - mean.reshape([1, c, 1, 1])) * inv_std.reshape([1, c, 1, 1])
}

impl LayerRunner for PerExampleWeights {
    /// Dense convs (`groups = 1`): a batched matmul of each example's weights
    /// `[C_out, C_in·k]` with its unfolded input `[C_in·k, H'·W']` (a 1×1 unstrided,
    /// unpadded conv needs no unfolding). Depthwise convs: [`depthwise`] with each
    /// example's own tap weights. Other grouped convs: one conv with `groups = B·g`.
    ///
    /// Why: burn 0.22.1 computes a grouped conv's weight gradient group by group
    /// (`conv2d_weight_grad_groups` in burn-backend: a slice, a conv and a slice-assign per
    /// group), so a dense conv run as `B` groups pays `B` of those per step; the matmul rule
    /// avoids that. For depthwise convs, a stacked unfold-and-multiply (one
    /// `[B, C, k, H', W']` product) measured slower than the grouped conv, the running sum
    /// over taps, which never builds that tensor, faster, and hush's own op (loops over each
    /// plane with a hand-written backward pass) faster still (BENCHMARKS.md).
    fn conv(&self, c: &Conv2d, x: Tensor<4>) -> Tensor<4> {
        let [b, cin, h, w] = x.dims();
        let [cout, per_group, kh, kw] = c.weight.shape().dims::<4>();
        let k = kh * kw;
        let weight = self.rows(&c.weight);
        let pointwise = k == 1 && c.stride == [1, 1] && padding_pairs(c, h, w) == [(0, 0), (0, 0)];
        let y = if c.groups == 1 && pointwise {
            weight
                .reshape([b, cout, cin])
                .matmul(x.reshape([b, cin, h * w]))
                .reshape([b, cout, h, w])
        } else if c.groups == 1 {
            let cols = unfold(c, x);
            let [_, _, _, ho, wo] = cols.dims();
            weight
                .reshape([b, cout, cin * k])
                .matmul(cols.reshape([b, cin * k, ho * wo]))
                .reshape([b, cout, ho, wo])
        } else if c.groups == cin && cout == cin && per_group == 1 {
            depthwise(c, x, weight.reshape([b, cout, k]))
        } else {
            let options = ConvOptions::new_with_padding(
                c.stride,
                padding_pairs(c, h, w),
                c.dilation,
                c.groups * b,
            );
            let weight = weight.reshape([b * cout, per_group, kh, kw]);
            let y = conv2d(x.reshape([1, b * cin, h, w]), weight, None, options);
            let [_, _, ho, wo] = y.dims();
            y.reshape([b, cout, ho, wo])
        };
        match &c.bias {
            Some(p) => y + self.rows(p).reshape([b, cout, 1, 1]),
            None => y,
        }
    }

    /// `x × scale + shift` with each example's `scale = gamma / sqrt(var + ε)` and
    /// `shift = beta − mean × scale` (`[B, C, 1, 1]`, tiny): two passes over the activation
    /// forward and backward instead of four.
    fn batch_norm(&self, bn: &BatchNorm, x: Tensor<4>) -> Tensor<4> {
        let [b, c, _, _] = x.dims();
        let (mean, inv_std) = stored_statistics(bn, c, &x.device());
        let scale = self.rows(&bn.gamma) * inv_std;
        let shift = self.rows(&bn.beta) - scale.clone() * mean;
        x * scale.reshape([b, c, 1, 1]) + shift.reshape([b, c, 1, 1])
    }

    fn linear(&self, l: &Linear, x: Tensor<2>) -> Tensor<2> {
        let [b, d_in] = x.dims();
        let [_, d_out] = l.weight.shape().dims::<2>();
        let weight = self.rows(&l.weight).reshape([b, d_in, d_out]);
        let y = x.reshape([b, 1, d_in]).matmul(weight).reshape([b, d_out]);
        match &l.bias {
            Some(p) => y + self.rows(p),
            None => y,
        }
    }
}

/// Every example's gradient of its own loss, for the trainable tensors named in `only` (all
/// when `None`), from one forward and one backward over `batch` (at least one example) on
/// an autodiff `device`; and the sum of the per-example losses. Run it on a
/// [`super::per_example_model`].
pub(crate) fn grads_and_loss_sum(
    model: &KwsModel,
    batch: &Batch,
    only: Option<&[String]>,
    device: &Device,
) -> Result<(Vec<Vec<NamedTensor>>, f32), ModelError> {
    let weights = PerExampleWeights::new(model, batch.batch, only, device)?;
    let logits = model.forward_with(batch.features_tensor(device), &weights);
    // Sum, not mean: each copy's gradient is its own example's, unscaled.
    let loss =
        soft_cross_entropy(logits, batch.targets_tensor(device)).mul_scalar(batch.batch as f64);
    let grads = loss.backward();
    let per = weights.grads(&grads)?;
    Ok((per, scalar(loss)?))
}

/// What [`clipped_sum`] returns for one physical batch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PhysicalSum {
    /// Sum of the clipped gradients, one flat vector per bounded layer, in bound order.
    pub sum: Vec<Vec<f32>>,
    /// Sum of the per-example losses.
    pub loss_sum: f32,
    /// Examples over their bound.
    pub clipped: usize,
}

/// The sum over `batch` (at least one example) of each example's gradient clipped
/// (`exact = false`) or normalised (`exact = true`) to `bounds`, computed on the tensors
/// (see the module documentation). `None` when some example's gradient is not finite: the
/// caller then clips on the host, which drops such an example exactly.
pub(crate) fn clipped_sum(
    model: &KwsModel,
    batch: &Batch,
    bounds: &ClipBounds,
    exact: bool,
    device: &Device,
) -> Result<Option<PhysicalSum>, ModelError> {
    let b = batch.batch;
    let weights = PerExampleWeights::new(model, b, Some(bounds.layers()), device)?;
    let logits = model.forward_with(batch.features_tensor(device), &weights);
    let loss = soft_cross_entropy(logits, batch.targets_tensor(device)).mul_scalar(b as f64);
    let grads = loss.backward();
    let loss_sum = scalar(loss)?;
    let rows: Vec<Tensor<2>> = bounds
        .layers()
        .iter()
        .map(|name| {
            weights
                .grad_rows(name, &grads)
                .ok_or_else(|| ModelError::TensorData {
                    name: name.clone(),
                    reason: "clip bounds name a tensor that is not a trainable parameter".into(),
                })
        })
        .collect::<Result<_, _>>()?;
    drop(grads);
    let layers = rows.into_iter().map(LayerGrads::Rows).collect();
    clip_on_tensors(layers, bounds, exact, b, loss_sum)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use burn::nn::conv::Conv2dConfig;
    use burn::nn::PaddingConfig2d;

    use super::*;
    use crate::arch::layers::visit_conv;

    /// Each conv rule (dense, pointwise, depthwise, other groups; strides, padding,
    /// dilation) against burn's own conv, one example at a time: outputs and the gradients
    /// of `Σ y·r` (r fixed, different per example).
    #[test]
    fn every_conv_rule_matches_burns_conv_per_example() {
        let device = Device::flex().autodiff();
        device.seed(3);
        let cases = [
            // (in, out, kernel, groups, stride, dilation, padding, bias)
            (
                3,
                5,
                [3, 2],
                1,
                [2, 1],
                [1, 1],
                PaddingConfig2d::Explicit(1, 0, 2, 1),
                true,
            ),
            (
                4,
                6,
                [1, 1],
                1,
                [1, 1],
                [1, 1],
                PaddingConfig2d::Valid,
                false,
            ),
            (
                4,
                6,
                [1, 1],
                1,
                [2, 2],
                [1, 1],
                PaddingConfig2d::Valid,
                true,
            ),
            (
                4,
                4,
                [3, 3],
                4,
                [1, 2],
                [2, 1],
                PaddingConfig2d::Explicit(2, 1, 2, 1),
                false,
            ),
            (4, 6, [3, 3], 2, [1, 1], [1, 1], PaddingConfig2d::Same, true),
        ];
        let b = 3;
        for (cin, cout, kernel, groups, stride, dilation, padding, bias) in cases {
            let conv = Conv2dConfig::new([cin, cout], kernel)
                .with_groups(groups)
                .with_stride(stride)
                .with_dilation(dilation)
                .with_padding(padding)
                .with_bias(bias)
                .init(&device);
            let x: Tensor<4> = Tensor::random(
                [b, cin, 9, 7],
                burn::tensor::Distribution::Normal(0.0, 1.0),
                &device,
            );
            let mut repeat = repeated_rows(b, &device);
            let mut maker = CopyMaker {
                only: None,
                rows: &mut repeat,
                out: PerExampleWeights {
                    batch: b,
                    copies: HashMap::new(),
                    order: Vec::new(),
                },
            };
            visit_conv("c", &conv, &mut maker).unwrap();
            let weights = maker.out;
            let y = weights.conv(&conv, x.clone());
            let [_, _, ho, wo] = y.dims();
            let r: Tensor<4> = Tensor::random(
                [b, cout, ho, wo],
                burn::tensor::Distribution::Normal(0.0, 1.0),
                &device,
            );
            let per = weights
                .grads(&(y.clone() * r.clone()).sum().backward())
                .unwrap();
            for (i, per_i) in per.iter().enumerate() {
                let xi = x.clone().slice_dim(0, i..i + 1).detach();
                let yi = conv.forward(xi);
                let want = named("y", yi.clone()).unwrap().data;
                let got = named("y", y.clone().slice_dim(0, i..i + 1)).unwrap().data;
                for (u, v) in want.iter().zip(&got) {
                    assert!((u - v).abs() < 1e-5, "{kernel:?} g{groups}: y {u} vs {v}");
                }
                let ri = r.clone().slice_dim(0, i..i + 1);
                let g = (yi * ri).sum().backward();
                let want = named("w", conv.weight.val().grad(&g).unwrap()).unwrap();
                for (u, v) in want.data.iter().zip(&per_i[0].data) {
                    assert!((u - v).abs() < 1e-4, "{kernel:?} g{groups}: dw {u} vs {v}");
                }
                if let Some(bp) = &conv.bias {
                    let want = named("b", bp.val().grad(&g).unwrap()).unwrap();
                    for (u, v) in want.data.iter().zip(&per_i[1].data) {
                        assert!((u - v).abs() < 1e-4, "db {u} vs {v}");
                    }
                }
            }
        }
    }
}
