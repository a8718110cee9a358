//! Privacy accounting: what ε a sequence of noisy releases costs.
//!
//! This module owns the typed vocabulary of accounting ([`Accountant`], [`Adjacency`],
//! [`PrivacyUnit`], [`Sampling`]), the validated event type [`SubsampledGaussian`], the stateful
//! [`PrivacyAccountant`] and the one place where an ε is reported, [`EpsilonReport`]
//! (DESIGN.md invariant 7: every ε names δ, adjacency, unit and accountant). The pure math lives
//! in one module per concept, each naming the source it ports:
//!
//! - [`rdp`]: RDP of the Poisson-subsampled and the fixed-size (without replacement) Gaussian,
//!   RDP → (ε, δ) (dp_accounting 0.6.0 `rdp/rdp_privacy_accountant.py`);
//! - [`pld`]: privacy-loss distributions composed by FFT (dp_accounting 0.6.0 `pld/`);
//! - [`analytic_gaussian`]: the exact ε of a Gaussian (Balle & Wang 2018);
//! - [`calibrate`]: the noise multiplier for a target (ε, δ);
//! - [`federated`]: user-level accounting with a noise cohort and population extrapolation;
//! - [`additional`]: costs that are not a Gaussian event (RDP at listed orders only, δ spent
//!   outright), composed beside the events;
//! - [`pate`]: PATE's GNMax / Confident-GNMax / LNMax analysis and smooth sensitivity
//!   (tensorflow/privacy `research/pate_2018`).
//!
//! It does not own storage of releases or budgets: that is [`crate::ledger`].
//!
//! ```
//! use hush_privacy::accountant::{Accountant, Adjacency, SubsampledGaussian};
//! let event = SubsampledGaussian::poisson(0.01, 1.1, 10_000)?;
//! let report = event.epsilon(Accountant::Rdp, Adjacency::AddRemove, 1e-5)?;
//! assert!((report.epsilon - 5.632010670081592).abs() < 1e-9);
//! assert_eq!(report.optimal_order, Some(4.7));
//! # Ok::<(), hush_privacy::accountant::AccountantError>(())
//! ```
//!
//! Sampling must match accounting (invariant 2): fixed-size batches are accounted with the
//! Wang–Balle–Kasiviswanathan RDP bound under replace-one adjacency, or refused with
//! [`AccountantError::Unsupported`]; they are never reported as Poisson.

pub mod additional;
pub mod analytic_gaussian;
pub mod calibrate;
pub mod federated;
pub mod pate;
pub mod pld;
pub mod rdp;
pub mod special;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use additional::AdditionalCost;

/// Errors from accounting: bad parameters (named, with value and expectation), unsupported
/// combinations, and numerical failures.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AccountantError {
    /// A parameter is outside its domain.
    #[error("invalid {name} = {value}: expected {expected}")]
    InvalidParameter {
        /// Parameter name as the user spells it.
        name: &'static str,
        /// The offending value, formatted.
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// This accountant cannot account for this mechanism under this adjacency.
    #[error("unsupported: {what}")]
    Unsupported {
        /// What was asked for and why it is refused.
        what: String,
    },
    /// A search found no value meeting the target.
    #[error("no solution: {what}")]
    NoSolution {
        /// What was searched for.
        what: String,
    },
    /// A numerical routine failed (an internal limit was hit).
    #[error("numerical failure: {what}")]
    Numerical {
        /// What failed.
        what: String,
    },
    /// Malformed votes input (PATE).
    #[error("malformed votes at row {row}: {message}")]
    MalformedVotes {
        /// 1-based row number.
        row: usize,
        /// What is wrong.
        message: String,
    },
}

/// Parameter checks shared by every entry point.
pub mod validate {
    use super::AccountantError;

    /// Builds an [`AccountantError::InvalidParameter`].
    pub fn invalid(
        name: &'static str,
        value: impl std::fmt::Display,
        expected: &'static str,
    ) -> AccountantError {
        AccountantError::InvalidParameter {
            name,
            value: value.to_string(),
            expected,
        }
    }

    /// `q` in `(0, 1]`.
    pub fn sampling_rate(q: f64) -> Result<f64, AccountantError> {
        if q.is_finite() && q > 0.0 && q <= 1.0 {
            Ok(q)
        } else {
            Err(invalid("sampling_rate", q, "a number in (0, 1]"))
        }
    }

    /// `σ > 0`, finite.
    pub fn noise_multiplier(sigma: f64) -> Result<f64, AccountantError> {
        if sigma.is_finite() && sigma > 0.0 {
            Ok(sigma)
        } else {
            Err(invalid("noise_multiplier", sigma, "a finite number > 0"))
        }
    }

    /// `δ` in `(0, 1)`.
    pub fn delta(delta: f64) -> Result<f64, AccountantError> {
        if delta.is_finite() && delta > 0.0 && delta < 1.0 {
            Ok(delta)
        } else {
            Err(invalid("delta", delta, "a number in (0, 1)"))
        }
    }

    /// `steps >= 1`.
    pub fn steps(steps: u64) -> Result<u64, AccountantError> {
        if steps >= 1 {
            Ok(steps)
        } else {
            Err(invalid("steps", steps, "an integer >= 1"))
        }
    }

    /// A finite number `> 0`.
    pub fn positive_finite(name: &'static str, v: f64) -> Result<f64, AccountantError> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(invalid(name, v, "a finite number > 0"))
        }
    }
}

/// Which accountant computes ε.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Accountant {
    /// Rényi DP over dp_accounting's default orders, improved conversion.
    #[default]
    Rdp,
    /// Privacy-loss distributions (pessimistic connect-the-dots, FFT composition).
    Pld,
}

/// Which datasets count as neighbours.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Adjacency {
    /// One record (or user) added or removed.
    #[default]
    AddRemove,
    /// One record (or user) replaced by another.
    ReplaceOne,
}

/// What one record of privacy protects.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum PrivacyUnit {
    /// One training example (central DP-SGD).
    #[default]
    Example,
    /// One user / device, all of its data (federated rounds).
    User,
}

/// How a batch or cohort is drawn.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Sampling {
    /// Each record independently with probability `q`.
    #[default]
    Poisson,
    /// Exactly `batch` of `population`, without replacement.
    FixedSize,
}

macro_rules! display_as_serde {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let s = match serde_json::to_value(self) {
                    Ok(serde_json::Value::String(s)) => s,
                    _ => format!("{self:?}"),
                };
                f.write_str(&s)
            }
        }
    )*};
}
display_as_serde!(Accountant, Adjacency, PrivacyUnit, Sampling);

/// A reported ε with everything needed to interpret it (DESIGN.md invariant 7).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EpsilonReport {
    /// ε.
    pub epsilon: f64,
    /// The δ it holds at.
    pub delta: f64,
    /// Neighbouring relation.
    pub adjacency: Adjacency,
    /// Unit of privacy.
    pub unit: PrivacyUnit,
    /// Accountant that computed it.
    pub accountant: Accountant,
    /// Optimal RDP order (RDP only).
    pub optimal_order: Option<f64>,
}

impl EpsilonReport {
    /// Same report for another unit of privacy (the math does not depend on it; the claim does).
    pub fn with_unit(mut self, unit: PrivacyUnit) -> Self {
        self.unit = unit;
        self
    }
}

impl fmt::Display for EpsilonReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epsilon = {} at delta = {:e} ({} adjacency, unit = {}, accountant = {}",
            self.epsilon, self.delta, self.adjacency, self.unit, self.accountant
        )?;
        if let Some(order) = self.optimal_order {
            write!(f, ", optimal order = {order}")?;
        }
        f.write_str(")")
    }
}

/// `steps` compositions of a subsampled Gaussian with noise multiplier `noise_multiplier`
/// (noise std on the sum over L2 sensitivity).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SubsampledGaussian {
    /// How the batch is drawn.
    pub sampling: Sampling,
    /// Sampling rate `q` (Poisson) or `batch / population` (fixed size).
    pub sampling_rate: f64,
    /// Noise multiplier σ.
    pub noise_multiplier: f64,
    /// Number of compositions.
    pub steps: u64,
}

impl SubsampledGaussian {
    /// Poisson sampling at rate `q` in `(0, 1]`.
    pub fn poisson(q: f64, noise_multiplier: f64, steps: u64) -> Result<Self, AccountantError> {
        Ok(Self {
            sampling: Sampling::Poisson,
            sampling_rate: validate::sampling_rate(q)?,
            noise_multiplier: validate::noise_multiplier(noise_multiplier)?,
            steps: validate::steps(steps)?,
        })
    }

    /// Fixed-size batches of `batch` drawn without replacement from `population`.
    pub fn fixed_size(
        population: u64,
        batch: u64,
        noise_multiplier: f64,
        steps: u64,
    ) -> Result<Self, AccountantError> {
        if population == 0 {
            return Err(validate::invalid(
                "population",
                population,
                "an integer >= 1",
            ));
        }
        if batch == 0 || batch > population {
            return Err(validate::invalid(
                "batch_size",
                batch,
                "an integer in 1..=population",
            ));
        }
        Ok(Self {
            sampling: Sampling::FixedSize,
            sampling_rate: batch as f64 / population as f64,
            noise_multiplier: validate::noise_multiplier(noise_multiplier)?,
            steps: validate::steps(steps)?,
        })
    }

    /// Re-validates a value built field by field (e.g. read back from storage).
    pub fn validated(self) -> Result<Self, AccountantError> {
        validate::sampling_rate(self.sampling_rate)?;
        validate::noise_multiplier(self.noise_multiplier)?;
        validate::steps(self.steps)?;
        Ok(self)
    }

    /// Total RDP of this event at `orders`, or an error when RDP cannot account for it under
    /// `adjacency` (dp_accounting's rules: Poisson needs add/remove, fixed-size needs
    /// replace-one).
    pub fn rdp(&self, adjacency: Adjacency, orders: &[f64]) -> Result<Vec<f64>, AccountantError> {
        let per_step = match (self.sampling, adjacency) {
            (Sampling::Poisson, Adjacency::AddRemove) => {
                rdp::poisson_subsampled_gaussian(self.sampling_rate, self.noise_multiplier, orders)
            }
            (Sampling::FixedSize, Adjacency::ReplaceOne) => {
                rdp::sample_without_replacement_gaussian(
                    self.sampling_rate,
                    self.noise_multiplier,
                    orders,
                )
            }
            (Sampling::Poisson, Adjacency::ReplaceOne) => {
                return Err(AccountantError::Unsupported {
                    what: "the RDP accountant does not account Poisson sampling under \
                           replace-one adjacency (use --accountant pld, or add/remove)"
                        .into(),
                })
            }
            (Sampling::FixedSize, Adjacency::AddRemove) => {
                return Err(AccountantError::Unsupported {
                    what: "fixed-size (without replacement) sampling is accounted only under \
                           replace-one adjacency (Wang-Balle-Kasiviswanathan); it is never \
                           reported as Poisson"
                        .into(),
                })
            }
        };
        Ok(per_step
            .into_iter()
            .map(|r| r * self.steps as f64)
            .collect())
    }

    /// The composed PLD of this event at discretisation `vdi`.
    pub fn pld(&self, adjacency: Adjacency, vdi: f64) -> Result<pld::Pld, AccountantError> {
        if self.sampling == Sampling::FixedSize {
            return Err(AccountantError::Unsupported {
                what: "the PLD accountant does not account fixed-size (without replacement) \
                       sampling; use --accountant rdp with replace-one adjacency"
                    .into(),
            });
        }
        let single = pld::Pld::gaussian(
            self.noise_multiplier,
            self.sampling_rate,
            vdi,
            adjacency == Adjacency::ReplaceOne,
        )?;
        single.self_compose(self.steps)
    }

    /// ε of this event alone.
    pub fn epsilon(
        &self,
        accountant: Accountant,
        adjacency: Adjacency,
        delta: f64,
    ) -> Result<EpsilonReport, AccountantError> {
        let mut acc = PrivacyAccountant::new(accountant, adjacency, PrivacyUnit::Example);
        acc.compose(*self)?;
        acc.epsilon(delta)
    }
}

/// A stateful accountant: events are composed in, ε is read out.
///
/// Identical events (same sampling, rate and σ) are merged by adding their steps before any
/// math is done, so composing `T` one-step events equals one `T`-step event exactly, with either
/// accountant. Costs that are not Gaussian events ([`AdditionalCost`]) compose beside them.
#[derive(Debug, Clone, PartialEq)]
pub struct PrivacyAccountant {
    accountant: Accountant,
    adjacency: Adjacency,
    unit: PrivacyUnit,
    /// Discretisation of the PLD accountant.
    pub value_discretization_interval: f64,
    events: Vec<SubsampledGaussian>,
    additional: Vec<AdditionalCost>,
}

impl PrivacyAccountant {
    /// An empty accountant.
    pub fn new(accountant: Accountant, adjacency: Adjacency, unit: PrivacyUnit) -> Self {
        Self {
            accountant,
            adjacency,
            unit,
            value_discretization_interval: pld::DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
            events: Vec::new(),
            additional: Vec::new(),
        }
    }

    /// Which accountant this is.
    pub fn accountant(&self) -> Accountant {
        self.accountant
    }

    /// Checks that this accountant can handle `event` under its adjacency, without composing.
    pub fn supports(&self, event: &SubsampledGaussian) -> Result<(), AccountantError> {
        match self.accountant {
            Accountant::Rdp => event.rdp(self.adjacency, &[2.0]).map(|_| ()),
            Accountant::Pld if event.sampling == Sampling::FixedSize => {
                Err(AccountantError::Unsupported {
                    what: "the PLD accountant does not account fixed-size (without \
                           replacement) sampling; use the RDP accountant with replace-one"
                        .into(),
                })
            }
            Accountant::Pld => Ok(()),
        }
    }

    /// Adds an event (refused, leaving the accountant unchanged, if unsupported).
    pub fn compose(&mut self, event: SubsampledGaussian) -> Result<(), AccountantError> {
        let event = event.validated()?;
        self.supports(&event)?;
        if let Some(e) = self.events.iter_mut().find(|e| {
            e.sampling == event.sampling
                && e.sampling_rate == event.sampling_rate
                && e.noise_multiplier == event.noise_multiplier
        }) {
            e.steps = e
                .steps
                .checked_add(event.steps)
                .ok_or_else(|| validate::invalid("steps", event.steps, "a total below 2^64"))?;
        } else {
            self.events.push(event);
        }
        Ok(())
    }

    /// Adds a cost that is not a Gaussian event (refused, leaving the accountant unchanged,
    /// when it has an RDP part and this is the PLD accountant, which cannot compose one).
    pub fn compose_additional(&mut self, cost: AdditionalCost) -> Result<(), AccountantError> {
        let cost = cost.validated()?;
        if self.accountant == Accountant::Pld && !cost.rdp.is_empty() {
            return Err(AccountantError::Unsupported {
                what: "the PLD accountant cannot compose a cost known only as RDP at some \
                       orders (a smooth-sensitivity release); use the RDP accountant"
                    .into(),
            });
        }
        if !cost.is_none() {
            self.additional.push(cost);
        }
        Ok(())
    }

    /// The merged events composed so far.
    pub fn events(&self) -> &[SubsampledGaussian] {
        &self.events
    }

    /// ε at `delta` of everything composed so far. δ spent outright by the additional
    /// costs is taken from `delta` first; the rest is what the composed RDP or PLD is
    /// converted at.
    pub fn epsilon(&self, delta: f64) -> Result<EpsilonReport, AccountantError> {
        validate::delta(delta)?;
        let spent: f64 = self.additional.iter().map(|c| c.delta).sum();
        if spent >= delta {
            return Err(AccountantError::NoSolution {
                what: format!(
                    "delta {delta:e} is used up by {spent:e} spent outright (thresholded \
                     releases); nothing is left for the rest"
                ),
            });
        }
        let left = delta - spent;
        let (epsilon, optimal_order) = match self.accountant {
            Accountant::Rdp => {
                let orders = rdp::default_orders();
                let mut total = vec![0.0; orders.len()];
                for e in &self.events {
                    for (t, r) in total.iter_mut().zip(e.rdp(self.adjacency, &orders)?) {
                        *t += r;
                    }
                }
                for c in &self.additional {
                    for (t, &o) in total.iter_mut().zip(&orders) {
                        *t += c.rdp_bound(o);
                    }
                }
                let (eps, order) = rdp::epsilon_from_rdp(&orders, &total, left);
                (eps, Some(order))
            }
            Accountant::Pld => {
                let vdi = self.value_discretization_interval;
                let mut acc = pld::Pld::identity(vdi);
                for e in &self.events {
                    acc = acc.compose(&e.pld(self.adjacency, vdi)?)?;
                }
                (acc.epsilon_for_delta(left), None)
            }
        };
        Ok(EpsilonReport {
            epsilon,
            delta,
            adjacency: self.adjacency,
            unit: self.unit,
            accountant: self.accountant,
            optimal_order: if self.events.is_empty() && self.additional.is_empty() {
                None
            } else {
                optimal_order
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// δ spent outright comes off the δ the composed events are converted at.
    #[test]
    fn delta_spent_outright_is_taken_from_the_conversion_delta() -> Result<(), AccountantError> {
        let event = SubsampledGaussian::poisson(0.01, 1.1, 1_000)?;
        for accountant in [Accountant::Rdp, Accountant::Pld] {
            let mut acc =
                PrivacyAccountant::new(accountant, Adjacency::AddRemove, PrivacyUnit::User);
            acc.compose(event)?;
            acc.compose_additional(AdditionalCost::delta_spent(4e-6)?)?;
            let with = acc.epsilon(1e-5)?;
            let plain = event.epsilon(accountant, Adjacency::AddRemove, 1e-5 - 4e-6)?;
            assert_eq!(with.epsilon, plain.epsilon, "{accountant}");
            assert_eq!(with.delta, 1e-5);
            acc.compose_additional(AdditionalCost::delta_spent(7e-6)?)?;
            assert!(matches!(
                acc.epsilon(1e-5),
                Err(AccountantError::NoSolution { .. })
            ));
        }
        Ok(())
    }

    /// An RDP curve listed at every order composes exactly like the Gaussian event it
    /// describes; listed at one order only, it can only cost more; PLD refuses it.
    #[test]
    fn rdp_at_listed_orders_composes_like_the_curve_it_lists() -> Result<(), AccountantError> {
        let event = SubsampledGaussian::poisson(0.05, 2.0, 300)?;
        let orders = rdp::default_orders();
        let curve: Vec<(f64, f64)> = orders
            .iter()
            .copied()
            .zip(event.rdp(Adjacency::AddRemove, &orders)?)
            .collect();
        let twice = SubsampledGaussian::poisson(0.05, 2.0, 600)?.epsilon(
            Accountant::Rdp,
            Adjacency::AddRemove,
            1e-5,
        )?;
        let mut acc =
            PrivacyAccountant::new(Accountant::Rdp, Adjacency::AddRemove, PrivacyUnit::User);
        acc.compose(event)?;
        acc.compose_additional(AdditionalCost::rdp_at_orders(curve.clone())?)?;
        let got = acc.epsilon(1e-5)?;
        assert!(
            (got.epsilon - twice.epsilon).abs() < 1e-12,
            "{got} vs {twice}"
        );
        assert_eq!(got.optimal_order, twice.optimal_order);

        let at = twice.optimal_order.unwrap_or(f64::NAN);
        let one = curve.iter().copied().filter(|(o, _)| *o == at).collect();
        let mut single =
            PrivacyAccountant::new(Accountant::Rdp, Adjacency::AddRemove, PrivacyUnit::User);
        single.compose(event)?;
        single.compose_additional(AdditionalCost::rdp_at_orders(one)?)?;
        let e = single.epsilon(1e-5)?;
        // RDP never decreases with the order, so the other orders cost at least as much.
        assert!((e.epsilon - twice.epsilon).abs() < 1e-12, "{e} vs {twice}");

        let mut pld =
            PrivacyAccountant::new(Accountant::Pld, Adjacency::AddRemove, PrivacyUnit::User);
        let refused = pld.compose_additional(AdditionalCost::rdp_at_orders(curve)?);
        assert!(matches!(refused, Err(AccountantError::Unsupported { .. })));
        assert_eq!(pld.epsilon(1e-5)?.optimal_order, None);
        Ok(())
    }

    /// Invariant 7: every reported ε names δ, adjacency, unit and accountant.
    #[test]
    fn epsilon_report_names_delta_adjacency_unit_and_accountant() -> Result<(), AccountantError> {
        let r = SubsampledGaussian::poisson(0.01, 1.1, 100)?
            .epsilon(Accountant::Rdp, Adjacency::AddRemove, 1e-5)?
            .with_unit(PrivacyUnit::User);
        let text = r.to_string();
        for needle in [
            "delta = 1e-5",
            "add_remove",
            "unit = user",
            "accountant = rdp",
        ] {
            assert!(text.contains(needle), "{text} lacks {needle}");
        }
        let json = serde_json::to_value(r).map_err(|e| AccountantError::Numerical {
            what: e.to_string(),
        })?;
        for key in ["epsilon", "delta", "adjacency", "unit", "accountant"] {
            assert!(json.get(key).is_some(), "{json} lacks {key}");
        }
        Ok(())
    }

    #[test]
    fn bad_parameters_name_themselves() {
        let e = SubsampledGaussian::poisson(1.5, 1.0, 10);
        assert!(matches!(
            e,
            Err(AccountantError::InvalidParameter {
                name: "sampling_rate",
                ..
            })
        ));
        let e = SubsampledGaussian::poisson(0.1, 0.0, 10);
        assert!(matches!(
            e,
            Err(AccountantError::InvalidParameter {
                name: "noise_multiplier",
                ..
            })
        ));
        let e = SubsampledGaussian::poisson(0.1, f64::NAN, 10);
        assert!(matches!(
            e,
            Err(AccountantError::InvalidParameter {
                name: "noise_multiplier",
                ..
            })
        ));
        let e = SubsampledGaussian::poisson(f64::NAN, 1.0, 10);
        assert!(matches!(
            e,
            Err(AccountantError::InvalidParameter {
                name: "sampling_rate",
                ..
            })
        ));
        let e = SubsampledGaussian::poisson(0.1, 1.0, 0);
        assert!(matches!(
            e,
            Err(AccountantError::InvalidParameter { name: "steps", .. })
        ));
        let acc =
            PrivacyAccountant::new(Accountant::Rdp, Adjacency::AddRemove, PrivacyUnit::Example);
        assert!(matches!(
            acc.epsilon(1.0),
            Err(AccountantError::InvalidParameter { name: "delta", .. })
        ));
        assert!(matches!(
            acc.epsilon(0.0),
            Err(AccountantError::InvalidParameter { name: "delta", .. })
        ));
    }

    #[test]
    fn fixed_size_is_never_reported_as_poisson() -> Result<(), AccountantError> {
        let e = SubsampledGaussian::fixed_size(60_000, 600, 1.1, 10)?;
        assert!(matches!(
            e.epsilon(Accountant::Rdp, Adjacency::AddRemove, 1e-5),
            Err(AccountantError::Unsupported { .. })
        ));
        assert!(matches!(
            e.epsilon(Accountant::Pld, Adjacency::ReplaceOne, 1e-5),
            Err(AccountantError::Unsupported { .. })
        ));
        Ok(())
    }
}
