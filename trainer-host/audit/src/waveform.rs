//! Features back to audio, as librosa's `mel_to_audio` / `mfcc_to_audio` do it: MFCC →
//! inverse DCT (lifter undone) → log mel; log mel → mel energies; non-negative least
//! squares from the mel filterbank to the STFT spectrum; then Griffin-Lim (fast variant,
//! momentum 0.99, seeded random start phases) with the front-end's own window and frame
//! placement.
//!
//! The front-end itself (filterbank, DCT, window, framing) is hush-device's: nothing is
//! re-derived here. What cannot be undone is approximated and documented: pre-emphasis is
//! divided out of the magnitude (floored), DC removal and dither are ignored, and with
//! Kaldi's `use_energy` the missing `c0` cepstrum is estimated from the frame log energy.
//! Even true features cap the quality (40 Mel bins: STOI ≈ 0.93 on the bundled corpus), so
//! `audit report` scores the true features too, as the ceiling.

use std::sync::Arc;

use hush_device::features::frame::Framing;
use hush_device::features::mel::MelBank;
use hush_device::features::mfcc::Mfcc;
use hush_device::features::window::window;
use hush_device::features::{FeatureConfig, FeatureKind, LogKind, SpectrumKind};
use hush_device::infer::clip_samples;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner, RealToComplex};

use super::AuditError;

/// A short-time Fourier transform with a given window, frame placement and FFT size, and
/// its least-squares inverse (weighted overlap-add).
pub struct Stft {
    win: Vec<f64>,
    framing: Framing,
    frames: usize,
    len: usize,
    fwd: Arc<dyn RealToComplex<f64>>,
    inv: Arc<dyn ComplexToReal<f64>>,
}

impl std::fmt::Debug for Stft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stft")
            .field("framing", &self.framing)
            .field("frames", &self.frames)
            .field("len", &self.len)
            .finish()
    }
}

impl Stft {
    /// The STFT of the front-end `cfg` over `frames` frames of a `len`-sample signal.
    pub fn new(cfg: &FeatureConfig, frames: usize, len: usize) -> Self {
        let framing = Framing::new(&cfg.frame);
        let win = window(cfg.frame.window, framing.win, cfg.frame.periodic_window)
            .into_iter()
            .map(f64::from)
            .collect();
        let mut planner = RealFftPlanner::<f64>::new();
        Self {
            win,
            fwd: planner.plan_fft_forward(framing.fft),
            inv: planner.plan_fft_inverse(framing.fft),
            framing,
            frames,
            len,
        }
    }

    /// Spectrum bins per frame (`fft / 2 + 1`).
    pub fn bins(&self) -> usize {
        self.framing.fft / 2 + 1
    }

    /// Complex spectra, `frames × bins`, row-major.
    pub fn forward(&self, y: &[f64]) -> Vec<Complex<f64>> {
        let fft = self.framing.fft;
        let mut buf = vec![0.0; fft];
        let mut spec = self.fwd.make_output_vec();
        let mut out = Vec::with_capacity(self.frames * self.bins());
        for i in 0..self.frames {
            let start = self.framing.start(i as u64);
            buf.iter_mut().for_each(|v| *v = 0.0);
            for (k, w) in self.win.iter().enumerate() {
                let s = start + k as i64;
                if (0..self.len as i64).contains(&s) {
                    buf[k] = y[s as usize] * w;
                }
            }
            // The buffer and output have the plan's sizes: this cannot fail.
            let _ = self.fwd.process(&mut buf, &mut spec);
            out.extend_from_slice(&spec);
        }
        out
    }

    /// The signal whose STFT is closest (least squares) to `spec` (`frames × bins`).
    pub fn inverse(&self, spec: &[Complex<f64>]) -> Vec<f64> {
        let fft = self.framing.fft;
        let bins = self.bins();
        let mut y = vec![0.0; self.len];
        let mut norm = vec![0.0; self.len];
        let mut buf = vec![0.0; fft];
        let mut s = self.inv.make_input_vec();
        for i in 0..self.frames {
            s.copy_from_slice(&spec[i * bins..(i + 1) * bins]);
            // A real signal's DC and Nyquist bins are real.
            s[0].im = 0.0;
            s[bins - 1].im = 0.0;
            let _ = self.inv.process(&mut s, &mut buf);
            let start = self.framing.start(i as u64);
            for (k, w) in self.win.iter().enumerate() {
                let t = start + k as i64;
                if (0..self.len as i64).contains(&t) {
                    y[t as usize] += buf[k] / fft as f64 * w;
                    norm[t as usize] += w * w;
                }
            }
        }
        for (v, n) in y.iter_mut().zip(&norm) {
            if *n > 1e-10 {
                *v /= n;
            }
        }
        y
    }
}

/// `‖S − |STFT(y)|‖ / ‖S‖` over the whole spectrogram.
pub fn spectral_convergence(stft: &Stft, magnitude: &[f64], y: &[f64]) -> f64 {
    let rebuilt = stft.forward(y);
    let (mut num, mut den) = (0.0, 0.0);
    for (m, c) in magnitude.iter().zip(&rebuilt) {
        num += (m - c.norm()).powi(2);
        den += m * m;
    }
    (num / den.max(1e-30)).sqrt()
}

/// Fast Griffin-Lim (Perraudin et al. 2013; librosa's `griffinlim`, momentum 0.99): a
/// signal whose STFT magnitude approaches `magnitude` (`frames × bins`), from seeded random
/// phases.
pub fn griffin_lim(stft: &Stft, magnitude: &[f64], iterations: usize, seed: u64) -> Vec<f64> {
    let momentum = 0.99;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut angles: Vec<Complex<f64>> = magnitude
        .iter()
        .map(|_| Complex::from_polar(1.0, rng.random_range(0.0..std::f64::consts::TAU)))
        .collect();
    let mut prev = vec![Complex::new(0.0, 0.0); magnitude.len()];
    let mut spec = vec![Complex::new(0.0, 0.0); magnitude.len()];
    for _ in 0..iterations {
        for ((s, a), m) in spec.iter_mut().zip(&angles).zip(magnitude) {
            *s = a * m;
        }
        let y = stft.inverse(&spec);
        let rebuilt = stft.forward(&y);
        for ((a, r), p) in angles.iter_mut().zip(&rebuilt).zip(prev.iter_mut()) {
            let v = r - *p * (momentum / (1.0 + momentum));
            *a = v / (v.norm() + 1e-16);
            *p = *r;
        }
    }
    for ((s, a), m) in spec.iter_mut().zip(&angles).zip(magnitude) {
        *s = a * m;
    }
    stft.inverse(&spec)
}

/// Non-negative least squares, one problem per row: `min ‖A x − b‖², x ≥ 0` with `A`
/// `m × n` (row-major), `b` rows of `m` values, by accelerated projected gradient (FISTA)
/// with step `1/λ_max(AᵀA)`. Returns rows of `n` values.
pub fn nnls_rows(a: &[f64], m: usize, n: usize, b: &[f64], iterations: usize) -> Vec<f64> {
    // λ_max(AᵀA) by power iteration.
    let mut v = vec![1.0 / (n as f64).sqrt(); n];
    let mut lambda = 1.0;
    for _ in 0..50 {
        let av: Vec<f64> = (0..m)
            .map(|i| (0..n).map(|j| a[i * n + j] * v[j]).sum())
            .collect();
        let mut atav: Vec<f64> = vec![0.0; n];
        for i in 0..m {
            for j in 0..n {
                atav[j] += a[i * n + j] * av[i];
            }
        }
        lambda = atav.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-30);
        v = atav.iter().map(|x| x / lambda).collect();
    }
    let step = 1.0 / lambda;
    let rows = b.len() / m;
    let mut out = vec![0.0; rows * n];
    for r in 0..rows {
        let br = &b[r * m..(r + 1) * m];
        // Start from the scaled back-projection, which already matches in total energy.
        let mut x: Vec<f64> = (0..n)
            .map(|j| (0..m).map(|i| a[i * n + j] * br[i]).sum::<f64>().max(0.0))
            .collect();
        let ax: f64 = (0..m)
            .map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum::<f64>())
            .sum();
        let total: f64 = br.iter().sum();
        if ax > 0.0 {
            x.iter_mut().for_each(|v| *v *= total / ax);
        }
        let mut z = x.clone();
        let mut t = 1.0f64;
        for _ in 0..iterations {
            let res: Vec<f64> = (0..m)
                .map(|i| (0..n).map(|j| a[i * n + j] * z[j]).sum::<f64>() - br[i])
                .collect();
            let mut next = z.clone();
            for (j, nx) in next.iter_mut().enumerate() {
                let g: f64 = (0..m).map(|i| a[i * n + j] * res[i]).sum();
                *nx = (*nx - step * g).max(0.0);
            }
            let t_next = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
            for j in 0..n {
                z[j] = next[j] + (t - 1.0) / t_next * (next[j] - x[j]);
            }
            x = next;
            t = t_next;
        }
        out[r * n..(r + 1) * n].copy_from_slice(&x);
    }
    out
}

/// Options of the waveform reconstruction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaveformOptions {
    /// Griffin-Lim iterations.
    pub griffin_lim_iterations: usize,
    /// NNLS iterations per frame.
    pub nnls_iterations: usize,
    /// Seed of Griffin-Lim's start phases.
    pub seed: u64,
}

impl Default for WaveformOptions {
    fn default() -> Self {
        Self {
            griffin_lim_iterations: 64,
            nnls_iterations: 200,
            seed: 0,
        }
    }
}

fn undo_log(v: f32, log: LogKind) -> f64 {
    let v = f64::from(v);
    match log {
        LogKind::None => v.max(0.0),
        LogKind::Natural => v.min(80.0).exp(),
        LogKind::Decibel => 10f64.powf(v.min(400.0) / 10.0),
    }
}

/// The STFT magnitude (`frames × (fft/2 + 1)`, in the units of samples in [-1, 1]) that
/// features `feats` (`frames × cfg.dim()`) describe.
pub fn features_to_magnitude(
    cfg: &FeatureConfig,
    feats: &[f32],
    frames: usize,
    nnls_iterations: usize,
) -> Result<Vec<f64>, AuditError> {
    cfg.validate()?;
    let dim = cfg.dim();
    if feats.len() != frames * dim {
        return Err(AuditError::Option {
            option: "features",
            reason: format!("{} values for {frames} frames of {dim}", feats.len()),
        });
    }
    let fft = cfg.frame.padded_length();
    let bins = fft / 2 + 1;
    let log = cfg.spectrum.log;
    // The spectrum the front-end filtered (power or magnitude, scaled input).
    let spectrum: Vec<f64> = match cfg.kind {
        FeatureKind::Spectrogram => feats.iter().map(|&v| undo_log(v, log)).collect(),
        FeatureKind::Fbank | FeatureKind::Mfcc => {
            let n_mel = cfg.mel.num_bins;
            let bank = MelBank::new(&cfg.mel, cfg.frame.sample_rate, fft);
            let dense: Vec<f64> = (0..n_mel)
                .flat_map(|j| bank.dense_filter(j).into_iter().map(f64::from))
                .collect();
            let log_mel: Vec<f32> = if cfg.kind == FeatureKind::Mfcc {
                let mfcc = Mfcc::new(&cfg.mfcc, n_mel);
                let c0_offset = cfg.mfcc.use_energy.then(|| energy_c0_offset(cfg, &dense));
                let mut out = vec![0.0; frames * n_mel];
                for (row, o) in feats.chunks_exact(dim).zip(out.chunks_exact_mut(n_mel)) {
                    let c0 = c0_offset.map(|off| (n_mel as f32).sqrt() * (row[0] + off));
                    mfcc.invert(row, c0, o);
                }
                out
            } else {
                feats.to_vec()
            };
            let mel: Vec<f64> = log_mel.iter().map(|&v| undo_log(v, log)).collect();
            nnls_rows(&dense, n_mel, bins, &mel, nnls_iterations)
        }
    };
    let scale = f64::from(cfg.frame.input_scale);
    let pre = f64::from(cfg.frame.preemphasis);
    Ok(spectrum
        .chunks_exact(bins)
        .flat_map(|row| {
            row.iter().enumerate().map(move |(k, &s)| {
                let mag = match cfg.spectrum.kind {
                    SpectrumKind::Power => s.max(0.0).sqrt(),
                    SpectrumKind::Magnitude => s.max(0.0),
                };
                // |1 − a·e^{−jω}|, floored so that the lowest bins are not blown up.
                let w = std::f64::consts::PI * k as f64 / (bins - 1) as f64;
                let gain = (1.0 - 2.0 * pre * w.cos() + pre * pre).sqrt().max(0.1);
                mag / scale / gain
            })
        })
        .collect())
}

/// With Kaldi's `use_energy`, `c0` is the frame's log energy `E`, not a cepstrum. For a
/// flat spectrum the mean log mel energy is about `E + ln mean(w²) + mean_j ln Σ_k M_jk`
/// (Parseval over the windowed frame); the DCT's `c0` is `√n` times that mean. Returns the
/// offset added to `E`.
fn energy_c0_offset(cfg: &FeatureConfig, dense: &[f64]) -> f32 {
    let win = window(
        cfg.frame.window,
        cfg.frame.window_length(),
        cfg.frame.periodic_window,
    );
    let w2 = win.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / win.len().max(1) as f64;
    let n_mel = cfg.mel.num_bins;
    let bins = dense.len() / n_mel.max(1);
    let mean_ln_rows = dense
        .chunks_exact(bins.max(1))
        .map(|r| r.iter().sum::<f64>().max(1e-10).ln())
        .sum::<f64>()
        / n_mel.max(1) as f64;
    (w2.max(1e-10).ln() + mean_ln_rows) as f32
}

/// The waveform (`clip_samples(cfg, frames)` samples in [-1, 1]) that features `feats`
/// describe: magnitude by [`features_to_magnitude`], phase by [`griffin_lim`]; peak-limited
/// to 0.99.
pub fn features_to_waveform(
    cfg: &FeatureConfig,
    feats: &[f32],
    frames: usize,
    opts: &WaveformOptions,
) -> Result<Vec<f32>, AuditError> {
    let mag = features_to_magnitude(cfg, feats, frames, opts.nnls_iterations)?;
    let stft = Stft::new(cfg, frames, clip_samples(cfg, frames));
    let y = griffin_lim(&stft, &mag, opts.griffin_lim_iterations, opts.seed);
    let peak = y.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    let gain = if peak > 0.99 { 0.99 / peak } else { 1.0 };
    Ok(y.iter().map(|&v| (v * gain) as f32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(n: usize) -> Vec<f64> {
        (0..n)
            .map(|i| {
                let t = i as f64 / 16_000.0;
                0.3 * (2.0 * std::f64::consts::PI * (300.0 + 900.0 * t) * t).sin()
                    + 0.1 * (2.0 * std::f64::consts::PI * 1700.0 * t).sin()
            })
            .collect()
    }

    /// The STFT of `cfg` over `frames` frames and a test signal of its length.
    fn stft_and_tone(cfg: &FeatureConfig, frames: usize) -> (Stft, Vec<f64>) {
        let n = clip_samples(cfg, frames);
        (Stft::new(cfg, frames, n), tone(n))
    }

    #[test]
    fn stft_inverse_reconstructs_the_signal() {
        let (stft, x) = stft_and_tone(&FeatureConfig::kaldi(FeatureKind::Fbank), 40);
        let y = stft.inverse(&stft.forward(&x));
        // Kaldi's povey window is zero at both ends: the first and last sample are in no
        // frame's support and cannot come back.
        let n = x.len();
        let err = x[1..n - 1]
            .iter()
            .zip(&y[1..n - 1])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        assert!(err < 1e-9, "{err}");
    }

    #[test]
    fn griffin_lim_recovers_a_known_magnitude() {
        let (stft, x) = stft_and_tone(&FeatureConfig::librosa(FeatureKind::Fbank), 60);
        let mag: Vec<f64> = stft.forward(&x).iter().map(|c| c.norm()).collect();
        let random = griffin_lim(&stft, &mag, 0, 1);
        let y = griffin_lim(&stft, &mag, 100, 1);
        let (sc0, sc) = (
            spectral_convergence(&stft, &mag, &random),
            spectral_convergence(&stft, &mag, &y),
        );
        assert!(sc < 0.1 && sc < sc0 / 4.0, "{sc0} → {sc}");
    }

    #[test]
    fn nnls_fits_a_mel_projection_without_negative_values() {
        let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
        let bank = MelBank::new(&cfg.mel, 16_000, 512);
        let (m, n) = (bank.num_bins(), bank.num_spectrum_bins());
        let a: Vec<f64> = (0..m)
            .flat_map(|j| bank.dense_filter(j).into_iter().map(f64::from))
            .collect();
        let truth: Vec<f64> = (0..n)
            .map(|k| 1.0 + (k as f64 * 0.07).sin().powi(2))
            .collect();
        let b: Vec<f64> = (0..m)
            .map(|i| (0..n).map(|j| a[i * n + j] * truth[j]).sum())
            .collect();
        let x = nnls_rows(&a, m, n, &b, 500);
        assert!(x.iter().all(|&v| v >= 0.0));
        let fit: Vec<f64> = (0..m)
            .map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum())
            .collect();
        let rel = (fit
            .iter()
            .zip(&b)
            .map(|(p, q)| (p - q).powi(2))
            .sum::<f64>()
            / b.iter().map(|q| q * q).sum::<f64>())
        .sqrt();
        assert!(rel < 1e-3, "{rel}");
    }

    #[test]
    fn true_fbank_features_give_back_intelligible_speech() {
        use hush_device::audio::read_audio;
        use hush_device::infer::{clip_features, fit_clip};
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/corpus/kws/yes/f95727ef_nohash_0.flac");
        let audio = read_audio(&path).unwrap();
        for (kind, floor) in [(FeatureKind::Fbank, 0.85), (FeatureKind::Mfcc, 0.7)] {
            let mut cfg = FeatureConfig::kaldi(kind);
            cfg.mel.num_bins = 40;
            cfg.mfcc.use_energy = false;
            let x = fit_clip(&audio.samples, clip_samples(&cfg, 98));
            let f = clip_features(&cfg, &x, 98).unwrap();
            let y = features_to_waveform(&cfg, &f, 98, &WaveformOptions::default()).unwrap();
            let s = crate::stoi(&x, &y, 16_000).unwrap();
            // The ceiling of any feature inversion (the field notes: 0.946 at 40 bins).
            assert!(s > floor, "{kind:?}: STOI {s}");
        }
    }
}
