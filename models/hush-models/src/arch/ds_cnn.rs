//! DS-CNN (Zhang et al. 2017, "Hello Edge"; ARM ML-KWS-for-MCU `ds_cnn`): a full conv
//! (10×4, stride 2) then depthwise-separable blocks (3×3 depthwise + 1×1 pointwise,
//! each with batch norm and ReLU), global average pooling and one fully connected layer.
//!
//! The S size is 64 channels and 4 blocks. Over `[98, 40]` log-mel input with 12
//! classes it has 23 180 trainable parameters (plus 1 280 batch-norm statistics); the
//! 38.6 K quoted for DS-CNN-S in Hello Edge is its memory footprint in KB (8-bit weights
//! plus activations), not a parameter count.
//!
//! Layout (time on the H axis, bins on W): input `[B, T, F]` → `[B, 1, T, F]`.
//!
//! With `time_padding: valid` no convolution pads the time axis, so an output frame of the
//! conv stack depends only on the input frames under it, and the global average pool is a
//! mean over those frames: the model can then run incrementally over a stream, each hop
//! computing only its new frames ([`DsCnnConfig::stream_geometry`], the `frames.onnx` and
//! `head.onnx` a package carries beside `model.onnx`).
//! Tensor names: `input_norm.*`, `conv1.weight`, `bn1.*`, `blocks.{i}.dw.weight`,
//! `blocks.{i}.dw_bn.*`, `blocks.{i}.pw.weight`, `blocks.{i}.pw_bn.*`, `fc.weight`
//! `[C, classes]`, `fc.bias`.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{
    BatchNorm, BatchNormConfig, Dropout, DropoutConfig, Linear, LinearConfig, PaddingConfig2d,
};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::layers::{
    load_bn, load_conv, load_linear, visit_bn, visit_conv, visit_linear, InputNorm, LayerRunner,
    OwnWeights, TensorVisitor,
};
use super::onnx::OnnxGraph;
use super::{HeadInput, IoShape, StreamGeometry, TimePadding};
use crate::checkpoint::TensorSource;
use crate::ModelError;

/// DS-CNN options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DsCnnConfig {
    /// Input and output shape.
    pub io: IoShape,
    /// Channels of every layer (S: 64, M: 172, L: 276).
    pub channels: usize,
    /// Depthwise-separable blocks (S: 4).
    pub blocks: usize,
    /// First conv kernel `[time, freq]` (10×4).
    pub first_kernel: [usize; 2],
    /// First conv stride `[time, freq]` (2×2).
    pub first_stride: [usize; 2],
    /// Dropout before the classifier (training only).
    pub dropout: f64,
    /// How the convolutions pad the time axis ("same" when absent).
    #[serde(default, skip_serializing_if = "TimePadding::is_same")]
    pub time_padding: TimePadding,
}

impl DsCnnConfig {
    /// DS-CNN-S: 64 channels, 4 blocks, first conv 10×4 stride 2.
    pub fn small(io: IoShape) -> Self {
        Self {
            io,
            channels: 64,
            blocks: 4,
            first_kernel: [10, 4],
            first_stride: [2, 2],
            dropout: 0.2,
            time_padding: TimePadding::Same,
        }
    }

    /// The time axis of the streaming form, when `time_padding` is valid: the conv stack's
    /// output frame `j` reads input frames `[j·stride, j·stride + receptive_field)`, and a
    /// window of `io.frames` frames pools `window_vectors` of them. `None` for "same"
    /// padding, or a window too short for the stack.
    pub fn stream_geometry(&self) -> Option<StreamGeometry> {
        let [kt, _] = self.first_kernel;
        let [st, _] = self.first_stride;
        // Each 3×3 depthwise conv reads one more conv1 frame on either side.
        let depthwise_reach = 2 * self.blocks;
        let conv1_frames = self.io.frames.checked_sub(kt)? / st.max(1) + 1;
        let window_vectors = conv1_frames.checked_sub(depthwise_reach)?;
        (self.time_padding == TimePadding::Valid && st > 0 && window_vectors > 0).then_some(
            StreamGeometry {
                receptive_field: kt + depthwise_reach * st,
                stride: st,
                window_vectors,
                head: HeadInput::Mean,
            },
        )
    }

    /// Builds the model with fresh weights.
    pub fn init(&self, device: &Device) -> Result<DsCnn, ModelError> {
        let c = self.channels;
        if c == 0 || self.first_kernel.contains(&0) || self.first_stride.contains(&0) {
            return Err(ModelError::config(
                "ds-cnn-s",
                "channels/first_kernel/first_stride",
                "must be > 0",
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(ModelError::config(
                "ds-cnn-s",
                "dropout",
                "must be in [0, 1)",
            ));
        }
        let valid = self.time_padding == TimePadding::Valid;
        if valid && self.stream_geometry().is_none() {
            return Err(ModelError::config(
                "ds-cnn-s",
                "time_padding",
                format!(
                    "valid time padding leaves no output frame of a {}-frame window",
                    self.io.frames
                ),
            ));
        }
        let [kt, kf] = self.first_kernel;
        // "Same"-like symmetric padding: (k - 1) / 2 on each side (none in time when valid).
        let (pt, pf) = (if valid { 0 } else { (kt - 1) / 2 }, (kf - 1) / 2);
        let dt = usize::from(!valid);
        let conv1 = Conv2dConfig::new([1, c], self.first_kernel)
            .with_stride(self.first_stride)
            .with_padding(PaddingConfig2d::Explicit(pt, pf, pt, pf))
            .with_bias(false)
            .init(device);
        let blocks = (0..self.blocks)
            .map(|_| DsBlock {
                dw: Conv2dConfig::new([c, c], [3, 3])
                    .with_groups(c)
                    .with_padding(PaddingConfig2d::Explicit(dt, 1, dt, 1))
                    .with_bias(false)
                    .init(device),
                dw_bn: BatchNormConfig::new(c).init(device),
                pw: Conv2dConfig::new([c, c], [1, 1])
                    .with_bias(false)
                    .init(device),
                pw_bn: BatchNormConfig::new(c).init(device),
            })
            .collect();
        Ok(DsCnn {
            input_norm: InputNorm::identity(self.io.bins, device),
            conv1,
            bn1: BatchNormConfig::new(c).init(device),
            blocks,
            dropout: DropoutConfig::new(self.dropout).init(),
            fc: LinearConfig::new(c, self.io.classes).init(device),
        })
    }
}

/// One depthwise-separable block.
#[derive(Module, Debug)]
pub struct DsBlock {
    /// 3×3 depthwise conv.
    pub dw: Conv2d,
    /// Its batch norm.
    pub dw_bn: BatchNorm,
    /// 1×1 pointwise conv.
    pub pw: Conv2d,
    /// Its batch norm.
    pub pw_bn: BatchNorm,
}

/// DS-CNN.
#[derive(Module, Debug)]
pub struct DsCnn {
    /// Fixed input normalisation.
    pub input_norm: InputNorm,
    /// First full conv.
    pub conv1: Conv2d,
    /// Its batch norm.
    pub bn1: BatchNorm,
    /// Depthwise-separable blocks.
    pub blocks: Vec<DsBlock>,
    /// Dropout before the classifier.
    pub dropout: Dropout,
    /// Classifier.
    pub fc: Linear,
}

impl DsCnn {
    /// `[B, T, F]` → `[B, classes]` logits.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        self.forward_with(x, &OwnWeights)
    }

    /// [`DsCnn::forward`] with the parametrised layers computed by `r`.
    pub fn forward_with<R: LayerRunner>(&self, x: Tensor<3>, r: &R) -> Tensor<2> {
        let [b, t, f] = x.dims();
        let x = self.input_norm.forward(x).reshape([b, 1, t, f]);
        let mut x = relu(r.batch_norm(&self.bn1, r.conv(&self.conv1, x)));
        for blk in &self.blocks {
            x = relu(r.batch_norm(&blk.dw_bn, r.conv(&blk.dw, x)));
            x = relu(r.batch_norm(&blk.pw_bn, r.conv(&blk.pw, x)));
        }
        let [b, c, _, _] = x.dims();
        let x = x.mean_dim(3).mean_dim(2).reshape([b, c]);
        r.linear(&self.fc, r.dropout(&self.dropout, x))
    }

    pub(crate) fn visit<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError> {
        self.input_norm.visit("input_norm", v)?;
        visit_conv("conv1", &self.conv1, v)?;
        visit_bn("bn1", &self.bn1, v)?;
        for (i, blk) in self.blocks.iter().enumerate() {
            visit_conv(&format!("blocks.{i}.dw"), &blk.dw, v)?;
            visit_bn(&format!("blocks.{i}.dw_bn"), &blk.dw_bn, v)?;
            visit_conv(&format!("blocks.{i}.pw"), &blk.pw, v)?;
            visit_bn(&format!("blocks.{i}.pw_bn"), &blk.pw_bn, v)?;
        }
        visit_linear("fc", &self.fc, v)
    }

    pub(crate) fn load(mut self, src: &mut TensorSource) -> Result<Self, ModelError> {
        self.input_norm = self.input_norm.load("input_norm", src)?;
        self.conv1 = load_conv(self.conv1, "conv1", src)?;
        self.bn1 = load_bn(self.bn1, "bn1", src)?;
        let mut blocks = Vec::with_capacity(self.blocks.len());
        for (i, blk) in self.blocks.into_iter().enumerate() {
            blocks.push(DsBlock {
                dw: load_conv(blk.dw, &format!("blocks.{i}.dw"), src)?,
                dw_bn: load_bn(blk.dw_bn, &format!("blocks.{i}.dw_bn"), src)?,
                pw: load_conv(blk.pw, &format!("blocks.{i}.pw"), src)?,
                pw_bn: load_bn(blk.pw_bn, &format!("blocks.{i}.pw_bn"), src)?,
            });
        }
        self.blocks = blocks;
        self.fc = load_linear(self.fc, "fc", src)?;
        Ok(self)
    }

    /// Input normalisation and the conv stack: `[N, T, F]` → `[N, C, T', F']`.
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
        for (i, blk) in self.blocks.iter().enumerate() {
            x = g.conv(&format!("blocks.{i}.dw"), &x, &blk.dw)?;
            x = g.batch_norm(&format!("blocks.{i}.dw_bn"), &x, &blk.dw_bn)?;
            x = g.relu(&x);
            x = g.conv(&format!("blocks.{i}.pw"), &x, &blk.pw)?;
            x = g.batch_norm(&format!("blocks.{i}.pw_bn"), &x, &blk.pw_bn)?;
            x = g.relu(&x);
        }
        Ok(x)
    }
}

/// `(x - input_norm.mean) · input_norm.scale` in ONNX, broadcasting over the last axis.
pub(crate) fn input_norm_onnx(
    g: &mut OnnxGraph,
    n: &InputNorm,
    x: &str,
) -> Result<String, ModelError> {
    let mut t = Vec::new();
    n.tensors("input_norm", &mut t)?;
    let mut it = t.into_iter();
    let (Some(mean), Some(scale)) = (it.next(), it.next()) else {
        return Err(ModelError::TensorData {
            name: "input_norm".into(),
            reason: "expected mean and scale".into(),
        });
    };
    let m = g.initializer(mean);
    let s = g.initializer(scale);
    let x = g.sub(x, &m);
    Ok(g.mul(&x, &s))
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
        let mut cfg = DsCnnConfig::small(IO);
        assert_eq!(cfg.stream_geometry(), None);
        cfg.time_padding = TimePadding::Valid;
        // conv1 (10 frames, stride 2) gives 45 frames; four 3-tap depthwise convs take 8.
        let want = StreamGeometry {
            receptive_field: 26,
            stride: 2,
            window_vectors: 37,
            head: HeadInput::Mean,
        };
        assert_eq!(cfg.stream_geometry(), Some(want));
        let same = ArchConfig::DsCnnS(DsCnnConfig::small(IO));
        assert_eq!(same.streaming_form(), Some(ArchConfig::DsCnnS(cfg.clone())));
        cfg.io.frames = 25;
        assert_eq!(cfg.stream_geometry(), None);
        let short = ArchConfig::DsCnnS(DsCnnConfig::small(cfg.io));
        assert_eq!(short.streaming_form(), None);
        // Leak-CNN pads nothing: its streaming form only asks that the package carry it.
        let leak = crate::arch::LeakCnnConfig::new(IO);
        let streaming = crate::arch::LeakCnnConfig {
            streaming: true,
            ..leak.clone()
        };
        let leak = ArchConfig::LeakCnn(leak);
        assert_eq!(leak.stream_geometry(), None);
        assert_eq!(leak.streaming_form(), Some(ArchConfig::LeakCnn(streaming)));
        let err = cfg.init(&Device::flex()).unwrap_err().to_string();
        assert!(err.contains("time_padding"), "{err}");
    }

    #[test]
    fn model_json_without_time_padding_reads_same_and_valid_round_trips() {
        let same = serde_json::to_value(DsCnnConfig::small(IO)).unwrap();
        assert!(same.get("time_padding").is_none(), "{same}");
        let mut valid = DsCnnConfig::small(IO);
        valid.time_padding = TimePadding::Valid;
        let json = serde_json::to_value(&valid).unwrap();
        assert_eq!(json["time_padding"], "valid");
        assert_eq!(serde_json::from_value::<DsCnnConfig>(json).unwrap(), valid);
        assert_eq!(
            serde_json::from_value::<DsCnnConfig>(same)
                .unwrap()
                .time_padding,
            TimePadding::Same
        );
    }
}
