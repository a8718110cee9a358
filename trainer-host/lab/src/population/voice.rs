//! A virtual user's voice: one draw of pitch, speaking rate, vocal-tract length, level,
//! microphone, room and background that every clip of the user goes through, so the
//! user's clips sound alike and unlike another user's made from the same base speaker.
//! Each clip then varies a little around the user's settings (onset, pitch, level, noise).

use hush_device::features::FeatureConfig;
use hush_device::infer::clip_features;
use hush_train::augment::{
    resample_linear, reverberate, shift, synthetic_rir, MelAxis, RESYNTH_F0_HZ,
};
use hush_train::resynth::resynthesize;
use hush_train::signal::rms;
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Probability that a user's clips are resynthesised at the user's own pitch (the rest keep
/// the base engine's excitation).
const RESYNTH_PROB: f64 = 0.5;
/// Speaking-rate factor range (resampling: pitch and formants move with it).
const SPEED: [f32; 2] = [0.9, 1.1];
/// Vocal-tract-length warp of the log-mel features.
const VTL_WARP: [f64; 2] = [0.88, 1.12];
/// Level in dB relative to the base clip.
const LEVEL_DB: [f32; 2] = [-12.0, 3.0];
/// The microphone's low cut (second-order high-pass), Hz.
const MIC_LOW_CUT_HZ: [f32; 2] = [60.0, 400.0];
/// The microphone's high cut (second-order low-pass), as a fraction of the sample rate.
const MIC_HIGH_CUT: [f32; 2] = [0.2, 0.45];
/// Probability that a user speaks in a reverberant room, and its RT60 range in seconds.
const ROOM_PROB: f64 = 0.6;
const RT60_S: [f32; 2] = [0.15, 0.7];
/// Probability that a user has background noise, and its signal-to-noise range in dB.
const NOISE_PROB: f64 = 0.7;
const SNR_DB: [f32; 2] = [5.0, 30.0];
/// Per-clip variation around the user's settings: onset shift (s), pitch (relative),
/// level (dB), signal-to-noise (dB).
const CLIP_SHIFT_S: f32 = 0.08;
const CLIP_F0: f32 = 0.06;
const CLIP_LEVEL_DB: f32 = 2.0;
const CLIP_SNR_DB: f32 = 3.0;

/// One user's voice and recording conditions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserVoice {
    /// Median pitch the clips are resynthesised at (Hz); None: the base speaker's own.
    pub f0_hz: Option<f32>,
    /// Speaking-rate factor (> 1: faster and higher).
    pub speed: f32,
    /// Vocal-tract-length warp of the log-mel features (> 1: a shorter tract).
    pub vtl_warp: f64,
    /// Level in dB.
    pub level_db: f32,
    /// Microphone low cut, Hz.
    pub low_cut_hz: f32,
    /// Microphone high cut, Hz.
    pub high_cut_hz: f32,
    /// The room's reverberation time in seconds (None: close-talking, no room).
    pub rt60_s: Option<f32>,
    /// Seed of the room's impulse response (the same room for every clip).
    pub room_seed: u64,
    /// The background: index into the corpus's noise recordings and the signal-to-noise
    /// ratio in dB (None: quiet).
    pub noise: Option<(usize, f32)>,
}

impl UserVoice {
    /// A voice drawn from `rng`; `noises` recordings are available, at `sample_rate`.
    pub fn draw<R: Rng>(rng: &mut R, noises: usize, sample_rate: u32) -> Self {
        let uniform = |rng: &mut R, [lo, hi]: [f32; 2]| rng.random_range(lo..=hi);
        let f0_hz = rng.random_bool(RESYNTH_PROB).then(|| {
            let [lo, hi] = RESYNTH_F0_HZ.map(f32::ln);
            rng.random_range(lo..=hi).exp()
        });
        let speed = uniform(rng, SPEED);
        let vtl_warp = rng.random_range(VTL_WARP[0]..=VTL_WARP[1]);
        let level_db = uniform(rng, LEVEL_DB);
        let low_cut_hz = uniform(rng, MIC_LOW_CUT_HZ);
        let high_cut_hz = uniform(rng, MIC_HIGH_CUT) * sample_rate as f32;
        let rt60_s = rng.random_bool(ROOM_PROB).then(|| uniform(rng, RT60_S));
        let room_seed = rng.random();
        let noise = (noises > 0 && rng.random_bool(NOISE_PROB))
            .then(|| (rng.random_range(0..noises), uniform(rng, SNR_DB)));
        Self {
            f0_hz,
            speed,
            vtl_warp,
            level_db,
            low_cut_hz,
            high_cut_hz,
            rt60_s,
            room_seed,
            noise,
        }
    }

    /// The room's impulse response (the unit impulse without a room).
    pub fn room(&self, sample_rate: u32) -> Vec<f32> {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(self.room_seed);
        synthetic_rir(self.rt60_s.unwrap_or(0.0), sample_rate, &mut rng)
    }

    /// `clip` as this user says it (same length): pitch, rate, onset, room, microphone,
    /// level and background, the per-clip variation drawn from `rng`. `room` is
    /// [`UserVoice::room`].
    pub fn render<R: Rng>(
        &self,
        clip: &[f32],
        room: &[f32],
        noises: &[Vec<f32>],
        sample_rate: u32,
        rng: &mut R,
    ) -> Vec<f32> {
        let n = clip.len();
        let mut x = match self.f0_hz {
            Some(f0) => {
                let f0 = f0 * (1.0 + rng.random_range(-CLIP_F0..=CLIP_F0));
                resynthesize(clip, sample_rate, f0, rng)
            }
            None => clip.to_vec(),
        };
        x = resample_linear(&x, self.speed);
        x.resize(n, 0.0);
        let max_shift = (CLIP_SHIFT_S * sample_rate as f32) as i64;
        x = shift(&x, rng.random_range(-max_shift..=max_shift));
        if self.rt60_s.is_some() {
            x = reverberate(&x, room);
        }
        biquad(&mut x, Biquad::high_pass(self.low_cut_hz, sample_rate));
        biquad(&mut x, Biquad::low_pass(self.high_cut_hz, sample_rate));
        let level_db = self.level_db + rng.random_range(-CLIP_LEVEL_DB..=CLIP_LEVEL_DB);
        let g = 10f32.powf(level_db / 20.0);
        x.iter_mut().for_each(|v| *v *= g);
        if let Some((kind, snr_db)) = self.noise {
            if let Some(noise) = noises.get(kind).filter(|w| w.len() >= n) {
                let start = rng.random_range(0..=noise.len() - n);
                let seg = &noise[start..start + n];
                let snr = snr_db + rng.random_range(-CLIP_SNR_DB..=CLIP_SNR_DB);
                let (signal, background) = (rms(&x), rms(seg).max(1e-8));
                // A silent clip (the `_silence_` class) still gets the user's background, at
                // the level a clip of speech of this user would have over it.
                let reference = if signal < 1e-4 { 0.05 * g } else { signal };
                let gain = reference * 10f32.powf(-snr / 20.0) / background;
                x.iter_mut().zip(seg).for_each(|(v, w)| *v += gain * w);
            }
        }
        x.iter_mut().for_each(|v| *v = v.clamp(-1.0, 1.0));
        x
    }

    /// The features of a rendered clip, warped by the user's vocal-tract length (log-mel
    /// features only). `frames` frames of `cfg`.
    pub fn features(
        &self,
        cfg: &FeatureConfig,
        axis: Option<&MelAxis>,
        rendered: &[f32],
        frames: usize,
    ) -> Result<Vec<f32>, hush_device::features::FeatureError> {
        let mut f = clip_features(cfg, rendered, frames)?;
        if let Some(axis) = axis {
            axis.warp(&mut f, self.vtl_warp);
        }
        Ok(f)
    }
}

/// A second-order section (RBJ cookbook), normalised so `a0 = 1`.
#[derive(Debug, Clone, Copy)]
struct Biquad {
    b: [f32; 3],
    a: [f32; 2],
}

impl Biquad {
    /// Butterworth (Q = 1/√2) high-pass at `hz`.
    fn high_pass(hz: f32, sample_rate: u32) -> Self {
        let (cos, alpha) = Self::angle(hz, sample_rate);
        let a0 = 1.0 + alpha;
        let b = [(1.0 + cos) / 2.0, -(1.0 + cos), (1.0 + cos) / 2.0];
        Self::normalised(b, [-2.0 * cos, 1.0 - alpha], a0)
    }

    /// Butterworth (Q = 1/√2) low-pass at `hz`.
    fn low_pass(hz: f32, sample_rate: u32) -> Self {
        let (cos, alpha) = Self::angle(hz, sample_rate);
        let a0 = 1.0 + alpha;
        let b = [(1.0 - cos) / 2.0, 1.0 - cos, (1.0 - cos) / 2.0];
        Self::normalised(b, [-2.0 * cos, 1.0 - alpha], a0)
    }

    fn angle(hz: f32, sample_rate: u32) -> (f32, f32) {
        let nyquist = sample_rate as f32 / 2.0;
        let w = std::f32::consts::PI * hz.clamp(1.0, 0.99 * nyquist) / nyquist;
        (w.cos(), w.sin() / std::f32::consts::SQRT_2)
    }

    fn normalised(b: [f32; 3], a: [f32; 2], a0: f32) -> Self {
        Self {
            b: b.map(|v| v / a0),
            a: a.map(|v| v / a0),
        }
    }
}

/// Filters `x` in place (direct form I).
fn biquad(x: &mut [f32], f: Biquad) {
    let (mut x1, mut x2, mut y1, mut y2) = (0f32, 0f32, 0f32, 0f32);
    for v in x.iter_mut() {
        let y = f.b[0] * *v + f.b[1] * x1 + f.b[2] * x2 - f.a[0] * y1 - f.a[1] * y2;
        (x2, x1, y2, y1) = (x1, *v, y1, y);
        *v = y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn tone(hz: f32, n: usize, sr: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (2.0 * std::f32::consts::PI * hz * i as f32 / sr as f32).sin())
            .collect()
    }

    /// Steady-state gain of the filter at `hz` (the second half of a long tone).
    fn gain(f: Biquad, hz: f32) -> f32 {
        let mut x = tone(hz, 16_000, 16_000);
        let input = rms(&x[8_000..]);
        biquad(&mut x, f);
        rms(&x[8_000..]) / input
    }

    #[test]
    fn microphone_filters_pass_the_band_and_cut_outside_it() {
        let hp = Biquad::high_pass(400.0, 16_000);
        let lp = Biquad::low_pass(3_000.0, 16_000);
        // Butterworth: −3 dB at the cut-off, ≈ −12 dB an octave beyond it.
        assert!(
            (gain(hp, 400.0) - 0.707).abs() < 0.02,
            "{}",
            gain(hp, 400.0)
        );
        assert!(
            (gain(lp, 3_000.0) - 0.707).abs() < 0.02,
            "{}",
            gain(lp, 3_000.0)
        );
        assert!(gain(hp, 100.0) < 0.07);
        assert!(gain(lp, 7_000.0) < 0.2);
        assert!((gain(hp, 2_000.0) - 1.0).abs() < 0.02);
        assert!((gain(lp, 500.0) - 1.0).abs() < 0.02);
    }

    #[test]
    fn a_voice_is_a_pure_function_of_its_draw_and_keeps_the_length() {
        let sr = 16_000;
        let clip = tone(220.0, 16_000, sr);
        let noises = vec![tone(50.0, 40_000, sr)];
        let voice = UserVoice::draw(&mut ChaCha8Rng::seed_from_u64(3), 1, sr);
        assert_eq!(
            voice,
            UserVoice::draw(&mut ChaCha8Rng::seed_from_u64(3), 1, sr)
        );
        assert_ne!(
            voice,
            UserVoice::draw(&mut ChaCha8Rng::seed_from_u64(4), 1, sr)
        );
        let room = voice.room(sr);
        let a = voice.render(&clip, &room, &noises, sr, &mut ChaCha8Rng::seed_from_u64(9));
        let b = voice.render(&clip, &room, &noises, sr, &mut ChaCha8Rng::seed_from_u64(9));
        assert_eq!(a, b);
        assert_eq!(a.len(), clip.len());
        assert!(a.iter().all(|v| v.is_finite() && v.abs() <= 1.0));
        assert_ne!(a, clip);
    }

    #[test]
    fn voices_differ_across_users() {
        let sr = 16_000;
        let voices: Vec<UserVoice> = (0..200)
            .map(|s| UserVoice::draw(&mut ChaCha8Rng::seed_from_u64(s), 3, sr))
            .collect();
        let resynth = voices.iter().filter(|v| v.f0_hz.is_some()).count();
        let rooms = voices.iter().filter(|v| v.rt60_s.is_some()).count();
        let noisy = voices.iter().filter(|v| v.noise.is_some()).count();
        // Binomial(200, p) is within ±4 sd of its mean.
        for (count, p) in [
            (resynth, RESYNTH_PROB),
            (rooms, ROOM_PROB),
            (noisy, NOISE_PROB),
        ] {
            let (mean, sd) = (200.0 * p, (200.0 * p * (1.0 - p)).sqrt());
            assert!(
                (count as f64 - mean).abs() < 4.0 * sd,
                "{count} of 200 at p = {p}"
            );
        }
        for v in &voices {
            assert!((SPEED[0]..=SPEED[1]).contains(&v.speed));
            assert!((VTL_WARP[0]..=VTL_WARP[1]).contains(&v.vtl_warp));
            assert!(v.low_cut_hz < v.high_cut_hz);
        }
    }
}
