//! The SQLite store: the shared checks ([`crate::conformance`]) and what only SQLite has
//! (WAL, upgrades of older databases, the unsynced report write).

use std::path::Path;

use super::*;
use crate::conformance::{self as check, round, Boxed};

fn open_at(path: &Path) -> impl Fn() -> Boxed + '_ {
    move || Box::new(SqliteStore::open(path).unwrap())
}

#[test]
fn a_round_opens_with_its_cohort_once_and_keys_are_unique() {
    check::a_round_opens_with_its_cohort_once_and_keys_are_unique(
        &mut SqliteStore::open_in_memory().unwrap(),
    );
}

#[test]
fn a_release_commits_ledger_round_and_version_together_or_not_at_all() {
    let tmp = tempfile::tempdir().unwrap();
    check::a_release_commits_ledger_round_and_version_together_or_not_at_all(&open_at(
        &tmp.path().join(DB_FILE),
    ));
}

#[test]
fn an_enrolment_token_registers_at_most_its_quota_and_nothing_after_revocation() {
    check::an_enrolment_token_registers_at_most_its_quota_and_nothing_after_revocation(
        &mut SqliteStore::open_in_memory().unwrap(),
    );
}

#[test]
fn values_beyond_the_database_are_refused() {
    check::values_beyond_the_database_are_refused(&mut SqliteStore::open_in_memory().unwrap());
}

#[test]
fn ledger_records_read_back_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    check::ledger_records_read_back_exactly(&open_at(&tmp.path().join(DB_FILE)));
}

#[test]
fn the_cohort_key_is_kept_once_and_the_database_is_in_wal_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(DB_FILE);
    check::the_cohort_key_is_kept_once(&open_at(&path));
    let s = SqliteStore::open(&path).unwrap();
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
