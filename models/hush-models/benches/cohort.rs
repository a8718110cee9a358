//! Batched local training of a cohort (bench binary, `harness = false`; issue 38):
//! [`hush_models::cohort::train_cohort`] on `HUSH_BENCH_DEVICES` devices (default 64), each
//! with 10 random examples and one local SGD step of 10, DS-CNN-S on `[101, 40]` features
//! and 12 classes (the population benchmark's workload), for each group size in
//! `HUSH_BENCH_ROWS` (examples per batched step, default `10,64,640`) on the CPU (burn
//! flex, `HUSH_BENCH_THREADS` threads, default 2) and, with `HUSH_BENCH_DEVICE=gpu` and a
//! `gpu` build, on the GPU (burn wgpu on Vulkan) from the same initial weights. Prints
//! updates per second and the largest difference of every device's trained weights from
//! the CPU's groups of one device, relative to the largest weight.
//!
//! ```text
//! cargo bench -p hush-models --bench cohort
//! HUSH_BENCH_DEVICE=gpu cargo bench -p hush-models --features gpu --bench cohort
//! ```

use std::time::Instant;

use burn::tensor::Device;
use hush_models::arch::{ArchConfig, DsCnnConfig, IoShape, KwsModel};
use hush_models::checkpoint::TensorSource;
use hush_models::cohort::{train_cohort, CohortSplit, LocalExamples, LocalRecipe, LocalResult};
use hush_models::compute::{select, ComputeKind};

const IO: IoShape = IoShape {
    frames: 101,
    bins: 40,
    classes: 12,
};
const EXAMPLES: usize = 10;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Device `i`'s examples: uniform features in [-1, 1), uniform classes (SplitMix64).
fn examples(i: usize) -> (Vec<f32>, Vec<usize>) {
    let mut state = 0x5EED_0000 + i as u64;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let features = (0..EXAMPLES * IO.frames * IO.bins)
        .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0)
        .collect();
    let classes = (0..EXAMPLES)
        .map(|_| (next() % IO.classes as u64) as usize)
        .collect();
    (features, classes)
}

/// The same weights (drawn once on the CPU) on `device`, ready to train.
fn model_on(arch: &ArchConfig, weights: &KwsModel, device: &Device) -> KwsModel {
    let tensors = weights.named_tensors().expect("weights");
    arch.init(&device.clone().autodiff())
        .expect("model")
        .load_tensors(
            TensorSource::new(std::path::Path::new("bench"), tensors),
            arch.name(),
        )
        .expect("load")
}

fn max_rel_diff(a: &[LocalResult], b: &[LocalResult]) -> f32 {
    let (mut diff, mut scale) = (0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        for (s, t) in x.trained.iter().zip(&y.trained) {
            for (u, v) in s.data.iter().zip(&t.data) {
                diff = diff.max((u - v).abs());
                scale = scale.max(u.abs());
            }
        }
    }
    diff / scale.max(1e-12)
}

fn main() {
    let devices: usize = env("HUSH_BENCH_DEVICES", 64);
    let threads: usize = env("HUSH_BENCH_THREADS", 2);
    let rows: Vec<usize> = std::env::var("HUSH_BENCH_ROWS")
        .unwrap_or_else(|_| "10,64,640".into())
        .split(',')
        .filter_map(|r| r.trim().parse().ok())
        .collect();
    let want: ComputeKind = env("HUSH_BENCH_DEVICE", ComputeKind::Cpu);
    hush_models::compute::keep_freed_tensor_memory();

    let arch = ArchConfig::DsCnnS(DsCnnConfig::small(IO));
    let cpu = Device::flex();
    cpu.seed(1);
    let weights = arch.init(&cpu).expect("model");
    let data: Vec<(Vec<f32>, Vec<usize>)> = (0..devices).map(examples).collect();
    let members: Vec<LocalExamples<'_>> = data
        .iter()
        .enumerate()
        .map(|(i, (f, c))| LocalExamples {
            features: f,
            classes: c,
            seed: 1_000 + i as u64,
        })
        .collect();
    let recipe = LocalRecipe {
        epochs: 1,
        batch_size: EXAMPLES as u32,
        lr: 0.05,
        example_clip: None,
    };
    let run = |device: &Device, split: CohortSplit| {
        let model = model_on(&arch, &weights, device);
        let ad = device.clone().autodiff();
        let started = Instant::now();
        let out = train_cohort(&model, IO, &members, &recipe, split, &ad).expect("training");
        (out, started.elapsed().as_secs_f64())
    };
    println!(
        "cohort bench: {devices} devices × {EXAMPLES} examples, one local step each, DS-CNN-S \
         on [{}, {}]",
        IO.frames, IO.bins
    );
    let one = CohortSplit {
        max_rows: EXAMPLES,
        threads,
    };
    let (reference, secs) = run(&cpu, one);
    println!(
        "  cpu (burn flex), groups of {EXAMPLES} rows, {threads} threads: {:.1} updates/s \
         (the reference)",
        devices as f64 / secs
    );
    let compute = select(want);
    if let Some(why) = &compute.fallback {
        println!("  {why}");
    }
    for &r in &rows {
        let split = CohortSplit {
            max_rows: r,
            threads: if compute.kind == ComputeKind::Gpu {
                1
            } else {
                threads
            },
        };
        if compute.kind == ComputeKind::Gpu {
            // Shader compilation and the first allocations: not timed.
            let _ = run(&compute.device, split);
        }
        let (out, secs) = run(&compute.device, split);
        println!(
            "  {}, groups of {r} rows, {} threads: {:.1} updates/s; weights vs the reference: \
             max relative difference {:.2e}",
            compute.description,
            split.threads,
            devices as f64 / secs,
            max_rel_diff(&reference, &out)
        );
    }
}
