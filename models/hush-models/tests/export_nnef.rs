//! `export_package`: the NNEF archive tract writes loads back in tract and gives the ONNX
//! file's outputs (and burn's) for every architecture; ONNX export rewrites the package's
//! own file byte for byte; a failed export names what is wrong and leaves nothing behind.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{
    max_abs, onnx_typed, run_burn_ctc, run_burn_kws, run_tract, seeded_ctc, seeded_kws, spread,
    tiny_ctc, Rng,
};
use hush_models::arch::{ArchConfig, DsCnnConfig, IoShape, TimePadding, ARCH_NAMES};
use hush_models::asr::Vocabulary;
use hush_models::export::nnef::nnef;
use hush_models::export::{export_package, ExportFormat};
use hush_models::package::{write_asr_package, write_package, AsrCard, ModelCard};
use tract_onnx::prelude::Framework;

const IO: IoShape = IoShape {
    frames: 49,
    bins: 10,
    classes: 4,
};

fn kws_package(dir: &Path, arch: &str) -> hush_models::arch::KwsModel {
    let cfg = ArchConfig::default_for(arch, IO).unwrap();
    let model = seeded_kws(&cfg, 0x5EED);
    let labels = ["yes", "no", "_silence_", "_unknown_"]
        .map(String::from)
        .to_vec();
    let card = ModelCard::new(cfg, serde_json::json!({"opaque": true}), labels, &model).unwrap();
    write_package(dir, &card, &model).unwrap();
    model
}

fn asr_package(dir: &Path) -> hush_models::asr::CtcGru {
    let cfg = tiny_ctc(10);
    let model = seeded_ctc(&cfg, 0x5EED);
    let card = AsrCard::new(
        cfg,
        serde_json::json!({"opaque": true}),
        &Vocabulary::characters(),
        &model,
    )
    .unwrap();
    write_asr_package(dir, &card, &model).unwrap();
    model
}

/// Exports `dir` to NNEF and checks tract's outputs on it against tract on the ONNX file
/// and against `burn`, on `x` of `shape`.
fn check_nnef(dir: &Path, shape: [usize; 3], burn: Vec<Vec<f32>>, what: &str) {
    let done = export_package(dir, ExportFormat::Nnef, None).unwrap();
    assert_eq!(done.path, dir.join("model.nnef.tar"));
    let x = Rng(99).values(shape.iter().product(), 3.0);
    let onnx = std::fs::read(dir.join("model.onnx")).unwrap();
    let archive = nnef().model_for_path(&done.path).unwrap();
    // Each output keeps the ONNX file's name for it (readers check outputs by name).
    let onnx_names: Vec<String> = {
        let m = tract_onnx::onnx().model_for_read(&mut &onnx[..]).unwrap();
        m.outputs
            .iter()
            .map(|o| m.node(o.node).name.clone())
            .collect()
    };
    let names: Vec<Option<&str>> = archive
        .outputs
        .iter()
        .map(|o| archive.outlet_label(*o))
        .collect();
    let onnx_names: Vec<Option<&str>> = onnx_names.iter().map(|n| Some(n.as_str())).collect();
    assert_eq!(names, onnx_names, "{what}");
    let from_onnx = run_tract(onnx_typed(&onnx), shape, &x);
    let from_nnef = run_tract(archive, shape, &x);
    assert_eq!(from_nnef.len(), from_onnx.len(), "{what}: outputs");
    let burn_out = burn;
    for (k, ((n, o), b)) in from_nnef.iter().zip(&from_onnx).zip(&burn_out).enumerate() {
        let (d_onnx, d_burn) = (max_abs(n, o), max_abs(n, b));
        println!("{what} output {k}: NNEF vs ONNX {d_onnx:.2e}, vs burn {d_burn:.2e}");
        assert!(spread(n) > 1e-3, "{what}: output {k} is nearly constant");
        assert!(
            d_onnx <= 1e-5,
            "{what} output {k}: NNEF and ONNX differ by {d_onnx}"
        );
        assert!(
            d_burn <= 1e-4,
            "{what} output {k}: NNEF and burn differ by {d_burn}"
        );
    }
}

#[test]
fn nnef_loads_back_with_the_outputs_of_onnx_and_burn_for_every_architecture() {
    let root = tempfile::tempdir().unwrap();
    for arch in ARCH_NAMES {
        let dir = root.path().join(arch);
        let model = kws_package(&dir, arch);
        let shape = [2, IO.frames, IO.bins];
        let x = Rng(99).values(shape.iter().product(), 3.0);
        check_nnef(&dir, shape, run_burn_kws(&model, shape, &x), arch);
    }
    let dir = root.path().join("ctc-gru");
    let model = asr_package(&dir);
    for frames in [9, 37] {
        let shape = [1, frames, 10];
        let x = Rng(99).values(shape.iter().product(), 3.0);
        check_nnef(&dir, shape, run_burn_ctc(&model, shape, &x), "ctc-gru");
    }
}

#[test]
fn onnx_export_rewrites_the_same_file_and_nnef_is_deterministic() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("pkg");
    kws_package(&dir, "ds-cnn-s");
    let written = std::fs::read(dir.join("model.onnx")).unwrap();
    std::fs::remove_file(dir.join("model.onnx")).unwrap();
    let done = export_package(&dir, ExportFormat::Onnx, None).unwrap();
    assert_eq!(done.arch, "ds-cnn-s");
    assert_eq!(std::fs::read(&done.path).unwrap(), written);

    // --out as a directory and as a file; the same weights give the same archive.
    let out = root.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let a = export_package(&dir, ExportFormat::Nnef, Some(&out)).unwrap();
    assert_eq!(a.path, out.join("model.nnef.tar"));
    let b = export_package(&dir, ExportFormat::Nnef, Some(&out.join("again.tar"))).unwrap();
    assert_eq!(
        std::fs::read(&a.path).unwrap(),
        std::fs::read(&b.path).unwrap()
    );
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["again.tar", "model.nnef.tar"],
        "no temporary files left"
    );
}

/// A streaming package (DS-CNN-S without time padding) exports its trunk and head beside the
/// model, in either format, each file what the package writer wrote or its archive; a
/// package written again drops the archives of its earlier weights.
#[test]
fn the_streaming_form_is_exported_with_the_model_and_stale_archives_are_dropped() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("pkg");
    let cfg = ArchConfig::DsCnnS(DsCnnConfig {
        time_padding: TimePadding::Valid,
        ..DsCnnConfig::small(IO)
    });
    let model = seeded_kws(&cfg, 0x5EED);
    let labels = ["yes", "no", "_silence_", "_unknown_"]
        .map(String::from)
        .to_vec();
    let card = ModelCard::new(cfg, serde_json::json!({"opaque": true}), labels, &model).unwrap();
    write_package(&dir, &card, &model).unwrap();
    let written: Vec<Vec<u8>> = ["frames.onnx", "head.onnx"]
        .iter()
        .map(|f| std::fs::read(dir.join(f)).unwrap())
        .collect();

    let done = export_package(&dir, ExportFormat::Onnx, None).unwrap();
    assert_eq!(
        done.stream,
        [dir.join("frames.onnx"), dir.join("head.onnx")]
    );
    for (p, w) in done.stream.iter().zip(&written) {
        assert_eq!(&std::fs::read(p).unwrap(), w, "{}", p.display());
    }
    let done = export_package(&dir, ExportFormat::Nnef, None).unwrap();
    assert_eq!(
        done.stream,
        [dir.join("frames.nnef.tar"), dir.join("head.nnef.tar")]
    );
    for (p, w) in done.stream.iter().zip(&written) {
        let tar = hush_models::export::nnef::onnx_to_nnef(w, &dir).unwrap();
        assert_eq!(std::fs::read(p).unwrap(), tar, "{}", p.display());
    }
    // To a file: the model alone.
    let single = root.path().join("single.tar");
    assert!(export_package(&dir, ExportFormat::Nnef, Some(&single))
        .unwrap()
        .stream
        .is_empty());

    // A pulsed trunk's archive (hush_device's `write_listen_archive`) goes too; a file that
    // only looks like one stays.
    std::fs::write(dir.join("frames.pulse6.nnef.tar"), b"stale").unwrap();
    std::fs::write(dir.join("frames.pulseX.nnef.tar"), b"not ours").unwrap();
    write_package(&dir, &card, &model).unwrap();
    assert!(dir.join("frames.pulseX.nnef.tar").exists());
    for f in [
        "model.nnef.tar",
        "frames.nnef.tar",
        "head.nnef.tar",
        "frames.pulse6.nnef.tar",
    ] {
        assert!(
            !dir.join(f).exists(),
            "{f} outlived the weights it was made from"
        );
    }
    assert!(dir.join("frames.onnx").is_file());
}

#[test]
fn failed_exports_name_the_problem_and_write_nothing() {
    let root = tempfile::tempdir().unwrap();
    let err = |dir: &Path, out: Option<&Path>| {
        export_package(dir, ExportFormat::Onnx, out)
            .unwrap_err()
            .to_string()
    };

    let e = err(&root.path().join("nope"), None);
    assert!(e.contains("nope") && e.contains("not a directory"), "{e}");

    let empty = root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = err(&empty, None);
    assert!(e.contains("model.json"), "{e}");

    let garbage = root.path().join("garbage");
    std::fs::create_dir(&garbage).unwrap();
    std::fs::write(garbage.join("model.json"), "{\"hello\": 1}").unwrap();
    let e = err(&garbage, None);
    assert!(
        e.contains("not a hush model.json") && e.contains("`task`"),
        "{e}"
    );

    // Weights of another architecture than model.json says.
    let pkg = root.path().join("pkg");
    kws_package(&pkg, "ds-cnn-s");
    let other = root.path().join("other");
    kws_package(&other, "leak-cnn");
    std::fs::copy(
        other.join("weights.safetensors"),
        pkg.join("weights.safetensors"),
    )
    .unwrap();
    let e = err(&pkg, Some(&root.path().join("x.onnx")));
    assert!(
        e.contains("weights.safetensors") && e.contains("needs [64, 1, 10, 4]"),
        "{e}"
    );
    assert!(!root.path().join("x.onnx").exists());

    // An output in a directory that does not exist: nothing written, the reason named.
    let missing = root.path().join("no/such/dir/model.onnx");
    let e = err(&other, Some(&missing));
    assert!(
        e.contains("no/such/dir") && e.contains("does not exist"),
        "{e}"
    );

    // An output under a regular file.
    let file = root.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let e = err(&other, Some(&file.join("model.onnx")));
    assert!(
        e.contains("file.txt") && e.contains("not a directory"),
        "{e}"
    );
    let left: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !left.iter().any(|n| n.to_string_lossy().contains(".tmp-")),
        "{left:?}"
    );
}
