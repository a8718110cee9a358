//! Parameter counts of the default architectures over `[98, 40]` input and 12 classes,
//! against counts worked out by hand from the layer shapes; checkpoints round-trip.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use burn::tensor::Device;
use hush_models::arch::{ArchConfig, IoShape};
use hush_models::checkpoint::{load_safetensors, save_safetensors, TensorSource};

const IO: IoShape = IoShape {
    frames: 98,
    bins: 40,
    classes: 12,
};

fn trainable(name: &str) -> usize {
    let m = ArchConfig::default_for(name, IO)
        .unwrap()
        .init(&Device::flex())
        .unwrap();
    m.num_trainable().unwrap()
}

#[test]
fn ds_cnn_s_count() {
    // conv1 64·10·4; per block: dw 64·9 + bn 2·64 + pw 64·64 + bn 2·64; bn1 2·64;
    // fc 64·12 + 12.
    let c = 64;
    let expected = c * 40 + 2 * c + 4 * (c * 9 + 2 * c + c * c + 2 * c) + c * 12 + 12;
    assert_eq!(trainable("ds-cnn-s"), expected);
    println!("ds-cnn-s: {expected}");
}

#[test]
fn leak_cnn_count() {
    // conv1 32·9 + 32, conv2 64·32·9 + 64, fc1 (64·23·8)·128 + 128, fc2 128·12 + 12.
    let expected = 32 * 9 + 32 + 64 * 32 * 9 + 64 + 64 * 23 * 8 * 128 + 128 + 128 * 12 + 12;
    assert_eq!(trainable("leak-cnn"), expected);
    println!("leak-cnn: {expected}");
}

#[test]
fn bc_resnet_count_in_range() {
    let n = trainable("bc-resnet");
    println!("bc-resnet: {n}");
    assert!((10_000..=30_000).contains(&n), "{n}");
}

#[test]
fn unknown_arch_is_an_error() {
    let e = ArchConfig::default_for("resnet-152", IO)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ds-cnn-s, bc-resnet, leak-cnn"), "{e}");
}

#[test]
fn checkpoint_round_trip_and_shape_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weights.safetensors");
    let device = Device::flex();
    let cfg = ArchConfig::default_for("ds-cnn-s", IO).unwrap();
    let model = cfg.init(&device).unwrap();
    let tensors = model.named_tensors().unwrap();
    save_safetensors(&path, &tensors).unwrap();
    let back = load_safetensors(&path).unwrap();
    let loaded = cfg
        .init(&device)
        .unwrap()
        .load_tensors(TensorSource::new(&path, back), "ds-cnn-s")
        .unwrap();
    let mut a = tensors.clone();
    let mut b = loaded.named_tensors().unwrap();
    a.sort_by(|x, y| x.name.cmp(&y.name));
    b.sort_by(|x, y| x.name.cmp(&y.name));
    assert_eq!(a, b);

    // The same file into a 2-class model: the classifier's shape is refused.
    let other = ArchConfig::default_for("ds-cnn-s", IoShape { classes: 2, ..IO }).unwrap();
    let e = other
        .init(&device)
        .unwrap()
        .load_tensors(
            TensorSource::new(&path, load_safetensors(&path).unwrap()),
            "ds-cnn-s",
        )
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fc.weight") && e.contains("[64, 2]") && e.contains("[64, 12]"),
        "{e}"
    );
}
