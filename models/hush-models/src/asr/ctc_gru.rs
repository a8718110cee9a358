//! `ctc-gru`: a small streaming-friendly CTC acoustic model over characters.
//!
//! ```text
//! features [B, T, bins] → input norm → conv 3×3 stride 2 (32) → ReLU
//!   → conv 3×3 stride (s/2, 2) (32) → ReLU → [B, ⌈T/s⌉, 32·F'] → linear d_model
//!   → GRU × layers (unidirectional) → linear vocab → log-softmax
//! ```
//!
//! `s` is the time subsampling ([`CtcGruConfig::subsampling`]): 4 (the default: one step
//! per 40 ms) or 2 (`ctc-gru-s2`: one per 20 ms, for speech dense in characters — CTC
//! needs at least one step per character, two for a doubled letter). Both convs pad time
//! on the left only (two frames), so an output step sees only past and present frames and
//! `⌈T/s⌉` steps come out of `T` frames ([`CtcGru::output_steps`]); the frequency axis is
//! not padded. Nothing looks ahead, so the model can run on a stream.
//!
//! The GRU is burn's [`Gru`] (`reset_after = true`, the ONNX `linear_before_reset = 1`
//! form), run here by [`gru_forward`], which computes every step's input projection in one
//! product and keeps burn's equations (checked against [`Gru::forward`] in a test).
//!
//! The encoder ([`CtcGru::encode`]) is every layer but `out`; BEST-RQ pretrains it
//! ([`super::bestrq`]) and CTC fine-tuning loads it ([`ENCODER_OUTPUT`] marks the rest).
//!
//! Tensor names: `input_norm.*`, `conv1.*`, `conv2.*`, `proj.*`,
//! `gru.{l}.{update,reset,new}.{input,hidden}.{weight,bias}`, `out.*`.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::gru::{Gru, GruConfig};
use burn::nn::{Dropout, DropoutConfig, GateController, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::{log_softmax, relu, sigmoid, tanh};
use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::arch::ds_cnn::input_norm_onnx;
use crate::arch::layers::{
    load_conv, load_linear, named, visit_conv, visit_linear, InputNorm, TensorVisitor,
};
use crate::arch::onnx::OnnxGraph;
use crate::checkpoint::{NamedTensor, TensorSource};
use crate::ModelError;

/// Time frames per output step of the standard sizes (and of BEST-RQ's quantizer).
pub const SUBSAMPLING: usize = 4;

/// The time subsamplings a `ctc-gru` can have.
pub const SUBSAMPLINGS: [usize; 2] = [2, 4];

/// Prefix of the tensors outside the encoder: the output layer over the vocabulary.
pub const ENCODER_OUTPUT: &str = "out.";

/// Whether tensor `name` belongs to the encoder (every layer but the output layer).
pub fn is_encoder_tensor(name: &str) -> bool {
    !name.starts_with(ENCODER_OUTPUT)
}

/// Output steps for `frames` input frames at the default subsampling: `⌈frames / 4⌉`.
pub fn output_steps(frames: usize) -> usize {
    output_steps_at(frames, SUBSAMPLING)
}

/// Output steps for `frames` input frames at time subsampling `subsampling` (2 or 4):
/// each stride-2 conv halves the count, rounding up.
pub fn output_steps_at(frames: usize, subsampling: usize) -> usize {
    if subsampling == 4 {
        frames.div_ceil(2).div_ceil(2)
    } else {
        frames.div_ceil(2)
    }
}

fn default_subsampling() -> usize {
    SUBSAMPLING
}

/// `ctc-gru` options.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CtcGruConfig {
    /// Values per input frame (mel bins).
    pub bins: usize,
    /// Output symbols, blank included.
    pub vocab: usize,
    /// Channels of both subsampling convs.
    pub channels: usize,
    /// Width of the projection into the GRU.
    pub d_model: usize,
    /// GRU hidden size.
    pub hidden: usize,
    /// GRU layers.
    pub layers: usize,
    /// Dropout between layers (training only).
    pub dropout: f64,
    /// Input frames per output step in time: 4 or 2 ([`SUBSAMPLINGS`]); the second conv's
    /// time stride is `subsampling / 2`. Absent from older `model.json` files: 4.
    #[serde(default = "default_subsampling")]
    pub subsampling: usize,
}

impl CtcGruConfig {
    /// The default size (1 345 981 trainable parameters over 80 bins and 29 symbols): 32
    /// channels, d_model 256, 2 GRU layers of 320.
    pub fn standard(bins: usize, vocab: usize) -> Self {
        Self {
            bins,
            vocab,
            channels: 32,
            d_model: 256,
            hidden: 320,
            layers: 2,
            dropout: 0.1,
            subsampling: SUBSAMPLING,
        }
    }

    /// [`Self::standard`] at time subsampling 2 (`ctc-gru-s2`): the same tensors, twice
    /// the GRU steps.
    pub fn standard_s2(bins: usize, vocab: usize) -> Self {
        Self {
            subsampling: 2,
            ..Self::standard(bins, vocab)
        }
    }

    /// A small size for quick runs and tests: 8 channels, d_model 64, one GRU layer of 96.
    pub fn small(bins: usize, vocab: usize) -> Self {
        Self {
            bins,
            vocab,
            channels: 8,
            d_model: 64,
            hidden: 96,
            layers: 1,
            dropout: 0.0,
            subsampling: SUBSAMPLING,
        }
    }

    /// Frequency values left after both convs.
    pub fn freq_out(&self) -> usize {
        let step = |n: usize| n.saturating_sub(3) / 2 + 1;
        if self.bins < 7 {
            0
        } else {
            step(step(self.bins))
        }
    }

    /// Builds the model with fresh weights.
    pub fn init(&self, device: &Device) -> Result<CtcGru, ModelError> {
        let bad = |option: &str, reason: &str| Err(ModelError::config("ctc-gru", option, reason));
        if self.freq_out() == 0 {
            return bad(
                "bins",
                "at least 7 values per frame for two 3×3 stride-2 convs",
            );
        }
        if self.vocab < 2 {
            return bad("vocab", "at least 2 symbols (blank and one more)");
        }
        if self.channels == 0 || self.d_model == 0 || self.hidden == 0 || self.layers == 0 {
            return bad("channels/d_model/hidden/layers", "sizes must be > 0");
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad("dropout", "in [0, 1)");
        }
        if !SUBSAMPLINGS.contains(&self.subsampling) {
            return bad("subsampling", "2 or 4 input frames per output step");
        }
        let conv = |c_in, time_stride| {
            Conv2dConfig::new([c_in, self.channels], [3, 3])
                .with_stride([time_stride, 2])
                .with_padding(PaddingConfig2d::Explicit(2, 0, 0, 0))
                .init(device)
        };
        Ok(CtcGru {
            input_norm: InputNorm::identity(self.bins, device),
            conv1: conv(1, 2),
            conv2: conv(self.channels, self.subsampling / 2),
            proj: LinearConfig::new(self.channels * self.freq_out(), self.d_model).init(device),
            gru: (0..self.layers)
                .map(|l| {
                    let d_in = if l == 0 { self.d_model } else { self.hidden };
                    GruConfig::new(d_in, self.hidden, true).init(device)
                })
                .collect(),
            dropout: DropoutConfig::new(self.dropout).init(),
            out: LinearConfig::new(self.hidden, self.vocab).init(device),
            subsampling: self.subsampling,
        })
    }
}

/// The `ctc-gru` model.
#[derive(Module, Debug)]
pub struct CtcGru {
    /// Fixed input normalisation.
    pub input_norm: InputNorm,
    /// First subsampling conv (3×3, stride 2, causal in time).
    pub conv1: Conv2d,
    /// Second subsampling conv.
    pub conv2: Conv2d,
    /// Projection into the GRU.
    pub proj: Linear,
    /// Unidirectional GRU layers.
    pub gru: Vec<Gru>,
    /// Dropout between layers.
    pub dropout: Dropout,
    /// Output layer over the vocabulary.
    pub out: Linear,
    /// Input frames per output step in time (2 or 4).
    pub subsampling: usize,
}

/// Runs burn's [`Gru`] over `x` `[B, T, in]` from a zero state, with burn's equations
/// (`reset_after`): `z = σ(x·Wz + bz + h·Uz + cz)`, `r = σ(x·Wr + br + h·Ur + cr)`,
/// `n = tanh(x·Wn + bn + r ⊙ (h·Un + cn))`, `h' = (1 − z) ⊙ n + z ⊙ h`.
/// Returns every step's state, `[B, T, H]`.
pub fn gru_forward(g: &Gru, x: Tensor<3>) -> Tensor<3> {
    let [b, t, d] = x.dims();
    let h = g.d_hidden;
    let device = x.device();
    let gates = [&g.update_gate, &g.reset_gate, &g.new_gate];
    let cat_w = |f: &dyn Fn(usize) -> Tensor<2>| Tensor::cat((0..3).map(f).collect(), 1);
    let cat_b = |f: &dyn Fn(usize) -> Tensor<1>| Tensor::cat((0..3).map(f).collect(), 0);
    let bias = |l: &Linear| match &l.bias {
        Some(b) => b.val(),
        None => Tensor::zeros([h], &device),
    };
    let w_in = cat_w(&|i| gates[i].input_transform.weight.val());
    let b_in = cat_b(&|i| bias(&gates[i].input_transform));
    let w_hid = cat_w(&|i| gates[i].hidden_transform.weight.val());
    let b_hid = cat_b(&|i| bias(&gates[i].hidden_transform)).reshape([1, 3 * h]);
    // Every step's input projection at once: [B, T, 3H].
    let xp = (x.reshape([b * t, d]).matmul(w_in) + b_in.reshape([1, 3 * h])).reshape([b, t, 3 * h]);
    let mut state: Tensor<2> = Tensor::zeros([b, h], &device);
    let mut outs = Vec::with_capacity(t);
    for step in 0..t {
        let xs = xp
            .clone()
            .slice([0..b, step..step + 1, 0..3 * h])
            .reshape([b, 3 * h]);
        let hs = state.clone().matmul(w_hid.clone()) + b_hid.clone();
        let part = |m: &Tensor<2>, i: usize| m.clone().slice([0..b, i * h..(i + 1) * h]);
        let z = sigmoid(part(&xs, 0) + part(&hs, 0));
        let r = sigmoid(part(&xs, 1) + part(&hs, 1));
        let n = tanh(part(&xs, 2) + r * part(&hs, 2));
        state = n.clone() + z * (state - n);
        outs.push(state.clone());
    }
    Tensor::stack(outs, 1)
}

const GATES: [&str; 3] = ["update", "reset", "new"];

fn gate(g: &Gru, i: usize) -> &GateController {
    [&g.update_gate, &g.reset_gate, &g.new_gate][i]
}

impl CtcGru {
    /// Output steps for `frames` input frames: `⌈frames / subsampling⌉`.
    pub fn output_steps(&self, frames: usize) -> usize {
        output_steps_at(frames, self.subsampling)
    }

    /// `[B, T, bins]` features → `[B, ⌈T/s⌉, vocab]` per-step log-probabilities.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        log_softmax(self.scores(x), 2)
    }

    /// [`CtcGru::forward`] before the log-softmax.
    pub fn scores(&self, x: Tensor<3>) -> Tensor<3> {
        let x = self.dropout.forward(self.encode(x));
        let [b, t2, h] = x.dims();
        let v = self.out.weight.dims()[1];
        self.out.forward(x.reshape([b * t2, h])).reshape([b, t2, v])
    }

    /// The encoder: every layer but the output layer. `[B, T, bins]` features →
    /// `[B, ⌈T/s⌉, hidden]` states of the last GRU layer (what BEST-RQ pretrains).
    pub fn encode(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, t, f] = x.dims();
        let x = self.input_norm.forward(x).reshape([b, 1, t, f]);
        let x = relu(self.conv1.forward(x));
        let x = relu(self.conv2.forward(x));
        let [b, c, t2, f2] = x.dims();
        let x = x.swap_dims(1, 2).reshape([b * t2, c * f2]);
        let d = self.proj.weight.dims()[1];
        let mut x = self.proj.forward(x).reshape([b, t2, d]);
        for g in &self.gru {
            x = gru_forward(g, self.dropout.forward(x));
        }
        x
    }

    /// Every tensor in `weights.safetensors` order, visited by `v`.
    pub fn visit<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError> {
        self.input_norm.visit("input_norm", v)?;
        visit_conv("conv1", &self.conv1, v)?;
        visit_conv("conv2", &self.conv2, v)?;
        visit_linear("proj", &self.proj, v)?;
        for (l, g) in self.gru.iter().enumerate() {
            for (i, name) in GATES.iter().enumerate() {
                let gc = gate(g, i);
                visit_linear(&format!("gru.{l}.{name}.input"), &gc.input_transform, v)?;
                visit_linear(&format!("gru.{l}.{name}.hidden"), &gc.hidden_transform, v)?;
            }
        }
        visit_linear("out", &self.out, v)
    }

    /// Loads every tensor from `src` (names and shapes checked).
    pub fn load(mut self, src: &mut TensorSource) -> Result<Self, ModelError> {
        self.input_norm = self.input_norm.load("input_norm", src)?;
        self.conv1 = load_conv(self.conv1, "conv1", src)?;
        self.conv2 = load_conv(self.conv2, "conv2", src)?;
        self.proj = load_linear(self.proj, "proj", src)?;
        let mut layers = Vec::with_capacity(self.gru.len());
        for (l, g) in std::mem::take(&mut self.gru).into_iter().enumerate() {
            let load = |gc: GateController, name: &str, src: &mut TensorSource| {
                let base = format!("gru.{l}.{name}");
                Ok::<_, ModelError>(GateController {
                    input_transform: load_linear(
                        gc.input_transform,
                        &format!("{base}.input"),
                        src,
                    )?,
                    hidden_transform: load_linear(
                        gc.hidden_transform,
                        &format!("{base}.hidden"),
                        src,
                    )?,
                })
            };
            let update_gate = load(g.update_gate, GATES[0], src)?;
            let reset_gate = load(g.reset_gate, GATES[1], src)?;
            let new_gate = load(g.new_gate, GATES[2], src)?;
            layers.push(Gru {
                update_gate,
                reset_gate,
                new_gate,
                ..g
            });
        }
        self.gru = layers;
        self.out = load_linear(self.out, "out", src)?;
        Ok(self)
    }

    /// Lays the model out in `g` from the input `input`; returns the pre-softmax scores
    /// `[1, steps, vocab]`.
    pub fn write_onnx(&self, g: &mut OnnxGraph, input: &str) -> Result<String, ModelError> {
        let x = input_norm_onnx(g, &self.input_norm, input)?;
        let x = g.unsqueeze(&x, &[1]);
        let x = g.conv("conv1", &x, &self.conv1)?;
        let x = g.relu(&x);
        let x = g.conv("conv2", &x, &self.conv2)?;
        let x = g.relu(&x);
        // [1, C, T', F'] → [1, T', C, F'] → [1, T', C·F'].
        let x = g.transpose(&x, &[0, 2, 1, 3]);
        let x = g.reshape(&x, &[0, 0, -1]);
        let x = g.linear_nd("proj", &x, &self.proj)?;
        // ONNX GRU is sequence-first: [T', 1, D].
        let mut x = g.transpose(&x, &[1, 0, 2]);
        for (l, gru) in self.gru.iter().enumerate() {
            let y = g.gru(
                &format!("gru.{l}"),
                &x,
                onnx_gru_weights(gru, l)?,
                gru.d_hidden,
                true,
            )?;
            // Y [T', dirs = 1, 1, H] → [T', 1, H].
            x = g.squeeze(&y, &[1]);
        }
        let x = g.transpose(&x, &[1, 0, 2]);
        g.linear_nd("out", &x, &self.out)
    }
}

/// ONNX `W` `[1, 3H, in]`, `R` `[1, 3H, H]`, `B` `[1, 6H]` of a burn GRU, gates in ONNX
/// order z (update), r (reset), h (new); burn keeps each gate's weight as `[in, H]`, ONNX
/// as its transpose.
fn onnx_gru_weights(g: &Gru, layer: usize) -> Result<[NamedTensor; 3], ModelError> {
    let h = g.d_hidden;
    let mut w = Vec::new();
    let mut r = Vec::new();
    let mut bw = Vec::new();
    let mut br = Vec::new();
    let mut d_in = 0;
    for (i, name) in GATES.iter().enumerate() {
        let gc = gate(g, i);
        let base = format!("gru.{layer}.{name}");
        for (lin, out, bias, part) in [
            (&gc.input_transform, &mut w, &mut bw, "input"),
            (&gc.hidden_transform, &mut r, &mut br, "hidden"),
        ] {
            let t = named(&format!("{base}.{part}.weight"), lin.weight.val())?;
            let (rows, cols) = (t.shape[0], t.shape[1]);
            if part == "input" {
                d_in = rows;
            }
            // Transpose [in, H] → [H, in], appended as this gate's row block.
            for j in 0..cols {
                out.extend((0..rows).map(|k| t.data[k * cols + j]));
            }
            match &lin.bias {
                Some(b) => bias.extend(named(&format!("{base}.{part}.bias"), b.val())?.data),
                None => bias.extend(std::iter::repeat_n(0.0, h)),
            }
        }
    }
    bw.extend(br);
    Ok([
        NamedTensor::new("W", vec![1, 3 * h, d_in], w)?,
        NamedTensor::new("R", vec![1, 3 * h, h], r)?,
        NamedTensor::new("B", vec![1, 6 * h], bw)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::TensorData;

    #[test]
    fn gru_forward_matches_burns_gru() {
        let device = Device::flex();
        device.seed(3);
        let g = GruConfig::new(5, 7, true).init(&device);
        let x: Vec<f32> = (0..2 * 6 * 5)
            .map(|i| ((i * 37 % 11) as f32 - 5.0) / 4.0)
            .collect();
        let x = Tensor::<3>::from_data(TensorData::new(x, [2, 6, 5]), &device);
        let ours = gru_forward(&g, x.clone())
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let burns = g.forward(x, None).into_data().try_to_vec::<f32>().unwrap();
        let diff = ours
            .iter()
            .zip(&burns)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff < 1e-5, "max abs diff {diff}");
        assert!(burns.iter().any(|v| v.abs() > 1e-2));
    }

    #[test]
    fn output_steps_follow_the_convs() {
        let device = Device::flex();
        let m = CtcGruConfig::small(20, 29).init(&device).unwrap();
        for t in [1usize, 4, 5, 17, 40] {
            let y = m.forward(Tensor::zeros([1, t, 20], &device));
            assert_eq!(y.dims(), [1, output_steps(t), 29], "t = {t}");
        }
        assert_eq!(output_steps(17), 5);
        let mut s2 = CtcGruConfig::small(20, 29);
        s2.subsampling = 2;
        let m = s2.init(&device).unwrap();
        for t in [1usize, 4, 5, 17, 40] {
            let y = m.forward(Tensor::zeros([1, t, 20], &device));
            assert_eq!(y.dims(), [1, t.div_ceil(2), 29], "t = {t}");
            assert_eq!(m.output_steps(t), t.div_ceil(2));
        }
    }

    #[test]
    fn standard_size_counts_by_hand() {
        let m = CtcGruConfig::standard(80, 29)
            .init(&Device::flex())
            .unwrap();
        // conv1 32·9 + 32; conv2 32·32·9 + 32; 80 bins → 39 → 19 after the convs, so proj
        // (32·19)·256 + 256; each GRU layer 3·(in·320 + 320 + 320·320 + 320), in = 256
        // then 320; out 320·29 + 29.
        let gru = |d_in: usize| 3 * (d_in * 320 + 320 + 320 * 320 + 320);
        let expected = (32 * 9 + 32)
            + (32 * 32 * 9 + 32)
            + (32 * 19 * 256 + 256)
            + gru(256)
            + gru(320)
            + (320 * 29 + 29);
        assert_eq!(m.num_trainable().unwrap(), expected);
        assert_eq!(expected, 1_345_981);
    }

    #[test]
    fn bad_configs_are_errors() {
        let device = Device::flex();
        assert!(CtcGruConfig::small(5, 29).init(&device).is_err());
        assert!(CtcGruConfig::small(20, 1).init(&device).is_err());
        let mut c = CtcGruConfig::small(20, 29);
        c.layers = 0;
        assert!(c.init(&device).is_err());
        let mut c = CtcGruConfig::small(20, 29);
        c.subsampling = 3;
        let err = c.init(&device).unwrap_err().to_string();
        assert!(err.contains("subsampling"), "{err}");
    }
}
