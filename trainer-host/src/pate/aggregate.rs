//! Noisy aggregation of teacher votes (Papernot et al. 2017, 2018): LNMax (Laplace noise
//! on every count), GNMax (Gaussian), and Confident-GNMax (answer only when the noisy top
//! count passes a threshold, then GNMax). Noise comes from the CSPRNG
//! [`NoiseSource`]; the privacy cost of a set of votes is the accountant's
//! ([`crate::accountant::pate`]), so what is charged and what is run are the same
//! parameters in one place.

use hush_models::dp::NoiseSource;
use serde::{Deserialize, Serialize};

use crate::accountant::pate::{analyze_gnmax, analyze_lnmax, PateAnalysis, Threshold};
use crate::accountant::AccountantError;

use super::PateError;

/// How the teachers' votes on one query become (at most) one label.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum Aggregator {
    /// Laplace noise of scale `lambda` on every count, then the argmax (pure `2/λ`-DP).
    #[serde(rename = "lnmax")]
    LnMax {
        /// Laplace scale λ.
        lambda: f64,
    },
    /// Gaussian noise of std `sigma` on every count, then the argmax.
    #[serde(rename = "gnmax")]
    GnMax {
        /// Noise std σ.
        sigma: f64,
    },
    /// Answer only if the top count plus `N(0, σ₁²)` reaches `threshold`; then GNMax
    /// with `sigma2`. A refused query has no label.
    #[serde(rename = "confident-gnmax")]
    ConfidentGnMax {
        /// Threshold T on the noisy top count.
        threshold: f64,
        /// Noise σ₁ of the threshold step.
        sigma1: f64,
        /// Noise σ₂ of the answer.
        sigma2: f64,
    },
}

impl Aggregator {
    /// Refuses non-positive or non-finite noise and a non-finite threshold, naming the
    /// option.
    pub fn validate(&self) -> Result<(), PateError> {
        let positive = |option: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(PateError::Option {
                    option,
                    reason: format!("{v} is not a positive number"),
                })
            }
        };
        match *self {
            Self::LnMax { lambda } => positive("--lambda", lambda),
            Self::GnMax { sigma } => positive("--sigma", sigma),
            Self::ConfidentGnMax {
                threshold,
                sigma1,
                sigma2,
            } => {
                positive("--sigma1", sigma1)?;
                positive("--sigma", sigma2)?;
                if threshold.is_finite() {
                    Ok(())
                } else {
                    Err(PateError::Option {
                        option: "--threshold",
                        reason: format!("{threshold} is not a finite number"),
                    })
                }
            }
        }
    }

    /// The aggregated label of one query's vote histogram, or `None` when a confident
    /// aggregator refuses it.
    pub fn answer(&self, votes: &[f64], noise: &mut NoiseSource) -> Option<usize> {
        match *self {
            Self::LnMax { lambda } => noisy_argmax(votes, || laplace(noise, lambda)),
            Self::GnMax { sigma } => noisy_argmax(votes, || sigma * noise.standard_normal()),
            Self::ConfidentGnMax {
                threshold,
                sigma1,
                sigma2,
            } => {
                let top = votes.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if top + sigma1 * noise.standard_normal() < threshold {
                    return None;
                }
                noisy_argmax(votes, || sigma2 * noise.standard_normal())
            }
        }
    }

    /// The privacy cost of answering every histogram in `votes` with this aggregator, at
    /// `delta`, over `orders` (the accountant's PATE analysis; refused queries pay the
    /// threshold step and, as the accountant's upper bound, the answer step too).
    pub fn analyze(
        &self,
        votes: &[Vec<f64>],
        delta: f64,
        orders: &[f64],
    ) -> Result<PateAnalysis, AccountantError> {
        match *self {
            Self::LnMax { lambda } => analyze_lnmax(votes, lambda, delta, orders),
            Self::GnMax { sigma } => analyze_gnmax(votes, sigma, None, delta, orders, None),
            Self::ConfidentGnMax {
                threshold,
                sigma1,
                sigma2,
            } => analyze_gnmax(
                votes,
                sigma2,
                Some(Threshold { threshold, sigma1 }),
                delta,
                orders,
                None,
            ),
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Self::LnMax { .. } => "lnmax",
            Self::GnMax { .. } => "gnmax",
            Self::ConfidentGnMax { .. } => "confident-gnmax",
        }
    }
}

/// Counts of `predictions` (class indices below `classes`) as a vote histogram.
pub fn vote_histogram(predictions: impl IntoIterator<Item = usize>, classes: usize) -> Vec<f64> {
    let mut h = vec![0.0; classes];
    for p in predictions {
        if let Some(c) = h.get_mut(p) {
            *c += 1.0;
        }
    }
    h
}

/// The index of the largest `votes[i] + noise()` (one draw per count, in order).
fn noisy_argmax(votes: &[f64], mut noise: impl FnMut() -> f64) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, v) in votes.iter().enumerate() {
        let x = v + noise();
        if best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map(|(i, _)| i)
}

/// One Laplace draw of scale `b` (inverse CDF of a uniform in (−½, ½)).
fn laplace(noise: &mut NoiseSource, b: f64) -> f64 {
    let u = noise.uniform() - 0.5;
    // |u| < 0.5 always (uniform is in [0, 1)), except u = -0.5 exactly: its log is -inf.
    let t = (1.0 - 2.0 * u.abs()).max(f64::MIN_POSITIVE);
    -b * u.signum() * t.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sample mean and std of `n` draws.
    fn sample_noise(n: usize, mut draw: impl FnMut() -> f64) -> (f64, f64) {
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
        let (m, s) = sample_noise(n, || laplace(&mut noise, 3.0));
        assert!(m.abs() < 0.05, "{m}");
        assert!((s / (3.0 * 2f64.sqrt()) - 1.0).abs() < 0.02, "{s}");
        // Mean absolute deviation of Laplace(b) is b.
        let mad = (0..n).map(|_| laplace(&mut noise, 3.0).abs()).sum::<f64>() / n as f64;
        assert!((mad / 3.0 - 1.0).abs() < 0.02, "{mad}");
        let (m, s) = sample_noise(n, || 5.0 * noise.standard_normal());
        assert!(m.abs() < 0.05 && (s / 5.0 - 1.0).abs() < 0.01, "{m} {s}");
    }

    /// How often `agg` answers `class` on `votes`, over 100 000 seeded draws.
    fn answer_rate(agg: Aggregator, votes: &[f64], class: usize, seed: u64) -> f64 {
        let mut noise = NoiseSource::from_seed(seed);
        let n = 100_000;
        (0..n)
            .filter(|_| agg.answer(votes, &mut noise) == Some(class))
            .count() as f64
            / n as f64
    }

    #[test]
    fn gnmax_flips_a_two_vote_margin_as_often_as_the_gaussian_says() {
        // Votes [12, 10]: GNMax(σ) answers class 1 when N(0, 2σ²) > 2, probability
        // Φ(−2/(σ√2)). With σ = 2: Φ(−0.7071) = 0.23975.
        let flips = answer_rate(Aggregator::GnMax { sigma: 2.0 }, &[12.0, 10.0], 1, 11);
        // 4 standard errors: √(0.24·0.76/1e5) = 0.00135.
        assert!((flips - 0.23975).abs() < 0.0054, "{flips}");
    }

    #[test]
    fn lnmax_flips_a_margin_as_often_as_the_laplace_says() {
        // Votes [11, 10], Laplace(b = 1) on each: P(L₁ − L₀ > 1) for the difference of two
        // Laplace(1) variables = e^{-1}(2 + 1)/4 = 0.27591.
        let flips = answer_rate(Aggregator::LnMax { lambda: 1.0 }, &[11.0, 10.0], 1, 5);
        assert!((flips - 0.27591).abs() < 0.0057, "{flips}");
    }

    #[test]
    fn confident_gnmax_answers_with_the_threshold_probability() {
        // Top count 40, T = 42, σ₁ = 4: answered with probability P(N > 0.5) = 0.30854.
        let agg = Aggregator::ConfidentGnMax {
            threshold: 42.0,
            sigma1: 4.0,
            sigma2: 1.0,
        };
        let mut noise = NoiseSource::from_seed(3);
        let n = 100_000;
        let answers: Vec<Option<usize>> = (0..n)
            .map(|_| agg.answer(&[40.0, 5.0, 5.0], &mut noise))
            .collect();
        let rate = answers.iter().filter(|a| a.is_some()).count() as f64 / n as f64;
        assert!((rate - 0.30854).abs() < 0.0059, "{rate}");
        assert!(answers.iter().flatten().all(|&a| a == 0));
    }

    #[test]
    fn the_cost_is_the_accountants_for_the_same_votes() {
        let votes = vec![vec![40.0, 5.0, 5.0], vec![20.0, 18.0, 12.0]];
        let orders = crate::accountant::rdp::default_orders();
        let agg = Aggregator::ConfidentGnMax {
            threshold: 30.0,
            sigma1: 10.0,
            sigma2: 5.0,
        };
        let a = agg.analyze(&votes, 1e-5, &orders).unwrap();
        let b = analyze_gnmax(
            &votes,
            5.0,
            Some(Threshold {
                threshold: 30.0,
                sigma1: 10.0,
            }),
            1e-5,
            &orders,
            None,
        )
        .unwrap();
        assert_eq!(a, b);
        // LNMax data-independent: 2/λ pure DP per query as RDP min(ε²α/2, ε), composed.
        let l = Aggregator::LnMax { lambda: 20.0 }
            .analyze(&votes, 1e-5, &orders)
            .unwrap();
        for (a, r) in orders.iter().zip(&l.rdp_data_independent) {
            assert!((r - 2.0 * (0.005 * a).min(0.1)).abs() < 1e-12, "{a}: {r}");
        }
        assert!(l.epsilon_data_dependent.0 <= l.epsilon_data_independent.0 + 1e-12);
    }

    #[test]
    fn bad_noise_is_refused_by_name() {
        let e = Aggregator::GnMax { sigma: 0.0 }.validate().unwrap_err();
        assert!(e.to_string().contains("--sigma"), "{e}");
        let e = Aggregator::ConfidentGnMax {
            threshold: f64::NAN,
            sigma1: 1.0,
            sigma2: 1.0,
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("--threshold"), "{e}");
    }

    #[test]
    fn labels_files_name_the_aggregator_as_the_cli_does() {
        for a in [
            Aggregator::LnMax { lambda: 1.0 },
            Aggregator::GnMax { sigma: 1.0 },
            Aggregator::ConfidentGnMax {
                threshold: 1.0,
                sigma1: 1.0,
                sigma2: 1.0,
            },
        ] {
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(json["kind"], a.name());
            assert_eq!(serde_json::from_value::<Aggregator>(json).unwrap(), a);
        }
    }

    #[test]
    fn histograms_count_votes() {
        assert_eq!(vote_histogram([0, 2, 2, 1, 2], 3), vec![1.0, 1.0, 3.0]);
    }
}
