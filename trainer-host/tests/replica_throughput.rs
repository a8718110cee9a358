//! Benchmark (not CI; `#[ignore]`): updates per second that 1, 2 and 3 `hush-host serve`
//! replicas on one PostgreSQL database take in, against one host on SQLite in the same run,
//! with the CPU each update costs the hosts and the database (on a small machine they
//! share its cores, so the CPU per update says more than the rate). Run with
//!
//! ```text
//! cargo test --workspace --features hush-device/mic --test replica_throughput -- \
//!     --ignored --nocapture
//! ```
//!
//! Each configuration: a fresh database (or data directory), `DEVICES + 1` devices
//! registered and checked in to the bundled `models/kws-12` (one never uploads, so the
//! round stays open while it is timed), then `CLIENTS` threads upload the `DEVICES`
//! prepared updates, device `d` to replica `d % replicas`. Timed: first upload sent to last
//! receipt; CPU: user + system time of the `serve` processes and of every `postgres`
//! process over the same span (`/proc/<pid>/stat`).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hush_device::client::HostClient;
use hush_device::protocol::{Assignment, CheckInRequest};
use hush_host::server::OPERATOR_TOKEN_FILE;
use hush_host::store::postgres_cluster::LocalCluster;

const DEVICES: u64 = 2000;
const CLIENTS: usize = 8;

/// Clock ticks (user + system) of process `pid` so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

/// Clock ticks of every process named `postgres`.
fn postgres_ticks() -> u64 {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .map(cpu_ticks)
        .sum()
}

fn ticks_per_second() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

struct Replica {
    child: Child,
    url: String,
    config: PathBuf,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, model: &Path, store: Option<&str>) -> Replica {
    std::fs::create_dir_all(dir).unwrap();
    let data = dir.join("data");
    let config = dir.join("hush.toml");
    let store = store.map_or(String::new(), |s| format!("store = {s:?}\n"));
    std::fs::write(
        &config,
        format!(
            "seed = 5\n\
             [server]\ndata_dir = {data:?}\ninitial_model = {model:?}\ntick_ms = 200\n{store}\
             [rounds]\nrounds = 1\nsampling_rate = 1.0\nmin_devices = {}\n\
             min_reports = 1\ndeadline_secs = 3600.0\n\
             [dp]\nnoise_multiplier = 1.0\nclip = 1.0\n\
             [budget]\nepsilon = 1000.0\ndelta = 1e-5\n\
             [limits]\nregister_per_address_per_minute = 100000.0\n\
             checkin_per_address_per_second = 100000.0\n",
            DEVICES + 1
        ),
    )
    .unwrap();
    let port = common::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    loop {
        let token = std::fs::read_to_string(data.join(OPERATOR_TOKEN_FILE)).unwrap_or_default();
        let probe = HostClient::new(&url, Duration::from_secs(5))
            .unwrap()
            .with_token(token.trim());
        if !token.trim().is_empty() && probe.status().is_ok() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Replica { child, url, config }
}

/// Device `d`'s update: values that differ from value to value and device to device
/// (norm about 0.1, under the clip of 1), so that partial sums do not compress as a
/// constant update's would.
fn update_body(model: &Path, task: &hush_device::protocol::TrainTask, d: u64) -> Vec<u8> {
    let mut u = common::update(&common::trainable_tensors(model), task, d, 0.0);
    let mut i = 0u64;
    for l in &mut u.layers {
        for v in &mut l.data {
            i += 1;
            *v = 1e-3 * ((i * 7919 + d * 104_729) as f32 * 0.618).sin();
        }
    }
    hush_device::protocol::encode_update(&u).unwrap()
}

/// One configuration's numbers: updates/s, hosts' CPU ms per update, database's CPU ms
/// per update.
fn run(dir: &Path, model: &Path, store: Option<&str>, replicas: usize) -> (f64, f64, f64) {
    let hosts: Vec<Replica> = (0..replicas)
        .map(|i| start(&dir.join(format!("r{i}")), model, store))
        .collect();
    let enrolment = common::enrol_with_cli(&hosts[0].config, DEVICES + 1);
    let req = CheckInRequest {
        model_version: None,
        examples: 10,
    };
    let mut clients = Vec::new();
    for d in 1..=DEVICES + 1 {
        let url = &hosts[d as usize % replicas].url;
        let anon = HostClient::new(url, Duration::from_secs(30)).unwrap();
        let r = anon.register(&format!("d{d}"), &enrolment).unwrap();
        clients.push((r.device_id, anon.with_token(&r.token)));
    }
    let mut work = Vec::new();
    for (d, c) in &clients[..DEVICES as usize] {
        let task = loop {
            match c.check_in(&req).unwrap() {
                Assignment::Train(t) => break t,
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        work.push((c.clone(), task.round, update_body(model, &task, *d)));
    }
    let pids: Vec<u32> = hosts.iter().map(|h| h.child.id()).collect();
    let host_cpu = || pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>();
    let (h0, p0) = (host_cpu(), postgres_ticks());
    let next = AtomicUsize::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..CLIENTS {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((c, round, body)) = work.get(i) else {
                    return;
                };
                loop {
                    match c.upload(*round, body) {
                        Ok(r) => {
                            assert!(!r.duplicate);
                            break;
                        }
                        Err(e) if e.is_transient() => std::thread::sleep(Duration::from_millis(20)),
                        Err(e) => panic!("upload: {e}"),
                    }
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let tick = ticks_per_second();
    let host_ms = (host_cpu() - h0) as f64 / tick * 1000.0 / DEVICES as f64;
    let pg_ms = (postgres_ticks() - p0) as f64 / tick * 1000.0 / DEVICES as f64;
    (DEVICES as f64 / secs, host_ms, pg_ms)
}

#[test]
#[ignore = "a benchmark: run it with --ignored --nocapture (see the file's doc)"]
fn updates_per_second_with_one_two_and_three_replicas() {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/kws-12");
    let cluster = LocalCluster::start().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let params: usize = common::trainable_tensors(&model)
        .iter()
        .map(|t| t.data.len())
        .sum();
    println!(
        "{DEVICES} uploads of a {params}-parameter update ({} kB of values), {CLIENTS} client \
         threads",
        4 * params / 1000
    );
    println!("| configuration | updates/s | host CPU ms/update | PostgreSQL CPU ms/update |");
    println!("|---|---|---|---|");
    let sqlite = run(&tmp.path().join("sqlite"), &model, None, 1);
    println!(
        "| one host, SQLite | {:.1} | {:.2} | {:.2} |",
        sqlite.0, sqlite.1, sqlite.2
    );
    for replicas in 1..=3 {
        let url = cluster
            .create_database(&format!("bench{replicas}"))
            .unwrap();
        let r = run(
            &tmp.path().join(format!("pg{replicas}")),
            &model,
            Some(&url),
            replicas,
        );
        println!(
            "| {replicas} replica(s), PostgreSQL | {:.1} | {:.2} | {:.2} |",
            r.0, r.1, r.2
        );
    }
}
