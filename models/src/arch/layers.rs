//! Named layers: reading a layer's tensors out of burn under its per-layer name, and
//! loading them back with shape checks. Each architecture lists its layers with these.

use burn::module::{Param, RunningState};
use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Linear};
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

/// `{name}.weight` `[out, in/groups, kh, kw]` and, if present, `{name}.bias` `[out]`.
pub fn conv_tensors(name: &str, c: &Conv2d, out: &mut Vec<NamedTensor>) -> Result<(), ModelError> {
    out.push(named(&format!("{name}.weight"), c.weight.val())?);
    if let Some(b) = &c.bias {
        out.push(named(&format!("{name}.bias"), b.val())?);
    }
    Ok(())
}

/// Loads what [`conv_tensors`] writes.
pub fn load_conv(mut c: Conv2d, name: &str, src: &mut TensorSource) -> Result<Conv2d, ModelError> {
    c.weight = load_param(c.weight, &format!("{name}.weight"), src)?;
    if let Some(b) = c.bias.take() {
        c.bias = Some(load_param(b, &format!("{name}.bias"), src)?);
    }
    Ok(c)
}

/// `{name}.gamma`, `{name}.beta`, `{name}.running_mean`, `{name}.running_var`, all `[C]`.
pub fn bn_tensors(name: &str, b: &BatchNorm, out: &mut Vec<NamedTensor>) -> Result<(), ModelError> {
    out.push(named(&format!("{name}.gamma"), b.gamma.val())?);
    out.push(named(&format!("{name}.beta"), b.beta.val())?);
    out.push(named(
        &format!("{name}.running_mean"),
        b.running_mean.value(),
    )?);
    out.push(named(
        &format!("{name}.running_var"),
        b.running_var.value(),
    )?);
    Ok(())
}

/// Loads what [`bn_tensors`] writes.
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
pub fn linear_tensors(
    name: &str,
    l: &Linear,
    out: &mut Vec<NamedTensor>,
) -> Result<(), ModelError> {
    out.push(named(&format!("{name}.weight"), l.weight.val())?);
    if let Some(b) = &l.bias {
        out.push(named(&format!("{name}.bias"), b.val())?);
    }
    Ok(())
}

/// Loads what [`linear_tensors`] writes.
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

    /// `{name}.mean`, `{name}.scale`.
    pub fn tensors(&self, name: &str, out: &mut Vec<NamedTensor>) -> Result<(), ModelError> {
        out.push(named(&format!("{name}.mean"), self.mean.value())?);
        out.push(named(&format!("{name}.scale"), self.scale.value())?);
        Ok(())
    }

    /// Loads what [`InputNorm::tensors`] writes.
    pub fn load(mut self, name: &str, src: &mut TensorSource) -> Result<Self, ModelError> {
        self.mean = load_running(self.mean, &format!("{name}.mean"), src)?;
        self.scale = load_running(self.scale, &format!("{name}.scale"), src)?;
        Ok(self)
    }
}
