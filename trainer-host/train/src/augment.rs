//! Augmentation for cross-voice generalisation: on the waveform (LPC resynthesis at a new
//! pitch, release bursts at word ends, speed, time shift, synthetic reverberation, gain,
//! background noise), on the features (vocal-tract-length perturbation, SpecAugment time
//! warp and time and frequency masks), and on the batch (mixup).
//!
//! Every transform keeps the example's length and is the identity at zero strength.

use std::sync::Arc;

use super::burst::add_release_burst;
use super::resynth::resynthesize;
use super::signal::rms;
use hush_device::features::mel::{hz_to_mel, mel_to_hz};
use hush_device::features::{FeatureConfig, FeatureKind, MelScale};
use rand::Rng;
use rand_distr::{Beta, Distribution, StandardNormal};
use realfft::RealFftPlanner;
use serde::{Deserialize, Serialize};

/// Augmentation options (all off: [`Augment::none`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Augment {
    /// Speed perturbation: factor uniform in `[1 − speed, 1 + speed]` (resampling, so
    /// pitch moves too — a cheap vocal-tract and rate change).
    pub speed: f32,
    /// Largest time shift, in seconds, either way.
    pub shift_s: f32,
    /// Gain uniform in `±gain_db`.
    pub gain_db: f32,
    /// Probability of mixing in background noise.
    pub noise_prob: f32,
    /// Signal-to-noise ratio range in dB.
    pub snr_db: [f32; 2],
    /// SpecAugment: number of time masks and their largest width (frames).
    pub time_masks: (usize, usize),
    /// SpecAugment time warp ([`warp_time`]): the largest distance in frames a random
    /// point of the example moves, the frames either side stretched or squeezed to
    /// follow — sounds' durations change relative to each other; 0 = off.
    #[serde(default)]
    pub time_warp: usize,
    /// SpecAugment: number of frequency masks and their largest width (bins).
    pub freq_masks: (usize, usize),
    /// Mixup Beta(α, α); 0 = off.
    pub mixup_alpha: f32,
    /// Vocal-tract-length perturbation (Jaitly & Hinton 2013): log-mel features warped
    /// along frequency by a factor uniform in `[1 − vtlp, 1 + vtlp]` ([`MelAxis::warp`];
    /// fbank features only); 0 = off.
    #[serde(default)]
    pub vtlp: f32,
    /// Probability of convolving with a synthetic room impulse response
    /// ([`synthetic_rir`]); 0 = off.
    #[serde(default)]
    pub reverb_prob: f32,
    /// Reverberation time (RT60) range of the synthetic rooms, in seconds.
    #[serde(default)]
    pub rt60_s: [f32; 2],
    /// Probability of LPC resynthesis at a new pitch ([`resynthesize`]): the clip's
    /// envelope over a pulse-train excitation, pitch moved without the formants; 0 = off.
    #[serde(default)]
    pub resynth_prob: f32,
    /// Range of the resynthesised clip's median pitch in Hz, drawn log-uniformly.
    #[serde(default)]
    pub resynth_f0_hz: [f32; 2],
    /// Probability of a release burst at the end of the clip's speech
    /// ([`add_release_burst`]): how a released word-final stop sounds; 0 = off.
    #[serde(default)]
    pub release_burst_prob: f32,
}

/// The default range of [`Augment::resynth_f0_hz`]: low men to high women and children.
pub const RESYNTH_F0_HZ: [f32; 2] = [80.0, 320.0];

impl Default for Augment {
    fn default() -> Self {
        Self {
            speed: 0.1,
            shift_s: 0.1,
            gain_db: 6.0,
            noise_prob: 0.8,
            snr_db: [5.0, 30.0],
            time_masks: (2, 10),
            time_warp: 0,
            freq_masks: (2, 5),
            mixup_alpha: 0.0,
            vtlp: 0.1,
            reverb_prob: 0.3,
            rt60_s: [0.1, 0.6],
            resynth_prob: 0.0,
            resynth_f0_hz: RESYNTH_F0_HZ,
            release_burst_prob: 0.0,
        }
    }
}

impl Augment {
    /// No augmentation.
    pub fn none() -> Self {
        Self {
            speed: 0.0,
            shift_s: 0.0,
            gain_db: 0.0,
            noise_prob: 0.0,
            snr_db: [0.0, 0.0],
            time_masks: (0, 0),
            time_warp: 0,
            freq_masks: (0, 0),
            mixup_alpha: 0.0,
            vtlp: 0.0,
            reverb_prob: 0.0,
            rt60_s: [0.0, 0.0],
            resynth_prob: 0.0,
            resynth_f0_hz: RESYNTH_F0_HZ,
            release_burst_prob: 0.0,
        }
    }

    /// Scales the widest SpecAugment masks and the time warp, set for 98 frames × 40 bins
    /// (the defaults), to `frames × bins`: a 10-frame mask hides a fifth of a 49-frame
    /// example.
    pub fn fit_masks(&mut self, frames: usize, bins: usize) {
        let scale = |w: usize, n: usize, of: usize| ((w * n) as f32 / of as f32).round() as usize;
        self.time_masks.1 = scale(self.time_masks.1, frames, 98);
        self.time_warp = scale(self.time_warp, frames, 98);
        self.freq_masks.1 = scale(self.freq_masks.1, bins, 40);
    }

    /// A perturbed copy of `clip` (same length).
    pub fn waveform<R: Rng>(
        &self,
        clip: &[f32],
        noises: &[Vec<f32>],
        sample_rate: u32,
        rng: &mut R,
    ) -> Vec<f32> {
        self.waveform_tracking(clip, noises, sample_rate, 0, rng).0
    }

    /// [`Augment::waveform`], also saying where sample `mark` of `clip` went (speed and
    /// shift move it; clamped to the clip).
    pub fn waveform_tracking<R: Rng>(
        &self,
        clip: &[f32],
        noises: &[Vec<f32>],
        sample_rate: u32,
        mark: usize,
        rng: &mut R,
    ) -> (Vec<f32>, usize) {
        let n = clip.len();
        let mut at = mark as f64;
        let resynthesised;
        let clip = if self.resynth_prob > 0.0 && rng.random::<f32>() < self.resynth_prob {
            let [lo, hi] = self.resynth_f0_hz.map(|f| f.max(1.0).ln());
            let f0 = rng.random_range(lo..=hi.max(lo)).exp();
            resynthesised = resynthesize(clip, sample_rate, f0, rng);
            &resynthesised[..]
        } else {
            clip
        };
        let burst;
        let clip = if self.release_burst_prob > 0.0 && rng.random::<f32>() < self.release_burst_prob
        {
            burst = add_release_burst(clip, sample_rate, rng);
            &burst[..]
        } else {
            clip
        };
        let mut x = if self.speed > 0.0 {
            let f = 1.0 + rng.random_range(-self.speed..=self.speed);
            at /= f64::from(f);
            resample_linear(clip, f)
        } else {
            clip.to_vec()
        };
        x.resize(n, 0.0);
        if self.shift_s > 0.0 {
            let max = (self.shift_s * sample_rate as f32) as i64;
            let s = rng.random_range(-max..=max);
            at += s as f64;
            x = shift(&x, s);
        }
        if self.reverb_prob > 0.0 && rng.random::<f32>() < self.reverb_prob {
            let (lo, hi) = (self.rt60_s[0], self.rt60_s[1].max(self.rt60_s[0]));
            let rir = synthetic_rir(rng.random_range(lo..=hi), sample_rate, rng);
            x = reverberate(&x, &rir);
        }
        if self.gain_db > 0.0 {
            let g = 10f32.powf(rng.random_range(-self.gain_db..=self.gain_db) / 20.0);
            x.iter_mut().for_each(|v| *v *= g);
        }
        if !noises.is_empty() && self.noise_prob > 0.0 && rng.random::<f32>() < self.noise_prob {
            let noise = &noises[rng.random_range(0..noises.len())];
            if noise.len() >= n {
                let start = rng.random_range(0..=noise.len() - n);
                let seg = &noise[start..start + n];
                let nrms = rms(seg).max(1e-8);
                let srms = rms(&x);
                let level = if srms < 1e-3 {
                    rng.random_range(0.0..0.05)
                } else {
                    let snr = rng.random_range(self.snr_db[0]..=self.snr_db[1].max(self.snr_db[0]));
                    srms * 10f32.powf(-snr / 20.0)
                };
                let g = level / nrms;
                x.iter_mut().zip(seg).for_each(|(v, w)| *v += g * w);
            }
        }
        x.iter_mut().for_each(|v| *v = v.clamp(-1.0, 1.0));
        (x, (at.max(0.0) as usize).min(n))
    }

    /// Vocal-tract-length perturbation of one example's features (`frames × bins`) on
    /// `axis` (None: features that are not log-mel, left alone).
    pub fn warp<R: Rng>(&self, feats: &mut [f32], axis: Option<&MelAxis>, rng: &mut R) {
        if let (Some(axis), true) = (axis, self.vtlp > 0.0) {
            let alpha = 1.0 + rng.random_range(-self.vtlp..=self.vtlp);
            axis.warp(feats, f64::from(alpha));
        }
    }

    /// SpecAugment on one example's features (`frames × bins`): the time warp, then
    /// masks filled with `fill` (the per-bin mean, so masked values normalise to 0).
    pub fn spec<R: Rng>(&self, feats: &mut [f32], bins: usize, fill: &[f32], rng: &mut R) {
        let frames = feats.len() / bins.max(1);
        let w = self.time_warp;
        if w > 0 && frames > 2 * w + 2 {
            let from = rng.random_range(w + 1..frames - w - 1);
            let to = rng.random_range(from - w..=from + w);
            warp_time(feats, bins, from, to);
        }
        let (nt, wt) = self.time_masks;
        for _ in 0..nt {
            let w = rng.random_range(0..=wt.min(frames));
            let t0 = rng.random_range(0..=frames - w);
            for t in t0..t0 + w {
                feats[t * bins..(t + 1) * bins].copy_from_slice(&fill[..bins]);
            }
        }
        let (nf, wf) = self.freq_masks;
        for _ in 0..nf {
            let w = rng.random_range(0..=wf.min(bins));
            let f0 = rng.random_range(0..=bins - w);
            for t in 0..frames {
                for f in f0..f0 + w {
                    feats[t * bins + f] = fill[f];
                }
            }
        }
    }

    /// Mixup over a batch in place: example `i` becomes `λ·x_i + (1−λ)·x_π(i)`, targets
    /// likewise, with one λ ~ Beta(α, α) per batch.
    pub fn mixup<R: Rng>(&self, feats: &mut [f32], targets: &mut [f32], batch: usize, rng: &mut R) {
        if self.mixup_alpha <= 0.0 || batch < 2 {
            return;
        }
        let Ok(beta) = Beta::new(self.mixup_alpha, self.mixup_alpha) else {
            return;
        };
        let lam: f32 = beta.sample(rng);
        let fd = feats.len() / batch;
        let td = targets.len() / batch;
        let mut perm: Vec<usize> = (0..batch).collect();
        rand::seq::SliceRandom::shuffle(&mut perm[..], rng);
        let f0 = feats.to_vec();
        let t0 = targets.to_vec();
        for (i, &j) in perm.iter().enumerate() {
            for k in 0..fd {
                feats[i * fd + k] = lam * f0[i * fd + k] + (1.0 - lam) * f0[j * fd + k];
            }
            for k in 0..td {
                targets[i * td + k] = lam * t0[i * td + k] + (1.0 - lam) * t0[j * td + k];
            }
        }
    }
}

/// SpecAugment's time warp (Park et al. 2019) of one example's features (`frames ×
/// bins`): frame `from` moves to `to` (both strictly inside), the frames before it
/// stretched or squeezed linearly to fill `0..=to` and those after to fill
/// `to..frames`, each output frame interpolated between its two nearest source frames.
/// The first and last frames stay; `from == to` is the identity.
pub fn warp_time(feats: &mut [f32], bins: usize, from: usize, to: usize) {
    let frames = feats.len() / bins.max(1);
    if from == to
        || frames < 3
        || !(1..frames - 1).contains(&from)
        || !(1..frames - 1).contains(&to)
    {
        return;
    }
    let src = feats.to_vec();
    let last = (frames - 1) as f64;
    let (from, to) = (from as f64, to as f64);
    for t in 0..frames {
        let t_out = t as f64;
        let s = if t_out <= to {
            t_out * from / to
        } else {
            from + (t_out - to) * (last - from) / (last - to)
        };
        let i = (s.floor() as usize).min(frames - 1);
        let j = (i + 1).min(frames - 1);
        let a = (s - i as f64) as f32;
        for b in 0..bins {
            feats[t * bins + b] = (1.0 - a) * src[i * bins + b] + a * src[j * bins + b];
        }
    }
}

/// The mel positions of a log-mel feature vector's bins, for warping features along
/// frequency. Bin `k`'s centre is `low + (k + 1)·step` on the mel axis, under both the
/// Kaldi and the librosa filterbank layouts ([`hush_device::features::mel`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MelAxis {
    low_mel: f64,
    step: f64,
    scale: MelScale,
    bins: usize,
}

impl MelAxis {
    /// The axis of `cfg`'s features; None unless they are fbank (log-mel) features.
    pub fn of(cfg: &FeatureConfig) -> Option<Self> {
        if cfg.kind != FeatureKind::Fbank || cfg.mel.num_bins == 0 {
            return None;
        }
        let sr = cfg.frame.sample_rate;
        let low_mel = hz_to_mel(f64::from(cfg.mel.low_freq), cfg.mel.scale);
        let high_mel = hz_to_mel(f64::from(cfg.mel.high_freq_hz(sr)), cfg.mel.scale);
        Some(Self {
            low_mel,
            step: (high_mel - low_mel) / (cfg.mel.num_bins + 1) as f64,
            scale: cfg.mel.scale,
            bins: cfg.mel.num_bins,
        })
    }

    /// Warps features (`frames × bins`) in place by `alpha`: output bin `k` takes the
    /// input's value at frequency `f_k / alpha` (linear interpolation between bin centres,
    /// edge bins held), so `alpha > 1` moves formants up, as a shorter vocal tract does.
    /// `alpha = 1` leaves the features unchanged.
    pub fn warp(&self, feats: &mut [f32], alpha: f64) {
        if alpha == 1.0 || !(alpha.is_finite() && alpha > 0.0) || self.bins == 0 {
            return;
        }
        let last = (self.bins - 1) as f64;
        let source: Vec<(usize, f32)> = (0..self.bins)
            .map(|k| {
                let hz = mel_to_hz(self.low_mel + (k + 1) as f64 * self.step, self.scale);
                let pos = (hz_to_mel(hz / alpha, self.scale) - self.low_mel) / self.step - 1.0;
                let pos = pos.clamp(0.0, last);
                let i = (pos.floor() as usize).min(self.bins - 1);
                (i, (pos - i as f64) as f32)
            })
            .collect();
        let mut row = vec![0f32; self.bins];
        for frame in feats.chunks_exact_mut(self.bins) {
            row.copy_from_slice(frame);
            for (v, &(i, a)) in frame.iter_mut().zip(&source) {
                let next = row[(i + 1).min(self.bins - 1)];
                *v = row[i] + a * (next - row[i]);
            }
        }
    }
}

/// Direct-to-reverberant energy ratio range of [`synthetic_rir`], in dB.
const DRR_DB: [f32; 2] = [0.0, 12.0];

/// A synthetic room impulse response (Polack's model): a unit direct path, then Gaussian
/// noise decaying exponentially to −60 dB at `rt60` seconds, scaled to a
/// direct-to-reverberant ratio drawn from 0–12 dB. `rt60 <= 0` gives the unit impulse.
pub fn synthetic_rir<R: Rng>(rt60: f32, sample_rate: u32, rng: &mut R) -> Vec<f32> {
    let len = (rt60.max(0.0) * sample_rate as f32) as usize;
    let mut h = vec![0f32; len.max(1)];
    h[0] = 1.0;
    if len < 2 {
        return h;
    }
    // Amplitude falls 60 dB (a factor 1000) over `rt60`: exp(−ln(1000)·t/rt60).
    let decay = (1000f32).ln() / len as f32;
    for (i, v) in h.iter_mut().enumerate().skip(1) {
        let n: f32 = rng.sample(StandardNormal);
        *v = n * (-decay * i as f32).exp();
    }
    let tail: f32 = h[1..].iter().map(|v| v * v).sum();
    let drr = rng.random_range(DRR_DB[0]..=DRR_DB[1]);
    let g = (10f32.powf(-drr / 10.0) / tail.max(1e-12)).sqrt();
    h[1..].iter_mut().for_each(|v| *v *= g);
    h
}

/// `x` convolved with `rir` (FFT), cut to `x`'s length and rescaled to `x`'s RMS.
pub fn reverberate(x: &[f32], rir: &[f32]) -> Vec<f32> {
    if x.is_empty() || rir.is_empty() {
        return x.to_vec();
    }
    let n = (x.len() + rir.len() - 1).next_power_of_two();
    let mut planner = RealFftPlanner::<f32>::new();
    let fwd: Arc<dyn realfft::RealToComplex<f32>> = planner.plan_fft_forward(n);
    let inv = planner.plan_fft_inverse(n);
    let spectrum = |sig: &[f32]| {
        let mut buf = vec![0f32; n];
        buf[..sig.len()].copy_from_slice(sig);
        let mut out = fwd.make_output_vec();
        // Lengths come from the plan, so the transform cannot fail.
        let _ = fwd.process(&mut buf, &mut out);
        out
    };
    let mut a = spectrum(x);
    let b = spectrum(rir);
    a.iter_mut().zip(&b).for_each(|(p, q)| *p *= q);
    let mut y = inv.make_output_vec();
    let _ = inv.process(&mut a, &mut y);
    y.truncate(x.len());
    let scale = rms(x) / rms(&y).max(1e-12);
    y.iter_mut().for_each(|v| *v *= scale);
    y
}

/// Plays `x` `factor` times faster (linear interpolation): `x.len() / factor` samples.
pub fn resample_linear(x: &[f32], factor: f32) -> Vec<f32> {
    if x.is_empty() || factor <= 0.0 {
        return x.to_vec();
    }
    let n = ((x.len() as f32) / factor) as usize;
    (0..n)
        .map(|i| {
            let p = i as f32 * factor;
            let k = p as usize;
            let a = p - k as f32;
            let v0 = x.get(k).copied().unwrap_or(0.0);
            let v1 = x.get(k + 1).copied().unwrap_or(v0);
            v0 + a * (v1 - v0)
        })
        .collect()
}

/// Shifts right by `s` samples (left when negative), zero-filled.
pub fn shift(x: &[f32], s: i64) -> Vec<f32> {
    let n = x.len() as i64;
    (0..n)
        .map(|i| {
            let j = i - s;
            if (0..n).contains(&j) {
                x[j as usize]
            } else {
                0.0
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn waveform_keeps_length_and_none_is_identity() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let clip: Vec<f32> = (0..1600).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
        let noise = vec![vec![0.1f32; 4000]];
        let y = Augment::default().waveform(&clip, &noise, 16_000, &mut rng);
        assert_eq!(y.len(), clip.len());
        assert_ne!(y, clip);
        let z = Augment::none().waveform(&clip, &noise, 16_000, &mut rng);
        assert_eq!(z, clip);
    }

    #[test]
    fn masks_scale_with_the_feature_shape() {
        let mut aug = Augment {
            time_warp: 8,
            ..Augment::default()
        };
        aug.fit_masks(98, 40);
        assert_eq!((aug.time_masks, aug.freq_masks), ((2, 10), (2, 5)));
        assert_eq!(aug.time_warp, 8);
        aug.fit_masks(49, 20);
        assert_eq!((aug.time_masks, aug.freq_masks), ((2, 5), (2, 3)));
        assert_eq!(aug.time_warp, 4);
    }

    #[test]
    fn time_warp_moves_a_frame_and_keeps_the_ends() {
        // Two bins per frame: the frame's index, and a click at frame 10 of 30.
        let bins = 2;
        let frames = 30;
        let ramp: Vec<f32> = (0..frames)
            .flat_map(|t| [t as f32, if t == 10 { 1.0 } else { 0.0 }])
            .collect();
        let mut same = ramp.clone();
        warp_time(&mut same, bins, 10, 10);
        assert_eq!(same, ramp);
        for to in [5usize, 16] {
            let mut f = ramp.clone();
            warp_time(&mut f, bins, 10, to);
            let index: Vec<f32> = f.iter().step_by(2).copied().collect();
            let click: Vec<f32> = f.iter().skip(1).step_by(2).copied().collect();
            // Output frame `to` reads source frame 10; the ends stay; time runs forward.
            assert!((index[to] - 10.0).abs() < 1e-5, "{index:?}");
            assert_eq!((index[0], index[frames - 1]), (0.0, 29.0));
            assert!(index.windows(2).all(|w| w[1] > w[0]), "{index:?}");
            // The click moved from frame 10 to frame `to`, at full height.
            let peak = (0..frames).max_by(|&a, &b| click[a].total_cmp(&click[b]));
            assert_eq!((peak, click[to]), (Some(to), 1.0));
        }
        // A warp to or from the edge, or out of range, leaves the features alone.
        for (from, to) in [(0, 5), (10, 29), (10, 40)] {
            let mut f = ramp.clone();
            warp_time(&mut f, bins, from, to);
            assert_eq!(f, ramp);
        }
    }

    #[test]
    fn spec_augment_time_warp_draws_only_when_on() {
        // Off, the warp draws nothing: the masks fall where they fell before it existed.
        let feats: Vec<f32> = (0..49 * 4).map(|i| i as f32).collect();
        let fill = [0.0f32; 4];
        let masks = Augment {
            time_masks: (1, 5),
            ..Augment::none()
        };
        let (mut a, mut b) = (feats.clone(), feats.clone());
        masks.spec(
            &mut a,
            4,
            &fill,
            &mut rand_chacha::ChaCha8Rng::seed_from_u64(5),
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let w = rng.random_range(0..=5usize);
        let t0 = rng.random_range(0..=49 - w);
        b[t0 * 4..(t0 + w) * 4].fill(0.0);
        assert_eq!(a, b);
        // On, frames move but the first and last stay, and nothing is masked.
        let warp = Augment {
            time_warp: 6,
            ..Augment::none()
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
        let mut moved = 0;
        for _ in 0..20 {
            let mut f = feats.clone();
            warp.spec(&mut f, 4, &fill, &mut rng);
            assert_eq!((&f[..4], &f[48 * 4..]), (&feats[..4], &feats[48 * 4..]));
            moved += usize::from(f != feats);
        }
        assert!(moved >= 15, "only {moved} of 20 warped");
    }

    #[test]
    fn mixup_targets_stay_distributions() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let aug = Augment {
            mixup_alpha: 0.4,
            ..Augment::none()
        };
        let mut f = vec![1.0, 2.0, 3.0, 4.0];
        let mut t = vec![1.0, 0.0, 0.0, 1.0];
        aug.mixup(&mut f, &mut t, 2, &mut rng);
        assert!((t[0] + t[1] - 1.0).abs() < 1e-6 && (t[2] + t[3] - 1.0).abs() < 1e-6);
    }

    fn fbank40() -> FeatureConfig {
        let mut cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
        cfg.mel.num_bins = 40;
        cfg
    }

    #[test]
    fn warp_is_identity_at_one_and_moves_peaks_with_alpha() {
        let axis = MelAxis::of(&fbank40()).unwrap();
        let frames = 3;
        let mut peak = vec![0f32; frames * 40];
        for t in 0..frames {
            peak[t * 40 + 20] = 1.0;
        }
        let mut same = peak.clone();
        axis.warp(&mut same, 1.0);
        assert_eq!(same, peak);
        let argmax_row = |f: &[f32]| super::super::metrics::argmax(&f[..40]);
        let mut up = peak.clone();
        axis.warp(&mut up, 1.15);
        let mut down = peak.clone();
        axis.warp(&mut down, 0.85);
        assert_eq!(up.len(), peak.len());
        assert!(
            argmax_row(&up) > 20,
            "alpha > 1 raises: {}",
            argmax_row(&up)
        );
        assert!(
            argmax_row(&down) < 20,
            "alpha < 1 lowers: {}",
            argmax_row(&down)
        );
        // Every frame is warped alike.
        assert_eq!(&up[..40], &up[80..120]);
        // A flat spectrum stays flat (interpolation between equal values).
        let mut flat = vec![2.5f32; frames * 40];
        axis.warp(&mut flat, 0.9);
        assert!(flat.iter().all(|v| (v - 2.5).abs() < 1e-6));
        assert!(MelAxis::of(&FeatureConfig::kaldi(FeatureKind::Mfcc)).is_none());
    }

    #[test]
    fn vtlp_off_leaves_features_alone() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let axis = MelAxis::of(&fbank40()).unwrap();
        let f: Vec<f32> = (0..80).map(|i| (i as f32).sin()).collect();
        let mut g = f.clone();
        Augment::none().warp(&mut g, Some(&axis), &mut rng);
        assert_eq!(f, g);
        let mut h = f.clone();
        Augment {
            vtlp: 0.2,
            ..Augment::none()
        }
        .warp(&mut h, Some(&axis), &mut rng);
        assert_eq!(h.len(), f.len());
        assert_ne!(h, f);
    }

    #[test]
    fn rir_decays_and_has_a_unit_direct_path() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let h = synthetic_rir(0.4, 16_000, &mut rng);
        assert_eq!(h.len(), 6_400);
        assert_eq!(h[0], 1.0);
        let energy = |s: &[f32]| s.iter().map(|v| v * v).sum::<f32>();
        // The first 10 % of the tail holds more energy than the last 10 % (−54 dB lower).
        assert!(energy(&h[1..641]) > 100.0 * energy(&h[5_760..]));
        // Direct-to-reverberant ratio within 0–12 dB.
        let drr = 10.0 * (1.0 / energy(&h[1..])).log10();
        assert!((-0.01..=12.01).contains(&drr), "DRR {drr} dB");
        assert_eq!(synthetic_rir(0.0, 16_000, &mut rng), vec![1.0]);
    }

    #[test]
    fn reverb_keeps_length_and_level_and_a_unit_impulse_is_identity() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let clip: Vec<f32> = (0..4000).map(|i| (i as f32 * 0.07).sin() * 0.2).collect();
        let dry = reverberate(&clip, &[1.0]);
        assert!(dry.iter().zip(&clip).all(|(a, b)| (a - b).abs() < 1e-5));
        let wet = reverberate(&clip, &synthetic_rir(0.5, 16_000, &mut rng));
        assert_eq!(wet.len(), clip.len());
        assert!((rms(&wet) - rms(&clip)).abs() < 1e-4);
        assert!(wet.iter().zip(&clip).any(|(a, b)| (a - b).abs() > 1e-3));
        // A delayed impulse delays the signal.
        let late = reverberate(&clip, &[0.0, 0.0, 1.0]);
        assert!(late[2..]
            .iter()
            .zip(&clip)
            .all(|(a, b)| (a - b).abs() < 1e-5));
    }

    #[test]
    fn speed_gain_reverb_resynthesis_and_bursts_alone_keep_length() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
        let mut clip: Vec<f32> = (0..1600).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
        clip.resize(3200, 0.0); // silence after the speech, where a burst goes
        for aug in [
            Augment {
                speed: 0.2,
                ..Augment::none()
            },
            Augment {
                gain_db: 6.0,
                ..Augment::none()
            },
            Augment {
                reverb_prob: 1.0,
                rt60_s: [0.2, 0.4],
                ..Augment::none()
            },
            Augment {
                resynth_prob: 1.0,
                ..Augment::none()
            },
            Augment {
                release_burst_prob: 1.0,
                ..Augment::none()
            },
        ] {
            let y = aug.waveform(&clip, &[], 16_000, &mut rng);
            assert_eq!(y.len(), clip.len());
            assert_ne!(y, clip);
        }
        // Gain scales without changing shape.
        let g = Augment {
            gain_db: 6.0,
            ..Augment::none()
        }
        .waveform(&clip, &[], 16_000, &mut rng);
        let ratio = g[100] / clip[100];
        assert!(g
            .iter()
            .zip(&clip)
            .all(|(a, b)| (a - ratio * b).abs() < 1e-5));
    }
}
