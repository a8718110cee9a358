//! One clip through the whole audit: the device's update, the label and features an
//! attacker recovers from it, the waveform rebuilt from those features, and how much
//! leaked (F-MSE, W-MSE, STOI, PESQ, speaker similarity, label). `audit invert` runs it
//! once; `audit report` over many clips and settings.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use hush_device::audio::read_audio;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::{card_features, clip_features, clip_samples, fit_clip};
use hush_models::package::load_package;
use serde::{Deserialize, Serialize};

use super::invert::{idlg_label, invert, InvertConfig};
use super::leak_net::LeakNet;
use super::speaker::SpeakerModel;
use super::update::{device_update, DpNoise, UpdateRule};
use super::waveform::{features_to_waveform, WaveformOptions};
use super::{pesq_mos, stoi, waveform_mse, AuditError};

/// The feature kinds the attack compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttackFeatures {
    /// Log Mel filterbank (`fbank`).
    Mel,
    /// MFCC.
    Mfcc,
}

impl AttackFeatures {
    /// The front-end kind.
    pub fn kind(self) -> FeatureKind {
        match self {
            Self::Mel => FeatureKind::Fbank,
            Self::Mfcc => FeatureKind::Mfcc,
        }
    }

    /// `mel` or `mfcc`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mel => "mel",
            Self::Mfcc => "mfcc",
        }
    }

    fn of(kind: FeatureKind) -> Option<Self> {
        match kind {
            FeatureKind::Fbank => Some(Self::Mel),
            FeatureKind::Mfcc => Some(Self::Mfcc),
            FeatureKind::Spectrogram => None,
        }
    }
}

/// The attacked model: its hand-written twin, front-end and labels.
#[derive(Debug, Clone)]
pub struct AttackTarget {
    /// The network.
    pub net: LeakNet,
    /// Its feature front-end.
    pub features: FeatureConfig,
    /// Mel or MFCC.
    pub kind: AttackFeatures,
    /// Class names.
    pub labels: Vec<String>,
    /// The package directory.
    pub dir: PathBuf,
}

impl AttackTarget {
    /// Loads a leak-CNN package; `expect` (if given) must be its feature kind.
    pub fn load(dir: &Path, expect: Option<AttackFeatures>) -> Result<Self, AuditError> {
        let (card, model) = load_package(dir, &Device::flex())?;
        let features = card_features(&card, dir).map_err(|e| AuditError::Input {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        let kind = AttackFeatures::of(features.kind).ok_or_else(|| AuditError::Input {
            path: dir.to_path_buf(),
            reason: "the model reads a linear spectrogram; the audit compares Mel and MFCC \
                     front-ends"
                .into(),
        })?;
        if let Some(want) = expect {
            if want != kind {
                return Err(AuditError::Input {
                    path: dir.to_path_buf(),
                    reason: format!(
                        "the model was trained on {} features, not {} (--features must match \
                         the model's front-end)",
                        kind.name(),
                        want.name()
                    ),
                });
            }
        }
        let net = LeakNet::from_model(&card.arch, &model)?;
        Ok(Self {
            net,
            features,
            kind,
            labels: card.labels,
            dir: dir.to_path_buf(),
        })
    }

    /// Samples per clip the model sees.
    pub fn clip_len(&self) -> usize {
        clip_samples(&self.features, self.net.shape.frames)
    }

    /// Reads a clip for this model: it must be at the model's sample rate (no silent
    /// resampling in an audit); fitted to the model's window.
    pub fn read_clip(&self, path: &Path) -> Result<Vec<f32>, AuditError> {
        let audio = read_audio(path)?;
        let rate = self.features.frame.sample_rate;
        if audio.sample_rate != rate {
            return Err(AuditError::Input {
                path: path.to_path_buf(),
                reason: format!(
                    "{} Hz, but the model's front-end runs at {rate} Hz; resample the clip first \
                     (e.g. `sox in.wav -r {rate} out.wav`)",
                    audio.sample_rate
                ),
            });
        }
        Ok(fit_clip(&audio.samples, self.clip_len()))
    }

    /// The class of `word`, if the model has it.
    pub fn class_of(&self, word: &str) -> Option<usize> {
        self.labels.iter().position(|l| l == word)
    }
}

/// Everything one attack decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttackOptions {
    /// The optimisation.
    pub invert: InvertConfig,
    /// What the device computes: a single gradient, or the delta of K local steps.
    #[serde(default)]
    pub update: UpdateRule,
    /// Clipping and noise on the device's update (`None`: the raw update).
    pub dp: Option<DpNoise>,
    /// Griffin-Lim iterations.
    pub griffin_lim_iterations: usize,
}

impl Default for AttackOptions {
    fn default() -> Self {
        Self {
            invert: InvertConfig::default(),
            update: UpdateRule::Gradient,
            dp: None,
            griffin_lim_iterations: 64,
        }
    }
}

/// How much a reconstruction reveals about the original clip.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LeakMetrics {
    /// Mean squared error of the features (model input units: log Mel or cepstra).
    pub f_mse: f64,
    /// Mean squared error of the waveforms.
    pub w_mse: f64,
    /// STOI of the reconstructed against the original waveform.
    pub stoi: f64,
    /// PESQ MOS-LQO (None where PESQ refuses the signals, e.g. no speech found).
    pub pesq: Option<f64>,
    /// Cosine of the speaker embeddings (None without a speaker model).
    pub speaker_similarity: Option<f64>,
    /// Whether the speaker model calls them the same speaker at its EER threshold.
    pub same_speaker: Option<bool>,
}

/// The result of [`attack_clip`].
#[derive(Debug, Clone)]
pub struct ClipAttack {
    /// The model's features of the original clip.
    pub original_features: Vec<f32>,
    /// The recovered features.
    pub reconstructed_features: Vec<f32>,
    /// The original clip (fitted to the model's window).
    pub original_wave: Vec<f32>,
    /// The waveform rebuilt from the recovered features.
    pub reconstructed_wave: Vec<f32>,
    /// The label the device trained with.
    pub true_label: usize,
    /// The label iDLG recovered.
    pub recovered_label: usize,
    /// `1 − cos` between the recovered input's update and the shared update.
    pub grad_loss: f64,
    /// Leakage metrics.
    pub metrics: LeakMetrics,
}

/// Scores `features` (recovered or baseline) as a reconstruction of `original` (clip
/// samples and features): rebuilds the waveform and computes every metric.
pub fn score_features(
    target: &AttackTarget,
    original_wave: &[f32],
    original_features: &[f32],
    features: &[f32],
    griffin_lim_iterations: usize,
    seed: u64,
    speaker: Option<&SpeakerModel>,
) -> Result<(Vec<f32>, LeakMetrics), AuditError> {
    let frames = target.net.shape.frames;
    let opts = WaveformOptions {
        griffin_lim_iterations,
        seed,
        ..WaveformOptions::default()
    };
    let wave = features_to_waveform(&target.features, features, frames, &opts)?;
    let rate = target.features.frame.sample_rate;
    let f_mse = original_features
        .iter()
        .zip(features)
        .map(|(a, b)| f64::from(a - b).powi(2))
        .sum::<f64>()
        / original_features.len().max(1) as f64;
    let pesq = match rate {
        8_000 | 16_000 => pesq_mos(original_wave, &wave, rate).ok().map(|p| p.1),
        _ => None,
    };
    let (speaker_similarity, same_speaker) = match speaker {
        Some(s) if s.features.frame.sample_rate == rate => {
            let (sim, same) = s.compare(original_wave, &wave)?;
            (Some(sim), Some(same))
        }
        _ => (None, None),
    };
    let metrics = LeakMetrics {
        f_mse,
        w_mse: waveform_mse(original_wave, &wave).unwrap_or(f64::NAN),
        stoi: stoi(original_wave, &wave, rate)?,
        pesq,
        speaker_similarity,
        same_speaker,
    };
    Ok((wave, metrics))
}

/// The device's update for `samples` (already fitted) with class `true_label`, then the
/// attack on it. `tick` sees every optimisation step.
pub fn attack_clip(
    target: &AttackTarget,
    samples: &[f32],
    true_label: usize,
    opts: &AttackOptions,
    speaker: Option<&SpeakerModel>,
    tick: &mut dyn FnMut(),
) -> Result<ClipAttack, AuditError> {
    let net = &target.net;
    if true_label >= net.shape.classes {
        return Err(AuditError::Option {
            option: "--label",
            reason: format!("class {true_label} of {}", net.shape.classes),
        });
    }
    let original_features = clip_features(&target.features, samples, net.shape.frames)?;
    let update = device_update(
        net,
        &target.dir,
        &original_features,
        true_label,
        opts.update,
        opts.dp,
        opts.invert.seed,
    )?;
    let recovered_label = idlg_label(net, &update, opts.update);
    let inv = invert(
        net,
        &update,
        recovered_label,
        opts.update,
        &opts.invert,
        tick,
    )?;
    let reconstructed_features = net.denormalise(&inv.normalised);
    let (reconstructed_wave, metrics) = score_features(
        target,
        samples,
        &original_features,
        &reconstructed_features,
        opts.griffin_lim_iterations,
        opts.invert.seed,
        speaker,
    )?;
    Ok(ClipAttack {
        original_features,
        reconstructed_features,
        original_wave: samples.to_vec(),
        reconstructed_wave,
        true_label,
        recovered_label,
        grad_loss: inv.grad_loss,
        metrics,
    })
}

/// [`LeakMetrics`] averaged over several clips (or several baseline recordings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MeanLeak {
    /// Clips averaged.
    pub clips: usize,
    /// Mean F-MSE.
    pub f_mse: f64,
    /// Mean W-MSE.
    pub w_mse: f64,
    /// Mean STOI.
    pub stoi: f64,
    /// Mean PESQ over the clips PESQ scored (None if none).
    pub pesq: Option<f64>,
    /// Mean speaker cosine (None without a speaker model).
    pub speaker_similarity: Option<f64>,
    /// Fraction of clips the speaker model calls the same speaker.
    pub speaker_match: Option<f64>,
}

impl MeanLeak {
    /// The mean of `metrics` (all zero for none).
    pub fn of<'a>(metrics: impl IntoIterator<Item = &'a LeakMetrics>) -> Self {
        let mut out = Self::default();
        let (mut pesq, mut spk, mut same) = ((0.0, 0), (0.0, 0), (0.0, 0));
        let add = |acc: &mut (f64, usize), v: Option<f64>| {
            if let Some(v) = v {
                acc.0 += v;
                acc.1 += 1;
            }
        };
        for m in metrics {
            out.clips += 1;
            out.f_mse += m.f_mse;
            out.w_mse += m.w_mse;
            out.stoi += m.stoi;
            add(&mut pesq, m.pesq);
            add(&mut spk, m.speaker_similarity);
            add(&mut same, m.same_speaker.map(|s| f64::from(u8::from(s))));
        }
        let n = out.clips.max(1) as f64;
        out.f_mse /= n;
        out.w_mse /= n;
        out.stoi /= n;
        let mean = |(s, k): (f64, usize)| (k > 0).then(|| s / k as f64);
        out.pesq = mean(pesq);
        out.speaker_similarity = mean(spk);
        out.speaker_match = mean(same);
        out
    }
}
