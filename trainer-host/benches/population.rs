//! Population-scale federated workload (bench binary, `harness = false`; issue 38): the
//! in-process fleet ([`hush_host::fleet`]: the round engine, its SQLite store, the privacy
//! ledger, central noise, no HTTP) over `HUSH_BENCH_USERS` users (default 10 000) with
//! sampling rate `HUSH_BENCH_Q` (default 0.05: cohorts of ≈ 500), DS-CNN-S on
//! `[101, 40]` features and 12 classes, each user with 10 examples and one local step of
//! 10 (one epoch, batch 10), flat clipping, noise multiplier 1.0 — the workload
//! `population_flower.py` runs in Flower. Prints each round's wall time, device updates
//! per second and the process's peak RSS.
//!
//! A user's examples are made from its index when it is drawn (random features, uniform
//! classes), so memory follows the cohort, not the population: run it at two population
//! sizes to see RSS stay flat. The numbers are throughput only; nothing here learns.
//!
//! ```text
//! cargo bench -p hush-host --bench population            # 10 000 users, 5 rounds
//! HUSH_BENCH_USERS=1000 HUSH_BENCH_Q=0.5 cargo bench -p hush-host --bench population
//! ```
//! Other knobs: `HUSH_BENCH_ROUNDS` (5), `HUSH_BENCH_ROWS` (examples per batched local
//! step, 10: one device per group, the fastest on the CPU), `HUSH_BENCH_THREADS` (the
//! machine's cores).

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use burn::tensor::Device;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::training::{CohortSplit, LocalData};
use hush_host::fl::FlConfig;
use hush_host::fleet::{FleetUsers, InProcessFleet};
use hush_host::simulate::{FleetParticipation, SimulateError};
use hush_models::arch::{ArchConfig, DsCnnConfig, IoShape};
use hush_models::package::{write_package, ModelCard};

const IO: IoShape = IoShape {
    frames: 101,
    bins: 40,
    classes: 12,
};
const EXAMPLES_PER_USER: usize = 10;

fn env<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}={v:?}: not a usable value")),
        Err(_) => Ok(default),
    }
}

/// `count` users whose examples are made from their index when drawn.
struct SyntheticUsers {
    count: usize,
}

impl FleetUsers for SyntheticUsers {
    fn count(&self) -> usize {
        self.count
    }
    fn name(&self, i: usize) -> String {
        format!("user-{i:05}")
    }
    fn data(&self, i: usize) -> Result<Cow<'_, LocalData>, SimulateError> {
        let mut state = 0x5EED_0000 + i as u64;
        let mut next = || {
            // SplitMix64.
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let per = IO.frames * IO.bins;
        let features = (0..EXAMPLES_PER_USER * per)
            .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0)
            .collect();
        let classes = (0..EXAMPLES_PER_USER)
            .map(|_| (next() % IO.classes as u64) as usize)
            .collect();
        Ok(Cow::Owned(LocalData {
            features,
            classes,
            frames: IO.frames,
            bins: IO.bins,
        }))
    }
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn initial_model(dir: &Path) -> anyhow::Result<usize> {
    let arch = ArchConfig::DsCnnS(DsCnnConfig::small(IO));
    let device = Device::flex();
    device.seed(1);
    let model = arch.init(&device)?;
    let features = serde_json::to_value(FeatureConfig::kaldi(FeatureKind::Fbank))?;
    let labels = (0..IO.classes).map(|c| format!("class{c}")).collect();
    let card = ModelCard::new(arch, features, labels, &model)?;
    write_package(dir, &card, &model)?;
    Ok(model.num_trainable()?)
}

fn main() -> anyhow::Result<()> {
    // As `hush-host` does (set HUSH_BENCH_GLIBC_DEFAULTS=1 to measure without it).
    if std::env::var_os("HUSH_BENCH_GLIBC_DEFAULTS").is_none() {
        hush_models::compute::keep_freed_tensor_memory();
    }
    let users: usize = env("HUSH_BENCH_USERS", 10_000)?;
    let q: f64 = env("HUSH_BENCH_Q", 0.05)?;
    let rounds: u64 = env("HUSH_BENCH_ROUNDS", 5)?;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let batching = CohortSplit {
        max_rows: env("HUSH_BENCH_ROWS", EXAMPLES_PER_USER)?,
        threads: env("HUSH_BENCH_THREADS", cores)?,
    };
    let work = tempfile::tempdir()?;
    let package = work.path().join("initial-model");
    let params = initial_model(&package)?;
    let mut host = FlConfig::with_model(&package, &work.path().join("host"));
    host.rounds.rounds = rounds;
    host.rounds.sampling_rate = q;
    host.rounds.min_devices = users as u64;
    host.dp.enabled = true;
    host.dp.noise_multiplier = 1.0;
    host.dp.clip = 1.0;
    host.local.epochs = 1;
    host.local.batch_size = EXAMPLES_PER_USER as u32;
    host.local.lr = 0.05;
    host.budget.epsilon = 1e9;
    host.budget.delta = 1e-6;
    host.seed = Some(38);
    host.validate().context("the bench's host configuration")?;
    println!(
        "population bench: {users} users, q = {q} (expected cohort {:.0}), {rounds} rounds, \
         DS-CNN-S {params} parameters on [{}, {}], {EXAMPLES_PER_USER} examples and one local \
         step per user, batching {} rows × {} threads",
        q * users as f64,
        IO.frames,
        IO.bins,
        batching.max_rows,
        batching.threads
    );
    let fleet = InProcessFleet {
        participation: FleetParticipation::default(),
        batching,
    };
    let started = Instant::now();
    let mut marks: Vec<(u64, Instant)> = Vec::new();
    let run = fleet.run(
        &host,
        &SyntheticUsers { count: users },
        &mut |line| println!("  {line}"),
        &mut |version, _| {
            // One mark per published version (a round that drew nobody publishes none).
            if marks.last().is_none_or(|(v, _)| *v != version) {
                marks.push((version, Instant::now()));
            }
            Ok(())
        },
    )?;
    let total = started.elapsed().as_secs_f64();
    let setup = marks
        .first()
        .map_or(0.0, |(_, t)| t.duration_since(started).as_secs_f64());
    let mut round_secs = Vec::new();
    let released = run.round_log.iter().filter(|l| l.reports_accepted > 0);
    for (w, log) in marks.windows(2).zip(released) {
        let s = w[1].1.duration_since(w[0].1).as_secs_f64();
        round_secs.push(s);
        println!(
            "  round {}: cohort {}, {} updates, {s:.1} s ({:.1} updates/s)",
            log.round,
            log.realized_cohort,
            log.reports_accepted,
            log.reports_accepted as f64 / s
        );
    }
    let trained: u64 = run.uploads_accepted;
    let round_total: f64 = round_secs.iter().sum();
    let mean = round_total / round_secs.len().max(1) as f64;
    println!(
        "population bench: setup (model, store, {users} registrations) {setup:.1} s; \
         {} rounds in {round_total:.1} s, {mean:.1} s a round (100 rounds ≈ {:.0} s), \
         {trained} updates, {:.1} device updates/s; total {total:.1} s; peak RSS {:.0} MiB",
        round_secs.len(),
        100.0 * mean,
        trained as f64 / round_total.max(1e-9),
        peak_rss_mib()
    );
    Ok(())
}
