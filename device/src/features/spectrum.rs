//! The FFT stage: a real FFT planned once, its buffers made once, and the power or
//! magnitude spectrum of `fft / 2 + 1` bins. Also the log compression shared by every
//! feature kind.

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

use super::config::{LogKind, SpectrumKind};
use super::mel::LANES;

/// A planned real FFT with its buffers.
pub struct Spectrum {
    fft: Arc<dyn RealToComplex<f32>>,
    input: Vec<f32>,
    output: Vec<Complex<f32>>,
    scratch: Vec<Complex<f32>>,
    kind: SpectrumKind,
}

impl std::fmt::Debug for Spectrum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spectrum")
            .field("fft_size", &self.input.len())
            .field("kind", &self.kind)
            .finish()
    }
}

impl Spectrum {
    /// Plans an FFT of `size` points.
    pub fn new(size: usize, kind: SpectrumKind) -> Self {
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(size);
        let input = fft.make_input_vec();
        let output = fft.make_output_vec();
        let scratch = fft.make_scratch_vec();
        Self {
            fft,
            input,
            output,
            scratch,
            kind,
        }
    }

    /// The FFT input buffer: write the windowed frame at the start, then call
    /// [`Spectrum::compute_into_lane`] with its length (the rest is zeroed there).
    pub fn input_mut(&mut self) -> &mut [f32] {
        &mut self.input
    }

    /// Zero-pads the input after `len` samples, transforms, and writes the power or
    /// magnitude spectrum (`fft / 2 + 1` bins) into lane `lane` of bin-major `lanes`
    /// (`lanes[k][lane]` is bin `k`).
    pub fn compute_into_lane(&mut self, len: usize, lanes: &mut [[f32; LANES]], lane: usize) {
        self.transform(len);
        for (s, c) in lanes.iter_mut().zip(&self.output) {
            s[lane] = bin_value(c, self.kind);
        }
    }

    /// Zero-pads the input after `len` samples and transforms it into `output` (all zero
    /// if the transform refused its buffers, which come from the plan and always fit).
    fn transform(&mut self, len: usize) {
        self.input[len..].fill(0.0);
        if self
            .fft
            .process_with_scratch(&mut self.input, &mut self.output, &mut self.scratch)
            .is_err()
        {
            self.output.fill(Complex::new(0.0, 0.0));
        }
    }
}

/// Power or magnitude of one FFT bin.
#[inline]
fn bin_value(c: &Complex<f32>, kind: SpectrumKind) -> f32 {
    let p = c.re * c.re + c.im * c.im;
    match kind {
        SpectrumKind::Power => p,
        SpectrumKind::Magnitude => p.sqrt(),
    }
}

/// Floors and compresses `values` in place. `floor` must be at least
/// `f32::MIN_POSITIVE` when `log` is not `None` ([`super::FeatureConfig::validate`]
/// checks it).
pub fn compress(values: &mut [f32], log: LogKind, floor: f32) {
    match log {
        LogKind::None => {}
        LogKind::Natural => {
            for v in values {
                *v = ln_normal(v.max(floor).min(f32::MAX));
            }
        }
        LogKind::Decibel => {
            let k = 10.0 / std::f32::consts::LN_10;
            for v in values {
                *v = k * ln_normal(v.max(floor).min(f32::MAX));
            }
        }
    }
}

/// Natural log, branch-free so that loops over it vectorise; within 2e-7 of `f32::ln`
/// (relative, or absolute near 1) for positive normal inputs. Other inputs (0,
/// subnormal, infinite, NaN) go to `f32::ln`.
///
/// `x = 2^e · m` with `m` in `[√½, √2)`, and `ln m = 2 atanh(s)`, `s = (m-1)/(m+1)`,
/// `|s| < 0.172`, by its odd series to `s^9` (truncation below 4e-10).
#[inline]
pub fn fast_ln(x: f32) -> f32 {
    if !(f32::MIN_POSITIVE..=f32::MAX).contains(&x) {
        return x.ln();
    }
    ln_normal(x)
}

/// [`fast_ln`] without the range check: `x` must be positive, normal and finite.
#[inline]
fn ln_normal(x: f32) -> f32 {
    let bits = x.to_bits();
    // Move the mantissa into [√½, √2): subtract the bits of √½ so the exponent rounds.
    let shifted = bits.wrapping_sub(0x3f35_04f3);
    let e = (shifted as i32) >> 23;
    let m = f32::from_bits(bits.wrapping_sub((e as u32) << 23));
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let poly = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0))));
    // ln 2 split in two so that e · ln 2 keeps its precision.
    (e as f32) * 0.693_145_75 + ((e as f32) * 1.428_606_8e-6 + 2.0 * s * poly)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_ln_is_close_to_ln() {
        let mut x = 1e-30f32;
        while x < 1e30 {
            for m in [1.0f32, 1.1, 1.41, 1.42, 1.7, 1.999] {
                let v = x * m;
                let (a, b) = (fast_ln(v), v.ln());
                assert!((a - b).abs() <= 2e-7 * b.abs().max(1.0), "{v}: {a} vs {b}");
            }
            x *= 3.7;
        }
        assert_eq!(fast_ln(1.0), 0.0);
        assert!(fast_ln(0.0).is_infinite() && fast_ln(-1.0).is_nan());
    }

    #[test]
    fn a_bin_centred_sine_lands_in_its_bin() {
        let mut s = Spectrum::new(64, SpectrumKind::Magnitude);
        for (i, x) in s.input_mut().iter_mut().enumerate() {
            *x = (2.0 * std::f32::consts::PI * 5.0 * i as f32 / 64.0).cos();
        }
        let mut lanes = vec![[f32::NAN; LANES]; 33];
        s.compute_into_lane(64, &mut lanes, 3);
        let m: Vec<f32> = lanes.iter().map(|l| l[3]).collect();
        assert!((m[5] - 32.0).abs() < 1e-3);
        assert!(m.iter().enumerate().all(|(i, v)| i == 5 || *v < 1e-3));
    }
}
