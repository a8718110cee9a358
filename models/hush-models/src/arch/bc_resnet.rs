//! A simplified BC-ResNet (Kim et al. 2021, "Broadcasted Residual Learning for Efficient
//! Keyword Spotting"). Each block runs a frequency-wise depthwise conv (1×3 over bins),
//! averages over frequency, runs a temporal depthwise conv (3×1 over frames) and a 1×1
//! conv on that 1-D signal, and broadcasts it back over frequency as a residual.
//!
//! Simplifications against the paper: batch norm instead of SubSpectral Norm, ReLU
//! instead of Swish, no dilation, no dropout inside blocks. Stages have
//! `[8, 12, 16, 20] × width` channels and `[2, 2, 4, 4]` blocks, frequency stride 2 at
//! the first block of stages 2 and 3, like BC-ResNet-`width`. With `width = 2` over
//! `[98, 40]` input and 12 classes it has 24 708 trainable parameters.
//!
//! With `time_padding` valid (the streaming form) no convolution pads the time axis, and
//! each block's shortcut and frequency branch are cropped to the frames its temporal conv
//! keeps (one on either side), so an output frame depends only on the 33 input frames
//! under it (5 + 2 per block + 5 − 2).
//!
//! Layout (time on H, bins on W). Tensor names: `input_norm.*`, `conv1.weight`, `bn1.*`,
//! `stages.{s}.{b}.{trans,trans_bn,freq_dw,freq_bn,time_dw,time_bn,pw}.*`,
//! `head_dw.weight`, `head_pw.weight`, `head_bn.*`, `fc.*`.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::ds_cnn::input_norm_onnx;
use super::layers::{
    load_bn, load_conv, load_linear, visit_bn, visit_conv, visit_linear, InputNorm, LayerRunner,
    OwnWeights, TensorVisitor,
};
use super::onnx::OnnxGraph;
use super::{HeadInput, IoShape, StreamGeometry, TimePadding};
use crate::checkpoint::TensorSource;
use crate::ModelError;

/// BC-ResNet options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BcResNetConfig {
    /// Input and output shape.
    pub io: IoShape,
    /// Width multiplier τ: stage channels are `[8, 12, 16, 20] × width`.
    pub width: usize,
    /// Blocks per stage.
    pub blocks: [usize; 4],
    /// Channels of the 1×1 conv before pooling.
    pub head_channels: usize,
    /// Padding of the time axis: "same" (`model.json` without the field), or valid for the
    /// streaming form.
    #[serde(default, skip_serializing_if = "TimePadding::is_same")]
    pub time_padding: TimePadding,
}

impl BcResNetConfig {
    /// BC-ResNet-2-like: width 2, `[2, 2, 4, 4]` blocks, head 32 × width.
    pub fn new(io: IoShape) -> Self {
        Self {
            io,
            width: 2,
            blocks: [2, 2, 4, 4],
            head_channels: 64,
            time_padding: TimePadding::Same,
        }
    }

    /// The time axis of the streaming form, when `time_padding` is valid: time stride 1
    /// throughout, so output frame `j` reads input frames `[j, j + receptive_field)`. `None`
    /// for "same" padding, or a window too short for the stack.
    pub fn stream_geometry(&self) -> Option<StreamGeometry> {
        // The 5-frame stem and head convs take 4 frames each, every block's 3-frame
        // temporal conv 2.
        let lost = 4 + 2 * self.blocks.iter().sum::<usize>() + 4;
        let window_vectors = self.io.frames.checked_sub(lost)?;
        (self.time_padding == TimePadding::Valid && window_vectors > 0).then_some(StreamGeometry {
            receptive_field: lost + 1,
            stride: 1,
            window_vectors,
            head: HeadInput::Mean,
        })
    }

    /// Builds the model with fresh weights.
    pub fn init(&self, device: &Device) -> Result<BcResNet, ModelError> {
        if self.width == 0 || self.head_channels == 0 || self.blocks.contains(&0) {
            return Err(ModelError::config(
                "bc-resnet",
                "width/blocks/head_channels",
                "must be > 0",
            ));
        }
        let valid = self.time_padding == TimePadding::Valid;
        if valid && self.stream_geometry().is_none() {
            return Err(ModelError::config(
                "bc-resnet",
                "time_padding",
                format!(
                    "valid time padding leaves no output frame of a {}-frame window",
                    self.io.frames
                ),
            ));
        }
        // Padding in time of the 5-frame convs and of the 3-frame temporal convs.
        let (p5, p3) = if valid { (0, 0) } else { (2, 1) };
        let w = self.width;
        let c0 = 16 * w;
        let stage_ch = [8 * w, 12 * w, 16 * w, 20 * w];
        let freq_stride = [1, 2, 2, 1];
        let conv1 = Conv2dConfig::new([1, c0], [5, 5])
            .with_stride([1, 2])
            .with_padding(PaddingConfig2d::Explicit(p5, 2, p5, 2))
            .with_bias(false)
            .init(device);
        let mut stages = Vec::new();
        let mut cin = c0;
        for s in 0..4 {
            let cout = stage_ch[s];
            let mut blocks = Vec::new();
            for b in 0..self.blocks[s] {
                let trans = if b == 0 && cin != cout {
                    Some(
                        Conv2dConfig::new([cin, cout], [1, 1])
                            .with_bias(false)
                            .init(device),
                    )
                } else {
                    None
                };
                let fs = if b == 0 { freq_stride[s] } else { 1 };
                blocks.push(BcBlock {
                    trans_bn: trans
                        .as_ref()
                        .map(|_| BatchNormConfig::new(cout).init(device)),
                    trans,
                    freq_dw: Conv2dConfig::new([cout, cout], [1, 3])
                        .with_groups(cout)
                        .with_stride([1, fs])
                        .with_padding(PaddingConfig2d::Explicit(0, 1, 0, 1))
                        .with_bias(false)
                        .init(device),
                    freq_bn: BatchNormConfig::new(cout).init(device),
                    time_dw: Conv2dConfig::new([cout, cout], [3, 1])
                        .with_groups(cout)
                        .with_padding(PaddingConfig2d::Explicit(p3, 0, p3, 0))
                        .with_bias(false)
                        .init(device),
                    time_bn: BatchNormConfig::new(cout).init(device),
                    pw: Conv2dConfig::new([cout, cout], [1, 1]).init(device),
                });
                cin = cout;
            }
            stages.push(blocks);
        }
        Ok(BcResNet {
            input_norm: InputNorm::identity(self.io.bins, device),
            conv1,
            bn1: BatchNormConfig::new(c0).init(device),
            stages,
            head_dw: Conv2dConfig::new([cin, cin], [5, 5])
                .with_groups(cin)
                .with_padding(PaddingConfig2d::Explicit(p5, 2, p5, 2))
                .with_bias(false)
                .init(device),
            head_pw: Conv2dConfig::new([cin, self.head_channels], [1, 1])
                .with_bias(false)
                .init(device),
            head_bn: BatchNormConfig::new(self.head_channels).init(device),
            fc: LinearConfig::new(self.head_channels, self.io.classes).init(device),
        })
    }
}

/// One broadcasted-residual block; a transition block (first of a stage that changes
/// width) starts with a 1×1 conv and has no identity shortcut.
#[derive(Module, Debug)]
pub struct BcBlock {
    /// Transition 1×1 conv (channel change), if any.
    pub trans: Option<Conv2d>,
    /// Its batch norm.
    pub trans_bn: Option<BatchNorm>,
    /// Frequency-wise depthwise conv (1×3).
    pub freq_dw: Conv2d,
    /// Its batch norm.
    pub freq_bn: BatchNorm,
    /// Temporal depthwise conv (3×1) on the frequency average.
    pub time_dw: Conv2d,
    /// Its batch norm.
    pub time_bn: BatchNorm,
    /// Pointwise conv on the temporal branch.
    pub pw: Conv2d,
}

impl BcBlock {
    /// Frames the temporal conv drops on either side of the time axis: 1 when it has no
    /// time padding (the streaming form), 0 otherwise. The shortcut and the frequency
    /// branch are cropped by as much before the sum.
    fn time_crop(&self) -> usize {
        let [_, _, kt, _] = self.time_dw.weight.dims();
        let padded = match &self.time_dw.padding {
            PaddingConfig2d::Explicit(top, _, bottom, _) => top + bottom,
            PaddingConfig2d::Valid => 0,
            PaddingConfig2d::Same => kt - 1,
        };
        (kt - 1).saturating_sub(padded) / 2
    }

    fn forward<R: LayerRunner>(&self, x: Tensor<4>, r: &R) -> Tensor<4> {
        let (x, identity) = match (&self.trans, &self.trans_bn) {
            (Some(c), Some(bn)) => (relu(r.batch_norm(bn, r.conv(c, x))), false),
            _ => (x, true),
        };
        let aux = r.batch_norm(&self.freq_bn, r.conv(&self.freq_dw, x.clone()));
        // Only an unstrided, non-transition block keeps the identity shortcut.
        let identity = identity && aux.dims() == x.dims();
        let z = aux.clone().mean_dim(3);
        let z = relu(r.batch_norm(&self.time_bn, r.conv(&self.time_dw, z)));
        let z = r.conv(&self.pw, z);
        // The frames the temporal conv kept (all of them with time padding).
        let (crop, kept) = (self.time_crop(), z.dims()[2]);
        let aux = aux.narrow(2, crop, kept);
        let out = if identity {
            x.narrow(2, crop, kept) + aux + z
        } else {
            aux + z
        };
        relu(out)
    }
}

/// Simplified BC-ResNet.
#[derive(Module, Debug)]
pub struct BcResNet {
    /// Fixed input normalisation.
    pub input_norm: InputNorm,
    /// 5×5 stem conv, stride 2 over frequency.
    pub conv1: Conv2d,
    /// Its batch norm.
    pub bn1: BatchNorm,
    /// Stages of blocks.
    pub stages: Vec<Vec<BcBlock>>,
    /// 5×5 depthwise head conv.
    pub head_dw: Conv2d,
    /// 1×1 head conv.
    pub head_pw: Conv2d,
    /// Its batch norm.
    pub head_bn: BatchNorm,
    /// Classifier.
    pub fc: Linear,
}

impl BcResNet {
    /// `[B, T, F]` → `[B, classes]` logits.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        self.forward_with(x, &OwnWeights)
    }

    /// [`BcResNet::forward`] with the parametrised layers computed by `r`.
    pub fn forward_with<R: LayerRunner>(&self, x: Tensor<3>, r: &R) -> Tensor<2> {
        let [b, t, f] = x.dims();
        let x = self.input_norm.forward(x).reshape([b, 1, t, f]);
        let mut x = relu(r.batch_norm(&self.bn1, r.conv(&self.conv1, x)));
        for stage in &self.stages {
            for blk in stage {
                x = blk.forward(x, r);
            }
        }
        let x = r.conv(&self.head_dw, x);
        let x = relu(r.batch_norm(&self.head_bn, r.conv(&self.head_pw, x)));
        let [b, c, _, _] = x.dims();
        r.linear(&self.fc, x.mean_dim(3).mean_dim(2).reshape([b, c]))
    }

    pub(crate) fn visit<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError> {
        self.input_norm.visit("input_norm", v)?;
        visit_conv("conv1", &self.conv1, v)?;
        visit_bn("bn1", &self.bn1, v)?;
        for (s, stage) in self.stages.iter().enumerate() {
            for (i, blk) in stage.iter().enumerate() {
                let p = format!("stages.{s}.{i}");
                if let (Some(c), Some(bn)) = (&blk.trans, &blk.trans_bn) {
                    visit_conv(&format!("{p}.trans"), c, v)?;
                    visit_bn(&format!("{p}.trans_bn"), bn, v)?;
                }
                visit_conv(&format!("{p}.freq_dw"), &blk.freq_dw, v)?;
                visit_bn(&format!("{p}.freq_bn"), &blk.freq_bn, v)?;
                visit_conv(&format!("{p}.time_dw"), &blk.time_dw, v)?;
                visit_bn(&format!("{p}.time_bn"), &blk.time_bn, v)?;
                visit_conv(&format!("{p}.pw"), &blk.pw, v)?;
            }
        }
        visit_conv("head_dw", &self.head_dw, v)?;
        visit_conv("head_pw", &self.head_pw, v)?;
        visit_bn("head_bn", &self.head_bn, v)?;
        visit_linear("fc", &self.fc, v)
    }

    pub(crate) fn load(mut self, src: &mut TensorSource) -> Result<Self, ModelError> {
        self.input_norm = self.input_norm.load("input_norm", src)?;
        self.conv1 = load_conv(self.conv1, "conv1", src)?;
        self.bn1 = load_bn(self.bn1, "bn1", src)?;
        let mut stages = Vec::with_capacity(self.stages.len());
        for (s, stage) in self.stages.into_iter().enumerate() {
            let mut blocks = Vec::with_capacity(stage.len());
            for (i, blk) in stage.into_iter().enumerate() {
                let p = format!("stages.{s}.{i}");
                let (trans, trans_bn) = match (blk.trans, blk.trans_bn) {
                    (Some(c), Some(bn)) => (
                        Some(load_conv(c, &format!("{p}.trans"), src)?),
                        Some(load_bn(bn, &format!("{p}.trans_bn"), src)?),
                    ),
                    _ => (None, None),
                };
                blocks.push(BcBlock {
                    trans,
                    trans_bn,
                    freq_dw: load_conv(blk.freq_dw, &format!("{p}.freq_dw"), src)?,
                    freq_bn: load_bn(blk.freq_bn, &format!("{p}.freq_bn"), src)?,
                    time_dw: load_conv(blk.time_dw, &format!("{p}.time_dw"), src)?,
                    time_bn: load_bn(blk.time_bn, &format!("{p}.time_bn"), src)?,
                    pw: load_conv(blk.pw, &format!("{p}.pw"), src)?,
                });
            }
            stages.push(blocks);
        }
        self.stages = stages;
        self.head_dw = load_conv(self.head_dw, "head_dw", src)?;
        self.head_pw = load_conv(self.head_pw, "head_pw", src)?;
        self.head_bn = load_bn(self.head_bn, "head_bn", src)?;
        self.fc = load_linear(self.fc, "fc", src)?;
        Ok(self)
    }

    /// Input normalisation and the conv stack up to the head's ReLU: `[N, T, F]` →
    /// `[N, C, T', F']`.
    pub(crate) fn write_onnx_convs(
        &self,
        g: &mut OnnxGraph,
        input: &str,
    ) -> Result<String, ModelError> {
        let x = input_norm_onnx(g, &self.input_norm, input)?;
        let x = g.unsqueeze(&x, &[1]);
        let x = g.conv("conv1", &x, &self.conv1)?;
        let x = g.batch_norm("bn1", &x, &self.bn1)?;
        let mut x = g.relu(&x);
        for (s, stage) in self.stages.iter().enumerate() {
            for (i, blk) in stage.iter().enumerate() {
                let p = format!("stages.{s}.{i}");
                let identity = blk.trans.is_none() && blk.freq_dw.stride == [1, 1];
                if let (Some(c), Some(bn)) = (&blk.trans, &blk.trans_bn) {
                    x = g.conv(&format!("{p}.trans"), &x, c)?;
                    x = g.batch_norm(&format!("{p}.trans_bn"), &x, bn)?;
                    x = g.relu(&x);
                }
                let aux = g.conv(&format!("{p}.freq_dw"), &x, &blk.freq_dw)?;
                let aux = g.batch_norm(&format!("{p}.freq_bn"), &aux, &blk.freq_bn)?;
                let z = g.reduce_mean(&aux, &[3], true);
                let z = g.conv(&format!("{p}.time_dw"), &z, &blk.time_dw)?;
                let z = g.batch_norm(&format!("{p}.time_bn"), &z, &blk.time_bn)?;
                let z = g.relu(&z);
                let z = g.conv(&format!("{p}.pw"), &z, &blk.pw)?;
                let crop = blk.time_crop() as i64;
                let aux = if crop > 0 {
                    g.slice(&aux, 2, crop, -crop)
                } else {
                    aux
                };
                let sum = g.add(&aux, &z);
                let out = if identity {
                    let x = if crop > 0 {
                        g.slice(&x, 2, crop, -crop)
                    } else {
                        x
                    };
                    g.add(&x, &sum)
                } else {
                    sum
                };
                x = g.relu(&out);
            }
        }
        let x = g.conv("head_dw", &x, &self.head_dw)?;
        let x = g.conv("head_pw", &x, &self.head_pw)?;
        let x = g.batch_norm("head_bn", &x, &self.head_bn)?;
        Ok(g.relu(&x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::ArchConfig;

    const IO: IoShape = IoShape {
        frames: 98,
        bins: 40,
        classes: 12,
    };

    #[test]
    fn valid_time_padding_has_a_streaming_geometry_and_same_has_none() {
        let same = BcResNetConfig::new(IO);
        assert_eq!(same.stream_geometry(), None);
        let Some(ArchConfig::BcResNet(valid)) = ArchConfig::BcResNet(same).streaming_form() else {
            panic!("BC-ResNet over 98 frames has a streaming form")
        };
        // Stem and head 5 frames each, twelve 3-frame temporal convs: 4 + 24 + 4 lost.
        let want = StreamGeometry {
            receptive_field: 33,
            stride: 1,
            window_vectors: 66,
            head: HeadInput::Mean,
        };
        assert_eq!(valid.stream_geometry(), Some(want));
        let short = BcResNetConfig {
            io: IoShape { frames: 32, ..IO },
            ..valid
        };
        assert_eq!(short.stream_geometry(), None);
        let err = short.init(&Device::flex()).unwrap_err().to_string();
        assert!(err.contains("time_padding"), "{err}");
    }

    #[test]
    fn the_streaming_form_keeps_the_same_weights_and_drops_the_time_edges() {
        let device = Device::flex();
        let same = BcResNetConfig::new(IO);
        let valid = BcResNetConfig {
            time_padding: TimePadding::Valid,
            ..same.clone()
        };
        let (a, b) = (same.init(&device).unwrap(), valid.init(&device).unwrap());
        let x = Tensor::<3>::zeros([2, 98, 40], &device);
        assert_eq!(b.forward(x).dims(), [2, 12]);
        let names = |m: BcResNet| {
            let tensors = crate::arch::KwsModel::BcResNet(m).named_tensors().unwrap();
            tensors
                .into_iter()
                .map(|t| (t.name, t.shape))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(a), names(b));
    }
}
