//! The privacy ledger: an append-only, durable record of every private release, and the budget
//! check that refuses work before it starts.
//!
//! Each [`ReleaseRecord`] holds the mechanism, its parameters (sampling, rate, noise
//! multiplier, steps), any cost beside that Gaussian event ([`AdditionalCost`]: RDP known at
//! some orders only, δ spent outright), the unit of privacy, the adjacency, the population, δ, the release's own
//! ε by both accountants (RDP and, where it applies, PLD), the time, and what was released.
//! Storage sits behind [`LedgerStore`] ([`sqlite::SqliteLedgerStore`] today; a PostgreSQL store
//! can implement the same trait for several host replicas).
//!
//! [`Ledger`] adds a configured [`Budget`]: [`Ledger::authorize`] composes the planned event
//! with everything recorded (with the budget's accountant) and refuses it if the total would
//! exceed the budget — before any work is done. [`Ledger::complete`] is the one order in
//! which every private release in hush ends (DP-SGD, federated rounds, PATE labels): it
//! re-checks the release as actually run, commits its record durably, and only then
//! publishes, so the record exists before the model or labels do (DESIGN.md invariant 6).
//! [`Ledger::record`] is its first two steps, for callers that publish nothing.
//!
//! ```
//! use hush_privacy::accountant::{Accountant, Adjacency, PrivacyUnit, SubsampledGaussian};
//! use hush_privacy::ledger::{Budget, Ledger, Mechanism, Release, sqlite::SqliteLedgerStore};
//! let store = SqliteLedgerStore::open_in_memory()?;
//! let budget = Budget::new(8.0, 1e-5, Accountant::Rdp, Adjacency::AddRemove, PrivacyUnit::Example)?;
//! let mut ledger = Ledger::new(store, budget);
//! let release = Release {
//!     mechanism: Mechanism::DpSgd,
//!     event: SubsampledGaussian::poisson(0.01, 1.1, 1_000)?,
//!     unit: PrivacyUnit::Example,
//!     adjacency: Adjacency::AddRemove,
//!     population: Some(60_000),
//!     delta: 1e-5,
//!     released: "kws-v1 weights".into(),
//!     additional: Default::default(),
//! };
//! let auth = ledger.authorize(&release)?;   // refused here if over budget
//! let record = ledger.record(auth)?;        // durable before returning
//! assert!(record.epsilon_rdp.is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod row;
pub mod sqlite;

use serde::{Deserialize, Serialize};

use crate::accountant::{
    validate, Accountant, AccountantError, AdditionalCost, Adjacency, EpsilonReport,
    PrivacyAccountant, PrivacyUnit, SubsampledGaussian,
};

/// Errors of the ledger.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The store failed.
    #[error("ledger store {location}: {source}")]
    Store {
        /// Where (file path or operation).
        location: String,
        /// The underlying error (SQLite's or PostgreSQL's).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A stored row does not decode.
    #[error("ledger row {id}: column {column} holds {value:?}, which is not valid")]
    Corrupt {
        /// Row id.
        id: i64,
        /// Column name.
        column: &'static str,
        /// Stored value.
        value: String,
    },
    /// The planned release would exceed the budget.
    #[error(
        "budget exceeded: recorded releases spend epsilon {spent} and this release would bring \
         it to {projected}, over the budget of {budget} (delta {delta}, accountant {accountant})"
    )]
    BudgetExceeded {
        /// ε spent so far.
        spent: f64,
        /// ε after the planned release.
        projected: f64,
        /// Budget ε.
        budget: f64,
        /// Budget δ.
        delta: f64,
        /// Accountant used for the check.
        accountant: Accountant,
    },
    /// The planned release does not match the budget's unit or adjacency.
    #[error("release has {field} = {planned}, but the budget is for {field} = {budget}")]
    Mismatch {
        /// Which field.
        field: &'static str,
        /// Budget's value.
        budget: String,
        /// Release's value.
        planned: String,
    },
    /// Accounting failed (bad parameters, unsupported combination).
    #[error(transparent)]
    Accountant(#[from] AccountantError),
}

/// What kind of training or query produced a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Central DP-SGD.
    DpSgd,
    /// Federated rounds with central noise.
    FederatedAveraging,
    /// PATE (GNMax, data-independent cost as a Gaussian).
    Pate,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mechanism::DpSgd => "dp_sgd",
            Mechanism::FederatedAveraging => "federated_averaging",
            Mechanism::Pate => "pate",
        })
    }
}

/// A release to be made (or made): the event and its privacy context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// Mechanism kind.
    pub mechanism: Mechanism,
    /// The composed noisy steps.
    pub event: SubsampledGaussian,
    /// Unit of privacy.
    pub unit: PrivacyUnit,
    /// Adjacency.
    pub adjacency: Adjacency,
    /// Population the sample was drawn from, when known.
    pub population: Option<u64>,
    /// δ at which the record's own ε values are computed.
    pub delta: f64,
    /// What was released (model version, artifact, query answers).
    pub released: String,
    /// Cost beside `event` (none for most releases): RDP known only at some orders, δ
    /// spent outright. Composed into every total and budget check with the event.
    #[serde(default, skip_serializing_if = "AdditionalCost::is_none")]
    pub additional: AdditionalCost,
}

impl Release {
    /// Adds this release's whole cost (its event and its additional cost) to `acc`.
    pub fn compose_into(&self, acc: &mut PrivacyAccountant) -> Result<(), AccountantError> {
        acc.compose(self.event)?;
        acc.compose_additional(self.additional.clone())
    }

    /// ε of this release alone with `accountant`, at its own δ.
    pub fn epsilon(&self, accountant: Accountant) -> Result<EpsilonReport, AccountantError> {
        let mut acc = PrivacyAccountant::new(accountant, self.adjacency, self.unit);
        self.compose_into(&mut acc)?;
        acc.epsilon(self.delta)
    }
}

/// A stored release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseRecord {
    /// Row id, increasing.
    pub id: i64,
    /// Unix time in milliseconds when it was recorded.
    pub recorded_at_ms: i64,
    /// The release.
    pub release: Release,
    /// ε of this release alone by RDP (`None` if RDP cannot account for it).
    pub epsilon_rdp: Option<f64>,
    /// ε of this release alone by PLD (`None` if PLD cannot account for it).
    pub epsilon_pld: Option<f64>,
}

/// Storage of release records: append and read back, nothing else (append-only).
pub trait LedgerStore {
    /// Appends a record durably (committed before returning) and returns it with its id and
    /// time filled in.
    fn append(
        &mut self,
        release: &Release,
        epsilon_rdp: Option<f64>,
        epsilon_pld: Option<f64>,
    ) -> Result<ReleaseRecord, LedgerError>;

    /// All records, in the order they were appended.
    fn records(&self) -> Result<Vec<ReleaseRecord>, LedgerError>;
}

/// A privacy budget: total (ε, δ), how it is accounted, and what it protects.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Total ε allowed.
    pub epsilon: f64,
    /// δ of the budget.
    pub delta: f64,
    /// Accountant for the check.
    pub accountant: Accountant,
    /// Adjacency of the guarantee.
    pub adjacency: Adjacency,
    /// Unit of privacy.
    pub unit: PrivacyUnit,
}

impl Budget {
    /// A validated budget.
    pub fn new(
        epsilon: f64,
        delta: f64,
        accountant: Accountant,
        adjacency: Adjacency,
        unit: PrivacyUnit,
    ) -> Result<Self, AccountantError> {
        Ok(Self {
            epsilon: validate::positive_finite("budget_epsilon", epsilon)?,
            delta: validate::delta(delta)?,
            accountant,
            adjacency,
            unit,
        })
    }
}

/// Permission to run one planned release, from [`Ledger::authorize`].
#[derive(Debug, Clone, PartialEq)]
pub struct Authorization {
    release: Release,
    /// ε of everything recorded plus this release, at the budget's δ.
    pub projected: EpsilonReport,
}

/// Totals of a ledger under one accountant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerTotals {
    /// Number of records composed.
    pub releases: usize,
    /// Composed ε by RDP, when every record is RDP-accountable.
    pub rdp: Option<EpsilonReport>,
    /// Composed ε by PLD, when every record is PLD-accountable.
    pub pld: Option<EpsilonReport>,
}

/// Composes `records` that match `adjacency` / `unit` with `accountant` at `delta`.
pub fn compose_records(
    records: &[ReleaseRecord],
    accountant: Accountant,
    adjacency: Adjacency,
    unit: PrivacyUnit,
    delta: f64,
) -> Result<EpsilonReport, AccountantError> {
    let mut acc = PrivacyAccountant::new(accountant, adjacency, unit);
    for r in records {
        r.release.compose_into(&mut acc)?;
    }
    acc.epsilon(delta)
}

/// Totals of `records` by both accountants (an accountant that cannot handle some record
/// reports `None`).
pub fn totals(
    records: &[ReleaseRecord],
    adjacency: Adjacency,
    unit: PrivacyUnit,
    delta: f64,
) -> LedgerTotals {
    LedgerTotals {
        releases: records.len(),
        rdp: compose_records(records, Accountant::Rdp, adjacency, unit, delta).ok(),
        pld: compose_records(records, Accountant::Pld, adjacency, unit, delta).ok(),
    }
}

/// A ledger with a budget.
pub struct Ledger<S: LedgerStore> {
    store: S,
    budget: Budget,
}

impl<S: LedgerStore> Ledger<S> {
    /// Wraps a store with a budget.
    pub fn new(store: S, budget: Budget) -> Self {
        Self { store, budget }
    }

    /// The budget.
    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// ε spent so far under the budget's accountant and δ.
    pub fn spent(&self) -> Result<EpsilonReport, LedgerError> {
        let records = self.store.records()?;
        Ok(compose_records(
            &records,
            self.budget.accountant,
            self.budget.adjacency,
            self.budget.unit,
            self.budget.delta,
        )?)
    }

    /// Checks a planned release against the budget before any work is done: composes it with
    /// every recorded release and refuses if the total exceeds the budget's ε.
    pub fn authorize(&self, planned: &Release) -> Result<Authorization, LedgerError> {
        if planned.unit != self.budget.unit {
            return Err(LedgerError::Mismatch {
                field: "unit",
                budget: self.budget.unit.to_string(),
                planned: planned.unit.to_string(),
            });
        }
        if planned.adjacency != self.budget.adjacency {
            return Err(LedgerError::Mismatch {
                field: "adjacency",
                budget: self.budget.adjacency.to_string(),
                planned: planned.adjacency.to_string(),
            });
        }
        validate::delta(planned.delta)?;
        planned.event.validated()?;
        planned.additional.clone().validated()?;
        let records = self.store.records()?;
        let mut acc = PrivacyAccountant::new(
            self.budget.accountant,
            self.budget.adjacency,
            self.budget.unit,
        );
        for r in &records {
            r.release.compose_into(&mut acc)?;
        }
        let spent = acc.epsilon(self.budget.delta)?;
        planned.compose_into(&mut acc)?;
        let projected = acc.epsilon(self.budget.delta)?;
        if projected.epsilon.is_nan() || projected.epsilon > self.budget.epsilon {
            return Err(LedgerError::BudgetExceeded {
                spent: spent.epsilon,
                projected: projected.epsilon,
                budget: self.budget.epsilon,
                delta: self.budget.delta,
                accountant: self.budget.accountant,
            });
        }
        Ok(Authorization {
            release: planned.clone(),
            projected,
        })
    }

    /// The store, for a caller that appends a [`SealedRelease`] in one transaction with
    /// its own writes (the federated round store).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Checks an authorised release against the budget again (another release may have
    /// been recorded since the authorisation) and computes its own ε: what the store
    /// appends. [`Ledger::record`] appends it at once; the federated round store appends
    /// it in the same transaction as the round and the model version it released.
    pub fn seal(&self, authorization: Authorization) -> Result<SealedRelease, LedgerError> {
        let checked = self.authorize(&authorization.release)?;
        let release = checked.release;
        let eps = |a: Accountant| release.epsilon(a).ok().map(|r| r.epsilon);
        Ok(SealedRelease {
            epsilon_rdp: eps(Accountant::Rdp),
            epsilon_pld: eps(Accountant::Pld),
            release,
        })
    }

    /// Records an authorised release durably ([`Ledger::seal`], then append).
    pub fn record(&mut self, authorization: Authorization) -> Result<ReleaseRecord, LedgerError> {
        let sealed = self.seal(authorization)?;
        sealed.append_to(&mut self.store)
    }

    /// Completes a private release in the one order every release in hush follows
    /// (DP-SGD, federated rounds, PATE labels; DESIGN.md invariant 6), after it was
    /// authorised before any work ([`Ledger::authorize`]) and run: authorise `actual` —
    /// the release as it was really run (the steps taken, the queries answered) — against
    /// the budget again and seal it ([`Ledger::seal`]); make the record durable with
    /// `commit` ([`SealedRelease::append_to`] for a ledger of its own, or a store's one
    /// transaction that records the release with what it releases); and only then
    /// `publish`. A refusal or a failed commit publishes nothing.
    pub fn complete<T, E: From<LedgerError>>(
        &mut self,
        actual: &Release,
        commit: impl FnOnce(&mut S, SealedRelease) -> Result<ReleaseRecord, E>,
        publish: impl FnOnce(&ReleaseRecord) -> Result<T, E>,
    ) -> Result<T, E> {
        let sealed = self.seal(self.authorize(actual)?)?;
        let record = commit(&mut self.store, sealed)?;
        publish(&record)
    }
}

/// A release re-checked against the budget with its own ε computed, ready to append;
/// made only by [`Ledger::seal`].
#[derive(Debug, Clone, PartialEq)]
pub struct SealedRelease {
    release: Release,
    epsilon_rdp: Option<f64>,
    epsilon_pld: Option<f64>,
}

impl SealedRelease {
    /// The release.
    pub fn release(&self) -> &Release {
        &self.release
    }

    /// Its own ε by RDP (`None` if RDP cannot account for it).
    pub fn epsilon_rdp(&self) -> Option<f64> {
        self.epsilon_rdp
    }

    /// Its own ε by PLD (`None` if PLD cannot account for it).
    pub fn epsilon_pld(&self) -> Option<f64> {
        self.epsilon_pld
    }

    /// Appends it to `store` (committed before returning).
    pub fn append_to<S: LedgerStore>(&self, store: &mut S) -> Result<ReleaseRecord, LedgerError> {
        store.append(&self.release, self.epsilon_rdp, self.epsilon_pld)
    }
}

impl Authorization {
    /// The release authorised.
    pub fn release(&self) -> &Release {
        &self.release
    }
}

/// A boxed store (a store chosen at run time, `Box<dyn LedgerStore>`) is a store.
impl<T: LedgerStore + ?Sized> LedgerStore for Box<T> {
    fn append(
        &mut self,
        release: &Release,
        epsilon_rdp: Option<f64>,
        epsilon_pld: Option<f64>,
    ) -> Result<ReleaseRecord, LedgerError> {
        (**self).append(release, epsilon_rdp, epsilon_pld)
    }

    fn records(&self) -> Result<Vec<ReleaseRecord>, LedgerError> {
        (**self).records()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::sqlite::SqliteLedgerStore;

    fn release(additional: AdditionalCost) -> Result<Release, AccountantError> {
        Ok(Release {
            mechanism: Mechanism::Pate,
            event: SubsampledGaussian::poisson(1.0, 20.0, 50)?,
            unit: PrivacyUnit::User,
            adjacency: Adjacency::AddRemove,
            population: Some(100),
            delta: 1e-5,
            released: "labels".into(),
            additional,
        })
    }

    /// A release's additional cost counts against the budget: a release that fits by its
    /// Gaussian event alone is refused once its RDP part or its δ spent outright is added,
    /// and what is recorded is composed into the totals.
    #[test]
    fn the_budget_check_includes_the_additional_cost() -> Result<(), Box<dyn std::error::Error>> {
        let plain = release(AdditionalCost::none())?;
        let alone = plain.epsilon(Accountant::Rdp)?.epsilon;
        let budget = Budget::new(
            alone * 1.5,
            1e-5,
            Accountant::Rdp,
            Adjacency::AddRemove,
            PrivacyUnit::User,
        )?;
        let mut ledger = Ledger::new(SqliteLedgerStore::open_in_memory()?, budget);
        ledger.authorize(&plain)?;
        let orders = crate::accountant::rdp::default_orders();
        let heavy: Vec<(f64, f64)> = orders.iter().map(|&o| (o, alone)).collect();
        let costly = [
            AdditionalCost::rdp_at_orders(heavy)?,
            AdditionalCost::delta_spent(1e-5 - 1e-12)?,
        ];
        for c in costly {
            let e = ledger.authorize(&release(c.clone())?).unwrap_err();
            assert!(
                matches!(
                    e,
                    LedgerError::BudgetExceeded { .. } | LedgerError::Accountant(_)
                ),
                "{c:?}: {e}"
            );
        }
        let light = AdditionalCost::rdp_at_orders(vec![(8.0, 0.01)])?;
        let auth = ledger.authorize(&release(light.clone())?)?;
        let record = ledger.record(auth)?;
        assert_eq!(record.release.additional, light);
        assert_eq!(
            record.epsilon_pld, None,
            "PLD cannot compose an RDP-only cost"
        );
        let spent = ledger.spent()?.epsilon;
        assert!(spent > alone && spent <= alone * 1.5, "{spent} vs {alone}");
        Ok(())
    }

    /// `Ledger::complete` publishes only after a durable record: a release over budget or a
    /// failed commit publishes nothing and records nothing; a completed one is in the store
    /// when `publish` runs, and `publish` gets its record.
    #[test]
    fn complete_publishes_only_after_the_record_is_committed(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let plain = release(AdditionalCost::none())?;
        let alone = plain.epsilon(Accountant::Rdp)?.epsilon;
        let budget = Budget::new(
            alone * 1.05,
            1e-5,
            Accountant::Rdp,
            Adjacency::AddRemove,
            PrivacyUnit::User,
        )?;
        let mut ledger = Ledger::new(SqliteLedgerStore::open_in_memory()?, budget);
        let mut published = Vec::new();

        // The commit fails: nothing published, nothing recorded.
        let failed: Result<(), LedgerError> = ledger.complete(
            &plain,
            |_, _| {
                Err(LedgerError::Corrupt {
                    id: 0,
                    column: "test",
                    value: "commit refused".into(),
                })
            },
            |r| {
                published.push(r.id);
                Ok(())
            },
        );
        assert!(failed.is_err() && published.is_empty());
        assert!(ledger.store().records()?.is_empty());

        // Completed: recorded first, then published with its record.
        let seen = ledger.complete(
            &plain,
            |store, sealed| sealed.append_to(store),
            |r| Ok::<_, LedgerError>(r.id),
        )?;
        let records = ledger.store().records()?;
        assert_eq!(records.len(), 1);
        assert_eq!(seen, records[0].id);

        // A second one would exceed the budget: refused before commit or publish.
        let refused: Result<(), LedgerError> = ledger.complete(
            &plain,
            |_, _| panic!("a refused release must not be committed"),
            |_| panic!("a refused release must not be published"),
        );
        assert!(matches!(refused, Err(LedgerError::BudgetExceeded { .. })));
        assert_eq!(ledger.store().records()?.len(), 1);
        Ok(())
    }
}
