//! User-level accounting for federated rounds, with the "noise cohort" simulation and the
//! extrapolation of ε to larger populations used by Apple's private federated learning work
//! (pfl-research `noise_cohort_size`; "Enabling Differentially Private Federated Learning for
//! Speech Recognition", arXiv:2310.00098).
//!
//! # The math
//!
//! The unit of privacy is a **user** (device). Each round every device of a population of `N`
//! checks in independently with probability `q = C / N`, where `C` is the **expected** cohort
//! size (Poisson sampling; the realised cohort is random). Each device's update is clipped to
//! L2 norm `S`; the host sums the clipped updates and adds Gaussian noise to the **sum**, then
//! divides by the expected cohort `C` (DESIGN.md invariant 1). Per round this is the
//! Poisson-subsampled Gaussian with sensitivity `S` and noise multiplier `z`, so `R` rounds give
//! `ε(q = C/N, σ = z, R, δ)` with add/remove adjacency over users.
//!
//! **Noise cohort.** Simulations and small pilots train with a cohort `C` far smaller than a
//! deployment's `C_n` (the *noise cohort*). To see the model quality the deployment would get,
//! the noise is scaled as if `C_n` devices had contributed: the noise std on the sum is
//! `z · S · C / C_n`, so after dividing by `C` the noise on the average is `z · S / C_n`, the
//! same as in a deployment averaging over `C_n` devices with noise multiplier `z`. Relative to
//! the simulation's own sensitivity `S` its effective noise multiplier is
//! `σ_eff = z · C / C_n` (equivalently `z = σ_eff · C_n / C`: σ scales with `C_n / C`).
//!
//! **Extrapolation.** The guarantee claimed for the deployment is that of `C_n`-device cohorts
//! drawn from a population `N'`: `ε(q' = C_n / N', σ = z, R, δ)`. It shrinks as `N'` grows,
//! which is how a (7.2, 1e-9) user-level guarantee is quoted for a large population even though
//! the simulation itself, run at `q = C / N` with `σ_eff`, would have a much larger ε
//! ([`FederatedPlan::simulation_epsilon`] reports that honest number too). Extrapolated numbers
//! are statements about a hypothetical deployment, never about the simulation's data.
//!
//! **Participation.** Only Poisson participation is accounted ([`Participation`]): every
//! enrolled device joins a round with probability `q` by its own draw keyed by (key, round,
//! device), independently of the others and of whether it is reachable. A device that is
//! unavailable, drops out or misses the deadline contributes nothing, so `q` is an upper
//! bound on its participation probability and the accounted ε holds for it too. The divisor
//! is a public constant fixed before the round — `q × N × a` with `a` a *published*
//! availability estimate ([`FederatedPlan::with_availability`]) — never the realized count.
//! Choosing a fixed number of devices among those available is not Poisson sampling (a
//! device's chance depends on who else is reachable, and the size is fixed) and is refused
//! ([`Participation::accounted_rate`]); Balle et al. 2020, "Privacy amplification via random
//! check-ins", discuss schemes of that kind and what they can be credited with.

use super::{
    Accountant, AccountantError, Adjacency, EpsilonReport, PrivacyUnit, SubsampledGaussian,
};

/// How devices come to contribute to a round, as the accountant must see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Participation {
    /// Each enrolled device joins with probability `sampling_rate` by its own keyed draw,
    /// independently of every other device and of its availability: Poisson subsampling.
    Poisson {
        /// `q`.
        sampling_rate: f64,
    },
    /// A fixed number of devices chosen among those available when the round opens.
    FixedSizeAmongAvailable {
        /// Devices chosen.
        cohort_size: u64,
    },
}

impl Participation {
    /// The per-round participation probability every user is accounted with, or why the
    /// scheme cannot be accounted.
    pub fn accounted_rate(&self) -> Result<f64, AccountantError> {
        match *self {
            Self::Poisson { sampling_rate } => {
                if sampling_rate > 0.0 && sampling_rate <= 1.0 {
                    Ok(sampling_rate)
                } else {
                    Err(super::validate::invalid(
                        "sampling_rate",
                        sampling_rate,
                        "a rate in (0, 1]",
                    ))
                }
            }
            Self::FixedSizeAmongAvailable { cohort_size } => Err(AccountantError::Unsupported {
                what: format!(
                    "a cohort of exactly {cohort_size} devices chosen among those available is \
                     not Poisson sampling: each device's chance of being chosen depends on how \
                     many others are reachable, which the accountant cannot know, and the \
                     cohort's size is fixed, so neither the Poisson-subsampled Gaussian's ε nor \
                     its divisor holds; use Poisson participation (each device joins with \
                     probability q by its own draw, rounds.sampling_rate) and publish an \
                     availability estimate for the divisor (rounds.availability); see Balle et \
                     al. 2020, \"Privacy amplification via random check-ins\""
                ),
            }),
        }
    }
}

/// A planned user-level federated training run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FederatedPlan {
    /// Devices that could take part (`N`).
    pub population: u64,
    /// Expected cohort per round (`C`); the sampling rate is `C / N`.
    pub expected_cohort: u64,
    /// Cohort size the noise is calibrated for (`C_n >= C`).
    pub noise_cohort: u64,
    /// Noise multiplier `z` at the noise cohort.
    pub noise_multiplier: f64,
    /// Number of rounds `R`.
    pub rounds: u64,
    /// Published fraction `a` of the population expected to be reachable in a round (1 by
    /// default): the divisor is `C × a`, the sampling rate stays `C / N`.
    pub availability: f64,
}

impl FederatedPlan {
    /// Validates a plan: `0 < C <= N`, `C <= C_n`, `z > 0`, `R > 0`.
    pub fn new(
        population: u64,
        expected_cohort: u64,
        noise_cohort: u64,
        noise_multiplier: f64,
        rounds: u64,
    ) -> Result<Self, AccountantError> {
        use super::validate::invalid;
        if population == 0 {
            return Err(invalid(
                "population",
                population,
                "a positive number of devices",
            ));
        }
        if expected_cohort == 0 || expected_cohort > population {
            return Err(invalid(
                "expected_cohort",
                expected_cohort,
                "between 1 and the population",
            ));
        }
        if noise_cohort < expected_cohort {
            return Err(invalid(
                "noise_cohort",
                noise_cohort,
                "at least the expected cohort",
            ));
        }
        super::validate::noise_multiplier(noise_multiplier)?;
        super::validate::steps(rounds)?;
        Ok(Self {
            population,
            expected_cohort,
            noise_cohort,
            noise_multiplier,
            rounds,
            availability: 1.0,
        })
    }

    /// The plan with a published availability estimate `a` ∈ (0, 1]: the divisor becomes
    /// `C × a`; with a noise cohort, the noise on the sum shrinks with it (the noise on the
    /// average stays that of `C_n` devices), so the run's own ε grows.
    pub fn with_availability(self, availability: f64) -> Result<Self, AccountantError> {
        if !(availability > 0.0 && availability <= 1.0) {
            return Err(super::validate::invalid(
                "availability",
                availability,
                "a fraction in (0, 1]",
            ));
        }
        Ok(Self {
            availability,
            ..self
        })
    }

    /// Sampling rate of the run itself, `C / N`.
    pub fn sampling_rate(&self) -> f64 {
        self.expected_cohort as f64 / self.population as f64
    }

    /// Std of the Gaussian noise the host adds to the **sum** of clipped updates:
    /// `z · clip_norm · C · a / C_n`.
    pub fn noise_std_on_sum(&self, clip_norm: f64) -> f64 {
        clip_norm * self.effective_noise_multiplier()
    }

    /// The simulation's effective noise multiplier against its own sensitivity:
    /// `z · C · a / C_n`.
    pub fn effective_noise_multiplier(&self) -> f64 {
        self.noise_multiplier * self.expected_cohort as f64 * self.availability
            / self.noise_cohort as f64
    }

    /// Honest ε of the run as executed: `q = C / N`, `σ = z · C · a / C_n`.
    pub fn simulation_epsilon(
        &self,
        accountant: Accountant,
        delta: f64,
    ) -> Result<EpsilonReport, AccountantError> {
        let event = SubsampledGaussian::poisson(
            self.sampling_rate(),
            self.effective_noise_multiplier(),
            self.rounds,
        )?;
        Ok(event
            .epsilon(accountant, Adjacency::AddRemove, delta)?
            .with_unit(PrivacyUnit::User))
    }

    /// ε of the extrapolated deployment: cohorts of `C_n` from `population`, noise multiplier
    /// `z`, same rounds (`q' = C_n / N'`).
    pub fn extrapolated_epsilon(
        &self,
        population: u64,
        accountant: Accountant,
        delta: f64,
    ) -> Result<EpsilonReport, AccountantError> {
        if population < self.noise_cohort {
            return Err(super::validate::invalid(
                "population",
                population,
                "at least the noise cohort",
            ));
        }
        let q = self.noise_cohort as f64 / population as f64;
        let event = SubsampledGaussian::poisson(q, self.noise_multiplier, self.rounds)?;
        Ok(event
            .epsilon(accountant, Adjacency::AddRemove, delta)?
            .with_unit(PrivacyUnit::User))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_poisson_participation_is_accounted() {
        assert_eq!(
            Participation::Poisson {
                sampling_rate: 0.05
            }
            .accounted_rate()
            .unwrap(),
            0.05
        );
        assert!(Participation::Poisson { sampling_rate: 0.0 }
            .accounted_rate()
            .is_err());
        let e = Participation::FixedSizeAmongAvailable { cohort_size: 500 }
            .accounted_rate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("exactly 500 devices") && e.contains("not Poisson sampling"),
            "{e}"
        );
    }

    #[test]
    fn availability_shrinks_the_divisor_and_the_noise_on_the_sum_not_the_rate(
    ) -> Result<(), AccountantError> {
        let plan = FederatedPlan::new(10_000, 500, 1_000, 1.0, 100)?;
        let half = plan.with_availability(0.5)?;
        assert_eq!(half.sampling_rate(), plan.sampling_rate());
        assert!((half.effective_noise_multiplier() - 0.25).abs() < 1e-15);
        let (a, b) = (
            plan.simulation_epsilon(Accountant::Rdp, 1e-6)?.epsilon,
            half.simulation_epsilon(Accountant::Rdp, 1e-6)?.epsilon,
        );
        assert!(b > a, "less noise on the sum, more ε: {a} → {b}");
        Ok(())
    }

    #[test]
    fn noise_scales_with_cohort_ratio() -> Result<(), AccountantError> {
        let plan = FederatedPlan::new(1_000_000, 1_000, 50_000, 1.0, 2_000)?;
        assert!((plan.noise_std_on_sum(1.0) - 0.02).abs() < 1e-15);
        assert!((plan.effective_noise_multiplier() - 0.02).abs() < 1e-15);
        assert!((plan.sampling_rate() - 1e-3).abs() < 1e-18);
        Ok(())
    }

    #[test]
    fn extrapolation_to_larger_population_lowers_epsilon() -> Result<(), AccountantError> {
        let plan = FederatedPlan::new(100_000, 100, 1024, 1.0, 2000)?;
        let small = plan.extrapolated_epsilon(1_000_000, Accountant::Rdp, 1e-9)?;
        let large = plan.extrapolated_epsilon(10_000_000, Accountant::Rdp, 1e-9)?;
        assert!(large.epsilon < small.epsilon);
        // 1024 / 1e6 with z = 1 over 2000 rounds is golden case E.
        assert!((small.epsilon - 1.459_184_129_103_297_2).abs() < 1e-9);
        assert_eq!(small.unit, PrivacyUnit::User);
        Ok(())
    }

    #[test]
    fn rejects_cohort_larger_than_population() {
        assert!(FederatedPlan::new(10, 20, 20, 1.0, 1).is_err());
        assert!(FederatedPlan::new(10, 2, 20, 1.0, 1)
            .unwrap()
            .with_availability(0.0)
            .is_err());
        assert!(FederatedPlan::new(100, 20, 10, 1.0, 1).is_err());
    }
}
