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
//! | conv (groups `g`) | grouped conv with `groups = B·g`: the batch folded into channels, `[1, B·C_in, H, W]`, weights `[B·C_out, C_in/g, kh, kw]` |
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

use std::collections::{BTreeSet, HashMap};

use burn::module::{Param, ParamId, RunningState};
use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Linear, PaddingConfig2d};
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Device, Gradients, Tensor, TensorData};

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

struct CopyMaker<'a> {
    batch: usize,
    device: &'a Device,
    only: Option<&'a BTreeSet<&'a str>>,
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
        let n = t.data.len();
        let copies = Tensor::<2>::from_data(
            TensorData::new(t.data.repeat(self.batch), [self.batch, n]),
            self.device,
        )
        .require_grad();
        self.out.copies.insert(p.id, copies);
        self.out.order.push((t.name, t.shape, p.id));
        Ok(())
    }
    fn state<const D: usize>(
        &mut self,
        _name: &str,
        _s: &RunningState<Tensor<D>>,
    ) -> Result<(), ModelError> {
        Ok(())
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
        let mut v = CopyMaker {
            batch,
            device,
            only: only.as_ref(),
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

/// `[(top, bottom), (left, right)]` padding of `c` over an `h × w` input, as
/// `Conv2d::forward` computes it (burn-nn 0.22.1 `padding.rs`, whose helper is private;
/// `Same` puts an odd extra pad at the end).
fn padding_pairs(c: &Conv2d, h: usize, w: usize) -> [(usize, usize); 2] {
    let same = |k: usize, stride: usize, size: usize| {
        let out = size.div_ceil(stride);
        let total = if out > 0 {
            ((out - 1) * stride + k).saturating_sub(size)
        } else {
            0
        };
        (total / 2, total - total / 2)
    };
    match c.padding {
        PaddingConfig2d::Valid => [(0, 0), (0, 0)],
        PaddingConfig2d::Same => [
            same(c.kernel_size[0], c.stride[0], h),
            same(c.kernel_size[1], c.stride[1], w),
        ],
        PaddingConfig2d::Explicit(top, left, bottom, right) => [(top, bottom), (left, right)],
    }
}

impl LayerRunner for PerExampleWeights {
    fn conv(&self, c: &Conv2d, x: Tensor<4>) -> Tensor<4> {
        let [b, cin, h, w] = x.dims();
        let [cout, per_group, kh, kw] = c.weight.shape().dims::<4>();
        let options = ConvOptions::new_with_padding(
            c.stride,
            padding_pairs(c, h, w),
            c.dilation,
            c.groups * b,
        );
        let weight = self.rows(&c.weight).reshape([b * cout, per_group, kh, kw]);
        let bias = c.bias.as_ref().map(|p| self.rows(p).reshape([b * cout]));
        let y = conv2d(x.reshape([1, b * cin, h, w]), weight, bias, options);
        let [_, _, ho, wo] = y.dims();
        y.reshape([b, cout, ho, wo])
    }

    fn batch_norm(&self, bn: &BatchNorm, x: Tensor<4>) -> Tensor<4> {
        let [b, c, _, _] = x.dims();
        let device = x.device();
        let mean = bn
            .running_mean
            .value()
            .to_device(&device)
            .reshape([1, c, 1, 1]);
        let inv_std = bn
            .running_var
            .value()
            .to_device(&device)
            .add_scalar(bn.epsilon)
            .sqrt()
            .recip()
            .reshape([1, c, 1, 1]);
        let gamma = self.rows(&bn.gamma).reshape([b, c, 1, 1]);
        let beta = self.rows(&bn.beta).reshape([b, c, 1, 1]);
        (x - mean) * inv_std * gamma + beta
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
