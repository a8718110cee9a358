//! The PostgreSQL store on a real server ([`crate::postgres_cluster::LocalCluster`], one
//! per test): the shared checks ([`crate::conformance`]) and what only a shared database
//! has — several connections at once, migrations, the append-only ledger, a restart.
//! Without PostgreSQL's server programs each test prints one `skipped:` line and passes,
//! unless `HUSH_REQUIRE_TOOLS=1` (scripts/test, CI), where it fails.

use std::sync::atomic::{AtomicU32, Ordering};

use hush_fl::store::{NewDevice, Store};
use hush_privacy::ledger::LedgerStore;

use crate::conformance::{self as check, Boxed};
use crate::postgres_cluster::{start_for_test as cluster, LocalCluster};
use crate::PostgresStore;

/// A fresh database on `c` and a function opening the store on it.
fn fresh(c: &LocalCluster) -> impl Fn() -> Boxed {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let url = c
        .create_database(&format!("check{}", NEXT.fetch_add(1, Ordering::Relaxed)))
        .unwrap();
    move || Box::new(PostgresStore::connect(&url).unwrap())
}

#[test]
fn the_shared_checks_hold_on_postgresql() {
    let Some(c) = cluster("the_shared_checks_hold_on_postgresql") else {
        return;
    };
    check::a_round_opens_with_its_cohort_once_and_keys_are_unique(&mut *fresh(&c)());
    check::a_release_commits_ledger_round_and_version_together_or_not_at_all(&fresh(&c));
    check::the_cohort_key_is_kept_once(&fresh(&c));
    check::an_enrolment_token_registers_at_most_its_quota_and_nothing_after_revocation(
        &mut *fresh(&c)(),
    );
    check::values_beyond_the_database_are_refused(&mut *fresh(&c)());
    check::ledger_records_read_back_exactly(&fresh(&c));
}

#[test]
fn replicas_migrate_once_and_never_take_more_seats_than_the_quota() {
    let Some(c) = cluster("replicas_migrate_once_and_never_take_more_seats_than_the_quota") else {
        return;
    };
    let url = c.create_database("shared").unwrap();
    // Four replicas open the empty database at once: each finds the schema ready.
    let stores: Vec<PostgresStore> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| PostgresStore::connect(&url).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let migrations: i64 = admin
        .query_one("SELECT COUNT(*) FROM schema_migrations", &[])
        .unwrap()
        .get(0);
    assert_eq!(migrations, crate::postgres_store::MIGRATIONS.len() as i64);
    // An enrolment token for 5 devices, 4 replicas registering 5 each at once: 5 succeed.
    let mut first = PostgresStore::connect(&url).unwrap();
    first.add_enrolment("e", "batch", 5, 1_000, 1).unwrap();
    let registered: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = stores
            .into_iter()
            .enumerate()
            .map(|(r, mut store)| {
                s.spawn(move || {
                    (0..5)
                        .filter_map(|i| {
                            let token = format!("replica{r}-device{i}");
                            let device = NewDevice {
                                enrolment_hash: "e",
                                label: "d",
                                token_hash: &token,
                                expires_at_ms: 500,
                            };
                            store.enrol_device(&device, 10).unwrap().ok()
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(registered.len(), 5, "{registered:?}");
    assert_eq!(first.device_list().unwrap().len(), 5);
    assert_eq!(first.enrolments().unwrap()[0].used, 5);
}

#[test]
fn the_ledger_is_append_only_and_a_newer_schema_is_refused() {
    let Some(c) = cluster("the_ledger_is_append_only_and_a_newer_schema_is_refused") else {
        return;
    };
    let url = c.create_database("ledger").unwrap();
    check::ledger_records_read_back_exactly(&|| -> Boxed {
        Box::new(PostgresStore::connect(&url).unwrap())
    });
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    for statement in [
        "UPDATE releases SET delta = 0.5",
        "DELETE FROM releases",
        "TRUNCATE releases",
    ] {
        let e = admin.batch_execute(statement).unwrap_err();
        assert!(
            format!("{e:?}").contains("append-only"),
            "{statement}: {e:?}"
        );
    }
    assert_eq!(
        PostgresStore::connect(&url)
            .unwrap()
            .records()
            .unwrap()
            .len(),
        2
    );
    admin
        .batch_execute("INSERT INTO schema_migrations VALUES (99, 0)")
        .unwrap();
    let err = PostgresStore::connect(&url).err().unwrap().to_string();
    assert!(err.contains("version 99, newer than"), "{err}");
}

#[test]
fn a_store_reconnects_after_the_database_restarts_and_bad_urls_are_named() {
    let Some(mut c) =
        cluster("a_store_reconnects_after_the_database_restarts_and_bad_urls_are_named")
    else {
        return;
    };
    let url = c.create_database("restart").unwrap();
    let mut s = PostgresStore::connect(&url).unwrap();
    s.add_enrolment("e", "batch", 5, 1_000, 1).unwrap();
    c.stop().unwrap();
    let down = s.enrolments().unwrap_err().to_string();
    assert!(down.contains("list enrolments"), "{down}");
    c.start_again().unwrap();
    // The connection the restart closed is opened again; nothing committed was lost.
    assert_eq!(s.enrolments().unwrap().len(), 1);
    s.add_enrolment("e2", "more", 5, 1_000, 2).unwrap();
    assert_eq!(s.enrolments().unwrap().len(), 2);
    // One host runs a database's rounds: a second is refused, also after the first's
    // connection came back from the restart; once the first is gone, another may.
    let mut host = PostgresStore::connect_to_run_rounds(&url).unwrap();
    let refused = PostgresStore::connect_to_run_rounds(&url)
        .err()
        .unwrap()
        .to_string();
    assert!(
        refused.contains("another hush-host already runs rounds"),
        "{refused}"
    );
    c.stop().unwrap();
    c.start_again().unwrap();
    assert!(
        host.enrolments().is_err(),
        "the restart closed its connection"
    );
    assert_eq!(
        host.enrolments().unwrap().len(),
        2,
        "reconnected, lock taken again"
    );
    assert!(PostgresStore::connect_to_run_rounds(&url).is_err());
    host.add_enrolment("e3", "x", 1, 1_000, 3).unwrap();
    drop(host);
    // The server ends the dropped session (and frees its lock) a moment later.
    let next = (0..100).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        PostgresStore::connect_to_run_rounds(&url).ok()
    });
    assert!(next.is_some(), "the lock outlived its session");
    // A URL that does not parse, and a server that is not there, are named.
    let bad = PostgresStore::connect("postgres://[nope")
        .err()
        .unwrap()
        .to_string();
    assert!(
        bad.contains("store URL") && bad.contains("postgres://"),
        "{bad}"
    );
    let absent = PostgresStore::connect("postgres://hush@127.0.0.1:1/none")
        .err()
        .unwrap()
        .to_string();
    assert!(
        absent.contains("connect to postgres://hush@127.0.0.1:1/none"),
        "{absent}"
    );
}
