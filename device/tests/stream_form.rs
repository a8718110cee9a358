//! The streaming form of a keyword spotter (`frames.onnx` + `head.onnx`, written for
//! DS-CNN-S and BC-ResNet with valid time padding and for leak-CNN configured `streaming`):
//! a stream that runs it incrementally gives
//! the whole-window model's probabilities at every hop, within 1e-4, for hops on and off the
//! form's stride, also when a gate skips windows; a package without the form runs the whole
//! window; a package with half the form is refused; a classifier loaded for streams reads
//! the whole-window model only when asked for it.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::{listen_files, BuildReads, KwsClassifier, KwsStream, WindowVerdict};
use hush_models::arch::{
    ArchConfig, BcResNetConfig, DsCnnConfig, IoShape, KwsModel, LeakCnnConfig, TimePadding,
};
use hush_models::export::nnef::{write_pulsed_trunk, NNEF, STREAM_FRAMES_NNEF, STREAM_HEAD_NNEF};
use hush_models::export::{export_package, ExportFormat};
use hush_models::package::{
    write_package, ModelCard, MODEL_JSON, ONNX, STREAM_FRAMES, STREAM_HEAD, WEIGHTS,
};

const RATE: usize = 16_000;

/// Windows of `frames` frames of 40 fbank bins, 10 ms apart, into 5 classes.
fn io(frames: usize) -> IoShape {
    IoShape {
        frames,
        bins: 40,
        classes: 5,
    }
}

/// A DS-CNN-S package over windows of `frames` frames, 16 channels wide instead of 64: what
/// these tests check (which frames each output frame reads, what a stream keeps) does not
/// depend on the width, and a sixteenth of the pointwise convolutions' multiply-adds keeps
/// them affordable under qemu-user, which emulates each one (scripts/test-arm).
fn package(dir: &Path, time_padding: TimePadding, frames: usize) -> KwsModel {
    let arch = ArchConfig::DsCnnS(DsCnnConfig {
        time_padding,
        channels: 16,
        ..DsCnnConfig::small(io(frames))
    });
    package_of(dir, arch)
}

/// A package of `arch` with fresh weights and a sharpened classifier.
fn package_of(dir: &Path, arch: ArchConfig) -> KwsModel {
    let device = Device::flex();
    let mut model = arch.init_seeded(&device, 11).unwrap().valid();
    // A sharper classifier than a fresh one, whose probabilities hardly depend on the
    // input: a window scored from the wrong frames must score visibly differently. (A
    // fresh BC-ResNet's pooled channels vary less from window to window.)
    let scale = |w: &mut burn::module::Param<burn::tensor::Tensor<2>>, by: f32| {
        *w = w.clone().map(|w| w.mul_scalar(by));
    };
    match &mut model {
        KwsModel::DsCnn(m) => scale(&mut m.fc.weight, 200.0),
        KwsModel::BcResNet(m) => scale(&mut m.fc.weight, 200.0),
        KwsModel::LeakCnn(_) => {}
    }
    let mut features = FeatureConfig::kaldi(FeatureKind::Fbank);
    features.mel.num_bins = 40;
    let labels = ["yes", "no", "up", "_silence_", "_unknown_"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let card = ModelCard::new(
        arch,
        serde_json::to_value(features).unwrap(),
        labels,
        &model,
    )
    .unwrap();
    write_package(dir, &card, &model).unwrap();
    model
}

/// Deterministic values in [-0.5, 0.5).
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

/// A few seconds of noise whose level jumps every 10 ms (one frame shift), over six orders
/// of magnitude: every frame differs from its neighbours, so a window scored from the
/// wrong frames scores differently.
fn audio(seconds: usize) -> Vec<f32> {
    let levels = noise(seconds * 100, 3);
    noise(seconds * RATE, 7)
        .iter()
        .enumerate()
        .map(|(i, x)| x * 10f32.powf(-6.0 * (levels[i / 160] + 0.5)))
        .collect()
}

/// Windows a hop loop scores at each hop, at most: enough for every phase of each form's
/// stride and each pulse, few enough for the device tests cross-built for ARM, which run
/// under qemu-user.
const WINDOWS_PER_HOP: usize = 40;

/// The first samples of `samples`, from which a stream of 40-frame windows at `hop` frames
/// scores `WINDOWS_PER_HOP` windows (all of `samples` when they give fewer).
fn first_windows(samples: &[f32], hop: usize) -> &[f32] {
    let frames = 42 + WINDOWS_PER_HOP * hop;
    &samples[..(frames * RATE / 100).min(samples.len())]
}

/// Every verdict of `stream` over `samples` pushed 100 ms at a time, scoring only the
/// windows `gate` lets through.
fn verdicts(
    stream: &mut KwsStream,
    samples: &[f32],
    gate: impl Fn(u64) -> bool,
) -> Vec<WindowVerdict> {
    let mut out = Vec::new();
    for chunk in samples.chunks(RATE / 10) {
        stream.push_gated(chunk, &mut out, &gate).unwrap();
    }
    out
}

fn assert_same(incremental: &[WindowVerdict], whole: &[WindowVerdict]) {
    assert_eq!(incremental.len(), whole.len());
    for (a, b) in incremental.iter().zip(whole) {
        assert_eq!(a.end_s, b.end_s);
        for (p, q) in a.probs.iter().zip(&b.probs) {
            assert!(
                (p - q).abs() <= 1e-4,
                "at {} s: {:?} against {:?}",
                a.end_s,
                a.probs,
                b.probs
            );
        }
    }
}

/// The windows' probabilities differ: scores from the wrong frames would be told apart.
fn assert_windows_differ(windows: &[WindowVerdict], hop: usize) {
    let first = &windows[0].probs;
    let spread = windows
        .iter()
        .flat_map(|v| v.probs.iter().zip(first).map(|(p, q)| (p - q).abs()))
        .fold(0f32, f32::max);
    assert!(
        spread > 1e-2,
        "hop {hop}: the probabilities hardly move ({spread}; first window {first:?})"
    );
}

/// A stream at `hop` that runs the streaming form (pulsed or not, as `pulsed` says) gives
/// the whole-window model's probabilities on every window of `samples`' first
/// `WINDOWS_PER_HOP` (at least `min_windows` of them), and those move from window to window.
fn assert_hop_streams_the_whole_window(
    clf: &KwsClassifier,
    samples: &[f32],
    hop: usize,
    pulsed: bool,
    min_windows: usize,
) {
    let mut incremental = KwsStream::new(clf, hop).unwrap();
    let mut whole = KwsStream::whole_window(clf, hop).unwrap();
    assert!(incremental.is_incremental() && !whole.is_incremental());
    assert_eq!(incremental.is_pulsed(), pulsed, "hop {hop}");
    let samples = first_windows(samples, hop);
    let a = verdicts(&mut incremental, samples, |_| true);
    let b = verdicts(&mut whole, samples, |_| true);
    let min_windows = min_windows.min(WINDOWS_PER_HOP);
    assert!(a.len() >= min_windows, "hop {hop}: {} windows", a.len());
    assert_same(&a, &b);
    assert_windows_differ(&b, hop);
}

/// The package in `dir` exported as NNEF archives, its trunk pulsed on the host `pulse`
/// frames at a time and its ONNX files removed (what a device built without ONNX or
/// tract-pulse reads: tract-pulse-opl's delay lines alone), streams at a `pulse`-frame hop
/// what `clf` streams whole.
fn assert_host_pulsed_archive_streams_the_same(
    dir: &Path,
    clf: &KwsClassifier,
    samples: &[f32],
    pulse: usize,
) {
    export_package(dir, ExportFormat::Nnef, None).unwrap();
    write_pulsed_trunk(dir, pulse).unwrap();
    for f in [STREAM_FRAMES, STREAM_HEAD, "model.onnx"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    let from_archive = KwsClassifier::load(dir).unwrap();
    let mut pulsed = KwsStream::new(&from_archive, pulse).unwrap();
    assert!(pulsed.is_pulsed());
    let mut whole = KwsStream::whole_window(clf, pulse).unwrap();
    assert_same(
        &verdicts(&mut pulsed, samples, |_| true),
        &verdicts(&mut whole, samples, |_| true),
    );
}

#[test]
fn the_streaming_form_equals_the_whole_window_model_at_every_hop() {
    let tmp = tempfile::tempdir().unwrap();
    package(tmp.path(), TimePadding::Valid, 40);
    let clf = KwsClassifier::load(tmp.path()).unwrap();
    let form = clf
        .stream_form()
        .expect("a valid-padded DS-CNN-S package has a streaming form");
    let g = form.geometry();
    assert_eq!((g.receptive_field, g.stride, g.window_vectors), (26, 2, 8));
    let samples = audio(4);
    for hop in [2, 6, 10, 40] {
        // On the stride, the trunk runs pulsed by tract when a run gives two output frames
        // or more (at a 6-frame hop, after two zero frames, so that its runs end where the
        // 40-frame windows do); a hop of one output frame runs the grid of output frames.
        assert_hop_streams_the_whole_window(&clf, &samples, hop, hop >= 4, 350 / hop);
    }
}

/// The package with its model files as NNEF archives only (`hush-host export --format nnef`,
/// the ONNX files removed: what a device built without ONNX reads) streams, pulsed and
/// not, what its ONNX files stream.
#[test]
fn the_streaming_form_read_from_its_archives_streams_what_the_onnx_files_do() {
    let tmp = tempfile::tempdir().unwrap();
    let (both, nnef_only) = (tmp.path().join("both"), tmp.path().join("nnef"));
    package(&both, TimePadding::Valid, 40);
    let done = export_package(&both, ExportFormat::Nnef, None).unwrap();
    assert_eq!(
        done.stream,
        [both.join(STREAM_FRAMES_NNEF), both.join(STREAM_HEAD_NNEF)]
    );
    // A copy, not a second package: burn's random state is the process's, and the tests
    // running beside this one draw from it too.
    std::fs::create_dir(&nnef_only).unwrap();
    for f in [
        NNEF,
        STREAM_FRAMES_NNEF,
        STREAM_HEAD_NNEF,
        MODEL_JSON,
        WEIGHTS,
    ] {
        std::fs::copy(both.join(f), nnef_only.join(f)).unwrap();
    }
    // The trunk pulsed 10 frames at a time, as a 10-frame hop runs it, prepared on the host.
    let written = write_pulsed_trunk(&both, 10).unwrap();
    assert_eq!(written, both.join("frames.pulse10.nnef.tar"));
    let pulsed = nnef_only.join("frames.pulse10.nnef.tar");
    std::fs::rename(&written, &pulsed).unwrap();
    let a = KwsClassifier::load(&both).unwrap();
    let b = KwsClassifier::load(&nnef_only).unwrap();
    assert!(b.stream_form().is_some());
    // Without its archive, the trunk runs pulsed only where this build links tract-pulse.
    assert_eq!(
        KwsStream::new(&a, 10).unwrap().is_pulsed(),
        cfg!(feature = "pulse")
    );
    let samples = audio(3);
    for hop in [2, 10] {
        let samples = first_windows(&samples, hop);
        let mut from_onnx = KwsStream::new(&a, hop).unwrap();
        let mut from_nnef = KwsStream::new(&b, hop).unwrap();
        assert!(from_nnef.is_incremental());
        assert_eq!(from_nnef.is_pulsed(), hop == 10, "hop {hop}");
        let (x, y) = (
            verdicts(&mut from_onnx, samples, |_| true),
            verdicts(&mut from_nnef, samples, |_| true),
        );
        assert_same(&y, &x);
        let mut whole = KwsStream::whole_window(&b, hop).unwrap();
        assert_same(&y, &verdicts(&mut whole, samples, |_| true));
    }
    // An archive that is not the pulse its name says is refused, named.
    std::fs::rename(&pulsed, nnef_only.join("frames.pulse4.nnef.tar")).unwrap();
    let e = KwsStream::new(&b, 4).unwrap_err().to_string();
    assert!(
        e.contains("frames.pulse4.nnef.tar") && e.contains("expected [1, 4, 40]"),
        "{e}"
    );
}

/// `hush-host export --format nnef` prepares the trunk pulsed as `listen` runs it by default:
/// a 100 ms hop at a 10 ms shift is 10 frames, run 10 at a time.
#[cfg(feature = "pulse")]
#[test]
fn the_listen_archive_is_the_trunk_pulsed_at_the_default_hop() {
    let tmp = tempfile::tempdir().unwrap();
    package(tmp.path(), TimePadding::Valid, 40);
    let path = hush_device::infer::write_listen_archive(tmp.path()).unwrap();
    assert_eq!(path, Some(tmp.path().join("frames.pulse10.nnef.tar")));
    let same = tempfile::tempdir().unwrap();
    package(same.path(), TimePadding::Same, 40);
    assert_eq!(
        hush_device::infer::write_listen_archive(same.path()).unwrap(),
        None
    );
}

/// What a device downloads to listen with a package: its ONNX files, or in a build without
/// tract's ONNX parser their archives, and in one that does not pulse the trunk itself the
/// trunk pulsed as `listen` runs it (the archive `write_listen_archive` writes).
#[test]
fn listen_files_names_the_onnx_files_or_their_archives() {
    let tmp = tempfile::tempdir().unwrap();
    package(tmp.path(), TimePadding::Valid, 40);
    let build = |onnx, pulse| BuildReads { onnx, pulse };
    let files = |dir: &Path, b| listen_files(dir, b).unwrap();
    assert_eq!(
        files(tmp.path(), build(true, true)),
        ["model.onnx", "frames.onnx", "head.onnx"]
    );
    assert_eq!(
        files(tmp.path(), build(false, true)),
        ["model.nnef.tar", "frames.nnef.tar", "head.nnef.tar"]
    );
    assert_eq!(
        files(tmp.path(), build(false, false)),
        [
            "model.nnef.tar",
            "frames.nnef.tar",
            "head.nnef.tar",
            "frames.pulse10.nnef.tar"
        ]
    );
    // Without a streaming form, the whole model only.
    let same = tempfile::tempdir().unwrap();
    package(same.path(), TimePadding::Same, 40);
    assert_eq!(files(same.path(), build(true, false)), ["model.onnx"]);
    assert_eq!(files(same.path(), build(false, false)), ["model.nnef.tar"]);
}

/// The trunk's output frame `j` reads only input frames `[2j, 2j + 26)`: a chunk of those
/// frames gives the same channel values as the whole window (DS-CNN-S's full size, 98
/// frames), and the head over their mean gives the whole-window model's probabilities,
/// which are burn's.
#[test]
fn each_output_frame_reads_only_its_own_input_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let model = package(tmp.path(), TimePadding::Valid, 98);
    let clf = KwsClassifier::load(tmp.path()).unwrap();
    let form = clf.stream_form().unwrap();
    let (g, c, bins) = (form.geometry(), form.channels(), 40);
    assert_eq!((g.receptive_field, g.stride, g.window_vectors), (26, 2, 37));
    let features: Vec<f32> = noise(98 * bins, 5).iter().map(|x| 8.0 * x).collect();
    let mut whole = Vec::new();
    form.frame_vectors(&form.trunk_plan(98).unwrap(), &features, 98, &mut whole)
        .unwrap();
    assert_eq!(whole.len(), 37 * c);
    for (first, count) in [(0, 1), (5, 3), (36, 1), (10, 27)] {
        let frames = (count - 1) * g.stride + g.receptive_field;
        let chunk = &features[first * g.stride * bins..(first * g.stride + frames) * bins];
        let mut part = Vec::new();
        form.frame_vectors(&form.trunk_plan(frames).unwrap(), chunk, frames, &mut part)
            .unwrap();
        for (a, b) in part.iter().zip(&whole[first * c..(first + count) * c]) {
            assert!(
                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "frames {first}+{count}: {a} against {b}"
            );
        }
    }
    let mut pooled = vec![0f32; c];
    for v in whole.chunks_exact(c) {
        pooled.iter_mut().zip(v).for_each(|(p, x)| *p += x / 37.0);
    }
    let streamed = form.probs(&pooled).unwrap();
    let window = clf.probs(&features, Path::new("window")).unwrap();
    // burn's forward of the same weights (valid padding in time, in both)
    let x = burn::tensor::Tensor::<3>::from_data(
        burn::tensor::TensorData::new(features.clone(), [1, 98, bins]),
        &Device::flex(),
    );
    let burn = softmax(&hush_models::step::logits(&model, x).unwrap().concat());
    for ((a, b), c) in streamed.iter().zip(&window).zip(&burn) {
        assert!(
            (a - b).abs() <= 1e-5 && (b - c).abs() <= 1e-4,
            "streamed {streamed:?}, window {window:?}, burn {burn:?}"
        );
    }
}

/// BC-ResNet's streaming form (time stride 1, a receptive field of 33 frames, each block's
/// shortcut cropped to the frames its temporal conv keeps) streams the whole-window
/// model's probabilities at every hop, pulsed (where this build pulses, or from the host's
/// archive) and not; and the whole window is burn's.
#[test]
fn bc_resnets_streaming_form_equals_its_whole_window_model() {
    let tmp = tempfile::tempdir().unwrap();
    let arch = ArchConfig::BcResNet(BcResNetConfig {
        time_padding: TimePadding::Valid,
        ..BcResNetConfig::new(io(40))
    });
    let model = package_of(tmp.path(), arch);
    let clf = KwsClassifier::load(tmp.path()).unwrap();
    let form = clf
        .stream_form()
        .expect("a valid-padded BC-ResNet package has a streaming form");
    let g = form.geometry();
    assert_eq!((g.receptive_field, g.stride, g.window_vectors), (33, 1, 8));
    // Louder and quieter stretches (a period of 0.3 s, under a window's 0.4 s) over the
    // frame-to-frame jumps: a fresh BC-ResNet's pooled channels follow the loudness of the
    // whole window, and at a hop of one frame the hop loop scores 0.8 s.
    let samples: Vec<f32> = audio(3)
        .iter()
        .enumerate()
        .map(|(i, x)| x * 10f32.powf(3.0 * (i as f32 / 800.0).sin()))
        .collect();
    for hop in [1, 3, 10] {
        // Hops of 3 and 10 frames run the trunk pulsed, a hop a run (3 after two zero
        // frames: 40 is no multiple of 3); a hop of 1 recomputes its frame's receptive field.
        let pulsed = hop > 1 && cfg!(feature = "pulse");
        assert_hop_streams_the_whole_window(&clf, &samples, hop, pulsed, 250 / hop);
    }
    assert_host_pulsed_archive_streams_the_same(tmp.path(), &clf, &samples, 10);

    let features: Vec<f32> = noise(40 * 40, 5).iter().map(|x| 8.0 * x).collect();
    let window = clf.probs(&features, Path::new("window")).unwrap();
    let x = burn::tensor::Tensor::<3>::from_data(
        burn::tensor::TensorData::new(features.clone(), [1, 40, 40]),
        &Device::flex(),
    );
    let burn = softmax(&hush_models::step::logits(&model, x).unwrap().concat());
    for (a, b) in window.iter().zip(&burn) {
        assert!((a - b).abs() <= 1e-4, "window {window:?}, burn {burn:?}");
    }
}

/// Leak-CNN's streaming form (its conv stack per output frame, the two FC layers over a
/// window's frames in order) streams the whole-window model's probabilities at every hop,
/// pulsed (where this build pulses, or from the host's archive) and not.
#[test]
fn leak_cnns_streaming_form_equals_its_whole_window_model() {
    let tmp = tempfile::tempdir().unwrap();
    let arch = ArchConfig::LeakCnn(LeakCnnConfig {
        channels: [4, 8],
        hidden: 16,
        ..LeakCnnConfig::new(io(40))
    });
    assert!(arch.stream_geometry().is_none(), "opt-in: {arch:?}");
    let arch = arch.streaming_form().unwrap();
    package_of(tmp.path(), arch);
    let clf = KwsClassifier::load(tmp.path()).unwrap();
    let form = clf
        .stream_form()
        .expect("a leak-CNN package configured `streaming` has a streaming form");
    let g = form.geometry();
    assert_eq!((g.receptive_field, g.stride, g.window_vectors), (10, 4, 8));
    // 8 channels × 8 bins after two 2×2 pools of 40 bins.
    assert_eq!(form.channels(), 64);
    let samples = audio(3);
    for hop in [1, 4, 8, 12] {
        // Hops of 8 and 12 frames run the trunk pulsed, a hop a run (8 with no zero frames:
        // 40 − 10 leaves 2 input frames no output frame reads; 12 after 8 zero frames);
        // hops of 1 and 4 are one output frame at most, recomputed.
        let pulsed = hop >= 8 && cfg!(feature = "pulse");
        assert_hop_streams_the_whole_window(&clf, &samples, hop, pulsed, 250 / hop);
    }
    assert_host_pulsed_archive_streams_the_same(tmp.path(), &clf, &samples, 8);
}

fn softmax(logits: &[f32]) -> Vec<f32> {
    let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = logits.iter().map(|v| (v - top).exp()).collect();
    e.iter().map(|v| v / e.iter().sum::<f32>()).collect()
}

#[test]
fn windows_a_gate_skipped_are_computed_again() {
    let tmp = tempfile::tempdir().unwrap();
    package(tmp.path(), TimePadding::Valid, 40);
    let clf = KwsClassifier::load(tmp.path()).unwrap();
    let samples = audio(5);
    // Runs of scored and skipped windows of several lengths.
    let gate = |end: u64| !matches!((end / 1600) % 7, 2 | 4 | 5);
    let a = verdicts(&mut KwsStream::new(&clf, 10).unwrap(), &samples, gate);
    let b = verdicts(
        &mut KwsStream::whole_window(&clf, 10).unwrap(),
        &samples,
        gate,
    );
    assert!(a.len() > 10);
    assert_same(&a, &b);
}

/// A hop that is not a multiple of the stride (listen's 100 ms at a 20 ms shift is 5
/// frames) alternates between the two phases of the stride, each keeping its own frames.
#[test]
fn a_hop_off_the_stride_runs_incrementally_on_both_phases() {
    let tmp = tempfile::tempdir().unwrap();
    package(tmp.path(), TimePadding::Valid, 40);
    let clf = KwsClassifier::load(tmp.path()).unwrap();
    let samples = audio(4);
    for hop in [1, 5, 7] {
        let mut incremental = KwsStream::new(&clf, hop).unwrap();
        assert!(incremental.is_incremental() && !incremental.is_pulsed());
        let samples = first_windows(&samples, hop);
        let a = verdicts(&mut incremental, samples, |_| true);
        let b = verdicts(
            &mut KwsStream::whole_window(&clf, hop).unwrap(),
            samples,
            |_| true,
        );
        assert!(a.len() >= WINDOWS_PER_HOP, "hop {hop}: {} windows", a.len());
        assert_same(&a, &b);
    }
}

#[test]
fn a_same_padded_package_has_no_streaming_form() {
    let tmp = tempfile::tempdir().unwrap();
    package(tmp.path(), TimePadding::Valid, 40);
    // Rewriting the package without the form leaves no stale files behind.
    package(tmp.path(), TimePadding::Same, 40);
    assert!(!tmp.path().join(STREAM_FRAMES).exists() && !tmp.path().join(STREAM_HEAD).exists());
    let clf = KwsClassifier::load(tmp.path()).unwrap();
    assert!(clf.stream_form().is_none());
    assert!(!KwsStream::new(&clf, 10).unwrap().is_incremental());
}

/// A stream runs the streaming form, so a classifier loaded for streams leaves the
/// whole-window model (`model.onnx`) unread until something asks for it, while `load` reads
/// and checks it at once; a package without the form is checked at load either way.
#[test]
fn a_classifier_loaded_for_streams_reads_the_whole_window_model_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    package(tmp.path(), TimePadding::Valid, 40);
    let samples = audio(3);
    let samples = first_windows(&samples, 10);
    let clf = KwsClassifier::load(tmp.path()).unwrap();
    let good = verdicts(&mut KwsStream::new(&clf, 10).unwrap(), samples, |_| true);
    assert!(good.len() > 10);

    std::fs::write(tmp.path().join(ONNX), b"not a model").unwrap();
    let refused = |e: String| e.contains(ONNX) && e.contains("cannot load this model");
    let e = KwsClassifier::load(tmp.path()).unwrap_err().to_string();
    assert!(refused(e.clone()), "{e}");
    let clf = KwsClassifier::load_for_streams(tmp.path()).unwrap();
    let mut stream = KwsStream::new(&clf, 10).unwrap();
    assert!(stream.is_incremental());
    assert_eq!(verdicts(&mut stream, samples, |_| true), good);
    // Asked for, the whole-window model is read then, and refused with the same error.
    let e = clf.probs(&[0.0; 40 * 40], Path::new("window")).unwrap_err();
    assert!(refused(e.to_string()), "{e}");
    let mut whole = KwsStream::whole_window(&clf, 10).unwrap();
    let e = whole.push(samples, &mut Vec::new()).unwrap_err();
    assert!(refused(e.to_string()), "{e}");

    package(tmp.path(), TimePadding::Same, 40);
    std::fs::write(tmp.path().join(ONNX), b"not a model").unwrap();
    let e = KwsClassifier::load_for_streams(tmp.path())
        .unwrap_err()
        .to_string();
    assert!(refused(e.clone()), "{e}");
}

#[test]
fn half_a_streaming_form_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    package(tmp.path(), TimePadding::Valid, 40);
    std::fs::remove_file(tmp.path().join(STREAM_HEAD)).unwrap();
    let err = KwsClassifier::load(tmp.path()).unwrap_err().to_string();
    assert!(
        err.contains(STREAM_HEAD) && err.contains("missing"),
        "{err}"
    );
}
