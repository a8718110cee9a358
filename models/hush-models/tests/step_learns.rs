//! The shared training step learns: a small DS-CNN overfits 16 random examples.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use burn::optim::AdamWConfig;
use burn::tensor::Device;
use hush_models::arch::{ArchConfig, DsCnnConfig, IoShape};
use hush_models::step::{apply_grads, loss_and_grads, Batch};

#[test]
fn ds_cnn_overfits_a_small_batch() {
    let io = IoShape {
        frames: 20,
        bins: 10,
        classes: 4,
    };
    let cfg = ArchConfig::DsCnnS(DsCnnConfig {
        channels: 16,
        blocks: 1,
        dropout: 0.0,
        ..DsCnnConfig::small(io)
    });
    let device = Device::flex().autodiff();
    device.seed(5);
    let mut model = cfg.init(&device).unwrap();
    let mut opt = AdamWConfig::new().init();
    let b = 16;
    let mut state = 12345u64;
    let mut features = Vec::new();
    for _ in 0..b * io.frames * io.bins {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        features.push(((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0);
    }
    let mut targets = vec![0f32; b * io.classes];
    for i in 0..b {
        targets[i * io.classes + i % io.classes] = 1.0;
    }
    let batch = Batch {
        features,
        targets,
        batch: b,
        frames: io.frames,
        bins: io.bins,
        classes: io.classes,
    };
    let (first, _) = loss_and_grads(&model, &batch, &device).unwrap();
    let mut last = first;
    for _ in 0..60 {
        let (loss, grads) = loss_and_grads(&model, &batch, &device).unwrap();
        model = apply_grads(&mut opt, 1e-2, model, grads);
        last = loss;
    }
    println!("loss {first:.3} → {last:.3}");
    assert!(last < 0.3 * first, "loss {first} → {last}");
}
