//! Background noises for `_background_noise_/` and for mixing into clips, made from a
//! seed (no recordings needed): white, pink, brown, mains hum and a running tap.

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Names of the generated noises, in order; each becomes `<name>.wav`.
pub const NOISE_NAMES: &[&str] = &[
    "white_noise",
    "pink_noise",
    "brown_noise",
    "hum",
    "running_tap",
];

/// Makes noise `kind` (an index into [`NOISE_NAMES`]) of `len` samples at 16 kHz,
/// scaled to an RMS of 0.1.
pub fn make_noise(kind: usize, len: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut white = move || rng.random_range(-1.0f32..1.0);
    let mut out: Vec<f32> = match kind {
        0 => (0..len).map(|_| white()).collect(),
        1 => {
            // Paul Kellet's economy pink filter.
            let (mut b0, mut b1, mut b2) = (0f32, 0f32, 0f32);
            (0..len)
                .map(|_| {
                    let w = white();
                    b0 = 0.99765 * b0 + w * 0.099_046;
                    b1 = 0.963 * b1 + w * 0.296_516_4;
                    b2 = 0.57 * b2 + w * 1.052_691_3;
                    b0 + b1 + b2 + w * 0.1848
                })
                .collect()
        }
        2 => {
            let mut acc = 0f32;
            (0..len)
                .map(|_| {
                    acc = 0.998 * acc + 0.05 * white();
                    acc
                })
                .collect()
        }
        3 => (0..len)
            .map(|i| {
                let t = i as f32 / 16000.0;
                let tau = std::f32::consts::TAU;
                (tau * 50.0 * t).sin()
                    + 0.5 * (tau * 100.0 * t).sin()
                    + 0.3 * (tau * 150.0 * t).sin()
                    + 0.05 * white()
            })
            .collect(),
        _ => {
            // Band-limited noise (one-pole high- then low-pass) with a slow wobble.
            let (mut hp_prev_in, mut hp, mut lp) = (0f32, 0f32, 0f32);
            (0..len)
                .map(|i| {
                    let w = white();
                    hp = 0.95 * (hp + w - hp_prev_in);
                    hp_prev_in = w;
                    lp = 0.6 * lp + 0.4 * hp;
                    let t = i as f32 / 16000.0;
                    lp * (1.0 + 0.3 * (std::f32::consts::TAU * 1.7 * t).sin())
                })
                .collect()
        }
    };
    let rms = (out.iter().map(|s| s * s).sum::<f32>() / len.max(1) as f32).sqrt();
    if rms > 0.0 {
        out.iter_mut().for_each(|s| *s *= 0.1 / rms);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noises_are_deterministic_distinct_and_scaled() {
        let a: Vec<Vec<f32>> = (0..NOISE_NAMES.len())
            .map(|k| make_noise(k, 8000, 7))
            .collect();
        for (k, n) in a.iter().enumerate() {
            assert_eq!(n, &make_noise(k, 8000, 7));
            let rms = (n.iter().map(|s| s * s).sum::<f32>() / n.len() as f32).sqrt();
            assert!((rms - 0.1).abs() < 1e-3, "{k}: rms {rms}");
        }
        // Pink and brown noise have more low-frequency energy than white: compare the
        // lag-1 autocorrelation.
        let lag1 = |x: &[f32]| {
            x.windows(2).map(|w| w[0] * w[1]).sum::<f32>() / x.iter().map(|s| s * s).sum::<f32>()
        };
        assert!(lag1(&a[0]).abs() < 0.05);
        assert!(lag1(&a[1]) > 0.3);
        assert!(lag1(&a[2]) > 0.9);
    }
}
