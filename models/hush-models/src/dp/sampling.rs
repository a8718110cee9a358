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
    pub(crate) fn include(&mut self) -> bool {
        self.rng.random::<f64>() < self.q
    }

    /// Indices of the candidates in `0..population` that are included.
    pub(crate) fn sample(&mut self, population: usize) -> Vec<usize> {
        (0..population).filter(|_| self.include()).collect()
    }

    /// The expected sample size `q × population` (the divisor of a noisy sum).
    pub fn expected_count(&self, population: usize) -> Result<ExpectedCount, DpError> {
        ExpectedCount::poisson(self.q, population)
    }
}

/// Poisson sampling of a population by key: whether member `m` is in round `r`'s sample
/// is one Bernoulli(q) draw read from ChaCha20 keyed by `key`, on stream `r`, at the
/// position of `m` — the same answer whoever asks, in whatever order, on whichever thread
/// or replica, and each (round, member) draw independent of every other (distinct
/// positions of one keystream). The federated host keys its cohorts this way; a simulator
/// can then draw a million devices without their check-ins.
#[derive(Debug, Clone)]
pub struct KeyedPoissonSampler {
    q: f64,
    key: [u8; 32],
}

impl KeyedPoissonSampler {
    /// A sampler with rate `q` and a 32-byte secret key (from the OS in real runs: whoever
    /// knows the key knows every future cohort).
    pub fn new(q: f64, key: [u8; 32]) -> Result<Self, DpError> {
        PoissonSampler::check(q)?;
        Ok(Self { q, key })
    }

    /// A fresh secret key from the operating system.
    pub fn os_key() -> [u8; 32] {
        ChaCha20Rng::from_os_rng().random()
    }

    /// A key derived from `seed`: reproducible runs and tests only.
    pub fn seed_key(seed: u64) -> [u8; 32] {
        ChaCha20Rng::seed_from_u64(seed).random()
    }

    /// The rate.
    pub fn rate(&self) -> f64 {
        self.q
    }

    /// Whether `member` is in the sample of `round`.
    pub fn includes(&self, round: u64, member: u64) -> bool {
        let mut rng = ChaCha20Rng::from_seed(self.key);
        rng.set_stream(round);
        // One f64 takes two 32-bit words: member m reads words 2m and 2m + 1.
        rng.set_word_pos(u128::from(member) * 2);
        rng.random::<f64>() < self.q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_draws_are_order_free_independent_and_at_rate_q() {
        let s = KeyedPoissonSampler::new(0.1, KeyedPoissonSampler::seed_key(3)).unwrap();
        // The same answer in any order and on a second sampler with the same key.
        let forward: Vec<bool> = (0..1000).map(|m| s.includes(7, m)).collect();
        let backward: Vec<bool> = (0..1000).rev().map(|m| s.includes(7, m)).collect();
        let again = KeyedPoissonSampler::new(0.1, KeyedPoissonSampler::seed_key(3)).unwrap();
        assert!(forward.iter().eq(backward.iter().rev()));
        assert!((0..1000).all(|m| again.includes(7, m) == forward[m as usize]));
        // Rate q over rounds × members, and rounds not copies of one another.
        let mut picked = 0u32;
        let mut same_as_round_0 = 0u32;
        for r in 0..200u64 {
            for m in 0..1000u64 {
                let inc = s.includes(r, m);
                picked += u32::from(inc);
                same_as_round_0 += u32::from(inc && s.includes(0, m));
            }
        }
        let rate = f64::from(picked) / 200_000.0;
        assert!((rate - 0.1).abs() < 0.005, "{rate}");
        // Independent rounds share a member with probability q² (0.01), not q.
        let shared = f64::from(same_as_round_0) / 200_000.0;
        assert!(shared < 0.02, "{shared}");
        // Another key, another sample.
        let other = KeyedPoissonSampler::new(0.1, KeyedPoissonSampler::seed_key(4)).unwrap();
        assert!((0..1000).any(|m| other.includes(7, m) != forward[m as usize]));
        assert!(KeyedPoissonSampler::new(0.0, [0; 32]).is_err());
    }

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
