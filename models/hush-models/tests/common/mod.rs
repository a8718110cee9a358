//! Shared by the golden, export, onnxruntime, per-example and cohort tests: one small
//! model of each architecture, models whose every tensor comes from a seeded stream (none
//! from burn's initialiser, whose global seed the tests of one binary share while running
//! in parallel), and output comparison.

// Not every test binary uses every helper.
#![allow(dead_code)]

use hush_models::arch::{
    ArchConfig, BcResNetConfig, DsCnnConfig, IoShape, KwsModel, LeakCnnConfig,
};
use hush_models::asr::{AsrArchConfig, CtcGru};
use hush_models::checkpoint::{NamedTensor, TensorSource};

/// xorshift64*, uniform in [-1, 1).
pub struct Rng(pub u64);

impl Rng {
    /// The next value, uniform in [-1, 1).
    pub fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (v as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// `n` values, each `scale ×` [`Rng::next`].
    pub fn values(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| scale * self.next()).collect()
    }
}

/// Fills every tensor from `rng` by its role: batch-norm statistics and input
/// normalisation near their usual values, weights uniform with variance 1 / fan-in (burn
/// keeps linear weights `[in, out]`, conv weights `[out, in / groups, kh, kw]`).
pub fn fill(tensors: &mut [NamedTensor], rng: &mut Rng) {
    for t in tensors {
        let fan_in = match t.shape.len() {
            2 => t.shape[0],
            n if n > 2 => t.shape[1..].iter().product(),
            _ => 0,
        };
        let weight_scale = (3.0 / fan_in.max(1) as f32).sqrt();
        let name = t.name.clone();
        for v in &mut t.data {
            let r = rng.next();
            *v = if name.ends_with("running_var") || name.ends_with(".scale") {
                0.5 + r.abs()
            } else if name.ends_with("running_mean") || name.ends_with(".mean") {
                0.3 * r
            } else if name.ends_with(".gamma") {
                1.0 + 0.3 * r
            } else if fan_in > 0 {
                weight_scale * r
            } else {
                0.1 * r
            };
        }
    }
}

/// One small model of each keyword-spotting architecture for `io`, with `dropout` where
/// the architecture has one (BC-ResNet has none).
pub fn small_archs(io: IoShape, dropout: f64) -> Vec<ArchConfig> {
    vec![
        ArchConfig::DsCnnS(DsCnnConfig {
            channels: 8,
            blocks: 1,
            dropout,
            ..DsCnnConfig::small(io)
        }),
        ArchConfig::BcResNet(BcResNetConfig {
            width: 1,
            blocks: [1, 1, 1, 1],
            head_channels: 16,
            ..BcResNetConfig::new(io)
        }),
        ArchConfig::LeakCnn(LeakCnnConfig {
            channels: [4, 8],
            hidden: 16,
            dropout,
            ..LeakCnnConfig::new(io)
        }),
    ]
}

/// `tensors` refilled from the stream seeded with `seed`, ready to load.
fn seeded_source(mut tensors: Vec<NamedTensor>, seed: u64) -> TensorSource {
    fill(&mut tensors, &mut Rng(seed));
    TensorSource::new(std::path::Path::new("seeded"), tensors)
}

/// A keyword spotter of `cfg` with every tensor from the stream seeded with `seed`.
pub fn seeded_kws(cfg: &ArchConfig, seed: u64) -> KwsModel {
    seeded_kws_on(cfg, seed, &burn::tensor::Device::flex())
}

/// [`seeded_kws`] on `device` (an autodiff device gives a model to train).
pub fn seeded_kws_on(cfg: &ArchConfig, seed: u64, device: &burn::tensor::Device) -> KwsModel {
    let model = cfg.init(device).unwrap();
    let src = seeded_source(model.named_tensors().unwrap(), seed);
    model.load_tensors(src, cfg.name()).unwrap()
}

/// A CTC recogniser of `cfg` with every tensor from the stream seeded with `seed`.
pub fn seeded_ctc(cfg: &AsrArchConfig, seed: u64) -> CtcGru {
    let model = cfg.init(&burn::tensor::Device::flex()).unwrap();
    let src = seeded_source(model.named_tensors().unwrap(), seed);
    model.load_tensors(src, cfg.name()).unwrap()
}

/// A tiny `ctc-gru` over `bins` values per frame and hush's 29 characters: 4 channels,
/// d_model 16, two GRU layers of 12, no dropout, time subsampling 4.
pub fn tiny_ctc(bins: usize) -> AsrArchConfig {
    tiny_ctc_at(bins, 4)
}

/// [`tiny_ctc`] at time subsampling `subsampling` (2: `ctc-gru-s2`'s layout).
pub fn tiny_ctc_at(bins: usize, subsampling: usize) -> AsrArchConfig {
    AsrArchConfig::CtcGru(hush_models::asr::CtcGruConfig {
        bins,
        vocab: 29,
        channels: 4,
        d_model: 16,
        hidden: 12,
        layers: 2,
        dropout: 0.0,
        subsampling,
    })
}

/// Largest absolute difference of two equally long slices.
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "outputs of different lengths");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Largest value minus smallest: a check that outputs are not all alike.
pub fn spread(a: &[f32]) -> f32 {
    a.iter().copied().fold(f32::NEG_INFINITY, f32::max)
        - a.iter().copied().fold(f32::INFINITY, f32::min)
}

/// tract's typed model of an encoded ONNX file.
pub fn onnx_typed(bytes: &[u8]) -> tract_onnx::prelude::TypedModel {
    use tract_onnx::prelude::*;
    tract_onnx::onnx()
        .model_for_read(&mut &bytes[..])
        .unwrap()
        .into_typed()
        .unwrap()
}

/// Every output of `model` (optimised by tract) on `x` of shape `[batch, frames, bins]`,
/// flattened, in output order.
pub fn run_tract(
    model: tract_onnx::prelude::TypedModel,
    shape: [usize; 3],
    x: &[f32],
) -> Vec<Vec<f32>> {
    use tract_onnx::prelude::*;
    let plan = model.into_optimized().unwrap().into_runnable().unwrap();
    let input = tract_ndarray::Array3::from_shape_vec((shape[0], shape[1], shape[2]), x.to_vec())
        .unwrap()
        .into_tensor();
    flat_outputs(plan.run(tvec!(input.into_tvalue())).unwrap())
}

/// A tract run's outputs, each flattened to f32s.
pub fn flat_outputs(
    outputs: tract_onnx::prelude::TVec<tract_onnx::prelude::TValue>,
) -> Vec<Vec<f32>> {
    outputs
        .iter()
        .map(|t| {
            t.to_plain_array_view::<f32>()
                .unwrap()
                .iter()
                .copied()
                .collect()
        })
        .collect()
}

/// burn's outputs on `x` `[batch, frames, bins]` in the order of the ONNX file's outputs:
/// a keyword spotter's logits and probabilities.
pub fn run_burn_kws(model: &KwsModel, shape: [usize; 3], x: &[f32]) -> Vec<Vec<f32>> {
    use burn::module::Module;
    use burn::tensor::{Tensor, TensorData};
    let device = burn::tensor::Device::flex();
    let xt = Tensor::<3>::from_data(TensorData::new(x.to_vec(), shape), &device);
    let logits: Vec<Vec<f32>> = hush_models::step::logits(&model.clone().valid(), xt).unwrap();
    let probs = logits
        .iter()
        .flat_map(|row| {
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect();
    vec![logits.concat(), probs]
}

/// burn's log-probabilities of a CTC recogniser on `x` `[1, frames, bins]`.
pub fn run_burn_ctc(model: &CtcGru, shape: [usize; 3], x: &[f32]) -> Vec<Vec<f32>> {
    use burn::module::Module;
    use burn::tensor::{Tensor, TensorData};
    let device = burn::tensor::Device::flex();
    let xt = Tensor::<3>::from_data(TensorData::new(x.to_vec(), shape), &device);
    vec![model
        .clone()
        .valid()
        .forward(xt)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap()]
}
