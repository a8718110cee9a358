//! Fleet load (bench binary, `harness = false`): the round server holding 10 000 devices
//! (issue 36, "Load").
//!
//! The host runs as a child process (`hush-host serve`, the bundled `models/kws-12`), on a
//! fresh data directory; this process runs `--devices` light protocol clients in one tokio
//! runtime. A light client trains nothing: it registers, checks in, and when picked uploads
//! one valid update (every layer's norm at half its clip bound) for the round it was given,
//! then checks in until the host says `Done`. Each device has its own source address in
//! 127.0.0.0/8 (so per-address limits apply as in a real fleet) and one HTTP/1.1 keep-alive
//! connection (hyper), reconnecting when the host closes it; every request has the
//! device's 30 s timeout, and a 429 or 503 is retried after its `Retry-After`.
//!
//! Reported per round (a request belongs to the round open when it was sent): check-in and
//! upload latency p50/p99/max, the host's accepted reports (read from its SQLite database
//! after the run), the client's 200 receipts, timeouts, 429/503 and other 5xx replies, the
//! host's RSS after the round's release; and the client's own CPU and wall time. Checked:
//! every accepted update counted once (host accepted = devices holding a 200 receipt), no
//! client timeout, host RSS flat (round 5 ≤ 1.1 × round 2), p99 upload latency < 2 s (per
//! request, and per update from its first attempt to its receipt, `Retry-After` waits
//! included). Also printed: the host's CPU, threads and `/metrics` counters, and how much
//! CPU other processes took meanwhile (a busy machine spoils the latencies).
//!
//! ```text
//! cargo bench -p hush-host --bench fleet_load -- --devices 10000 --rounds 5 --sampling-rate 0.05
//! ```
//!
//! Other flags: `--addresses N` (distinct source addresses, default = devices),
//! `--deadline-secs 60`, `--retry-after-ms 1000` (the host's suggested wait),
//! `--register-concurrency 64` (registrations in flight at once), `--max-minutes 60`,
//! `--no-limits` (leave `[limits]` out of the host's config), `--replicas N` (N `serve`
//! processes on one PostgreSQL database — a throwaway server this bench starts, as
//! `hush_store::postgres_cluster::LocalCluster` — device `i` talking to replica `i % N`;
//! `--postgres` for one host on PostgreSQL; "host" below is then replica 0 for the RSS and
//! `/metrics`, all of them for the CPU, and the rounds and reports are read from the
//! database), `--host-env KEY=VALUE`
//! (repeatable: the host's environment, e.g. `MALLOC_ARENA_MAX=2`), `--keep` (keep the
//! data directory and the host's log). Diagnostics of the host's memory:
//! `--reconnect-after-upload` (each device opens a new connection after its upload, so the
//! host can drop the connection's buffers) and `--trim-after-release` (after each release,
//! gdb calls glibc's `malloc_trim(0)` in the host: RSS before and after says how much of it
//! is freed memory the allocator kept).

// A bench binary: failures should stop it loudly.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{BodyExt, Full};
use hush_device::protocol::{
    checksum_hex, encode_update, Assignment, LayerDelta, RegisterResponse, StatusReport, TrainTask,
    Update, UpdateHeader, UploadReceipt, CHECKSUM_HEADER, UPDATE_FORMAT_VERSION,
};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;
use tokio::sync::Semaphore;

/// The device's per-request timeout (`hush-device join`'s default).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Samples are pushed into this many independently locked shards.
const SHARDS: usize = 64;

fn model_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models/kws-12"))
}

// ---------------------------------------------------------------------------------------
// Flags

#[derive(Debug, Clone)]
struct Args {
    devices: usize,
    rounds: u64,
    sampling_rate: f64,
    addresses: usize,
    deadline_secs: f64,
    retry_after_ms: u64,
    register_concurrency: usize,
    max_minutes: f64,
    limits: bool,
    keep: bool,
    /// `KEY=VALUE` environment variables for the host (e.g. glibc malloc tunables).
    host_env: Vec<(String, String)>,
    /// Diagnostic: each device drops its connection after an upload.
    reconnect_after_upload: bool,
    /// Diagnostic: after each release, `malloc_trim(0)` in the host through gdb.
    trim_after_release: bool,
    /// Hosts sharing one PostgreSQL database (0: one host on SQLite).
    replicas: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        devices: 10_000,
        rounds: 5,
        sampling_rate: 0.05,
        addresses: 0,
        deadline_secs: 60.0,
        retry_after_ms: 1000,
        register_concurrency: 64,
        max_minutes: 60.0,
        limits: true,
        keep: false,
        host_env: Vec::new(),
        reconnect_after_upload: false,
        trim_after_release: false,
        replicas: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match flag.as_str() {
            "--devices" => a.devices = value("--devices").parse().unwrap(),
            "--rounds" => a.rounds = value("--rounds").parse().unwrap(),
            "--sampling-rate" => a.sampling_rate = value("--sampling-rate").parse().unwrap(),
            "--addresses" => a.addresses = value("--addresses").parse().unwrap(),
            "--deadline-secs" => a.deadline_secs = value("--deadline-secs").parse().unwrap(),
            "--retry-after-ms" => a.retry_after_ms = value("--retry-after-ms").parse().unwrap(),
            "--register-concurrency" => {
                a.register_concurrency = value("--register-concurrency").parse().unwrap()
            }
            "--max-minutes" => a.max_minutes = value("--max-minutes").parse().unwrap(),
            "--no-limits" => a.limits = false,
            "--keep" => a.keep = true,
            "--reconnect-after-upload" => a.reconnect_after_upload = true,
            "--trim-after-release" => a.trim_after_release = true,
            "--replicas" => a.replicas = value("--replicas").parse().unwrap(),
            "--postgres" => a.replicas = a.replicas.max(1),
            "--host-env" => {
                let kv = value("--host-env");
                let (k, v) = kv.split_once('=').expect("--host-env KEY=VALUE");
                a.host_env.push((k.to_string(), v.to_string()));
            }
            // `cargo bench` passes `--bench` to every bench binary.
            "--bench" => {}
            other => panic!("unknown flag {other:?} (see the doc comment of fleet_load.rs)"),
        }
    }
    if a.addresses == 0 {
        a.addresses = a.devices;
    }
    assert!(a.devices > 0 && a.rounds > 0 && a.register_concurrency > 0);
    a
}

// ---------------------------------------------------------------------------------------
// Process helpers: open-file limit, CPU time, RSS

/// Raises this process's soft open-file limit to its hard limit (the host, a child,
/// inherits it). Returns the new soft limit.
#[allow(unsafe_code)]
fn raise_nofile_limit() -> libc::rlim_t {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer, which
    // lives for the duration of the calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            eprintln!(
                "setrlimit(RLIMIT_NOFILE): {}",
                std::io::Error::last_os_error()
            );
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

/// User + system CPU seconds of this process (`RUSAGE_SELF`) or of its waited-for
/// children (`RUSAGE_CHILDREN`).
#[allow(unsafe_code)]
fn cpu_seconds(who: libc::c_int) -> f64 {
    // SAFETY: rusage is plain old data (all zeros is a valid value) and getrusage only
    // writes into it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the duration of the call.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return f64::NAN;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// CPU seconds the whole machine spent busy so far (`/proc/stat`; every core, every
/// process), to tell how much of it other processes took during the run.
fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return f64::NAN;
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 8 {
        return f64::NAN;
    }
    // user nice system idle iowait irq softirq steal: all but idle and iowait, in
    // USER_HZ ticks (100 per second on Linux).
    (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0
}

/// A `/proc/<pid>/status` field: in kB for `VmRSS` and `VmHWM`, a count for `Threads`.
fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
}

fn mb(kb: Option<u64>) -> String {
    kb.map_or("–".into(), |kb| format!("{:.0}", kb as f64 / 1024.0))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Device `i`'s source address: one of `addresses` addresses in 127.1.0.1 – 127.254.255.250
/// (never 127.0.0.1, never a .0 or .255 last byte).
fn source_addr(i: usize, addresses: usize) -> IpAddr {
    let a = i % addresses;
    let rest = a / 250;
    IpAddr::V4(Ipv4Addr::new(
        127,
        1 + ((rest / 256) % 254) as u8,
        (rest % 256) as u8,
        (a % 250 + 1) as u8,
    ))
}

// ---------------------------------------------------------------------------------------
// The host: config, enrolment, the child process

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn write_config(
    path: &Path,
    args: &Args,
    port: u16,
    data_dir: &Path,
    limits: bool,
    store: Option<&str>,
) {
    let model = model_dir().canonicalize().unwrap();
    let store = store.map_or(String::new(), |s| format!("store = {s:?}\n"));
    let mut toml = format!(
        "[server]\n\
         listen = \"127.0.0.1:{port}\"\n\
         data_dir = {data:?}\n\
         initial_model = {model:?}\n\
         {store}\
         \n\
         [rounds]\n\
         rounds = {rounds}\n\
         sampling_rate = {q:?}\n\
         deadline_secs = {deadline:?}\n\
         min_devices = {devices}\n\
         retry_after_ms = {retry}\n\
         \n\
         [budget]\n\
         epsilon = 1e6\n",
        data = data_dir.display().to_string(),
        model = model.display().to_string(),
        rounds = args.rounds,
        q = args.sampling_rate,
        deadline = args.deadline_secs,
        devices = args.devices,
        retry = args.retry_after_ms,
    );
    if limits {
        // Room for every device's keep-alive connection, the monitor and some slack.
        let _ = write!(
            toml,
            "\n[limits]\nmax_connections = {}\n",
            args.devices + 100
        );
    }
    std::fs::write(path, toml).unwrap();
}

fn hush_host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_hush-host"))
}

/// Whether the host refused the config for its `[limits]` section (an older host).
fn refuses_limits(stderr: &str) -> bool {
    stderr.contains("limits") && (stderr.contains("unknown") || stderr.contains("unexpected"))
}

enum Enrolment {
    Token(String),
    /// `hush-host devices enrol` does not exist: registration is open.
    Unsupported,
    /// The host refused the config's `[limits]` section.
    LimitsRefused,
}

/// `hush-host devices enrol --config <cfg> --quota <n>`: the enrolment token alone on
/// stdout.
fn enrol(config: &Path, quota: usize) -> Enrolment {
    let out = hush_host()
        .args(["devices", "enrol", "--config"])
        .arg(config)
        .args(["--quota", &quota.to_string()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        let token = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(!token.is_empty(), "`devices enrol` printed no token");
        return Enrolment::Token(token);
    }
    if refuses_limits(&stderr) {
        return Enrolment::LimitsRefused;
    }
    if stderr.contains("unrecognized subcommand") {
        return Enrolment::Unsupported;
    }
    panic!(
        "`hush-host devices enrol` failed ({}):\n{stderr}",
        out.status
    );
}

struct Host {
    child: Child,
    pid: u32,
    log: PathBuf,
}

enum Started {
    Up(Host),
    LimitsRefused,
}

/// Starts `hush-host serve` and waits until its port accepts connections.
fn start_host(config: &Path, log: &Path, addr: SocketAddr, env: &[(String, String)]) -> Started {
    let out = std::fs::File::create(log).unwrap();
    let child = hush_host()
        .args(["serve", "--config"])
        .arg(config)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or("info".into()),
        )
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut host = Host {
        child,
        pid,
        log: log.to_path_buf(),
    };
    let start = Instant::now();
    loop {
        if let Some(status) = host.child.try_wait().unwrap() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if refuses_limits(&text) {
                return Started::LimitsRefused;
            }
            panic!("hush-host serve exited ({status}) before listening:\n{text}");
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Started::Up(host);
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "hush-host serve did not listen on {addr} within 120 s; log: {}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Host {
    /// SIGTERM, then up to 30 s for a clean exit, then SIGKILL.
    fn stop(&mut self) -> String {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.to_string();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let s = self.child.wait().unwrap();
        format!("{s} (killed after 30 s without exiting on SIGTERM)")
    }
}

// ---------------------------------------------------------------------------------------
// Measurements

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Register,
    CheckIn,
    /// One upload exchange.
    Upload,
    /// From the first upload attempt to the receipt (or the refusal), `Retry-After` waits
    /// included.
    UploadToReceipt,
}

/// Outcome codes beside HTTP statuses.
const TIMEOUT: u16 = 0;
const TRANSPORT: u16 = 1;

#[derive(Debug, Clone, Copy)]
struct Sample {
    start_ms: u64,
    micros: u32,
    kind: Kind,
    /// HTTP status, [`TIMEOUT`] or [`TRANSPORT`].
    outcome: u16,
    /// The round of an upload (0 otherwise).
    round: u64,
}

/// What every device task writes into.
struct Shared {
    /// The hosts (replicas); device `i` talks to `servers[i % len]`.
    servers: Vec<SocketAddr>,
    shards: Vec<Mutex<Vec<Sample>>>,
    /// (round, device) pairs holding a 200 receipt, and how many of those receipts said
    /// `duplicate`.
    receipts: Mutex<HashSet<(u64, u64)>>,
    duplicates: AtomicU64,
    /// Refusals other than 429/503: (endpoint, status, code) → count.
    refusals: Mutex<BTreeMap<(String, u16, String), u64>>,
    transport_errors: Mutex<BTreeMap<String, u64>>,
    registered: AtomicU64,
    checkins: AtomicU64,
    uploads: AtomicU64,
    timeouts: AtomicU64,
    connects: AtomicU64,
    done: AtomicU64,
    finished: AtomicBool,
}

impl Shared {
    fn record(&self, device: usize, s: Sample) {
        self.shards[device % SHARDS].lock().unwrap().push(s);
    }

    fn refusal(&self, what: &str, status: u16, body: &[u8]) {
        let code = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_string))
            .unwrap_or_else(|| "?".into());
        *self
            .refusals
            .lock()
            .unwrap()
            .entry((what.to_string(), status, code))
            .or_default() += 1;
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1e3
}

/// `p50 / p99 / max` in ms.
fn latency_cell(mut v: Vec<u32>) -> String {
    if v.is_empty() {
        return "–".into();
    }
    v.sort_unstable();
    format!(
        "{:.0} / {:.0} / {:.0}",
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        percentile(&v, 1.0)
    )
}

// ---------------------------------------------------------------------------------------
// The light device

type Sender = http1::SendRequest<Full<Bytes>>;

struct Reply {
    status: u16,
    retry_after: Option<u64>,
    body: Bytes,
}

enum Failure {
    Timeout,
    Transport(String),
}

struct Device {
    index: usize,
    src: IpAddr,
    conn: Option<Sender>,
    token: Option<String>,
    id: u64,
    shared: Arc<Shared>,
    reconnect_after_upload: bool,
}

async fn connect(src: IpAddr, server: SocketAddr) -> Result<Sender, String> {
    let socket = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
    socket
        .bind(SocketAddr::new(src, 0))
        .map_err(|e| format!("bind {src}: {e}"))?;
    let stream = socket
        .connect(server)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

impl Device {
    /// One request with the device's timeout, over the kept-alive connection (a new one
    /// when the host closed it; a request that failed on a reused connection is sent once
    /// more on a fresh one, as an HTTP client does).
    async fn request(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Reply, Failure> {
        match tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(method, path, headers, body))
            .await
        {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                self.conn = None;
                Err(Failure::Transport(e))
            }
            Err(_) => {
                // The connection may still carry the stalled request.
                self.conn = None;
                self.shared.timeouts.fetch_add(1, Ordering::Relaxed);
                Err(Failure::Timeout)
            }
        }
    }

    async fn exchange(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Reply, String> {
        let server = self.shared.servers[self.index % self.shared.servers.len()];
        let mut reused_failed = false;
        loop {
            let fresh = match &self.conn {
                Some(c) if !c.is_closed() => false,
                _ => {
                    self.conn = Some(connect(self.src, server).await?);
                    self.shared.connects.fetch_add(1, Ordering::Relaxed);
                    true
                }
            };
            let mut req = Request::builder()
                .method(method.clone())
                .uri(path)
                .header("host", server.to_string());
            for (k, v) in headers {
                req = req.header(*k, v);
            }
            if let Some(t) = &self.token {
                req = req.header("authorization", format!("Bearer {t}"));
            }
            let req = req
                .body(Full::new(body.clone()))
                .map_err(|e| format!("request: {e}"))?;
            let Some(sender) = self.conn.as_mut() else {
                continue;
            };
            let sent = match sender.ready().await {
                Ok(()) => sender.send_request(req).await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse().ok());
                    let body = resp
                        .into_body()
                        .collect()
                        .await
                        .map_err(|e| format!("reading the reply: {e}"))?
                        .to_bytes();
                    return Ok(Reply {
                        status,
                        retry_after,
                        body,
                    });
                }
                Err(e) => {
                    self.conn = None;
                    if fresh || reused_failed {
                        return Err(format!("{e}"));
                    }
                    reused_failed = true;
                }
            }
        }
    }

    /// A request, timed and recorded; retried after `Retry-After` on 429 and 503, after
    /// 1 s on a timeout or a transport error. Returns the final reply.
    async fn call(
        &mut self,
        kind: Kind,
        round: u64,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Reply {
        loop {
            let start_ms = now_ms();
            let t = Instant::now();
            let r = self
                .request(method.clone(), path, headers, body.clone())
                .await;
            let micros = t.elapsed().as_micros().min(u32::MAX as u128) as u32;
            let outcome = match &r {
                Ok(reply) => reply.status,
                Err(Failure::Timeout) => TIMEOUT,
                Err(Failure::Transport(_)) => TRANSPORT,
            };
            self.shared.record(
                self.index,
                Sample {
                    start_ms,
                    micros,
                    kind,
                    outcome,
                    round,
                },
            );
            match r {
                Ok(reply) if reply.status == 429 || reply.status == 503 => {
                    let secs = reply.retry_after.unwrap_or(1).clamp(1, 300);
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                }
                Ok(reply) => return reply,
                Err(Failure::Timeout) => tokio::time::sleep(Duration::from_secs(1)).await,
                Err(Failure::Transport(e)) => {
                    let what = format!("{kind:?}: {}", e.chars().take(120).collect::<String>());
                    *self
                        .shared
                        .transport_errors
                        .lock()
                        .unwrap()
                        .entry(what)
                        .or_default() += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn register(&mut self, enrolment: Option<&str>) -> bool {
        let mut req = serde_json::json!({ "label": format!("fleet-load-{}", self.index) });
        if let Some(tok) = enrolment {
            req["enrolment_token"] = tok.into();
        }
        let body = Bytes::from(serde_json::to_vec(&req).unwrap());
        let json = [("content-type", "application/json".to_string())];
        let reply = self
            .call(Kind::Register, 0, Method::POST, "/v1/devices", &json, body)
            .await;
        if reply.status != 200 {
            self.shared.refusal("register", reply.status, &reply.body);
            return false;
        }
        let r: RegisterResponse = serde_json::from_slice(&reply.body).unwrap();
        self.id = r.device_id;
        self.token = Some(r.token);
        self.shared.registered.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Checks in until `Done`, uploading once for each round it is picked for.
    async fn run(&mut self, layers: &[LayerDelta], retry_after_ms: u64) {
        let json = [("content-type", "application/json".to_string())];
        let mut model_version: Option<u64> = None;
        let mut attempted = HashSet::new();
        loop {
            let req = serde_json::json!({ "model_version": model_version, "examples": 100 });
            let body = Bytes::from(serde_json::to_vec(&req).unwrap());
            let reply = self
                .call(Kind::CheckIn, 0, Method::POST, "/v1/checkin", &json, body)
                .await;
            self.shared.checkins.fetch_add(1, Ordering::Relaxed);
            if reply.status != 200 {
                self.shared.refusal("check-in", reply.status, &reply.body);
                if reply.status == 401 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(retry_after_ms)).await;
                continue;
            }
            match serde_json::from_slice::<Assignment>(&reply.body).unwrap() {
                Assignment::Train(task) => {
                    model_version = Some(task.model_version);
                    if attempted.insert(task.round) {
                        self.upload(&task, layers).await;
                    } else {
                        // Picked again for a round whose upload was refused: wait it out.
                        tokio::time::sleep(Duration::from_millis(retry_after_ms)).await;
                    }
                }
                Assignment::Wait { retry_after_ms } => {
                    tokio::time::sleep(Duration::from_millis(retry_after_ms)).await;
                }
                Assignment::Done { .. } => return,
            }
        }
    }

    async fn upload(&mut self, task: &TrainTask, layers: &[LayerDelta]) {
        let update = Update {
            header: UpdateHeader {
                format_version: UPDATE_FORMAT_VERSION,
                model_version: task.model_version,
                round: task.round,
                device_id: self.id,
                idempotency_key: Update::key(task.round, self.id),
                layer_norms: vec![0.0; layers.len()],
            },
            layers: clipped_layers(task, layers),
        };
        let body = Bytes::from(encode_update(&update).unwrap());
        let headers = [
            ("content-type", "application/octet-stream".to_string()),
            (CHECKSUM_HEADER, checksum_hex(&body)),
        ];
        let path = format!("/v1/rounds/{}/update", task.round);
        let start_ms = now_ms();
        let t = Instant::now();
        let reply = self
            .call(
                Kind::Upload,
                task.round,
                Method::POST,
                &path,
                &headers,
                body,
            )
            .await;
        self.shared.record(
            self.index,
            Sample {
                start_ms,
                micros: t.elapsed().as_micros().min(u32::MAX as u128) as u32,
                kind: Kind::UploadToReceipt,
                outcome: reply.status,
                round: task.round,
            },
        );
        self.shared.uploads.fetch_add(1, Ordering::Relaxed);
        if self.reconnect_after_upload {
            self.conn = None;
        }
        if reply.status == 200 {
            let r: UploadReceipt = serde_json::from_slice(&reply.body).unwrap();
            if r.duplicate {
                self.shared.duplicates.fetch_add(1, Ordering::Relaxed);
            }
            self.shared
                .receipts
                .lock()
                .unwrap()
                .insert((task.round, self.id));
        } else {
            self.shared.refusal("upload", reply.status, &reply.body);
        }
    }
}

/// The layers of the task, each scaled to half its share of the clip bound (a flat bound
/// C is shared as C/√L per layer), so the update is well inside the bound.
fn clipped_layers(task: &TrainTask, template: &[LayerDelta]) -> Vec<LayerDelta> {
    let names = &task.clip.layers;
    let bounds = &task.clip.bounds;
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let t = template
                .iter()
                .find(|l| &l.name == name)
                .unwrap_or_else(|| panic!("the task names layer {name:?}, not in model.json"));
            let bound = if bounds.len() == names.len() {
                bounds[i]
            } else {
                bounds[0] / (names.len() as f32).sqrt()
            };
            let norm = t.data.iter().map(|v| v * v).sum::<f32>().sqrt();
            let scale = if norm > 0.0 { 0.5 * bound / norm } else { 0.0 };
            LayerDelta {
                name: t.name.clone(),
                shape: t.shape.clone(),
                data: t.data.iter().map(|v| v * scale).collect(),
            }
        })
        .collect()
}

/// One pseudo-random delta per trainable tensor of the bundled model (names and shapes
/// from its `model.json`).
fn template_layers() -> Vec<LayerDelta> {
    let card: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model_dir().join("model.json")).unwrap()).unwrap();
    let mut x: u32 = 0x9e37_79b9;
    card["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["trainable"].as_bool().unwrap_or(false))
        .map(|p| {
            let shape: Vec<u32> = p["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap() as u32)
                .collect();
            let n = shape.iter().product::<u32>() as usize;
            let data = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as f32 / u32::MAX as f32 - 0.5
                })
                .collect();
            LayerDelta {
                name: p["name"].as_str().unwrap().to_string(),
                shape,
                data,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The monitor: host status and RSS

#[derive(Debug, Default)]
struct Monitor {
    /// rounds_done → host VmRSS (kB) at the first poll after that release.
    rss_after_release: BTreeMap<u64, u64>,
    rss_before_rounds: Option<u64>,
    rss_peak_seen: u64,
    /// Most threads the host had at one poll.
    threads_peak: u64,
    status_errors: BTreeMap<u16, u64>,
    /// rounds_done → host VmRSS (kB) before and after `malloc_trim(0)`.
    trims: BTreeMap<u64, (u64, u64)>,
}

/// Calls `malloc_trim(0)` in process `pid` through gdb (which stops it meanwhile).
fn malloc_trim_in(pid: u32) -> bool {
    Command::new("gdb")
        .args(["-p", &pid.to_string(), "-batch", "-nx"])
        .args(["-ex", "call (int) malloc_trim(0)"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

async fn monitor(
    shared: Arc<Shared>,
    pid: u32,
    token_file: PathBuf,
    devices: u64,
    t0: Instant,
    trim: bool,
) -> Monitor {
    let mut m = Monitor::default();
    let mut conn: Option<Sender> = None;
    let src = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut last_done = 0u64;
    let mut last_open: Option<u64> = None;
    let mut last_report = Instant::now();
    while !shared.finished.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let rss = proc_status_kb(pid, "VmRSS:");
        if let Some(r) = rss {
            m.rss_peak_seen = m.rss_peak_seen.max(r);
        }
        if let Some(t) = proc_status_kb(pid, "Threads:") {
            m.threads_peak = m.threads_peak.max(t);
        }
        let token = std::fs::read_to_string(&token_file)
            .ok()
            .map(|t| t.trim().to_string());
        if conn.as_ref().is_none_or(|c| c.is_closed()) {
            conn = connect(src, shared.servers[0]).await.ok();
        }
        let Some(sender) = conn.as_mut() else {
            continue;
        };
        let mut req = Request::builder()
            .uri("/v1/status")
            .header("host", shared.servers[0].to_string());
        if let Some(t) = &token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(Full::new(Bytes::new())).unwrap();
        let exchange = async {
            sender.ready().await.ok()?;
            let resp = sender.send_request(req).await.ok()?;
            let status = resp.status();
            let body = resp.into_body().collect().await.ok()?.to_bytes();
            Some((status, body))
        };
        let Ok(Some((status, body))) = tokio::time::timeout(REQUEST_TIMEOUT, exchange).await else {
            conn = None;
            continue;
        };
        if status != StatusCode::OK {
            *m.status_errors.entry(status.as_u16()).or_default() += 1;
            continue;
        }
        let Ok(s) = serde_json::from_slice::<StatusReport>(&body) else {
            continue;
        };
        let at = t0.elapsed().as_secs_f64();
        if s.rounds_done == 0 && s.open_round.is_none() {
            m.rss_before_rounds = rss;
        }
        if s.rounds_done > last_done {
            for done in last_done + 1..=s.rounds_done {
                if let Some(r) = rss {
                    m.rss_after_release.insert(done, r);
                }
            }
            eprintln!(
                "[{at:7.1} s] released: {} of {} rounds done; host RSS {} MB",
                s.rounds_done,
                s.rounds_planned,
                mb(rss)
            );
            last_done = s.rounds_done;
            if trim {
                let ok = tokio::task::spawn_blocking(move || malloc_trim_in(pid))
                    .await
                    .unwrap_or(false);
                let after = proc_status_kb(pid, "VmRSS:");
                eprintln!(
                    "[{at:7.1} s] malloc_trim(0) in the host {}: RSS {} MB",
                    if ok { "done" } else { "FAILED" },
                    mb(after)
                );
                if let (Some(b), Some(a)) = (rss, after) {
                    m.trims.insert(s.rounds_done, (b, a));
                }
            }
        }
        if s.open_round != last_open {
            if let Some(r) = s.open_round {
                eprintln!(
                    "[{at:7.1} s] round {r} open ({} devices registered)",
                    s.devices
                );
            }
            last_open = s.open_round;
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "[{at:7.1} s] registered {}/{devices}, check-ins {}, uploads {}, reports in round {}, \
                 timeouts {}, connects {}, devices done {}, host RSS {} MB",
                shared.registered.load(Ordering::Relaxed),
                shared.checkins.load(Ordering::Relaxed),
                shared.uploads.load(Ordering::Relaxed),
                s.reports_in_round,
                shared.timeouts.load(Ordering::Relaxed),
                shared.connects.load(Ordering::Relaxed),
                shared.done.load(Ordering::Relaxed),
                mb(rss),
            );
        }
    }
    m
}

/// The host's connection and refusal counters from `GET /metrics` (operator token), or
/// `None` from a host without the endpoint.
fn scrape_metrics(server: SocketAddr, token_file: &Path) -> Option<String> {
    use std::io::{Read, Write};
    let token = std::fs::read_to_string(token_file).ok()?;
    let mut s = TcpStream::connect_timeout(&server, REQUEST_TIMEOUT).ok()?;
    s.set_read_timeout(Some(REQUEST_TIMEOUT)).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nhost: {server}\r\nauthorization: Bearer {}\r\n\
         connection: close\r\n\r\n",
        token.trim()
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    if !text.starts_with("HTTP/1.1 200") {
        return None;
    }
    let keep = [
        "hush_connections_",
        "hush_requests_refused_total",
        "hush_uploads_accepted_total",
    ];
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| keep.iter().any(|k| l.starts_with(k)))
        .collect();
    Some(lines.join("\n"))
}

// ---------------------------------------------------------------------------------------
// The host's record

#[derive(Debug)]
struct RoundRow {
    id: u64,
    state: String,
    opened_at_ms: u64,
    closed_at_ms: Option<u64>,
    population: u64,
    expected_cohort: f64,
    selected: u64,
    accepted: u64,
    rejected: u64,
    reason: Option<String>,
}

struct HostRecord {
    rounds: Vec<RoundRow>,
    /// round → accepted reports (from the `reports` table).
    accepted_reports: BTreeMap<u64, u64>,
    /// Accepted reports whose idempotency key appears more than once (must be 0).
    double_counted: u64,
    /// Records in the privacy ledger (`releases`).
    ledger_records: u64,
}

fn read_host_record(db: &Path) -> HostRecord {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT id, state, opened_at_ms, closed_at_ms, population, expected_cohort, \
             selected, accepted, rejected, reason FROM rounds ORDER BY id",
        )
        .unwrap();
    let rounds = stmt
        .query_map([], |r| {
            Ok(RoundRow {
                id: r.get::<_, i64>(0)? as u64,
                state: r.get(1)?,
                opened_at_ms: r.get::<_, i64>(2)? as u64,
                closed_at_ms: r.get::<_, Option<i64>>(3)?.map(|v| v as u64),
                population: r.get::<_, i64>(4)? as u64,
                expected_cohort: r.get(5)?,
                selected: r.get::<_, i64>(6)? as u64,
                accepted: r.get::<_, i64>(7)? as u64,
                rejected: r.get::<_, i64>(8)? as u64,
                reason: r.get(9)?,
            })
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let mut stmt = conn
        .prepare("SELECT round, COUNT(*) FROM reports WHERE status = 'accepted' GROUP BY round")
        .unwrap();
    let accepted_reports = stmt
        .query_map([], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })
        .unwrap()
        .collect::<Result<BTreeMap<_, _>, _>>()
        .unwrap();
    let double_counted: i64 = conn
        .query_row(
            "SELECT COALESCE(SUM(n - 1), 0) FROM (SELECT COUNT(*) AS n FROM reports \
             WHERE status = 'accepted' GROUP BY round, device HAVING n > 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let ledger_records: i64 = conn
        .query_row("SELECT COUNT(*) FROM releases", [], |r| r.get(0))
        .unwrap();
    HostRecord {
        rounds,
        accepted_reports,
        double_counted: double_counted as u64,
        ledger_records: ledger_records as u64,
    }
}

/// [`read_host_record`] from the replicas' PostgreSQL database.
fn read_host_record_pg(url: &str) -> HostRecord {
    let mut c = postgres::Client::connect(url, postgres::NoTls).unwrap();
    let rounds = c
        .query(
            "SELECT id, state, opened_at_ms, closed_at_ms, population, expected_cohort, \
             selected, accepted, rejected, reason FROM rounds ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| RoundRow {
            id: r.get::<_, i64>(0) as u64,
            state: r.get(1),
            opened_at_ms: r.get::<_, i64>(2) as u64,
            closed_at_ms: r.get::<_, Option<i64>>(3).map(|v| v as u64),
            population: r.get::<_, i64>(4) as u64,
            expected_cohort: r.get(5),
            selected: r.get::<_, i64>(6) as u64,
            accepted: r.get::<_, i64>(7) as u64,
            rejected: r.get::<_, i64>(8) as u64,
            reason: r.get(9),
        })
        .collect();
    let accepted_reports = c
        .query(
            "SELECT round, COUNT(*) FROM reports WHERE status = 'accepted' GROUP BY round",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
        .collect();
    let double_counted: i64 = c
        .query_one(
            "SELECT COALESCE(SUM(n - 1), 0)::BIGINT FROM (SELECT COUNT(*) AS n FROM reports \
             WHERE status = 'accepted' GROUP BY round, device HAVING COUNT(*) > 1) t",
            &[],
        )
        .unwrap()
        .get(0);
    let ledger_records: i64 = c
        .query_one("SELECT COUNT(*) FROM releases", &[])
        .unwrap()
        .get(0);
    HostRecord {
        rounds,
        accepted_reports,
        double_counted: double_counted as u64,
        ledger_records: ledger_records as u64,
    }
}

// ---------------------------------------------------------------------------------------

fn main() {
    let args = parse_args();
    let nofile = raise_nofile_limit();
    let dir = tempfile::Builder::new()
        .prefix("hush-fleet-load-")
        .tempdir()
        .unwrap();
    let data_dir = dir.path().join("data");
    let config = dir.path().join("hush.toml");
    let log = dir.path().join("host.log");
    let port = free_port();
    let server: SocketAddr = ([127, 0, 0, 1], port).into();
    // With --replicas or --postgres: a throwaway PostgreSQL server and one database.
    let cluster = (args.replicas > 0).then(|| {
        hush_host::store::postgres_cluster::LocalCluster::start()
            .expect("--replicas needs PostgreSQL's server programs (Debian's postgresql package)")
    });
    let store = cluster
        .as_ref()
        .map(|c| c.create_database("fleet").unwrap());
    eprintln!(
        "fleet_load: {} devices over {} addresses, {} rounds, q = {}, open-file limit {nofile}; \
         host data in {}",
        args.devices,
        args.addresses,
        args.rounds,
        args.sampling_rate,
        dir.path().display()
    );

    let mut limits = args.limits;
    let store = store.as_deref();
    write_config(&config, &args, port, &data_dir, limits, store);
    let enrolment = match enrol(&config, args.devices) {
        Enrolment::LimitsRefused => {
            limits = false;
            write_config(&config, &args, port, &data_dir, limits, store);
            enrol(&config, args.devices)
        }
        e => e,
    };
    let enrolment = match enrolment {
        Enrolment::Token(t) => Some(t),
        Enrolment::Unsupported => {
            eprintln!("fleet_load: this host has no `devices enrol`; registering without a token");
            None
        }
        Enrolment::LimitsRefused => panic!("the host refuses a config without [limits] too"),
    };
    let mut host = match start_host(&config, &log, server, &args.host_env) {
        Started::Up(h) => h,
        Started::LimitsRefused => {
            limits = false;
            write_config(&config, &args, port, &data_dir, limits, store);
            match start_host(&config, &log, server, &args.host_env) {
                Started::Up(h) => h,
                Started::LimitsRefused => panic!("refused without [limits] too"),
            }
        }
    };
    if !limits && args.limits {
        eprintln!("fleet_load: this host refuses [limits]; running without it");
    }
    // Replicas 1.. on the same database, each with its own data directory and port.
    let mut servers = vec![server];
    let mut others = Vec::new();
    for i in 1..args.replicas {
        let dir = dir.path().join(format!("replica{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let config = dir.join("hush.toml");
        write_config(&config, &args, port, &dir.join("data"), limits, store);
        match start_host(&config, &dir.join("host.log"), addr, &args.host_env) {
            Started::Up(h) => others.push(h),
            Started::LimitsRefused => panic!("replica {i} refused its [limits]"),
        }
        servers.push(addr);
    }
    let rss_idle = proc_status_kb(host.pid, "VmRSS:");
    eprintln!(
        "fleet_load: host pid {} listening on {server}, RSS {} MB",
        host.pid,
        mb(rss_idle)
    );

    let layers = Arc::new(template_layers());
    let shared = Arc::new(Shared {
        servers: servers.clone(),
        shards: (0..SHARDS).map(|_| Mutex::new(Vec::new())).collect(),
        receipts: Mutex::new(HashSet::new()),
        duplicates: AtomicU64::new(0),
        refusals: Mutex::new(BTreeMap::new()),
        transport_errors: Mutex::new(BTreeMap::new()),
        registered: AtomicU64::new(0),
        checkins: AtomicU64::new(0),
        uploads: AtomicU64::new(0),
        timeouts: AtomicU64::new(0),
        connects: AtomicU64::new(0),
        done: AtomicU64::new(0),
        finished: AtomicBool::new(false),
    });

    let cpu0 = cpu_seconds(libc::RUSAGE_SELF);
    let busy0 = machine_busy_seconds();
    let t0 = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (monitor_result, completed, register_secs) = rt.block_on(async {
        let mon = tokio::spawn(monitor(
            shared.clone(),
            host.pid,
            data_dir.join("operator.token"),
            args.devices as u64,
            t0,
            args.trim_after_release,
        ));
        let gate = Arc::new(Semaphore::new(args.register_concurrency));
        let register_end = Arc::new(Mutex::new(None::<f64>));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..args.devices {
            let (shared, layers, gate, enrolment) = (
                shared.clone(),
                layers.clone(),
                gate.clone(),
                enrolment.clone(),
            );
            let register_end = register_end.clone();
            let (devices, retry) = (args.devices as u64, args.retry_after_ms);
            tasks.spawn(async move {
                let mut d = Device {
                    index: i,
                    src: source_addr(i, args.addresses),
                    conn: None,
                    token: None,
                    id: 0,
                    shared: shared.clone(),
                    reconnect_after_upload: args.reconnect_after_upload,
                };
                let ok = {
                    let _permit = gate.acquire().await.unwrap();
                    d.register(enrolment.as_deref()).await
                };
                let n = shared.registered.load(Ordering::Relaxed);
                if ok && n % 1000 == 0 {
                    eprintln!(
                        "[{:7.1} s] {n} devices registered",
                        t0.elapsed().as_secs_f64()
                    );
                }
                if ok && n == devices {
                    *register_end.lock().unwrap() = Some(t0.elapsed().as_secs_f64());
                }
                if ok {
                    d.run(&layers, retry).await;
                }
                shared.done.fetch_add(1, Ordering::Relaxed);
            });
        }
        let limit = Duration::from_secs_f64(args.max_minutes * 60.0);
        let all = async { while tasks.join_next().await.is_some() {} };
        let completed = tokio::time::timeout(limit, all).await.is_ok();
        if !completed {
            eprintln!(
                "fleet_load: not finished after {} minutes; stopping",
                args.max_minutes
            );
        }
        shared.finished.store(true, Ordering::Relaxed);
        let m = mon.await.unwrap();
        let register_secs = *register_end.lock().unwrap();
        (m, completed, register_secs)
    });
    let wall = t0.elapsed().as_secs_f64();
    let client_cpu = cpu_seconds(libc::RUSAGE_SELF) - cpu0;
    let machine_busy = machine_busy_seconds() - busy0;
    drop(rt);

    let metrics = scrape_metrics(server, &data_dir.join("operator.token"));
    let rss_end = proc_status_kb(host.pid, "VmRSS:");
    let hwm = proc_status_kb(host.pid, "VmHWM:");
    let mut exit = host.stop();
    for (i, h) in others.iter_mut().enumerate() {
        let _ = write!(exit, "; replica {}: {}", i + 1, h.stop());
    }
    let host_cpu = cpu_seconds(libc::RUSAGE_CHILDREN);
    let record = match store {
        Some(url) => read_host_record_pg(url),
        None => read_host_record(&data_dir.join("hush.sqlite")),
    };

    report(
        &args,
        &shared,
        &record,
        &monitor_result,
        Summary {
            completed,
            wall,
            client_cpu,
            host_cpu,
            register_secs,
            rss_idle,
            rss_end,
            hwm,
            exit,
            limits,
            enrolment: enrolment.is_some(),
            nofile,
            metrics,
            machine_busy,
        },
    );
    if args.keep {
        let kept = dir.keep();
        eprintln!(
            "fleet_load: kept {} (host log {})",
            kept.display(),
            host.log.display()
        );
    }
}

struct Summary {
    completed: bool,
    wall: f64,
    client_cpu: f64,
    host_cpu: f64,
    register_secs: Option<f64>,
    rss_idle: Option<u64>,
    rss_end: Option<u64>,
    hwm: Option<u64>,
    exit: String,
    limits: bool,
    enrolment: bool,
    nofile: libc::rlim_t,
    metrics: Option<String>,
    machine_busy: f64,
}

fn report(args: &Args, shared: &Shared, record: &HostRecord, mon: &Monitor, s: Summary) {
    let mut samples: Vec<Sample> = shared
        .shards
        .iter()
        .flat_map(|m| std::mem::take(&mut *m.lock().unwrap()))
        .collect();
    samples.sort_by_key(|s| s.start_ms);
    let receipts = shared.receipts.lock().unwrap().clone();
    let rounds = &record.rounds;
    // A request belongs to the last round opened before it was sent (requests before the
    // first round to the first).
    let bin = |start_ms: u64| -> usize {
        rounds
            .iter()
            .rposition(|r| r.opened_at_ms <= start_ms)
            .unwrap_or(0)
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### fleet_load: {} devices, {} rounds, q = {}\n",
        args.devices, args.rounds, args.sampling_rate
    );
    let _ =
        writeln!(
        out,
        "Host: `hush-host serve` (child process), model kws-12, deadline {} s, retry_after {} ms, \
         [limits] {}, enrolment token {}; client: {} devices on {} source addresses in \
         127.0.0.0/8, one keep-alive connection each, 30 s timeout, tokio (2 worker threads); \
         open-file limit {}.\n",
        args.deadline_secs,
        args.retry_after_ms,
        if s.limits {
            format!("max_connections = {}", args.devices + 100)
        } else {
            "not set".into()
        },
        if s.enrolment { "yes" } else { "no (open registration)" },
        args.devices,
        args.addresses,
        s.nofile
    );
    if args.replicas > 0 {
        let _ = writeln!(
            out,
            "Hosts: {} `serve` replica(s) on one PostgreSQL database (device i talks to replica \
             i mod {}); RSS, threads and `/metrics` are replica 0's, the host CPU all of them.\n",
            args.replicas, args.replicas
        );
    }
    let registers: Vec<u32> = samples
        .iter()
        .filter(|x| x.kind == Kind::Register)
        .map(|x| x.micros)
        .collect();
    let _ = writeln!(
        out,
        "Registration: {} devices in {}, latency p50 / p99 / max {} ms.\n",
        shared.registered.load(Ordering::Relaxed),
        s.register_secs
            .map_or("(not all registered)".into(), |t| format!("{t:.1} s")),
        latency_cell(registers)
    );
    let _ = writeln!(
        out,
        "| round | state | open s | population | selected | host accepted / rejected | client receipts | \
         check-ins | check-in p50 / p99 / max ms | uploads | upload p50 / p99 / max ms | \
         upload to receipt p99 ms | 429 / 503 | other 5xx | timeouts | host RSS after release MB |"
    );
    let _ = writeln!(
        out,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    let mut released_index = 0u64;
    let mut upload_p99_all: Vec<u32> = Vec::new();
    for (k, r) in rounds.iter().enumerate() {
        let in_round: Vec<&Sample> = samples
            .iter()
            .filter(|x| x.kind != Kind::Register && bin(x.start_ms) == k)
            .collect();
        let checkins: Vec<u32> = in_round
            .iter()
            .filter(|x| x.kind == Kind::CheckIn && x.outcome >= 100)
            .map(|x| x.micros)
            .collect();
        let ups: Vec<&Sample> = samples
            .iter()
            .filter(|x| x.kind == Kind::Upload && x.round == r.id)
            .collect();
        let up_lat: Vec<u32> = ups
            .iter()
            .filter(|x| x.outcome >= 100)
            .map(|x| x.micros)
            .collect();
        upload_p99_all.extend(&up_lat);
        let mut to_receipt: Vec<u32> = samples
            .iter()
            .filter(|x| x.kind == Kind::UploadToReceipt && x.round == r.id)
            .map(|x| x.micros)
            .collect();
        to_receipt.sort_unstable();
        let count = |f: &dyn Fn(u16) -> bool| in_round.iter().filter(|x| f(x.outcome)).count();
        let backpressure = (count(&|o| o == 429), count(&|o| o == 503));
        let other5xx: BTreeMap<u16, usize> = in_round
            .iter()
            .filter(|x| x.outcome >= 500 && x.outcome != 503)
            .fold(BTreeMap::new(), |mut m, x| {
                *m.entry(x.outcome).or_default() += 1;
                m
            });
        let rss = if r.state == "released" {
            released_index += 1;
            mon.rss_after_release.get(&released_index).copied()
        } else {
            None
        };
        let open_s = r.closed_at_ms.map_or("–".into(), |c| {
            format!("{:.1}", (c - r.opened_at_ms) as f64 / 1e3)
        });
        let _ = writeln!(
            out,
            "| {} | {}{} | {} | {} | {} (exp. {:.0}) | {} / {} | {} | {} | {} | {} | {} | {} | {} / {} | {} | {} | {} |",
            r.id,
            r.state,
            r.reason
                .as_deref()
                .filter(|_| r.state != "released")
                .map_or(String::new(), |why| format!(" ({why})")),
            open_s,
            r.population,
            r.selected,
            r.expected_cohort,
            r.accepted,
            r.rejected,
            receipts.iter().filter(|(round, _)| *round == r.id).count(),
            checkins.len(),
            latency_cell(checkins),
            ups.len(),
            latency_cell(up_lat),
            if to_receipt.is_empty() {
                "–".into()
            } else {
                format!("{:.0}", percentile(&to_receipt, 0.99))
            },
            backpressure.0,
            backpressure.1,
            if other5xx.is_empty() {
                "0".into()
            } else {
                format!("{other5xx:?}")
            },
            count(&|o| o == TIMEOUT),
            mb(rss),
        );
    }
    let total_timeouts = shared.timeouts.load(Ordering::Relaxed);
    let host_accepted: u64 = record.accepted_reports.values().sum();
    let host_accepted_rounds: u64 = rounds.iter().map(|r| r.accepted).sum();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Client: {:.1} s wall, {:.1} s CPU ({:.2} cores); host: {:.1} s CPU ({:.2} cores), \
         RSS idle {} MB, at the end {} MB, peak {} MB (seen by the monitor {} MB); \
         {} connections opened; host threads at most {}; host exit on SIGTERM: {}.",
        s.wall,
        s.client_cpu,
        s.client_cpu / s.wall,
        s.host_cpu,
        s.host_cpu / s.wall,
        mb(s.rss_idle),
        mb(s.rss_end),
        mb(s.hwm),
        mb(Some(mon.rss_peak_seen)),
        shared.connects.load(Ordering::Relaxed),
        mon.threads_peak,
        s.exit
    );
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let _ = writeln!(
        out,
        "Machine ({cores} cores): {:.2} cores busy on average, of which {:.2} were other \
         processes than this client and the host (the host's CPU counts from its start, a few \
         seconds before the client's).",
        s.machine_busy / s.wall,
        (s.machine_busy - s.client_cpu - s.host_cpu).max(0.0) / s.wall
    );
    if let Some(before) = mon.rss_before_rounds {
        let _ = writeln!(
            out,
            "Host RSS with every device registered, before round 1: {} MB.",
            mb(Some(before))
        );
    }
    let refusals = shared.refusals.lock().unwrap();
    if !refusals.is_empty() {
        let _ = writeln!(
            out,
            "Refusals (final replies other than 200): {refusals:?}."
        );
    }
    let transport = shared.transport_errors.lock().unwrap();
    if !transport.is_empty() {
        let _ = writeln!(out, "Transport errors (retried): {transport:?}.");
    }
    if !mon.status_errors.is_empty() {
        let _ = writeln!(
            out,
            "`/v1/status` replies other than 200: {:?}.",
            mon.status_errors
        );
    }
    if let Some(m) = &s.metrics {
        let _ = writeln!(
            out,
            "\nThe host's counters at the end (`/metrics`):\n\n```text\n{m}\n```"
        );
    }
    if !mon.trims.is_empty() {
        let cells: Vec<String> = mon
            .trims
            .iter()
            .map(|(r, (b, a))| format!("round {r}: {} → {} MB", mb(Some(*b)), mb(Some(*a))))
            .collect();
        let _ = writeln!(
            out,
            "Host RSS before → after `malloc_trim(0)`: {}.",
            cells.join(", ")
        );
    }
    if args.reconnect_after_upload {
        let _ = writeln!(out, "Diagnostic: devices reconnected after each upload.");
    }
    if !args.host_env.is_empty() {
        let _ = writeln!(out, "Host environment: {:?}.", args.host_env);
    }
    let _ = writeln!(out);

    let check = |ok: bool, what: String| format!("{} {what}", if ok { "PASS" } else { "FAIL" });
    let mut checks = vec![check(
        s.completed,
        format!(
            "every device finished (`Done`) within {} minutes",
            args.max_minutes
        ),
    )];
    let released = rounds.iter().filter(|r| r.state == "released").count() as u64;
    checks.push(check(
        released == args.rounds,
        format!("{released} of {} rounds released", args.rounds),
    ));
    checks.push(check(
        record.ledger_records == released,
        format!(
            "epsilon recorded once per released round: {} ledger records",
            record.ledger_records
        ),
    ));
    checks.push(check(
        host_accepted == receipts.len() as u64
            && host_accepted == host_accepted_rounds
            && record.double_counted == 0,
        format!(
            "every accepted update counted once: host accepted {host_accepted} (reports table; \
             {host_accepted_rounds} in the rounds table), client holds {} receipts \
             ({} duplicate), {} double-counted",
            receipts.len(),
            shared.duplicates.load(Ordering::Relaxed),
            record.double_counted
        ),
    ));
    checks.push(check(
        total_timeouts == 0,
        format!("client timeouts: {total_timeouts}"),
    ));
    let (r2, rlast) = (
        mon.rss_after_release.get(&2).copied(),
        mon.rss_after_release.get(&args.rounds).copied(),
    );
    checks.push(match (r2, rlast) {
        (Some(a), Some(b)) if args.rounds >= 3 => check(
            b as f64 <= 1.1 * a as f64,
            format!(
                "host RSS flat: round {} {} MB ≤ 1.1 × round 2 {} MB (ratio {:.3})",
                args.rounds,
                mb(Some(b)),
                mb(Some(a)),
                b as f64 / a as f64
            ),
        ),
        _ => check(
            false,
            format!(
                "host RSS flat: not measured (after-release RSS {:?} kB)",
                mon.rss_after_release
            ),
        ),
    });
    upload_p99_all.sort_unstable();
    let p99 = percentile(&upload_p99_all, 0.99);
    checks.push(check(
        p99 < 2000.0,
        format!(
            "p99 upload latency {p99:.0} ms < 2000 ms (per request: all {} upload requests, \
             429/503 replies included)",
            upload_p99_all.len()
        ),
    ));
    let mut to_receipt: Vec<u32> = samples
        .iter()
        .filter(|x| x.kind == Kind::UploadToReceipt)
        .map(|x| x.micros)
        .collect();
    to_receipt.sort_unstable();
    let p99 = percentile(&to_receipt, 0.99);
    checks.push(check(
        p99 < 2000.0,
        format!(
            "p99 upload time to receipt {p99:.0} ms < 2000 ms (per update: first attempt to \
             final reply, Retry-After waits included; {} updates)",
            to_receipt.len()
        ),
    ));
    for c in &checks {
        let _ = writeln!(out, "{c}");
    }
    print!("{out}");
}
