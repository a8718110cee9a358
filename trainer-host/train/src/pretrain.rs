//! BEST-RQ pretraining of the ASR encoder on unlabeled speech (`hush-host pretrain`),
//! non-private or with DP-SGD (example-level), into a pretrained-encoder directory
//! ([`hush_models::pretrained`]) that `hush-host train --task asr --init DIR` fine-tunes.
//!
//! The corpus is read like an ASR corpus ([`load_asr`]); transcripts are ignored. Features
//! are the device's ([`utterance_features`]); the quantizer, masking, head and loss are
//! hush-models' ([`hush_models::asr::bestrq`]). Each epoch draws new masks; the
//! validation loss uses fixed ones.
//!
//! **DP** (`dp = Some(..)`), assembled from `super::dp_run` exactly as DP-SGD for
//! keyword spotters is: the public share of speakers (`split_public`) warms the model
//! up without noise and ranks its layers for gradient-based freezing (`LayerScores`);
//! σ is calibrated for the target ε (`DpPlan`); the planned release is authorised by
//! the ledger before any work (`DpRelease`); each step Poisson-samples private
//! utterances, sums their per-example clipped gradients ([`bestrq_clipped_sum`]: one
//! backward per utterance), adds Gaussian noise to the sum and divides by the expected
//! count ([`hush_models::dp::GaussianMechanism::privatize`]), then takes an AdamW step; the
//! steps run are recorded in the ledger before the encoder is written. The input
//! normalisation comes from the public speakers, or from the validation split without a
//! warm start (never from the private data). Adaptive clipping is not offered here.
//!
//! The weights of the last epoch are kept (pretraining has no task metric to select on).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::grad_clipping::GradientClippingConfig;
use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::Device;
use hush_device::features::FeatureConfig;
use hush_device::infer::utterance_features;
use hush_models::arch::is_trainable;
use hush_models::arch::layers::{read_grads, read_values, write_grads};
use hush_models::asr::bestrq::{
    bestrq_clipped_sum, bestrq_loss, BestRq, BestRqConfig, MaskedBatch, MaskedUtterance,
    RandomProjectionQuantizer,
};
use hush_models::asr::{AsrArchConfig, Vocabulary};
use hush_models::compute::ComputeKind;
use hush_models::dp::Bounding;
use hush_models::package::Provenance;
use hush_models::pretrained::{write_encoder, EncoderCard, PretrainEpoch};
use hush_models::step::{apply_grads, scalar};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::asr::{load_asr, Utterance};
use super::dp::{DpConfig, PrivacyReport};
use super::dp_run::{
    dp_sgd, frozen_count, mechanism, privacy_err, split_public, DpPlan, DpRelease, LayerScores,
};
use super::schedule::WarmupCosine;
use super::{check_common, input_stats, TrainError};
use hush_privacy::ledger::ReleaseRecord;

/// Everything `hush-host pretrain` decides (DP aside: [`DpConfig`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PretrainConfig {
    /// Unlabeled corpus (LibriSpeech layout or JSONL manifest; transcripts are ignored).
    pub data: PathBuf,
    /// Architecture name (`ctc-gru`, `ctc-gru-small`) whose encoder is pretrained.
    pub arch_name: String,
    /// Feature front-end (the fine-tuning run must use the same).
    pub features: FeatureConfig,
    /// BEST-RQ options.
    pub bestrq: BestRqConfig,
    /// Epochs (of the DP phase, for DP runs).
    pub epochs: usize,
    /// Utterances per step (the expected batch `q·n` for DP runs).
    pub batch_size: usize,
    /// Peak learning rate (AdamW, warm-up then cosine).
    pub lr: f64,
    /// AdamW weight decay.
    pub weight_decay: f32,
    /// Gradient norm clip of the non-private steps (per tensor, burn's `Norm`).
    pub grad_clip: f32,
    /// Seed of initialisation, shuffling and masks.
    pub seed: u64,
    /// Where to train (`--device`; a GPU that cannot start falls back to the CPU).
    #[serde(default)]
    pub compute: ComputeKind,
}

impl PretrainConfig {
    /// Defaults: `arch_name` over the ASR trainer's 80-bin Kaldi fbank, default BEST-RQ
    /// options, 10 epochs, batch 8, lr 2e-3, weight decay 1e-2, gradient clip 5.
    pub fn new(data: &Path, arch_name: &str) -> Self {
        Self {
            data: data.to_path_buf(),
            arch_name: arch_name.to_string(),
            features: super::asr::default_features(),
            bestrq: BestRqConfig::default(),
            epochs: 10,
            batch_size: 8,
            lr: 2e-3,
            weight_decay: 1e-2,
            grad_clip: 5.0,
            seed: 0,
            compute: ComputeKind::Cpu,
        }
    }

    /// The architecture over these features and the character vocabulary.
    pub fn arch(&self) -> Result<AsrArchConfig, TrainError> {
        Ok(AsrArchConfig::default_for(
            &self.arch_name,
            self.features.dim(),
            Vocabulary::characters().len(),
        )?)
    }

    /// Checks that need no data (the DP options too, when given); errors name the flag.
    pub fn check(&self, dp: Option<&DpConfig>) -> Result<(), TrainError> {
        check_common(self.epochs, self.batch_size, self.lr, &self.features)?;
        if self.arch()?.subsampling() != hush_models::asr::ctc_gru::SUBSAMPLING {
            return Err(TrainError::option(
                "--arch",
                format!(
                    "BEST-RQ's quantizer stacks {} frames per encoder step; {} subsamples \
                     time by {} (pretrain ctc-gru, then fine-tune either)",
                    hush_models::asr::ctc_gru::SUBSAMPLING,
                    self.arch_name,
                    self.arch()?.subsampling()
                ),
            ));
        }
        self.bestrq
            .check()
            .map_err(|e| TrainError::option("BEST-RQ options", e.to_string()))?;
        if let Some(dp) = dp {
            dp.check()?;
            if dp.adaptive_clip_quantile.is_some() {
                return Err(TrainError::option(
                    "--adaptive-clip-quantile",
                    "not offered for pretraining",
                ));
            }
        }
        Ok(())
    }
}

/// What pretraining produced.
#[derive(Debug, Clone)]
pub struct PretrainReport {
    /// The card written to `encoder.json`.
    pub card: EncoderCard,
    /// The privacy report of a DP run (also in `privacy.json` and the card).
    pub privacy: Option<PrivacyReport>,
    /// The ledger record of a DP run.
    pub record: Option<ReleaseRecord>,
}

/// One utterance's speaker id and features (`frames × bins`).
pub type Spoken = (String, Vec<f32>);

/// The unlabeled corpus as features: `(speaker, frames × bins)` per training utterance
/// and the validation utterances' features.
#[derive(Debug, Clone, Default)]
pub struct PretrainData {
    /// Training utterances: speaker id and features.
    pub train: Vec<Spoken>,
    /// Validation utterances' features (the validation loss; the input normalisation of
    /// DP runs without public speakers).
    pub validation: Vec<Vec<f32>>,
}

impl PretrainData {
    /// Reads `cfg.data` (transcripts ignored) and computes every utterance's features.
    pub fn load(cfg: &PretrainConfig) -> Result<Self, TrainError> {
        let data = load_asr(&cfg.data, cfg.features.frame.sample_rate)?;
        let feats = |utts: &[Utterance]| -> Result<Vec<Vec<f32>>, TrainError> {
            utts.iter()
                .map(|u| {
                    utterance_features(&cfg.features, &u.samples).map_err(|source| {
                        TrainError::Features {
                            path: u.path.clone(),
                            source,
                        }
                    })
                })
                .collect()
        };
        Ok(Self {
            train: data
                .train
                .iter()
                .map(|u| u.speaker.clone())
                .zip(feats(&data.train)?)
                .collect(),
            validation: feats(&data.validation)?,
        })
    }
}

/// Pretrains the encoder on `cfg.data` (with DP when `dp` is given) and writes the
/// encoder directory to `out`. `progress` sees every epoch (and epoch 0 after a DP run's
/// public warm start). Bad options fail before the corpus is read.
pub fn pretrain(
    cfg: &PretrainConfig,
    dp: Option<&DpConfig>,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&PretrainEpoch),
) -> Result<PretrainReport, TrainError> {
    cfg.check(dp)?;
    let data = PretrainData::load(cfg)?;
    pretrain_on(cfg, dp, &data, out, command, progress)
}

/// The model, its quantizer and the masking, on an autodiff device.
struct Setup<'a> {
    cfg: &'a PretrainConfig,
    quantizer: RandomProjectionQuantizer,
    mean: Vec<f32>,
    scale: Vec<f32>,
    bins: usize,
    device: Device,
}

impl Setup<'_> {
    fn mask(&self, feats: &[f32], rng: &mut ChaCha8Rng) -> Result<MaskedUtterance, TrainError> {
        Ok(MaskedUtterance::new(
            &self.quantizer,
            &self.cfg.bestrq,
            feats,
            (&self.mean, &self.scale),
            rng,
        )?)
    }

    /// One non-private AdamW step on `utts`; returns the loss and the gradients.
    fn plain_step(
        &self,
        model: &BestRq,
        utts: &[&[f32]],
        rng: &mut ChaCha8Rng,
    ) -> Result<(f64, GradientsParams), TrainError> {
        let masked = utts
            .iter()
            .map(|f| self.mask(f, rng))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&MaskedUtterance> = masked.iter().collect();
        let batch = MaskedBatch::new(&refs, self.bins, &self.mean);
        let loss = bestrq_loss(model, &batch, &self.device)?;
        let value = f64::from(scalar(loss.clone())?);
        Ok((value, GradientsParams::from_grads(loss.backward(), model)))
    }

    /// The loss on `val` with masks fixed by the seed.
    fn val_loss(&self, model: &BestRq, val: &[Vec<f32>]) -> Result<f64, TrainError> {
        let model = model.valid();
        let plain = self.device.clone().inner();
        let mut rng = ChaCha8Rng::seed_from_u64(self.cfg.seed ^ 0x7a1);
        let (mut sum, mut steps) = (0f64, 0usize);
        for chunk in val.chunks(16) {
            let masked = chunk
                .iter()
                .map(|f| self.mask(f, &mut rng))
                .collect::<Result<Vec<_>, _>>()?;
            let refs: Vec<&MaskedUtterance> = masked.iter().collect();
            let batch = MaskedBatch::new(&refs, self.bins, &self.mean);
            let n = batch.masked_steps();
            sum += f64::from(scalar(bestrq_loss(&model, &batch, &plain)?)?) * n as f64;
            steps += n;
        }
        Ok(sum / steps.max(1) as f64)
    }
}

/// [`pretrain`] on a corpus already in memory (`cfg.data` is then only provenance).
pub fn pretrain_on(
    cfg: &PretrainConfig,
    dp: Option<&DpConfig>,
    data: &PretrainData,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&PretrainEpoch),
) -> Result<PretrainReport, TrainError> {
    cfg.check(dp)?;
    let (train, val) = (&data.train, &data.validation);
    let arch = cfg.arch()?;
    let bins = arch.bins();
    if train.is_empty() || val.is_empty() {
        return Err(TrainError::Data {
            path: cfg.data.clone(),
            reason: "pretraining needs training and validation utterances".into(),
        });
    }
    let quantizer = RandomProjectionQuantizer::new(bins, &cfg.bestrq)?;
    let autodiff = super::device(cfg.compute).autodiff();
    autodiff.seed(cfg.seed);
    let encoder = arch.init(&autodiff)?;
    let mut model = BestRq::new(encoder, cfg.bestrq.codebook_size, &autodiff);
    let layers: Vec<(String, usize)> = read_values(&model)?
        .into_iter()
        .filter(|t| is_trainable(&t.name))
        .map(|t| (t.name, t.data.len()))
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut curve = Vec::new();

    // Data and input normalisation: DP runs never normalise with private data.
    let (public, private): (Vec<&Spoken>, Vec<&Spoken>) = match dp {
        Some(dp) => split_public(train.iter(), |t| t.0.as_str(), dp)?,
        None => (Vec::new(), train.iter().collect()),
    };
    let (norm_source, stats_of): (&str, Vec<&[f32]>) = match (dp, public.is_empty()) {
        (None, _) => ("training split", train.iter().map(|t| &t.1[..]).collect()),
        (Some(_), false) => ("public speakers", public.iter().map(|t| &t.1[..]).collect()),
        (Some(_), true) => ("validation split", val.iter().map(|v| &v[..]).collect()),
    };
    let (mean, scale) = input_stats(&stats_of.concat(), bins);
    model.encoder.set_input_norm(&mean, &scale)?;
    let setup = Setup {
        cfg,
        quantizer,
        mean,
        scale,
        bins,
        device: autodiff.clone(),
    };

    // What is published: the encoder, its card and the privacy report — for a DP run only
    // after the release is recorded (inside `DpRelease::complete`).
    let publish = |model: &BestRq,
                   curve: Vec<PretrainEpoch>,
                   privacy: Option<PrivacyReport>,
                   record: Option<ReleaseRecord>|
     -> Result<PretrainReport, TrainError> {
        let tensors = model.valid().encoder_tensors()?;
        let features_json =
            serde_json::to_value(&cfg.features).map_err(|e| TrainError::Option {
                option: "features",
                reason: e.to_string(),
            })?;
        let mut card = EncoderCard::new(arch, features_json, cfg.bestrq.clone(), &tensors);
        card.loss_curve = curve;
        card.privacy = privacy
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(privacy_err)?;
        let mut summary = BTreeMap::new();
        summary.insert("validation".to_string(), val.len());
        summary.insert("train_public".to_string(), public.len());
        summary.insert("train_private".to_string(), private.len());
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
                "grad_clip": cfg.grad_clip,
                "optimizer": "adamw",
                "schedule": "warmup-cosine",
                "loss": "best-rq: cross-entropy of the quantizer's codes on masked steps",
                "input_norm_source": norm_source,
                "selection": "last epoch",
                "dp": dp,
            }),
            epochs_run: cfg.epochs,
            best_epoch: cfg.epochs,
            hush_version: env!("CARGO_PKG_VERSION").to_string(),
        });
        write_encoder(out, &card, &tensors)?;
        if let Some(p) = &privacy {
            let path = out.join("privacy.json");
            let text = serde_json::to_string_pretty(p).map_err(privacy_err)?;
            std::fs::write(&path, text).map_err(|source| TrainError::Io { path, source })?;
        }
        Ok(PretrainReport {
            card,
            privacy,
            record,
        })
    };

    match dp {
        None => {
            let feats: Vec<&[f32]> = train.iter().map(|t| &t.1[..]).collect();
            model = train_plain(
                &setup,
                model,
                &feats,
                cfg.epochs,
                None,
                &mut rng,
                &mut |e| {
                    curve.push(e.clone());
                    progress(e);
                },
                val,
            )?;
            publish(&model, curve, None, None)
        }
        Some(dp) => {
            let n_frozen = frozen_count(dp, layers.len())?;
            let plan = DpPlan::new(dp, private.len(), cfg.batch_size, cfg.epochs)?;
            // Refused here, before any training, when over budget.
            let release = DpRelease::open(dp, plan, format!("asr encoder {}", out.display()))?;
            let mut scores = LayerScores::new(&layers);
            if !public.is_empty() {
                let feats: Vec<&[f32]> = public.iter().map(|t| &t.1[..]).collect();
                let mut warm_loss = f64::NAN;
                model = train_plain(
                    &setup,
                    model,
                    &feats,
                    dp.warm_start_epochs,
                    Some(&mut scores),
                    &mut rng,
                    &mut |e| warm_loss = e.train_loss,
                    val,
                )?;
                let e = PretrainEpoch {
                    epoch: 0,
                    train_loss: warm_loss,
                    val_loss: setup.val_loss(&model, val)?,
                    lr: cfg.lr,
                };
                progress(&e);
                curve.push(e);
            }
            let (frozen, dp_layers) = scores.freeze(n_frozen);
            let (bounds, mech) = mechanism(dp, dp.clip, &dp_layers, plan.sigma, plan.expected)?;
            let mut sgd = dp_sgd(dp, plan.q, plan.n, cfg.seed)?;
            let bounding = if dp.normalize_layers {
                Bounding::Normalize
            } else {
                Bounding::Clip
            };
            let mut opt = AdamWConfig::new()
                .with_weight_decay(cfg.weight_decay)
                .init();
            let schedule = WarmupCosine {
                peak: cfg.lr,
                warmup: plan.steps_per_epoch.min(50),
                total: plan.planned_steps as usize,
                min_ratio: 0.01,
            };
            let mut step = 0usize;
            for epoch in 1..=cfg.epochs {
                let (mut loss_sum, mut seen) = (0f64, 0usize);
                let mut lr = schedule.lr(step);
                for _ in 0..plan.steps_per_epoch {
                    lr = schedule.lr(step);
                    let stats;
                    (model, stats) = sgd.step(
                        model,
                        &mech,
                        |m, idx| {
                            let masked = idx
                                .iter()
                                .map(|&i| setup.mask(&private[i].1, &mut rng))
                                .collect::<Result<Vec<_>, _>>()?;
                            let refs: Vec<&MaskedUtterance> = masked.iter().collect();
                            Ok::<_, TrainError>(bestrq_clipped_sum(
                                m, &refs, &bounds, bounding, &autodiff,
                            )?)
                        },
                        |m, g| {
                            let grads = write_grads(&m, g)?;
                            Ok(apply_grads(&mut opt, lr, m, grads))
                        },
                    )?;
                    loss_sum += f64::from(stats.loss_sum);
                    seen += stats.examples;
                    step += 1;
                }
                let e = PretrainEpoch {
                    epoch,
                    train_loss: loss_sum / seen.max(1) as f64,
                    val_loss: setup.val_loss(&model, val)?,
                    lr,
                };
                progress(&e);
                curve.push(e);
            }
            // Record the release (the steps actually run) before anything is published.
            release.complete(dp, step as u64, &bounds, &mech, |record, base| {
                let count = |items: &[&Spoken]| {
                    items
                        .iter()
                        .map(|t| t.0.as_str())
                        .collect::<std::collections::BTreeSet<_>>()
                        .len()
                };
                let privacy = PrivacyReport {
                    public_speakers: count(&public),
                    public_examples: public.len(),
                    private_speakers: count(&private),
                    frozen_layers: frozen,
                    input_norm_source: norm_source.into(),
                    batch_norm_statistics: "none (ctc-gru has no batch norm)".into(),
                    ..base
                };
                publish(&model, curve, Some(privacy), Some(record.clone()))
            })
        }
    }
}

/// Non-private BEST-RQ training of `model` on `feats` for `epochs` epochs (AdamW with
/// per-tensor gradient clipping, warm-up + cosine). With `scores`, every step's gradients
/// rank the layers for freezing (the public warm start of a DP run).
#[allow(clippy::too_many_arguments)]
fn train_plain(
    setup: &Setup,
    mut model: BestRq,
    feats: &[&[f32]],
    epochs: usize,
    mut scores: Option<&mut LayerScores>,
    rng: &mut ChaCha8Rng,
    progress: &mut dyn FnMut(&PretrainEpoch),
    val: &[Vec<f32>],
) -> Result<BestRq, TrainError> {
    let cfg = setup.cfg;
    let mut opt = AdamWConfig::new()
        .with_weight_decay(cfg.weight_decay)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(cfg.grad_clip)))
        .init();
    let steps_per_epoch = feats.len().div_ceil(cfg.batch_size);
    let schedule = WarmupCosine {
        peak: cfg.lr,
        warmup: (2 * steps_per_epoch).min(100),
        total: steps_per_epoch * epochs,
        min_ratio: 0.02,
    };
    let mut order: Vec<usize> = (0..feats.len()).collect();
    let mut step = 0usize;
    for epoch in 1..=epochs {
        order.shuffle(rng);
        let (mut loss_sum, mut batches) = (0f64, 0usize);
        let mut lr = schedule.lr(step);
        for chunk in order.chunks(cfg.batch_size) {
            let utts: Vec<&[f32]> = chunk.iter().map(|&i| feats[i]).collect();
            let (loss, grads) = setup.plain_step(&model, &utts, rng)?;
            if let Some(s) = scores.as_deref_mut() {
                s.add(&read_grads(&model, &grads)?);
            }
            lr = schedule.lr(step);
            model = apply_grads(&mut opt, lr, model, grads);
            loss_sum += loss;
            batches += 1;
            step += 1;
        }
        progress(&PretrainEpoch {
            epoch,
            train_loss: loss_sum / batches.max(1) as f64,
            val_loss: setup.val_loss(&model, val)?,
            lr,
        });
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bestrq_refuses_an_encoder_of_another_time_subsampling() {
        assert!(PretrainConfig::new(Path::new("corpus"), "ctc-gru")
            .check(None)
            .is_ok());
        let err = PretrainConfig::new(Path::new("corpus"), "ctc-gru-s2")
            .check(None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--arch") && err.contains("ctc-gru-s2"),
            "{err}"
        );
    }
}
