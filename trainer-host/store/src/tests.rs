use hush_privacy::accountant::{Adjacency, PrivacyUnit, SubsampledGaussian};
use hush_privacy::ledger::{Budget, Ledger, Mechanism};

use super::*;

fn round(id: u64) -> RoundRow {
    RoundRow {
        id,
        model_version: id - 1,
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

fn version(v: u64) -> ModelVersionRow {
    ModelVersionRow {
        version: v,
        round: Some(v),
        digest: format!("digest-{v}"),
    }
}

/// A release sealed by a ledger over a throwaway store (sealing needs the budget only).
fn sealed() -> hush_privacy::ledger::SealedRelease {
    let budget = Budget::new(
        100.0,
        1e-5,
        hush_privacy::accountant::Accountant::Rdp,
        Adjacency::AddRemove,
        PrivacyUnit::User,
    )
    .unwrap();
    let ledger = Ledger::new(SqliteStore::open_in_memory().unwrap(), budget);
    let release = Release {
        mechanism: Mechanism::FederatedAveraging,
        event: SubsampledGaussian::poisson(0.5, 1.0, 1).unwrap(),
        unit: PrivacyUnit::User,
        adjacency: Adjacency::AddRemove,
        population: Some(3),
        delta: 1e-5,
        released: "federated round 1: model v1".into(),
        additional: Default::default(),
    };
    ledger.seal(ledger.authorize(&release).unwrap()).unwrap()
}

fn commit(round: u64, v: ModelVersionRow) -> ReleaseCommit {
    ReleaseCommit {
        round,
        outcome: released(v.version),
        ledger: Some(sealed()),
        version: v,
        now_ms: 10,
    }
}

#[test]
fn a_round_opens_with_its_cohort_once_and_keys_are_unique() {
    let mut s = SqliteStore::open_in_memory().unwrap();
    s.add_enrolment("e", "batch", 5, 100, 1).unwrap();
    let d = enrol(&mut s, "h1").unwrap().unwrap();
    assert_eq!(s.device_by_token_hash("h1").unwrap().unwrap().id, d);
    assert_eq!(s.device_by_token_hash("h2").unwrap(), None);
    assert!(enrol(&mut s, "h1").is_err());
    s.open_round(&round(1), &[d, 7, 9]).unwrap();
    assert_eq!(s.cohort(1).unwrap(), vec![d, 7, 9]);
    assert_eq!(
        s.rounds().unwrap()[0].selected,
        3,
        "the realized cohort, at open"
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
}

#[test]
fn a_release_commits_ledger_round_and_version_together_or_not_at_all() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(DB_FILE);
    let mut s = SqliteStore::open(&path).unwrap();
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
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.records().unwrap().len(), 1);
    let r = &s.rounds().unwrap()[0];
    assert_eq!(
        (r.state, r.released_version),
        (RoundState::Released, Some(1))
    );
    assert_eq!(s.model_versions().unwrap()[1], version(1));
    // A round is closed once: releasing it again is refused, and spends nothing.
    let mut s = s;
    assert!(s.commit_release(&commit(1, version(2))).is_err());
    assert_eq!(s.records().unwrap().len(), 1);
}

#[test]
fn the_cohort_key_is_kept_once_and_the_database_is_in_wal_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(DB_FILE);
    let mut s = SqliteStore::open(&path).unwrap();
    let first = s.cohort_key([7; 32]).unwrap();
    assert_eq!(first, [7; 32]);
    drop(s);
    let mut s = SqliteStore::open(&path).unwrap();
    assert_eq!(
        s.cohort_key([9; 32]).unwrap(),
        [7; 32],
        "the stored key wins"
    );
    let mode: String = s
        .conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn a_database_from_before_digests_is_upgraded_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(DB_FILE);
    let old = Connection::open(&path).unwrap();
    old.execute_batch(
        "CREATE TABLE model_versions (version INTEGER PRIMARY KEY, round INTEGER,
             path TEXT NOT NULL, published_at_ms INTEGER NOT NULL);
         INSERT INTO model_versions VALUES (0, NULL, '/old/abs/path/v0', 5);",
    )
    .unwrap();
    drop(old);
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(
        s.model_versions().unwrap(),
        vec![ModelVersionRow {
            version: 0,
            round: None,
            digest: String::new()
        }]
    );
}

fn enrol(s: &mut SqliteStore, token_hash: &str) -> StoreResult<Result<u64, EnrolRefusal>> {
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

#[test]
fn an_enrolment_token_registers_at_most_its_quota_and_nothing_after_revocation() {
    let mut s = SqliteStore::open_in_memory().unwrap();
    assert_eq!(enrol(&mut s, "h0").unwrap(), Err(EnrolRefusal::Unknown));
    let e = s.add_enrolment("e", "batch", 2, 100, 1).unwrap();
    let a = enrol(&mut s, "h1").unwrap().unwrap();
    let b = enrol(&mut s, "h2").unwrap().unwrap();
    assert_eq!(
        enrol(&mut s, "h3").unwrap(),
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
    assert_eq!(s.devices(30).unwrap(), (1, b));
    assert_eq!(s.active_devices(30).unwrap(), vec![b]);
    assert_eq!(s.devices(50).unwrap(), (0, 0));
    assert!(s.active_devices(50).unwrap().is_empty());
    let row = s.device_by_token_hash("h1").unwrap().unwrap();
    assert_eq!(row.revoked_at_ms, Some(20));
    assert!(!row.active(30));
    assert!(s.device_by_token_hash("h2").unwrap().unwrap().active(49));
    // A revoked or expired enrolment token registers nobody.
    s.add_enrolment("e2", "more", 10, 100, 1).unwrap();
    assert!(s.revoke_enrolment(e, 30).unwrap());
    assert_eq!(enrol(&mut s, "h4").unwrap(), Err(EnrolRefusal::Revoked));
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
}

#[test]
fn a_store_from_before_enrolment_is_upgraded_and_its_devices_keep_working() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(DB_FILE);
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE devices (id INTEGER PRIMARY KEY AUTOINCREMENT,
                 token_hash TEXT NOT NULL UNIQUE, label TEXT NOT NULL,
                 registered_at_ms INTEGER NOT NULL);
             INSERT INTO devices (token_hash, label, registered_at_ms) VALUES ('old', 'x', 1);",
        )
        .unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    let d = s.device_by_token_hash("old").unwrap().unwrap();
    assert_eq!((d.id, d.expires_at_ms, d.enrolment), (1, None, None));
    assert!(d.active(u64::MAX - 1));
    assert_eq!(s.devices(1_000).unwrap(), (1, 1));
}

#[test]
fn only_reports_skip_the_fsync_and_the_connection_stays_synced() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = SqliteStore::open(&tmp.path().join(DB_FILE)).unwrap();
    let sync = |s: &SqliteStore| -> i64 {
        s.conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(sync(&s), 2, "FULL after open");
    s.open_round(&round(1), &[1]).unwrap();
    assert_eq!(sync(&s), 2, "FULL after a round opens");
    let rep = ReportRow {
        round: 1,
        device: 1,
        idempotency_key: Some("1:1".into()),
        accepted: true,
        reason: None,
        bytes: 1,
    };
    s.record_report(&rep, 1).unwrap();
    // A failed unsynced write (the same key again) restores FULL too.
    assert!(s.record_report(&rep, 1).is_err());
    assert_eq!(sync(&s), 2, "FULL again after a report, failed or not");
    assert_eq!(s.cohort(1).unwrap(), vec![1]);
}
