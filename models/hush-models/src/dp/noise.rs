//! Noise: the Gaussian mechanism on a sum of clipped contributions, from a CSPRNG, and the
//! two other mechanisms hush releases through ([`GaussianNoise`] and [`LaplaceNoise`] on
//! single values: PATE's noisy votes and thresholds, a device's local noise, a
//! smooth-sensitivity release).
//!
//! The raw draws of [`NoiseSource`] are private to this crate's `dp` module: code
//! elsewhere holds a source and hands it to a mechanism, so every draw of privacy noise
//! in hush happens here (the compiler enforces it).
//!
//! [`GaussianMechanism::privatize`] is the one place where noise is added and the noisy
//! sum is turned into a mean: std `z × sensitivity` on the **sum**, then division by the
//! [`ExpectedCount`] — a public constant made from the sampling rate and population, which
//! cannot be built from the number of contributions actually received.
//!
//! The discrete mode rounds the sum onto an integer grid of step `γ` (randomized
//! rounding) and adds discrete-Gaussian noise (Canonne, Kamath, Steinke 2020) there, so the
//! released values do not depend on floating-point noise tails. Its sensitivity on the
//! grid is taken as `(Δ + γ√d)/γ`, the rounding's worst case, so it is never weaker than
//! the continuous mode.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use super::{bad, DpError};
use crate::checkpoint::NamedTensor;

/// A cryptographically secure source of noise and sampling randomness (ChaCha20).
#[derive(Debug, Clone)]
pub struct NoiseSource(ChaCha20Rng);

impl NoiseSource {
    /// Seeded from the operating system: what every real release uses.
    pub fn from_os() -> Self {
        Self(ChaCha20Rng::from_os_rng())
    }

    /// Seeded from `seed`: reproducible runs and tests only (the noise is then
    /// predictable to anyone who knows the seed).
    pub fn from_seed(seed: u64) -> Self {
        Self(ChaCha20Rng::seed_from_u64(seed))
    }

    /// The noise of one release among many, keyed: ChaCha20 with `key` on stream
    /// `stream` (e.g. the round), so that a restarted process never replays the noise
    /// of an earlier release. With a secret key from the OS this is as strong as
    /// [`NoiseSource::from_os`]; with a key derived from a seed, reproducible runs only.
    pub fn from_key(key: [u8; 32], stream: u64) -> Self {
        let mut rng = ChaCha20Rng::from_seed(key);
        rng.set_stream(stream);
        Self(rng)
    }

    /// One standard normal draw.
    pub(crate) fn standard_normal(&mut self) -> f64 {
        self.0.sample(StandardNormal)
    }

    /// One uniform draw in `[0, 1)`.
    pub(crate) fn uniform(&mut self) -> f64 {
        self.0.random::<f64>()
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }

    fn bernoulli_exp(&mut self, gamma: f64) -> bool {
        self.uniform() < (-gamma).exp()
    }

    /// Discrete Laplace on the integers with scale `t` (`P(x) ∝ exp(−|x|/t)`).
    fn discrete_laplace(&mut self, t: u64) -> i64 {
        loop {
            let u = self.below(t);
            if !self.bernoulli_exp(u as f64 / t as f64) {
                continue;
            }
            let mut v = 0u64;
            while self.bernoulli_exp(1.0) {
                v += 1;
            }
            let x = (u + t * v) as i64;
            let negative = self.0.random::<bool>();
            if negative && x == 0 {
                continue;
            }
            return if negative { -x } else { x };
        }
    }

    /// Discrete Gaussian on the integers (`P(x) ∝ exp(−x²/2σ²)`), by rejection from a
    /// discrete Laplace.
    pub(crate) fn discrete_gaussian(&mut self, sigma: f64) -> i64 {
        if sigma <= 0.0 {
            return 0;
        }
        let t = sigma.floor() as u64 + 1;
        let s2 = sigma * sigma;
        loop {
            let y = self.discrete_laplace(t);
            let d = (y.unsigned_abs() as f64) - s2 / t as f64;
            if self.bernoulli_exp(d * d / (2.0 * s2)) {
                return y;
            }
        }
    }
}

/// Continuous or discrete Gaussian noise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseKind {
    /// Gaussian noise in floating point.
    Gaussian,
    /// Discrete Gaussian noise on a grid of step `granularity`.
    DiscreteGaussian {
        /// Grid step γ.
        granularity: f64,
    },
}

/// The divisor of a noisy sum: the **expected** number of contributions, `q × population`.
/// Built only from the sampling plan, never from what was received, so dropouts or a
/// small realized sample cannot change the noise-to-signal ratio.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExpectedCount(f64);

impl ExpectedCount {
    /// `q × population` for Poisson sampling with rate `q`.
    pub fn poisson(q: f64, population: usize) -> Result<Self, DpError> {
        if !(q > 0.0 && q <= 1.0) {
            return Err(bad("sampling rate", q, "a rate in (0, 1]"));
        }
        if population == 0 {
            return Err(bad("population", 0, "at least one example or device"));
        }
        Ok(Self(q * population as f64))
    }

    /// `self × availability`: the expected count when only a published fraction
    /// `availability` ∈ (0, 1] of the population is expected to be reachable in a round. A
    /// public constant fixed before the round, never the realized count.
    pub fn with_availability(self, availability: f64) -> Result<Self, DpError> {
        if !(availability > 0.0 && availability <= 1.0) {
            return Err(bad("availability", availability, "a fraction in (0, 1]"));
        }
        Ok(Self(self.0 * availability))
    }

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

/// Gaussian noise of a fixed standard deviation on single released values: PATE's noisy
/// vote counts and thresholds, a device's local noise on its update, the draw of a
/// smooth-sensitivity release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianNoise {
    std: f64,
}

impl GaussianNoise {
    /// Noise of standard deviation `std` (finite, ≥ 0).
    pub fn new(std: f64) -> Result<Self, DpError> {
        if std.is_finite() && std >= 0.0 {
            Ok(Self { std })
        } else {
            Err(bad("noise standard deviation", std, "a finite value ≥ 0"))
        }
    }

    /// Standard normal noise (std 1).
    pub fn standard() -> Self {
        Self { std: 1.0 }
    }

    /// The standard deviation.
    pub fn std(&self) -> f64 {
        self.std
    }

    /// One draw.
    pub fn draw(&self, src: &mut NoiseSource) -> f64 {
        self.std * super::fault::noise_scale() * src.standard_normal()
    }

    /// Adds an independent draw to every value.
    pub fn add_to(&self, values: &mut [f32], src: &mut NoiseSource) {
        for v in values {
            *v += self.draw(src) as f32;
        }
    }
}

/// Laplace noise of scale `b` (density `∝ exp(−|x|/b)`) on single values: PATE's LNMax
/// vote counts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaplaceNoise {
    scale: f64,
}

impl LaplaceNoise {
    /// Noise of scale `scale` (finite, > 0).
    pub fn new(scale: f64) -> Result<Self, DpError> {
        if scale.is_finite() && scale > 0.0 {
            Ok(Self { scale })
        } else {
            Err(bad("Laplace scale", scale, "a finite value > 0"))
        }
    }

    /// One draw (the inverse CDF of a uniform in (−½, ½)).
    pub fn draw(&self, src: &mut NoiseSource) -> f64 {
        let u = src.uniform() - 0.5;
        // |u| < 0.5 always (uniform is in [0, 1)), except u = -0.5 exactly: its log is -inf.
        let t = (1.0 - 2.0 * u.abs()).max(f64::MIN_POSITIVE);
        -self.scale * super::fault::noise_scale() * u.signum() * t.ln()
    }
}

/// The Gaussian mechanism on a sum of clipped contributions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GaussianMechanism {
    /// Noise multiplier `z`.
    pub noise_multiplier: f64,
    /// L2 sensitivity of one contribution (`ClipBounds::sensitivity`).
    pub sensitivity: f64,
    /// Divisor of the noisy sum.
    pub expected: ExpectedCount,
    /// Continuous or discrete.
    pub kind: NoiseKind,
    /// Noise-cohort simulation: when set to `M`, the noise on the mean is what a cohort of
    /// `M` would get (std on the sum scaled by `expected / M`). Accuracy then shows what a
    /// deployment with cohorts of `M` would see; ε must be reported for that deployment.
    pub noise_cohort: Option<f64>,
}

impl GaussianMechanism {
    /// A mechanism with noise multiplier `z` for contributions of `sensitivity`.
    pub fn new(
        noise_multiplier: f64,
        sensitivity: f64,
        expected: ExpectedCount,
        kind: NoiseKind,
    ) -> Result<Self, DpError> {
        if !(noise_multiplier.is_finite() && noise_multiplier >= 0.0) {
            return Err(bad(
                "noise multiplier",
                noise_multiplier,
                "a finite value ≥ 0",
            ));
        }
        if !(sensitivity.is_finite() && sensitivity > 0.0) {
            return Err(bad("sensitivity", sensitivity, "a finite value > 0"));
        }
        if let NoiseKind::DiscreteGaussian { granularity } = kind {
            if !(granularity.is_finite() && granularity > 0.0) {
                return Err(bad("granularity", granularity, "a finite grid step > 0"));
            }
        }
        Ok(Self {
            noise_multiplier,
            sensitivity,
            expected,
            kind,
            noise_cohort: None,
        })
    }

    /// Simulate the noise of a cohort of `m` (see [`GaussianMechanism::noise_cohort`]).
    pub fn with_noise_cohort(mut self, m: f64) -> Result<Self, DpError> {
        if !(m.is_finite() && m >= self.expected.get()) {
            return Err(bad(
                "noise cohort size",
                m,
                "at least the expected cohort (it can only scale noise down for simulation)",
            ));
        }
        self.noise_cohort = Some(m);
        Ok(self)
    }

    /// Standard deviation of the noise added to the sum (continuous mode).
    pub fn noise_std_on_sum(&self) -> f64 {
        let scale = self.noise_cohort.map_or(1.0, |m| self.expected.get() / m);
        self.noise_multiplier * self.sensitivity * scale
    }

    /// Adds the noise to `sum` (the sum of clipped contributions) and divides by the
    /// expected count: on return `sum` holds the private mean.
    pub fn privatize(&self, sum: &mut [NamedTensor], src: &mut NoiseSource) -> Result<(), DpError> {
        if let Some(t) = sum.iter().find(|t| t.data.iter().any(|v| !v.is_finite())) {
            return Err(DpError::Layout {
                reason: format!("sum of layer `{}` is not finite", t.name),
            });
        }
        let std = self.noise_std_on_sum() * super::fault::noise_scale();
        let divisor = self.expected.get();
        match self.kind {
            NoiseKind::Gaussian => {
                for v in sum.iter_mut().flat_map(|t| t.data.iter_mut()) {
                    let noisy = f64::from(*v) + std * src.standard_normal();
                    *v = (noisy / divisor) as f32;
                }
            }
            NoiseKind::DiscreteGaussian { granularity: g } => {
                let d: usize = sum.iter().map(|t| t.data.len()).sum();
                let scale = self.noise_cohort.map_or(1.0, |m| self.expected.get() / m);
                let sigma_grid = self.noise_multiplier * (self.sensitivity + g * (d as f64).sqrt())
                    / g
                    * scale
                    * super::fault::noise_scale();
                for v in sum.iter_mut().flat_map(|t| t.data.iter_mut()) {
                    let x = f64::from(*v) / g;
                    let floor = x.floor();
                    let rounded = if src.uniform() < x - floor {
                        floor + 1.0
                    } else {
                        floor
                    };
                    let noisy = rounded + src.discrete_gaussian(sigma_grid) as f64;
                    *v = (noisy * g / divisor) as f32;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sample mean and std of `n` draws.
    fn moments(n: usize, mut draw: impl FnMut() -> f64) -> (f64, f64) {
        let xs: Vec<f64> = (0..n).map(|_| draw()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        (mean, var.sqrt())
    }

    #[test]
    fn laplace_and_gaussian_noise_have_the_configured_scale() {
        let mut noise = NoiseSource::from_seed(7);
        let n = 200_000;
        // Laplace(b): std b√2; the standard error of the sample std is about 1.2 % here.
        let lap = LaplaceNoise::new(3.0).unwrap();
        let (m, s) = moments(n, || lap.draw(&mut noise));
        assert!(m.abs() < 0.05, "{m}");
        assert!((s / (3.0 * 2f64.sqrt()) - 1.0).abs() < 0.02, "{s}");
        // Mean absolute deviation of Laplace(b) is b.
        let mad = (0..n).map(|_| lap.draw(&mut noise).abs()).sum::<f64>() / n as f64;
        assert!((mad / 3.0 - 1.0).abs() < 0.02, "{mad}");
        let gauss = GaussianNoise::new(5.0).unwrap();
        let (m, s) = moments(n, || gauss.draw(&mut noise));
        assert!(m.abs() < 0.05 && (s / 5.0 - 1.0).abs() < 0.01, "{m} {s}");
        assert!(GaussianNoise::new(f64::NAN).is_err() && GaussianNoise::new(-1.0).is_err());
        assert!(LaplaceNoise::new(0.0).is_err());
    }

    fn zeros(n: usize) -> Vec<NamedTensor> {
        vec![NamedTensor::new("w", vec![n], vec![0.0; n]).unwrap()]
    }

    fn mean_std(x: &[f32]) -> (f64, f64) {
        let n = x.len() as f64;
        let m = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let v = x.iter().map(|&v| (f64::from(v) - m).powi(2)).sum::<f64>() / (n - 1.0);
        (m, v.sqrt())
    }

    #[test]
    fn noise_std_is_z_times_sensitivity_on_the_sum() {
        // 200 000 draws: the sample std is within 1 % of the truth with overwhelming
        // probability (its relative standard error is 1/√(2n) ≈ 0.16 %).
        let expected = ExpectedCount::poisson(0.5, 8).unwrap(); // 4
        let m = GaussianMechanism::new(1.3, 2.0, expected, NoiseKind::Gaussian).unwrap();
        let mut sum = zeros(200_000);
        m.privatize(&mut sum, &mut NoiseSource::from_seed(1))
            .unwrap();
        let (mean, std) = mean_std(&sum[0].data);
        // The mean is divided by the expected count 4: std = 1.3 × 2 / 4.
        assert!((std - 0.65).abs() / 0.65 < 0.01, "std {std}");
        assert!(mean.abs() < 0.01);
    }

    #[test]
    fn divides_by_the_expected_count_not_the_realized_one() {
        // Three contributions of 1.0 arrived; ten were expected: the mean is 0.3.
        let expected = ExpectedCount::poisson(0.1, 100).unwrap();
        let m = GaussianMechanism::new(0.0, 1.0, expected, NoiseKind::Gaussian).unwrap();
        let mut sum = vec![NamedTensor::new("w", vec![1], vec![3.0]).unwrap()];
        m.privatize(&mut sum, &mut NoiseSource::from_seed(0))
            .unwrap();
        assert!((sum[0].data[0] - 0.3).abs() < 1e-6);
    }

    #[test]
    fn noise_cohort_scales_noise_down_by_expected_over_m() {
        let expected = ExpectedCount::poisson(1.0, 10).unwrap();
        let m = GaussianMechanism::new(1.0, 1.0, expected, NoiseKind::Gaussian)
            .unwrap()
            .with_noise_cohort(1000.0)
            .unwrap();
        assert!((m.noise_std_on_sum() - 0.01).abs() < 1e-12);
        assert!(
            GaussianMechanism::new(1.0, 1.0, expected, NoiseKind::Gaussian)
                .unwrap()
                .with_noise_cohort(5.0)
                .is_err()
        );
    }

    #[test]
    fn discrete_gaussian_has_the_right_variance() {
        let mut src = NoiseSource::from_seed(7);
        for sigma in [0.7, 3.0, 20.0] {
            let n = 100_000;
            let draws: Vec<f32> = (0..n)
                .map(|_| src.discrete_gaussian(sigma) as f32)
                .collect();
            let (mean, std) = mean_std(&draws);
            assert!((std - sigma).abs() / sigma < 0.02, "σ {sigma}: std {std}");
            assert!(mean.abs() < 0.05 * sigma.max(1.0));
        }
    }

    #[test]
    fn discrete_mode_is_unbiased_on_the_grid() {
        let expected = ExpectedCount::poisson(1.0, 1).unwrap();
        let m = GaussianMechanism::new(
            0.0,
            1.0,
            expected,
            NoiseKind::DiscreteGaussian { granularity: 0.25 },
        )
        .unwrap();
        let mut sum = vec![NamedTensor::new("w", vec![50_000], vec![0.1; 50_000]).unwrap()];
        m.privatize(&mut sum, &mut NoiseSource::from_seed(3))
            .unwrap();
        assert!(sum[0].data.iter().all(|v| *v == 0.0 || *v == 0.25));
        let (mean, _) = mean_std(&sum[0].data);
        assert!((mean - 0.1).abs() < 0.005, "mean {mean}");
    }

    #[test]
    fn refuses_bad_parameters() {
        let e = ExpectedCount::poisson(0.5, 10).unwrap();
        assert!(ExpectedCount::poisson(0.0, 10).is_err());
        assert!(ExpectedCount::poisson(1.5, 10).is_err());
        assert!(ExpectedCount::poisson(0.5, 0).is_err());
        assert!(GaussianMechanism::new(-1.0, 1.0, e, NoiseKind::Gaussian).is_err());
        assert!(GaussianMechanism::new(1.0, 0.0, e, NoiseKind::Gaussian).is_err());
        assert!(GaussianMechanism::new(
            1.0,
            1.0,
            e,
            NoiseKind::DiscreteGaussian { granularity: 0.0 }
        )
        .is_err());
    }
}
