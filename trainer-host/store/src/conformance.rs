//! What every [`Store`] must do, written once and run on each backend (SQLite in
//! `sqlite_tests`, PostgreSQL in `postgres_tests`). Each check takes a fresh, empty store
//! (and, where it reopens one, a function that opens the same database again).

use hush_fl::store::{
    EnrolRefusal, ModelVersionRow, NewDevice, ReleaseCommit, ReportRow, RoundOutcome, RoundRow,
    RoundState, Store, StoreResult,
};
use hush_privacy::accountant::{AdditionalCost, Adjacency, PrivacyUnit, SubsampledGaussian};
use hush_privacy::ledger::{Budget, Ledger, Mechanism, Release, SealedRelease};

use crate::SqliteStore;

/// A store to check, boxed.
pub type Boxed = Box<dyn Store>;

pub fn round(id: u64) -> RoundRow {
    RoundRow {
        id,
        model_version: id.saturating_sub(1),
        state: RoundState::Open,
        opened_at_ms: 1,
        deadline_ms: 2,
        population: 3,
        max_device_id: 3,
        expected_cohort: 3.0,
        closed_at_ms: None,
        reason: None,
        released_version: None,
        selected: 0,
        accepted: 0,
        rejected: 0,
        epsilon_rdp: None,
        epsilon_pld: None,
    }
}

fn released(version: u64) -> RoundOutcome {
    RoundOutcome {
        state: RoundState::Released,
        reason: None,
        released_version: Some(version),
        selected: 2,
        accepted: 2,
        rejected: 0,
        epsilon_rdp: Some(1.0),
        epsilon_pld: Some(0.9),
    }
}

pub fn version(v: u64) -> ModelVersionRow {
    ModelVersionRow {
        version: v,
        round: Some(v),
        digest: format!("digest-{v}"),
    }
}

fn release(additional: AdditionalCost) -> Release {
    Release {
        mechanism: Mechanism::FederatedAveraging,
        event: SubsampledGaussian::poisson(0.5, 1.0, 1).unwrap(),
        unit: PrivacyUnit::User,
        adjacency: Adjacency::AddRemove,
        population: Some(3),
        delta: 1e-5,
        released: "federated round 1: model v1".into(),
        additional,
    }
}

/// A release sealed by a ledger over a throwaway store (sealing needs the budget only).
fn sealed() -> SealedRelease {
    let budget = Budget::new(
        100.0,
        1e-5,
        hush_privacy::accountant::Accountant::Rdp,
        Adjacency::AddRemove,
        PrivacyUnit::User,
    )
    .unwrap();
    let ledger = Ledger::new(SqliteStore::open_in_memory().unwrap(), budget);
    let r = release(AdditionalCost::none());
    ledger.seal(ledger.authorize(&r).unwrap()).unwrap()
}

pub fn commit(round: u64, v: ModelVersionRow) -> ReleaseCommit {
    ReleaseCommit {
        round,
        outcome: released(v.version),
        ledger: Some(sealed()),
        version: v,
        now_ms: 10,
        files: Vec::new(),
    }
}

pub fn enrol(s: &mut dyn Store, token_hash: &str) -> StoreResult<Result<u64, EnrolRefusal>> {
    s.enrol_device(
        &NewDevice {
            enrolment_hash: "e",
            label: "d",
            token_hash,
            expires_at_ms: 50,
        },
        10,
    )
}

/// A round opens once, with its whole cohort or not at all; an idempotency key is accepted
/// once.
pub fn a_round_opens_with_its_cohort_once_and_keys_are_unique(s: &mut dyn Store) {
    s.add_enrolment("e", "batch", 5, 100, 1).unwrap();
    let d = enrol(s, "h1").unwrap().unwrap();
    assert_eq!(s.device_by_token_hash("h1").unwrap().unwrap().id, d);
    assert_eq!(s.device_by_token_hash("h2").unwrap(), None);
    assert!(enrol(s, "h1").is_err(), "a token hash is unique");
    s.open_round(&round(1), &[d, 7, 9]).unwrap();
    assert_eq!(s.cohort(1).unwrap(), vec![d, 7, 9]);
    assert_eq!(
        s.rounds().unwrap()[0].selected,
        3,
        "the realized cohort, at open"
    );
    assert_eq!(
        s.rounds().unwrap()[0],
        RoundRow {
            selected: 3,
            ..round(1)
        }
    );
    // A round opens once: a second opening of round 1 writes neither round nor cohort.
    assert!(s.open_round(&round(1), &[2]).is_err());
    assert_eq!(s.cohort(1).unwrap(), vec![d, 7, 9]);
    assert_eq!(s.rounds().unwrap().len(), 1);
    // A cohort that names a device twice is refused whole.
    assert!(s.open_round(&round(2), &[4, 4]).is_err());
    assert!(s.cohort(2).unwrap().is_empty());
    assert_eq!(s.rounds().unwrap().len(), 1);
    let rep = ReportRow {
        round: 1,
        device: d,
        idempotency_key: Some("1:1".into()),
        accepted: true,
        reason: None,
        bytes: 10,
    };
    s.record_report(&rep, 1).unwrap();
    assert!(s.record_report(&rep, 1).is_err());
    assert_eq!(s.accepted_key("1:1").unwrap(), Some(1));
    assert_eq!(s.accepted_key("1:2").unwrap(), None);
    let rejected = ReportRow {
        idempotency_key: None,
        accepted: false,
        reason: Some("bad norm".into()),
        ..rep
    };
    s.record_report(&rejected, 2).unwrap();
    s.record_report(&rejected, 3).unwrap();
    assert_eq!(s.rejected_total().unwrap(), 2);
    // An abandoned round is closed once.
    let abandoned = RoundOutcome {
        state: RoundState::Abandoned,
        reason: Some("host restart".into()),
        released_version: None,
        selected: 3,
        accepted: 1,
        rejected: 2,
        epsilon_rdp: None,
        epsilon_pld: None,
    };
    s.close_round(1, &abandoned, 5).unwrap();
    assert!(s.close_round(1, &abandoned, 6).is_err());
    let r = &s.rounds().unwrap()[0];
    assert_eq!(
        (r.state, r.closed_at_ms, r.reason.as_deref(), r.rejected),
        (RoundState::Abandoned, Some(5), Some("host restart"), 2)
    );
}

/// A release commits its ledger record, its round's outcome and its model version together,
/// or nothing; a reopened store reads them back; a round is released once.
pub fn a_release_commits_ledger_round_and_version_together_or_not_at_all(open: &dyn Fn() -> Boxed) {
    let mut s = open();
    s.add_initial_version(&version(0), 1).unwrap();
    s.open_round(&round(1), &[]).unwrap();
    // Version 0 exists: inserting it again fails inside the transaction, after the ledger
    // append and the round update — and neither of them may survive.
    let err = s.commit_release(&commit(1, version(0))).unwrap_err();
    assert!(err.to_string().contains("model version"), "{err}");
    assert!(s.records().unwrap().is_empty(), "no ledger record");
    assert_eq!(s.rounds().unwrap()[0].state, RoundState::Open);
    assert_eq!(s.model_versions().unwrap().len(), 1);
    // The real release commits all three; a reopened store reads them back.
    let record = s.commit_release(&commit(1, version(1))).unwrap();
    assert!(record.is_some_and(|r| r.epsilon_rdp.is_some()));
    drop(s);
    let mut s = open();
    assert_eq!(s.records().unwrap().len(), 1);
    let r = &s.rounds().unwrap()[0];
    assert_eq!(
        (r.state, r.released_version),
        (RoundState::Released, Some(1))
    );
    assert_eq!(s.model_versions().unwrap(), vec![version(0), version(1)]);
    // A round is closed once: releasing it again is refused, and spends nothing.
    assert!(s.commit_release(&commit(1, version(2))).is_err());
    assert_eq!(s.records().unwrap().len(), 1);
}

/// The first cohort key stored is kept across reopens.
pub fn the_cohort_key_is_kept_once(open: &dyn Fn() -> Boxed) {
    let mut s = open();
    assert_eq!(s.cohort_key([7; 32]).unwrap(), [7; 32]);
    drop(s);
    let mut s = open();
    assert_eq!(
        s.cohort_key([9; 32]).unwrap(),
        [7; 32],
        "the stored key wins"
    );
}

/// An enrolment token registers at most its quota, and nobody once revoked or expired;
/// devices count while active.
pub fn an_enrolment_token_registers_at_most_its_quota_and_nothing_after_revocation(
    s: &mut dyn Store,
) {
    assert_eq!(enrol(s, "h0").unwrap(), Err(EnrolRefusal::Unknown));
    let e = s.add_enrolment("e", "batch", 2, 100, 1).unwrap();
    let a = enrol(s, "h1").unwrap().unwrap();
    let b = enrol(s, "h2").unwrap().unwrap();
    assert_eq!(
        enrol(s, "h3").unwrap(),
        Err(EnrolRefusal::QuotaUsed { quota: 2 })
    );
    // A refused registration adds no device and takes no seat.
    assert_eq!(s.device_list().unwrap().len(), 2);
    assert_eq!(s.enrolments().unwrap()[0].used, 2);
    // Devices count while active: until revoked, and until their token expires (50).
    assert_eq!(s.devices(10).unwrap(), (2, b));
    assert_eq!(s.active_devices(10).unwrap(), vec![a, b]);
    assert!(s.revoke_device(a, 20).unwrap());
    assert!(!s.revoke_device(a, 21).unwrap(), "already revoked");
    assert!(!s.revoke_device(999, 21).unwrap(), "no such device");
    assert_eq!(s.devices(30).unwrap(), (1, b));
    assert_eq!(s.active_devices(30).unwrap(), vec![b]);
    assert_eq!(s.devices(50).unwrap(), (0, 0));
    assert!(s.active_devices(50).unwrap().is_empty());
    let row = s.device_by_token_hash("h1").unwrap().unwrap();
    assert_eq!(row.revoked_at_ms, Some(20));
    assert_eq!((row.label.as_str(), row.expires_at_ms), ("d", Some(50)));
    assert!(!row.active(30));
    assert!(s.device_by_token_hash("h2").unwrap().unwrap().active(49));
    // A revoked or expired enrolment token registers nobody.
    s.add_enrolment("e2", "more", 10, 100, 1).unwrap();
    assert!(s.revoke_enrolment(e, 30).unwrap());
    assert!(!s.revoke_enrolment(e, 31).unwrap(), "already revoked");
    assert_eq!(enrol(s, "h4").unwrap(), Err(EnrolRefusal::Revoked));
    let late = s.enrol_device(
        &NewDevice {
            enrolment_hash: "e2",
            label: "late",
            token_hash: "h5",
            expires_at_ms: 500,
        },
        100,
    );
    assert_eq!(late.unwrap(), Err(EnrolRefusal::Expired));
    let listed = s.enrolments().unwrap();
    assert_eq!(
        (
            listed[0].revoked_at_ms,
            listed[1].label.as_str(),
            listed[1].quota
        ),
        (Some(30), "more", 10)
    );
}

/// Numbers beyond what the database holds are refused with an error naming them, never
/// wrapped.
pub fn values_beyond_the_database_are_refused(s: &mut dyn Store) {
    let err = s.open_round(&round(u64::MAX), &[]).unwrap_err();
    assert!(err.to_string().contains(&u64::MAX.to_string()), "{err}");
    let err = s.open_round(&round(1), &[1 << 63]).unwrap_err();
    assert!(err.to_string().contains(&(1u64 << 63).to_string()), "{err}");
    assert!(s.rounds().unwrap().is_empty());
}

/// A ledger record appended on its own reads back bit for bit, additional cost included.
pub fn ledger_records_read_back_exactly(open: &dyn Fn() -> Boxed) {
    let mut s = open();
    let cost = AdditionalCost {
        rdp: vec![(1.1, 10.811072727868297), (3.5, 0.1 + 0.2)],
        delta: 3.140141924652721e-10,
    };
    let first = s
        .append(&release(cost.clone()), Some(0.1 + 0.2), None)
        .unwrap();
    let second = s
        .append(&release(AdditionalCost::none()), None, Some(2.5))
        .unwrap();
    assert!(second.id > first.id, "ids increase");
    drop(s);
    let records = open().records().unwrap();
    assert_eq!(records, vec![first, second]);
    assert_eq!(records[0].release.additional, cost);
}
