//! `hush-host serve` as a real process, killed with SIGKILL in the middle of a round and
//! started again on the same data directory: the open round is abandoned with no ε
//! spent, tokens survive, and the next round's release is recorded exactly once.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hush_device::client::HostClient;
use hush_device::protocol::{encode_update, Assignment, CheckInRequest, TrainTask};
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::LedgerStore;
use hush_models::arch::is_trainable;
use hush_models::package::load_package;

/// A free loopback port (bound, then released for the host to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    fn start(config: &Path, port: u16) -> Serve {
        let child = Command::new(env!("CARGO_BIN_EXE_hush-host"))
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let probe = HostClient::new(&url, Duration::from_secs(5)).unwrap();
        let start = Instant::now();
        while probe.status().is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "hush-host serve did not come up on {url}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Serve { child, url }
    }

    fn client(&self) -> HostClient {
        HostClient::new(&self.url, Duration::from_secs(10)).unwrap()
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

/// A small constant update (norm well under the bound) for `task`, shaped like `model`.
fn small_update(model: &Path, task: &TrainTask, device: u64) -> Vec<u8> {
    let (_, m) = load_package(model, &burn::tensor::Device::flex()).unwrap();
    let layout: Vec<_> = m
        .named_tensors()
        .unwrap()
        .into_iter()
        .filter(|t| is_trainable(&t.name))
        .collect();
    encode_update(&common::update(&layout, task, device, 1e-3)).unwrap()
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
    let port = free_port();

    // Two devices, a round opens, one reports; then the host is killed.
    let host = Serve::start(&config, port);
    let anon = host.client();
    let a = anon.register("a").unwrap();
    let b = anon.register("b").unwrap();
    let (ca, cb) = (anon.clone().with_token(&a.token), anon.with_token(&b.token));
    let ta = task(&ca);
    let _ = task(&cb);
    assert_eq!(ta.round, 1);
    ca.upload(ta.round, &small_update(&model, &ta, a.device_id))
        .unwrap();
    assert_eq!(ca.status().unwrap().reports_in_round, 1);
    host.kill();
    assert_eq!(ledger_len(&data), 0, "nothing was released before the kill");

    // Restarted on the same data: round 1 is abandoned, the tokens still work.
    let host = Serve::start(&config, port);
    let (ca, cb) = (
        host.client().with_token(&a.token),
        host.client().with_token(&b.token),
    );
    let s = ca.status().unwrap();
    assert_eq!(
        (s.open_round, s.rounds_done, s.epsilon_rdp),
        (None, 0, Some(0.0)),
        "round 1 abandoned, nothing spent"
    );
    let (ta, tb) = (task(&ca), task(&cb));
    assert_eq!((ta.round, tb.round), (2, 2));
    ca.upload(ta.round, &small_update(&model, &ta, a.device_id))
        .unwrap();
    cb.upload(tb.round, &small_update(&model, &tb, b.device_id))
        .unwrap();
    let start = Instant::now();
    while ca.status().unwrap().model_version < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "round 2 never released"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(ledger_len(&data), 1, "one release, recorded once");
    let eps = ca.status().unwrap().epsilon_rdp.unwrap();
    host.kill();

    // A third start reads the same ε back: nothing lost, nothing counted twice.
    let host = Serve::start(&config, port);
    let s = host.client().status().unwrap();
    assert_eq!((s.model_version, s.rounds_done), (1, 1));
    assert_eq!(s.epsilon_rdp, Some(eps));
    assert_eq!(ledger_len(&data), 1);
    host.kill();
}
