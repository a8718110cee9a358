//! Golden test: for every architecture, burn's forward (inference mode) equals tract's
//! forward on the ONNX file hush writes, on random inputs and with every tensor
//! (weights, batch-norm statistics, input normalisation) randomised, max abs ≤ 1e-4.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use hush_models::arch::{ArchConfig, IoShape, KwsModel, ARCH_NAMES};
use hush_models::checkpoint::TensorSource;
use hush_models::step::logits;
use tract_onnx::prelude::*;

/// A small deterministic generator (xorshift64*), uniform in [-1, 1).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (v as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn randomised(model: KwsModel, arch: &str, rng: &mut Lcg) -> KwsModel {
    let mut tensors = model.named_tensors().unwrap();
    for t in &mut tensors {
        for v in &mut t.data {
            let r = rng.next();
            if t.name.ends_with("running_var") || t.name.ends_with(".scale") {
                *v = 0.5 + r.abs();
            } else if t.name.ends_with("running_mean") || t.name.ends_with(".mean") {
                *v = 0.3 * r;
            } else if t.name.ends_with(".gamma") {
                *v = 1.0 + 0.3 * r;
            } else if t.name.ends_with(".beta") {
                *v = 0.1 * r;
            } else {
                // Keep the weight scale (fan-in) of the initialiser, perturb the values.
                *v += 0.05 * r * v.abs().max(0.05);
            }
        }
    }
    model
        .load_tensors(
            TensorSource::new(std::path::Path::new("test"), tensors),
            arch,
        )
        .unwrap()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn golden(name: &str, io: IoShape) -> (f32, f32) {
    let device = Device::flex();
    device.seed(7);
    let cfg = ArchConfig::default_for(name, io).unwrap();
    let mut rng = Lcg(0x9E37_79B9_7F4A_7C15);
    let model = randomised(cfg.init(&device).unwrap(), name, &mut rng).valid();
    let batch = 3;
    let x: Vec<f32> = (0..batch * io.frames * io.bins)
        .map(|_| 3.0 * rng.next())
        .collect();
    let xt = Tensor::<3>::from_data(
        TensorData::new(x.clone(), [batch, io.frames, io.bins]),
        &device,
    );
    let burn_logits: Vec<f32> = logits(&model, xt).unwrap().concat();

    let onnx = model.to_onnx(&cfg).unwrap();
    let plan = tract_onnx::onnx()
        .model_for_read(&mut &onnx[..])
        .unwrap()
        .with_input_fact(0, f32::fact([batch, io.frames, io.bins]).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let input = tract_ndarray::Array3::from_shape_vec((batch, io.frames, io.bins), x)
        .unwrap()
        .into_tensor();
    let out = plan.run(tvec!(input.into_tvalue())).unwrap();
    let tract_logits: Vec<f32> = out[0]
        .to_plain_array_view::<f32>()
        .unwrap()
        .iter()
        .copied()
        .collect();
    let tract_probs: Vec<f32> = out[1]
        .to_plain_array_view::<f32>()
        .unwrap()
        .iter()
        .copied()
        .collect();
    // Probabilities from burn's logits.
    let burn_probs: Vec<f32> = burn_logits
        .chunks(io.classes)
        .flat_map(|row| {
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect();
    let spread = burn_logits.iter().map(|v| v.abs()).fold(0.0, f32::max);
    assert!(
        spread > 1e-3,
        "{name}: logits are all ~0; the test would be vacuous"
    );
    (
        max_abs(&burn_logits, &tract_logits),
        max_abs(&burn_probs, &tract_probs),
    )
}

#[test]
fn burn_equals_tract_for_every_architecture() {
    for name in ARCH_NAMES {
        for io in [
            IoShape {
                frames: 98,
                bins: 40,
                classes: 12,
            },
            IoShape {
                frames: 49,
                bins: 10,
                classes: 4,
            },
        ] {
            if name == "leak-cnn" && io.bins < 10 {
                continue;
            }
            let (dl, dp) = golden(name, io);
            println!("{name} {io:?}: max |Δlogits| = {dl:.3e}, max |Δprobs| = {dp:.3e}");
            assert!(dl <= 1e-4, "{name} {io:?}: logits differ by {dl}");
            assert!(dp <= 1e-4, "{name} {io:?}: probs differ by {dp}");
        }
    }
}
