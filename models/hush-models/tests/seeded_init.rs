//! A model initialised from a seed (`ArchConfig::init_seeded`) has that seed's weights
//! whatever other threads draw from burn's one process-wide random state meanwhile. (A
//! test binary's tests run on parallel threads: a stream-form test once failed on weights
//! drawn while another test seeded the state.)
#![allow(clippy::unwrap_used)] // a failure is a test failure

use std::sync::atomic::{AtomicBool, Ordering};

use burn::tensor::Device;
use hush_models::arch::{ArchConfig, IoShape};

const IO: IoShape = IoShape {
    frames: 20,
    bins: 10,
    classes: 4,
};

fn weights(arch: &ArchConfig, device: &Device, seed: u64) -> Vec<Vec<f32>> {
    let model = arch.init_seeded(device, seed).unwrap();
    model
        .named_tensors()
        .unwrap()
        .into_iter()
        .map(|t| t.data)
        .collect()
}

#[test]
fn seeded_weights_do_not_depend_on_other_threads() {
    let arch = ArchConfig::default_for("ds-cnn-s", IO).unwrap();
    let device = Device::flex();
    let want = weights(&arch, &device, 11);
    assert_ne!(
        want,
        weights(&arch, &device, 12),
        "the seed chooses the weights"
    );
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // Two threads seed the state with other seeds and draw, without pause.
        for seed in [1, 2] {
            let (arch, device, stop) = (&arch, &device, &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    weights(arch, device, seed);
                }
            });
        }
        for round in 0..30 {
            let got = weights(&arch, &device, 11);
            if got != want {
                stop.store(true, Ordering::Relaxed);
                panic!("round {round}: seed 11 gave other weights while other threads drew");
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
}
