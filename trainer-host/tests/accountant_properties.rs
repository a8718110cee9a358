//! Property tests of the accountants and the ledger: ε is monotone in steps, sampling rate and
//! 1/σ; ledger entries composed equal one composed event; the budget refuses up front.

use hush_host::accountant::{
    Accountant, AccountantError, Adjacency, PrivacyAccountant, PrivacyUnit, SubsampledGaussian,
};
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::{
    compose_records, Budget, Ledger, LedgerError, LedgerStore, Mechanism, Release,
};
use proptest::prelude::*;

fn eps(acc: Accountant, q: f64, sigma: f64, steps: u64, delta: f64) -> f64 {
    SubsampledGaussian::poisson(q, sigma, steps)
        .and_then(|e| e.epsilon(acc, Adjacency::AddRemove, delta))
        .map(|r| r.epsilon)
        .unwrap_or(f64::NAN)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn rdp_epsilon_is_monotone_in_steps_q_and_inverse_sigma(
        q in 1e-4f64..0.5,
        sigma in 0.5f64..5.0,
        steps in 1u64..5_000,
        dq in 1.01f64..2.0,
        ds in 1.01f64..2.0,
        dt in 1u64..1_000,
    ) {
        let delta = 1e-6;
        let base = eps(Accountant::Rdp, q, sigma, steps, delta);
        prop_assert!(base.is_finite());
        // Below ε = 10 at δ = 1e-6 no order under 2 can be the optimum (ln(1/(δα))/(α − 1)
        // + ln(1 − 1/α) alone is over 13 there), and the orders whose fractional series
        // dp_accounting gives up on and excludes (+∞) are at most 1.9 over this domain (q up
        // to 0.5, σ from 0.5; a grid of 101 × 91 checked on 2026-12-03), so ε is the minimum
        // over every order and monotone as each order's RDP is. Above it, an order excluded
        // here but not a little further on breaks monotonicity in the reference too: q 0.4403
        // → 0.4447 at σ 0.608 and 115 steps gives ε 136.05 → 126.35 (order 1.7 excluded,
        // then not) in dp_accounting 0.6.0 as here; this test found it on 2026-12-03.
        prop_assume!(base < 10.0);
        prop_assert!(eps(Accountant::Rdp, q, sigma, steps + dt, delta) >= base);
        prop_assert!(eps(Accountant::Rdp, (q * dq).min(1.0), sigma, steps, delta) >= base);
        prop_assert!(eps(Accountant::Rdp, q, sigma / ds, steps, delta) >= base);
    }

    #[test]
    fn ledger_entries_compose_to_one_event(
        q in 1e-3f64..0.2,
        sigma in 0.7f64..3.0,
        parts in proptest::collection::vec(1u64..200, 1..6),
    ) {
        let delta = 1e-5;
        let total: u64 = parts.iter().sum();
        let mut store = SqliteLedgerStore::open_in_memory().map_err(|e| TestCaseError::fail(e.to_string()))?;
        for &steps in &parts {
            let release = Release {
                mechanism: Mechanism::DpSgd,
                event: SubsampledGaussian::poisson(q, sigma, steps).map_err(|e| TestCaseError::fail(e.to_string()))?,
                unit: PrivacyUnit::Example,
                adjacency: Adjacency::AddRemove,
                population: None,
                delta,
                released: format!("{steps} steps"),
                additional: Default::default(),
            };
            store.append(&release, None, None).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let records = store.records().map_err(|e| TestCaseError::fail(e.to_string()))?;
        for acc in [Accountant::Rdp, Accountant::Pld] {
            let composed = compose_records(&records, acc, Adjacency::AddRemove, PrivacyUnit::Example, delta)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let one = eps(acc, q, sigma, total, delta);
            prop_assert_eq!(composed.epsilon, one);
        }
    }
}

#[test]
fn pld_epsilon_is_monotone_in_steps_q_and_inverse_sigma() {
    let delta = 1e-6;
    let base = eps(Accountant::Pld, 0.01, 1.0, 200, delta);
    assert!(base.is_finite() && base > 0.0);
    assert!(eps(Accountant::Pld, 0.01, 1.0, 400, delta) >= base);
    assert!(eps(Accountant::Pld, 0.02, 1.0, 200, delta) >= base);
    assert!(eps(Accountant::Pld, 0.01, 0.8, 200, delta) >= base);
}

#[test]
fn composing_distinct_events_in_an_accountant_equals_the_ledger_total(
) -> Result<(), Box<dyn std::error::Error>> {
    let delta = 1e-5;
    let a = SubsampledGaussian::poisson(0.01, 1.1, 300)?;
    let b = SubsampledGaussian::poisson(0.02, 1.5, 100)?;
    let mut store = SqliteLedgerStore::open_in_memory()?;
    for e in [a, b, a] {
        let release = Release {
            mechanism: Mechanism::DpSgd,
            event: e,
            unit: PrivacyUnit::Example,
            adjacency: Adjacency::AddRemove,
            population: Some(60_000),
            delta,
            released: "m".into(),
            additional: Default::default(),
        };
        store.append(&release, None, None)?;
    }
    let records = store.records()?;
    for acc in [Accountant::Rdp, Accountant::Pld] {
        let mut one = PrivacyAccountant::new(acc, Adjacency::AddRemove, PrivacyUnit::Example);
        one.compose(SubsampledGaussian::poisson(0.01, 1.1, 600)?)?;
        one.compose(b)?;
        let want = one.epsilon(delta)?.epsilon;
        let got = compose_records(
            &records,
            acc,
            Adjacency::AddRemove,
            PrivacyUnit::Example,
            delta,
        )?
        .epsilon;
        assert_eq!(got, want, "{acc}");
    }
    Ok(())
}

fn release(steps: u64) -> Result<Release, AccountantError> {
    Ok(Release {
        mechanism: Mechanism::DpSgd,
        event: SubsampledGaussian::poisson(0.01, 1.1, steps)?,
        unit: PrivacyUnit::Example,
        adjacency: Adjacency::AddRemove,
        population: Some(60_000),
        delta: 1e-5,
        released: format!("model after {steps} steps"),
        additional: Default::default(),
    })
}

#[test]
fn budget_refuses_before_work_and_records_durably() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ledger.sqlite");
    // 10 000 steps at (0.01, 1.1) cost 5.63 (golden case A); budget 6.
    let budget = Budget::new(
        6.0,
        1e-5,
        Accountant::Rdp,
        Adjacency::AddRemove,
        PrivacyUnit::Example,
    )?;
    {
        let mut ledger = Ledger::new(SqliteLedgerStore::open(&path)?, budget);
        let auth = ledger.authorize(&release(5_000)?)?;
        let rec = ledger.record(auth)?;
        assert!(rec.epsilon_rdp.is_some() && rec.epsilon_pld.is_some());
        let auth = ledger.authorize(&release(5_000)?)?;
        assert!((auth.projected.epsilon - 5.632010670081592).abs() < 1e-9);
        ledger.record(auth)?;
        // A further 5000 steps would exceed 6: refused up front, nothing written.
        match ledger.authorize(&release(5_000)?) {
            Err(LedgerError::BudgetExceeded {
                spent, projected, ..
            }) => {
                assert!((spent - 5.632010670081592).abs() < 1e-9);
                assert!(projected > 6.0);
            }
            other => panic!("expected BudgetExceeded, got {other:?}"),
        }
        assert_eq!(ledger.store().records()?.len(), 2);
    }
    // Reopen: the records survived (committed before `record` returned).
    let store = SqliteLedgerStore::open(&path)?;
    let records = store.records()?;
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].release, release(5_000)?);
    let ledger = Ledger::new(store, budget);
    assert!((ledger.spent()?.epsilon - 5.632010670081592).abs() < 1e-9);
    Ok(())
}

#[test]
fn budget_refuses_mismatched_unit_or_adjacency() -> Result<(), Box<dyn std::error::Error>> {
    let budget = Budget::new(
        6.0,
        1e-5,
        Accountant::Rdp,
        Adjacency::AddRemove,
        PrivacyUnit::User,
    )?;
    let ledger = Ledger::new(SqliteLedgerStore::open_in_memory()?, budget);
    assert!(matches!(
        ledger.authorize(&release(10)?),
        Err(LedgerError::Mismatch { field: "unit", .. })
    ));
    let mut r = release(10)?;
    r.unit = PrivacyUnit::User;
    r.adjacency = Adjacency::ReplaceOne;
    assert!(matches!(
        ledger.authorize(&r),
        Err(LedgerError::Mismatch {
            field: "adjacency",
            ..
        })
    ));
    Ok(())
}
