//! Release bursts, an augmentation for how speakers end words: a short burst of
//! high-passed noise added where a clip's speech ends, as a released (aspirated or
//! affricated) word-final stop sounds.
//!
//! Voices differ in how they end a word: one releases a final /p/ or /t/ with a burst
//! as bright as a fricative, another barely releases it. A keyword spotter that learnt
//! only one kind of ending can hear the other's as another word (espeak-ng's `up` as
//! `off` to a model that never heard espeak-ng). Bursts on the training clips of every
//! word are meant to teach it that a bright ending alone does not make the word; spectral,
//! pitch and speed augmentation cannot, the burst being a short event at a word's edge.
//! Measured there (docs/results/kws-quality, "Where `left` goes wrong"): no gain, so it
//! is off by default.

use rand::Rng;
use rand_distr::StandardNormal;

use super::speech_bounds::{peak_window_power, speech_end};

/// Where the burst starts, relative to the end of the speech, in ms: over the last
/// consonant, or after a stop's closure.
const OFFSET_MS: [f32; 2] = [-30.0, 60.0];
/// How long the burst lasts, in ms (it decays over a third of that).
const LENGTH_MS: [f32; 2] = [20.0, 90.0];
/// The high-pass cut-off, in Hz, drawn log-uniformly (capped below Nyquist).
const CUTOFF_HZ: [f32; 2] = [1_500.0, 6_000.0];
/// The burst's loudest 10 ms, relative to the clip's loudest, in dB.
const LEVEL_DB: [f32; 2] = [-24.0, -6.0];

/// `clip` with a release burst added at the end of its speech (same length; silence
/// comes back unchanged).
pub fn add_release_burst<R: Rng>(clip: &[f32], sample_rate: u32, rng: &mut R) -> Vec<f32> {
    let mut out = clip.to_vec();
    let Some(end) = speech_end(clip, sample_rate) else {
        return out;
    };
    let ms = |v: f32| (v * sample_rate as f32 / 1000.0).round() as i64;
    let start = (end as i64 + ms(rng.random_range(OFFSET_MS[0]..=OFFSET_MS[1])))
        .clamp(0, clip.len() as i64) as usize;
    let len = (ms(rng.random_range(LENGTH_MS[0]..=LENGTH_MS[1])) as usize).min(clip.len() - start);
    if len == 0 {
        return out;
    }
    let nyquist_cap = 0.45 * sample_rate as f32;
    let [lo, hi] = CUTOFF_HZ.map(|f| f.min(nyquist_cap).ln());
    let cutoff = rng.random_range(lo..=hi.max(lo)).exp();
    let noise: Vec<f32> = (0..len).map(|_| rng.sample(StandardNormal)).collect();
    let mut burst = high_pass(&noise, cutoff, sample_rate);
    let attack = ms(1.0).max(1) as f32;
    let decay = len as f32 / 3.0;
    for (i, b) in burst.iter_mut().enumerate() {
        let t = i as f32;
        *b *= (t / attack).min(1.0) * (-t / decay).exp();
    }
    let level_db = rng.random_range(LEVEL_DB[0]..=LEVEL_DB[1]);
    let target = peak_window_power(clip, sample_rate) * 10f32.powf(level_db / 10.0);
    let own = peak_window_power(&burst, sample_rate);
    if own > 0.0 {
        let g = (target / own).sqrt();
        out[start..start + len]
            .iter_mut()
            .zip(&burst)
            .for_each(|(o, b)| *o += g * b);
    }
    out
}

/// `x` through a second-order Butterworth high-pass at `cutoff` Hz (the audio-EQ
/// cookbook biquad, Q = 1/√2).
fn high_pass(x: &[f32], cutoff: f32, sample_rate: u32) -> Vec<f32> {
    let w0 = 2.0 * std::f32::consts::PI * cutoff / sample_rate as f32;
    let (sin, cos) = w0.sin_cos();
    let alpha = sin / std::f32::consts::SQRT_2;
    let a0 = 1.0 + alpha;
    let b0 = (1.0 + cos) / 2.0 / a0;
    let b1 = -(1.0 + cos) / a0;
    let a1 = -2.0 * cos / a0;
    let a2 = (1.0 - alpha) / a0;
    let (mut x1, mut x2, mut y1, mut y2) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    x.iter()
        .map(|&v| {
            let y = b0 * v + b1 * x1 + b0 * x2 - a1 * y1 - a2 * y2;
            (x2, x1, y2, y1) = (x1, v, y1, y);
            y
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::signal::rms;
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use realfft::RealFftPlanner;

    const SR: u32 = 16_000;

    /// One second: 0.3 s of silence, 0.3 s of a 150 Hz buzz with harmonics to 1.2 kHz
    /// (a vowel's low spectrum), silence again.
    fn word() -> Vec<f32> {
        let mut x = vec![0.0f32; 16_000];
        for (i, v) in x[4_800..9_600].iter_mut().enumerate() {
            let t = i as f32 / SR as f32;
            *v = (1..=8)
                .map(|h| 0.05 * (2.0 * std::f32::consts::PI * 150.0 * h as f32 * t).sin())
                .sum();
        }
        x
    }

    /// Share of `x`'s energy above `hz`.
    fn share_above(x: &[f32], hz: f32) -> f32 {
        let mut buf = x.to_vec();
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(buf.len());
        let mut spec = fft.make_output_vec();
        fft.process(&mut buf, &mut spec).unwrap();
        let bin_hz = SR as f32 / x.len() as f32;
        let power = |c: &realfft::num_complex::Complex<f32>| c.norm_sqr();
        let total: f32 = spec.iter().map(power).sum();
        let high: f32 = spec
            .iter()
            .enumerate()
            .filter(|(k, _)| *k as f32 * bin_hz >= hz)
            .map(|(_, c)| power(c))
            .sum();
        high / total
    }

    #[test]
    fn a_burst_follows_the_speech_bright_and_below_its_level() {
        let x = word();
        let end = speech_end(&x, SR).unwrap();
        assert_eq!(end, 9_600);
        let peak = peak_window_power(&x, SR);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..20 {
            let y = add_release_burst(&x, SR, &mut rng);
            assert_eq!(y.len(), x.len());
            let d: Vec<f32> = y.iter().zip(&x).map(|(a, b)| a - b).collect();
            let touched: Vec<usize> = (0..d.len()).filter(|&i| d[i] != 0.0).collect();
            let (first, last) = (touched[0], *touched.last().unwrap());
            // Only near the end of the speech: from 30 ms before it to 150 ms after.
            assert!(
                first + 480 >= end && last < end + 960 + 1_440,
                "{first}..{last}"
            );
            // Bright: nearly all of its energy above 1 kHz.
            assert!(
                share_above(&d, 1_000.0) > 0.9,
                "{}",
                share_above(&d, 1_000.0)
            );
            // Quieter than the speech, by 6 to 24 dB (±3 dB for window alignment).
            let db = 10.0 * (peak_window_power(&d, SR) / peak).log10();
            assert!((-27.0..=-3.0).contains(&db), "{db} dB");
        }
    }

    #[test]
    fn silence_is_unchanged() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(add_release_burst(&[0.0; 800], SR, &mut rng), vec![0.0; 800]);
        assert!(add_release_burst(&[], SR, &mut rng).is_empty());
    }

    #[test]
    fn the_high_pass_passes_high_tones_and_stops_low_ones() {
        let tone = |hz: f32| -> Vec<f32> {
            (0..8_000)
                .map(|i| (2.0 * std::f32::consts::PI * hz * i as f32 / SR as f32).sin())
                .collect()
        };
        let gain = |hz: f32| {
            let y = high_pass(&tone(hz), 2_000.0, SR);
            rms(&y[4_000..]) / rms(&tone(hz)[4_000..])
        };
        assert!(gain(6_000.0) > 0.95, "{}", gain(6_000.0));
        assert!((gain(2_000.0) - std::f32::consts::FRAC_1_SQRT_2).abs() < 0.03);
        assert!(gain(200.0) < 0.02, "{}", gain(200.0));
    }
}
