//! The PostgreSQL store on a real server ([`crate::postgres_cluster::LocalCluster`], one
//! per test): the shared checks ([`crate::conformance`]) and what only a shared database
//! has — several connections at once, migrations, the append-only ledger, a restart.
//! Without PostgreSQL's server programs each test prints one `skipped:` line and passes,
//! unless `HUSH_REQUIRE_TOOLS=1` (scripts/test, CI), where it fails.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use hush_fl::store::{NewDevice, ReportRow, RoundState, SharedRounds, Store};
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

/// What [`CutProxy`] does to the next COMMIT a client sends.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Cut {
    /// Nothing: forward everything.
    Never = 0,
    /// Drop the connection without forwarding the COMMIT (the server rolls back).
    BeforeCommit = 1,
    /// Forward the COMMIT, then drop the connection before the server's answer reaches the
    /// client (the server commits; the client cannot know).
    AnswerToCommit = 2,
}

/// A TCP proxy between the store and the server that can cut a connection at its next
/// COMMIT (the simple-query message `COMMIT`), once.
struct CutProxy {
    port: u16,
    cut: Arc<AtomicU8>,
    /// Connections it has accepted.
    connections: Arc<AtomicU32>,
}

impl CutProxy {
    fn start(server_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicU8::new(Cut::Never as u8));
        let armed = cut.clone();
        let connections = Arc::new(AtomicU32::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let server = TcpStream::connect(("127.0.0.1", server_port)).unwrap();
                let cutting = Arc::new(AtomicBool::new(false));
                let (mut from_server, mut to_client) =
                    (server.try_clone().unwrap(), client.try_clone().unwrap());
                let muted = cutting.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = from_server.read(&mut buf) {
                        if n == 0 || muted.load(Ordering::SeqCst) {
                            break;
                        }
                        if to_client.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
                let armed = armed.clone();
                std::thread::spawn(move || {
                    let (mut from_client, mut to_server) = (client, server);
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = from_client.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let chunk = &buf[..n];
                        let commit = chunk.windows(7).any(|w| w == b"COMMIT\0");
                        let mode = armed.load(Ordering::SeqCst);
                        if commit && mode != Cut::Never as u8 {
                            armed.store(Cut::Never as u8, Ordering::SeqCst);
                            cutting.store(true, Ordering::SeqCst);
                            if mode == Cut::AnswerToCommit as u8 {
                                let _ = to_server.write_all(chunk);
                                // Let the server commit before the connection goes.
                                std::thread::sleep(std::time::Duration::from_millis(300));
                            }
                            let _ = from_client.shutdown(Shutdown::Both);
                            let _ = to_server.shutdown(Shutdown::Both);
                            break;
                        }
                        if to_server.write_all(chunk).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self {
            port,
            cut,
            connections,
        }
    }

    fn connections(&self) -> u32 {
        self.connections.load(Ordering::SeqCst)
    }

    fn arm(&self, cut: Cut) {
        self.cut.store(cut as u8, Ordering::SeqCst);
    }
}

#[test]
fn a_release_whose_commit_goes_unanswered_is_found_committed_or_not() {
    let Some(c) = cluster("a_release_whose_commit_goes_unanswered_is_found_committed_or_not")
    else {
        return;
    };
    let direct = c.create_database("cut").unwrap();
    let proxy = CutProxy::start(c.port());
    let proxied = format!("postgres://hush@127.0.0.1:{}/cut", proxy.port);
    let mut s = PostgresStore::connect(&proxied).unwrap();
    s.add_initial_version(&check::version(0), 1).unwrap();
    let observer = || PostgresStore::connect(&direct).unwrap();

    // A round's opening: lost before the COMMIT, reported failed and absent (the engine
    // opens it again); lost after, reported opened, with its cohort.
    proxy.arm(Cut::BeforeCommit);
    let err = s
        .open_round(&check::round(1), &[1, 2])
        .unwrap_err()
        .to_string();
    assert!(err.contains("was not committed"), "{err}");
    assert!(observer().rounds().unwrap().is_empty());
    proxy.arm(Cut::AnswerToCommit);
    let before = proxy.connections();
    s.open_round(&check::round(1), &[1, 2]).unwrap();
    assert_eq!(
        proxy.connections(),
        before + 1,
        "cut, and asked on a new connection"
    );
    assert_eq!(observer().cohort(1).unwrap(), vec![1, 2]);

    // An accepted report: lost before the server saw its COMMIT it is reported failed
    // (the device retries); lost after, it is reported recorded (the engine adds the
    // update, and the device's retry is then a duplicate).
    let report = |key: &str| ReportRow {
        round: 1,
        device: 1,
        idempotency_key: Some(key.into()),
        accepted: true,
        reason: None,
        bytes: 10,
    };
    proxy.arm(Cut::BeforeCommit);
    let err = s.record_report(&report("1:a"), 5).unwrap_err().to_string();
    assert!(err.contains("was not committed"), "{err}");
    assert_eq!(observer().accepted_key("1:a").unwrap(), None);
    proxy.arm(Cut::AnswerToCommit);
    let before = proxy.connections();
    s.record_report(&report("1:b"), 5).unwrap();
    assert_eq!(
        proxy.connections(),
        before + 1,
        "cut, and asked on a new connection"
    );
    assert_eq!(observer().accepted_key("1:b").unwrap(), Some(1));

    // The COMMIT never reaches the server: the release is reported failed, and nothing of
    // it is in the database.
    proxy.arm(Cut::BeforeCommit);
    let err = s
        .commit_release(&check::commit(1, check::version(1)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("was not committed"), "{err}");
    let o = observer();
    assert!(o.records().unwrap().is_empty());
    assert_eq!(o.rounds().unwrap()[0].state, RoundState::Open);
    assert_eq!(o.model_versions().unwrap().len(), 1);

    // The server commits but its answer is lost: the store finds the release committed
    // and returns the ledger record it wrote (the host keeps its files, spends its ε once).
    proxy.arm(Cut::AnswerToCommit);
    let before = proxy.connections();
    let record = s
        .commit_release(&check::commit(1, check::version(1)))
        .unwrap()
        .unwrap();
    assert_eq!(
        proxy.connections(),
        before + 1,
        "cut, and asked on a new connection"
    );
    let o = observer();
    assert_eq!(o.records().unwrap(), vec![record]);
    assert_eq!(o.rounds().unwrap()[0].state, RoundState::Released);
    assert_eq!(
        o.model_versions().unwrap(),
        vec![check::version(0), check::version(1)]
    );
    // The reconnected store works.
    assert_eq!(s.rounds().unwrap().len(), 1);
}

#[test]
fn replicas_share_a_round_through_partial_sums_and_one_coordinator() {
    let Some(mut c) = cluster("replicas_share_a_round_through_partial_sums_and_one_coordinator")
    else {
        return;
    };
    let url = c.create_database("shared").unwrap();
    let mut a = PostgresStore::connect_as_replica(&url).unwrap();
    let b = PostgresStore::connect_as_replica(&url).unwrap();
    assert!(PostgresStore::connect(&url)
        .unwrap()
        .shared_rounds()
        .is_none());
    let (sa, sb) = (a.shared_rounds().unwrap(), b.shared_rounds().unwrap());
    assert_ne!(sa.replica(), sb.replica());

    // One coordinator at a time; the other's coordinator writes are refused.
    assert!(sa.coordinate().unwrap());
    assert!(!sb.coordinate().unwrap());
    assert!(sa.coordinate().unwrap(), "asking again keeps it");
    let initial = sa
        .publish_initial(
            &check::version(0),
            &[("model.json".into(), b"{}".to_vec())],
            1,
        )
        .unwrap();
    assert_eq!(initial.digest, check::version(0).digest);
    // A second replica publishing v0 finds the first one's (a different digest is told).
    let mut other = check::version(0);
    other.digest = "other".into();
    assert_eq!(
        sb.publish_initial(&other, &[], 2).unwrap().digest,
        initial.digest
    );
    assert_eq!(
        sb.model_files(0).unwrap(),
        vec![("model.json".into(), b"{}".to_vec())]
    );
    a.open_round(&check::round(1), &[1, 2, 3]).unwrap();
    let mut refused = PostgresStore::connect_as_replica(&url).unwrap();
    let err = refused
        .open_round(&check::round(2), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("not the coordinator"), "{err}");
    let (sa, sb) = (a.shared_rounds().unwrap(), b.shared_rounds().unwrap());
    assert_eq!(sb.current_round().unwrap().unwrap().id, 1);
    let db_now = sb.db_now_ms().unwrap();
    assert!(db_now > 1_700_000_000_000, "{db_now}");

    // Uploads to either replica: each adds into its own partial sum; a key is counted
    // once, a device once, wherever they land.
    let report = |device: u64, key: &str| ReportRow {
        round: 1,
        device,
        idempotency_key: Some(key.into()),
        accepted: true,
        reason: None,
        bytes: 10,
    };
    let partial =
        |s: &dyn hush_fl::store::SharedRounds, accepted: u64, v: i64| hush_fl::store::PartialSum {
            replica: s.replica().into(),
            accepted,
            rejected: 0,
            sum: v.to_le_bytes().to_vec(),
        };
    use hush_fl::store::Added;
    let add = |s: &dyn hush_fl::store::SharedRounds, reports: &[ReportRow], v: i64| {
        let mut seen = Vec::new();
        let outcomes = s
            .add_to_partial(
                reports,
                &mut |o: &[Added]| {
                    seen = o.to_vec();
                    partial(
                        s,
                        o.iter().filter(|o| **o == Added::Counted).count() as u64,
                        v,
                    )
                },
                3,
            )
            .unwrap();
        (outcomes, seen)
    };
    // One transaction of two uploads at A; the partial sum is asked for once, knowing both
    // were recorded.
    let (o, seen) = add(sa, &[report(1, "k1"), report(3, "k3")], 5);
    assert_eq!(o, vec![Added::Counted, Added::Counted]);
    assert_eq!(seen, o);
    // At B: a new device counts; A's key, and device 1 under another key, do not.
    let (o, _) = add(
        sb,
        &[report(2, "k2"), report(1, "k1"), report(1, "k1-again")],
        7,
    );
    assert_eq!(
        o,
        vec![Added::Counted, Added::Duplicate, Added::AlreadyReported]
    );
    // Nothing recorded: the partial sum is not asked for, nor written.
    let (o, seen) = add(sb, &[report(3, "k3")], 99);
    assert_eq!((o, seen), (vec![Added::Duplicate], vec![]));
    assert!(sb.has_reported(1, 2).unwrap() && !sb.has_reported(1, 4).unwrap());
    assert_eq!(sa.reported(1).unwrap(), 3);
    let sums = sa.partial_sums(1).unwrap();
    assert_eq!(sums.len(), 2);
    let total: i64 = sums
        .iter()
        .map(|p| i64::from_le_bytes(p.sum[..8].try_into().unwrap()))
        .sum();
    assert_eq!(total, 12, "the refused uploads changed no partial sum");
    let mut other_round = report(4, "k4");
    other_round.round = 2;
    assert!(sb
        .add_to_partial(&[report(4, "k5"), other_round], &mut |_| unreachable!(), 3)
        .is_err());

    // The close ends uploads; a later one is told the round is closed and writes nothing.
    assert!(sb.begin_close(1).is_err(), "only the coordinator closes");
    assert!(sa.begin_close(1).unwrap());
    assert_eq!(
        sa.current_round().unwrap().unwrap().state,
        RoundState::Closing
    );
    assert_eq!(add(sb, &[report(4, "k4")], 99).0, vec![Added::Closed]);
    assert_eq!(sa.partial_sums(1).unwrap(), sums);

    // A restart ends the coordinator's session and its lock: the next replica to ask
    // takes it, and the old coordinator's release is refused.
    c.stop().unwrap();
    c.start_again().unwrap();
    let taken = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        b.shared_rounds().unwrap().coordinate().unwrap_or(false)
    });
    assert!(taken, "the lock outlived the restart");
    assert!(!a.shared_rounds().unwrap().coordinate().unwrap());
    let err = a
        .commit_release(&check::commit(1, check::version(1)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not the coordinator"), "{err}");
    let mut b = b;
    let mut release = check::commit(1, check::version(1));
    release.files = vec![("model.json".into(), b"[1]".to_vec())];
    b.commit_release(&release).unwrap();
    assert_eq!(a.model_files(1).unwrap(), release.files);
    assert!(a
        .shared_rounds()
        .unwrap()
        .current_round()
        .unwrap()
        .is_none());
    assert_eq!(a.records().unwrap().len(), 1);
}
