//! `audit report`: the gradient-leakage paper's tables for our setting. For each attacked
//! model (Mel and MFCC front-ends), each clip, and each setting — the raw gradient, then
//! clipped updates with noise multipliers σ — the attack runs and the leakage metrics are
//! averaged; two baselines that need no update (random features, and the training-set
//! average) and the true features (the ceiling of the waveform reconstruction) are
//! scored beside them. Written as `report.md`,
//! `report.json` and `report.png` (STOI per setting).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::attack::{
    attack_clip, mean_features, random_features, score_features, AttackOptions, AttackTarget,
};
use super::invert::{DpNoise, InvertConfig};
use super::speaker::SpeakerModel;
use super::AuditError;
use crate::plot::{line_plot, Series};

/// The setting names of the two baselines.
const RANDOM: &str = "random features";
const MEAN: &str = "mean features (training average)";

/// One clip to attack.
#[derive(Debug, Clone)]
pub struct AuditClip {
    /// The file.
    pub path: PathBuf,
    /// The word (class name).
    pub word: String,
}

/// Options of [`run_report`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportConfig {
    /// Noise multipliers to try (0 = clipping only).
    pub sigmas: Vec<f64>,
    /// Flat clip bound of the DP settings.
    pub clip: f32,
    /// The optimisation.
    pub invert: InvertConfig,
    /// Griffin-Lim iterations.
    pub griffin_lim_iterations: usize,
}

/// One row of the table: the mean over clips of one setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportRow {
    /// `mel` or `mfcc`.
    pub features: String,
    /// `no DP`, `C=…, σ=…`, `random features`, `true features`.
    pub setting: String,
    /// σ (None for the raw gradient and the reference rows).
    pub sigma: Option<f64>,
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
    /// Fraction of clips whose label iDLG recovered (None for reference rows).
    pub label_accuracy: Option<f64>,
    /// Mean gradient loss `1 − cos` (None for reference rows).
    pub grad_loss: Option<f64>,
}

#[derive(Default)]
struct Acc {
    n: usize,
    f_mse: f64,
    w_mse: f64,
    stoi: f64,
    pesq: (f64, usize),
    spk: (f64, usize),
    same: (f64, usize),
    label: (f64, usize),
    grad: (f64, usize),
}

impl Acc {
    fn add(&mut self, m: &super::attack::LeakMetrics) {
        self.n += 1;
        self.f_mse += m.f_mse;
        self.w_mse += m.w_mse;
        self.stoi += m.stoi;
        if let Some(p) = m.pesq {
            self.pesq.0 += p;
            self.pesq.1 += 1;
        }
        if let Some(s) = m.speaker_similarity {
            self.spk.0 += s;
            self.spk.1 += 1;
        }
        if let Some(s) = m.same_speaker {
            self.same.0 += f64::from(u8::from(s));
            self.same.1 += 1;
        }
    }

    fn row(&self, features: &str, setting: String, sigma: Option<f64>) -> ReportRow {
        let n = self.n.max(1) as f64;
        let mean = |(s, k): (f64, usize)| (k > 0).then(|| s / k as f64);
        ReportRow {
            features: features.to_string(),
            setting,
            sigma,
            clips: self.n,
            f_mse: self.f_mse / n,
            w_mse: self.w_mse / n,
            stoi: self.stoi / n,
            pesq: mean(self.pesq),
            speaker_similarity: mean(self.spk),
            speaker_match: mean(self.same),
            label_accuracy: mean(self.label),
            grad_loss: mean(self.grad),
        }
    }
}

/// Runs every setting over every clip for every target. `progress(done, total)` counts
/// attacks; `tick` optimisation steps.
pub fn run_report(
    targets: &[AttackTarget],
    clips: &[AuditClip],
    speaker: Option<&SpeakerModel>,
    cfg: &ReportConfig,
    progress: &mut dyn FnMut(&str),
    tick: &mut dyn FnMut(),
) -> Result<Vec<ReportRow>, AuditError> {
    if clips.is_empty() {
        return Err(AuditError::Option {
            option: "--clips",
            reason: "at least 1 clip".into(),
        });
    }
    if let Some(s) = cfg.sigmas.iter().find(|s| !(s.is_finite() && **s >= 0.0)) {
        return Err(AuditError::Option {
            option: "--sigmas",
            reason: format!("{s} is not a noise multiplier ≥ 0"),
        });
    }
    cfg.invert.check()?;
    let mut rows = Vec::new();
    for target in targets {
        let name = target.kind.name();
        let mut settings: Vec<(String, Option<DpNoise>)> = vec![("no DP".into(), None)];
        for &s in &cfg.sigmas {
            settings.push((
                format!("C={}, σ={s}", cfg.clip),
                Some(DpNoise {
                    clip: cfg.clip,
                    noise_multiplier: s,
                }),
            ));
        }
        let mut accs: Vec<Acc> = settings.iter().map(|_| Acc::default()).collect();
        let (mut random, mut mean, mut truth) = (Acc::default(), Acc::default(), Acc::default());
        for (ci, clip) in clips.iter().enumerate() {
            let samples = target.read_clip(&clip.path)?;
            let label = target
                .class_of(&clip.word)
                .ok_or_else(|| AuditError::Input {
                    path: clip.path.clone(),
                    reason: format!("the model has no class `{}`", clip.word),
                })?;
            for ((setting, dp), acc) in settings.iter().zip(accs.iter_mut()) {
                progress(&format!(
                    "{name} · {setting} · clip {}/{}",
                    ci + 1,
                    clips.len()
                ));
                let opts = AttackOptions {
                    invert: InvertConfig {
                        seed: cfg.invert.seed.wrapping_add(ci as u64),
                        ..cfg.invert.clone()
                    },
                    dp: *dp,
                    griffin_lim_iterations: cfg.griffin_lim_iterations,
                };
                let a = attack_clip(target, &samples, label, &opts, speaker, tick)?;
                acc.add(&a.metrics);
                acc.label.0 += f64::from(u8::from(a.recovered_label == a.true_label));
                acc.label.1 += 1;
                acc.grad.0 += a.grad_loss;
                acc.grad.1 += 1;
                if dp.is_none() {
                    // The baselines and the ceiling, scored once per clip.
                    let references = [
                        (&mut random, random_features(target, ci as u64)),
                        (&mut mean, mean_features(target)),
                        (&mut truth, a.original_features.clone()),
                    ];
                    for (acc, features) in references {
                        let (_, m) = score_features(
                            target,
                            &samples,
                            &a.original_features,
                            &features,
                            cfg.griffin_lim_iterations,
                            ci as u64,
                            speaker,
                        )?;
                        acc.add(&m);
                    }
                }
            }
        }
        for ((setting, dp), acc) in settings.into_iter().zip(&accs) {
            rows.push(acc.row(name, setting, dp.map(|d| d.noise_multiplier)));
        }
        rows.push(random.row(name, RANDOM.into(), None));
        rows.push(mean.row(name, MEAN.into(), None));
        rows.push(truth.row(name, "true features (ceiling)".into(), None));
    }
    Ok(rows)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// The table as Markdown.
pub fn markdown(rows: &[ReportRow], preamble: &str) -> String {
    let mut s = String::from("# Privacy audit: gradient inversion of one clip's update\n\n");
    s.push_str(preamble);
    s.push_str(
        "\n| features | setting | clips | F-MSE | W-MSE | STOI | PESQ | speaker cos | same speaker | label acc | grad loss |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.2e} | {:.3} | {} | {} | {} | {} | {} |\n",
            r.features,
            r.setting,
            r.clips,
            r.f_mse,
            r.w_mse,
            r.stoi,
            opt(r.pesq, 2),
            opt(r.speaker_similarity, 3),
            opt(r.speaker_match, 2),
            opt(r.label_accuracy, 2),
            opt(r.grad_loss, 4),
        ));
    }
    s
}

/// `report.md`, `report.json` and `report.png` in `out`.
pub fn write_report(out: &Path, rows: &[ReportRow], preamble: &str) -> Result<(), AuditError> {
    std::fs::create_dir_all(out).map_err(|source| AuditError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    let md = out.join("report.md");
    std::fs::write(&md, markdown(rows, preamble))
        .map_err(|source| AuditError::Io { path: md, source })?;
    let js = out.join("report.json");
    let text = serde_json::to_string_pretty(rows).map_err(|e| AuditError::Input {
        path: js.clone(),
        reason: e.to_string(),
    })?;
    std::fs::write(&js, text).map_err(|source| AuditError::Io { path: js, source })?;
    // STOI against the setting's position: raw gradient at 0, then each σ; baselines flat.
    let mut series = Vec::new();
    let mut kinds: Vec<&str> = rows.iter().map(|r| r.features.as_str()).collect();
    kinds.dedup();
    for kind in kinds {
        let attack: Vec<&ReportRow> = rows
            .iter()
            .filter(|r| r.features == kind && r.label_accuracy.is_some())
            .collect();
        let points: Vec<(f64, f64)> = attack
            .iter()
            .enumerate()
            .map(|(i, r)| (i as f64, r.stoi))
            .collect();
        let last = points.len().saturating_sub(1) as f64;
        series.push(Series {
            name: format!("{kind}: attack"),
            points,
        });
        for (setting, label) in [(RANDOM, "random features"), (MEAN, "training mean")] {
            if let Some(r) = rows
                .iter()
                .find(|r| r.features == kind && r.setting == setting)
            {
                series.push(Series {
                    name: format!("{kind}: {label}"),
                    points: vec![(0.0, r.stoi), (last, r.stoi)],
                });
            }
        }
    }
    line_plot(
        &out.join("report.png"),
        "STOI of the reconstruction (0 = no DP, then each σ in order)",
        "setting",
        "STOI",
        &series,
    )?;
    Ok(())
}

/// `n` keyword clips of the corpus's test split (speakers no model trained on), spread
/// round-robin over speakers, in a fixed order; only words in `labels`, never
/// `_silence_` or `_unknown_`.
pub fn pick_clips(data: &Path, labels: &[String], n: usize) -> Result<Vec<AuditClip>, AuditError> {
    use hush_device::dataset::{read_corpus, Split, Target, SILENCE, UNKNOWN};
    let (_, mut examples) = read_corpus(data).map_err(|e| AuditError::Input {
        path: data.to_path_buf(),
        reason: e.to_string(),
    })?;
    examples.sort_by(|a, b| a.path.cmp(&b.path));
    let mut by_speaker: std::collections::BTreeMap<String, Vec<AuditClip>> = Default::default();
    for ex in examples {
        let Target::Label(word) = &ex.target else {
            continue;
        };
        if ex.split != Split::Test || word == SILENCE || word == UNKNOWN || !labels.contains(word) {
            continue;
        }
        by_speaker
            .entry(ex.speaker.clone())
            .or_default()
            .push(AuditClip {
                path: ex.path.clone(),
                word: word.clone(),
            });
    }
    let mut out = Vec::with_capacity(n);
    let mut round = 0;
    while out.len() < n {
        let before = out.len();
        for clips in by_speaker.values() {
            if let Some(c) = clips.get(round) {
                if out.len() < n {
                    out.push(c.clone());
                }
            }
        }
        if out.len() == before {
            break;
        }
        round += 1;
    }
    if out.is_empty() {
        return Err(AuditError::Input {
            path: data.to_path_buf(),
            reason: "no keyword clip of the model's classes in the test split".into(),
        });
    }
    Ok(out)
}
