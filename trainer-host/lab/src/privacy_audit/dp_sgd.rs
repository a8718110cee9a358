//! The DP-SGD audit: central, example-level DP-SGD of a small keyword spotter on a KWS
//! corpus (`hush-host train --dp`'s trainer, [`train_kws_dp_with`]), with `m` Dirac
//! canaries.
//!
//! Canary `i` is a private example whose gradient is `s_i · B` on one coordinate `j_i` of
//! the DP-trained weights and zero elsewhere (`B` = [`AuditSettings::canary_norm`](super::AuditSettings::canary_norm) × the
//! clip bound, so a correct run clips it to `C`; distinct coordinates for distinct
//! canaries; `s_i` a random sign). Each canary joins the private set with probability ½
//! ([`CanaryDraw`]), and DP-SGD samples, bounds and noises it like any clip. After the
//! run the audit reads the released package only (`weights.safetensors` and
//! `privacy.json`) and scores canary `i` by how far its coordinate moved against its
//! gradient: `−s_i (w_final[j_i] − w_init[j_i])`, the initial weights being public (the
//! seed's, [`kws_initial_weights`]).
//!
//! DP off is the same run with noise multiplier [`DP_OFF_NOISE`] and a clip
//! [`DP_OFF_CLIP_FACTOR`] × larger (a canary is then never clipped, and the noise on the
//! sum, `z · 10⁴ C`, is 10⁻⁵ C): what a non-private run leaks to the same audit.

use std::path::Path;

use hush_models::checkpoint::NamedTensor;
use hush_models::dp::trainable_layout;
use hush_train::{
    kws_initial_weights, train_kws_dp_with, DpConfig, GradientExamples, NoiseTarget, PrivacyReport,
};
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use super::{
    flatten, package_weights, sparse_tensors, AuditOutcome, AuditSettings, CanaryDraw, Claim,
    Observed, PrivacyAuditError,
};
use crate::recipes::small_kws_config;

/// Noise multiplier of a DP-off run (negligible noise).
pub const DP_OFF_NOISE: f64 = 1e-9;
/// How much larger the clip of a DP-off run is (no canary is clipped).
pub const DP_OFF_CLIP_FACTOR: f32 = 1e4;

/// One DP-SGD audit's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DpSgdAudit {
    /// Corpus, canaries, claim, clip, sampling rate, seed, confidence.
    #[serde(flatten)]
    pub settings: AuditSettings,
    /// Epochs of DP-SGD.
    pub epochs: usize,
    /// Peak learning rate.
    pub lr: f64,
}

impl DpSgdAudit {
    /// The audit's defaults on `data`: 1 000 canaries of norm 100 C, ε = 1 at δ = 1e-5,
    /// C = 1, q = 0.2, 40 epochs (200 steps). A canary sampled every fifth step keeps
    /// AdamW's momentum on its weight between samplings, so it stands out of the data's
    /// drift when there is no noise.
    pub fn new(data: &Path) -> Self {
        Self {
            settings: AuditSettings::new(data, 1000, 100.0, 0.2),
            epochs: 40,
            lr: 3e-3,
        }
    }

    fn check(&self) -> Result<(), PrivacyAuditError> {
        self.settings.check()?;
        if self.epochs == 0 {
            return Err(PrivacyAuditError::Option {
                option: "--epochs",
                reason: "at least 1".into(),
            });
        }
        Ok(())
    }
}

/// Dirac canaries: inserted canary `k` is `sign · norm` on one flat coordinate of the
/// DP-trained weights.
#[derive(Debug, Clone)]
struct DiracCanaries {
    /// (flat coordinate, sign) of each inserted canary.
    inserted: Vec<(usize, f32)>,
    norm: f32,
}

impl GradientExamples for DiracCanaries {
    fn count(&self) -> usize {
        self.inserted.len()
    }

    fn gradient(&self, i: usize, layers: &[(String, usize)]) -> Vec<NamedTensor> {
        sparse_tensors(layers, &self.inserted[i..=i], self.norm)
    }
}

/// Runs the audited DP-SGD training into `dir/run` and audits what it released.
pub fn run(
    audit: &DpSgdAudit,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<AuditOutcome, PrivacyAuditError> {
    audit.check()?;
    let set = &audit.settings;
    let run_err = |e: &dyn std::fmt::Display| PrivacyAuditError::Run(e.to_string());
    let mut cfg = small_kws_config(&set.data, audit.epochs, set.seed);
    cfg.keep_last_epoch = true;
    cfg.lr = audit.lr;
    let (_, _, arch) = cfg.resolve_arch().map_err(|e| run_err(&e))?;
    let plain = hush_train::device(cfg.compute);
    let layers =
        trainable_layout(&arch.init(&plain).map_err(|e| run_err(&e))?).map_err(|e| run_err(&e))?;

    let draw = CanaryDraw::new(set.canaries, set.seed);
    // Distinct flat coordinates of the trainable weights, one per canary.
    let d: usize = layers.iter().map(|(_, n)| n).sum();
    if set.canaries > d {
        return Err(PrivacyAuditError::Option {
            option: "--canaries",
            reason: format!(
                "{} canaries need as many coordinates; the model has {d}",
                set.canaries
            ),
        });
    }
    let coords = sample(
        &mut ChaCha20Rng::seed_from_u64(set.seed ^ 0xd14a_c000),
        d,
        set.canaries,
    )
    .into_vec();
    let (clip, noise) = match set.epsilon {
        Some(e) => (set.clip, NoiseTarget::Epsilon(e)),
        None => (
            set.clip * DP_OFF_CLIP_FACTOR,
            NoiseTarget::NoiseMultiplier(DP_OFF_NOISE),
        ),
    };
    let canaries = DiracCanaries {
        inserted: draw
            .inserted()
            .into_iter()
            .map(|i| (coords[i], draw.signs[i]))
            .collect(),
        norm: set.canary_norm * set.clip,
    };
    let mut dp = DpConfig::new(1.0, set.delta, clip);
    dp.noise = noise;
    dp.sampling_rate = Some(set.sampling_rate);
    dp.reproducible = true;
    let run_dir = dir.join("run");
    std::fs::create_dir_all(&run_dir).map_err(|e| PrivacyAuditError::Output {
        path: run_dir.clone(),
        reason: e.to_string(),
    })?;
    dp.ledger = run_dir.join("ledger.sqlite");
    let _ = std::fs::remove_file(&dp.ledger);
    let model_dir = run_dir.join("model");
    train_kws_dp_with(
        &cfg,
        &dp,
        &canaries,
        &model_dir,
        "hush-host audit privacy dp-sgd",
        &mut |e| {
            progress(&format!(
                "epoch {} loss {:.3} validation accuracy {:.3}",
                e.epoch, e.train_loss, e.val_accuracy
            ))
        },
    )
    .map_err(|e| run_err(&e))?;

    // From here on, only the released artifacts.
    let released = package_weights(&model_dir, &layers)?;
    let privacy: PrivacyReport = read_json(&model_dir.join("privacy.json"))?;
    let initial = kws_initial_weights(&cfg).map_err(|e| run_err(&e))?;
    let initial = flatten(&initial, &layers, Path::new("the initial weights"))?;
    let scores: Vec<f64> = coords
        .iter()
        .zip(&draw.signs)
        .map(|(&c, sign)| f64::from(-sign * (released[c] - initial[c])))
        .collect();
    let claim = Claim {
        epsilon_rdp: set.epsilon.map(|_| privacy.epsilon_rdp.epsilon),
        epsilon_pld: set
            .epsilon
            .and(privacy.epsilon_pld.as_ref().map(|p| p.epsilon)),
        delta: privacy.delta,
        unit: "example".into(),
    };
    let settings = serde_json::json!({
        "audit": audit,
        "model": arch.name(),
        "parameters": layers.iter().map(|(_, n)| n).sum::<usize>(),
        "noise_multiplier": privacy.noise_multiplier,
        "sampling_rate": privacy.sampling_rate,
        "steps": privacy.steps,
        "population": privacy.population,
        "clip": privacy.clip,
    });
    AuditOutcome::finish(
        "dp-sgd",
        Observed {
            claim,
            scores,
            included: draw.included,
            one_shot: None,
            settings,
        },
        set.confidence,
        dir,
    )
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, PrivacyAuditError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| PrivacyAuditError::Run(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| PrivacyAuditError::Run(format!("{}: {e}", path.display())))
}
