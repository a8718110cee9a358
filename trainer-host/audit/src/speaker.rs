//! A small speaker-embedding model for the audit's speaker-similarity score, x-vector
//! style at toy scale: statistics pooling (per-bin mean and standard deviation over the
//! clip's voiced frames) of the 40-bin Kaldi fbank, then a one-hidden-layer network
//! (64 ReLU units) trained by hush with a softmax over the corpus's training speakers
//! (Adam, full batch). The embedding is the hidden layer (the penultimate one), centred by
//! the training clips' mean embedding. Two clips are scored by the cosine of their
//! embeddings (length-normalised); the same-speaker decision uses the
//! equal-error-rate threshold measured on held-out speakers (validation and test splits,
//! which share no speaker with training).
//!
//! It is written in plain Rust (a few thousand weights) so that it trains in about a
//! second on two cores; it is saved as one JSON file ([`SpeakerModel::save`]).

use std::path::{Path, PathBuf};

use hush_device::audio::read_audio;
use hush_device::dataset::{read_corpus, Layout, Split, Target, SILENCE};
use hush_device::features::{compute, FeatureConfig, FeatureKind};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};

use super::AuditError;

/// The file [`SpeakerModel::save`] writes inside its directory.
pub const SPEAKER_JSON: &str = "speaker.json";

/// Hidden (embedding) width.
const HIDDEN: usize = 64;

/// Options of [`train_speaker_model`].
#[derive(Debug, Clone, PartialEq)]
pub struct SpeakerTrainConfig {
    /// Corpus (Speech Commands layout with speaker ids).
    pub data: PathBuf,
    /// Full-batch Adam steps.
    pub steps: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Seed of the initial weights.
    pub seed: u64,
}

impl SpeakerTrainConfig {
    /// Defaults: 400 steps, lr 1e-2, seed 0.
    pub fn new(data: &Path) -> Self {
        Self {
            data: data.to_path_buf(),
            steps: 400,
            lr: 1e-2,
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
}

/// A trained speaker-embedding model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpeakerModel {
    /// The front-end it reads.
    pub features: FeatureConfig,
    /// Training speakers (the softmax classes).
    pub speakers: Vec<String>,
    /// Input standardisation: mean of the pooled statistics.
    pub input_mean: Vec<f32>,
    /// Input standardisation: inverse standard deviation.
    pub input_scale: Vec<f32>,
    /// Hidden layer, `inputs × HIDDEN`, row-major.
    pub w1: Vec<f32>,
    /// Hidden bias.
    pub b1: Vec<f32>,
    /// Classifier, `HIDDEN × speakers`.
    pub w2: Vec<f32>,
    /// Classifier bias.
    pub b2: Vec<f32>,
    /// Mean embedding of the training clips, subtracted before scoring (ReLU embeddings
    /// all lie in the positive orthant, where every cosine is high; centred, the cosine
    /// of two clips measures how they differ from the average voice). Empty in models
    /// saved before centring: scored uncentred.
    #[serde(default)]
    pub embedding_mean: Vec<f32>,
    /// Decision threshold and EER.
    pub calibration: SpeakerCalibration,
}

/// The speaker model's front-end: 40-bin Kaldi fbank, 25/10 ms.
pub fn speaker_features() -> FeatureConfig {
    let mut f = FeatureConfig::kaldi(FeatureKind::Fbank);
    f.mel.num_bins = 40;
    f
}

/// Pooled statistics per clip: two per Mel bin and two of pitch.
pub fn stats_len(cfg: &FeatureConfig) -> usize {
    2 * cfg.dim() + 2
}

/// Pitch of one frame by normalised autocorrelation over 60–400 Hz: `ln F0`, or `None`
/// where the best peak is under 0.5 (unvoiced). The period is the first local peak within
/// 90 % of the best one, so that multiples of the period (as high on a periodic signal)
/// do not halve the pitch.
fn log_pitch(frame: &[f32], rate: f64) -> Option<f64> {
    let (lo, hi) = ((rate / 400.0) as usize, (rate / 60.0) as usize);
    let n = frame.len();
    if n <= hi + 1 || lo < 2 {
        return None;
    }
    // Prefix sums of squares: the energy of any sub-slice in O(1).
    let mut sq = Vec::with_capacity(n + 1);
    sq.push(0.0);
    for &v in frame {
        sq.push(sq[sq.len() - 1] + f64::from(v) * f64::from(v));
    }
    let r: Vec<f64> = (lo - 1..=hi + 1)
        .map(|lag| {
            let dot: f64 = frame[..n - lag]
                .iter()
                .zip(&frame[lag..])
                .map(|(&x, &y)| f64::from(x) * f64::from(y))
                .sum();
            dot / ((sq[n - lag] - sq[0]) * (sq[n] - sq[lag]))
                .sqrt()
                .max(1e-12)
        })
        .collect();
    let best = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if best < 0.5 {
        return None;
    }
    // r[i] is lag lo − 1 + i; peaks are looked for strictly inside.
    (1..r.len() - 1)
        .find(|&i| r[i] >= 0.9 * best && r[i] >= r[i - 1] && r[i] >= r[i + 1])
        .map(|i| (rate / (lo - 1 + i) as f64).ln())
}

/// Statistics pooling: per-bin mean and standard deviation over the frames whose mean
/// log Mel energy is within 3 (natural log, 13 dB) of the loudest frame's — the voiced
/// part; all frames when fewer than 5 pass — then the mean and standard deviation of
/// `ln F0` over every other such frame's 40 ms window, where voiced (0 and 0 when none
/// is).
pub fn pooled_stats(cfg: &FeatureConfig, samples: &[f32]) -> Result<Vec<f32>, AuditError> {
    let f = compute(cfg, samples)?;
    let d = f.dim;
    let energy: Vec<f32> = f
        .data
        .chunks_exact(d)
        .map(|r| r.iter().sum::<f32>() / d as f32)
        .collect();
    let top = energy.iter().cloned().fold(f32::MIN, f32::max);
    let mut rows: Vec<&[f32]> = f
        .data
        .chunks_exact(d)
        .zip(&energy)
        .filter(|(_, &e)| e >= top - 3.0)
        .map(|(r, _)| r)
        .collect();
    if rows.len() < 5 {
        rows = f.data.chunks_exact(d).collect();
    }
    let n = rows.len().max(1) as f64;
    let mut out = vec![0f32; 2 * d];
    for j in 0..d {
        let m = rows.iter().map(|r| f64::from(r[j])).sum::<f64>() / n;
        let v = rows
            .iter()
            .map(|r| (f64::from(r[j]) - m).powi(2))
            .sum::<f64>()
            / n;
        out[j] = m as f32;
        out[d + j] = v.sqrt() as f32;
    }
    // Pitch at half the rate (pairs averaged: F0 ≤ 400 Hz is far below the new Nyquist),
    // on every other loud frame: a quarter of the work, the same statistics.
    let half: Vec<f32> = samples
        .chunks_exact(2)
        .map(|p| 0.5 * (p[0] + p[1]))
        .collect();
    let rate = f64::from(cfg.frame.sample_rate) / 2.0;
    let shift = cfg.frame.window_shift() / 2;
    let window = (rate * 0.04) as usize;
    let pitches: Vec<f64> = energy
        .iter()
        .enumerate()
        .filter(|(_, &e)| e >= top - 3.0)
        .step_by(2)
        .filter_map(|(i, _)| half.get(i * shift..i * shift + window))
        .filter_map(|w| log_pitch(w, rate))
        .collect();
    if !pitches.is_empty() {
        let k = pitches.len() as f64;
        let m = pitches.iter().sum::<f64>() / k;
        let v = pitches.iter().map(|p| (p - m).powi(2)).sum::<f64>() / k;
        out.push(m as f32);
        out.push(v.sqrt() as f32);
    } else {
        out.extend([0.0, 0.0]);
    }
    Ok(out)
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
    let mut best = (f64::INFINITY, 0.0, 0.0);
    for &t in &thresholds {
        let frr = same.iter().filter(|&&s| s < t).count() as f64 / same.len() as f64;
        let far = different.iter().filter(|&&s| s >= t).count() as f64 / different.len() as f64;
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
    stats: Vec<f32>,
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
            stats: pooled_stats(features, &audio.samples)?,
        });
    }
    Ok(out)
}

impl SpeakerModel {
    fn hidden(&self, stats: &[f32]) -> Vec<f32> {
        let x: Vec<f32> = stats
            .iter()
            .zip(&self.input_mean)
            .zip(&self.input_scale)
            .map(|((v, m), s)| (v - m) * s)
            .collect();
        let mut h = self.b1.clone();
        for (i, &xi) in x.iter().enumerate() {
            for (hj, w) in h.iter_mut().zip(&self.w1[i * HIDDEN..(i + 1) * HIDDEN]) {
                *hj += xi * w;
            }
        }
        h.iter_mut().for_each(|v| *v = v.max(0.0));
        h
    }

    /// The hidden layer of pooled statistics, centred by the training mean embedding.
    fn embedding(&self, stats: &[f32]) -> Vec<f32> {
        let mut h = self.hidden(stats);
        h.iter_mut()
            .zip(&self.embedding_mean)
            .for_each(|(v, m)| *v -= m);
        h
    }

    /// The embedding of one clip (`samples` at the model's rate), centred.
    pub fn embed(&self, samples: &[f32]) -> Result<Vec<f32>, AuditError> {
        Ok(self.embedding(&pooled_stats(&self.features, samples)?))
    }

    /// Cosine score of two clips and the same-speaker decision.
    pub fn compare(&self, a: &[f32], b: &[f32]) -> Result<(f64, bool), AuditError> {
        let s = cosine(&self.embed(a)?, &self.embed(b)?);
        Ok((s, s >= self.calibration.threshold))
    }

    /// Writes `dir/speaker.json`.
    pub fn save(&self, dir: &Path) -> Result<(), AuditError> {
        std::fs::create_dir_all(dir).map_err(|source| AuditError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(SPEAKER_JSON);
        let text = serde_json::to_string(self).map_err(|e| AuditError::Input {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&path, text).map_err(|source| AuditError::Io { path, source })
    }

    /// Reads what [`SpeakerModel::save`] wrote, checking the sizes.
    pub fn load(dir: &Path) -> Result<Self, AuditError> {
        let path = dir.join(SPEAKER_JSON);
        let text = std::fs::read_to_string(&path).map_err(|source| AuditError::Io {
            path: path.clone(),
            source,
        })?;
        let m: Self = serde_json::from_str(&text).map_err(|e| AuditError::Input {
            path: path.clone(),
            reason: format!("not a hush speaker model: {e}"),
        })?;
        let d = stats_len(&m.features);
        let k = m.speakers.len();
        if m.input_mean.len() != d
            || m.input_scale.len() != d
            || m.w1.len() != d * HIDDEN
            || m.b1.len() != HIDDEN
            || m.w2.len() != HIDDEN * k
            || m.b2.len() != k
            || !(m.embedding_mean.is_empty() || m.embedding_mean.len() == HIDDEN)
        {
            return Err(AuditError::Input {
                path,
                reason: "weight sizes do not match the front-end and speaker list".into(),
            });
        }
        m.features.validate()?;
        Ok(m)
    }
}

struct Adam {
    m: Vec<f64>,
    v: Vec<f64>,
    t: i32,
}

impl Adam {
    fn new(n: usize) -> Self {
        Self {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }
    fn step(&mut self, w: &mut [f32], g: &[f64], lr: f64) {
        self.t += 1;
        let (b1, b2) = (0.9f64, 0.999f64);
        for i in 0..w.len() {
            self.m[i] = b1 * self.m[i] + (1.0 - b1) * g[i];
            self.v[i] = b2 * self.v[i] + (1.0 - b2) * g[i] * g[i];
            let mh = self.m[i] / (1.0 - b1.powi(self.t));
            let vh = self.v[i] / (1.0 - b2.powi(self.t));
            w[i] -= (lr * mh / (vh.sqrt() + 1e-8)) as f32;
        }
    }
}

/// Trains the speaker model on the training split's speakers and calibrates its
/// threshold on the held-out speakers. `progress` sees `(step, mean loss)` every 50 steps.
pub fn train_speaker_model(
    cfg: &SpeakerTrainConfig,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<SpeakerModel, AuditError> {
    if cfg.steps == 0 || !(cfg.lr.is_finite() && cfg.lr > 0.0) {
        return Err(AuditError::Option {
            option: "speaker training",
            reason: "at least 1 step and a positive learning rate".into(),
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
    let d = stats_len(&features);
    let k = speakers.len();
    let n = train.len() as f64;
    let mut input_mean = vec![0f32; d];
    let mut input_scale = vec![0f32; d];
    for j in 0..d {
        let m = train
            .iter()
            .map(|(c, _)| f64::from(c.stats[j]))
            .sum::<f64>()
            / n;
        let v = train
            .iter()
            .map(|(c, _)| (f64::from(c.stats[j]) - m).powi(2))
            .sum::<f64>()
            / n;
        input_mean[j] = m as f32;
        input_scale[j] = (1.0 / v.max(1e-8).sqrt()) as f32;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let init = |fan_in: usize, len: usize, rng: &mut ChaCha8Rng| -> Vec<f32> {
        let std = (2.0 / fan_in as f64).sqrt();
        let normal = Normal::new(0.0, std).unwrap_or_else(|_| unreachable!("std > 0"));
        (0..len).map(|_| normal.sample(rng) as f32).collect()
    };
    let mut model = SpeakerModel {
        w1: init(d, d * HIDDEN, &mut rng),
        b1: vec![0.0; HIDDEN],
        w2: init(HIDDEN, HIDDEN * k, &mut rng),
        b2: vec![0.0; k],
        embedding_mean: Vec::new(),
        features,
        speakers: speakers.clone(),
        input_mean,
        input_scale,
        calibration: SpeakerCalibration {
            threshold: 0.5,
            eer: 0.5,
            heldout_speakers: 0,
            trials: [0, 0],
        },
    };
    let (mut a1, mut ab1, mut a2, mut ab2) = (
        Adam::new(d * HIDDEN),
        Adam::new(HIDDEN),
        Adam::new(HIDDEN * k),
        Adam::new(k),
    );
    let mut order: Vec<usize> = (0..train.len()).collect();
    for step in 1..=cfg.steps {
        order.shuffle(&mut rng);
        let (mut g1, mut gb1, mut g2, mut gb2) = (
            vec![0.0; d * HIDDEN],
            vec![0.0; HIDDEN],
            vec![0.0; HIDDEN * k],
            vec![0.0; k],
        );
        let mut loss = 0.0;
        for &i in &order {
            let (clip, y) = train[i];
            let x: Vec<f32> = clip
                .stats
                .iter()
                .zip(&model.input_mean)
                .zip(&model.input_scale)
                .map(|((v, m), s)| (v - m) * s)
                .collect();
            let h = model.hidden(&clip.stats);
            let mut z = model.b2.clone();
            for (j, &hj) in h.iter().enumerate() {
                for (zc, w) in z.iter_mut().zip(&model.w2[j * k..(j + 1) * k]) {
                    *zc += hj * w;
                }
            }
            let max = z.iter().cloned().fold(f32::MIN, f32::max);
            let e: Vec<f64> = z.iter().map(|&v| f64::from(v - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            loss += -(e[y] / sum).ln();
            let dz: Vec<f64> = e
                .iter()
                .enumerate()
                .map(|(c, &v)| (v / sum - f64::from(u8::from(c == y))) / n)
                .collect();
            let mut dh = vec![0.0; HIDDEN];
            for j in 0..HIDDEN {
                for c in 0..k {
                    g2[j * k + c] += f64::from(h[j]) * dz[c];
                    dh[j] += f64::from(model.w2[j * k + c]) * dz[c];
                }
                if h[j] <= 0.0 {
                    dh[j] = 0.0;
                }
            }
            for (g, v) in gb2.iter_mut().zip(&dz) {
                *g += v;
            }
            for (i, &xi) in x.iter().enumerate() {
                for j in 0..HIDDEN {
                    g1[i * HIDDEN + j] += f64::from(xi) * dh[j];
                }
            }
            for (g, v) in gb1.iter_mut().zip(&dh) {
                *g += v;
            }
        }
        a1.step(&mut model.w1, &g1, cfg.lr);
        ab1.step(&mut model.b1, &gb1, cfg.lr);
        a2.step(&mut model.w2, &g2, cfg.lr);
        ab2.step(&mut model.b2, &gb2, cfg.lr);
        if step % 50 == 0 || step == cfg.steps {
            progress(step, loss / n);
        }
    }
    // Centre on the training clips' mean embedding.
    let mut centre = vec![0f64; HIDDEN];
    for (clip, _) in &train {
        for (c, h) in centre.iter_mut().zip(model.hidden(&clip.stats)) {
            *c += f64::from(h) / n;
        }
    }
    model.embedding_mean = centre.iter().map(|&c| c as f32).collect();
    // Calibrate on held-out speakers: every pair of their clips.
    let held: Vec<&SpeakerClip> = clips.iter().filter(|c| c.split != Split::Train).collect();
    let embs: Vec<Vec<f32>> = held.iter().map(|c| model.embedding(&c.stats)).collect();
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
    model.calibration = SpeakerCalibration {
        threshold,
        eer,
        heldout_speakers: hs.len(),
        trials: [same.len(), diff.len()],
    };
    Ok(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pitch_of_a_tone_and_none_for_noise() {
        let rate = 16_000.0;
        for f0 in [110.0, 200.0, 310.0] {
            // A harmonic tone: the fundamental and two overtones.
            let tone: Vec<f32> = (0..640)
                .map(|i| {
                    let t = i as f64 / rate;
                    (1..=3)
                        .map(|h| (2.0 * std::f64::consts::PI * f0 * h as f64 * t).sin() / h as f64)
                        .sum::<f64>() as f32
                })
                .collect();
            let got = log_pitch(&tone, rate).unwrap().exp();
            assert!((got - f0).abs() < 0.03 * f0, "{f0} Hz: got {got}");
        }
        let mut s = 1u64;
        let noise: Vec<f32> = (0..640)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        assert_eq!(log_pitch(&noise, rate), None);
        assert_eq!(
            log_pitch(&noise[..100], rate),
            None,
            "shorter than the longest lag"
        );
    }

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
