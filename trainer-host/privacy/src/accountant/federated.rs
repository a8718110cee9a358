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

use super::{
    Accountant, AccountantError, Adjacency, EpsilonReport, PrivacyUnit, SubsampledGaussian,
};

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
        })
    }

    /// Sampling rate of the run itself, `C / N`.
    pub fn sampling_rate(&self) -> f64 {
        self.expected_cohort as f64 / self.population as f64
    }

    /// Std of the Gaussian noise the host adds to the **sum** of clipped updates:
    /// `z · clip_norm · C / C_n`.
    pub fn noise_std_on_sum(&self, clip_norm: f64) -> f64 {
        self.noise_multiplier * clip_norm * self.expected_cohort as f64 / self.noise_cohort as f64
    }

    /// The simulation's effective noise multiplier against its own sensitivity: `z · C / C_n`.
    pub fn effective_noise_multiplier(&self) -> f64 {
        self.noise_multiplier * self.expected_cohort as f64 / self.noise_cohort as f64
    }

    /// Honest ε of the run as executed: `q = C / N`, `σ = z · C / C_n`.
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
        assert!(FederatedPlan::new(100, 20, 10, 1.0, 1).is_err());
    }
}
