//! Helpers shared by the round-server tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_models::arch::{ArchConfig, IoShape, LeakCnnConfig};
use hush_models::package::{write_package, ModelCard};

/// A tiny leak-CNN package (10×10 fbank input, 2 classes, a few hundred weights) in
/// `dir/initial`.
pub fn tiny_package(dir: &Path) -> PathBuf {
    let io = IoShape {
        frames: 10,
        bins: 10,
        classes: 2,
    };
    let mut cfg = LeakCnnConfig::new(io);
    cfg.channels = [2, 2];
    cfg.hidden = 4;
    cfg.dropout = 0.0;
    let arch = ArchConfig::LeakCnn(cfg);
    let model = arch.init(&Device::flex()).unwrap();
    let mut features = FeatureConfig::kaldi(FeatureKind::Fbank);
    features.mel.num_bins = 10;
    let card = ModelCard::new(
        arch,
        serde_json::to_value(&features).unwrap(),
        vec!["yes".into(), "no".into()],
        &model,
    )
    .unwrap();
    let out = dir.join("initial");
    write_package(&out, &card, &model).unwrap();
    out
}
