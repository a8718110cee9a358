//! Golden test: for every architecture, burn's forward (inference mode) equals tract's
//! forward on the ONNX file hush writes, on random inputs and with every tensor
//! (weights, batch-norm statistics, input normalisation) from a seeded stream, max abs ≤
//! 1e-4.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use common::{max_abs, onnx_typed, run_burn_kws, run_tract, seeded_kws, spread, Rng};
use hush_models::arch::{ArchConfig, IoShape, ARCH_NAMES};

fn golden(name: &str, io: IoShape) -> (f32, f32) {
    let cfg = ArchConfig::default_for(name, io).unwrap();
    let model = seeded_kws(&cfg, 0x9E37_79B9_7F4A_7C15);
    let shape = [3, io.frames, io.bins];
    let x = Rng(7).values(shape.iter().product(), 3.0);
    let burn = run_burn_kws(&model, shape, &x);
    let tract = run_tract(onnx_typed(&model.to_onnx(&cfg).unwrap()), shape, &x);
    assert!(
        spread(&burn[0]) > 1e-3,
        "{name}: logits are all alike; the test would be vacuous"
    );
    (max_abs(&burn[0], &tract[0]), max_abs(&burn[1], &tract[1]))
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
