//! Augmentation for cross-voice generalisation: on the waveform (speed, time shift,
//! gain, background noise), on the features (SpecAugment time and frequency masks), and
//! on the batch (mixup).

use rand::Rng;
use rand_distr::{Beta, Distribution};
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
    /// SpecAugment: number of frequency masks and their largest width (bins).
    pub freq_masks: (usize, usize),
    /// Mixup Beta(α, α); 0 = off.
    pub mixup_alpha: f32,
}

impl Default for Augment {
    fn default() -> Self {
        Self {
            speed: 0.1,
            shift_s: 0.1,
            gain_db: 6.0,
            noise_prob: 0.8,
            snr_db: [5.0, 30.0],
            time_masks: (2, 10),
            freq_masks: (2, 5),
            mixup_alpha: 0.0,
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
            freq_masks: (0, 0),
            mixup_alpha: 0.0,
        }
    }

    /// A perturbed copy of `clip` (same length).
    pub fn waveform<R: Rng>(
        &self,
        clip: &[f32],
        noises: &[Vec<f32>],
        sample_rate: u32,
        rng: &mut R,
    ) -> Vec<f32> {
        let n = clip.len();
        let mut x = if self.speed > 0.0 {
            let f = 1.0 + rng.random_range(-self.speed..=self.speed);
            resample_linear(clip, f)
        } else {
            clip.to_vec()
        };
        x.resize(n, 0.0);
        if self.shift_s > 0.0 {
            let max = (self.shift_s * sample_rate as f32) as i64;
            let s = rng.random_range(-max..=max);
            x = shift(&x, s);
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
        x
    }

    /// SpecAugment on one example's features (`frames × bins`), masking with `fill`
    /// (the per-bin mean, so masked values normalise to 0).
    pub fn spec<R: Rng>(&self, feats: &mut [f32], bins: usize, fill: &[f32], rng: &mut R) {
        let frames = feats.len() / bins.max(1);
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

fn rms(x: &[f32]) -> f32 {
    if x.is_empty() {
        return 0.0;
    }
    (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt()
}

/// Plays `x` `factor` times faster (linear interpolation).
fn resample_linear(x: &[f32], factor: f32) -> Vec<f32> {
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
fn shift(x: &[f32], s: i64) -> Vec<f32> {
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
}
