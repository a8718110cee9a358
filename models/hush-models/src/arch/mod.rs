//! Keyword-spotting architectures, one file each: [`ds_cnn`] (DS-CNN, Hello Edge),
//! [`bc_resnet`] (a simplified BC-ResNet), [`leak_cnn`] (the 2-conv + 2-FC CNN of the
//! gradient-leakage paper). Each has a name, a typed serde config ([`ArchConfig`]), a
//! parameter count, tensors named per layer, and an ONNX layout.
//!
//! Every model maps log-mel/MFCC features `[B, frames, bins]` to logits `[B, classes]`,
//! after a fixed per-bin input normalisation ([`layers::InputNorm`]).
//!
//! ```
//! use burn::tensor::{Device, Tensor};
//! use hush_models::arch::{ArchConfig, IoShape};
//! let io = IoShape { frames: 98, bins: 40, classes: 12 };
//! let cfg = ArchConfig::default_for("ds-cnn-s", io).unwrap();
//! let model = cfg.init(&Device::flex()).unwrap();
//! let logits = model.forward(Tensor::zeros([2, 98, 40], &Device::flex()));
//! assert_eq!(logits.dims(), [2, 12]);
//! ```

pub mod bc_resnet;
pub(crate) mod conv;
pub mod depthwise;
pub mod ds_cnn;
pub mod layers;
pub mod leak_cnn;
pub mod onnx;

use burn::module::Module;
use burn::nn::{BatchNorm, Linear};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{NamedTensor, TensorSource};
use crate::ModelError;
use layers::{
    read_grads, read_values, write_grads, LayerRunner, NamedModule, OwnWeights, TensorVisitor,
};
use onnx::{OnnxGraph, INPUT, POOLED};

pub use bc_resnet::{BcResNet, BcResNetConfig};
pub use ds_cnn::{DsCnn, DsCnnConfig};
pub use leak_cnn::{LeakCnn, LeakCnnConfig};

/// What goes in and out of a keyword spotter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoShape {
    /// Feature frames per example (98 for 1 s at a 10 ms hop with 25 ms frames).
    pub frames: usize,
    /// Values per frame (mel bins or cepstra).
    pub bins: usize,
    /// Output classes.
    pub classes: usize,
}

impl IoShape {
    fn check(&self, arch: &str) -> Result<(), ModelError> {
        if self.frames == 0 || self.bins == 0 {
            return Err(ModelError::config(
                arch,
                "io",
                "frames and bins must be > 0",
            ));
        }
        if self.classes < 2 {
            return Err(ModelError::config(arch, "io.classes", "at least 2 classes"));
        }
        Ok(())
    }
}

/// How a keyword spotter's convolutions pad the time axis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimePadding {
    /// Zero padding on both sides, (k − 1) / 2 frames: each convolution keeps the frame
    /// count (up to its stride); the edges of a window see zeros.
    #[default]
    Same,
    /// No padding: each output frame depends only on the input frames under its kernel, so
    /// the model runs incrementally over a stream (see [`ArchConfig::stream_geometry`]).
    Valid,
}

impl TimePadding {
    /// Whether this is [`TimePadding::Same`], the default.
    pub fn is_same(&self) -> bool {
        *self == TimePadding::Same
    }
}

/// The time axis of a keyword spotter's streaming form: the per-frame trunk's output frame
/// `j` depends only on input frames `[j·stride, j·stride + receptive_field)`, and the
/// classifier reads the `window_vectors` of them a window covers ([`HeadInput`]). A window
/// starting at input frame `s` reads output frames `s / stride ..`, so a stream's windows
/// share frames exactly when their starts differ by a multiple of `stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamGeometry {
    /// Input frames one output frame reads.
    pub receptive_field: usize,
    /// Input frames from one output frame to the next.
    pub stride: usize,
    /// Output frames of one window, read by the head.
    pub window_vectors: usize,
    /// What the head reads of them.
    pub head: HeadInput,
}

impl StreamGeometry {
    /// Values the head takes for a window of output frames of `channels` values each.
    pub fn head_width(&self, channels: usize) -> usize {
        match self.head {
            HeadInput::Mean => channels,
            HeadInput::Frames => self.window_vectors * channels,
        }
    }
}

/// What a streaming form's head reads of a window's output frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadInput {
    /// Their mean, `[N, channels]`: DS-CNN-S and BC-ResNet pool over time.
    Mean,
    /// The frames themselves, oldest first, one after another: `[N, window_vectors ×
    /// channels]`. Leak-CNN's classifier weighs each time position of the window apart.
    Frames,
}

/// A keyword spotter's streaming form as encoded ONNX graphs ([`KwsModel::to_onnx_stream`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOnnx {
    /// The per-frame trunk (`frames.onnx`).
    pub frames: Vec<u8>,
    /// The head over a window's output frames (`head.onnx`: their mean, or for leak-CNN the
    /// frames in order).
    pub head: Vec<u8>,
}

/// An architecture and its configuration, as stored in `model.json`
/// (`{"name": "ds-cnn-s", …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "kebab-case")]
pub enum ArchConfig {
    /// Depthwise-separable CNN (Hello Edge DS-CNN; S size by default).
    DsCnnS(DsCnnConfig),
    /// Broadcasted-residual network (simplified BC-ResNet).
    BcResNet(BcResNetConfig),
    /// 2 conv + 2 FC (the gradient-leakage paper's model).
    LeakCnn(LeakCnnConfig),
}

/// Names accepted by [`ArchConfig::default_for`].
pub const ARCH_NAMES: [&str; 3] = ["ds-cnn-s", "bc-resnet", "leak-cnn"];

impl ArchConfig {
    /// The default configuration of the architecture called `name` (one of
    /// [`ARCH_NAMES`]) for `io`.
    pub fn default_for(name: &str, io: IoShape) -> Result<Self, ModelError> {
        match name {
            "ds-cnn-s" | "ds-cnn" => Ok(Self::DsCnnS(DsCnnConfig::small(io))),
            "bc-resnet" => Ok(Self::BcResNet(BcResNetConfig::new(io))),
            "leak-cnn" => Ok(Self::LeakCnn(LeakCnnConfig::new(io))),
            _ => Err(ModelError::config(
                name,
                "name",
                format!(
                    "unknown architecture; expected one of {}",
                    ARCH_NAMES.join(", ")
                ),
            )),
        }
    }

    /// The architecture's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::DsCnnS(_) => "ds-cnn-s",
            Self::BcResNet(_) => "bc-resnet",
            Self::LeakCnn(_) => "leak-cnn",
        }
    }

    /// Input and output shape.
    pub fn io(&self) -> IoShape {
        match self {
            Self::DsCnnS(c) => c.io,
            Self::BcResNet(c) => c.io,
            Self::LeakCnn(c) => c.io,
        }
    }

    /// The streaming form's time axis, when the architecture and its configuration have
    /// one (DS-CNN-S or BC-ResNet with valid time padding, leak-CNN with `streaming`).
    pub fn stream_geometry(&self) -> Option<StreamGeometry> {
        match self {
            Self::DsCnnS(c) => c.stream_geometry(),
            Self::BcResNet(c) => c.stream_geometry(),
            Self::LeakCnn(c) => c.stream_geometry(),
        }
    }

    /// The streaming form of this configuration, with the same weights (time padding is not
    /// a weight): DS-CNN-S or BC-ResNet with valid time padding, leak-CNN (whose
    /// convolutions pad nothing) with its streaming form written, when the window leaves it
    /// a streaming geometry.
    pub fn streaming_form(&self) -> Option<ArchConfig> {
        let valid = match self {
            Self::DsCnnS(c) => Self::DsCnnS(DsCnnConfig {
                time_padding: TimePadding::Valid,
                ..c.clone()
            }),
            Self::BcResNet(c) => Self::BcResNet(BcResNetConfig {
                time_padding: TimePadding::Valid,
                ..c.clone()
            }),
            Self::LeakCnn(c) => Self::LeakCnn(LeakCnnConfig {
                streaming: true,
                ..c.clone()
            }),
        };
        valid.stream_geometry().map(|_| valid)
    }

    /// Builds a freshly initialised model on `device` (seed it with `device.seed`).
    pub fn init(&self, device: &Device) -> Result<KwsModel, ModelError> {
        self.io().check(self.name())?;
        Ok(match self {
            Self::DsCnnS(c) => KwsModel::DsCnn(c.init(device)?),
            Self::BcResNet(c) => KwsModel::BcResNet(c.init(device)?),
            Self::LeakCnn(c) => KwsModel::LeakCnn(c.init(device)?),
        })
    }

    /// [`ArchConfig::init`] with weights from `seed` alone: burn's process-wide random state
    /// is held ([`crate::rng::hold_backend_rng`]) from seeding until every parameter has
    /// been drawn (burn draws a parameter's values when it is first read, here in
    /// [`KwsModel::named_tensors`]' order), so other threads' draws cannot change them.
    pub fn init_seeded(&self, device: &Device, seed: u64) -> Result<KwsModel, ModelError> {
        let _rng = crate::rng::hold_backend_rng();
        device.seed(seed);
        let model = self.init(device)?;
        model.named_tensors()?;
        Ok(model)
    }
}

/// Whether a tensor name is a trainable parameter (not a batch-norm running statistic or
/// the fixed input normalisation).
pub fn is_trainable(name: &str) -> bool {
    !(name.ends_with(".running_mean")
        || name.ends_with(".running_var")
        || name.starts_with("input_norm."))
}

/// One of hush's keyword spotters.
// The variants differ in size (BC-ResNet keeps its blocks' layer configs inline); a model
// is built once per run, so boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum KwsModel {
    /// DS-CNN.
    DsCnn(DsCnn),
    /// BC-ResNet.
    BcResNet(BcResNet),
    /// 2 conv + 2 FC.
    LeakCnn(LeakCnn),
}

impl NamedModule for KwsModel {
    fn visit_tensors<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError> {
        self.visit(v)
    }
}

impl KwsModel {
    /// `[B, frames, bins]` features → `[B, classes]` logits. Training behaviour (batch
    /// statistics, dropout) on an autodiff device, inference behaviour after
    /// [`Module::valid`].
    pub fn forward(&self, x: Tensor<3>) -> Tensor<2> {
        self.forward_with(x, &OwnWeights)
    }

    /// [`KwsModel::forward`] with every conv, batch norm and linear layer computed by `r`
    /// (per-example weight copies for DP: `dp::vectorized`).
    pub fn forward_with<R: LayerRunner>(&self, x: Tensor<3>, r: &R) -> Tensor<2> {
        match self {
            Self::DsCnn(m) => m.forward_with(x, r),
            Self::BcResNet(m) => m.forward_with(x, r),
            Self::LeakCnn(m) => m.forward_with(x, r),
        }
    }

    /// Every tensor (trainable parameters, batch-norm running statistics, the input
    /// normalisation), named per layer as in `weights.safetensors`, in layer order.
    pub fn named_tensors(&self) -> Result<Vec<NamedTensor>, ModelError> {
        read_values(self)
    }

    /// Runs `v` over every tensor, named and ordered as in `weights.safetensors`: the one
    /// traversal behind [`KwsModel::named_tensors`], [`KwsModel::named_grads`] and
    /// [`KwsModel::grads_params`].
    pub fn visit<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError> {
        match self {
            Self::DsCnn(m) => m.visit(v),
            Self::BcResNet(m) => m.visit(v),
            Self::LeakCnn(m) => m.visit(v),
        }
    }

    /// The gradient of every trainable tensor in `grads` (from
    /// [`crate::step::loss_and_grads`]), named and ordered exactly like the trainable
    /// entries of [`KwsModel::named_tensors`]. A parameter the loss did not reach reads as
    /// zeros.
    pub fn named_grads(&self, grads: &GradientsParams) -> Result<Vec<NamedTensor>, ModelError> {
        read_grads(self, grads)
    }

    /// The inverse of [`KwsModel::named_grads`]: gradients given by name, as burn
    /// [`GradientsParams`], ready for any burn optimizer (AdamW, SGD). Trainable tensors left
    /// out get no gradient, so the optimizer leaves them unchanged (layer freezing); a name
    /// that is no trainable tensor, or a wrong shape, is an error.
    pub fn grads_params(&self, grads: &[NamedTensor]) -> Result<GradientsParams, ModelError> {
        write_grads(self, grads)
    }

    /// Switches every batch norm between batch statistics (`true`, the default when
    /// training) and its stored running statistics (`false`). With `false` a batch norm is
    /// a fixed per-channel affine map followed by its trainable `gamma`/`beta`: no example
    /// influences another's output and the running statistics are no longer updated from
    /// the data, which is what per-example gradients (DP-SGD) need. Dropout is unaffected.
    pub fn with_batch_statistics(self, on: bool) -> Self {
        self.map_batch_norms(&|mut b| {
            b.training = b.training.with_value(on);
            b
        })
    }

    /// Sets every batch norm's running-statistics momentum: a training-mode forward pass
    /// then moves each running statistic `momentum` of the way to the batch's. Stepping it
    /// down as 1, 1/2, 1/3, … over a pass makes the running statistics the plain mean over
    /// its batches (re-estimating them for averaged weights).
    pub fn with_batch_norm_momentum(self, momentum: f64) -> Self {
        self.map_batch_norms(&|mut b| {
            b.momentum = momentum;
            b
        })
    }

    /// Applies `f` to every batch norm of the model.
    fn map_batch_norms(self, f: &dyn Fn(BatchNorm) -> BatchNorm) -> Self {
        match self {
            Self::DsCnn(mut m) => {
                m.bn1 = f(m.bn1);
                m.blocks = m
                    .blocks
                    .into_iter()
                    .map(|mut blk| {
                        blk.dw_bn = f(blk.dw_bn);
                        blk.pw_bn = f(blk.pw_bn);
                        blk
                    })
                    .collect();
                Self::DsCnn(m)
            }
            Self::BcResNet(mut m) => {
                m.bn1 = f(m.bn1);
                m.head_bn = f(m.head_bn);
                m.stages = m
                    .stages
                    .into_iter()
                    .map(|stage| {
                        stage
                            .into_iter()
                            .map(|mut blk| {
                                blk.trans_bn = blk.trans_bn.map(f);
                                blk.freq_bn = f(blk.freq_bn);
                                blk.time_bn = f(blk.time_bn);
                                blk
                            })
                            .collect()
                    })
                    .collect();
                Self::BcResNet(m)
            }
            Self::LeakCnn(m) => Self::LeakCnn(m),
        }
    }

    /// Loads every tensor from `src` (names and shapes checked; nothing may be missing
    /// or left over).
    pub fn load_tensors(self, mut src: TensorSource, arch: &str) -> Result<Self, ModelError> {
        let m = match self {
            Self::DsCnn(m) => Self::DsCnn(m.load(&mut src)?),
            Self::BcResNet(m) => Self::BcResNet(m.load(&mut src)?),
            Self::LeakCnn(m) => Self::LeakCnn(m.load(&mut src)?),
        };
        src.finish(arch)?;
        Ok(m)
    }

    /// Sets the fixed input normalisation (per-bin mean and inverse std).
    pub fn set_input_norm(&mut self, mean: &[f32], scale: &[f32]) -> Result<(), ModelError> {
        let norm = match self {
            Self::DsCnn(m) => &mut m.input_norm,
            Self::BcResNet(m) => &mut m.input_norm,
            Self::LeakCnn(m) => &mut m.input_norm,
        };
        let [bins] = norm.mean.value().dims();
        if mean.len() != bins || scale.len() != bins {
            return Err(ModelError::ShapeMismatch {
                name: "input_norm".into(),
                expected: vec![bins],
                got: vec![mean.len(), scale.len()],
            });
        }
        let device = norm.mean.value().device();
        norm.set(mean, scale, &device);
        Ok(())
    }

    /// Number of trainable parameters (batch-norm statistics and input normalisation
    /// not counted).
    pub fn num_trainable(&self) -> Result<usize, ModelError> {
        Ok(self
            .named_tensors()?
            .iter()
            .filter(|t| is_trainable(&t.name))
            .map(NamedTensor::len)
            .sum())
    }

    /// The model as an encoded ONNX `ModelProto` (opset 17).
    pub fn to_onnx(&self, cfg: &ArchConfig) -> Result<Vec<u8>, ModelError> {
        let mut g = OnnxGraph::new();
        let logits = match self {
            Self::DsCnn(m) => {
                let x = m.write_onnx_convs(&mut g, INPUT)?;
                g.pooled_classifier(&x, &m.fc)?
            }
            Self::BcResNet(m) => {
                let x = m.write_onnx_convs(&mut g, INPUT)?;
                g.pooled_classifier(&x, &m.fc)?
            }
            Self::LeakCnn(m) => m.write_onnx(&mut g, INPUT)?,
        };
        let io = cfg.io();
        Ok(g.finish(&logits, io.frames, io.bins, io.classes, cfg.name()))
    }

    /// The streaming form, when `cfg` has one ([`ArchConfig::stream_geometry`]): the
    /// per-frame trunk (`features` `[1, T, bins]`, T symbolic → `frames` `[1, T', C]`) and
    /// the head (`pooled` `[N, width]`, what it reads of a window's frames
    /// ([`StreamGeometry::head_width`]) → `logits`, `probs`), as encoded ONNX graphs.
    pub fn to_onnx_stream(&self, cfg: &ArchConfig) -> Result<Option<StreamOnnx>, ModelError> {
        let Some(geometry) = cfg.stream_geometry() else {
            return Ok(None);
        };
        let io = cfg.io();
        let mut g = OnnxGraph::new();
        let mut head = OnnxGraph::new();
        // DS-CNN-S and BC-ResNet: frames averaged over frequency, the classifier over
        // their mean.
        let mean_head = |frames: String, head: &mut OnnxGraph, fc: &Linear| {
            let logits = head.linear("fc", POOLED, fc)?;
            Ok::<_, ModelError>((frames, fc.weight.val().dims()[0], logits))
        };
        let (frames, channels, logits) = match self {
            Self::DsCnn(m) => {
                let x = m.write_onnx_convs(&mut g, INPUT)?;
                mean_head(g.frame_vectors(&x), &mut head, &m.fc)?
            }
            Self::BcResNet(m) => {
                let x = m.write_onnx_convs(&mut g, INPUT)?;
                mean_head(g.frame_vectors(&x), &mut head, &m.fc)?
            }
            Self::LeakCnn(m) => {
                let x = m.write_onnx_convs(&mut g, INPUT)?;
                let (channels, bins) = m.frame_shape(geometry.window_vectors);
                let logits = m.write_onnx_head(&mut head, POOLED, geometry.window_vectors)?;
                (
                    g.flat_frame_vectors(&x, channels * bins),
                    channels * bins,
                    logits,
                )
            }
        };
        let trunk = g.finish_frames(&frames, io.bins, channels, cfg.name());
        let width = geometry.head_width(channels);
        let head = head.finish_head(&logits, width, io.classes, cfg.name());
        Ok(Some(StreamOnnx {
            frames: trunk,
            head,
        }))
    }
}
