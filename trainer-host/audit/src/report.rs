//! `audit report`: the gradient-leakage paper's tables for our setting. For each attacked
//! model (Mel and MFCC front-ends), each clip, and each setting — the raw update, then
//! clipped updates with noise multipliers σ — the attack runs and the leakage metrics are
//! averaged. Beside them, scored the same way: the [`super::baseline`]s an attacker has
//! without the update (random features, the training average, the attack on a pure-noise
//! update, other speakers saying the word) and the true features (the ceiling of the
//! waveform reconstruction). Each attack row says how far its STOI lies above the best
//! realistic baseline (all but random features): the update leaks what that margin
//! shows. Written as `report.md`, `report.json` and `report.png` (STOI per setting).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::attack::{attack_clip, AttackOptions, AttackTarget, LeakMetrics, MeanLeak};
use super::baseline::{other_speakers, score_baselines, OTHER_SPEAKERS};
use super::invert::InvertConfig;
use super::speaker::SpeakerModel;
use super::update::{DpNoise, UpdateRule};
use super::AuditError;
use hush_plot::{line_plot, Series};

/// The setting names of the baselines, in table order.
const RANDOM: &str = "random features";
const MEAN: &str = "mean features (training average)";
const PRIOR: &str = "prior only (attack on a pure-noise update)";
const OTHERS: &str = "other speakers, same word";
const CEILING: &str = "true features (ceiling)";

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
    /// What the device shares: a single gradient or the delta of K local steps.
    #[serde(default)]
    pub update: UpdateRule,
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
    /// `no DP`, `C=…, σ=…`, or a baseline's name.
    pub setting: String,
    /// σ (None for the raw update and the reference rows).
    pub sigma: Option<f64>,
    /// The metrics, averaged over clips.
    #[serde(flatten)]
    pub leak: MeanLeak,
    /// Fraction of clips whose label iDLG recovered (None for reference rows).
    pub label_accuracy: Option<f64>,
    /// Mean gradient loss `1 − cos` (None for reference rows).
    pub grad_loss: Option<f64>,
    /// Attack rows: STOI minus the best realistic baseline's (training mean, prior only,
    /// other speakers) of the same features; > 0 where the update tells more than a guess.
    pub stoi_over_baselines: Option<f64>,
}

#[derive(Default)]
struct Acc {
    metrics: Vec<LeakMetrics>,
    label: (f64, usize),
    grad: (f64, usize),
}

impl Acc {
    fn row(&self, features: &str, setting: String, sigma: Option<f64>) -> ReportRow {
        let mean = |(s, k): (f64, usize)| (k > 0).then(|| s / k as f64);
        ReportRow {
            features: features.to_string(),
            setting,
            sigma,
            leak: MeanLeak::of(&self.metrics),
            label_accuracy: mean(self.label),
            grad_loss: mean(self.grad),
            stoi_over_baselines: None,
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
    cfg.update.check()?;
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
        let mut refs: [Acc; 5] = Default::default();
        for (ci, clip) in clips.iter().enumerate() {
            let samples = target.read_clip(&clip.path)?;
            let label = target
                .class_of(&clip.word)
                .ok_or_else(|| AuditError::Input {
                    path: clip.path.clone(),
                    reason: format!("the model has no class `{}`", clip.word),
                })?;
            let opts_for = |dp: Option<DpNoise>| AttackOptions {
                invert: InvertConfig {
                    seed: cfg.invert.seed.wrapping_add(ci as u64),
                    ..cfg.invert.clone()
                },
                update: cfg.update,
                dp,
                griffin_lim_iterations: cfg.griffin_lim_iterations,
            };
            let mut original_features = Vec::new();
            for ((setting, dp), acc) in settings.iter().zip(accs.iter_mut()) {
                progress(&format!(
                    "{name} · {setting} · clip {}/{}",
                    ci + 1,
                    clips.len()
                ));
                let a = attack_clip(target, &samples, label, &opts_for(*dp), speaker, tick)?;
                acc.metrics.push(a.metrics);
                acc.label.0 += f64::from(u8::from(a.recovered_label == a.true_label));
                acc.label.1 += 1;
                acc.grad.0 += a.grad_loss;
                acc.grad.1 += 1;
                original_features = a.original_features;
            }
            progress(&format!(
                "{name} · baselines · clip {}/{}",
                ci + 1,
                clips.len()
            ));
            let others = other_speakers(&clip.path, OTHER_SPEAKERS)?;
            let b = score_baselines(
                target,
                &samples,
                &original_features,
                &opts_for(None),
                &others,
                speaker,
                ci as u64,
                tick,
            )?;
            let (_, ceiling) = super::attack::score_features(
                target,
                &samples,
                &original_features,
                &original_features,
                cfg.griffin_lim_iterations,
                ci as u64,
                speaker,
            )?;
            refs[0].metrics.push(b.random);
            refs[1].metrics.push(b.mean);
            refs[2].metrics.push(b.prior_only);
            refs[3].metrics.extend(b.other_speakers);
            refs[4].metrics.push(ceiling);
        }
        let reference_rows: Vec<ReportRow> = [RANDOM, MEAN, PRIOR, OTHERS, CEILING]
            .iter()
            .zip(&refs)
            .filter(|(_, acc)| !acc.metrics.is_empty())
            .map(|(setting, acc)| acc.row(name, (*setting).into(), None))
            .collect();
        let best = reference_rows
            .iter()
            .filter(|r| [MEAN, PRIOR, OTHERS].contains(&r.setting.as_str()))
            .map(|r| r.leak.stoi)
            .fold(f64::NEG_INFINITY, f64::max);
        for ((setting, dp), acc) in settings.into_iter().zip(&accs) {
            let mut row = acc.row(name, setting, dp.map(|d| d.noise_multiplier));
            row.stoi_over_baselines = Some(row.leak.stoi - best);
            rows.push(row);
        }
        rows.extend(reference_rows);
    }
    Ok(rows)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

/// The paragraph `report.md` opens with: the models (each `dir (features)`), the clips
/// from `data`, the update, the attack's options `cfg`, the `speaker` model's calibration,
/// and the `command` that ran.
pub fn preamble(
    targets: &[AttackTarget],
    clips: &[AuditClip],
    data: &Path,
    cfg: &ReportConfig,
    speaker: &SpeakerModel,
    command: &str,
) -> String {
    let models = targets
        .iter()
        .map(|t| format!("{} ({})", t.dir.display(), t.kind.name()))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "Models: {models}; {} test clips ({}); the device shares {}; clip bound C = {}; \
         {} iterations × {} restarts, lr {}, TV weight {}; Griffin-Lim {} iterations; seed {}. Speaker model: EER \
         {:.3} at cosine {:.3} on {} held-out speakers.\n\nClips: {}.\n\nCommand: `{}`\n",
        clips.len(),
        data.display(),
        cfg.update,
        cfg.clip,
        cfg.invert.iterations,
        cfg.invert.restarts,
        cfg.invert.lr,
        cfg.invert.tv_weight,
        cfg.griffin_lim_iterations,
        cfg.invert.seed,
        speaker.calibration.eer,
        speaker.calibration.threshold,
        speaker.calibration.heldout_speakers,
        clips
            .iter()
            .map(|c| format!("`{}`", c.path.display()))
            .collect::<Vec<_>>()
            .join(", "),
        command,
    )
}

/// The table as Markdown.
pub fn markdown(rows: &[ReportRow], preamble: &str) -> String {
    let mut s = String::from("# Privacy audit: gradient inversion of one clip's update\n\n");
    s.push_str(preamble);
    s.push_str(
        "\n| features | setting | clips | F-MSE | W-MSE | STOI | STOI − best baseline | PESQ | speaker cos | same speaker | label acc | grad loss |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let m = &r.leak;
        s.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.2e} | {:.3} | {} | {} | {} | {} | {} | {} |\n",
            r.features,
            r.setting,
            m.clips,
            m.f_mse,
            m.w_mse,
            m.stoi,
            r.stoi_over_baselines
                .map_or("–".into(), |v| format!("{v:+.3}")),
            opt(m.pesq, 2),
            opt(m.speaker_similarity, 3),
            opt(m.speaker_match, 2),
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
            .map(|(i, r)| (i as f64, r.leak.stoi))
            .collect();
        let last = points.len().saturating_sub(1) as f64;
        series.push(Series {
            name: format!("{kind}: attack"),
            points,
        });
        for (setting, label) in [
            (RANDOM, "random features"),
            (MEAN, "training mean"),
            (PRIOR, "prior only"),
            (OTHERS, "other speakers"),
        ] {
            if let Some(r) = rows
                .iter()
                .find(|r| r.features == kind && r.setting == setting)
            {
                series.push(Series {
                    name: format!("{kind}: {label}"),
                    points: vec![(0.0, r.leak.stoi), (last, r.leak.stoi)],
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
