//! Named layers: visiting a layer's tensors under its per-layer name ([`TensorVisitor`]:
//! values, gradients), and loading them back with shape checks. Each architecture lists its
//! layers once, in a `visit` traversal built from these, and runs them once, in a
//! `forward_with` over a [`LayerRunner`] (the model's own weights, [`OwnWeights`], or
//! per-example weight copies for DP, `dp::vectorized`).

use burn::module::{Param, RunningState};
use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Dropout, Linear};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};

use crate::checkpoint::{NamedTensor, TensorSource};
use crate::ModelError;

/// Reads a tensor's values (any rank) as a [`NamedTensor`].
pub fn named<const D: usize>(name: &str, t: Tensor<D>) -> Result<NamedTensor, ModelError> {
    let shape = t.dims().to_vec();
    let data = t
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| ModelError::TensorData {
            name: name.to_string(),
            reason: format!("{e:?}"),
        })?;
    NamedTensor::new(name, shape, data)
}

/// Builds a burn tensor from a checked [`NamedTensor`].
pub fn tensor<const D: usize>(t: NamedTensor, device: &Device) -> Tensor<D> {
    Tensor::from_data(TensorData::new(t.data, t.shape), device)
}

fn load_param<const D: usize>(
    p: Param<Tensor<D>>,
    name: &str,
    src: &mut TensorSource,
) -> Result<Param<Tensor<D>>, ModelError> {
    let v = p.val();
    let device = v.device();
    let t = src.take(name, &v.dims())?;
    Ok(Param::from_tensor(tensor(t, &device)))
}

fn load_running<const D: usize>(
    r: RunningState<Tensor<D>>,
    name: &str,
    src: &mut TensorSource,
) -> Result<RunningState<Tensor<D>>, ModelError> {
    let v = r.value();
    let device = v.device();
    let t = src.take(name, &v.dims())?;
    Ok(RunningState::new(tensor(t, &device)))
}

/// Visits a model's tensors by name, in layer order. Each architecture has one traversal
/// (`visit`) over its layers; reading values ([`ValueReader`]), reading gradients
/// ([`GradReader`]) and registering gradients ([`GradWriter`]) are visitors over it, so the
/// names and order can never differ between weights and gradients.
pub trait TensorVisitor {
    /// A trainable parameter named `name`.
    fn param<const D: usize>(&mut self, name: &str, p: &Param<Tensor<D>>)
        -> Result<(), ModelError>;
    /// A state tensor that is not trained (batch-norm running statistics, the input
    /// normalisation), named `name`. Visitors of trainable tensors only keep the default,
    /// which skips it.
    fn state<const D: usize>(
        &mut self,
        name: &str,
        s: &RunningState<Tensor<D>>,
    ) -> Result<(), ModelError> {
        let _ = (name, s);
        Ok(())
    }
}

/// A model whose tensors one traversal visits by name ([`TensorVisitor`]), in
/// `weights.safetensors` order. Reading values ([`read_values`]), reading gradients
/// ([`read_grads`]) and registering gradients ([`write_grads`]) are then the same code for
/// every model (keyword spotters, recognisers, the BEST-RQ pretraining model).
pub trait NamedModule {
    /// Runs `v` over every tensor, named and ordered as in `weights.safetensors`.
    fn visit_tensors<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError>;
}

/// Every tensor's value (trainable parameters and state), in visiting order.
pub fn read_values<M: NamedModule>(m: &M) -> Result<Vec<NamedTensor>, ModelError> {
    let mut r = ValueReader::default();
    m.visit_tensors(&mut r)?;
    Ok(r.out)
}

/// The gradient of every trainable tensor in `grads`, named and ordered like the
/// trainable entries of [`read_values`]; a parameter the loss did not reach reads as
/// zeros.
pub fn read_grads<M: NamedModule>(
    m: &M,
    grads: &GradientsParams,
) -> Result<Vec<NamedTensor>, ModelError> {
    let mut r = GradReader {
        grads,
        out: Vec::new(),
    };
    m.visit_tensors(&mut r)?;
    Ok(r.out)
}

/// The inverse of [`read_grads`]: gradients given by name, as burn [`GradientsParams`]
/// for any burn optimizer. Trainable tensors left out get no gradient, so the optimizer
/// leaves them unchanged (layer freezing); a name that is no trainable tensor, or a wrong
/// shape, is an error.
pub fn write_grads<M: NamedModule>(
    m: &M,
    grads: &[NamedTensor],
) -> Result<GradientsParams, ModelError> {
    let mut w = GradWriter::new(grads)?;
    m.visit_tensors(&mut w)?;
    w.finish()
}

/// Reads every tensor's value (parameters and state), as `weights.safetensors` holds them.
#[derive(Debug, Default)]
pub struct ValueReader {
    /// The tensors read so far, in visiting order.
    pub out: Vec<NamedTensor>,
}

impl TensorVisitor for ValueReader {
    fn param<const D: usize>(
        &mut self,
        name: &str,
        p: &Param<Tensor<D>>,
    ) -> Result<(), ModelError> {
        self.out.push(named(name, p.val())?);
        Ok(())
    }
    fn state<const D: usize>(
        &mut self,
        name: &str,
        s: &RunningState<Tensor<D>>,
    ) -> Result<(), ModelError> {
        self.out.push(named(name, s.value())?);
        Ok(())
    }
}

/// Reads the gradient of every trainable parameter from burn's [`GradientsParams`]; a
/// parameter without a gradient (not reached by the loss) reads as zeros.
#[derive(Debug)]
pub struct GradReader<'a> {
    /// The gradients (from [`GradientsParams::from_grads`]).
    pub grads: &'a GradientsParams,
    /// The gradients read so far, in visiting order.
    pub out: Vec<NamedTensor>,
}

impl TensorVisitor for GradReader<'_> {
    fn param<const D: usize>(
        &mut self,
        name: &str,
        p: &Param<Tensor<D>>,
    ) -> Result<(), ModelError> {
        let t = match self.grads.get::<D>(p.id) {
            Some(g) => named(name, g)?,
            None => {
                let shape = p.shape().dims::<D>().to_vec();
                let n = shape.iter().product();
                NamedTensor::new(name, shape, vec![0.0; n])?
            }
        };
        self.out.push(t);
        Ok(())
    }
}

/// Registers gradients given as [`NamedTensor`]s into a [`GradientsParams`] (for burn's
/// optimizers). Tensors are taken by name; a parameter with no tensor gets no gradient (an
/// optimizer leaves it unchanged); a name that matches no parameter is an error
/// ([`GradWriter::finish`]).
#[derive(Debug)]
pub struct GradWriter<'a> {
    grads: std::collections::BTreeMap<&'a str, &'a NamedTensor>,
    /// The gradients registered so far.
    pub out: GradientsParams,
}

impl<'a> GradWriter<'a> {
    /// A writer of `grads`; each is built on its parameter's device without autodiff (where
    /// burn's optimizers expect gradients).
    pub fn new(grads: &'a [NamedTensor]) -> Result<Self, ModelError> {
        let mut map = std::collections::BTreeMap::new();
        for g in grads {
            if map.insert(g.name.as_str(), g).is_some() {
                return Err(ModelError::TensorData {
                    name: g.name.clone(),
                    reason: "gradient given twice".into(),
                });
            }
        }
        Ok(Self {
            grads: map,
            out: GradientsParams::new(),
        })
    }

    /// The registered gradients; errors if a given tensor named no trainable parameter.
    pub fn finish(self) -> Result<GradientsParams, ModelError> {
        if let Some(name) = self.grads.keys().next() {
            return Err(ModelError::TensorData {
                name: (*name).to_string(),
                reason: "gradient for a tensor that is not a trainable parameter".into(),
            });
        }
        Ok(self.out)
    }
}

impl TensorVisitor for GradWriter<'_> {
    fn param<const D: usize>(
        &mut self,
        name: &str,
        p: &Param<Tensor<D>>,
    ) -> Result<(), ModelError> {
        let Some(g) = self.grads.remove(name) else {
            return Ok(());
        };
        let dims = p.shape().dims::<D>().to_vec();
        if g.shape != dims {
            return Err(ModelError::ShapeMismatch {
                name: name.to_string(),
                expected: dims,
                got: g.shape.clone(),
            });
        }
        let device = p.val().device().inner();
        self.out.register::<D>(p.id, tensor(g.clone(), &device));
        Ok(())
    }
}

/// How an architecture's parametrised layers (conv, batch norm, linear) are computed. Each
/// architecture writes its forward pass once, over a runner; everything between these
/// layers (activations, pooling, residual sums, dropout) does not depend on the weights and
/// is shared.
pub trait LayerRunner {
    /// `[B, C_in, H, W]` → `[B, C_out, H', W']` through `c`.
    fn conv(&self, c: &Conv2d, x: Tensor<4>) -> Tensor<4>;
    /// `[B, C, H, W]` → `[B, C, H, W]` through `b`.
    fn batch_norm(&self, b: &BatchNorm, x: Tensor<4>) -> Tensor<4>;
    /// `[B, in]` → `[B, out]` through `l`.
    fn linear(&self, l: &Linear, x: Tensor<2>) -> Tensor<2>;
    /// `[B, F]` through dropout `d`: burn's (masks from the backend's one random state)
    /// unless a runner draws its own (per-device masks in [`crate::cohort`]).
    fn dropout(&self, d: &Dropout, x: Tensor<2>) -> Tensor<2> {
        d.forward(x)
    }
}

/// Runs each layer with the model's own weights (burn's `forward`): the ordinary forward
/// pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct OwnWeights;

impl LayerRunner for OwnWeights {
    fn conv(&self, c: &Conv2d, x: Tensor<4>) -> Tensor<4> {
        conv_with(c, c.weight.val(), c.bias.as_ref().map(|b| b.val()), x)
    }
    fn batch_norm(&self, b: &BatchNorm, x: Tensor<4>) -> Tensor<4> {
        b.forward(x)
    }
    fn linear(&self, l: &Linear, x: Tensor<2>) -> Tensor<2> {
        l.forward(x)
    }
}

/// Conv `c`'s geometry with `weight` `[out, in/groups, kh, kw]` and `bias` on `x`
/// `[B, C_in, H, W]`. Two kinds run on simpler ops, because burn flex computes a conv's
/// gradients through general (transposed) 3-D conv loops, its slowest kernels on the CPU:
/// a pointwise conv (1×1, one group, no stride, padding or dilation) is a batched matmul
/// `[1, out, in] × [B, in, H·W]`; a depthwise conv (one input channel per group, as many
/// outputs) is hush's depthwise op on burn flex, with its own backward pass
/// ([`super::depthwise`]), and elsewhere a sum over kernel taps of the shifted input times
/// the tap's weight ([`super::conv::depthwise_by_taps`]). Every other conv is burn's.
/// Measured in BENCHMARKS.md (DS-CNN-S training step).
pub(crate) fn conv_with(
    c: &Conv2d,
    weight: Tensor<4>,
    bias: Option<Tensor<1>>,
    x: Tensor<4>,
) -> Tensor<4> {
    let pointwise = c.kernel_size == [1, 1]
        && c.groups == 1
        && c.stride == [1, 1]
        && c.dilation == [1, 1]
        && matches!(
            c.padding,
            burn::nn::PaddingConfig2d::Valid | burn::nn::PaddingConfig2d::Explicit(0, 0, 0, 0)
        );
    let [_, cin, _, _] = x.dims();
    let [cout, per_group, kh, kw] = weight.dims();
    if c.groups == cin && cout == cin && per_group == 1 {
        let y = super::depthwise::depthwise(c, x, weight.reshape([1, cout, kh * kw]));
        return match bias {
            Some(bias) => y + bias.reshape([1, cout, 1, 1]),
            None => y,
        };
    }
    if !pointwise {
        let [_, _, h, w] = x.dims();
        let pads = super::conv::padding_pairs(c, h, w);
        let options =
            burn::tensor::ops::ConvOptions::new_with_padding(c.stride, pads, c.dilation, c.groups);
        return burn::tensor::module::conv2d(x, weight, bias, options);
    }
    let [b, cin, h, w] = x.dims();
    let [cout, _, _, _] = weight.dims();
    let y = weight
        .reshape([1, cout, cin])
        .expand([b, cout, cin])
        .matmul(x.reshape([b, cin, h * w]));
    let y = match bias {
        Some(bias) => y + bias.reshape([1, cout, 1]),
        None => y,
    };
    y.reshape([b, cout, h, w])
}

/// `{name}.weight` `[out, in/groups, kh, kw]` and, if present, `{name}.bias` `[out]`.
pub fn visit_conv<V: TensorVisitor>(name: &str, c: &Conv2d, v: &mut V) -> Result<(), ModelError> {
    v.param(&format!("{name}.weight"), &c.weight)?;
    if let Some(b) = &c.bias {
        v.param(&format!("{name}.bias"), b)?;
    }
    Ok(())
}

/// Loads what [`visit_conv`] visits.
pub fn load_conv(mut c: Conv2d, name: &str, src: &mut TensorSource) -> Result<Conv2d, ModelError> {
    c.weight = load_param(c.weight, &format!("{name}.weight"), src)?;
    if let Some(b) = c.bias.take() {
        c.bias = Some(load_param(b, &format!("{name}.bias"), src)?);
    }
    Ok(c)
}

/// `{name}.gamma`, `{name}.beta` (parameters), `{name}.running_mean`,
/// `{name}.running_var` (state), all `[C]`.
pub fn visit_bn<V: TensorVisitor>(name: &str, b: &BatchNorm, v: &mut V) -> Result<(), ModelError> {
    v.param(&format!("{name}.gamma"), &b.gamma)?;
    v.param(&format!("{name}.beta"), &b.beta)?;
    v.state(&format!("{name}.running_mean"), &b.running_mean)?;
    v.state(&format!("{name}.running_var"), &b.running_var)
}

/// Loads what [`visit_bn`] visits.
pub fn load_bn(
    mut b: BatchNorm,
    name: &str,
    src: &mut TensorSource,
) -> Result<BatchNorm, ModelError> {
    b.gamma = load_param(b.gamma, &format!("{name}.gamma"), src)?;
    b.beta = load_param(b.beta, &format!("{name}.beta"), src)?;
    b.running_mean = load_running(b.running_mean, &format!("{name}.running_mean"), src)?;
    b.running_var = load_running(b.running_var, &format!("{name}.running_var"), src)?;
    Ok(b)
}

/// `{name}.weight` `[in, out]` (burn's layout: `y = x·W + b`) and `{name}.bias` `[out]`.
pub fn visit_linear<V: TensorVisitor>(name: &str, l: &Linear, v: &mut V) -> Result<(), ModelError> {
    v.param(&format!("{name}.weight"), &l.weight)?;
    if let Some(b) = &l.bias {
        v.param(&format!("{name}.bias"), b)?;
    }
    Ok(())
}

/// Loads what [`visit_linear`] visits.
pub fn load_linear(
    mut l: Linear,
    name: &str,
    src: &mut TensorSource,
) -> Result<Linear, ModelError> {
    l.weight = load_param(l.weight, &format!("{name}.weight"), src)?;
    if let Some(b) = l.bias.take() {
        l.bias = Some(load_param(b, &format!("{name}.bias"), src)?);
    }
    Ok(l)
}

/// A fixed per-bin affine map on the input features, `(x - mean) · scale`, set from
/// training-set statistics before training and never trained (burn running state, not a
/// parameter). Saved as `{name}.mean` and `{name}.scale`, `[bins]`.
#[derive(burn::module::Module, Debug)]
pub struct InputNorm {
    /// Per-bin mean.
    pub mean: RunningState<Tensor<1>>,
    /// Per-bin inverse standard deviation.
    pub scale: RunningState<Tensor<1>>,
}

impl InputNorm {
    /// The identity map over `bins` values.
    pub fn identity(bins: usize, device: &Device) -> Self {
        Self {
            mean: RunningState::new(Tensor::zeros([bins], device)),
            scale: RunningState::new(Tensor::ones([bins], device)),
        }
    }

    /// Sets the statistics.
    pub fn set(&mut self, mean: &[f32], scale: &[f32], device: &Device) {
        self.mean = RunningState::new(Tensor::from_data(
            TensorData::new(mean.to_vec(), [mean.len()]),
            device,
        ));
        self.scale = RunningState::new(Tensor::from_data(
            TensorData::new(scale.to_vec(), [scale.len()]),
            device,
        ));
    }

    /// `[B, T, F]` → `[B, T, F]`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let device = x.device();
        let [f] = self.mean.value().dims();
        let mean = self.mean.value().to_device(&device).reshape([1, 1, f]);
        let scale = self.scale.value().to_device(&device).reshape([1, 1, f]);
        (x - mean) * scale
    }

    /// `{name}.mean`, `{name}.scale` (state, never trained).
    pub fn visit<V: TensorVisitor>(&self, name: &str, v: &mut V) -> Result<(), ModelError> {
        v.state(&format!("{name}.mean"), &self.mean)?;
        v.state(&format!("{name}.scale"), &self.scale)
    }

    /// The values of `{name}.mean`, `{name}.scale`.
    pub fn tensors(&self, name: &str, out: &mut Vec<NamedTensor>) -> Result<(), ModelError> {
        let mut r = ValueReader::default();
        self.visit(name, &mut r)?;
        out.extend(r.out);
        Ok(())
    }

    /// Loads what [`InputNorm::tensors`] writes.
    pub fn load(mut self, name: &str, src: &mut TensorSource) -> Result<Self, ModelError> {
        self.mean = load_running(self.mean, &format!("{name}.mean"), src)?;
        self.scale = load_running(self.scale, &format!("{name}.scale"), src)?;
        Ok(self)
    }
}
