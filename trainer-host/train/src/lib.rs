//! Central (non-private) training of keyword spotters: corpus → features → burn
//! training with augmentation, AdamW, a warm-up + cosine schedule, per-epoch validation
//! and early stopping → a model package with metrics and provenance.
//!
//! The gradient step is hush-models' ([`hush_models::step`]): `loss_and_grads` then
//! `apply_grads`, so DP-SGD can replace the first without touching this loop's shape.
//! Features come from hush-device's front-end through [`hush_device::infer::clip_features`],
//! the function the device runs before inference.
//!
//! Modules: [`data`] (decoded clips and noises), [`augment`] (waveform, SpecAugment,
//! mixup), [`average`] (weight averaging over a run's last epochs: `--swa-epochs`),
//! [`metrics`] (accuracy, balanced keyword accuracy, confusion), [`schedule`],
//! [`dp`] (DP-SGD: `hush-host train --dp`), `dp_run` (the privacy side every central DP
//! trainer shares), [`asr`] (CTC speech recognisers: `hush-host train --task asr`),
//! [`pretrain`] (BEST-RQ pretraining of the ASR encoder: `hush-host pretrain`).

pub mod asr;
pub mod augment;
pub mod average;
pub mod burst;
pub mod data;
pub mod dp;
pub(crate) mod dp_run;
pub mod metrics;
pub mod pretrain;
pub mod resynth;
pub mod schedule;
pub mod signal;
pub mod speech_bounds;

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::AdamWConfig;
use burn::tensor::Device;
use hush_device::dataset::KwsLabels;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::{clip_features, clip_samples};
use hush_models::arch::{ArchConfig, IoShape, KwsModel};
use hush_models::checkpoint::{NamedTensor, TensorSource};
use hush_models::compute::{self, ComputeKind};
use hush_models::package::{write_package, Metrics, ModelCard, Provenance, SplitMetrics};
use hush_models::step::{apply_grads, loss_and_grads, predict, Batch};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

pub use augment::Augment;
use data::{load_kws, Clip, KwsData};
pub use dp::{
    kws_initial_weights, train_kws_dp, train_kws_dp_with, AdaptiveClipReport, DpConfig,
    DpTrainReport, GradientExamples, NoGradientExamples, NoiseTarget, PrivacyReport,
};
use schedule::WarmupCosine;

/// The device central training runs on (`--device`; a GPU that cannot start falls back
/// to the CPU): the one place every trainer gets it; they derive their autodiff device
/// from it.
pub fn device(kind: ComputeKind) -> Device {
    compute::select(kind).device
}

/// Why training failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The corpus could not be read.
    #[error(transparent)]
    Dataset(#[from] hush_device::dataset::DatasetError),
    /// An audio file could not be decoded.
    #[error(transparent)]
    Audio(#[from] hush_device::audio::AudioError),
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The corpus is not usable for this task.
    #[error("{path}: {reason}")]
    Data {
        /// The corpus or file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Features could not be computed for a clip.
    #[error("{path}: {source}")]
    Features {
        /// The clip.
        path: PathBuf,
        /// The front-end's error.
        source: hush_device::features::FeatureError,
    },
    /// A training option is out of range.
    #[error("option {option}: {reason}")]
    Option {
        /// The option (as the CLI flag).
        option: &'static str,
        /// What is expected.
        reason: String,
    },
    /// The model failed (configuration, step, export).
    #[error(transparent)]
    Model(#[from] hush_models::ModelError),
    /// The privacy ledger refused or failed (DP training).
    #[error(transparent)]
    Ledger(#[from] hush_privacy::ledger::LedgerError),
    /// A privacy computation failed (DP training).
    #[error("privacy: {0}")]
    Privacy(String),
    /// A DP primitive refused its input (DP training).
    #[error("privacy: {0}")]
    Dp(#[from] hush_models::dp::DpError),
}

/// Everything `hush-host train --task kws` decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KwsTrainConfig {
    /// Corpus directory (Speech Commands layout).
    pub data: PathBuf,
    /// Keywords; the classes are these, then `_silence_` and `_unknown_`.
    pub keywords: Vec<String>,
    /// Architecture name (`ds-cnn-s`, `bc-resnet`, `leak-cnn`), used when `arch` is None.
    pub arch_name: String,
    /// A full architecture config (overrides `arch_name`'s defaults; its `io` must match).
    pub arch: Option<ArchConfig>,
    /// Feature front-end.
    pub features: FeatureConfig,
    /// Frames per example.
    pub frames: usize,
    /// Most epochs.
    pub epochs: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW weight decay.
    pub weight_decay: f32,
    /// Stop after this many epochs without a better validation accuracy.
    pub patience: usize,
    /// Seed of initialisation, shuffling and augmentation.
    pub seed: u64,
    /// Augmentation.
    pub augment: Augment,
    /// Where to train (`--device`; a GPU that cannot start falls back to the CPU).
    #[serde(default)]
    pub compute: ComputeKind,
    /// Start from this package's weights instead of fresh ones (same architecture and
    /// labels): more epochs of an earlier run, or fine-tuning. With `streaming`, the
    /// architecture's same-padded form is accepted too ([`ArchConfig::streaming_form`]:
    /// the same weights).
    #[serde(default)]
    pub init_from: Option<PathBuf>,
    /// Weight each class's loss by the inverse of its share of the training clips
    /// ([`class_weights`]).
    #[serde(default)]
    pub balance_classes: bool,
    /// Stochastic weight averaging: hold the learning rate at `swa_lr_ratio` × peak for
    /// the last this-many epochs and keep the mean of the weights after each of their
    /// steps as the model, its batch-norm statistics re-estimated ([`average`]); 0 = off
    /// (the best validation epoch is kept).
    #[serde(default)]
    pub swa_epochs: usize,
    /// The held learning rate of the averaged epochs, as a fraction of the peak.
    #[serde(default = "default_swa_lr_ratio")]
    pub swa_lr_ratio: f64,
    /// Release the last epoch's weights, not the best validation epoch's (and never stop
    /// early): the privacy audit's runs, whose released weights must be where training
    /// ended.
    #[serde(default)]
    pub keep_last_epoch: bool,
    /// Build the architecture's streaming form (DS-CNN-S or BC-ResNet with valid time
    /// padding, whose package carries `frames.onnx` and `head.onnx` for incremental
    /// inference); an architecture without one is refused.
    #[serde(default)]
    pub streaming: bool,
}

fn default_swa_lr_ratio() -> f64 {
    0.1
}

impl KwsTrainConfig {
    /// Defaults: the ten Speech Commands keywords, 40-bin Kaldi fbank (25/10 ms, 98
    /// frames), 30 epochs, batch 32, lr 3e-3, weight decay 1e-2, patience 8, default
    /// augmentation.
    pub fn new(data: &Path, arch_name: &str) -> Self {
        let mut features = FeatureConfig::kaldi(FeatureKind::Fbank);
        features.mel.num_bins = 40;
        Self {
            data: data.to_path_buf(),
            keywords: [
                "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            arch_name: arch_name.to_string(),
            arch: None,
            features,
            frames: 98,
            epochs: 30,
            batch_size: 32,
            lr: 3e-3,
            weight_decay: 1e-2,
            patience: 8,
            seed: 0,
            augment: Augment::default(),
            compute: ComputeKind::Cpu,
            init_from: None,
            balance_classes: false,
            swa_epochs: 0,
            swa_lr_ratio: default_swa_lr_ratio(),
            keep_last_epoch: false,
            streaming: false,
        }
    }

    /// Sets the log-mel front-end: `num_bins` fbank bins over frames of `length_ms` every
    /// `shift_ms`, and as many frames as fit in one second (snipped edges). Hello Edge's
    /// DS-CNN reads 49 frames of 40 ms every 20 ms; the default is 98 of 25 ms every 10 ms.
    pub fn set_fbank(&mut self, length_ms: f32, shift_ms: f32, num_bins: usize) {
        self.features.frame.frame_length_ms = length_ms;
        self.features.frame.frame_shift_ms = shift_ms;
        self.features.mel.num_bins = num_bins;
        let sr = self.features.frame.sample_rate;
        self.frames = hush_device::features::frame::Framing::new(&self.features.frame)
            .num_frames(u64::from(sr)) as usize;
    }

    /// The class set, the model's input/output shape and the architecture (the configured
    /// one, checked against the data's shape, or the named default).
    pub fn resolve_arch(&self) -> Result<(KwsLabels, IoShape, ArchConfig), TrainError> {
        let labels = KwsLabels::new(&self.keywords);
        let io = IoShape {
            frames: self.frames,
            bins: self.features.dim(),
            classes: labels.classes.len(),
        };
        let arch = match &self.arch {
            Some(a) if a.io() != io => {
                return Err(TrainError::Option {
                    option: "arch",
                    reason: format!("its io {:?} does not match the data's {io:?}", a.io()),
                })
            }
            Some(a) => a.clone(),
            None => {
                let arch = ArchConfig::default_for(&self.arch_name, io)?;
                match (self.streaming, arch.streaming_form()) {
                    (true, Some(streaming)) => streaming,
                    _ => arch,
                }
            }
        };
        if self.streaming && arch.stream_geometry().is_none() {
            return Err(TrainError::Option {
                option: "streaming",
                reason: format!(
                    "{} as configured ({} frames) has no streaming form (too few frames)",
                    arch.name(),
                    io.frames
                ),
            });
        }
        Ok((labels, io, arch))
    }

    fn check(&self) -> Result<(), TrainError> {
        check_common(self.epochs, self.batch_size, self.lr, &self.features)?;
        if self.keywords.is_empty() {
            return Err(TrainError::option("--keywords", "at least one keyword"));
        }
        if self.frames == 0 {
            return Err(TrainError::option("frames", "at least 1"));
        }
        if self.swa_epochs >= self.epochs {
            return Err(TrainError::option(
                "--swa-epochs",
                format!("fewer than --epochs ({})", self.epochs),
            ));
        }
        if !(self.swa_lr_ratio > 0.0 && self.swa_lr_ratio <= 1.0) {
            return Err(TrainError::option("--swa-lr-ratio", "a number in (0, 1]"));
        }
        Ok(())
    }
}

impl TrainError {
    /// Option `option` is out of range; `reason` says what is expected.
    pub(crate) fn option(option: &'static str, reason: impl Into<String>) -> Self {
        Self::Option {
            option,
            reason: reason.into(),
        }
    }
}

/// The checks every trainer makes before reading data: at least one epoch, a non-empty
/// batch, a positive finite learning rate, a valid feature config.
pub(crate) fn check_common(
    epochs: usize,
    batch_size: usize,
    lr: f64,
    features: &FeatureConfig,
) -> Result<(), TrainError> {
    if epochs == 0 {
        return Err(TrainError::option("--epochs", "at least 1"));
    }
    if batch_size == 0 {
        return Err(TrainError::option("--batch-size", "at least 1"));
    }
    if !(lr.is_finite() && lr > 0.0) {
        return Err(TrainError::option("--lr", "a positive number"));
    }
    features
        .validate()
        .map_err(|e| TrainError::option("features", e.to_string()))
}

/// One epoch's numbers, for progress lines.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochReport {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training loss.
    pub train_loss: f64,
    /// Validation accuracy.
    pub val_accuracy: f64,
    /// Learning rate at the end of the epoch.
    pub lr: f64,
    /// Whether this epoch is the best so far.
    pub best: bool,
}

/// What training produced.
#[derive(Debug, Clone)]
pub struct KwsTrainReport {
    /// The card written to `model.json`.
    pub card: ModelCard,
    /// Per-epoch numbers.
    pub epochs: Vec<EpochReport>,
}

/// Per-epoch validation, best-epoch keeping and early stopping, shared by every trainer
/// (KWS central and DP, ASR): the score is higher-is-better (accuracy, 1 − WER); `R` is
/// the trainer's per-epoch report.
pub(crate) struct BestEpoch<R = EpochReport> {
    best: Option<(f64, usize, Vec<NamedTensor>)>,
    reports: Vec<R>,
    patience: usize,
    keep_last: bool,
}

impl<R> BestEpoch<R> {
    pub(crate) fn new(patience: usize) -> Self {
        Self {
            best: None,
            reports: Vec::new(),
            patience,
            keep_last: false,
        }
    }

    /// Keeps every epoch's weights over the last (so the last epoch's are released) and
    /// never stops early.
    pub(crate) fn keeping_last(mut self, keep_last: bool) -> Self {
        self.keep_last = keep_last;
        self
    }

    /// Records epoch `epoch`'s validation `score`, keeping the weights `tensors` gives if
    /// it beats every earlier epoch; returns whether it did.
    pub(crate) fn record(
        &mut self,
        epoch: usize,
        score: f64,
        tensors: impl FnOnce() -> Result<Vec<NamedTensor>, TrainError>,
    ) -> Result<bool, TrainError> {
        let improved =
            self.keep_last || self.best.as_ref().is_none_or(|(best, _, _)| score > *best);
        if improved {
            self.best = Some((score, epoch, tensors()?));
        }
        Ok(improved)
    }

    /// Adds the epoch's report; returns whether patience has run out after `epoch`.
    pub(crate) fn push(&mut self, epoch: usize, report: R) -> bool {
        self.reports.push(report);
        let best_epoch = self.best.as_ref().map_or(epoch, |b| b.1);
        !self.keep_last && epoch - best_epoch >= self.patience
    }

    /// The best epoch, its weights, and every epoch's report.
    pub(crate) fn finish(self) -> Result<(usize, Vec<NamedTensor>, Vec<R>), TrainError> {
        let Some((_, best_epoch, tensors)) = self.best else {
            return Err(TrainError::Option {
                option: "--epochs",
                reason: "no epoch ran".into(),
            });
        };
        Ok((best_epoch, tensors, self.reports))
    }
}

impl BestEpoch<EpochReport> {
    /// Scores `model` on `val`, keeps its weights if it is the best so far, reports the
    /// epoch (`(epoch, train loss, lr)`); returns whether patience has run out.
    #[allow(clippy::too_many_arguments)]
    fn end_epoch(
        &mut self,
        model: &KwsModel,
        val: &Prepared,
        (frames, bins): (usize, usize),
        labels: &[String],
        plain: &Device,
        (epoch, train_loss, lr): (usize, f64, f64),
        progress: &mut dyn FnMut(&EpochReport),
    ) -> Result<bool, TrainError> {
        let snapshot = model.valid();
        let v = evaluate(&snapshot, val, frames, bins, labels, plain)?;
        let improved = self.record(epoch, v.accuracy, || Ok(snapshot.named_tensors()?))?;
        let report = EpochReport {
            epoch,
            train_loss,
            val_accuracy: v.accuracy,
            lr,
            best: improved,
        };
        progress(&report);
        Ok(self.push(epoch, report))
    }
}

struct Prepared {
    feats: Vec<f32>,
    classes: Vec<usize>,
}

fn features_of(clips: &[Clip], cfg: &FeatureConfig, frames: usize) -> Result<Prepared, TrainError> {
    // Every core computes a share; the rows keep the clips' order.
    let rows = clips
        .par_iter()
        .map(|c| {
            clip_features(cfg, &c.samples, frames).map_err(|source| TrainError::Features {
                path: c.path.clone(),
                source,
            })
        })
        .collect::<Result<Vec<_>, TrainError>>()?;
    Ok(Prepared {
        feats: rows.concat(),
        classes: clips.iter().map(|c| c.class).collect(),
    })
}

/// Per-bin mean and inverse standard deviation over the training features.
/// Loss weights that give every class present in `classes` (each training clip's class,
/// out of `k`) the same total weight: `w_c = N / (K' · n_c)` over the `K'` classes that
/// occur, so the weights average 1 over the clips; an absent class gets 1.
pub fn class_weights(classes: impl Iterator<Item = usize>, k: usize) -> Vec<f32> {
    let mut counts = vec![0usize; k];
    for c in classes {
        if let Some(n) = counts.get_mut(c) {
            *n += 1;
        }
    }
    let total: usize = counts.iter().sum();
    let present = counts.iter().filter(|&&n| n > 0).count().max(1);
    counts
        .iter()
        .map(|&n| {
            if n == 0 {
                1.0
            } else {
                total as f32 / (present * n) as f32
            }
        })
        .collect()
}

pub(crate) fn input_stats(feats: &[f32], bins: usize) -> (Vec<f32>, Vec<f32>) {
    let rows = (feats.len() / bins).max(1) as f64;
    let mut sum = vec![0f64; bins];
    let mut sq = vec![0f64; bins];
    for row in feats.chunks_exact(bins) {
        for (i, &v) in row.iter().enumerate() {
            sum[i] += f64::from(v);
            sq[i] += f64::from(v) * f64::from(v);
        }
    }
    let mean: Vec<f32> = sum.iter().map(|s| (s / rows) as f32).collect();
    let scale = sum
        .iter()
        .zip(&sq)
        .map(|(s, q)| {
            let m = s / rows;
            (1.0 / (q / rows - m * m).max(1e-6).sqrt()) as f32
        })
        .collect();
    (mean, scale)
}

fn evaluate(
    model: &KwsModel,
    p: &Prepared,
    frames: usize,
    bins: usize,
    labels: &[String],
    device: &Device,
) -> Result<SplitMetrics, TrainError> {
    let per = frames * bins;
    let n = p.classes.len();
    let mut predicted = Vec::with_capacity(n);
    for start in (0..n).step_by(64) {
        let end = (start + 64).min(n);
        let probs = predict(
            model,
            &p.feats[start * per..end * per],
            end - start,
            frames,
            bins,
            device,
        )?;
        predicted.extend(probs.iter().map(|r| metrics::argmax(r)));
    }
    Ok(metrics::score(&p.classes, &predicted, labels))
}

/// Trains a keyword spotter and writes its package to `out`. `command` is recorded as
/// provenance; `progress` sees every epoch.
pub fn train_kws(
    cfg: &KwsTrainConfig,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&EpochReport),
) -> Result<KwsTrainReport, TrainError> {
    cfg.check()?;
    let (labels, _, _) = cfg.resolve_arch()?;
    let sr = cfg.features.frame.sample_rate;
    let clip_len = clip_samples(&cfg.features, cfg.frames);
    let data: KwsData = load_kws(&cfg.data, &labels, sr, clip_len)?;
    train_kws_on(cfg, &data, out, command, progress)
}

/// [`train_kws`] on data already in memory (`cfg.data` is then only provenance): the clips
/// must be fitted to the model's window (`clip_samples`) and labelled with `cfg`'s classes.
pub fn train_kws_on(
    cfg: &KwsTrainConfig,
    data: &KwsData,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&EpochReport),
) -> Result<KwsTrainReport, TrainError> {
    cfg.check()?;
    let (labels, io, arch) = cfg.resolve_arch()?;
    let bins = io.bins;
    let sr = cfg.features.frame.sample_rate;
    data::require_splits(data, &cfg.data)?;
    let clean_train = features_of(&data.train, &cfg.features, cfg.frames)?;
    let val = features_of(&data.validation, &cfg.features, cfg.frames)?;
    let test = features_of(&data.test, &cfg.features, cfg.frames)?;
    let (mean, scale) = input_stats(&clean_train.feats, bins);

    let plain = device(cfg.compute);
    let device = plain.clone().autodiff();
    device.seed(cfg.seed);
    let mut model = arch.init(&device)?;
    model.set_input_norm(&mean, &scale)?;
    if let Some(dir) = &cfg.init_from {
        let card = ModelCard::read(dir)?;
        // A streaming run may start from the same-padded form: the weights are the same.
        let same_weights = card.arch == arch
            || (cfg.streaming && card.arch.streaming_form().as_ref() == Some(&arch));
        if !same_weights || card.labels != labels.classes {
            return Err(TrainError::option(
                "--init-from",
                format!(
                    "{}: a {} model over {:?}; this run trains a {} over {:?}",
                    dir.display(),
                    card.arch.name(),
                    card.labels,
                    arch.name(),
                    labels.classes
                ),
            ));
        }
        model = hush_models::package::load_weights_as(dir, &card, &arch, &device)?;
    }
    let mut optimizer = AdamWConfig::new()
        .with_weight_decay(cfg.weight_decay)
        .init();
    let steps_per_epoch = data.train.len().div_ceil(cfg.batch_size);
    // With weight averaging the cosine ends where the averaged epochs begin, at their
    // held rate (the schedule stays at its floor after `total`).
    let swa = cfg.swa_epochs > 0;
    let schedule = WarmupCosine {
        peak: cfg.lr,
        warmup: steps_per_epoch.min(50),
        total: steps_per_epoch * (cfg.epochs - cfg.swa_epochs),
        min_ratio: if swa { cfg.swa_lr_ratio } else { 0.01 },
    };
    let first_averaged = cfg.epochs - cfg.swa_epochs + 1;
    let mut average = average::WeightAverage::new();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..data.train.len()).collect();
    let mut step = 0usize;
    let mut tracker = BestEpoch::new(cfg.patience).keeping_last(cfg.keep_last_epoch);
    let per = cfg.frames * bins;
    let k = io.classes;
    let mel_axis = augment::MelAxis::of(&cfg.features);
    let weights = if cfg.balance_classes {
        class_weights(data.train.iter().map(|c| c.class), k)
    } else {
        vec![1.0; k]
    };
    // One training clip's features as a training step sees them: waveform augmentation,
    // front-end, warping and SpecAugment.
    let augmented = |clip: &Clip, rng: &mut ChaCha8Rng| -> Result<Vec<f32>, TrainError> {
        let wave = cfg.augment.waveform(&clip.samples, &data.noises, sr, rng);
        let mut f = clip_features(&cfg.features, &wave, cfg.frames).map_err(|source| {
            TrainError::Features {
                path: clip.path.clone(),
                source,
            }
        })?;
        cfg.augment.warp(&mut f, mel_axis.as_ref(), rng);
        cfg.augment.spec(&mut f, bins, &mean, rng);
        Ok(f)
    };
    for epoch in 1..=cfg.epochs {
        order.shuffle(&mut rng);
        let mut loss_sum = 0.0f64;
        let mut lr = schedule.lr(step);
        for chunk in order.chunks(cfg.batch_size) {
            let b = chunk.len();
            let mut feats = Vec::with_capacity(b * per);
            let mut targets = vec![0f32; b * k];
            for (i, &j) in chunk.iter().enumerate() {
                let clip = &data.train[j];
                feats.extend(augmented(clip, &mut rng)?);
                targets[i * k + clip.class] = weights[clip.class];
            }
            cfg.augment.mixup(&mut feats, &mut targets, b, &mut rng);
            let batch = Batch {
                features: feats,
                targets,
                batch: b,
                frames: cfg.frames,
                bins,
                classes: k,
            };
            lr = schedule.lr(step);
            let (loss, grads) = loss_and_grads(&model, &batch, &device)?;
            model = apply_grads(&mut optimizer, lr, model, grads);
            loss_sum += f64::from(loss) * b as f64;
            step += 1;
            if swa && epoch >= first_averaged {
                average.add(model.named_tensors()?)?;
            }
        }
        let stop = tracker.end_epoch(
            &model,
            &val,
            (cfg.frames, bins),
            &labels.classes,
            &plain,
            (epoch, loss_sum / data.train.len() as f64, lr),
            progress,
        )?;
        // Early stopping would cut the averaged epochs short: with averaging every epoch runs.
        if stop && !swa {
            break;
        }
    }
    let (best_epoch, tensors, reports) = tracker.finish()?;
    let (kept_epoch, tensors, source) = match average.mean() {
        Some(mean) => {
            let averaged = arch.init(&device)?.load_tensors(
                TensorSource::new(Path::new("<weight average>"), mean.to_vec()),
                arch.name(),
            )?;
            // The statistics of the inputs training normalised: one augmented pass.
            let rows = data
                .train
                .iter()
                .map(|clip| augmented(clip, &mut rng))
                .collect::<Result<Vec<_>, _>>()?
                .concat();
            let tensors = average::refresh_batch_norm(
                averaged,
                &rows,
                (cfg.frames, bins),
                128,
                &device,
                &mut rng,
            )?;
            (reports.len(), tensors, "<weight average>")
        }
        None => (best_epoch, tensors, "<best epoch>"),
    };
    let model = arch
        .init(&plain)?
        .load_tensors(TensorSource::new(Path::new(source), tensors), arch.name())?;
    let mut metrics = Metrics::default();
    for (name, p) in [
        ("train", &clean_train),
        ("validation", &val),
        ("test", &test),
    ] {
        let m = evaluate(&model, p, cfg.frames, bins, &labels.classes, &plain)?;
        metrics.splits.insert(name.to_string(), m);
    }
    let features_json = serde_json::to_value(&cfg.features).map_err(|e| TrainError::Option {
        option: "features",
        reason: e.to_string(),
    })?;
    let mut card = ModelCard::new(arch, features_json, labels.classes.clone(), &model)?;
    let mut summary = std::collections::BTreeMap::new();
    summary.insert("train".to_string(), data.train.len());
    summary.insert("validation".to_string(), data.validation.len());
    summary.insert("test".to_string(), data.test.len());
    summary.insert("noises".to_string(), data.noises.len());
    for (name, clips) in [
        ("train", &data.train),
        ("validation", &data.validation),
        ("test", &data.test),
    ] {
        let speakers: std::collections::BTreeSet<&str> =
            clips.iter().map(|c| c.speaker.as_str()).collect();
        summary.insert(format!("{name}_speakers"), speakers.len());
    }
    card.provenance = Some(Provenance {
        command: command.to_string(),
        data: cfg.data.display().to_string(),
        data_summary: summary,
        seed: cfg.seed,
        options: serde_json::json!({
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "lr": cfg.lr,
            "weight_decay": cfg.weight_decay,
            "patience": cfg.patience,
            "optimizer": "adamw",
            "schedule": "warmup-cosine",
            "augment": cfg.augment,
            "init_from": cfg.init_from,
            "balance_classes": cfg.balance_classes,
            "swa": swa.then(|| serde_json::json!({
                "epochs": cfg.swa_epochs,
                "lr_ratio": cfg.swa_lr_ratio,
                "steps_averaged": average.count(),
                "batch_norm": "re-estimated on one augmented pass over the training clips, in shuffled batches of 128",
                "best_validation_epoch": best_epoch,
            })),
        }),
        epochs_run: reports.len(),
        best_epoch: kept_epoch,
        hush_version: env!("CARGO_PKG_VERSION").to_string(),
    });
    card.metrics = Some(metrics);
    write_package(out, &card, &model)?;
    Ok(KwsTrainReport {
        card,
        epochs: reports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hush_models::arch::TimePadding;

    #[test]
    fn class_weights_give_every_present_class_the_same_total() {
        // 6 clips of class 0, 2 of class 1, none of class 2.
        let classes = [0, 0, 0, 0, 0, 0, 1, 1];
        let w = class_weights(classes.iter().copied(), 3);
        assert_eq!(w, vec![8.0 / 12.0, 8.0 / 4.0, 1.0]);
        assert!((6.0 * w[0] - 2.0 * w[1]).abs() < 1e-6);
        let mean: f32 = classes.iter().map(|&c| w[c]).sum::<f32>() / classes.len() as f32;
        assert!((mean - 1.0).abs() < 1e-6);
    }

    #[test]
    fn streaming_asks_for_the_streaming_form_or_is_refused() {
        let mut cfg = KwsTrainConfig::new(Path::new("corpus"), "ds-cnn-s");
        cfg.streaming = true;
        let (_, _, arch) = cfg.resolve_arch().unwrap();
        let ArchConfig::DsCnnS(ds) = &arch else {
            panic!("{arch:?}")
        };
        assert_eq!(ds.time_padding, TimePadding::Valid);
        assert!(arch.stream_geometry().is_some());
        cfg.arch_name = "bc-resnet".into();
        let (_, _, arch) = cfg.resolve_arch().unwrap();
        assert!(arch.stream_geometry().is_some(), "{arch:?}");
        // Leak-CNN pads nothing: its streaming form has the same configuration, written
        // with the package.
        cfg.arch_name = "leak-cnn".into();
        let (_, _, arch) = cfg.resolve_arch().unwrap();
        let ArchConfig::LeakCnn(leak) = &arch else {
            panic!("{arch:?}")
        };
        assert!(leak.streaming && arch.stream_geometry().is_some());
        cfg.frames = 9;
        let err = cfg.resolve_arch().unwrap_err().to_string();
        assert!(err.contains("streaming"), "{err}");
        cfg.arch_name = "ds-cnn-s".into();
        cfg.frames = 20;
        assert!(
            cfg.resolve_arch().is_err(),
            "a window too short for the stack"
        );
    }
}
