//! `hush-host export`, run as a user would: the bundled ASR package's ONNX file is what its
//! weights export to; NNEF goes where `--out` says; an unknown format, a missing directory
//! and a directory that is no package are refused with errors that name them.

use std::path::Path;
use std::process::{Command, Output};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn hush_host(args: &[&str]) -> Result<Output, std::io::Error> {
    Command::new(env!("CARGO_BIN_EXE_hush-host"))
        .arg("export")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_bundled_asr_package_exports_to_its_own_onnx_file_and_to_nnef() -> TestResult {
    let bundled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/asr");
    let dir = tempfile::tempdir()?;
    let onnx = dir.path().join("asr.onnx");
    let out = hush_host(&[
        "--model",
        bundled.to_str().ok_or("path")?,
        "--out",
        onnx.to_str().ok_or("path")?,
    ])?;
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("ctc-gru asr model") && said.contains("asr.onnx"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&onnx)?,
        std::fs::read(bundled.join("model.onnx"))?
    );

    let out = hush_host(&[
        "--model",
        bundled.to_str().ok_or("path")?,
        "--format",
        "nnef",
        "--out",
        dir.path().to_str().ok_or("path")?,
    ])?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("model.nnef.tar").is_file());
    Ok(())
}

#[test]
fn bad_formats_and_directories_are_refused_by_name() -> TestResult {
    let dir = tempfile::tempdir()?;
    let d = dir.path().to_str().ok_or("path")?;

    let out = hush_host(&["--model", d, "--format", "tflite"])?;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(
        e.contains("tflite") && e.contains("onnx") && e.contains("nnef"),
        "{e}"
    );

    let missing = dir.path().join("nope");
    let out = hush_host(&["--model", missing.to_str().ok_or("path")?])?;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("nope") && e.contains("not a directory"), "{e}");

    let out = hush_host(&["--model", d])?;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("model.json"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path())?.count(), 0, "nothing written");
    Ok(())
}

/// A keyword spotter with a streaming form (DS-CNN-S, no time padding, 40 frames of 40 bins
/// 10 ms apart) in `dir`.
fn streaming_package(dir: &Path) -> TestResult {
    use burn::module::Module;
    use hush_device::features::{FeatureConfig, FeatureKind};
    use hush_models::arch::{ArchConfig, DsCnnConfig, IoShape, TimePadding};
    use hush_models::package::{write_package, ModelCard};
    let io = IoShape {
        frames: 40,
        bins: 40,
        classes: 3,
    };
    let arch = ArchConfig::DsCnnS(DsCnnConfig {
        time_padding: TimePadding::Valid,
        ..DsCnnConfig::small(io)
    });
    let model = arch.init(&burn::tensor::Device::flex())?.valid();
    let mut features = FeatureConfig::kaldi(FeatureKind::Fbank);
    features.mel.num_bins = 40;
    let labels = ["yes", "_silence_", "_unknown_"].map(String::from).to_vec();
    let card = ModelCard::new(arch, serde_json::to_value(features)?, labels, &model)?;
    write_package(dir, &card, &model)?;
    Ok(())
}

#[test]
fn nnef_export_writes_every_archive_a_device_without_onnx_reads() -> TestResult {
    let dir = tempfile::tempdir()?;
    // One ONNX file (the bundled Silero VAD, copied): its archive beside it.
    let vad = dir.path().join("vad.onnx");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/vad/silero_vad_16k_sequence.onnx"),
        &vad,
    )?;
    let v = vad.to_str().ok_or("path")?;
    let out = hush_host(&["--model", v])?;
    assert!(!out.status.success());
    let e = stderr(&out);
    assert!(e.contains("vad.onnx") && e.contains("--format nnef"), "{e}");
    let out = hush_host(&["--model", v, "--format", "nnef"])?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("vad.nnef.tar").is_file());

    // A streaming package: the model, its trunk and head, and the trunk pulsed as listen
    // runs it by default (a 100 ms hop is 10 frames, run 10 at a time).
    let pkg = dir.path().join("pkg");
    streaming_package(&pkg)?;
    let out = hush_host(&["--model", pkg.to_str().ok_or("path")?, "--format", "nnef"])?;
    assert!(out.status.success(), "{}", stderr(&out));
    for f in [
        "model.nnef.tar",
        "frames.nnef.tar",
        "head.nnef.tar",
        "frames.pulse10.nnef.tar",
    ] {
        assert!(pkg.join(f).is_file(), "{f} not written");
    }
    Ok(())
}
