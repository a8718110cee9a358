//! Training set-ups shared by the demo ([`crate::demo`]), the fleet simulation
//! ([`crate::simulate`]) and the experiments ([`crate::experiment`]), and the models the
//! privacy audit attacks (`hush-host audit`): a small leak-CNN over a 1 s, 40-bin
//! front-end (the paper's architecture at a width that two CPU cores invert in seconds per
//! clip), and the twin of a given model on the other front-end (Mel ↔ MFCC, everything
//! else equal), so that `audit report` compares the two on equal terms.

use std::path::Path;

use hush_audit::attack::{AttackFeatures, AttackTarget};
use hush_audit::target::audit_features;
use hush_models::arch::{ArchConfig, IoShape, LeakCnnConfig};
use hush_train::{Augment, KwsTrainConfig};

/// A small, fast keyword-spotting set-up on `data`: 20 Mel bins every 20 ms (49 frames)
/// into the 2-conv + 2-FC CNN with 8 and 16 channels, no augmentation. It learns the
/// bundled corpus in seconds per epoch on two cores.
pub fn small_kws_config(data: &Path, epochs: usize, seed: u64) -> KwsTrainConfig {
    let mut cfg = KwsTrainConfig::new(data, "leak-cnn");
    cfg.features.mel.num_bins = 20;
    cfg.features.frame.frame_shift_ms = 20.0;
    cfg.frames = 49;
    cfg.augment = Augment::none();
    let io = IoShape {
        frames: cfg.frames,
        bins: 20,
        classes: cfg.keywords.len() + 2,
    };
    cfg.arch = Some(ArchConfig::LeakCnn(LeakCnnConfig {
        channels: [8, 16],
        hidden: 64,
        dropout: 0.0,
        ..LeakCnnConfig::new(io)
    }));
    cfg.epochs = epochs;
    cfg.batch_size = 16;
    cfg.lr = 3e-3;
    cfg.seed = seed;
    cfg
}

/// Training config of the audit's leak-CNN on `data` for `kind`: 98 frames, 40 Mel bins,
/// channels 8 and 16, 64 hidden units, no dropout, no augmentation.
pub fn target_config(
    data: &Path,
    kind: AttackFeatures,
    epochs: usize,
    seed: u64,
) -> KwsTrainConfig {
    let mut cfg = KwsTrainConfig::new(data, "leak-cnn");
    cfg.features = audit_features(kind, 40);
    cfg.frames = 98;
    cfg.augment = Augment::none();
    set_leak_arch(&mut cfg, [8, 16], 64);
    cfg.epochs = epochs;
    cfg.batch_size = 16;
    cfg.seed = seed;
    cfg
}

/// The twin of `target` on the other front-end: same architecture widths, frames, Mel
/// bank and framing; only the feature kind (and so the input width) differs.
pub fn twin_config(target: &AttackTarget, data: &Path, epochs: usize, seed: u64) -> KwsTrainConfig {
    let other = match target.kind {
        AttackFeatures::Mel => AttackFeatures::Mfcc,
        AttackFeatures::Mfcc => AttackFeatures::Mel,
    };
    let mut cfg = target_config(data, other, epochs, seed);
    let mut features = target.features.clone();
    features.kind = other.kind();
    if other == AttackFeatures::Mfcc {
        let m = audit_features(AttackFeatures::Mfcc, features.mel.num_bins);
        features.mfcc = m.mfcc;
    }
    cfg.features = features;
    cfg.frames = target.net.shape.frames;
    if target.labels.len() >= 3 {
        cfg.keywords = target.labels[..target.labels.len() - 2].to_vec();
    }
    let sh = target.net.shape;
    set_leak_arch(&mut cfg, sh.channels, sh.hidden);
    cfg
}

/// A leak-CNN without dropout over `cfg`'s frames, feature width and classes.
fn set_leak_arch(cfg: &mut KwsTrainConfig, channels: [usize; 2], hidden: usize) {
    let io = IoShape {
        frames: cfg.frames,
        bins: cfg.features.dim(),
        classes: cfg.keywords.len() + 2,
    };
    cfg.arch = Some(ArchConfig::LeakCnn(LeakCnnConfig {
        channels,
        hidden,
        dropout: 0.0,
        ..LeakCnnConfig::new(io)
    }));
}
