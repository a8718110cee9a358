//! DP-SGD step throughput (bench binary, `harness = false`): examples per second of one
//! DP-SGD step (per-example gradients, flat clipping at C = 1, noise σ = 1, AdamW) against
//! the non-private step (batch gradient, AdamW) on the same model and batch, for the
//! DS-CNN-S and the leak-CNN over `[98, 40]` features, 12 classes, batch 64, on the CPU
//! (`flex`) or the GPU (`HUSH_BENCH_DEVICE=gpu`). The DP step runs several ways: per-example
//! gradients from activations and output gradients (`PerExampleMethod::Activations`), from
//! per-example weight copies (`Vectorized`; both within the default 256 MiB per-example
//! memory budget) and the per-example loop, each on one thread, then the vectorised path and
//! the loop with their physical batches shared over `HUSH_BENCH_THREADS` threads (default
//! every core). hush/Opacus is the best way's ratio. When `HUSH_BENCH_PYTHON` names a Python
//! interpreter with `torch` and `opacus` installed (or `python3` has them),
//! `dp_sgd_opacus.py` times Opacus on the same architectures, batch and
//! clipping in the same run and the ratio is printed.
//!
//! The process keeps freed tensor memory as `hush-host` does
//! (`hush_models::compute::keep_freed_tensor_memory`; `HUSH_BENCH_GLIBC_DEFAULTS=1`: glibc's
//! defaults). `HUSH_BENCH_DP=0` times the non-private step only (training throughput of every
//! architecture); `ctc-gru` in `HUSH_BENCH_ARCHS` times the CTC recogniser's non-private step
//! (standard size, 80 bins, batches of 8 utterances of 3 s with 40-character transcripts).
//!
//! ```text
//! cargo bench --workspace --profile dev --bench dp_sgd
//! HUSH_BENCH_PYTHON=/path/to/python cargo bench --workspace --profile dev --bench dp_sgd
//! HUSH_BENCH_ARCHS=leak-cnn HUSH_BENCH_STEPS=3 cargo bench … --bench dp_sgd
//! HUSH_BENCH_DP=0 HUSH_BENCH_ARCHS=ds-cnn-s,bc-resnet,leak-cnn,ctc-gru cargo bench … --bench dp_sgd
//! HUSH_BENCH_DEVICE=gpu HUSH_BENCH_BATCH=256 cargo bench --workspace --profile dev \
//!     --features hush-host/gpu --bench dp_sgd
//! ```
//!
//! `HUSH_BENCH_DEVICE=gpu` runs hush on burn's wgpu backend (Vulkan) and Opacus on CUDA
//! (`HUSH_BENCH_OPACUS_DEVICE` overrides); `HUSH_BENCH_BATCH` sets the KWS batch
//! (default 64).
//!
//! Record results in BENCHMARKS.md with the command and the machine.

// A bench binary: failures should stop it loudly.
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::Device;
use hush_models::arch::{ArchConfig, IoShape, KwsModel};
use hush_models::asr::{ctc_loss, AsrArchConfig, CtcBatch, Vocabulary};
use hush_models::compute::{select, ComputeKind};
use hush_models::dp::{
    clipped_grad_sum_with, per_example_model, trainable_layout, Bounding, ClipBounds, ClipStrategy,
    ExpectedCount, GaussianMechanism, NoiseKind, NoiseSource, PerExampleConfig, PerExampleMethod,
};
use hush_models::step::{apply_grads, loss_and_grads, Batch};

const IO: IoShape = IoShape {
    frames: 98,
    bins: 40,
    classes: 12,
};
/// KWS examples per step (`HUSH_BENCH_BATCH`, default 64).
fn batch_size() -> usize {
    std::env::var("HUSH_BENCH_BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
}

/// Where hush runs (`HUSH_BENCH_DEVICE`: cpu or gpu, default cpu).
fn compute_kind() -> ComputeKind {
    std::env::var("HUSH_BENCH_DEVICE")
        .ok()
        .map(|s| s.parse().unwrap())
        .unwrap_or_default()
}

/// The autodiff device every measurement trains on.
fn train_device() -> Device {
    let device = select(compute_kind()).device.autodiff();
    device.seed(1);
    device
}

/// Timed steps per measurement (`HUSH_BENCH_STEPS`, default 5).
fn steps() -> usize {
    std::env::var("HUSH_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
}

fn batch() -> Batch {
    let batch = batch_size();
    let mut s = 7u64;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    let features = (0..batch * IO.frames * IO.bins).map(|_| next()).collect();
    let mut targets = vec![0f32; batch * IO.classes];
    for i in 0..batch {
        targets[i * IO.classes + i % IO.classes] = 1.0;
    }
    Batch {
        features,
        targets,
        batch,
        frames: IO.frames,
        bins: IO.bins,
        classes: IO.classes,
    }
}

/// Examples per second of [`steps`] steps of `batch` examples after one warm-up step.
fn throughput_of(batch: usize, mut step: impl FnMut()) -> f64 {
    step();
    let n = steps();
    let t = Instant::now();
    for _ in 0..n {
        step();
    }
    (n * batch) as f64 / t.elapsed().as_secs_f64()
}

/// [`throughput_of`] for the KWS batch.
fn throughput(step: impl FnMut()) -> f64 {
    throughput_of(batch_size(), step)
}

/// Whether to time the DP steps too (`HUSH_BENCH_DP`, default on).
fn with_dp() -> bool {
    std::env::var("HUSH_BENCH_DP").map_or(true, |v| v != "0")
}

/// Utterances per second of the CTC recogniser's non-private step (AdamW).
fn bench_ctc() -> f64 {
    const UTTERANCES: usize = 8;
    const FRAMES: usize = 300;
    let device = train_device();
    let cfg = AsrArchConfig::default_for("ctc-gru", 80, 29).unwrap();
    let vocab = Vocabulary::characters();
    let text = "turn the kitchen lights off in ten minute";
    let b = batch();
    let batch = CtcBatch {
        features: b
            .features
            .iter()
            .copied()
            .cycle()
            .take(UTTERANCES * FRAMES * 80)
            .collect(),
        lengths: vec![FRAMES; UTTERANCES],
        labels: vec![vocab.encode(text).unwrap(); UTTERANCES],
        frames: FRAMES,
        bins: 80,
        leading_blanks: Vec::new(),
    };
    let mut model = Some(cfg.init(&device).unwrap());
    let mut opt = AdamWConfig::new().init();
    throughput_of(UTTERANCES, || {
        let m = model.take().unwrap();
        let loss = ctc_loss(&m, &batch, &device).unwrap();
        let grads = GradientsParams::from_grads(loss.backward(), &m);
        model = Some(apply_grads(&mut opt, 1e-3, m, grads));
    })
}

/// Examples/s of one arch: non-private, then (unless `HUSH_BENCH_DP=0`) each DP way
/// ([`dp_ways`]) with its name.
fn bench_arch(name: &str) -> (f64, Vec<(String, f64)>) {
    if name == "ctc-gru" {
        return (bench_ctc(), Vec::new());
    }
    let device = train_device();
    let cfg = ArchConfig::default_for(name, IO).unwrap();
    let b = batch();

    // Non-private: batch gradient (batch norms on stored statistics, as in DP, so the two
    // steps run the same model).
    let mut model: Option<KwsModel> = Some(per_example_model(&cfg.init(&device).unwrap()));
    let mut opt = AdamWConfig::new().init();
    let plain = throughput(|| {
        let m = model.take().unwrap();
        let (loss, grads) = loss_and_grads(&m, &b, &device).unwrap();
        black_box(loss);
        model = Some(apply_grads(&mut opt, 1e-3, m, grads));
    });
    if !with_dp() {
        return (plain, Vec::new());
    }

    // DP-SGD: per-example clipped sum, noise over the expected batch, AdamW.
    let m0 = per_example_model(&cfg.init(&device).unwrap());
    let layout = trainable_layout(&m0).unwrap();
    // Flat clipping, as Opacus does by default.
    let bounds = ClipBounds::new(ClipStrategy::Flat, 1.0, &layout).unwrap();
    let mech = GaussianMechanism::new(
        1.0,
        bounds.sensitivity(),
        ExpectedCount::poisson(batch_size() as f64 / 10_000.0, 10_000).unwrap(),
        NoiseKind::Gaussian,
    )
    .unwrap();
    let dp = |per: PerExampleConfig| {
        let mut noise = NoiseSource::from_seed(3);
        let mut model = Some(m0.clone());
        let mut opt = AdamWConfig::new().init();
        throughput(|| {
            let m = model.take().unwrap();
            let mut sum =
                clipped_grad_sum_with(&m, &b, &bounds, Bounding::Clip, &per, &device).unwrap();
            mech.privatize(&mut sum.sum, &mut noise).unwrap();
            let grads = m.grads_params(&sum.sum).unwrap();
            model = Some(apply_grads(&mut opt, 1e-3, m, grads));
        })
    };
    let ways = dp_ways()
        .into_iter()
        .map(|(label, per)| (label, dp(per)))
        .collect();
    (plain, ways)
}

/// Threads for the threaded DP ways (`HUSH_BENCH_THREADS`, default every core).
fn threads() -> usize {
    std::env::var("HUSH_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The DP ways timed: each per-example method on one thread, then the loop and the
/// vectorised path on [`threads`] threads when that is more than one.
fn dp_ways() -> Vec<(String, PerExampleConfig)> {
    let on = |method, threads| PerExampleConfig {
        method,
        threads,
        ..PerExampleConfig::default()
    };
    let mut ways = vec![
        (
            "activations".to_string(),
            on(PerExampleMethod::Activations, 1),
        ),
        (
            "vectorised".to_string(),
            on(PerExampleMethod::Vectorized, 1),
        ),
        ("loop".to_string(), on(PerExampleMethod::Loop, 1)),
    ];
    let n = threads();
    if n > 1 {
        ways.push((
            format!("vectorised ×{n}"),
            on(PerExampleMethod::Vectorized, n),
        ));
        ways.push((format!("loop ×{n}"), on(PerExampleMethod::Loop, n)));
    }
    ways
}

fn opacus(python: &str, arch: &str) -> Option<f64> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/dp_sgd_opacus.py");
    let out = Command::new(python)
        .arg(&script)
        .args([
            "--arch",
            arch,
            "--batch",
            &batch_size().to_string(),
            "--device",
            &opacus_device(),
            "--steps",
            &steps().to_string(),
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "opacus run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["examples_per_s"].as_f64()
}

/// Where Opacus runs: `HUSH_BENCH_OPACUS_DEVICE`, else cuda when hush runs on the GPU.
fn opacus_device() -> String {
    std::env::var("HUSH_BENCH_OPACUS_DEVICE").unwrap_or_else(|_| match compute_kind() {
        ComputeKind::Gpu => "cuda".into(),
        ComputeKind::Cpu => "cpu".into(),
    })
}

fn python_with_opacus() -> Option<String> {
    let candidates = std::env::var("HUSH_BENCH_PYTHON")
        .ok()
        .into_iter()
        .chain(["python3".to_string()]);
    for py in candidates {
        let ok = Command::new(&py)
            .args(["-c", "import torch, opacus"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(py);
        }
    }
    None
}

fn main() {
    // As `hush-host` does (HUSH_BENCH_GLIBC_DEFAULTS=1 measures without it).
    if std::env::var_os("HUSH_BENCH_GLIBC_DEFAULTS").is_none() {
        hush_models::compute::keep_freed_tensor_memory();
    }
    let python = if with_dp() {
        python_with_opacus()
    } else {
        None
    };
    if python.is_none() && with_dp() {
        println!("(no Python with torch + opacus: set HUSH_BENCH_PYTHON to compare with Opacus)");
    }
    let archs = std::env::var("HUSH_BENCH_ARCHS").unwrap_or_else(|_| "ds-cnn-s,leak-cnn".into());
    let compute = select(compute_kind());
    if let Some(why) = &compute.fallback {
        println!("warning: {why}");
    }
    println!(
        "hush on {}, Opacus on {}; KWS batch {}, {} timed steps after 1 warm-up; examples/s \
         (higher is better)",
        compute.description,
        opacus_device(),
        batch_size(),
        steps()
    );
    for arch in archs.split(',') {
        let (plain, ways) = bench_arch(arch);
        println!("{arch:<10} non-private {plain:>8.1}");
        if ways.is_empty() {
            continue;
        }
        for (label, v) in &ways {
            println!(
                "{:<10} DP {label:<17} {v:>8.1}  ({:.2}× non-private)",
                "",
                v / plain
            );
        }
        let op = python.as_deref().and_then(|py| opacus(py, arch));
        let Some(op) = op else { continue };
        let (best, v) = ways
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("at least one DP way");
        println!("{:<10} Opacus DP            {op:>8.1}", "");
        println!("{:<10} best hush DP / Opacus: {:.2} ({best})", "", v / op);
    }
}
