//! The 2-conv + 2-FC keyword CNN of the gradient-leakage paper (Li, Zhang, Liu,
//! arXiv 2302.10441; TensorFlow's `simple_audio` model): conv 3×3 (32) → ReLU → max pool 2
//! → conv 3×3 (64) → ReLU → max pool 2 → flatten → FC 128 → ReLU → dropout → FC classes.
//!
//! `simple_audio` resizes its input to 32×32 before the convs; hush pools after each conv
//! instead, so over `[98, 40]` input the first FC sees 64 × 23 × 8 values and the model
//! has 1.53 M trainable parameters, almost all in that FC — the layer whose gradient the
//! leakage audit inverts. No batch norm: every example's gradient is its own.
//!
//! No convolution pads, so the model streams as it is: an output frame of the conv stack
//! reads input frames `[4j, 4j + 10)` only. With `streaming` a package also carries that
//! form (`frames.onnx`, the conv stack per frame; `head.onnx`, the two FC layers over a
//! window's frames in order: [`LeakCnnConfig::stream_geometry`]), with the same weights.
//!
//! Tensor names: `input_norm.*`, `conv1.*`, `conv2.*`, `fc1.*`, `fc2.*`.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use super::ds_cnn::input_norm_onnx;
use super::layers::{
    load_conv, load_linear, visit_conv, visit_linear, InputNorm, LayerRunner, OwnWeights,
    TensorVisitor,
};
use super::onnx::OnnxGraph;
use super::{HeadInput, IoShape, StreamGeometry};
use crate::checkpoint::TensorSource;
use crate::ModelError;

/// Leak-CNN options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeakCnnConfig {
    /// Input and output shape.
    pub io: IoShape,
    /// Channels of the two convs.
    pub channels: [usize; 2],
    /// Width of the hidden FC layer.
    pub hidden: usize,
    /// Dropout before the last FC (training only).
    pub dropout: f64,
    /// Whether a package carries the streaming form (false when absent).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub streaming: bool,
}

impl LeakCnnConfig {
    /// The paper's sizes: 32 and 64 channels, 128 hidden units, dropout 0.5.
    pub fn new(io: IoShape) -> Self {
        Self {
            io,
            channels: [32, 64],
            hidden: 128,
            dropout: 0.5,
            streaming: false,
        }
    }

    /// The time axis of the streaming form, with `streaming`: each conv reads 3 frames and
    /// each pool 2 at a stride of 2, so an output frame reads 10 input frames, 4 apart, and
    /// the head reads a window's [`LeakCnnConfig::pooled`] frames in order.
    pub fn stream_geometry(&self) -> Option<StreamGeometry> {
        let (window_vectors, _) = self.pooled();
        (self.streaming && window_vectors > 0).then_some(StreamGeometry {
            receptive_field: 10,
            stride: 4,
            window_vectors,
            head: HeadInput::Frames,
        })
    }

    /// `(frames, bins)` after both conv + pool stages.
    pub fn pooled(&self) -> (usize, usize) {
        let step = |n: usize| n.saturating_sub(2) / 2;
        (step(step(self.io.frames)), step(step(self.io.bins)))
    }

    /// Builds the model with fresh weights.
    pub fn init(&self, device: &Device) -> Result<LeakCnn, ModelError> {
        let (t, f) = self.pooled();
        if t == 0 || f == 0 {
            return Err(ModelError::config(
                "leak-cnn",
                "io",
                format!(
                    "input {}×{} is too small for two 3×3 conv + 2×2 pool stages (need ≥ 10×10)",
                    self.io.frames, self.io.bins
                ),
            ));
        }
        if self.channels.contains(&0) || self.hidden == 0 || !(0.0..1.0).contains(&self.dropout) {
            return Err(ModelError::config(
                "leak-cnn",
                "channels/hidden/dropout",
                "sizes must be > 0 and dropout in [0, 1)",
            ));
        }
        let [c1, c2] = self.channels;
        Ok(LeakCnn {
            input_norm: InputNorm::identity(self.io.bins, device),
            conv1: Conv2dConfig::new([1, c1], [3, 3]).init(device),
            conv2: Conv2dConfig::new([c1, c2], [3, 3]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            fc1: LinearConfig::new(c2 * t * f, self.hidden).init(device),
            dropout: DropoutConfig::new(self.dropout).init(),
            fc2: LinearConfig::new(self.hidden, self.io.classes).init(device),
        })
    }
}

/// 2 conv + 2 FC.
#[derive(Module, Debug)]
pub struct LeakCnn {
    /// Fixed input normalisation.
    pub input_norm: InputNorm,
    /// First conv (3×3, valid).
    pub conv1: Conv2d,
    /// Second conv (3×3, valid).
    pub conv2: Conv2d,
    /// 2×2 max pool after each conv.
    pub pool: MaxPool2d,
    /// Hidden FC.
    pub fc1: Linear,
    /// Dropout before the classifier.
    pub dropout: Dropout,
    /// Classifier.
    pub fc2: Linear,
}

impl LeakCnn {
    /// `[B, T, F]` → `[B, classes]` logits.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        self.forward_with(x, &OwnWeights)
    }

    /// [`LeakCnn::forward`] with the parametrised layers computed by `r`.
    pub fn forward_with<R: LayerRunner>(&self, x: Tensor<3>, r: &R) -> Tensor<2> {
        let [b, t, f] = x.dims();
        let x = self.input_norm.forward(x).reshape([b, 1, t, f]);
        let x = self.pool.forward(relu(r.conv(&self.conv1, x)));
        let x = self.pool.forward(relu(r.conv(&self.conv2, x)));
        let [b, c, h, w] = x.dims();
        let x = relu(r.linear(&self.fc1, x.reshape([b, c * h * w])));
        r.linear(&self.fc2, r.dropout(&self.dropout, x))
    }

    pub(crate) fn visit<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError> {
        self.input_norm.visit("input_norm", v)?;
        visit_conv("conv1", &self.conv1, v)?;
        visit_conv("conv2", &self.conv2, v)?;
        visit_linear("fc1", &self.fc1, v)?;
        visit_linear("fc2", &self.fc2, v)
    }

    pub(crate) fn load(mut self, src: &mut TensorSource) -> Result<Self, ModelError> {
        self.input_norm = self.input_norm.load("input_norm", src)?;
        self.conv1 = load_conv(self.conv1, "conv1", src)?;
        self.conv2 = load_conv(self.conv2, "conv2", src)?;
        self.fc1 = load_linear(self.fc1, "fc1", src)?;
        self.fc2 = load_linear(self.fc2, "fc2", src)?;
        Ok(self)
    }

    pub(crate) fn write_onnx(&self, g: &mut OnnxGraph, input: &str) -> Result<String, ModelError> {
        let x = self.write_onnx_convs(g, input)?;
        let x = g.flatten(&x);
        self.write_onnx_fcs(g, &x)
    }

    /// The conv stack: `[N, T, bins]` → `[N, C, T', F']`.
    pub(crate) fn write_onnx_convs(
        &self,
        g: &mut OnnxGraph,
        input: &str,
    ) -> Result<String, ModelError> {
        let x = input_norm_onnx(g, &self.input_norm, input)?;
        let x = g.unsqueeze(&x, &[1]);
        let x = g.conv("conv1", &x, &self.conv1)?;
        let x = g.relu(&x);
        let x = g.max_pool(&x, [2, 2], [2, 2]);
        let x = g.conv("conv2", &x, &self.conv2)?;
        let x = g.relu(&x);
        Ok(g.max_pool(&x, [2, 2], [2, 2]))
    }

    /// `(C, F')` of one output frame of the conv stack, for windows of `frames` output
    /// frames (the first FC reads `C × frames × F'` values).
    pub(crate) fn frame_shape(&self, frames: usize) -> (usize, usize) {
        let c = self.conv2.weight.val().dims()[0];
        let read = self.fc1.weight.val().dims()[0];
        (c, read / (c * frames).max(1))
    }

    /// The streaming head: `[N, frames × C × F']`, a window's `frames` output frames one
    /// after another (each `C × F'`, channel-major), reordered as the whole window's
    /// flatten orders them (`[N, C, T', F']`), then the two FC layers.
    pub(crate) fn write_onnx_head(
        &self,
        g: &mut OnnxGraph,
        input: &str,
        frames: usize,
    ) -> Result<String, ModelError> {
        let (c, f) = self.frame_shape(frames);
        let x = g.reshape(input, &[-1, frames as i64, c as i64, f as i64]);
        let x = g.transpose(&x, &[0, 2, 1, 3]);
        let x = g.flatten(&x);
        self.write_onnx_fcs(g, &x)
    }

    /// FC → ReLU → FC over flattened `[N, C·T'·F']`.
    fn write_onnx_fcs(&self, g: &mut OnnxGraph, x: &str) -> Result<String, ModelError> {
        let x = g.linear("fc1", x, &self.fc1)?;
        let x = g.relu(&x);
        g.linear("fc2", &x, &self.fc2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_streaming_geometry_is_opt_in_and_matches_the_pooled_frames() {
        let io = |frames, bins| IoShape {
            frames,
            bins,
            classes: 12,
        };
        let mut cfg = LeakCnnConfig::new(io(98, 40));
        assert_eq!(cfg.stream_geometry(), None);
        cfg.streaming = true;
        // 98 → conv 96 → pool 48 → conv 46 → pool 23; frame j reads frames 4j .. 4j + 10.
        let want = StreamGeometry {
            receptive_field: 10,
            stride: 4,
            window_vectors: 23,
            head: HeadInput::Frames,
        };
        assert_eq!(cfg.stream_geometry(), Some(want));
        assert_eq!(cfg.pooled(), (23, 8));
        for frames in 10..120 {
            cfg.io = io(frames, 40);
            let g = cfg.stream_geometry().unwrap();
            // The last output frame's input frames lie in the window; one more would not.
            let last = (g.window_vectors - 1) * g.stride + g.receptive_field;
            assert!(
                last <= frames && last + g.stride > frames,
                "{frames}: {g:?}"
            );
        }
        cfg.io = io(9, 40);
        assert_eq!(cfg.stream_geometry(), None);
        // The streaming form serialises its flag; the plain one leaves it out.
        let plain = serde_json::to_string(&LeakCnnConfig::new(io(49, 20))).unwrap();
        assert!(!plain.contains("streaming"), "{plain}");
        let back: LeakCnnConfig =
            serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
        assert!(back.streaming);
    }
}
