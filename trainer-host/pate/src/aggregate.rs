//! Noisy aggregation of teacher votes (Papernot et al. 2017, 2018): LNMax (Laplace noise
//! on every count), GNMax (Gaussian), Confident-GNMax (answer only when the noisy top
//! count passes a threshold, then GNMax), and Interactive-GNMax (ask the teachers only
//! where they disagree with the current student; where they agree and the student is
//! confident, keep the student's own label). Noise comes from the CSPRNG
//! [`NoiseSource`]; the privacy cost of a set of votes is the accountant's
//! ([`hush_privacy::accountant::pate`]), so what is charged and what is run are the same
//! parameters in one place.

use hush_models::dp::{GaussianNoise, LaplaceNoise, NoiseSource};
use serde::{Deserialize, Serialize};

use hush_privacy::accountant::pate::{
    analyze_for_release, analyze_gnmax, analyze_lnmax, analyze_thresholded_run, PateAnalysis,
    Threshold, ThresholdCheck,
};
use hush_privacy::accountant::AccountantError;

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
    /// Interactive GNMax (Papernot et al. 2018, Algorithm 2). With the student's class
    /// probabilities `p` scaled to votes, `O = n·p` (`n` teachers): if
    /// `max_j (n_j − O_j) + N(0, σ₁²)` reaches `threshold` the teachers disagree with the
    /// student and answer with GNMax(σ₂); otherwise, if the student's top probability is
    /// at least `student_confidence`, the query is skipped and the student's own label
    /// kept; otherwise it is refused. Without a student (`O = 0`) it is Confident-GNMax.
    #[serde(rename = "interactive-gnmax")]
    InteractiveGnMax {
        /// Threshold T on the noisy disagreement `max_j (n_j − O_j)`.
        threshold: f64,
        /// Noise σ₁ of the threshold step.
        sigma1: f64,
        /// Noise σ₂ of the answer.
        sigma2: f64,
        /// Lowest top probability at which the student's own label is kept (public: the
        /// student saw only earlier noisy labels).
        student_confidence: f64,
    },
}

/// What the aggregator made of one query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The teachers' noisy answer (a class index).
    Teachers(usize),
    /// Interactive only: the teachers did not disagree with the confident student, whose
    /// own label (a class index) is kept.
    Student(usize),
    /// No label.
    Refused,
}

impl Answer {
    /// The label's class index, if any.
    pub fn class(self) -> Option<usize> {
        match self {
            Self::Teachers(c) | Self::Student(c) => Some(c),
            Self::Refused => None,
        }
    }
}

/// A smooth-sensitivity release of the data-dependent ε (GNSS; see
/// [`hush_privacy::accountant::pate`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SmoothRelease {
    /// Noise multiplier σ_ss.
    pub sigma_ss: f64,
    /// Smoothness β (default `0.4/λ` at the data-dependent optimal order λ).
    pub beta: Option<f64>,
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
                finite_threshold(threshold)
            }
            Self::InteractiveGnMax {
                threshold,
                sigma1,
                sigma2,
                student_confidence,
            } => {
                positive("--sigma1", sigma1)?;
                positive("--sigma", sigma2)?;
                if !(student_confidence > 0.0 && student_confidence <= 1.0) {
                    return Err(PateError::Option {
                        option: "--student-confidence",
                        reason: format!("{student_confidence} is not a probability in (0, 1]"),
                    });
                }
                finite_threshold(threshold)
            }
        }
    }

    /// The aggregated label of one query's vote histogram, given the current student's
    /// class probabilities on the clip (interactive only; `None` reads as `O = 0`), and
    /// the outcome of the threshold step for thresholded aggregators (what the accountant
    /// charges, [`Aggregator::analyze`]).
    pub fn answer(
        &self,
        votes: &[f64],
        student: Option<&[f32]>,
        noise: &mut NoiseSource,
    ) -> Result<(Answer, Option<ThresholdCheck>), PateError> {
        let top = votes.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let gnmax = |sigma: f64, noise: &mut NoiseSource| -> Result<Answer, PateError> {
            let gauss = gaussian("--sigma", sigma)?;
            Ok(noisy_argmax(votes, || gauss.draw(noise)).map_or(Answer::Refused, Answer::Teachers))
        };
        let check = |statistic: f64,
                     threshold: f64,
                     sigma1: f64,
                     noise: &mut NoiseSource|
         -> Result<ThresholdCheck, PateError> {
            let gauss = gaussian("--sigma1", sigma1)?;
            Ok(ThresholdCheck {
                statistic,
                passed: statistic + gauss.draw(noise) >= threshold,
            })
        };
        Ok(match *self {
            Self::LnMax { lambda } => {
                let lap = LaplaceNoise::new(lambda).map_err(|e| PateError::Option {
                    option: "--lambda",
                    reason: e.to_string(),
                })?;
                (
                    noisy_argmax(votes, || lap.draw(noise))
                        .map_or(Answer::Refused, Answer::Teachers),
                    None,
                )
            }
            Self::GnMax { sigma } => (gnmax(sigma, noise)?, None),
            Self::ConfidentGnMax {
                threshold,
                sigma1,
                sigma2,
            } => {
                let c = check(top, threshold, sigma1, noise)?;
                let a = if c.passed {
                    gnmax(sigma2, noise)?
                } else {
                    Answer::Refused
                };
                (a, Some(c))
            }
            Self::InteractiveGnMax {
                threshold,
                sigma1,
                sigma2,
                student_confidence,
            } => {
                let c = check(disagreement(votes, student), threshold, sigma1, noise)?;
                let a = if c.passed {
                    gnmax(sigma2, noise)?
                } else {
                    student
                        .and_then(|p| {
                            let best = hush_train::metrics::argmax(p);
                            (f64::from(p[best]) >= student_confidence).then_some(best)
                        })
                        .map_or(Answer::Refused, Answer::Student)
                };
                (a, Some(c))
            }
        })
    }

    /// [`Aggregator::answer`] for every query's histogram in `votes`, in order (`student`:
    /// the student's class probabilities per query, interactive only): the answers, and
    /// the threshold outcomes when the aggregator has a threshold step.
    pub fn answer_all(
        &self,
        votes: &[Vec<f64>],
        student: Option<&[Vec<f32>]>,
        noise: &mut NoiseSource,
    ) -> Result<(Vec<Answer>, Option<Vec<ThresholdCheck>>), PateError> {
        let mut checks = Vec::new();
        let mut answers = Vec::with_capacity(votes.len());
        for (i, v) in votes.iter().enumerate() {
            let probs = student.and_then(|p| p.get(i)).map(Vec::as_slice);
            let (answer, check) = self.answer(v, probs, noise)?;
            checks.extend(check);
            answers.push(answer);
        }
        let checks = (checks.len() == votes.len()).then_some(checks);
        Ok((answers, checks))
    }

    /// The privacy cost of this aggregator on `votes`, at `delta`, over `orders` (the
    /// accountant's PATE analysis). `checks` are the run's threshold outcomes: with them
    /// a thresholded query pays its threshold step and, only if it passed, GNMax; without
    /// them every query is charged both steps (an upper bound; the interactive variant
    /// needs them, its statistic depends on the student). `smooth` adds the
    /// smooth-sensitivity release of the data-dependent ε (not for LNMax).
    pub fn analyze(
        &self,
        votes: &[Vec<f64>],
        checks: Option<&[ThresholdCheck]>,
        delta: f64,
        orders: &[f64],
        smooth: Option<SmoothRelease>,
    ) -> Result<PateAnalysis, AccountantError> {
        let (sigma, threshold) = match *self {
            Self::LnMax { lambda } => {
                if smooth.is_some() {
                    return Err(AccountantError::InvalidParameter {
                        name: "aggregator",
                        value: "lnmax".into(),
                        expected: "gnmax, confident-gnmax or interactive-gnmax for a \
                                   smooth-sensitivity release",
                    });
                }
                return analyze_lnmax(votes, lambda, delta, orders);
            }
            Self::GnMax { sigma } => (sigma, None),
            Self::ConfidentGnMax {
                threshold,
                sigma1,
                sigma2,
            }
            | Self::InteractiveGnMax {
                threshold,
                sigma1,
                sigma2,
                ..
            } => (sigma2, Some(Threshold { threshold, sigma1 })),
        };
        if matches!(self, Self::InteractiveGnMax { .. }) && checks.is_none() {
            return Err(AccountantError::InvalidParameter {
                name: "checks",
                value: "none".into(),
                expected: "the run's threshold outcomes for interactive-gnmax",
            });
        }
        let checks = checks.filter(|_| threshold.is_some());
        match (smooth, threshold, checks) {
            (Some(s), _, _) => analyze_for_release(
                votes, sigma, threshold, checks, delta, orders, s.sigma_ss, s.beta,
            ),
            (None, Some(t), Some(c)) => {
                analyze_thresholded_run(votes, c, sigma, t, delta, orders, None)
            }
            (None, _, _) => analyze_gnmax(votes, sigma, threshold, delta, orders, None),
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Self::LnMax { .. } => "lnmax",
            Self::GnMax { .. } => "gnmax",
            Self::ConfidentGnMax { .. } => "confident-gnmax",
            Self::InteractiveGnMax { .. } => "interactive-gnmax",
        }
    }
}

fn finite_threshold(threshold: f64) -> Result<(), PateError> {
    if threshold.is_finite() {
        Ok(())
    } else {
        Err(PateError::Option {
            option: "--threshold",
            reason: format!("{threshold} is not a finite number"),
        })
    }
}

/// The interactive threshold statistic `max_j (n_j − n·p_j)`: how far the teachers' votes
/// exceed the student's probabilities scaled to `n = Σ votes` teachers. One teacher moving
/// its vote changes it by at most 1 (sensitivity 1, as the top vote).
pub fn disagreement(votes: &[f64], student: Option<&[f32]>) -> f64 {
    let n: f64 = votes.iter().sum();
    votes
        .iter()
        .enumerate()
        .map(|(j, v)| {
            v - n * student
                .and_then(|p| p.get(j))
                .map_or(0.0, |&p| f64::from(p))
        })
        .fold(f64::NEG_INFINITY, f64::max)
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

/// Gaussian noise of std `sigma` for the option named `option`.
fn gaussian(option: &'static str, sigma: f64) -> Result<GaussianNoise, PateError> {
    GaussianNoise::new(sigma).map_err(|e| PateError::Option {
        option,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How often `agg` answers `class` on `votes`, over 100 000 seeded draws.
    fn answer_rate(agg: Aggregator, votes: &[f64], class: usize, seed: u64) -> f64 {
        let mut noise = NoiseSource::from_seed(seed);
        let n = 100_000;
        (0..n)
            .filter(|_| agg.answer(votes, None, &mut noise).unwrap().0.class() == Some(class))
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
            .map(|_| {
                agg.answer(&[40.0, 5.0, 5.0], None, &mut noise)
                    .unwrap()
                    .0
                    .class()
            })
            .collect();
        let rate = answers.iter().filter(|a| a.is_some()).count() as f64 / n as f64;
        assert!((rate - 0.30854).abs() < 0.0059, "{rate}");
        assert!(answers.iter().flatten().all(|&a| a == 0));
    }

    #[test]
    fn the_cost_is_the_accountants_for_the_same_votes() {
        let votes = vec![vec![40.0, 5.0, 5.0], vec![20.0, 18.0, 12.0]];
        let orders = hush_privacy::accountant::rdp::default_orders();
        let agg = Aggregator::ConfidentGnMax {
            threshold: 30.0,
            sigma1: 10.0,
            sigma2: 5.0,
        };
        let a = agg.analyze(&votes, None, 1e-5, &orders, None).unwrap();
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
            .analyze(&votes, None, 1e-5, &orders, None)
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
            Aggregator::InteractiveGnMax {
                threshold: 1.0,
                sigma1: 1.0,
                sigma2: 1.0,
                student_confidence: 0.5,
            },
        ] {
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(json["kind"], a.name());
            assert_eq!(serde_json::from_value::<Aggregator>(json).unwrap(), a);
        }
    }

    #[test]
    fn interactive_keeps_a_confident_agreeing_student_and_asks_when_it_disagrees() {
        let agg = Aggregator::InteractiveGnMax {
            threshold: 5.0,
            sigma1: 0.5,
            sigma2: 1.0,
            student_confidence: 0.6,
        };
        let votes = [8.0, 1.0, 1.0];
        // The student agrees (O = 10·p = [8, 1, 1]): disagreement 0, far below T = 5.
        let agrees = [0.8f32, 0.1, 0.1];
        assert!(disagreement(&votes, Some(&agrees)).abs() < 1e-6);
        // It disagrees (O = [0, 10, 0]): disagreement 8, far above T.
        let disagrees = [0.0f32, 1.0, 0.0];
        assert_eq!(disagreement(&votes, Some(&disagrees)), 8.0);
        // No student: the top vote, as Confident-GNMax.
        assert_eq!(disagreement(&votes, None), 8.0);
        let mut noise = NoiseSource::from_seed(9);
        for _ in 0..200 {
            let (a, c) = agg.answer(&votes, Some(&agrees), &mut noise).unwrap();
            assert_eq!(a, Answer::Student(0));
            assert!(!c.unwrap().passed);
            let (a, c) = agg.answer(&votes, Some(&disagrees), &mut noise).unwrap();
            assert_eq!(a, Answer::Teachers(0));
            assert!(c.unwrap().passed);
            // An unsure student is not trusted: refused.
            let unsure = [0.5f32, 0.3, 0.2];
            let (a, _) = agg
                .answer(&[5.0, 3.0, 2.0], Some(&unsure), &mut noise)
                .unwrap();
            assert_eq!(a, Answer::Refused);
        }
    }

    #[test]
    fn a_thresholded_run_charges_gnmax_only_on_the_queries_that_passed() {
        // Data-independent: every query α/(2σ₁²), the passed ones also α/σ₂².
        let votes = vec![vec![9.0, 1.0], vec![5.0, 5.0], vec![2.0, 8.0]];
        let checks = [(9.0, true), (0.5, false), (8.0, true)]
            .map(|(statistic, passed)| ThresholdCheck { statistic, passed });
        let orders = hush_privacy::accountant::rdp::default_orders();
        let (s1, s2) = (3.0, 2.0);
        for agg in [
            Aggregator::ConfidentGnMax {
                threshold: 6.0,
                sigma1: s1,
                sigma2: s2,
            },
            Aggregator::InteractiveGnMax {
                threshold: 6.0,
                sigma1: s1,
                sigma2: s2,
                student_confidence: 0.5,
            },
        ] {
            let a = agg
                .analyze(&votes, Some(&checks), 1e-5, &orders, None)
                .unwrap();
            for (o, r) in orders.iter().zip(&a.rdp_data_independent) {
                let want = 3.0 * o / (2.0 * s1 * s1) + 2.0 * o / (s2 * s2);
                assert!((r - want).abs() < 1e-9 * want, "{o}: {r} vs {want}");
            }
            assert!(a.epsilon_data_dependent.0 <= a.epsilon_data_independent.0 + 1e-12);
        }
        let e = Aggregator::InteractiveGnMax {
            threshold: 6.0,
            sigma1: s1,
            sigma2: s2,
            student_confidence: 0.5,
        }
        .analyze(&votes, None, 1e-5, &orders, None)
        .unwrap_err();
        assert!(e.to_string().contains("interactive"), "{e}");
    }

    #[test]
    fn the_smooth_sensitivity_release_is_the_accountants_at_the_optimal_order() {
        use hush_privacy::accountant::pate::SmoothSensitivityParams;
        let votes: Vec<Vec<f64>> = (0..20)
            .map(|i| {
                let mut v = vec![0.0; 10];
                v[i % 10] = 200.0;
                v[(i + 1) % 10] = 50.0;
                v
            })
            .collect();
        let orders = hush_privacy::accountant::rdp::default_orders();
        let s = SmoothRelease {
            sigma_ss: 10.0,
            beta: None,
        };
        let a = Aggregator::GnMax { sigma: 40.0 }
            .analyze(&votes, None, 1e-5, &orders, Some(s))
            .unwrap();
        let r = a.smooth_sensitivity.unwrap();
        assert_eq!(r.order, a.epsilon_data_dependent.1);
        assert!((r.params.beta - 0.4 / r.order).abs() < 1e-12);
        assert!((r.noise_std - 10.0 * r.smooth_sensitivity).abs() <= 1e-12 * r.noise_std);
        let params = SmoothSensitivityParams {
            beta: 0.4 / r.order,
            sigma_ss: 10.0,
        };
        let b = analyze_gnmax(&votes, 40.0, None, 1e-5, &orders, Some(params)).unwrap();
        assert_eq!(a, b);
        let e = Aggregator::LnMax { lambda: 10.0 }
            .analyze(&votes, None, 1e-5, &orders, Some(s))
            .unwrap_err();
        assert!(e.to_string().contains("smooth"), "{e}");
    }

    #[test]
    fn histograms_count_votes() {
        assert_eq!(vote_histogram([0, 2, 2, 1, 2], 3), vec![1.0, 1.0, 3.0]);
    }
}
