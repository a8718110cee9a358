//! LPC resynthesis, a source–filter vocoder used as augmentation: a clip's spectral
//! envelope, frame by frame, over a new excitation — a pulse train at a new pitch where the
//! clip is voiced, noise where it is not.
//!
//! Speed perturbation and vocal-tract-length perturbation move pitch and formants
//! together; this moves the pitch alone (keeping the clip's intonation), and gives a
//! recorded voice the buzzy, pulse-excited source of a formant synthesiser. Both are
//! differences between voices that the other augmentations cannot reach.

use hush_device::features::config::WindowKind;
use hush_device::features::window::window;
use rand::Rng;
use rand_distr::StandardNormal;

use super::signal::rms;

/// Linear-prediction order at 16 kHz (2 + kHz, the usual rule).
const LPC_ORDER: usize = 18;
/// Pre-emphasis coefficient: the envelope is fitted to the pre-emphasised signal.
const PRE_EMPHASIS: f32 = 0.97;
/// Bandwidth expansion of every frame's predictor (`a_k · γ^k`), which keeps the
/// frame-to-frame switching filter well away from instability.
const BANDWIDTH_GAMMA: f32 = 0.994;
/// Pitch search range, Hz.
const F0_RANGE_HZ: [f32; 2] = [60.0, 400.0];
/// A frame is voiced when its normalised autocorrelation peaks above this.
const VOICING_THRESHOLD: f32 = 0.5;
/// Frames quieter than this (dB below the loudest) are left unvoiced.
const VOICING_FLOOR_DB: f32 = 35.0;
/// Share of noise power in a voiced frame's excitation (breathiness).
const VOICED_NOISE: f32 = 0.05;

/// Decimation before pitch tracking: 16 kHz becomes 4 kHz, low-passed at 1 kHz, which
/// keeps the fundamental and its first harmonics, drops hiss and high tones, and makes
/// the autocorrelation sixteen times cheaper.
const PITCH_DECIMATION: usize = 4;

/// The pitch track of `x`: one estimate per 10 ms hop (frame `t` centred on sample
/// `t·hop + hop/2`), in Hz, 0 where the frame is unvoiced or quiet; median-smoothed over
/// five frames so single-frame errors vanish.
pub fn pitch_track(x: &[f32], sample_rate: u32) -> Vec<f32> {
    let hop = (sample_rate / 100).max(1) as usize;
    let frames = x.len().div_ceil(hop);
    let low = lowpass_decimate(x, PITCH_DECIMATION);
    let rate = sample_rate as f32 / PITCH_DECIMATION as f32;
    let (hop_low, win) = (hop / PITCH_DECIMATION, 4 * hop / PITCH_DECIMATION);
    let segments: Vec<Vec<f32>> = (0..frames)
        .map(|t| {
            let mut s = segment(&low, t * hop_low + hop_low / 2, win);
            let mean = s.iter().sum::<f32>() / s.len().max(1) as f32;
            s.iter_mut().for_each(|v| *v -= mean);
            s
        })
        .collect();
    let energies: Vec<f32> = segments
        .iter()
        .map(|s| s.iter().map(|v| v * v).sum())
        .collect();
    let loudest = energies.iter().copied().fold(0f32, f32::max);
    let floor = loudest * 10f32.powf(-VOICING_FLOOR_DB / 10.0);
    let min_lag = (rate / F0_RANGE_HZ[1]).floor() as usize;
    let max_lag = ((rate / F0_RANGE_HZ[0]).ceil() as usize).min(win / 2);
    let raw: Vec<f32> = segments
        .iter()
        .zip(&energies)
        .map(|(s, &e)| {
            if loudest <= 0.0 || e < floor || e <= 0.0 {
                return 0.0;
            }
            let (lag, peak) = autocorrelation_peak(s, min_lag, max_lag);
            if peak > VOICING_THRESHOLD {
                rate / lag
            } else {
                0.0
            }
        })
        .collect();
    median5(&raw)
}

/// `x` low-passed below `0.5 / factor` of its rate (a Hann-windowed sinc) and kept every
/// `factor`-th sample.
fn lowpass_decimate(x: &[f32], factor: usize) -> Vec<f32> {
    let half = 4 * factor as i64;
    let cutoff = 0.5 / factor as f32;
    let taps: Vec<f32> = (-half..=half)
        .map(|k| {
            let t = k as f32;
            let sinc = if k == 0 {
                2.0 * cutoff
            } else {
                (2.0 * std::f32::consts::PI * cutoff * t).sin() / (std::f32::consts::PI * t)
            };
            let w = 0.5 + 0.5 * (std::f32::consts::PI * t / (half + 1) as f32).cos();
            sinc * w
        })
        .collect();
    (0..x.len().div_ceil(factor))
        .map(|i| {
            let c = (i * factor) as i64;
            taps.iter()
                .enumerate()
                .map(|(j, tap)| {
                    let n = c + j as i64 - half;
                    if (0..x.len() as i64).contains(&n) {
                        tap * x[n as usize]
                    } else {
                        0.0
                    }
                })
                .sum()
        })
        .collect()
}

/// `x` resynthesised at a median pitch of `target_f0_hz` (its intonation kept), with the
/// same length and RMS. A clip with no voiced frame keeps its envelope over noise; an
/// empty or silent clip comes back unchanged.
pub fn resynthesize<R: Rng>(
    x: &[f32],
    sample_rate: u32,
    target_f0_hz: f32,
    rng: &mut R,
) -> Vec<f32> {
    let level = rms(x);
    if x.is_empty() || level < 1e-6 || !(target_f0_hz.is_finite() && target_f0_hz > 0.0) {
        return x.to_vec();
    }
    let hop = (sample_rate / 100).max(1) as usize;
    let f0 = pitch_track(x, sample_rate);
    let mut voiced: Vec<f32> = f0.iter().copied().filter(|&f| f > 0.0).collect();
    voiced.sort_by(f32::total_cmp);
    let ratio = voiced
        .get(voiced.len() / 2)
        .map_or(1.0, |&median| target_f0_hz / median);

    let emphasised: Vec<f32> = (0..x.len())
        .map(|i| x[i] - if i > 0 { PRE_EMPHASIS * x[i - 1] } else { 0.0 })
        .collect();
    let win = 5 * hop / 2;
    let hann = window(WindowKind::Hann, win, true);
    let window_power: f32 = hann.iter().map(|w| w * w).sum();

    let mut y = vec![0f32; x.len()];
    let mut history = [0f32; LPC_ORDER];
    let mut phase = 0f32;
    for (t, &frame_f0) in f0.iter().enumerate() {
        let mut s = segment(&emphasised, t * hop + hop / 2, win);
        s.iter_mut().zip(&hann).for_each(|(v, w)| *v *= w);
        let (a, error) = levinson(&autocorrelation(&s, LPC_ORDER));
        let gain = (error.max(0.0) / window_power).sqrt();
        let new_f0 = (frame_f0 * ratio).clamp(F0_RANGE_HZ[0] / 2.0, 2.0 * F0_RANGE_HZ[1]);
        let start = t * hop;
        for out in y.iter_mut().take((start + hop).min(x.len())).skip(start) {
            let noise: f32 = rng.sample(StandardNormal);
            let excitation = if frame_f0 > 0.0 {
                let period = sample_rate as f32 / new_f0;
                phase += 1.0 / period;
                let pulse = if phase >= 1.0 {
                    phase -= 1.0;
                    period.sqrt()
                } else {
                    0.0
                };
                (1.0 - VOICED_NOISE).sqrt() * pulse + VOICED_NOISE.sqrt() * noise
            } else {
                noise
            };
            let predicted: f32 = a.iter().zip(&history).map(|(c, h)| c * h).sum();
            let v = gain * excitation - predicted;
            history.rotate_right(1);
            history[0] = v;
            *out = v;
        }
    }
    for i in 1..y.len() {
        y[i] += PRE_EMPHASIS * y[i - 1];
    }
    let out_level = rms(&y);
    if !out_level.is_finite() || out_level <= 0.0 {
        return x.to_vec();
    }
    let g = level / out_level;
    y.iter_mut().for_each(|v| *v *= g);
    y
}

/// `len` samples of `x` centred on `centre`, zero outside it.
fn segment(x: &[f32], centre: usize, len: usize) -> Vec<f32> {
    let start = centre as i64 - (len / 2) as i64;
    (0..len as i64)
        .map(|i| {
            let j = start + i;
            if (0..x.len() as i64).contains(&j) {
                x[j as usize]
            } else {
                0.0
            }
        })
        .collect()
}

/// The pitch period of `s`: the shortest lag in `min_lag..=max_lag` where the normalised
/// autocorrelation peaks within 10 % of its highest peak (multiples of the period score as
/// high as the period itself), and that value (1 for a perfectly periodic signal).
fn autocorrelation_peak(s: &[f32], min_lag: usize, max_lag: usize) -> (f32, f32) {
    let lags = min_lag.max(1)..=max_lag.min(s.len().saturating_sub(1));
    let scores: Vec<(usize, f32)> = lags
        .map(|lag| {
            let (head, tail) = (&s[..s.len() - lag], &s[lag..]);
            let cross: f32 = head.iter().zip(tail).map(|(a, b)| a * b).sum();
            let norm = (head.iter().map(|v| v * v).sum::<f32>()
                * tail.iter().map(|v| v * v).sum::<f32>())
            .sqrt();
            (lag, if norm > 0.0 { cross / norm } else { 0.0 })
        })
        .collect();
    // Only true local maxima count: a lag at either end of the range is no period.
    let peaks: Vec<usize> = (1..scores.len().saturating_sub(1))
        .filter(|&i| scores[i - 1].1 <= scores[i].1 && scores[i + 1].1 <= scores[i].1)
        .collect();
    let best = peaks.iter().map(|&i| scores[i].1).fold(0f32, f32::max);
    // The peak's lag refined between samples by a parabola through it and its neighbours.
    let refine = |i: usize| {
        let (lag, v) = scores[i];
        let (Some(&(_, a)), Some(&(_, b))) =
            (i.checked_sub(1).map(|j| &scores[j]), scores.get(i + 1))
        else {
            return (lag as f32, v);
        };
        let curvature = a - 2.0 * v + b;
        let offset = if curvature < 0.0 {
            0.5 * (a - b) / curvature
        } else {
            0.0
        };
        (lag as f32 + offset.clamp(-0.5, 0.5), v)
    };
    peaks
        .into_iter()
        .find(|&i| scores[i].1 >= 0.9 * best)
        .map_or((min_lag.max(1) as f32, 0.0), refine)
}

/// Autocorrelation `r[0..=order]` of `s`.
fn autocorrelation(s: &[f32], order: usize) -> Vec<f32> {
    (0..=order)
        .map(|k| s.iter().zip(&s[k.min(s.len())..]).map(|(a, b)| a * b).sum())
        .collect()
}

/// Levinson–Durbin: the predictor `a` (order `r.len() − 1`) of `x[n] ≈ −Σ a_k·x[n−k]`,
/// bandwidth-expanded, and the prediction error energy. Zero predictor and error for a
/// silent frame.
fn levinson(r: &[f32]) -> (Vec<f32>, f32) {
    let order = r.len().saturating_sub(1);
    let mut a = vec![0f32; order];
    if order == 0 || r[0] <= 1e-10 {
        return (a, 0.0);
    }
    // A −40 dB noise floor keeps the normal equations well conditioned.
    let mut error = r[0] * (1.0 + 1e-4);
    let mut prev = vec![0f32; order];
    for i in 0..order {
        let acc: f32 = r[i + 1] + (0..i).map(|j| a[j] * r[i - j]).sum::<f32>();
        let k = -acc / error;
        prev[..i].copy_from_slice(&a[..i]);
        for j in 0..i {
            a[j] = prev[j] + k * prev[i - 1 - j];
        }
        a[i] = k;
        error *= 1.0 - k * k;
        if error <= 0.0 {
            break;
        }
    }
    let mut g = 1.0;
    for c in a.iter_mut() {
        g *= BANDWIDTH_GAMMA;
        *c *= g;
    }
    (a, error)
}

fn median5(x: &[f32]) -> Vec<f32> {
    (0..x.len())
        .map(|i| {
            let mut w: Vec<f32> = x[i.saturating_sub(2)..(i + 3).min(x.len())].to_vec();
            w.sort_by(f32::total_cmp);
            w[w.len() / 2]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const SR: u32 = 16_000;

    /// A vowel with known formants: a pulse train at `f0` through three two-pole
    /// resonators (700, 1 220, 2 600 Hz — an /a/), 0.5 s between 0.25 s of silence.
    fn vowel(f0: f32) -> Vec<f32> {
        let n = SR as usize / 2;
        let period = (SR as f32 / f0).round() as usize;
        let mut x: Vec<f32> = (0..n)
            .map(|i| if i % period == 0 { 1.0 } else { 0.0 })
            .collect();
        for (f, bw) in [(700.0f32, 80.0f32), (1220.0, 90.0), (2600.0, 120.0)] {
            let r = (-std::f32::consts::PI * bw / SR as f32).exp();
            let c = 2.0 * r * (2.0 * std::f32::consts::PI * f / SR as f32).cos();
            let (mut y1, mut y2) = (0f32, 0f32);
            for v in x.iter_mut() {
                let y = *v + c * y1 - r * r * y2;
                (y2, y1) = (y1, y);
                *v = y;
            }
        }
        let peak = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let quiet = vec![0f32; SR as usize / 4];
        [
            quiet.clone(),
            x.iter().map(|v| 0.5 * v / peak).collect(),
            quiet,
        ]
        .concat()
    }

    /// The frequencies (Hz) of the LPC envelope's peaks below 3 kHz over the middle of `x`.
    fn formants(x: &[f32]) -> Vec<f32> {
        let mid = segment(x, x.len() / 2, 1024);
        let emph: Vec<f32> = (1..mid.len())
            .map(|i| mid[i] - PRE_EMPHASIS * mid[i - 1])
            .collect();
        let hann = window(WindowKind::Hann, emph.len(), true);
        let w: Vec<f32> = emph.iter().zip(&hann).map(|(v, h)| v * h).collect();
        let (a, _) = levinson(&autocorrelation(&w, 10));
        let envelope: Vec<f32> = (0..300)
            .map(|k| {
                let om = 2.0 * std::f32::consts::PI * (k as f32 * 10.0) / SR as f32;
                let (mut re, mut im) = (1f32, 0f32);
                for (j, c) in a.iter().take(10).enumerate() {
                    re += c * (om * (j + 1) as f32).cos();
                    im -= c * (om * (j + 1) as f32).sin();
                }
                -(re * re + im * im).ln()
            })
            .collect();
        (1..envelope.len() - 1)
            .filter(|&k| envelope[k] > envelope[k - 1] && envelope[k] >= envelope[k + 1])
            .map(|k| k as f32 * 10.0)
            .collect()
    }

    fn voiced_median(x: &[f32]) -> f32 {
        let mut v: Vec<f32> = pitch_track(x, SR)
            .into_iter()
            .filter(|&f| f > 0.0)
            .collect();
        v.sort_by(f32::total_cmp);
        v[v.len() / 2]
    }

    #[test]
    fn pitch_track_finds_a_known_pitch_and_leaves_silence_unvoiced() {
        let x = vowel(125.0);
        let f0 = pitch_track(&x, SR);
        assert_eq!(f0.len(), 100);
        assert!(
            (voiced_median(&x) - 125.0).abs() < 3.0,
            "{}",
            voiced_median(&x)
        );
        assert!(
            f0[..20].iter().all(|&f| f == 0.0),
            "leading silence is unvoiced"
        );
        assert!(f0[40..60].iter().all(|&f| f > 0.0), "the vowel is voiced");
    }

    #[test]
    fn resynthesis_moves_the_pitch_and_keeps_the_formants_length_and_level() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let x = vowel(110.0);
        let y = resynthesize(&x, SR, 230.0, &mut rng);
        assert_eq!(y.len(), x.len());
        assert!((rms(&y) - rms(&x)).abs() < 1e-3 * rms(&x).max(1e-6) + 1e-6);
        let f = voiced_median(&y);
        assert!((f - 230.0).abs() < 12.0, "new pitch {f} Hz");
        // The three formants stay put: the output's envelope peaks lie within 8 % of the
        // input's, which lie within 15 % of the resonators' (harmonics pull the estimate).
        let (fx, fy) = (formants(&x), formants(&y));
        let near =
            |fs: &[f32], want: f32, tol: f32| fs.iter().any(|&g| (g - want).abs() < tol * want);
        for (want, got) in [700.0f32, 1220.0, 2600.0].into_iter().zip(&fx) {
            assert!(near(&fx, want, 0.15), "input formants {fx:?}");
            assert!(
                near(&fy, *got, 0.08),
                "output formants {fy:?} (input {fx:?})"
            );
        }
        // The leading silence stays (near) silent.
        assert!(rms(&y[..3_000]) < 0.05 * rms(&y));
    }

    #[test]
    fn noise_stays_unvoiced_and_silence_is_unchanged() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(8);
        let noise: Vec<f32> = (0..8_000)
            .map(|_| 0.1 * rng.sample::<f32, _>(StandardNormal))
            .collect();
        assert!(pitch_track(&noise, SR).iter().all(|&f| f == 0.0));
        let y = resynthesize(&noise, SR, 200.0, &mut rng);
        assert_eq!(y.len(), noise.len());
        assert!(pitch_track(&y, SR).iter().all(|&f| f == 0.0));
        let silence = vec![0f32; 4_000];
        assert_eq!(resynthesize(&silence, SR, 200.0, &mut rng), silence);
        assert!(resynthesize(&[], SR, 200.0, &mut rng).is_empty());
    }
}
