//! The FFT stage: a transform planned once, its buffers made once, and the power or
//! magnitude spectrum of `fft / 2 + 1` bins. Also the log compression shared by every
//! feature kind.
//!
//! An even-sized real frame is written in place as half as many complex points (even
//! samples real, odd samples imaginary) and transformed by one complex FFT; the split
//! into the real spectrum (a real FFT's "post-processing") is fused with the power, in
//! blocks the compiler vectorises, so no complex spectrum is ever written. Through the
//! `realfft` crate that split cost more than the FFT itself (about 5 000 of 7 000
//! instructions per 512-point frame, by callgrind). Odd sizes, which no preset uses, are
//! transformed whole, as complex points with no imaginary part.

use std::sync::Arc;

use num_complex::Complex;
use rustfft::Fft;

use super::config::{LogKind, SpectrumKind};
use super::mel::LANES;

/// How a frame is transformed.
enum Plan {
    /// Even size `n`: an `n / 2`-point complex FFT, then the fused split and power.
    Half {
        fft: Arc<dyn Fft<f32>>,
        /// The frame, `n` samples as `n / 2` complex points: the FFT's input and output.
        points: Vec<Complex<f32>>,
        scratch: Vec<Complex<f32>>,
        /// `cos(2πk/n)` and `-sin(2πk/n)` for `k < n / 4 + 1`.
        twiddles: Vec<(f32, f32)>,
    },
    /// Odd size `n`: an `n`-point complex FFT of the real frame, then a power loop.
    Whole {
        fft: Arc<dyn Fft<f32>>,
        /// The frame, `n` samples.
        input: Vec<f32>,
        /// The frame as complex points, then its spectrum.
        points: Vec<Complex<f32>>,
        scratch: Vec<Complex<f32>>,
    },
}

/// A forward complex FFT of `len` points, with rustfft's fastest code for this CPU.
fn plan_forward(len: usize) -> Arc<dyn Fft<f32>> {
    rustfft::FftPlanner::new().plan_fft_forward(len)
}

/// A planned FFT with its buffers.
pub struct Spectrum {
    plan: Plan,
    size: usize,
    /// The spectrum of the last frame, `fft / 2 + 1` bins.
    bins: Vec<f32>,
    kind: SpectrumKind,
}

impl std::fmt::Debug for Spectrum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spectrum")
            .field("fft_size", &self.size)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Spectrum {
    /// Plans an FFT of `size` points (at least 1).
    pub fn new(size: usize, kind: SpectrumKind) -> Self {
        let plan = if size.is_multiple_of(2) && size >= 2 {
            let half = size / 2;
            let fft = plan_forward(half);
            let scratch = vec![Complex::new(0.0, 0.0); fft.get_inplace_scratch_len()];
            let twiddles = (0..half / 2 + 1)
                .map(|k| {
                    let a = 2.0 * std::f64::consts::PI * k as f64 / size as f64;
                    (a.cos() as f32, -a.sin() as f32)
                })
                .collect();
            Plan::Half {
                fft,
                points: vec![Complex::new(0.0, 0.0); half],
                scratch,
                twiddles,
            }
        } else {
            let fft = plan_forward(size);
            Plan::Whole {
                input: vec![0.0; size],
                points: vec![Complex::new(0.0, 0.0); size],
                scratch: vec![Complex::new(0.0, 0.0); fft.get_inplace_scratch_len()],
                fft,
            }
        };
        Self {
            plan,
            size,
            bins: vec![0.0; size / 2 + 1],
            kind,
        }
    }

    /// The FFT input buffer: write the windowed frame at the start, then call
    /// [`Spectrum::compute_into_lane`] with its length (the rest is zeroed there).
    pub fn input_mut(&mut self) -> &mut [f32] {
        match &mut self.plan {
            Plan::Half { points, .. } => bytemuck::cast_slice_mut(points),
            Plan::Whole { input, .. } => input,
        }
    }

    /// Zero-pads the input after `len` samples, transforms, and writes the power or
    /// magnitude spectrum (`fft / 2 + 1` bins) into lane `lane` of bin-major `lanes`
    /// (`lanes[k][lane]` is bin `k`).
    pub fn compute_into_lane(&mut self, len: usize, lanes: &mut [[f32; LANES]], lane: usize) {
        self.compute(len);
        for (s, v) in lanes.iter_mut().zip(&self.bins) {
            s[lane] = *v;
        }
    }

    /// Zero-pads the input after `len` samples and fills `bins` with its power or
    /// magnitude spectrum.
    fn compute(&mut self, len: usize) {
        self.input_mut()[len..].fill(0.0);
        match &mut self.plan {
            Plan::Half {
                fft,
                points,
                scratch,
                twiddles,
            } => {
                fft.process_with_scratch(points, scratch);
                split_power(points, twiddles, &mut self.bins);
            }
            Plan::Whole {
                fft,
                input,
                points,
                scratch,
            } => {
                for (p, x) in points.iter_mut().zip(input.iter()) {
                    *p = Complex::new(*x, 0.0);
                }
                fft.process_with_scratch(points, scratch);
                for (b, c) in self.bins.iter_mut().zip(points.iter()) {
                    *b = c.norm_sqr();
                }
            }
        }
        if self.kind == SpectrumKind::Magnitude {
            for b in &mut self.bins {
                *b = b.sqrt();
            }
        }
    }
}

/// The power spectrum `|X[k]|²`, `k = 0..=m`, of the real signal `x` of `2m` samples from
/// `z = FFT_m(x[2j] + i·x[2j+1])`: bins `k` and `m - k` both come from the pair
/// `z[k]`, `z[m-k]` ([`split_pair`]). Pairs go in blocks of [`SPLIT_BLOCK`] with one
/// bounds check each, which the compiler turns into vector code.
fn split_power(z: &[Complex<f32>], twiddles: &[(f32, f32)], bins: &mut [f32]) {
    const B: usize = SPLIT_BLOCK;
    let m = z.len();
    let z0 = z[0];
    bins[0] = (z0.re + z0.im) * (z0.re + z0.im);
    bins[m] = (z0.re - z0.im) * (z0.re - z0.im);
    let pairs = (m - 1) / 2;
    let mut k = 1;
    while k + B <= pairs + 1 {
        let a: &[Complex<f32>; B] = z[k..k + B].try_into().expect("block of B");
        let b: &[Complex<f32>; B] = z[m + 1 - k - B..m + 1 - k].try_into().expect("block of B");
        let w: &[(f32, f32); B] = twiddles[k..k + B].try_into().expect("block of B");
        let (mut lo, mut hi) = ([0.0f32; B], [0.0f32; B]);
        for j in 0..B {
            (lo[j], hi[B - 1 - j]) = split_pair(a[j], b[B - 1 - j], w[j]);
        }
        bins[k..k + B].copy_from_slice(&lo);
        bins[m + 1 - k - B..m + 1 - k].copy_from_slice(&hi);
        k += B;
    }
    for k in k..=pairs {
        (bins[k], bins[m - k]) = split_pair(z[k], z[m - k], twiddles[k]);
    }
    if m.is_multiple_of(2) {
        // k = m / 2 pairs with itself: X[m/2] is the conjugate of z[m/2].
        bins[m / 2] = z[m / 2].norm_sqr();
    }
}

/// Pairs per block in [`split_power`]: one AVX register of f32.
const SPLIT_BLOCK: usize = 8;

/// `(|X[k]|², |X[m-k]|²)` from `a = z[k]`, `b = z[m-k]` and `w = e^{-2πik/2m}`:
/// `2X[k] = (a + b̄) + w·(-i)(a - b̄)`, and `X[m-k]` is the same with `w` mirrored
/// (`w' = -w̄`).
#[inline(always)]
fn split_pair(a: Complex<f32>, b: Complex<f32>, (c, s): (f32, f32)) -> (f32, f32) {
    let (er, ei) = (a.re + b.re, a.im - b.im);
    let (or, oi) = (a.im + b.im, b.re - a.re);
    let t1 = c * or - s * oi;
    let t2 = c * oi + s * or;
    (
        0.25 * ((er + t1) * (er + t1) + (ei + t2) * (ei + t2)),
        0.25 * ((er - t1) * (er - t1) + (t2 - ei) * (t2 - ei)),
    )
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

    /// Power spectrum by a direct DFT in f64.
    fn dft_power(x: &[f32]) -> Vec<f64> {
        let n = x.len();
        (0..n / 2 + 1)
            .map(|k| {
                let (mut re, mut im) = (0.0f64, 0.0f64);
                for (t, &v) in x.iter().enumerate() {
                    let a = -2.0 * std::f64::consts::PI * ((k * t) % n) as f64 / n as f64;
                    re += v as f64 * a.cos();
                    im += v as f64 * a.sin();
                }
                re * re + im * im
            })
            .collect()
    }

    #[test]
    fn every_size_even_or_odd_matches_a_direct_dft() {
        for n in [1usize, 2, 3, 4, 6, 7, 10, 12, 30, 64, 400, 401, 512] {
            // A deterministic signal that fills every bin: a chirp plus a ramp.
            let x: Vec<f32> = (0..n)
                .map(|t| (0.37 * (t * t) as f32).sin() + 0.01 * t as f32 - 0.2)
                .collect();
            for kind in [SpectrumKind::Power, SpectrumKind::Magnitude] {
                let mut s = Spectrum::new(n, kind);
                s.input_mut().copy_from_slice(&x);
                let mut lanes = vec![[f32::NAN; LANES]; n / 2 + 1];
                s.compute_into_lane(n, &mut lanes, 5);
                let want = dft_power(&x);
                let scale = want.iter().cloned().fold(1.0, f64::max);
                for (k, (l, w)) in lanes.iter().zip(&want).enumerate() {
                    let (got, w) = match kind {
                        SpectrumKind::Power => (l[5] as f64, *w),
                        SpectrumKind::Magnitude => ((l[5] as f64).powi(2), *w),
                    };
                    assert!(
                        (got - w).abs() <= 1e-5 * scale,
                        "n {n} {kind:?} bin {k}: {got} vs {w}"
                    );
                }
            }
        }
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
