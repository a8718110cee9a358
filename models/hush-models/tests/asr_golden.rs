//! Golden test for the CTC recogniser: burn's forward (inference mode) equals tract's on
//! the ONNX file hush writes (ONNX `GRU`, `linear_before_reset = 1`), on random inputs of
//! several lengths run through one plan with a symbolic frame count, with every tensor
//! randomised; max abs ≤ 1e-4. Also: the CTC loss refuses impossible batches with a clear
//! error, and an ASR package round-trips.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use burn::module::Module;
use burn::tensor::{Device, Tensor, TensorData};
use common::{tiny_ctc, tiny_ctc_at, Rng};
use hush_models::asr::{ctc_loss, AsrArchConfig, CtcBatch, CtcGru, Vocabulary};
use hush_models::checkpoint::TensorSource;
use hush_models::package::{load_asr_package, write_asr_package, AsrCard, ModelCard};
use tract_onnx::prelude::*;

fn config() -> AsrArchConfig {
    tiny_ctc(20)
}

fn randomised(model: CtcGru, rng: &mut Rng) -> CtcGru {
    let mut tensors = model.named_tensors().unwrap();
    for t in &mut tensors {
        for v in &mut t.data {
            let r = rng.next();
            if t.name.ends_with(".scale") {
                *v = 0.5 + r.abs();
            } else if t.name.ends_with(".mean") {
                *v = 0.3 * r;
            } else if t.name.ends_with(".bias") {
                *v = 0.2 * r;
            } else {
                // Every weight from the seeded stream, none from burn's initialiser: the
                // tests of this binary run in parallel on one global burn seed.
                *v = 0.4 * r;
            }
        }
    }
    model
        .load_tensors(
            TensorSource::new(std::path::Path::new("test"), tensors),
            "ctc-gru",
        )
        .unwrap()
}

#[test]
fn burn_forward_equals_tract_forward_for_several_lengths() {
    // Time subsampling 4, and 2 (the second conv at stride 1 in time: `ctc-gru-s2`).
    for cfg in [config(), tiny_ctc_at(20, 2)] {
        burn_equals_tract(&cfg);
    }
}

fn burn_equals_tract(cfg: &AsrArchConfig) {
    let device = Device::flex();
    device.seed(11);
    let cfg = cfg.clone();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let model = randomised(cfg.init(&device).unwrap(), &mut rng).valid();
    let onnx = model.to_onnx(&cfg).unwrap();
    // One plan, the frame count left symbolic as the file declares it.
    let plan = tract_onnx::onnx()
        .model_for_read(&mut &onnx[..])
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    for frames in [9usize, 37, 64] {
        let x: Vec<f32> = (0..frames * 20).map(|_| 3.0 * rng.next()).collect();
        let xt = Tensor::<3>::from_data(TensorData::new(x.clone(), [1, frames, 20]), &device);
        let burn_out: Vec<f32> = model.forward(xt).into_data().try_to_vec::<f32>().unwrap();
        let steps = cfg.output_steps(frames);
        assert_eq!(burn_out.len(), steps * 29);
        let input = tract_ndarray::Array3::from_shape_vec((1, frames, 20), x)
            .unwrap()
            .into_tensor();
        let out = plan.run(tvec!(input.into_tvalue())).unwrap();
        assert_eq!(out[0].shape(), &[1, steps, 29]);
        let tract_out: Vec<f32> = out[0]
            .to_plain_array_view::<f32>()
            .unwrap()
            .iter()
            .copied()
            .collect();
        let diff = burn_out
            .iter()
            .zip(&tract_out)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        // Non-vacuous: the outputs differ across symbols and steps.
        let spread = burn_out.iter().copied().fold(f32::NEG_INFINITY, f32::max)
            - burn_out.iter().copied().fold(f32::INFINITY, f32::min);
        println!(
            "ctc-gru ×{} frames {frames}: max abs diff {diff:.2e}, spread {spread:.2}",
            cfg.subsampling()
        );
        assert!(spread > 0.5, "log-probs nearly constant ({spread})");
        assert!(diff <= 1e-4, "frames {frames}: max abs diff {diff}");
    }
}

#[test]
fn ctc_loss_refuses_impossible_batches() {
    let device = Device::flex().autodiff();
    let model = config().init(&device).unwrap();
    let v = Vocabulary::characters();
    let ok = CtcBatch {
        features: vec![0.1; 2 * 40 * 20],
        lengths: vec![40, 24],
        labels: vec![v.encode("go").unwrap(), v.encode("on").unwrap()],
        frames: 40,
        bins: 20,
        leading_blanks: Vec::new(),
    };
    let loss = ctc_loss(&model, &ok, &device).unwrap();
    let value: f32 = loss.into_data().try_to_vec::<f32>().unwrap()[0];
    assert!(value.is_finite() && value > 0.0, "{value}");
    // "hello" needs 6 steps (l, l need a blank between); 20 frames give 5.
    let mut bad = ok.clone();
    bad.labels[1] = v.encode("hello").unwrap();
    bad.lengths[1] = 20;
    let e = ctc_loss(&model, &bad, &device).unwrap_err().to_string();
    assert!(
        e.contains("need ≥ 6 output steps") && e.contains("give 5"),
        "{e}"
    );
    let mut bad = ok.clone();
    bad.labels[0].clear();
    assert!(ctc_loss(&model, &bad, &device)
        .unwrap_err()
        .to_string()
        .contains("empty transcript"));
    let mut bad = ok;
    bad.lengths[0] = 41;
    assert!(ctc_loss(&model, &bad, &device).is_err());
}

#[test]
fn asr_package_round_trips_and_kws_reader_names_the_task() {
    let device = Device::flex();
    let cfg = config();
    let mut rng = Rng(5);
    let model = randomised(cfg.init(&device).unwrap(), &mut rng);
    let card = AsrCard::new(
        cfg.clone(),
        serde_json::json!({"any": "features"}),
        &Vocabulary::characters(),
        &model,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_asr_package(dir.path(), &card, &model).unwrap();
    for f in ["model.json", "weights.safetensors", "model.onnx"] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
    let (back, loaded) = load_asr_package(dir.path(), &device).unwrap();
    assert_eq!(back, card);
    assert_eq!(
        loaded.named_tensors().unwrap(),
        model.named_tensors().unwrap()
    );
    let e = ModelCard::read(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("`asr` model") && e.contains("needs a `kws` model"),
        "{e}"
    );
}
