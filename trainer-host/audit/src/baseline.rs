//! What an attacker gets **without** the clip's update, scored exactly like the attack
//! (same waveform rebuild, same metrics), so that "the update leaks" means "the
//! reconstruction is closer to the clip than every guess that needs no update":
//!
//! - [`random_features`]: standard normal in the model's normalised input space (the
//!   attack's own starting distribution). The weakest baseline: unstructured noise.
//! - [`mean_features`]: the training-set average, every frame.
//! - [`prior_only_features`]: the attack itself, run on an update that carries nothing
//!   about the clip (pure Gaussian noise: the σ → ∞ limit of DP). What the optimisation
//!   and its total-variation prior produce on their own: smooth, speech-like
//!   spectrograms, which score well above random features on STOI. A noised update's
//!   reconstruction must be compared with this, not with random features.
//! - [`other_speakers`]: real speech — the same word spoken by other speakers (the clip's
//!   siblings in its Speech Commands word folder): what an attacker who knows or guessed
//!   the label gets by playing any recording of that word.
//!
//! [`Baselines::best_stoi`] and [`Baselines::best_f_mse`] take the strongest of the
//! realistic ones (all but random features).

use std::path::{Path, PathBuf};

use hush_device::infer::clip_features;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use super::attack::{score_features, AttackOptions, AttackTarget, LeakMetrics, MeanLeak};
use super::invert::{idlg_label, invert};
use super::speaker::SpeakerModel;
use super::AuditError;

/// Random features: standard normal in the model's normalised input space (the attack's
/// own starting distribution), seeded.
pub fn random_features(target: &AttackTarget, seed: u64) -> Vec<f32> {
    let n = target.net.shape.frames * target.net.shape.bins;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_ba5e);
    let x: Vec<f64> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
    target.net.denormalise(&x)
}

/// The training-set average (the model's input normalisation mean, every frame).
pub fn mean_features(target: &AttackTarget) -> Vec<f32> {
    let n = target.net.shape.frames * target.net.shape.bins;
    target.net.denormalise(&vec![0.0; n])
}

/// The attack of `opts` (same update rule, iterations, restarts, TV prior) on an update of
/// pure standard-normal noise (seeded from `seed`), with the label iDLG reads from it:
/// the features the attack finds when the update tells it nothing.
pub fn prior_only_features(
    target: &AttackTarget,
    opts: &AttackOptions,
    seed: u64,
    tick: &mut dyn FnMut(),
) -> Result<Vec<f32>, AuditError> {
    let net = &target.net;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0ca1_ab1e);
    let noise: Vec<f64> = (0..net.weights.len())
        .map(|_| StandardNormal.sample(&mut rng))
        .collect();
    let label = idlg_label(net, &noise, opts.update);
    let inv = invert(net, &noise, label, opts.update, &opts.invert, tick)?;
    Ok(net.denormalise(&inv.normalised))
}

/// How many other speakers' recordings of the word `audit invert` and `audit report`
/// score per clip.
pub const OTHER_SPEAKERS: usize = 3;

/// Up to `n` recordings beside `input` (its Speech Commands word folder) by other
/// speakers, one per speaker, in name order. A speaker is the name's part before
/// `_nohash_`; when `input` is not named that way, any other recording in its folder.
pub fn other_speakers(input: &Path, n: usize) -> Result<Vec<PathBuf>, AuditError> {
    let dir = match input.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let speaker = |p: &Path| {
        p.file_name()
            .and_then(|s| s.to_str())
            .and_then(|s| s.split_once("_nohash_"))
            .map(|(s, _)| s.to_string())
    };
    let is_audio = |p: &Path| {
        p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("wav") || e.eq_ignore_ascii_case("flac"))
    };
    let io = |source| AuditError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let p = entry.map_err(io)?.path();
        if p.is_file() && is_audio(&p) && p.file_name() != input.file_name() {
            files.push(p);
        }
    }
    files.sort();
    let own = speaker(input);
    let mut seen = std::collections::HashSet::new();
    Ok(files
        .into_iter()
        .filter(|p| match (&own, speaker(p)) {
            (Some(own), Some(s)) => s != *own && seen.insert(s),
            (Some(_), None) => false,
            (None, _) => true,
        })
        .take(n)
        .collect())
}

/// Every baseline for one clip.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baselines {
    /// Random features.
    pub random: LeakMetrics,
    /// The training average.
    pub mean: LeakMetrics,
    /// The attack on a pure-noise update.
    pub prior_only: LeakMetrics,
    /// Each other speaker's recording of the word.
    pub other_speakers: Vec<LeakMetrics>,
    /// Those recordings.
    pub other_speaker_clips: Vec<PathBuf>,
}

impl Baselines {
    /// The other speakers' recordings, averaged (None when there were none).
    pub fn other_speakers_mean(&self) -> Option<MeanLeak> {
        (!self.other_speakers.is_empty()).then(|| MeanLeak::of(&self.other_speakers))
    }

    fn realistic(&self) -> Vec<(f64, f64)> {
        let mut v = vec![
            (self.mean.stoi, self.mean.f_mse),
            (self.prior_only.stoi, self.prior_only.f_mse),
        ];
        if let Some(o) = self.other_speakers_mean() {
            v.push((o.stoi, o.f_mse));
        }
        v
    }

    /// The highest STOI of the realistic no-update guesses (training mean, prior only,
    /// other speakers).
    pub fn best_stoi(&self) -> f64 {
        self.realistic()
            .iter()
            .map(|r| r.0)
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// The lowest F-MSE of the realistic no-update guesses.
    pub fn best_f_mse(&self) -> f64 {
        self.realistic()
            .iter()
            .map(|r| r.1)
            .fold(f64::INFINITY, f64::min)
    }
}

/// Scores every baseline against the clip (`samples`, its model features
/// `original_features`): random features (seeded from `seed`), the training mean, the
/// prior-only attack with `opts`, and the recordings `others` (at the model's rate).
/// `tick` sees the prior-only attack's steps.
#[allow(clippy::too_many_arguments)]
pub fn score_baselines(
    target: &AttackTarget,
    samples: &[f32],
    original_features: &[f32],
    opts: &AttackOptions,
    others: &[PathBuf],
    speaker: Option<&SpeakerModel>,
    seed: u64,
    tick: &mut dyn FnMut(),
) -> Result<Baselines, AuditError> {
    let score = |features: &[f32]| {
        score_features(
            target,
            samples,
            original_features,
            features,
            opts.griffin_lim_iterations,
            seed,
            speaker,
        )
        .map(|(_, m)| m)
    };
    let prior = prior_only_features(target, opts, seed, tick)?;
    let mut other_speakers = Vec::with_capacity(others.len());
    for path in others {
        let wave = target.read_clip(path)?;
        let features = clip_features(&target.features, &wave, target.net.shape.frames)?;
        other_speakers.push(score(&features)?);
    }
    Ok(Baselines {
        random: score(&random_features(target, seed))?,
        mean: score(&mean_features(target))?,
        prior_only: score(&prior)?,
        other_speakers,
        other_speaker_clips: others.to_vec(),
    })
}
