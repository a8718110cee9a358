//! Poisson sampling: each example (DP-SGD) or device (federated rounds) is included
//! independently with probability `q`, drawn from a CSPRNG — the sampling that the
//! subsampled-Gaussian accountant assumes. The realized size varies; the divisor is
//! [`PoissonSampler::expected_count`], never the realized size.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

use super::{bad, DpError, ExpectedCount};

/// Poisson sampler with rate `q` over a CSPRNG.
#[derive(Debug, Clone)]
pub struct PoissonSampler {
    q: f64,
    rng: ChaCha20Rng,
}

impl PoissonSampler {
    /// A sampler seeded from the operating system (every real release).
    pub fn from_os(q: f64) -> Result<Self, DpError> {
        Self::check(q)?;
        Ok(Self {
            q,
            rng: ChaCha20Rng::from_os_rng(),
        })
    }

    /// A sampler seeded from `seed`: reproducible runs and tests only.
    pub fn from_seed(q: f64, seed: u64) -> Result<Self, DpError> {
        Self::check(q)?;
        Ok(Self {
            q,
            rng: ChaCha20Rng::seed_from_u64(seed),
        })
    }

    fn check(q: f64) -> Result<(), DpError> {
        if q > 0.0 && q <= 1.0 {
            Ok(())
        } else {
            Err(bad("sampling rate", q, "a rate in (0, 1]"))
        }
    }

    /// The rate.
    pub fn rate(&self) -> f64 {
        self.q
    }

    /// Whether one candidate is included (an independent Bernoulli(q) draw).
    pub fn include(&mut self) -> bool {
        self.rng.random::<f64>() < self.q
    }

    /// Indices of the candidates in `0..population` that are included.
    pub fn sample(&mut self, population: usize) -> Vec<usize> {
        (0..population).filter(|_| self.include()).collect()
    }

    /// The expected sample size `q × population` (the divisor of a noisy sum).
    pub fn expected_count(&self, population: usize) -> Result<ExpectedCount, DpError> {
        ExpectedCount::poisson(self.q, population)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inclusion_is_independent_with_rate_q() {
        // Over 2 000 samples of 1 000 candidates, each candidate's inclusion frequency is
        // near q and realized sizes vary (binomial), as Poisson sampling requires.
        let mut s = PoissonSampler::from_seed(0.1, 5).unwrap();
        let mut counts = vec![0u32; 1000];
        let mut sizes = Vec::new();
        for _ in 0..2000 {
            let picked = s.sample(1000);
            sizes.push(picked.len());
            for i in picked {
                counts[i] += 1;
            }
        }
        let mean_size = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!((mean_size - 100.0).abs() < 1.0, "{mean_size}");
        let var = sizes
            .iter()
            .map(|&n| (n as f64 - mean_size).powi(2))
            .sum::<f64>()
            / (sizes.len() - 1) as f64;
        // Binomial variance n q (1 − q) = 90; a fixed-size sampler would give 0.
        assert!((var - 90.0).abs() < 12.0, "{var}");
        let min = *counts.iter().min().unwrap() as f64 / 2000.0;
        let max = *counts.iter().max().unwrap() as f64 / 2000.0;
        assert!(min > 0.06 && max < 0.14, "{min} {max}");
        assert_eq!(s.expected_count(1000).unwrap().get(), 100.0);
    }

    #[test]
    fn refuses_rates_outside_the_unit_interval() {
        assert!(PoissonSampler::from_seed(0.0, 1).is_err());
        assert!(PoissonSampler::from_seed(1.01, 1).is_err());
        assert!(PoissonSampler::from_os(f64::NAN).is_err());
    }
}
