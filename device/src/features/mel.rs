//! Mel scales and the triangular filterbank, stored sparse (each filter as its first bin
//! and its non-zero weights).
//!
//! Two drawing conventions: Kaldi's (`mel-computations.cc`, `MelBanks::MelBanks`:
//! triangles linear on the mel axis, FFT bins `0..fft/2`) and librosa's
//! (`librosa.filters.mel`: corners mel-spaced, triangles linear in Hz, all `fft/2 + 1`
//! bins), each with or without Slaney area normalisation.

use super::config::{MelLayout, MelNorm, MelOptions, MelScale};

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

/// Frames computed side by side by [`MelBank::apply_lanes`], and filters by
/// [`MelBank::apply_lane`] (8 f32: two SSE or NEON registers, one AVX register).
pub const LANES: usize = 8;

/// A sparse mel filterbank over `fft / 2 + 1` spectrum bins.
#[derive(Debug, Clone, PartialEq)]
pub struct MelBank {
    /// Per filter: first bin, offset into `weights`, number of weights.
    filters: Vec<(usize, usize, usize)>,
    weights: Vec<f32>,
    /// Per group of [`LANES`] consecutive filters: the first bin any of them weighs, how
    /// many bins they span, and the offset into `group_weights`.
    groups: Vec<(usize, usize, usize)>,
    /// Each group's weights bin by bin, one lane per filter (0 outside the filter).
    group_weights: Vec<[f32; LANES]>,
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
        let mut groups = Vec::new();
        let mut group_weights = Vec::new();
        for group in filters.chunks(LANES) {
            let first = group.iter().map(|f| f.0).min().unwrap_or(0);
            let end = group.iter().map(|f| f.0 + f.2).max().unwrap_or(first);
            groups.push((first, end - first, group_weights.len()));
            group_weights.extend((first..end).map(|bin| {
                let mut lanes = [0.0f32; LANES];
                for (lane, &(f_first, off, len)) in lanes.iter_mut().zip(group) {
                    if (f_first..f_first + len).contains(&bin) {
                        *lane = weights[off + bin - f_first];
                    }
                }
                lanes
            }));
        }
        Self {
            filters,
            weights,
            groups,
            group_weights,
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

    /// `out[j] = Σ_k w_j[k] · spectrum[k]` for [`LANES`] frames at once: `spectra[k][l]`
    /// is bin `k` of frame `l`, `out[j][l]` filter `j` of frame `l`. Each sum is taken from
    /// the filter's first bin up, one term at a time; the lanes make the loop vectorise and
    /// share each filter's loop overhead among the frames.
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

    /// [`MelBank::apply_lanes`] for the one frame in lane `lane` (a stream's frame on its
    /// own), with the same numbers bit for bit, for a spectrum of finite, non-negative
    /// values: [`LANES`] filters run side by side, each in one vector lane, over the bins
    /// any of them covers, and a lane adds `0 · spectrum[k]` (exactly 0) outside its filter.
    /// A lone frame costs about half of `apply_lanes`'s eight.
    pub fn apply_lane(&self, spectra: &[[f32; LANES]], lane: usize, out: &mut [[f32; LANES]]) {
        let groups = self.groups.iter().zip(out.chunks_mut(LANES));
        for (&(first, len, off), out) in groups {
            let mut acc = [0.0f32; LANES];
            let weights = &self.group_weights[off..off + len];
            for (w, s) in weights.iter().zip(&spectra[first..first + len]) {
                let s = s[lane];
                for (a, w) in acc.iter_mut().zip(w) {
                    *a += w * s;
                }
            }
            for (o, a) in out.iter_mut().zip(acc) {
                o[lane] = a;
            }
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
    fn every_frame_sums_each_filter_from_its_first_bin_up_alone_or_in_lanes() {
        for cfg in [
            FeatureConfig::kaldi(FeatureKind::Fbank),
            FeatureConfig::librosa(FeatureKind::Fbank),
        ] {
            let mut mel = cfg.mel.clone();
            for n in [80, 20, 13] {
                mel.num_bins = n;
                let bank = MelBank::new(&mel, 16_000, 512);
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
                let mut block = vec![[f32::NAN; LANES]; n];
                bank.apply_lanes(&lanes, &mut block);
                let mut alone = vec![[f32::NAN; LANES]; n];
                for lane in 0..LANES {
                    bank.apply_lane(&lanes, lane, &mut alone);
                }
                for (l, frame) in frames.iter().enumerate() {
                    for j in 0..n {
                        let (first, off, len) = bank.filters[j];
                        let w = &bank.weights[off..off + len];
                        let want = w
                            .iter()
                            .zip(&frame[first..])
                            .fold(0.0f32, |acc, (w, s)| acc + w * s);
                        for got in [block[j][l], alone[j][l]] {
                            assert_eq!(got.to_bits(), want.to_bits(), "{n} filters: {j}, {l}");
                        }
                    }
                }
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
