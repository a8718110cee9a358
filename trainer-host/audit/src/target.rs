//! The front-ends of the models the audit attacks: Kaldi conventions at 40 Mel bins, or
//! MFCC with an exact inverse DCT. Their training recipes (the small leak-CNN target and
//! its twin on the other front-end) are `hush_lab::recipes::{target_config, twin_config}`,
//! so that this crate does not depend on the trainers.

use super::attack::AttackFeatures;
use hush_device::features::{FeatureConfig, Lifter};

/// The front-end of `kind` the audit uses: Kaldi conventions, 25/10 ms, 40 Mel bins; MFCC
/// keeps 13 cepstra (lifter 22) and no energy in `c0`, so the inverse DCT is exact on the
/// kept cepstra.
pub fn audit_features(kind: AttackFeatures, mel_bins: usize) -> FeatureConfig {
    let mut f = FeatureConfig::kaldi(kind.kind());
    f.mel.num_bins = mel_bins;
    if kind == AttackFeatures::Mfcc {
        f.mfcc.num_ceps = 13.min(mel_bins);
        f.mfcc.lifter = Lifter::Kaldi(22.0);
        f.mfcc.use_energy = false;
    }
    f
}
