//! Mel scales and the triangular filterbank, stored sparse (each filter as its first bin
//! and its non-zero weights).
//!
//! Two drawing conventions: Kaldi's (`mel-computations.cc`, `MelBanks::MelBanks`:
//! triangles linear on the mel axis, FFT bins `0..fft/2`) and librosa's
//! (`librosa.filters.mel`: corners mel-spaced, triangles linear in Hz, all `fft/2 + 1`
//! bins), each with or without Slaney area normalisation.

use super::config::{MelLayout, MelNorm, MelOptions, MelScale};

/// Frames computed side by side by [`MelBank::apply_lanes`] (8 f32: two SSE or NEON
/// registers, one AVX register).
pub const LANES: usize = 8;

/// Hz to mel.
pub fn hz_to_mel(hz: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 1127.0 * (1.0 + hz / 700.0).ln(),
        MelScale::Slaney => {
            let f_sp = 200.0 / 3.0;
            let min_log_hz = 1000.0;
            if hz >= min_log_hz {
                min_log_hz / f_sp + (hz / min_log_hz).ln() / (6.4f64.ln() / 27.0)
            } else {
                hz / f_sp
            }
        }
    }
}

/// Mel to Hz.
pub fn mel_to_hz(mel: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 700.0 * ((mel / 1127.0).exp() - 1.0),
        MelScale::Slaney => {
            let f_sp = 200.0 / 3.0;
            let min_log_mel = 1000.0 / f_sp;
            if mel >= min_log_mel {
                1000.0 * ((6.4f64.ln() / 27.0) * (mel - min_log_mel)).exp()
            } else {
                mel * f_sp
            }
        }
    }
}

/// A sparse mel filterbank over `fft / 2 + 1` spectrum bins.
#[derive(Debug, Clone, PartialEq)]
pub struct MelBank {
    /// Per filter: first bin, offset into `weights`, number of weights.
    filters: Vec<(usize, usize, usize)>,
    weights: Vec<f32>,
    num_spectrum_bins: usize,
}

impl MelBank {
    /// Builds the bank for validated options, an FFT of `fft` points at `sample_rate`.
    pub fn new(opts: &MelOptions, sample_rate: u32, fft: usize) -> Self {
        let sr = f64::from(sample_rate);
        let low = f64::from(opts.low_freq);
        let high = f64::from(opts.high_freq_hz(sample_rate));
        let n = opts.num_bins;
        let scale = opts.scale;
        let mel_low = hz_to_mel(low, scale);
        let mel_high = hz_to_mel(high, scale);
        let delta = (mel_high - mel_low) / (n + 1) as f64;
        let num_spectrum_bins = fft / 2 + 1;
        let bin_hz = sr / fft as f64;
        let mut dense = vec![0.0f64; num_spectrum_bins];
        let mut filters = Vec::with_capacity(n);
        let mut weights = Vec::new();
        for j in 0..n {
            let corners = [0, 1, 2].map(|k| mel_low + (j + k) as f64 * delta);
            dense.fill(0.0);
            match opts.layout {
                MelLayout::Kaldi => {
                    let [left, center, right] = corners;
                    for (i, d) in dense.iter_mut().enumerate().take(fft / 2) {
                        let mel = hz_to_mel(bin_hz * i as f64, scale);
                        if mel > left && mel < right {
                            *d = if mel <= center {
                                (mel - left) / (center - left)
                            } else {
                                (right - mel) / (right - center)
                            };
                        }
                    }
                }
                MelLayout::Librosa => {
                    let [l, c, r] = corners.map(|m| mel_to_hz(m, scale));
                    for (i, d) in dense.iter_mut().enumerate() {
                        // librosa: fftfreqs = linspace(0, sr/2, fft/2 + 1)
                        let f = i as f64 * (sr / 2.0) / (num_spectrum_bins - 1) as f64;
                        let lower = (f - l) / (c - l);
                        let upper = (r - f) / (r - c);
                        *d = lower.min(upper).max(0.0);
                    }
                }
            }
            if opts.norm == MelNorm::Slaney {
                let [l, _, r] = corners.map(|m| mel_to_hz(m, scale));
                let e = 2.0 / (r - l);
                dense.iter_mut().for_each(|d| *d *= e);
            }
            let first = dense.iter().position(|&w| w != 0.0).unwrap_or(0);
            let last = dense
                .iter()
                .rposition(|&w| w != 0.0)
                .map_or(first, |p| p + 1);
            filters.push((first, weights.len(), last - first));
            weights.extend(dense[first..last].iter().map(|&w| w as f32));
        }
        Self {
            filters,
            weights,
            num_spectrum_bins,
        }
    }

    /// Number of filters.
    pub fn num_bins(&self) -> usize {
        self.filters.len()
    }

    /// Number of spectrum bins the bank reads.
    pub fn num_spectrum_bins(&self) -> usize {
        self.num_spectrum_bins
    }

    /// The dense weights of filter `j` over all spectrum bins (for tests and plots).
    pub fn dense_filter(&self, j: usize) -> Vec<f32> {
        let mut d = vec![0.0; self.num_spectrum_bins];
        if let Some(&(first, off, len)) = self.filters.get(j) {
            d[first..first + len].copy_from_slice(&self.weights[off..off + len]);
        }
        d
    }

    /// `out[j] = Σ_k w_j[k] · spectrum[k]`.
    pub fn apply(&self, spectrum: &[f32], out: &mut [f32]) {
        for (o, &(first, off, len)) in out.iter_mut().zip(&self.filters) {
            let w = &self.weights[off..off + len];
            let s = &spectrum[first..first + len];
            *o = w.iter().zip(s).map(|(a, b)| a * b).sum();
        }
    }

    /// [`MelBank::apply`] to [`LANES`] frames at once: `spectra[k][l]` is bin `k` of
    /// frame `l`, `out[j][l]` filter `j` of frame `l`. Each frame's sums run in the same
    /// order as in `apply`, so the numbers are identical; the lanes make the loop vectorise
    /// and share each filter's loop overhead among the frames.
    pub fn apply_lanes(&self, spectra: &[[f32; LANES]], out: &mut [[f32; LANES]]) {
        for (o, &(first, off, len)) in out.iter_mut().zip(&self.filters) {
            let w = &self.weights[off..off + len];
            let s = &spectra[first..first + len];
            let mut acc = [0.0f32; LANES];
            for (wk, sk) in w.iter().zip(s) {
                for (a, x) in acc.iter_mut().zip(sk) {
                    *a += wk * x;
                }
            }
            *o = acc;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::config::{FeatureConfig, FeatureKind};

    #[test]
    fn scales_round_trip() {
        for scale in [MelScale::Htk, MelScale::Slaney] {
            for hz in [0.0, 300.0, 1000.0, 4321.0, 8000.0] {
                let back = mel_to_hz(hz_to_mel(hz, scale), scale);
                assert!((back - hz).abs() < 1e-6, "{scale:?} {hz} {back}");
            }
        }
        assert!((hz_to_mel(1000.0, MelScale::Slaney) - 15.0).abs() < 1e-12);
    }

    #[test]
    fn lanes_give_each_frame_the_single_frame_numbers() {
        let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
        let bank = MelBank::new(&cfg.mel, 16_000, 512);
        let frames: Vec<Vec<f32>> = (0..LANES)
            .map(|l| {
                (0..257)
                    .map(|k| ((k * 31 + l * 7) % 97) as f32 * 1.37 + 0.01)
                    .collect()
            })
            .collect();
        let lanes: Vec<[f32; LANES]> = (0..257)
            .map(|k| std::array::from_fn(|l| frames[l][k]))
            .collect();
        let mut out = vec![[0.0; LANES]; 80];
        bank.apply_lanes(&lanes, &mut out);
        for (l, f) in frames.iter().enumerate() {
            let mut single = vec![0.0; 80];
            bank.apply(f, &mut single);
            for (j, s) in single.iter().enumerate() {
                assert_eq!(s.to_bits(), out[j][l].to_bits(), "frame {l} filter {j}");
            }
        }
    }

    #[test]
    fn kaldi_bank_skips_nyquist_and_librosa_area_is_normalised() {
        let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
        let bank = MelBank::new(&cfg.mel, 16_000, 512);
        assert_eq!(bank.num_bins(), 80);
        for j in 0..80 {
            let d = bank.dense_filter(j);
            assert_eq!(d[256], 0.0);
            assert!(d.iter().cloned().fold(0.0, f32::max) <= 1.0);
        }
        let cfg = FeatureConfig::librosa(FeatureKind::Fbank);
        let bank = MelBank::new(&cfg.mel, 16_000, 512);
        // Area normalisation: the triangle's integral over Hz is 1, so sum(w) * bin_hz ~ 1
        // for filters wide enough to be sampled well.
        let d = bank.dense_filter(70);
        let area: f32 = d.iter().sum::<f32>() * 16_000.0 / 512.0;
        assert!((area - 1.0).abs() < 0.05, "{area}");
    }
}
