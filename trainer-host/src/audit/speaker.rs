//! A small speaker-embedding model for the audit's speaker-similarity score: a DS-CNN
//! (hush-models' own, 32 channels, 2 blocks) over the 40-bin Kaldi fbank, trained by hush
//! with a softmax over the corpus's training speakers; the embedding is the penultimate
//! layer (the global average pool, read as the input of the classifier layer). Two clips
//! are scored by the cosine of their embeddings; the same-speaker decision uses the
//! equal-error-rate threshold measured on held-out speakers (validation and test splits,
//! which share no speaker with training).
//!
//! On disk it is an ordinary model package (labels = training speaker ids) plus
//! `speaker.json` ([`SpeakerCalibration`]).

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Linear};
use burn::optim::AdamWConfig;
use burn::tensor::{Device, Tensor, TensorData};
use hush_device::audio::read_audio;
use hush_device::dataset::{read_corpus, Layout, Split, Target, SILENCE};
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::clip_features;
use hush_models::arch::layers::LayerRunner;
use hush_models::arch::{ArchConfig, DsCnnConfig, IoShape, KwsModel};
use hush_models::package::{load_package, write_package, ModelCard};
use hush_models::step::{apply_grads, loss_and_grads, Batch};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::AuditError;

/// File beside the package holding the calibration.
pub const CALIBRATION: &str = "speaker.json";

/// Options of [`train_speaker_model`].
#[derive(Debug, Clone, PartialEq)]
pub struct SpeakerTrainConfig {
    /// Corpus (Speech Commands layout with speaker ids).
    pub data: PathBuf,
    /// Epochs.
    pub epochs: usize,
    /// Examples per step.
    pub batch_size: usize,
    /// AdamW learning rate.
    pub lr: f64,
    /// Seed.
    pub seed: u64,
}

impl SpeakerTrainConfig {
    /// Defaults: 12 epochs, batch 32, lr 3e-3, seed 0.
    pub fn new(data: &Path) -> Self {
        Self {
            data: data.to_path_buf(),
            epochs: 12,
            batch_size: 32,
            lr: 3e-3,
            seed: 0,
        }
    }
}

/// The decision rule measured on held-out speakers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeakerCalibration {
    /// Cosine score at or above which two clips are called the same speaker.
    pub threshold: f64,
    /// Equal error rate on held-out speakers at that threshold.
    pub eer: f64,
    /// Held-out speakers scored.
    pub heldout_speakers: usize,
    /// Same-speaker and different-speaker trials scored.
    pub trials: [usize; 2],
    /// Frames per clip.
    pub frames: usize,
}

/// A trained speaker-embedding model.
#[derive(Debug)]
pub struct SpeakerModel {
    /// The features it reads.
    pub features: FeatureConfig,
    /// The network (inference mode).
    pub model: KwsModel,
    /// Decision threshold and EER.
    pub calibration: SpeakerCalibration,
    /// Its card (labels: training speakers).
    pub card: ModelCard,
}

fn frames() -> usize {
    98
}

/// The speaker model's front-end: 40-bin Kaldi fbank, 25/10 ms.
pub fn speaker_features() -> FeatureConfig {
    let mut f = FeatureConfig::kaldi(FeatureKind::Fbank);
    f.mel.num_bins = 40;
    f
}

/// Records the input of the last linear layer it runs: the embedding.
#[derive(Default)]
struct Penultimate {
    seen: RefCell<Option<Tensor<2>>>,
}

impl LayerRunner for Penultimate {
    fn conv(&self, c: &Conv2d, x: Tensor<4>) -> Tensor<4> {
        c.forward(x)
    }
    fn batch_norm(&self, b: &BatchNorm, x: Tensor<4>) -> Tensor<4> {
        b.forward(x)
    }
    fn linear(&self, l: &Linear, x: Tensor<2>) -> Tensor<2> {
        *self.seen.borrow_mut() = Some(x.clone());
        l.forward(x)
    }
}

/// Cosine similarity (0 when either vector is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na * nb)
    }
}

/// The equal error rate of a score that should be high for `same` trials and low for
/// `different` ones, and the threshold where the false-accept and false-reject rates
/// cross (`score ≥ threshold` accepts). Returns `None` when either list is empty.
pub fn equal_error_rate(same: &[f64], different: &[f64]) -> Option<(f64, f64)> {
    if same.is_empty() || different.is_empty() {
        return None;
    }
    let mut thresholds: Vec<f64> = same.iter().chain(different).copied().collect();
    thresholds.sort_by(f64::total_cmp);
    thresholds.dedup();
    let rates = |t: f64| {
        let frr = same.iter().filter(|&&s| s < t).count() as f64 / same.len() as f64;
        let far = different.iter().filter(|&&s| s >= t).count() as f64 / different.len() as f64;
        (far, frr)
    };
    let mut best = (f64::INFINITY, 0.0, 0.0);
    for &t in &thresholds {
        let (far, frr) = rates(t);
        let gap = (far - frr).abs();
        if gap < best.0 {
            best = (gap, (far + frr) / 2.0, t);
        }
    }
    Some((best.1, best.2))
}

struct SpeakerClip {
    speaker: String,
    split: Split,
    features: Vec<f32>,
}

fn load_clips(data: &Path, features: &FeatureConfig) -> Result<Vec<SpeakerClip>, AuditError> {
    let (layout, examples) = read_corpus(data).map_err(|e| AuditError::Input {
        path: data.to_path_buf(),
        reason: e.to_string(),
    })?;
    if layout != Layout::SpeechCommands {
        return Err(AuditError::Input {
            path: data.to_path_buf(),
            reason: format!(
                "the speaker model trains on a Speech Commands corpus, found {layout:?}"
            ),
        });
    }
    let mut out = Vec::new();
    for ex in examples {
        if matches!(&ex.target, Target::Label(w) if w == SILENCE) {
            continue;
        }
        let audio = read_audio(&ex.path)?;
        if audio.sample_rate != features.frame.sample_rate {
            return Err(AuditError::Input {
                path: ex.path.clone(),
                reason: format!(
                    "{} Hz; the speaker model reads {} Hz",
                    audio.sample_rate, features.frame.sample_rate
                ),
            });
        }
        out.push(SpeakerClip {
            speaker: ex.speaker.clone(),
            split: ex.split,
            features: clip_features(features, &audio.samples, frames())?,
        });
    }
    Ok(out)
}

impl SpeakerModel {
    /// The embedding of one clip (`samples` at the model's rate).
    pub fn embed(&self, samples: &[f32]) -> Result<Vec<f32>, AuditError> {
        let f = clip_features(&self.features, samples, self.calibration.frames)?;
        Ok(self.embed_features(&f, 1).remove(0))
    }

    fn embed_features(&self, feats: &[f32], n: usize) -> Vec<Vec<f32>> {
        let bins = self.features.dim();
        let device = Device::flex();
        let x = Tensor::<3>::from_data(
            TensorData::new(feats.to_vec(), [n, self.calibration.frames, bins]),
            &device,
        );
        let r = Penultimate::default();
        let _ = self.model.forward_with(x, &r);
        let Some(e) = r.seen.into_inner() else {
            return vec![Vec::new(); n];
        };
        let [_, d] = e.dims();
        let v = e
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap_or_default();
        v.chunks(d.max(1)).map(<[f32]>::to_vec).collect()
    }

    /// Cosine score of two clips and the same-speaker decision.
    pub fn compare(&self, a: &[f32], b: &[f32]) -> Result<(f64, bool), AuditError> {
        let s = cosine(&self.embed(a)?, &self.embed(b)?);
        Ok((s, s >= self.calibration.threshold))
    }

    /// Writes the package and `speaker.json` to `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), AuditError> {
        write_package(dir, &self.card, &self.model)?;
        let path = dir.join(CALIBRATION);
        let text =
            serde_json::to_string_pretty(&self.calibration).map_err(|e| AuditError::Input {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        std::fs::write(&path, text).map_err(|source| AuditError::Io { path, source })
    }

    /// Reads what [`SpeakerModel::save`] wrote.
    pub fn load(dir: &Path) -> Result<Self, AuditError> {
        let (card, model) = load_package(dir, &Device::flex())?;
        let path = dir.join(CALIBRATION);
        let text = std::fs::read_to_string(&path).map_err(|source| AuditError::Io {
            path: path.clone(),
            source,
        })?;
        let calibration: SpeakerCalibration =
            serde_json::from_str(&text).map_err(|e| AuditError::Input {
                path: path.clone(),
                reason: format!("not a speaker calibration: {e}"),
            })?;
        let features: FeatureConfig =
            serde_json::from_value(card.features.clone()).map_err(|e| AuditError::Input {
                path: dir.to_path_buf(),
                reason: format!("feature config: {e}"),
            })?;
        Ok(Self {
            features,
            model: model.valid(),
            calibration,
            card,
        })
    }
}

/// Trains the speaker model on the training split's speakers and calibrates its
/// threshold on the held-out speakers. `progress` sees `(epoch, mean loss)`.
pub fn train_speaker_model(
    cfg: &SpeakerTrainConfig,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<SpeakerModel, AuditError> {
    if cfg.epochs == 0 || cfg.batch_size == 0 || !(cfg.lr.is_finite() && cfg.lr > 0.0) {
        return Err(AuditError::Option {
            option: "speaker training",
            reason: "epochs and batch size ≥ 1, a positive learning rate".into(),
        });
    }
    let features = speaker_features();
    let clips = load_clips(&cfg.data, &features)?;
    let mut speakers: Vec<String> = clips
        .iter()
        .filter(|c| c.split == Split::Train)
        .map(|c| c.speaker.clone())
        .collect();
    speakers.sort();
    speakers.dedup();
    if speakers.len() < 2 {
        return Err(AuditError::Input {
            path: cfg.data.clone(),
            reason: "the speaker model needs at least 2 training speakers".into(),
        });
    }
    let train: Vec<(&SpeakerClip, usize)> = clips
        .iter()
        .filter(|c| c.split == Split::Train)
        .filter_map(|c| speakers.binary_search(&c.speaker).ok().map(|i| (c, i)))
        .collect();
    let bins = features.dim();
    let io = IoShape {
        frames: frames(),
        bins,
        classes: speakers.len(),
    };
    let arch = ArchConfig::DsCnnS(DsCnnConfig {
        channels: 32,
        blocks: 2,
        dropout: 0.0,
        ..DsCnnConfig::small(io)
    });
    let device = Device::flex().autodiff();
    device.seed(cfg.seed);
    let mut model = arch.init(&device)?;
    let per = frames() * bins;
    let (mean, scale) = {
        let n = (train.len() * frames()).max(1) as f64;
        let mut s = vec![0f64; bins];
        let mut q = vec![0f64; bins];
        for (c, _) in &train {
            for row in c.features.chunks_exact(bins) {
                for (i, &v) in row.iter().enumerate() {
                    s[i] += f64::from(v);
                    q[i] += f64::from(v).powi(2);
                }
            }
        }
        let mean: Vec<f32> = s.iter().map(|v| (v / n) as f32).collect();
        let scale: Vec<f32> = s
            .iter()
            .zip(&q)
            .map(|(a, b)| (1.0 / (b / n - (a / n).powi(2)).max(1e-6).sqrt()) as f32)
            .collect();
        (mean, scale)
    };
    model.set_input_norm(&mean, &scale)?;
    let mut opt = AdamWConfig::new().with_weight_decay(1e-3).init();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let k = speakers.len();
    for epoch in 1..=cfg.epochs {
        order.shuffle(&mut rng);
        let mut loss_sum = 0.0;
        for chunk in order.chunks(cfg.batch_size) {
            let b = chunk.len();
            let mut feats = Vec::with_capacity(b * per);
            let mut targets = vec![0f32; b * k];
            for (i, &j) in chunk.iter().enumerate() {
                feats.extend_from_slice(&train[j].0.features);
                targets[i * k + train[j].1] = 1.0;
            }
            let batch = Batch {
                features: feats,
                targets,
                batch: b,
                frames: frames(),
                bins,
                classes: k,
            };
            let (loss, grads) = loss_and_grads(&model, &batch, &device)?;
            model = apply_grads(&mut opt, cfg.lr, model, grads);
            loss_sum += f64::from(loss) * b as f64;
        }
        progress(epoch, loss_sum / train.len().max(1) as f64);
    }
    let plain = model.valid();
    let features_json = serde_json::to_value(&features).map_err(|e| AuditError::Option {
        option: "features",
        reason: e.to_string(),
    })?;
    let card = ModelCard::new(arch, features_json, speakers.clone(), &plain)?;
    let mut sm = SpeakerModel {
        features,
        model: plain,
        calibration: SpeakerCalibration {
            threshold: 0.5,
            eer: 0.5,
            heldout_speakers: 0,
            trials: [0, 0],
            frames: frames(),
        },
        card,
    };
    // Calibrate on held-out speakers: every pair of their clips.
    let held: Vec<&SpeakerClip> = clips.iter().filter(|c| c.split != Split::Train).collect();
    let mut embs = Vec::with_capacity(held.len());
    for chunk in held.chunks(64) {
        let feats: Vec<f32> = chunk
            .iter()
            .flat_map(|c| c.features.iter().copied())
            .collect();
        embs.extend(sm.embed_features(&feats, chunk.len()));
    }
    let (mut same, mut diff) = (Vec::new(), Vec::new());
    for i in 0..held.len() {
        for j in i + 1..held.len() {
            let s = cosine(&embs[i], &embs[j]);
            if held[i].speaker == held[j].speaker {
                same.push(s);
            } else {
                diff.push(s);
            }
        }
    }
    let (eer, threshold) = equal_error_rate(&same, &diff).ok_or_else(|| AuditError::Input {
        path: cfg.data.clone(),
        reason: "no held-out speaker with two clips: cannot calibrate the speaker threshold".into(),
    })?;
    let mut hs: Vec<&str> = held.iter().map(|c| c.speaker.as_str()).collect();
    hs.sort_unstable();
    hs.dedup();
    sm.calibration = SpeakerCalibration {
        threshold,
        eer,
        heldout_speakers: hs.len(),
        trials: [same.len(), diff.len()],
        frames: frames(),
    };
    Ok(sm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eer_of_separable_and_overlapping_scores() {
        let (eer, t) = equal_error_rate(&[0.8, 0.9, 0.95], &[0.1, 0.2, 0.3]).unwrap();
        assert_eq!(eer, 0.0);
        assert!(t > 0.3 && t <= 0.8, "{t}");
        // One same-speaker trial below one different-speaker trial: 1/4 on each side.
        let same = [0.2, 0.6, 0.7, 0.8];
        let diff = [0.1, 0.3, 0.4, 0.65];
        let (eer, t) = equal_error_rate(&same, &diff).unwrap();
        assert!((eer - 0.25).abs() < 1e-12, "{eer} at {t}");
        assert!(equal_error_rate(&[], &[0.1]).is_none());
    }

    #[test]
    fn cosine_is_scale_free() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-12);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
    }
}
