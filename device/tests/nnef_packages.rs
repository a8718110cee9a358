//! Packages whose model files are NNEF archives only (`hush-host export --format nnef`, the
//! ONNX files gone), as a device built without tract's ONNX parser reads them: keyword
//! spotters of every architecture give the ONNX files' probabilities, the bundled
//! recogniser's committed archive its log-probabilities and text, Silero VAD's committed
//! archive onnxruntime's speech probabilities (the reference of `vad.rs`); a missing,
//! corrupt or foreign archive is refused naming the file. The streaming form's archives are
//! checked in `stream_form.rs`; that the committed archives are current, in hush-models'
//! `bundled_archives.rs`.
//!
//! CI runs these tests in the default build (ONNX files read where there, archives
//! otherwise) and in the inference-only build (`--no-default-features`: archives only).

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use common::repo;
use hush_device::audio::read_audio;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::{clip_features, AsrRecognizer, KwsClassifier, SileroVad};
use hush_models::arch::{ArchConfig, IoShape, ARCH_NAMES};
use hush_models::export::{export_package, ExportFormat};
use hush_models::package::{write_package, ModelCard, ONNX};

const IO: IoShape = IoShape {
    frames: 49,
    bins: 20,
    classes: 4,
};

/// A keyword-spotting package of `arch` in `dir`, exported to NNEF too.
fn kws_package(dir: &Path, arch: &str) {
    let cfg = ArchConfig::default_for(arch, IO).unwrap();
    let device = Device::flex();
    let model = cfg.init_seeded(&device, 21).unwrap().valid();
    let mut features = FeatureConfig::kaldi(FeatureKind::Fbank);
    features.mel.num_bins = IO.bins;
    features.frame.frame_shift_ms = 20.0;
    let labels = ["yes", "no", "_silence_", "_unknown_"]
        .map(String::from)
        .to_vec();
    let card =
        ModelCard::new(cfg, serde_json::to_value(features).unwrap(), labels, &model).unwrap();
    write_package(dir, &card, &model).unwrap();
    let done = export_package(dir, ExportFormat::Nnef, None).unwrap();
    assert_eq!(done.path, dir.join("model.nnef.tar"));
}

/// `from` copied to `to` without its ONNX files: what a device without the ONNX parser is
/// given. (A copy, not a second package: burn's random state is the process's, and tests
/// running beside this one draw from it too.)
fn copy_without_onnx(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_none_or(|e| e != "onnx") {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Three clips of the bundled corpus, and their features for `clf`.
fn clip_windows(clf: &KwsClassifier) -> Vec<Vec<f32>> {
    [
        "stop/01fddb35_nohash_0.flac",
        "yes/077e3ee3_nohash_0.flac",
        "go/01fddb35_nohash_0.flac",
    ]
    .iter()
    .map(|c| read_audio(&repo(&format!("data/corpus/kws/{c}"))).unwrap())
    .map(|a| clip_features(clf.features(), &a.samples, IO.frames).unwrap())
    .collect()
}

#[test]
fn every_kws_architecture_read_from_its_archive_gives_the_onnx_files_probabilities() {
    for arch in ARCH_NAMES {
        let tmp = tempfile::tempdir().unwrap();
        let (both, nnef_only) = (tmp.path().join("both"), tmp.path().join("nnef"));
        kws_package(&both, arch);
        copy_without_onnx(&both, &nnef_only);
        let a = KwsClassifier::load(&both).unwrap();
        let b = KwsClassifier::load(&nnef_only).unwrap();
        let windows = clip_windows(&a);
        for (i, w) in windows.iter().enumerate() {
            let (pa, pb) = (
                a.probs(w, Path::new("a")).unwrap(),
                b.probs(w, Path::new("b")).unwrap(),
            );
            assert!(
                max_diff(&pa, &pb) <= 1e-5,
                "{arch}, clip {i}: {pa:?} against {pb:?}"
            );
        }
        // On x86-64 hush's kernels go into the archive's graph as into the ONNX file's. (On
        // aarch64, where tract keeps its own depthwise kernel, the two graphs reach hush's
        // swaps in different forms: a sum is swapped in one only.)
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                a.hush_kernels().unwrap(),
                b.hush_kernels().unwrap(),
                "{arch}"
            );
        }
        // The command line classifies with the archive-only package as the library does.
        let clip = repo("data/corpus/kws/stop/01fddb35_nohash_0.flac");
        let (ok, stdout, stderr) = common::run(
            "classify",
            &[
                "--model",
                nnef_only.to_str().unwrap(),
                clip.to_str().unwrap(),
            ],
        );
        assert!(ok, "{arch}: {stderr}");
        let line: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        let want = a.classify_file(&clip).unwrap();
        assert_eq!(line["label"], want.label, "{arch}");
        assert!((line["score"].as_f64().unwrap() - f64::from(want.score)).abs() < 1e-5);
    }
}

#[test]
fn the_bundled_recogniser_read_from_its_archive_transcribes_as_from_onnx() {
    let bundled = repo("models/asr");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    copy_without_onnx(&bundled, dir);
    assert!(!dir.join(ONNX).exists() && dir.join("model.nnef.tar").is_file());
    let a = AsrRecognizer::load(&bundled).unwrap();
    let b = AsrRecognizer::load(dir).unwrap();
    let clip = repo("data/corpus/asr/c8946917/0/c8946917-0-0000.flac");
    let audio = read_audio(&clip).unwrap();
    let feats = hush_device::infer::utterance_features(a.features(), &audio.samples).unwrap();
    let (la, lb) = (
        a.log_probs(&feats, &clip).unwrap(),
        b.log_probs(&feats, &clip).unwrap(),
    );
    assert!(la.len() > 29 * 10, "{} log-probabilities", la.len());
    assert!(max_diff(&la, &lb) <= 1e-4, "{}", max_diff(&la, &lb));
    let decoder = hush_device::infer::Decoder::Greedy;
    let (ta, tb) = (
        a.transcribe_audio(&audio, &clip, &decoder).unwrap(),
        b.transcribe_audio(&audio, &clip, &decoder).unwrap(),
    );
    assert_eq!(ta.text, tb.text);
}

#[test]
fn silero_vad_read_from_its_archive_gives_onnxruntimes_speech_probabilities() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = "silero_vad_16k_sequence.nnef.tar";
    std::fs::copy(repo("models/vad").join(archive), tmp.path().join(archive)).unwrap();
    // Asked for the ONNX file, which is not there: the archive beside it is read.
    let mut vad = SileroVad::load(&tmp.path().join("silero_vad_16k_sequence.onnx")).unwrap();
    let (signal, expected) = common::vad_reference();
    let mut probs = Vec::new();
    for piece in signal.chunks(320) {
        vad.push(piece, &mut probs).unwrap();
    }
    assert_eq!(probs.len(), expected.len());
    for (k, (got, want)) in probs.iter().zip(&expected).enumerate() {
        assert!(
            (f64::from(*got) - want).abs() < 1e-4,
            "frame {k}: tract on the archive {got}, onnxruntime {want}"
        );
    }
}

fn load_err(dir: &Path) -> String {
    KwsClassifier::load(dir).unwrap_err().to_string()
}

#[test]
fn a_missing_corrupt_or_foreign_archive_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pkg");
    kws_package(&tmp.path().join("both"), "ds-cnn-s");
    copy_without_onnx(&tmp.path().join("both"), &dir);
    let archive: PathBuf = dir.join("model.nnef.tar");
    let good = std::fs::read(&archive).unwrap();

    std::fs::remove_file(&archive).unwrap();
    let e = load_err(&dir);
    assert!(
        e.contains("model.onnx") && e.contains("model.nnef.tar"),
        "{e}"
    );
    if cfg!(feature = "onnx") {
        assert!(e.contains("missing file"), "{e}");
    } else {
        assert!(e.contains("reads NNEF archives only"), "{e}");
    }

    std::fs::write(&archive, &good[..good.len() / 2]).unwrap();
    let e = load_err(&dir);
    assert!(
        e.contains("model.nnef.tar") && e.contains("cannot load this model"),
        "{e}"
    );

    // Another architecture's archive: its input is not this model's.
    let other = tmp.path().join("other");
    let cfg = ArchConfig::default_for("ds-cnn-s", IoShape { frames: 30, ..IO }).unwrap();
    let model = cfg.init_seeded(&Device::flex(), 2).unwrap().valid();
    let card = ModelCard::new(
        cfg,
        serde_json::to_value(FeatureConfig::kaldi(FeatureKind::Fbank)).unwrap(),
        ["a", "b", "c", "d"].map(String::from).to_vec(),
        &model,
    )
    .unwrap();
    write_package(&other, &card, &model).unwrap();
    export_package(&other, ExportFormat::Nnef, None).unwrap();
    std::fs::copy(other.join("model.nnef.tar"), &archive).unwrap();
    let e = load_err(&dir);
    assert!(
        e.contains("model.nnef.tar") && e.contains("not the model model.json describes"),
        "{e}"
    );
}
