//! The files `hush-host audit invert` leaves in its output directory, and their writers:
//! the original and the reconstructed waveform (16-bit WAV), their feature matrices
//! (float32 `.npy`), the two spectrograms side by side (PNG), and `report.json`
//! ([`InvertReport`]). Every error names the file.

use std::path::Path;

use hush_device::audio::{write_wav_i16, Audio};
use hush_device::features::npy::{write_npy_f32, NpyError};
use hush_plot::{heatmaps, Heatmap};
use serde::Serialize;

use super::attack::{
    AttackFeatures, AttackOptions, AttackTarget, ClipAttack, LeakMetrics, MeanLeak,
};
use super::baseline::Baselines;
use super::speaker::SpeakerModel;
use super::AuditError;

/// Writes `samples` at `sample_rate` to `path` as 16-bit PCM WAV.
pub fn write_wav(path: &Path, samples: &[f32], sample_rate: u32) -> Result<(), AuditError> {
    let audio = Audio {
        samples: samples.to_vec(),
        sample_rate,
    };
    Ok(write_wav_i16(path, &audio)?)
}

/// Writes `features`, `frames` rows of `dim` values, to `path` as a float32 `.npy` matrix
/// `[frames, dim]`.
pub fn write_features_npy(
    path: &Path,
    features: &[f32],
    frames: usize,
    dim: usize,
) -> Result<(), AuditError> {
    write_npy_f32(path, features, &[frames, dim]).map_err(|e| match e {
        NpyError::Io { path, source } => AuditError::Io { path, source },
        other => AuditError::Input {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    })
}

/// Writes `attack` on `target` into the existing directory `out`: `reconstructed.wav`
/// and `original.wav` at the model's sample rate, `original_features.npy` and
/// `reconstructed_features.npy` (`[frames, bins]`), and `spectrograms.png` (both feature
/// matrices on one colour scale).
pub fn write_attack_files(
    out: &Path,
    target: &AttackTarget,
    attack: &ClipAttack,
) -> Result<(), AuditError> {
    let rate = target.features.frame.sample_rate;
    let (frames, dim) = (target.net.shape.frames, target.net.shape.bins);
    write_wav(
        &out.join("reconstructed.wav"),
        &attack.reconstructed_wave,
        rate,
    )?;
    write_wav(&out.join("original.wav"), &attack.original_wave, rate)?;
    for (name, data) in [
        ("original_features.npy", &attack.original_features),
        ("reconstructed_features.npy", &attack.reconstructed_features),
    ] {
        write_features_npy(&out.join(name), data, frames, dim)?;
    }
    heatmaps(
        &out.join("spectrograms.png"),
        &format!(
            "{} features: original vs reconstructed from one update",
            target.kind.name()
        ),
        &[
            Heatmap {
                title: "original",
                values: &attack.original_features,
                rows: frames,
                cols: dim,
            },
            Heatmap {
                title: "reconstructed",
                values: &attack.reconstructed_features,
                rows: frames,
                cols: dim,
            },
        ],
    )?;
    Ok(())
}

/// What `audit invert` found for one clip: `report.json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvertReport {
    /// The attacked model package.
    pub model: String,
    /// The attacked clip.
    pub input: String,
    /// The model's front-end.
    pub features: AttackFeatures,
    /// How the update was made and attacked.
    pub options: AttackOptions,
    /// The clip's class.
    pub true_label: String,
    /// The class iDLG recovered (empty if out of the model's range).
    pub recovered_label: String,
    /// Whether the two agree.
    pub label_recovered: bool,
    /// `1 − cos` between the recovered input's update and the shared update.
    pub grad_loss: f64,
    /// How much the attack's reconstruction leaks.
    pub metrics: LeakMetrics,
    /// What an attacker gets without the update, scored the same way.
    pub baselines: Baselines,
    /// The other speakers' recordings of the word, averaged (None when there were none).
    pub other_speakers_mean: Option<MeanLeak>,
    /// The best realistic baseline (training mean, prior only, other speakers).
    pub best_baseline_stoi: f64,
    /// The best realistic baseline's feature MSE.
    pub best_baseline_f_mse: f64,
    /// The speaker model's same-speaker threshold (None without one).
    pub speaker_threshold: Option<f64>,
}

impl InvertReport {
    /// The report of `attack` with `options` on the clip `input` against the package
    /// `model` (loaded as `target`), beside what an attacker gets without the update
    /// (`baselines`), scored with `speaker` if given.
    pub fn new(
        model: &Path,
        input: &Path,
        target: &AttackTarget,
        options: AttackOptions,
        attack: &ClipAttack,
        baselines: Baselines,
        speaker: Option<&SpeakerModel>,
    ) -> Self {
        Self {
            model: model.display().to_string(),
            input: input.display().to_string(),
            features: target.kind,
            options,
            true_label: target.labels[attack.true_label].clone(),
            recovered_label: target
                .labels
                .get(attack.recovered_label)
                .cloned()
                .unwrap_or_default(),
            label_recovered: attack.true_label == attack.recovered_label,
            grad_loss: attack.grad_loss,
            metrics: attack.metrics.clone(),
            other_speakers_mean: baselines.other_speakers_mean(),
            best_baseline_stoi: baselines.best_stoi(),
            best_baseline_f_mse: baselines.best_f_mse(),
            baselines,
            speaker_threshold: speaker.map(|s| s.calibration.threshold),
        }
    }

    /// Writes the report to `path` as pretty-printed JSON ending in a newline.
    pub fn write(&self, path: &Path) -> Result<(), AuditError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| AuditError::Input {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        std::fs::write(path, text + "\n").map_err(|source| AuditError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}
