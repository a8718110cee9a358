//! Keyword-spotting latency on the device path (bench binary, `harness = false`): for each
//! KWS architecture at its default size (`[98, 40]` fbank, 12 classes), the time of one 1 s
//! window (`[1, 98, 40]`) with tract as it ships (its own optimisation of `model.onnx`) and
//! as hush runs it (`KwsClassifier::probs`: hush-tract-ops' kernels swapped in), and of one
//! streaming step (`KwsStream::push` of 100 ms of audio at hop 10: 10 new fbank frames, then
//! the model on the last 98 — or, for `ds-cnn-s+streaming`, `bc-resnet+streaming` and
//! `leak-cnn+streaming`, the architecture's streaming form (valid time padding) over the
//! output frames the hop adds), each the median of `HUSH_BENCH_REPS` runs (default 200) after
//! warm-up. Each run is timed twice: wall clock, and the thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`; both runtimes compute on the calling thread), which the
//! machine's other load does not inflate: on a shared machine a run longer than a scheduler
//! slice is preempted and its wall time grows with the load, a short one's does not, so only
//! CPU times compare runs of different lengths fairly.
//! In the same run, `infer_onnxruntime.py` times onnxruntime (one intra-op thread, as tract
//! runs here) on the same `model.onnx` files and input shape, right after tract on each
//! arch, when `HUSH_BENCH_PYTHON` (or `python3`) has `onnxruntime`; the table gives
//! onnxruntime / tract for both forms. On a machine whose speed drifts from second to second
//! (a shared VM), `HUSH_BENCH_ROUNDS=N` repeats the whole table N times and gives each ratio's
//! median and range over the rounds, every ratio taken between timings seconds apart.
//!
//! Build it with the `release` profile: the `dev` profile compiles tract's graph crates at
//! opt-level 1 with debug assertions (for build time), which makes tract's own loops (its
//! depthwise convolution among them) several times slower than a shipped build.
//!
//! ```text
//! HUSH_BENCH_PYTHON=/work/venv-ort/bin/python HUSH_BENCH_REPS=200 HUSH_BENCH_ROUNDS=5 \
//!     cargo bench -p hush-device --profile release --bench infer
//! ```
//!
//! `HUSH_BENCH_ALTERNATE=N` times, instead of the table, `N` alternating blocks of hush on
//! each architecture's new export and onnxruntime on both of its exports
//! (`alternate_blocks`): the window target's comparison, each block's timings a fraction of
//! a second apart.
//!
//! `HUSH_BENCH_PACKAGES=DIR` writes the packages under `DIR` (one folder an arch) and keeps
//! them, for `examples/op_times.rs`; by default they go to a temporary folder.
//!
//! Record results in BENCHMARKS.md with the command and the machine.

// A bench binary: failures should stop it loudly.
#![allow(clippy::unwrap_used)]
// One libc call: the calling thread's CPU clock.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use burn::tensor::Device;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::{KwsClassifier, KwsStream};
use hush_models::arch::{ArchConfig, IoShape, ARCH_NAMES};
use hush_models::package::{write_package, ModelCard};

const IO: IoShape = IoShape {
    frames: 98,
    bins: 40,
    classes: 12,
};
const RATE: usize = 16_000;
/// Frames between two verdicts of the stream (100 ms at a 10 ms shift).
const HOP: usize = 10;

fn reps() -> usize {
    std::env::var("HUSH_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// A deterministic signal in [-0.5, 0.5).
fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// The calling thread's CPU time in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Wall and CPU seconds of one call of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (T, [f64; 2]) {
    let (w, c) = (Instant::now(), thread_cpu_s());
    let out = f();
    (out, [w.elapsed().as_secs_f64(), thread_cpu_s() - c])
}

/// Medians of wall and CPU times, in milliseconds.
fn median_ms(times: &[[f64; 2]]) -> Timing {
    let median = |k: usize| {
        let mut v: Vec<f64> = times.iter().map(|t| t[k]).collect();
        v.sort_by(f64::total_cmp);
        1e3 * v[v.len() / 2]
    };
    Timing {
        wall: median(0),
        cpu: median(1),
    }
}

/// Median milliseconds of one operation.
#[derive(Clone, Copy)]
struct Timing {
    wall: f64,
    cpu: f64,
}

/// The streaming forms' rows: DS-CNN-S and BC-ResNet with valid time padding and leak-CNN,
/// whose stream steps run their streaming form (each hop computes only its new output
/// frames).
const STREAMING: [&str; 3] = [
    "ds-cnn-s+streaming",
    "bc-resnet+streaming",
    "leak-cnn+streaming",
];

/// Writes a package of `arch` (default size, initial weights; `NAME+streaming` for the
/// architecture's streaming form) into `dir`.
fn package(arch: &str, dir: &Path) -> usize {
    let mut features = FeatureConfig::kaldi(FeatureKind::Fbank);
    features.mel.num_bins = IO.bins;
    let name = arch.trim_end_matches("+streaming");
    let mut cfg = ArchConfig::default_for(name, IO).unwrap();
    if name != arch {
        cfg = cfg.streaming_form().unwrap();
    }
    let device = Device::flex();
    device.seed(1);
    let model = cfg.init(&device).unwrap();
    let mut labels: Vec<String> = (0..IO.classes - 2).map(|i| format!("word{i}")).collect();
    labels.extend(["_silence_".into(), "_unknown_".into()]);
    let card =
        ModelCard::new(cfg, serde_json::to_value(features).unwrap(), labels, &model).unwrap();
    write_package(dir, &card, &model).unwrap();
    card.num_trainable
}

/// Median time of one 1 s window with tract as it ships, without hush's ops
/// (`hush_tract_ops::optimize`): tract's own optimisation of the same `model.onnx`.
fn stock_tract(dir: &Path) -> Timing {
    use tract_onnx::prelude::*;
    let plan = tract_onnx::onnx()
        .model_for_path(dir.join("model.onnx"))
        .unwrap()
        .with_input_fact(0, f32::fact([1, IO.frames, IO.bins]).into())
        .unwrap()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let window: Tensor = tract_ndarray::Array3::from_shape_vec(
        (1, IO.frames, IO.bins),
        noise(IO.frames * IO.bins, 3),
    )
    .unwrap()
    .into();
    let run = || std::hint::black_box(plan.run(tvec![window.clone().into()]).unwrap());
    for _ in 0..5 {
        run();
    }
    let times: Vec<[f64; 2]> = (0..reps()).map(|_| timed(run).1).collect();
    median_ms(&times)
}

/// Median times of one 1 s window and of one streaming step, with tract and hush's ops.
fn tract(dir: &Path) -> (Timing, Timing) {
    let clf = KwsClassifier::load(dir).unwrap();
    let origin = Path::new("bench");
    let window = noise(IO.frames * IO.bins, 3);
    for _ in 0..5 {
        clf.probs(&window, origin).unwrap();
    }
    let times: Vec<[f64; 2]> = (0..reps())
        .map(|_| timed(|| std::hint::black_box(clf.probs(&window, origin).unwrap())).1)
        .collect();
    let window_ms = median_ms(&times);

    let step = HOP * RATE / 100;
    let audio = noise(RATE + (reps() + 5) * step, 5);
    let mut stream = KwsStream::new(&clf, HOP).unwrap();
    assert_eq!(stream.is_incremental(), clf.stream_form().is_some());
    let mut out = Vec::new();
    stream.push(&audio[..RATE], &mut out).unwrap();
    let mut times = Vec::with_capacity(reps());
    for (k, chunk) in audio[RATE..].chunks_exact(step).enumerate() {
        out.clear();
        let ((), t) = timed(|| stream.push(chunk, &mut out).unwrap());
        assert_eq!(out.len(), 1, "one verdict per 100 ms step");
        if k >= 5 {
            times.push(t);
        }
    }
    (window_ms, median_ms(&times))
}

fn python_with_onnxruntime() -> Option<String> {
    std::env::var("HUSH_BENCH_PYTHON")
        .ok()
        .into_iter()
        .chain(["python3".to_string()])
        .find(|py| {
            Command::new(py)
                .args(["-c", "import onnxruntime, numpy"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// onnxruntime's median milliseconds per window for each `(arch, model.onnx)`.
fn onnxruntime(python: &str, models: &[(String, PathBuf)]) -> Option<serde_json::Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/infer_onnxruntime.py");
    let mut cmd = Command::new(python);
    cmd.arg(script).args([
        "--frames",
        &IO.frames.to_string(),
        "--bins",
        &IO.bins.to_string(),
        "--reps",
        &reps().to_string(),
    ]);
    for (arch, path) in models {
        cmd.arg(format!("{arch}={}", path.display()));
    }
    let out = cmd.output().ok()?;
    if !out.status.success() {
        eprintln!(
            "onnxruntime run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// `HUSH_BENCH_ROUNDS` (default 1): how many times each measurement is repeated, tract and
/// onnxruntime alternating, arch by arch.
fn rounds() -> usize {
    std::env::var("HUSH_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// One arch's timings in one round.
struct Row {
    arch: String,
    params: usize,
    stock: Timing,
    window: Timing,
    step: Timing,
    ort: Option<Timing>,
}

/// onnxruntime's timing of one arch's `model.onnx`.
fn onnxruntime_one(python: &str, arch: &str, onnx: &Path) -> Option<Timing> {
    let v = onnxruntime(python, &[(arch.to_string(), onnx.to_path_buf())])?;
    Some(Timing {
        cpu: v["cpu_ms"][arch].as_f64()?,
        wall: v["wall_ms"][arch].as_f64()?,
    })
}

fn print_round(rows: &[Row]) {
    println!(
        "{:<10} {:>9} {:>18} {:>18} {:>18} {:>10} {:>10} {:>18}",
        "arch",
        "params",
        "tract stock",
        "tract+hush ops",
        "ort window",
        "ort/stock",
        "ort/hush",
        "hush stream step"
    );
    let both = |t: Timing| format!("{:.3} ({:.3})", t.cpu, t.wall);
    for r in rows {
        let ratio = |t: Timing| {
            r.ort
                .map_or("-".into(), |o| format!("{:.2}", o.cpu / t.cpu))
        };
        println!(
            "{:<10} {:>9} {:>18} {:>18} {:>18} {:>10} {:>10} {:>18}",
            r.arch,
            r.params,
            both(r.stock),
            both(r.window),
            r.ort.map_or("-".into(), both),
            ratio(r.stock),
            ratio(r.window),
            both(r.step),
        );
    }
}

/// `HUSH_BENCH_ALTERNATE=N`: instead of the table, for each architecture packaged in both
/// exports (`ARCH` and `ARCH+streaming`, whose whole-window model is the new export), `N`
/// blocks of `HUSH_BENCH_REPS` runs each of hush on the new export and onnxruntime on both,
/// one after the other (the order reversed every other block), the ratio of hush's median
/// to onnxruntime's faster median taken within each block: on a machine whose speed drifts
/// over minutes, timings a fraction of a second apart compare fairly where the table's,
/// seconds apart, do not.
fn alternate_blocks() -> Option<usize> {
    std::env::var("HUSH_BENCH_ALTERNATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
}

/// The blocks of [`alternate_blocks`] for `arch`: hush on `new`'s package, onnxruntime on
/// `old`'s and `new`'s `model.onnx` (through `infer_onnxruntime.py --serve`).
fn alternate(python: &str, arch: &str, old: &Path, new: &Path, blocks: usize) {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/infer_onnxruntime.py");
    let mut child = Command::new(python)
        .arg(script)
        .args(["--serve", "--frames", &IO.frames.to_string()])
        .args(["--bins", &IO.bins.to_string()])
        .arg(format!("old={}", old.join("model.onnx").display()))
        .arg(format!("new={}", new.join("model.onnx").display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = child.stdin.take().unwrap();
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    from.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "infer_onnxruntime.py --serve");
    let mut ort = |export: &str| {
        writeln!(to, "{export} {}", reps()).unwrap();
        line.clear();
        from.read_line(&mut line).unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        v["cpu_ms"].as_f64().unwrap()
    };
    let clf = KwsClassifier::load(new).unwrap();
    let (origin, window) = (Path::new("bench"), noise(IO.frames * IO.bins, 3));
    for _ in 0..5 {
        clf.probs(&window, origin).unwrap();
    }
    let hush = || {
        let times: Vec<[f64; 2]> = (0..reps())
            .map(|_| timed(|| std::hint::black_box(clf.probs(&window, origin).unwrap())).1)
            .collect();
        median_ms(&times).cpu
    };
    println!("{arch}: hush on the new export, onnxruntime on the old and the new; ms CPU");
    let (mut ratios, mut h, mut o) = (vec![], vec![], vec![]);
    for block in 0..blocks {
        let [hush_ms, old_ms, new_ms] = if block % 2 == 0 {
            let t = hush();
            [t, ort("old"), ort("new")]
        } else {
            let (n, o) = (ort("new"), ort("old"));
            [hush(), o, n]
        };
        let faster = old_ms.min(new_ms);
        println!(
            "  block {:>2}: hush {hush_ms:.3}  ort old {old_ms:.3} new {new_ms:.3}  hush/ort {:.2}",
            block + 1,
            hush_ms / faster
        );
        ratios.push(hush_ms / faster);
        h.push(hush_ms);
        o.push(faster);
    }
    drop(to);
    child.wait().unwrap();
    println!(
        "{arch:<10} hush/ort(faster) {}; hush {} ms, ort(faster) {} ms",
        spread(ratios),
        spread(h),
        spread(o)
    );
}

/// The median and range of `values`.
fn spread(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    match (values.first(), values.last()) {
        (Some(lo), Some(hi)) => format!("{:.2} [{lo:.2}-{hi:.2}]", values[values.len() / 2]),
        _ => "-".into(),
    }
}

fn main() {
    // As the device binary does (`hush-device`'s main), and as onnxruntime's arena does.
    hush_models::compute::keep_freed_inference_memory();
    let temporary = tempfile::tempdir().unwrap();
    let root = std::env::var_os("HUSH_BENCH_PACKAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| temporary.path().to_path_buf());
    let archs = std::env::var("HUSH_BENCH_ARCHS")
        .unwrap_or_else(|_| format!("{},{}", ARCH_NAMES.join(","), STREAMING.join(",")));
    let packages: Vec<(String, usize, PathBuf)> = archs
        .split(',')
        .map(|arch| {
            let dir = root.join(arch);
            let params = package(arch, &dir);
            (arch.to_string(), params, dir)
        })
        .collect();
    let python = python_with_onnxruntime();
    match &python {
        None => println!("(no Python with onnxruntime: set HUSH_BENCH_PYTHON to compare)"),
        Some(py) => {
            let version = Command::new(py)
                .args(["-c", "import onnxruntime; print(onnxruntime.__version__)"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_default();
            println!("onnxruntime {version} via {py}, timed right after tract on each arch")
        }
    }
    println!(
        "[1, {}, {}] features, {} classes; median of {} runs; milliseconds, CPU time (wall)",
        IO.frames,
        IO.bins,
        IO.classes,
        reps()
    );
    if let (Some(blocks), Some(py)) = (alternate_blocks(), python.as_deref()) {
        for (arch, _, dir) in &packages {
            let new = root.join(format!("{arch}+streaming"));
            if packages.iter().any(|(_, _, d)| *d == new) {
                alternate(py, arch, dir, &new, blocks);
            }
        }
        return;
    }
    let mut all: Vec<Vec<Row>> = Vec::new();
    for round in 0..rounds() {
        let rows: Vec<Row> = packages
            .iter()
            .map(|(arch, params, dir)| {
                let stock = stock_tract(dir);
                let (window, step) = tract(dir);
                let ort = python
                    .as_deref()
                    .and_then(|py| onnxruntime_one(py, arch, &dir.join("model.onnx")));
                Row {
                    arch: arch.clone(),
                    params: *params,
                    stock,
                    window,
                    step,
                    ort,
                }
            })
            .collect();
        if rounds() > 1 {
            println!("round {}", round + 1);
        }
        print_round(&rows);
        all.push(rows);
    }
    if all.len() > 1 && python.is_some() {
        println!(
            "over {} rounds, each ratio taken within its round: median [range]",
            all.len()
        );
        println!(
            "{:<20} {:>18} {:>18} {:>24}",
            "arch", "ort/stock", "ort/hush", "hush step / ort window"
        );
        for (k, (arch, _, _)) in packages.iter().enumerate() {
            let of = |f: &dyn Fn(&Row, Timing) -> f64| {
                spread(
                    all.iter()
                        .filter_map(|rows| rows[k].ort.map(|o| f(&rows[k], o)))
                        .collect(),
                )
            };
            println!(
                "{arch:<20} {:>18} {:>18} {:>24}",
                of(&|r, o| o.cpu / r.stock.cpu),
                of(&|r, o| o.cpu / r.window.cpu),
                of(&|r, o| r.step.cpu / o.cpu),
            );
        }
    }
}
