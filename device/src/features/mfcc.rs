//! MFCC from log mel energies: an orthonormal DCT-II (Kaldi `ComputeDctMatrix`, scipy
//! `dct(type=2, norm="ortho")`), then liftering, then optionally `c0` replaced by the
//! frame's log energy (Kaldi `use_energy`).

use std::f64::consts::PI;

use super::config::{Lifter, MfccOptions};

/// The DCT matrix and lifter coefficients, made once.
#[derive(Debug, Clone, PartialEq)]
pub struct Mfcc {
    /// `num_ceps × num_bins`, row-major.
    dct: Vec<f32>,
    lifter: Vec<f32>,
    num_bins: usize,
    use_energy: bool,
}

impl Mfcc {
    /// For validated options over `num_bins` log mel energies.
    pub fn new(opts: &MfccOptions, num_bins: usize) -> Self {
        let n = num_bins as f64;
        let mut dct = Vec::with_capacity(opts.num_ceps * num_bins);
        for k in 0..opts.num_ceps {
            let norm = if k == 0 {
                (1.0 / n).sqrt()
            } else {
                (2.0 / n).sqrt()
            };
            for i in 0..num_bins {
                dct.push((norm * (PI / n * (i as f64 + 0.5) * k as f64).cos()) as f32);
            }
        }
        let lifter = (0..opts.num_ceps)
            .map(|i| {
                let i = i as f64;
                (match opts.lifter {
                    Lifter::None => 1.0,
                    Lifter::Kaldi(q) => 1.0 + 0.5 * f64::from(q) * (PI * i / f64::from(q)).sin(),
                    Lifter::Librosa(l) => {
                        1.0 + 0.5 * f64::from(l) * (PI * (i + 1.0) / f64::from(l)).sin()
                    }
                }) as f32
            })
            .collect();
        Self {
            dct,
            lifter,
            num_bins,
            use_energy: opts.use_energy,
        }
    }

    /// Cepstra per frame.
    pub fn num_ceps(&self) -> usize {
        self.lifter.len()
    }

    /// Whether `c0` is replaced by the log energy (the caller then computes it).
    pub fn uses_energy(&self) -> bool {
        self.use_energy
    }

    /// Cepstra of `log_mel` into `out` (`num_ceps` values).
    pub fn apply(&self, log_mel: &[f32], log_energy: f32, out: &mut [f32]) {
        for ((o, row), l) in out
            .iter_mut()
            .zip(self.dct.chunks_exact(self.num_bins))
            .zip(&self.lifter)
        {
            let s: f32 = row.iter().zip(log_mel).map(|(a, b)| a * b).sum();
            *o = s * l;
        }
        if self.use_energy {
            if let Some(c0) = out.first_mut() {
                *c0 = log_energy;
            }
        }
    }

    /// The least-squares inverse of [`Mfcc::apply`] (for the privacy audit's waveform
    /// reconstruction): undo the lifter, then apply the transposed DCT. The DCT's rows are
    /// orthonormal, so this is its pseudo-inverse: the cepstra that were dropped come back
    /// as zeros (a smoothed log mel spectrum). With `use_energy`, `ceps[0]` is a log energy,
    /// not a cepstrum: `c0` gives the cepstrum to use in its place (`None`: `ceps[0]` as
    /// given).
    pub fn invert(&self, ceps: &[f32], c0: Option<f32>, log_mel: &mut [f32]) {
        log_mel.iter_mut().for_each(|v| *v = 0.0);
        for (k, ((row, l), &c)) in self
            .dct
            .chunks_exact(self.num_bins)
            .zip(&self.lifter)
            .zip(ceps)
            .enumerate()
        {
            let c = match (k, c0) {
                (0, Some(c0)) => c0,
                _ => c / l,
            };
            for (m, &d) in log_mel.iter_mut().zip(row) {
                *m += d * c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dct_is_orthonormal() {
        let opts = MfccOptions {
            num_ceps: 8,
            lifter: Lifter::None,
            use_energy: false,
        };
        let m = Mfcc::new(&opts, 8);
        for a in 0..8 {
            for b in 0..8 {
                let d: f32 = (0..8).map(|i| m.dct[a * 8 + i] * m.dct[b * 8 + i]).sum();
                let want = if a == b { 1.0 } else { 0.0 };
                assert!((d - want).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn invert_undoes_apply_with_all_cepstra() {
        let opts = MfccOptions {
            num_ceps: 6,
            lifter: Lifter::Kaldi(22.0),
            use_energy: false,
        };
        let m = Mfcc::new(&opts, 6);
        let log_mel = [1.0f32, -2.0, 0.5, 3.0, 0.0, 1.5];
        let mut ceps = [0.0f32; 6];
        m.apply(&log_mel, 0.0, &mut ceps);
        let mut back = [0.0f32; 6];
        m.invert(&ceps, None, &mut back);
        for (a, b) in log_mel.iter().zip(&back) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }
}
