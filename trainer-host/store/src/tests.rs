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
fn draws_are_recorded_once_and_keys_are_unique() {
    let mut s = SqliteStore::open_in_memory().unwrap();
    let d = s.register_device("a", "h1", 1).unwrap();
    assert_eq!(s.device_by_token_hash("h1").unwrap(), Some(d));
    assert_eq!(s.device_by_token_hash("h2").unwrap(), None);
    assert!(s.register_device("b", "h1", 1).is_err());
    s.record_draw(1, d, true, 1).unwrap();
    assert_eq!(s.cohort_draw(1, d).unwrap(), Some(true));
    assert!(s.record_draw(1, d, false, 1).is_err());
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
    s.insert_round(&round(1)).unwrap();
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
