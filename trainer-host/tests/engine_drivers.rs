//! One round engine, two drivers: the same seed and the same device inputs give the same
//! released models and the same ledger whether the engine is driven in process (a
//! manual clock, devices in id order) or through the HTTP server (devices on loopback,
//! checking in and uploading in the reverse order), and whether the store is SQLite or
//! PostgreSQL. Cohort draws are keyed per device and the sum is order-free, so arrival
//! order changes nothing.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use burn::tensor::Device;
use hush_device::client::HostClient;
use hush_device::protocol::{encode_update, Assignment, CheckInRequest, TrainTask, Update};
use hush_host::fl::aggregate::ReceivedUpdate;
use hush_host::fl::store::Store;
use hush_host::fl::{Clock, FlConfig, ManualClock, RoundEngine, RoundLog};
use hush_host::ledger::{LedgerStore, ReleaseRecord};
use hush_host::server::start_host;
use hush_host::store::postgres_cluster::start_for_test;
use hush_host::store::{SqliteStore, DB_FILE};
use hush_models::arch::is_trainable;
use hush_models::checkpoint::NamedTensor;
use hush_models::package::{load_package, WEIGHTS};

const DEVICES: u64 = 6;

fn config(model: &Path, data: &Path) -> FlConfig {
    let mut c = FlConfig::with_model(model, data);
    c.server.store = None;
    c.server.listen = "127.0.0.1:0".into();
    c.server.tick_ms = 20;
    c.rounds.rounds = 3;
    c.rounds.sampling_rate = 0.5;
    c.rounds.min_devices = DEVICES;
    c.rounds.min_reports = 1;
    c.rounds.deadline_secs = 600.0;
    c.dp.noise_multiplier = 0.8;
    c.dp.clip = 1.0;
    c.budget.epsilon = 1000.0;
    c.seed = Some(21);
    // The drivers poll every few milliseconds while replicas catch up with a round.
    c.limits.checkin_per_device_per_second = 1000.0;
    c
}

fn layout(model_dir: &Path) -> Vec<NamedTensor> {
    let (_, m) = load_package(model_dir, &Device::flex()).unwrap();
    m.named_tensors()
        .unwrap()
        .into_iter()
        .filter(|t| is_trainable(&t.name))
        .collect()
}

/// Device `d`'s update in a round: a value that differs by device and round, so that a
/// sum in another order would round differently in floating point.
fn device_update(layout: &[NamedTensor], task: &TrainTask, device: u64) -> Update {
    let v = 1e-3 * (device as f32 * 0.37 + task.round as f32 * 0.11).sin() + 1e-9;
    common::update(layout, task, device, v)
}

/// `update` as the engine receives it from an in-process driver.
fn received<S: Store, C: Clock>(engine: &RoundEngine<S, C>, update: Update) -> ReceivedUpdate {
    let body = encode_update(&update).unwrap();
    engine.validator().received(body.into()).unwrap()
}

/// What a run released: each version's weights file, the ledger (without times) and the
/// round log.
#[derive(Debug, PartialEq)]
struct Released {
    weights: Vec<Vec<u8>>,
    ledger: Vec<(String, f64, Option<f64>, Option<f64>)>,
    rounds: Vec<RoundLog>,
}

fn released(data: &Path, store_url: Option<&str>, rounds: Vec<RoundLog>) -> Released {
    let store = hush_host::store::open(data, store_url).unwrap();
    let weights = store
        .model_versions()
        .unwrap()
        .iter()
        .map(|v| {
            let p: PathBuf = data.join(format!("models/v{}", v.version)).join(WEIGHTS);
            std::fs::read(p).unwrap()
        })
        .collect();
    let ledger = store
        .records()
        .unwrap()
        .into_iter()
        .map(|r: ReleaseRecord| {
            (
                r.release.released,
                r.release.event.noise_multiplier,
                r.epsilon_rdp,
                r.epsilon_pld,
            )
        })
        .collect();
    Released {
        weights,
        ledger,
        rounds,
    }
}

fn in_process(model: &Path, data: &Path) -> Released {
    std::fs::create_dir_all(data).unwrap();
    let store = SqliteStore::open(&data.join(DB_FILE)).unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut engine = RoundEngine::open(config(model, data), store, clock.clone()).unwrap();
    let enrolment = engine
        .issue_enrolment("fleet", DEVICES, Duration::from_secs(3600))
        .unwrap()
        .token;
    for d in 1..=DEVICES {
        let r = engine.register(&format!("d{d}"), &enrolment).unwrap();
        assert_eq!(r.unwrap().device_id, d);
    }
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    for _ in 0..50 {
        if engine.finished().is_some() {
            break;
        }
        let lay = layout(&engine.latest_model().1);
        let mut tasks = Vec::new();
        for d in 1..=DEVICES {
            if let Assignment::Train(t) = engine.check_in(d, &req).unwrap() {
                tasks.push((d, t));
            }
        }
        for (d, t) in tasks {
            let checked = received(&engine, device_update(&lay, &t, d));
            engine.accept(d, t.round, checked).unwrap().unwrap();
        }
        clock.advance(1_000);
    }
    let log = engine.round_log().unwrap();
    drop(engine);
    released(data, None, log)
}

/// The fleet, enrolled with one token and registered over HTTP: devices 1..=DEVICES and
/// their clients.
fn register_fleet(host: &hush_host::server::HostHandle) -> Vec<(u64, HostClient)> {
    let anon = HostClient::new(&host.url(), Duration::from_secs(10)).unwrap();
    let enrolment = host
        .enrol("fleet", DEVICES, Duration::from_secs(3600))
        .unwrap();
    (1..=DEVICES)
        .map(|d| {
            let r = anon.register(&format!("d{d}"), &enrolment).unwrap();
            assert_eq!(r.device_id, d);
            (d, anon.clone().with_token(&r.token))
        })
        .collect()
}

/// What the round log says of each round: id, realized cohort, accepted reports, state.
fn shape(r: &[RoundLog]) -> Vec<(u64, u64, u64, String)> {
    r.iter()
        .map(|l| {
            (
                l.round,
                l.realized_cohort,
                l.reports_accepted,
                format!("{:?}", l.state),
            )
        })
        .collect()
}

/// The HTTP server on `store_url`'s PostgreSQL database, or SQLite without one.
fn over_http(model: &Path, data: &Path, store_url: Option<&str>) -> Released {
    replicas_over_http(model, data, store_url, 1)
}

/// `replicas` servers on `store_url`'s database (replica `i > 0` in `<data>-<i>`), and the
/// fleet: device `d` registers with, checks in at and uploads to replica `d % replicas`.
fn start_replicas(
    model: &Path,
    data: &Path,
    store_url: Option<&str>,
    replicas: usize,
) -> (Vec<hush_host::server::HostHandle>, Vec<(u64, HostClient)>) {
    let hosts: Vec<_> = (0..replicas)
        .map(|i| {
            let dir = match i {
                0 => data.to_path_buf(),
                i => PathBuf::from(format!("{}-{i}", data.display())),
            };
            let mut cfg = config(model, &dir);
            cfg.server.store = store_url.map(String::from);
            start_host(cfg).unwrap()
        })
        .collect();
    if replicas == 1 {
        let fleet = register_fleet(&hosts[0]);
        return (hosts, fleet);
    }
    let enrolment = hosts[0]
        .enrol("fleet", DEVICES, Duration::from_secs(3600))
        .unwrap();
    let mut fleet: Vec<(u64, HostClient)> = (1..=DEVICES)
        .map(|d| {
            let host = &hosts[d as usize % replicas];
            let anon = HostClient::new(&host.url(), Duration::from_secs(10)).unwrap();
            let r = anon.register(&format!("d{d}"), &enrolment).unwrap();
            (r.device_id, anon.with_token(&r.token))
        })
        .collect();
    fleet.sort_by_key(|(d, _)| *d);
    assert_eq!(
        fleet.iter().map(|(d, _)| *d).collect::<Vec<_>>(),
        (1..=DEVICES).collect::<Vec<_>>()
    );
    (hosts, fleet)
}

/// [`start_replicas`], run until every replica says training is finished.
fn replicas_over_http(
    model: &Path,
    data: &Path,
    store_url: Option<&str>,
    replicas: usize,
) -> Released {
    let (hosts, clients) = start_replicas(model, data, store_url, replicas);
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    for _ in 0..500 {
        if hosts.iter().all(|h| h.is_finished()) {
            break;
        }
        let lay = layout(&hosts[0].latest_model().1);
        let mut tasks = Vec::new();
        for (d, c) in clients.iter().rev() {
            if let Assignment::Train(t) = c.check_in(&req).unwrap() {
                tasks.push((*d, c, t));
            }
        }
        if tasks.is_empty() {
            // Replicas learn of a release at their next tick.
            std::thread::sleep(Duration::from_millis(20));
        }
        for (d, c, t) in tasks {
            let body = encode_update(&device_update(&lay, &t, d)).unwrap();
            c.upload(t.round, &body).unwrap();
        }
    }
    assert!(hosts.iter().all(|h| h.is_finished()), "the run finished");
    let log = hosts[0].round_log().unwrap();
    for host in hosts {
        host.shutdown().unwrap();
    }
    released(data, store_url, log)
}

#[test]
fn the_same_seed_and_inputs_release_the_same_models_and_ledger_through_either_driver() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let a = in_process(&model, &tmp.path().join("in-process"));
    let b = over_http(&model, &tmp.path().join("http"), None);
    assert_eq!(a.ledger.len(), 3, "three releases: {:?}", a.rounds);
    assert_eq!(a.weights.len(), 4, "v0..v3");
    assert!(
        a.weights.windows(2).all(|w| w[0] != w[1]),
        "every release changed the model"
    );
    assert_eq!(a.ledger, b.ledger);
    assert_eq!(a.weights, b.weights, "bit-identical model versions");
    assert_eq!(shape(&a.rounds), shape(&b.rounds));
}

/// The server on PostgreSQL (`server.store`) releases what the in-process engine on SQLite
/// releases, bit for bit, and keeps nothing in a SQLite file.
#[test]
fn the_same_seed_and_inputs_release_the_same_models_and_ledger_on_postgresql() {
    let test = "the_same_seed_and_inputs_release_the_same_models_and_ledger_on_postgresql";
    let Some(cluster) = start_for_test(test) else {
        return;
    };
    let url = cluster.create_database("host").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let a = in_process(&model, &tmp.path().join("in-process"));
    let data = tmp.path().join("http-postgres");
    let c = over_http(&model, &data, Some(&url));
    assert_eq!(a.ledger.len(), 3, "three releases: {:?}", a.rounds);
    assert_eq!(a.ledger, c.ledger, "the ledger, read back from PostgreSQL");
    assert_eq!(a.weights, c.weights, "bit-identical model versions");
    assert_eq!(
        a.rounds
            .iter()
            .map(|l| l.realized_cohort)
            .collect::<Vec<_>>(),
        c.rounds
            .iter()
            .map(|l| l.realized_cohort)
            .collect::<Vec<_>>()
    );
    assert!(
        !data.join(DB_FILE).exists(),
        "no SQLite store beside PostgreSQL"
    );
}

/// Three replicas on one PostgreSQL database, the fleet spread over them, release what one
/// host releases on the same seed and the same inputs, bit for bit: each replica adds the
/// updates it receives into its own partial sum on the fixed-point grid, and the
/// coordinator adds the partial sums (integers: the same total however they were split)
/// and the noise once.
#[test]
fn three_replicas_on_postgresql_release_what_one_host_releases() {
    let test = "three_replicas_on_postgresql_release_what_one_host_releases";
    let Some(cluster) = start_for_test(test) else {
        return;
    };
    let url = cluster.create_database("replicas").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let a = in_process(&model, &tmp.path().join("in-process"));
    let r = replicas_over_http(&model, &tmp.path().join("replica"), Some(&url), 3);
    assert_eq!(a.ledger.len(), 3, "three releases: {:?}", a.rounds);
    assert_eq!(a.ledger, r.ledger, "one ledger record per round");
    assert_eq!(a.weights, r.weights, "bit-identical model versions");
    assert_eq!(shape(&a.rounds), shape(&r.rounds));
    // Every replica serves every version: the files came from the database.
    for i in 1..3 {
        let dir = tmp.path().join(format!("replica-{i}/models/v3"));
        assert_eq!(std::fs::read(dir.join(WEIGHTS)).unwrap(), r.weights[3]);
    }
}

/// Calls `f` until it succeeds, as a device's client would: only transient failures are
/// retried (at most 100 times); returns the result and the 503 `store_unavailable` refusals
/// met on the way.
fn retrying<T>(
    mut f: impl FnMut() -> Result<T, hush_device::client::ClientError>,
) -> (T, Vec<hush_device::client::ClientError>) {
    let mut refused = Vec::new();
    for _ in 0..100 {
        match f() {
            Ok(v) => return (v, refused),
            Err(e) if e.is_transient() => {
                refused.push(e);
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("not transient: {e}"),
        }
    }
    panic!("still failing after 100 tries: {:?}", refused.last());
}

/// The server on PostgreSQL keeps its round through a database restart: while the database
/// is down, devices are told 503 `store_unavailable` with `Retry-After` (not a 500), and
/// once it is back the run completes, with one ledger record per released round.
#[test]
fn a_database_restart_mid_round_is_a_503_to_retry_and_the_run_completes() {
    restart_mid_round(
        "a_database_restart_mid_round_is_a_503_to_retry_and_the_run_completes",
        1,
    );
}

/// The same with two replicas, the fleet spread over them: both reconnect, the coordinator
/// lock is taken again (by either), and every round is released once.
#[test]
fn replicas_carry_on_through_a_database_restart_mid_round() {
    restart_mid_round("replicas_carry_on_through_a_database_restart_mid_round", 2);
}

fn restart_mid_round(test: &str, replicas: usize) {
    use hush_device::client::ClientError;
    let Some(mut cluster) = start_for_test(test) else {
        return;
    };
    let url = cluster.create_database("restart").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let data = tmp.path().join("host");
    let (hosts, clients) = start_replicas(&model, &data, Some(&url), replicas);
    let finished = || hosts.iter().all(|h| h.is_finished());
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    let mut restarted = false;
    let mut store_refusals = 0;
    for _ in 0..500 {
        if finished() {
            break;
        }
        let lay = layout(&hosts[0].latest_model().1);
        let mut tasks = Vec::new();
        for (d, c) in &clients {
            let (assignment, refused) = retrying(|| c.check_in(&req));
            store_refusals += refused.len();
            if let Assignment::Train(t) = assignment {
                tasks.push((*d, c, t));
            }
        }
        if tasks.is_empty() {
            // Replicas learn of a release at their next tick.
            std::thread::sleep(Duration::from_millis(20));
        }
        for (k, (d, c, t)) in tasks.iter().enumerate() {
            if k == 1 && !restarted {
                // Mid-round, one update in: the database goes down.
                cluster.stop().unwrap();
                let down = c.check_in(&req).unwrap_err();
                let ClientError::Refused {
                    status,
                    code,
                    retry_after,
                    ..
                } = &down
                else {
                    panic!("{down}");
                };
                assert_eq!(
                    (*status, code.as_str()),
                    (503, "store_unavailable"),
                    "{down}"
                );
                assert!(retry_after.is_some(), "{down}");
                cluster.start_again().unwrap();
                restarted = true;
            }
            let body = encode_update(&device_update(&lay, t, *d)).unwrap();
            let (_, refused) = retrying(|| c.upload(t.round, &body));
            store_refusals += refused.len();
        }
    }
    assert!(restarted, "the restart happened mid-round");
    assert!(finished(), "the run completed");
    let log = hosts[0].round_log().unwrap();
    for host in hosts {
        host.shutdown().unwrap();
    }
    let after = released(&data, Some(&url), log);
    let released_rounds = after
        .rounds
        .iter()
        .filter(|l| l.released_version.is_some())
        .count();
    assert_eq!(released_rounds, 3, "{:?}", after.rounds);
    assert_eq!(
        after.rounds.len(),
        3,
        "no round abandoned: {:?}",
        after.rounds
    );
    assert_eq!(
        after.ledger.len(),
        3,
        "one ledger record per released round"
    );
    assert_eq!(after.weights.len(), 4, "v0..v3");
    eprintln!("{store_refusals} store_unavailable refusals retried after the restart");
}

/// The cohort is drawn and written when the round opens, in one transaction: check-ins
/// only read it (no write per check-in, whatever the fleet's size), and the devices told to
/// train are exactly those `cohort_tasks` hands an in-process driver.
#[test]
fn a_round_draws_and_writes_its_whole_cohort_when_it_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let data = tmp.path().join("host");
    std::fs::create_dir_all(&data).unwrap();
    let store = SqliteStore::open(&data.join(DB_FILE)).unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut engine = RoundEngine::open(config(&model, &data), store, clock).unwrap();
    let enrolment = engine
        .issue_enrolment("fleet", DEVICES, Duration::from_secs(3600))
        .unwrap()
        .token;
    for d in 1..=DEVICES {
        engine
            .register(&format!("d{d}"), &enrolment)
            .unwrap()
            .unwrap();
    }
    let drawn: Vec<u64> = engine
        .cohort_tasks()
        .unwrap()
        .iter()
        .map(|(d, t)| {
            assert_eq!(t.round, 1);
            *d
        })
        .collect();
    assert!(!drawn.is_empty(), "seed 21 draws somebody at q = 0.5");
    // Asked again before anyone reported: the same round, the same devices.
    let again: Vec<u64> = engine.cohort_tasks().unwrap().iter().map(|p| p.0).collect();
    assert_eq!(again, drawn);

    let reader = rusqlite::Connection::open(data.join(DB_FILE)).unwrap();
    let data_version = || -> i64 {
        reader
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .unwrap()
    };
    let before = data_version();
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    let mut told_to_train = Vec::new();
    for d in 1..=DEVICES {
        if let Assignment::Train(t) = engine.check_in(d, &req).unwrap() {
            assert_eq!(t.round, 1);
            told_to_train.push(d);
        }
    }
    assert_eq!(told_to_train, drawn);
    assert_eq!(data_version(), before, "check-ins committed nothing");
    let rows: Vec<(i64, i64)> = reader
        .prepare("SELECT device, selected FROM cohort WHERE round = 1 ORDER BY device")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let expected: Vec<(i64, i64)> = drawn.iter().map(|&d| (d as i64, 1)).collect();
    assert_eq!(rows, expected, "one row per drawn device, written at open");
}

/// A replica engine in process on `url`'s database, with devices 1..=DEVICES registered.
fn replica_with_fleet<C: hush_host::fl::Clock>(
    cfg: FlConfig,
    url: &str,
    clock: C,
) -> RoundEngine<hush_host::store::PostgresStore, C> {
    let store = hush_host::store::PostgresStore::connect_as_replica(url).unwrap();
    let mut engine = RoundEngine::open(cfg, store, clock).unwrap();
    let enrolment = engine
        .issue_enrolment("fleet", DEVICES, Duration::from_secs(3 * 3600))
        .unwrap()
        .token;
    for d in 1..=DEVICES {
        engine
            .register(&format!("d{d}"), &enrolment)
            .unwrap()
            .unwrap();
    }
    engine
}

/// A replica whose clock runs an hour ahead does not close a round early: with several
/// replicas, a round's deadline is set and compared by the database's clock.
#[test]
fn a_replica_with_a_clock_an_hour_ahead_does_not_close_a_round_early() {
    use hush_host::fl::{Clock, SystemClock};
    let test = "a_replica_with_a_clock_an_hour_ahead_does_not_close_a_round_early";
    let Some(cluster) = start_for_test(test) else {
        return;
    };
    let url = cluster.create_database("clock").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let mut cfg = config(&model, &tmp.path().join("ahead"));
    cfg.server.store = Some(url.clone());
    cfg.rounds.sampling_rate = 1.0;
    let hour = 3_600_000;
    let ahead = ManualClock::new(SystemClock.now_ms() + hour);
    let mut engine = replica_with_fleet(cfg, &url, ahead.clone());
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    assert!(matches!(
        engine.check_in(1, &req).unwrap(),
        Assignment::Train(_)
    ));
    // By this replica's clock the 600 s deadline passed long ago; by the database's it
    // has not: the round stays open.
    ahead.advance(hour);
    engine.tick().unwrap();
    let status = engine.status().unwrap();
    assert_eq!(status.open_round, Some(1), "{:?}", engine.round_log());
    let row = &engine.round_log().unwrap()[0];
    assert_eq!(row.state, hush_host::fl::store::RoundState::Open);
    let store = hush_host::store::open(tmp.path(), Some(&url)).unwrap();
    let opened = store.rounds().unwrap()[0].opened_at_ms;
    let now = SystemClock.now_ms();
    assert!(
        opened <= now && now - opened < 60_000,
        "opened at {opened} by the database's clock, not this replica's ({now})"
    );
}

/// A replica commits the uploads queued while it was busy in one transaction (group
/// commit): after one `flush`, the others queued with it are answered without the
/// database — it can be down — and a commit that fails fails every upload in it, each
/// counted once when its device retries.
#[test]
fn a_replica_commits_the_uploads_queued_together_in_one_transaction() {
    use hush_host::fl::engine::Acceptance;
    use hush_host::fl::SystemClock;
    let test = "a_replica_commits_the_uploads_queued_together_in_one_transaction";
    let Some(mut cluster) = start_for_test(test) else {
        return;
    };
    let url = cluster.create_database("group").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let mut cfg = config(&model, &tmp.path().join("replica"));
    cfg.server.store = Some(url.clone());
    cfg.rounds.sampling_rate = 1.0;
    let mut engine = replica_with_fleet(cfg, &url, SystemClock);
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    let lay = layout(&engine.latest_model().1);
    let mut tasks = Vec::new();
    for d in 1..=DEVICES {
        match engine.check_in(d, &req).unwrap() {
            Assignment::Train(t) => tasks.push((d, t)),
            other => panic!("device {d}: {other:?}"),
        }
    }
    type Replica = RoundEngine<hush_host::store::PostgresStore, SystemClock>;
    let deferred = |engine: &mut Replica, d: u64| {
        let t = &tasks[d as usize - 1].1;
        let checked = received(engine, device_update(&lay, t, d));
        engine.accept_deferred(d, t.round, checked).unwrap()
    };
    let ticket = |a: Acceptance| match a {
        Acceptance::Pending(t) => t,
        Acceptance::Done(answer) => panic!("answered at once: {answer:?}"),
    };
    let queued: Vec<u64> = (1..=3).map(|d| ticket(deferred(&mut engine, d))).collect();
    // The same key again while the first is queued: retry later.
    match deferred(&mut engine, 2) {
        Acceptance::Done(Err(rej)) => assert_eq!((rej.status, rej.code), (503, "in_progress")),
        other => panic!("{other:?}"),
    }
    let first = engine.flush(queued[1]).unwrap().unwrap();
    assert!(!first.duplicate);
    // Two more queued; then the database goes down. The first three went in together:
    // answered without it.
    let failing: Vec<u64> = (4..=5).map(|d| ticket(deferred(&mut engine, d))).collect();
    cluster.stop().unwrap();
    for t in [queued[0], queued[2]] {
        let receipt = engine.flush(t).unwrap().unwrap();
        assert!(!receipt.duplicate);
    }
    // The next commit cannot happen: it fails, for both uploads in it.
    for t in failing {
        assert!(engine.flush(t).is_err(), "the commit cannot succeed");
    }
    cluster.start_again().unwrap();
    // The devices retry: counted once each.
    for d in 4..=5 {
        let t = &tasks[d as usize - 1].1;
        let checked = received(&engine, device_update(&lay, t, d));
        let answer = (0..100).find_map(|_| match engine.accept(d, t.round, checked.clone()) {
            Ok(answer) => Some(answer),
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                None
            }
        });
        assert!(!answer.unwrap().unwrap().duplicate);
    }
    let observer = hush_host::store::PostgresStore::connect_as_replica(&url).unwrap();
    let sums = observer.shared_rounds().unwrap().partial_sums(1).unwrap();
    let accepted: u64 = sums.iter().map(|p| p.accepted).sum();
    assert_eq!(accepted, 5, "five devices, each counted once");
}
