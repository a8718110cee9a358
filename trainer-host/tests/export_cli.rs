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
