//! STOI, the short-time objective intelligibility measure (Taal, Hendriks, Heusdens and
//! Jensen, ICASSP 2010 and IEEE TASLP 2011): a port of the reference algorithm as
//! pystoi 0.4.1 implements it (`stoi(x, y, fs, extended=False)`), in f64.
//!
//! 1. Both signals are resampled to 10 kHz with Octave's `resample` filter (a Kaiser-
//!    windowed sinc, 60 dB rejection) applied as scipy's `resample_poly` does.
//! 2. Frames (256 samples, Hann, hop 128) where the clean signal is more than 40 dB below
//!    its loudest frame are dropped from both, and the rest overlap-added back.
//! 3. STFT (256-sample Hann frames, hop 128, 512-point FFT) → 15 one-third-octave bands
//!    from 150 Hz.
//! 4. For every band and every run of 30 frames: scale the degraded envelope to the clean
//!    one's energy, clip it at −15 dB SDR (`≤ x·(1 + 10^{15/20})`), and correlate. STOI is
//!    the mean correlation.
//!
//! Fewer than 30 frames left after step 2 give 1e-5, the value pystoi returns (with a
//! warning) for signals too short to score.

use realfft::RealFftPlanner;

/// STOI's internal sample rate.
pub const STOI_RATE: u32 = 10_000;
const FRAME: usize = 256;
const HOP: usize = FRAME / 2;
const NFFT: usize = 512;
const BANDS: usize = 15;
const MIN_FREQ: f64 = 150.0;
const SEGMENT: usize = 30;
const BETA_DB: f64 = -15.0;
const DYN_RANGE_DB: f64 = 40.0;
/// numpy's `finfo(float).eps`, which pystoi adds to every norm.
const EPS: f64 = f64::EPSILON;

/// Why STOI cannot be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoiError {
    /// The two signals differ in length.
    #[error("reference has {reference} samples but the degraded signal {degraded}: STOI compares aligned signals of equal length")]
    LengthMismatch {
        /// Reference length.
        reference: usize,
        /// Degraded length.
        degraded: usize,
    },
    /// A sample is NaN or infinite.
    #[error("the {which} signal has a non-finite sample at index {index}")]
    NonFinite {
        /// `reference` or `degraded`.
        which: &'static str,
        /// Where.
        index: usize,
    },
    /// A zero sample rate.
    #[error("sample rate must be > 0")]
    BadRate,
}

/// STOI of `degraded` against the clean `reference`, both at `rate` Hz, in [−1, 1]
/// (typically 0.4–1 for speech).
pub fn stoi(reference: &[f32], degraded: &[f32], rate: u32) -> Result<f64, StoiError> {
    if reference.len() != degraded.len() {
        return Err(StoiError::LengthMismatch {
            reference: reference.len(),
            degraded: degraded.len(),
        });
    }
    if rate == 0 {
        return Err(StoiError::BadRate);
    }
    for (which, s) in [("reference", reference), ("degraded", degraded)] {
        if let Some(index) = s.iter().position(|v| !v.is_finite()) {
            return Err(StoiError::NonFinite { which, index });
        }
    }
    let to64 = |s: &[f32]| s.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
    let (mut x, mut y) = (to64(reference), to64(degraded));
    if rate != STOI_RATE {
        x = resample_octave(&x, STOI_RATE, rate);
        y = resample_octave(&y, STOI_RATE, rate);
    }
    let (x, y) = remove_silent_frames(&x, &y);
    let xs = band_envelopes(&x);
    let ys = band_envelopes(&y);
    let frames = xs.len();
    if frames < SEGMENT {
        return Ok(1e-5);
    }
    let clip = 1.0 + 10f64.powf(-BETA_DB / 20.0);
    let mut total = 0.0;
    let segments = frames - SEGMENT + 1;
    let mut xv = [0.0; SEGMENT];
    let mut yv = [0.0; SEGMENT];
    for m in SEGMENT..=frames {
        for band in 0..BANDS {
            for (k, t) in (m - SEGMENT..m).enumerate() {
                xv[k] = xs[t][band];
                yv[k] = ys[t][band];
            }
            let alpha = norm(&xv) / (norm(&yv) + EPS);
            for (y, &x) in yv.iter_mut().zip(&xv) {
                *y = (*y * alpha).min(x * clip);
            }
            center(&mut xv);
            center(&mut yv);
            let (nx, ny) = (norm(&xv) + EPS, norm(&yv) + EPS);
            total += xv
                .iter()
                .zip(&yv)
                .map(|(a, b)| (a / nx) * (b / ny))
                .sum::<f64>();
        }
    }
    Ok(total / (segments * BANDS) as f64)
}

fn norm(v: &[f64]) -> f64 {
    v.iter().map(|a| a * a).sum::<f64>().sqrt()
}

fn center(v: &mut [f64]) {
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    v.iter_mut().for_each(|a| *a -= mean);
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Modified Bessel function of the first kind, order 0 (power series; converges fast for
/// the Kaiser β used here).
fn bessel_i0(x: f64) -> f64 {
    let (mut term, mut sum, mut k) = (1.0, 1.0, 1.0);
    let q = x * x / 4.0;
    while term > sum * 1e-17 {
        term *= q / (k * k);
        sum += term;
        k += 1.0;
    }
    sum
}

/// `x` at `up/down` times its rate: Octave's `resample` filter (pystoi's
/// `_resample_window_oct`, normalised to unit sum) applied like scipy's
/// `resample_poly(x, up, down, window=h)`: `y[m] = up · Σ_i h[m·down + L − i·up] · x[i]`
/// with `h` centred at `L`, `⌈n·up/down⌉` outputs.
fn resample_octave(x: &[f64], up: u32, down: u32) -> Vec<f64> {
    let g = gcd(u64::from(up), u64::from(down));
    let (p, q) = (u64::from(up) / g, u64::from(down) / g);
    let cutoff = 1.0 / (2.0 * p.max(q) as f64);
    let roll_off = cutoff / 10.0;
    let rejection_db = 60.0;
    let half = ((rejection_db - 8.0) / (28.714 * roll_off)).ceil() as i64;
    let beta = 0.1102 * (rejection_db - 8.7);
    let len = 2 * half + 1;
    let i0_beta = bessel_i0(beta);
    let mut h: Vec<f64> = (0..len)
        .map(|n| {
            let t = (n - half) as f64;
            let arg = 2.0 * cutoff * t;
            let sinc = if arg == 0.0 {
                1.0
            } else {
                (std::f64::consts::PI * arg).sin() / (std::f64::consts::PI * arg)
            };
            let r = 2.0 * n as f64 / (len - 1) as f64 - 1.0;
            let kaiser = bessel_i0(beta * (1.0 - r * r).max(0.0).sqrt()) / i0_beta;
            kaiser * 2.0 * p as f64 * cutoff * sinc
        })
        .collect();
    let sum: f64 = h.iter().sum();
    h.iter_mut().for_each(|v| *v *= p as f64 / sum);
    let n_out = (x.len() as u64 * p).div_ceil(q) as usize;
    let (p, q) = (p as i64, q as i64);
    (0..n_out as i64)
        .map(|m| {
            // Indices i with 0 ≤ m·q + half − i·p < len.
            let center = m * q + half;
            let lo = ((center - (len - 1)).max(0) as u64).div_ceil(p as u64) as i64;
            let hi = (center / p).min(x.len() as i64 - 1);
            (lo..=hi)
                .map(|i| h[(center - i * p) as usize] * x[i as usize])
                .sum()
        })
        .collect()
}

/// MATLAB's `hanning(n)`: numpy's `hanning(n + 2)[1:-1]`.
fn hann(n: usize) -> Vec<f64> {
    (1..=n)
        .map(|k| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * k as f64 / (n + 1) as f64).cos())
        .collect()
}

/// Frame starts as pystoi takes them: `range(0, len − FRAME, HOP)`.
fn frame_starts(len: usize) -> impl Iterator<Item = usize> {
    (0..len.saturating_sub(FRAME)).step_by(HOP)
}

/// Drops the frames of both signals where the clean one is more than 40 dB below its
/// loudest frame, and overlap-adds the windowed frames that remain.
fn remove_silent_frames(x: &[f64], y: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let w = hann(FRAME);
    let starts: Vec<usize> = frame_starts(x.len()).collect();
    let energy_db = |s: usize| {
        let e: f64 = (0..FRAME).map(|k| (w[k] * x[s + k]).powi(2)).sum();
        20.0 * (e.sqrt() + EPS).log10()
    };
    let energies: Vec<f64> = starts.iter().map(|&s| energy_db(s)).collect();
    let max = energies.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let kept: Vec<usize> = starts
        .iter()
        .zip(&energies)
        .filter(|(_, &e)| max - DYN_RANGE_DB - e < 0.0)
        .map(|(&s, _)| s)
        .collect();
    let out_len = match kept.len() {
        0 => 0,
        n => (n - 1) * HOP + FRAME,
    };
    let mut xo = vec![0.0; out_len];
    let mut yo = vec![0.0; out_len];
    for (j, &s) in kept.iter().enumerate() {
        for k in 0..FRAME {
            xo[j * HOP + k] += w[k] * x[s + k];
            yo[j * HOP + k] += w[k] * y[s + k];
        }
    }
    (xo, yo)
}

/// The one-third-octave band matrix as pystoi's `thirdoct` builds it: per band, the FFT
/// bins `[lo, hi)` nearest the band edges.
fn third_octave_bands() -> [(usize, usize); BANDS] {
    let bins = NFFT / 2 + 1;
    let freq = |k: usize| k as f64 * f64::from(STOI_RATE) / NFFT as f64;
    let nearest = |target: f64| {
        (0..bins)
            .min_by(|&a, &b| {
                let (da, db) = ((freq(a) - target).powi(2), (freq(b) - target).powi(2));
                da.total_cmp(&db)
            })
            .unwrap_or(0)
    };
    std::array::from_fn(|i| {
        let k = i as f64;
        let low = MIN_FREQ * 2f64.powf((2.0 * k - 1.0) / 6.0);
        let high = MIN_FREQ * 2f64.powf((2.0 * k + 1.0) / 6.0);
        (nearest(low), nearest(high))
    })
}

/// Per STFT frame, the 15 band envelopes `sqrt(Σ_{k in band} |X_k|²)`.
fn band_envelopes(x: &[f64]) -> Vec<[f64; BANDS]> {
    let w = hann(FRAME);
    let bands = third_octave_bands();
    let fft = RealFftPlanner::<f64>::new().plan_fft_forward(NFFT);
    let mut input = fft.make_input_vec();
    let mut spectrum = fft.make_output_vec();
    let mut scratch = fft.make_scratch_vec();
    frame_starts(x.len())
        .map(|s| {
            input.fill(0.0);
            for k in 0..FRAME {
                input[k] = w[k] * x[s + k];
            }
            // Buffers come from the plan, so their sizes always match.
            if fft
                .process_with_scratch(&mut input, &mut spectrum, &mut scratch)
                .is_err()
            {
                return [0.0; BANDS];
            }
            bands.map(|(lo, hi)| {
                spectrum[lo..hi]
                    .iter()
                    .map(|c| c.norm_sqr())
                    .sum::<f64>()
                    .sqrt()
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bessel_i0_matches_known_values() {
        // scipy.special.i0(1.0).
        assert!((bessel_i0(1.0) - 1.266_065_877_752_008_4).abs() < 1e-14);
        assert!((bessel_i0(0.0) - 1.0).abs() < 1e-15);
    }

    #[test]
    fn third_octave_bands_follow_pystoi() {
        // The non-zero columns of pystoi's thirdoct(10000, 512, 15, 150), per band.
        let want = [
            (7, 9),
            (9, 11),
            (11, 14),
            (14, 17),
            (17, 22),
            (22, 27),
            (27, 34),
            (34, 43),
            (43, 55),
            (55, 69),
            (69, 87),
            (87, 109),
            (109, 138),
            (138, 174),
            (174, 219),
        ];
        assert_eq!(third_octave_bands(), want);
    }

    #[test]
    fn bad_input_is_named() {
        assert!(matches!(
            stoi(&[0.0; 10], &[0.0; 9], 16_000),
            Err(StoiError::LengthMismatch { .. })
        ));
        let mut y = vec![0.0; 10];
        y[3] = f32::NAN;
        let e = stoi(&[0.0; 10], &y, 16_000).unwrap_err();
        assert_eq!(
            e,
            StoiError::NonFinite {
                which: "degraded",
                index: 3
            }
        );
        assert_eq!(stoi(&[0.0; 10], &[0.0; 10], 0), Err(StoiError::BadRate));
    }

    #[test]
    fn too_short_gives_pystoi_floor() {
        let x: Vec<f32> = (0..2000).map(|i| (i as f32 * 0.1).sin()).collect();
        assert_eq!(stoi(&x, &x, 10_000).unwrap(), 1e-5);
    }
}
