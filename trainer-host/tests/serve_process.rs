//! `hush-host serve` as a real process, killed and started again on the same data
//! directory: with SIGKILL in the middle of a round (the open round is abandoned with no ε
//! spent, tokens survive, the next round's release is recorded exactly once), and at every
//! named fault point of a release (the store, the ledger and the model files agree after
//! the restart, and training goes on to the planned number of rounds).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hush_device::client::HostClient;
use hush_device::protocol::{Assignment, CheckInRequest, TrainTask};
use hush_host::fl::fault::{self, FAULT_POINT_ENV, RELEASE_POINTS};
use hush_host::fl::publish::digest;
use hush_host::fl::store::{RoundState, Store};
use hush_host::fl::FlConfig;
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::LedgerStore;
use hush_host::server::OPERATOR_TOKEN_FILE;
use hush_host::store::{SqliteStore, DB_FILE};

struct Serve {
    child: Child,
    url: String,
    config: PathBuf,
    operator: String,
}

impl Serve {
    fn start(config: &Path, port: u16) -> Serve {
        Self::start_with_fault(config, port, None)
    }

    /// Started with `HUSH_FAULT_POINT=<fault>`: it aborts when it reaches that point.
    fn start_with_fault(config: &Path, port: u16, fault: Option<&str>) -> Serve {
        let cmd = Command::new(env!("CARGO_BIN_EXE_hush-host"));
        Self::start_as(cmd, config, port, fault, &[])
    }

    /// Started by `cmd` (the binary itself, or a wrapper such as `prlimit` with the binary
    /// as its argument), with `extra` flags after `serve`'s own.
    fn start_as(
        mut cmd: Command,
        config: &Path,
        port: u16,
        fault: Option<&str>,
        extra: &[&str],
    ) -> Serve {
        cmd.args(["serve", "--config"])
            .arg(config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("RUST_LOG", "warn")
            .env_remove(FAULT_POINT_ENV)
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(config.with_extension("log"))
                    .unwrap(),
            ));
        if let Some(f) = fault {
            cmd.env(FAULT_POINT_ENV, f);
        }
        let mut child = cmd.spawn().unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let token_file = FlConfig::load(config)
            .unwrap()
            .server
            .data_dir
            .join(OPERATOR_TOKEN_FILE);
        let start = Instant::now();
        // Up once the operator token is written and the operator's status answers.
        let operator = loop {
            let token = std::fs::read_to_string(&token_file).unwrap_or_default();
            let token = token.trim();
            let probe = HostClient::new(&url, Duration::from_secs(5))
                .unwrap()
                .with_token(token);
            if !token.is_empty() && probe.status().is_ok() {
                break token.to_string();
            }
            if let Some(status) = child.try_wait().unwrap() {
                let log = std::fs::read_to_string(config.with_extension("log")).unwrap();
                panic!("hush-host serve exited at start ({status}); its log:\n{log}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "hush-host serve did not come up on {url}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Serve {
            child,
            url,
            config: config.to_path_buf(),
            operator,
        }
    }

    /// A client without a token (registration, or a device's once given its token).
    fn anon(&self) -> HostClient {
        HostClient::new(&self.url, Duration::from_secs(10)).unwrap()
    }

    /// The operator's client (`/v1/status`).
    fn client(&self) -> HostClient {
        self.anon().with_token(&self.operator)
    }

    /// `hush-host devices enrol --quota <quota>` on this host's config: the token.
    fn enrol(&self, quota: u64) -> String {
        common::enrol_with_cli(&self.config, quota)
    }

    /// Waits for the process to die by itself (a fault point), and checks it aborted.
    fn wait_for_abort(mut self) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(!status.success(), "the host exited cleanly: {status}");
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the host did not reach its fault point"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, as `systemctl stop` sends it; returns how the process exited.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id();
        let sent = Command::new("sh")
            .args(["-c", &format!("kill -TERM {pid}")])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "hush-host serve did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no shutdown code runs.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn task(client: &HostClient) -> TrainTask {
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    match client.check_in(&req).unwrap() {
        Assignment::Train(t) => t,
        other => panic!("expected a training task, got {other:?}"),
    }
}

fn ledger_len(data: &Path) -> usize {
    SqliteLedgerStore::open(&data.join("hush.sqlite"))
        .unwrap()
        .records()
        .unwrap()
        .len()
}

#[test]
fn serve_killed_mid_round_restarts_with_no_epsilon_lost_or_spent_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let data = tmp.path().join("data");
    let config = tmp.path().join("hush.toml");
    std::fs::write(
        &config,
        format!(
            "seed = 3\n\
             [server]\ndata_dir = {data:?}\ninitial_model = {model:?}\ntick_ms = 20\n\
             [rounds]\nrounds = 1\nsampling_rate = 1.0\nmin_devices = 2\nmin_reports = 2\n\
             deadline_secs = 60.0\n\
             [dp]\nnoise_multiplier = 1.0\nclip = 1.0\n\
             [budget]\nepsilon = 1000.0\ndelta = 1e-5\n"
        ),
    )
    .unwrap();
    let port = common::free_port();

    // Two devices, a round opens, one reports; then the host is killed.
    let host = Serve::start(&config, port);
    let anon = host.anon();
    let enrolment = host.enrol(2);
    let a = anon.register("a", &enrolment).unwrap();
    let b = anon.register("b", &enrolment).unwrap();
    let (ca, cb) = (anon.clone().with_token(&a.token), anon.with_token(&b.token));
    let ta = task(&ca);
    let _ = task(&cb);
    assert_eq!(ta.round, 1);
    ca.upload(
        ta.round,
        &common::small_update_body(&model, &ta, a.device_id),
    )
    .unwrap();
    assert_eq!(host.client().status().unwrap().reports_in_round, 1);
    host.kill();
    assert_eq!(ledger_len(&data), 0, "nothing was released before the kill");

    // Restarted on the same data: round 1 is abandoned, the tokens still work.
    let host = Serve::start(&config, port);
    let (ca, cb) = (
        host.anon().with_token(&a.token),
        host.anon().with_token(&b.token),
    );
    let s = host.client().status().unwrap();
    assert_eq!(
        (s.open_round, s.rounds_done, s.epsilon_rdp),
        (None, 0, Some(0.0)),
        "round 1 abandoned, nothing spent"
    );
    let (ta, tb) = (task(&ca), task(&cb));
    assert_eq!((ta.round, tb.round), (2, 2));
    ca.upload(
        ta.round,
        &common::small_update_body(&model, &ta, a.device_id),
    )
    .unwrap();
    cb.upload(
        tb.round,
        &common::small_update_body(&model, &tb, b.device_id),
    )
    .unwrap();
    let start = Instant::now();
    while host.client().status().unwrap().model_version < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "round 2 never released"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ledger_len(&data), 1, "one release, recorded once");
    let eps = host.client().status().unwrap().epsilon_rdp.unwrap();
    host.kill();

    // A third start reads the same ε back: nothing lost, nothing counted twice.
    let host = Serve::start(&config, port);
    let s = host.client().status().unwrap();
    assert_eq!((s.model_version, s.rounds_done), (1, 1));
    assert_eq!(s.epsilon_rdp, Some(eps));
    assert_eq!(ledger_len(&data), 1);
    host.kill();
}

fn write_config(dir: &Path, model: &Path, data: &Path, rounds: u64) -> std::path::PathBuf {
    write_toml(
        dir,
        model,
        data,
        "",
        &format!("rounds = {rounds}\nmin_devices = 2\nmin_reports = 2\ndeadline_secs = 60.0\n"),
    )
}

/// `dir/hush.toml`: seed 3, full participation, ε budget 1000, with `server` and `rounds`
/// lines added to those sections.
fn write_toml(dir: &Path, model: &Path, data: &Path, server: &str, rounds: &str) -> PathBuf {
    let config = dir.join("hush.toml");
    std::fs::write(
        &config,
        format!(
            "seed = 3\n\
             [server]\ndata_dir = {data:?}\ninitial_model = {model:?}\ntick_ms = 20\n{server}\
             [rounds]\nsampling_rate = 1.0\n{rounds}\
             [dp]\nnoise_multiplier = 1.0\nclip = 1.0\n\
             [budget]\nepsilon = 1000.0\ndelta = 1e-5\n"
        ),
    )
    .unwrap();
    config
}

/// The store, the ledger and the model files agree: one ledger record per released round
/// and none for any other, model versions 0..=N contiguous with one per released round,
/// each version's files present and matching the digest committed with it, and nothing
/// left staged. Returns the number of released rounds.
fn assert_consistent(data: &Path, when: &str) -> u64 {
    let store = SqliteStore::open(&data.join(DB_FILE)).unwrap();
    let rounds = store.rounds().unwrap();
    let released: Vec<u64> = rounds
        .iter()
        .filter(|r| r.state == RoundState::Released)
        .map(|r| r.id)
        .collect();
    assert!(
        rounds
            .iter()
            .all(|r| matches!(r.state, RoundState::Released | RoundState::Abandoned)),
        "{when}: every round closed: {rounds:?}"
    );
    let recorded: Vec<u64> = store
        .records()
        .unwrap()
        .iter()
        .map(|r| {
            let id = r.release.released.split(':').next().unwrap();
            id.trim_start_matches("federated round ").parse().unwrap()
        })
        .collect();
    assert_eq!(
        recorded, released,
        "{when}: ε recorded exactly for the released rounds"
    );
    let versions = store.model_versions().unwrap();
    let numbers: Vec<u64> = versions.iter().map(|v| v.version).collect();
    let expected: Vec<u64> = (0..=released.len() as u64).collect();
    assert_eq!(numbers, expected, "{when}: model versions contiguous");
    for v in &versions {
        let dir = data.join("models").join(format!("v{}", v.version));
        assert_eq!(
            digest(&dir).unwrap(),
            v.digest,
            "{when}: v{} files",
            v.version
        );
        if let Some(round) = v.round {
            assert!(
                released.contains(&round),
                "{when}: v{} from round {round}",
                v.version
            );
        }
    }
    let staging = data.join("models").join(".staging");
    let left = std::fs::read_dir(&staging).map_or(0, |d| d.count());
    assert_eq!(left, 0, "{when}: nothing left staged");
    released.len() as u64
}

/// Registers devices `a` and `b`: their ids and tokens.
fn register_two(host: &Serve) -> Vec<(u64, String)> {
    let anon = host.anon();
    let enrolment = host.enrol(2);
    ["a", "b"]
        .iter()
        .map(|l| {
            let r = anon.register(l, &enrolment).unwrap();
            (r.device_id, r.token)
        })
        .collect()
}

/// Every device checks in for its task, then uploads a small update: one round's worth of
/// uploads, each upload's result (an upload may fail when the host dies at a fault point).
fn run_round(host: &Serve, model: &Path, devices: &[(u64, String)]) -> Vec<Result<(), String>> {
    let clients: Vec<HostClient> = devices
        .iter()
        .map(|(_, t)| host.anon().with_token(t))
        .collect();
    let tasks: Vec<TrainTask> = clients.iter().map(task).collect();
    clients
        .iter()
        .zip(&tasks)
        .zip(devices)
        .map(|((c, t), (id, _))| {
            c.upload(t.round, &common::small_update_body(model, t, *id))
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .collect()
}

#[test]
fn a_release_killed_at_any_fault_point_is_finished_or_undone_on_restart() {
    assert!(
        fault::enabled(),
        "the tests build hush-host with the fault-points feature"
    );
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    for point in RELEASE_POINTS {
        let dir = tmp.path().join(point);
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        let config = write_config(&dir, &model, &data, 2);
        let port = common::free_port();

        // Round 1 with the fault armed: the second upload closes the round, the release
        // starts, and the process aborts at `point`.
        let host = Serve::start_with_fault(&config, port, Some(point));
        let devices = register_two(&host);
        let uploads = run_round(&host, &model, &devices);
        assert!(uploads[0].is_ok(), "{point}: {:?}", uploads[0]);
        host.wait_for_abort();

        // Restarted without the fault: recovery leaves everything consistent.
        let host = Serve::start(&config, port);
        let released = assert_consistent(&data, &format!("{point}, after restart"));
        let committed = point == fault::RELEASE_AFTER_COMMIT || point == fault::RELEASE_DONE;
        assert_eq!(
            released,
            u64::from(committed),
            "{point}: released before the crash"
        );
        let status = host.client().status().unwrap();
        assert_eq!(status.model_version, released, "{point}: the visible model");
        assert_eq!(status.rounds_done, released, "{point}");

        // The old tokens carry on until the planned two rounds are released.
        let mut tries = 0;
        while !host.client().status().unwrap().finished {
            tries += 1;
            assert!(tries <= 3, "{point}: training did not finish");
            let uploads = run_round(&host, &model, &devices);
            assert!(uploads.iter().all(Result::is_ok), "{point}: {uploads:?}");
            let start = Instant::now();
            while host.client().status().unwrap().open_round.is_some() {
                assert!(
                    start.elapsed() < Duration::from_secs(60),
                    "{point}: round stuck"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let status = host.client().status().unwrap();
        assert_eq!(
            (status.rounds_done, status.model_version),
            (2, 2),
            "{point}: rounds = planned"
        );
        host.kill();
        assert_eq!(assert_consistent(&data, &format!("{point}, at the end")), 2);
    }
}

/// `cargo build -p hush-host` (what the README and releases build) resolves `hush-fl`
/// without its `fault-points` feature; only the test build (dev-dependencies) has it.
#[test]
fn fault_points_are_absent_from_the_default_build() {
    // The test build has it, so the check can fail.
    assert_eq!(
        common::feature_in_builds("hush-fl", "fault-points"),
        (false, true)
    );
}

/// SIGTERM during an open round and when idle: `hush-host serve` exits 0 both times, and the
/// restart is consistent (the open round abandoned with no ε, the tokens accepted, the next
/// round released and recorded once).
#[test]
fn sigterm_stops_serve_with_exit_0_and_the_restart_carries_on() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let data = tmp.path().join("data");
    let config = write_config(tmp.path(), &model, &data, 1);
    let port = common::free_port();

    let host = Serve::start(&config, port);
    let devices = register_two(&host);
    // Round 1 open, one of two updates in: then SIGTERM.
    let a = host.anon().with_token(&devices[0].1);
    let t = task(&a);
    let _ = task(&host.anon().with_token(&devices[1].1));
    a.upload(
        t.round,
        &common::small_update_body(&model, &t, devices[0].0),
    )
    .unwrap();
    let status = host.terminate();
    assert_eq!(status.code(), Some(0), "SIGTERM mid-round: {status}");

    // Restarted: round 1 abandoned, the old tokens carry on and round 2 releases.
    let host = Serve::start(&config, port);
    assert_eq!(assert_consistent(&data, "after SIGTERM mid-round"), 0);
    let s = host.client().status().unwrap();
    assert_eq!((s.open_round, s.rounds_done), (None, 0));
    let uploads = run_round(&host, &model, &devices);
    assert!(uploads.iter().all(Result::is_ok), "{uploads:?}");
    let start = Instant::now();
    while !host.client().status().unwrap().finished {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "round 2 never released"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = host.terminate();
    assert_eq!(status.code(), Some(0), "SIGTERM idle: {status}");
    assert_eq!(assert_consistent(&data, "after SIGTERM idle"), 1);
    assert_eq!(ledger_len(&data), 1);
}

/// SIGTERM while a release is in progress (the host paused at the fault point between
/// staging the files and the commit): the release finishes, the upload that closed the
/// round gets its answer, the process exits 0, and the restart finds one consistent
/// release.
#[test]
fn sigterm_during_a_release_lets_it_finish_and_exits_0() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let data = tmp.path().join("data");
    let config = write_config(tmp.path(), &model, &data, 2);
    let port = common::free_port();
    let pause = format!("{}:pause=2000", fault::RELEASE_BEFORE_COMMIT);
    let host = Serve::start_with_fault(&config, port, Some(&pause));
    let devices = register_two(&host);
    let clients: Vec<HostClient> = devices
        .iter()
        .map(|(_, t)| host.anon().with_token(t))
        .collect();
    let tasks: Vec<TrainTask> = clients.iter().map(task).collect();
    clients[0]
        .upload(
            tasks[0].round,
            &common::small_update_body(&model, &tasks[0], devices[0].0),
        )
        .unwrap();
    // The second upload closes the round and starts the release, which pauses.
    let last = {
        let (c, t, body) = (
            clients[1].clone(),
            tasks[1].clone(),
            common::small_update_body(&model, &tasks[1], devices[1].0),
        );
        std::thread::spawn(move || c.upload(t.round, &body))
    };
    let log = config.with_extension("log");
    let start = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("pausing")
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the release never reached its pause"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = host.terminate();
    assert_eq!(status.code(), Some(0), "SIGTERM during a release: {status}");
    let receipt = last.join().unwrap();
    assert!(
        receipt.is_ok(),
        "the in-flight upload was answered: {receipt:?}"
    );
    assert_eq!(assert_consistent(&data, "after SIGTERM in a release"), 1);
    assert_eq!(ledger_len(&data), 1);

    // The restart carries on to the planned two rounds with the same tokens.
    let host = Serve::start(&config, port);
    let uploads = run_round(&host, &model, &devices);
    assert!(uploads.iter().all(Result::is_ok), "{uploads:?}");
    let start = Instant::now();
    while !host.client().status().unwrap().finished {
        assert!(start.elapsed() < Duration::from_secs(60), "round 2 stuck");
        std::thread::sleep(Duration::from_millis(20));
    }
    host.kill();
    assert_eq!(assert_consistent(&data, "at the end"), 2);
}

/// Raises this test process's soft open-file limit to `want`, or to its hard limit if that
/// is lower but still at least `need` (it opens more sockets than the usual 1 024 soft
/// limit allows).
fn raise_own_open_file_limit(want: u64, need: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed to them.
    #[allow(unsafe_code)]
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            assert!(
                lim.rlim_max >= need,
                "this test needs an open-file hard limit of at least {need}; it is {}",
                lim.rlim_max
            );
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

/// The host in its own process with an open-file limit of 1 024: 1 100 idle connections
/// (more than it can hold) do not keep a device from registering and checking in — the
/// oldest idle ones are evicted to make room. Counted by the host's own metrics.
#[test]
fn eleven_hundred_idle_connections_under_a_1024_file_limit_do_not_keep_a_device_out() {
    raise_own_open_file_limit(4096, 1300);
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let data = tmp.path().join("data");
    let config = write_config(tmp.path(), &model, &data, 1);
    let port = common::free_port();
    let mut prlimit = Command::new("prlimit");
    prlimit
        .args(["--nofile=1024:1024", "--"])
        .arg(env!("CARGO_BIN_EXE_hush-host"));
    let host = Serve::start_as(prlimit, &config, port, None, &[]);
    let enrolment = host.enrol(2);

    let idle: Vec<std::net::TcpStream> = (0..1100)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let started = Instant::now();
    let anon = HostClient::new(&host.url, Duration::from_secs(30)).unwrap();
    let a = anon.register("a", &enrolment).unwrap();
    let a = anon.with_token(&a.token);
    let assignment = a
        .check_in(&CheckInRequest {
            model_version: None,
            examples: 1,
        })
        .unwrap();
    let took = started.elapsed();
    assert!(
        matches!(assignment, Assignment::Train(_) | Assignment::Wait { .. }),
        "{assignment:?}"
    );
    eprintln!("register + check-in beside 1 100 idle connections: {took:?}");
    let metrics = ureq::Agent::new_with_defaults()
        .get(format!("{}/metrics", host.url))
        .header("Authorization", format!("Bearer {}", host.operator))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let evicted = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hush_connections_closed_total{reason=\"evicted\"} "))
        .map_or(0.0, |v| v.parse::<f64>().unwrap());
    assert!(evicted >= 1.0, "no idle connection was evicted:\n{metrics}");
    drop(idle);
    host.kill();
}

/// `serve --log-format json`: every log line is one JSON object with a level and a message.
#[test]
fn json_logs_are_one_object_per_line() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    let data = tmp.path().join("data");
    let config = write_config(tmp.path(), &model, &data, 1);
    let cmd = Command::new(env!("CARGO_BIN_EXE_hush-host"));
    let host = Serve::start_as(
        cmd,
        &config,
        common::free_port(),
        None,
        &["--log-format", "json"],
    );
    // A refused registration is logged as a warning (the level these tests log at).
    assert!(host.anon().register("x", "hush-enrol-forged").is_err());
    assert_eq!(host.terminate().code(), Some(0));
    let log = std::fs::read_to_string(config.with_extension("log")).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "the host logged nothing");
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON object: {line:?}: {e}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{v}"
        );
    }
    assert!(log.contains("registration refused"), "{log}");
}

/// The device's task once its replica knows of the round (a replica catches up with the
/// others at most once a tick, and tells a device to wait until then).
fn task_from_replica(client: &HostClient) -> TrainTask {
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    let start = Instant::now();
    loop {
        match client.check_in(&req).unwrap() {
            Assignment::Train(t) => return t,
            Assignment::Wait { .. } => {
                assert!(start.elapsed() < Duration::from_secs(60), "no task");
                std::thread::sleep(Duration::from_millis(20));
            }
            other => panic!("expected a training task, got {other:?}"),
        }
    }
}

/// A replica's `hush.toml` in `dir`: its own data directory, the shared database.
fn write_replica_config(dir: &Path, model: &Path, store: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    write_toml(
        dir,
        model,
        &dir.join("data"),
        &format!("store = {store:?}\n"),
        "rounds = 2\nmin_devices = 4\nmin_reports = 1\ndeadline_secs = 120.0\n",
    )
}

/// Device `token`'s client at the replica `url`.
fn device_at(url: &str, token: &str) -> HostClient {
    HostClient::new(url, Duration::from_secs(10))
        .unwrap()
        .with_token(token)
}

/// Uploads as a device given the replicas' URLs (`--server URL,URL,…`): its client skips
/// a replica that is down.
fn upload_anywhere(urls: &[&str], token: &str, round: u64, body: &[u8]) {
    device_at(&urls.join(","), token)
        .upload(round, body)
        .unwrap_or_else(|e| panic!("upload to {urls:?}: {e}"));
}

/// Waits until the replica's status shows `rounds` released.
fn wait_for_rounds(host: &Serve, rounds: u64, when: &str) {
    let start = Instant::now();
    while host.client().status().unwrap().rounds_done < rounds {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{when}: round {rounds} was not released"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Three `serve` replicas on one PostgreSQL database. Round 1: a replica is killed after
/// accepting an update (its device's retry lands elsewhere as a duplicate, nothing is
/// lost: the update is in its partial sum in the database), and the coordinator dies at a
/// named point of the release; the last replica takes the coordinator's lock and finishes
/// the release from the partial sums, or finds it committed. Round 2 runs on the replicas
/// left (one started again). At every fault point: one ledger record per released round,
/// each round's accepted updates counted once, every version's files on every live
/// replica matching the digest its release committed.
#[test]
fn replicas_killed_mid_round_and_mid_release_count_every_update_once() {
    use hush_host::fl::store::SharedRounds as _;
    let test = "replicas_killed_mid_round_and_mid_release_count_every_update_once";
    let Some(cluster) = hush_host::store::postgres_cluster::start_for_test(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let model = common::tiny_package(tmp.path());
    for (i, point) in RELEASE_POINTS.iter().enumerate() {
        let url = cluster.create_database(&format!("faults{i}")).unwrap();
        let dir = tmp.path().join(point);
        let [ca, cb, cc] =
            ["a", "b", "c"].map(|r| write_replica_config(&dir.join(r), &model, &url));
        let (pa, pb, pc) = (
            common::free_port(),
            common::free_port(),
            common::free_port(),
        );
        let a = Serve::start_with_fault(&ca, pa, Some(point));
        let b = Serve::start(&cb, pb);
        let c = Serve::start(&cc, pc);
        let (ua, ub, uc) = (a.url.clone(), b.url.clone(), c.url.clone());
        let enrolment = a.enrol(4);
        let tokens: Vec<String> = (1..=4)
            .map(|d| {
                let r = a.anon().register(&format!("d{d}"), &enrolment).unwrap();
                assert_eq!(r.device_id, d);
                r.token
            })
            .collect();
        // Device 1 checks in first, at A: A opens round 1 and coordinates it. The others
        // check in at their own replicas, which learn of the round from the database.
        let homes = [&ua, &ub, &uc, &ub];
        let tasks: Vec<TrainTask> = tokens
            .iter()
            .zip(homes)
            .map(|(t, u)| task_from_replica(&device_at(u, t)))
            .collect();
        assert!(tasks.iter().all(|t| t.round == 1), "{point}: {tasks:?}");
        let body = |d: usize| common::small_update_body(&model, &tasks[d], d as u64 + 1);
        upload_anywhere(&[&ua], &tokens[0], 1, &body(0));
        upload_anywhere(&[&ub], &tokens[1], 1, &body(1));
        upload_anywhere(&[&ub], &tokens[3], 1, &body(3));
        b.kill();
        // Device 4 did not hear B's answer: it sends the same update to C.
        upload_anywhere(&[&ub, &uc], &tokens[3], 1, &body(3));
        upload_anywhere(&[&uc], &tokens[2], 1, &body(2));
        // Every device has reported: A closes the round and dies at `point`; C takes over.
        a.wait_for_abort();
        wait_for_rounds(&c, 1, point);

        // Round 2, on C and B started again (a new replica): device 1 checks in first at
        // C (the coordinator, or the first to take the lock), devices 2 and 4 at B.
        let b = Serve::start(&cb, pb);
        let homes = [&uc, &ub, &uc, &ub];
        let tasks: Vec<TrainTask> = tokens
            .iter()
            .zip(homes)
            .map(|(t, u)| task_from_replica(&device_at(u, t)))
            .collect();
        assert!(
            tasks.iter().all(|t| t.round == 2 && t.model_version == 1),
            "{point}"
        );
        for (d, (token, home)) in tokens.iter().zip(homes).enumerate() {
            let body = common::small_update_body(&model, &tasks[d], d as u64 + 1);
            upload_anywhere(&[home], token, 2, &body);
        }
        wait_for_rounds(&c, 2, point);
        wait_for_rounds(&b, 2, point);
        assert!(c.client().status().unwrap().finished, "{point}");

        let store = hush_host::store::PostgresStore::connect_as_replica(&url).unwrap();
        let rounds = store.rounds().unwrap();
        assert_eq!(rounds.len(), 2, "{point}: {rounds:?}");
        for r in &rounds {
            assert_eq!(r.state, RoundState::Released, "{point}: {r:?}");
            assert_eq!(
                r.accepted, 4,
                "{point}: round {} counts each device once",
                r.id
            );
            let sums = store.partial_sums(r.id).unwrap();
            assert_eq!(sums.iter().map(|p| p.accepted).sum::<u64>(), 4, "{point}");
        }
        assert_eq!(
            store.partial_sums(1).unwrap().len(),
            3,
            "{point}: round 1's updates went into A's, B's and C's partial sums"
        );
        let records = store.records().unwrap();
        assert_eq!(
            records.len(),
            2,
            "{point}: one ledger record per released round"
        );
        let versions = store.model_versions().unwrap();
        assert_eq!(versions.len(), 3, "{point}");
        for (serve, config) in [(&b, &cb), (&c, &cc)] {
            assert_eq!(serve.client().status().unwrap().model_version, 2, "{point}");
            let data = config.parent().unwrap().join("data");
            for v in &versions {
                let files = data.join("models").join(format!("v{}", v.version));
                assert_eq!(digest(&files).unwrap(), v.digest, "{point}: v{}", v.version);
            }
        }
        b.kill();
        c.kill();
    }
}
