//! Cross-runtime golden: burn and tract give onnxruntime's outputs (max abs ≤ 1e-4) on
//! every architecture's ONNX file, for the inputs and outputs onnxruntime saved in
//! `fixtures/onnxruntime/io.safetensors` (made by `fixtures/onnxruntime/make.py`; see the
//! README there). The models are small configurations of each architecture with every
//! tensor from a seeded stream, so this test rebuilds them exactly; the ONNX files it
//! wrote for onnxruntime are committed beside the script, and both the committed files and
//! a fresh export are checked, so a change of the writer that changes outputs fails here.
//!
//! Regenerate (only when the architectures or the writer change on purpose):
//!
//! ```text
//! cargo test -p hush-models --test onnxruntime -- --ignored write_fixture_models
//! /work/venv-ort/bin/python models/hush-models/tests/fixtures/onnxruntime/make.py
//! ```

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{
    max_abs, onnx_typed, run_burn_ctc, run_burn_kws, run_tract, seeded_ctc, seeded_kws, spread,
    tiny_ctc, tiny_ctc_at,
};
use hush_models::arch::{ArchConfig, BcResNetConfig, DsCnnConfig, IoShape, LeakCnnConfig};
use hush_models::asr::AsrArchConfig;
use hush_models::checkpoint::{load_safetensors, NamedTensor};

/// Seed of every model's weight stream.
const SEED: u64 = 0x0A75_2026;

const IO: IoShape = IoShape {
    frames: 49,
    bins: 10,
    classes: 4,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/onnxruntime")
}

/// A small configuration of every architecture, by the name of its fixture file.
enum Fixture {
    Kws(ArchConfig),
    Ctc(AsrArchConfig),
}

fn cases() -> Vec<(&'static str, Fixture)> {
    vec![
        (
            "ds-cnn-s",
            Fixture::Kws(ArchConfig::DsCnnS(DsCnnConfig {
                channels: 16,
                blocks: 2,
                ..DsCnnConfig::small(IO)
            })),
        ),
        (
            "bc-resnet",
            Fixture::Kws(ArchConfig::BcResNet(BcResNetConfig {
                width: 1,
                blocks: [1, 1, 1, 1],
                head_channels: 16,
                ..BcResNetConfig::new(IO)
            })),
        ),
        (
            "leak-cnn",
            Fixture::Kws(ArchConfig::LeakCnn(LeakCnnConfig {
                channels: [4, 8],
                hidden: 16,
                ..LeakCnnConfig::new(IO)
            })),
        ),
        ("ctc-gru", Fixture::Ctc(tiny_ctc(10))),
        ("ctc-gru-s2", Fixture::Ctc(tiny_ctc_at(10, 2))),
    ]
}

impl Fixture {
    /// The freshly written ONNX file.
    fn onnx(&self) -> Vec<u8> {
        match self {
            Fixture::Kws(cfg) => seeded_kws(cfg, SEED).to_onnx(cfg).unwrap(),
            Fixture::Ctc(cfg) => seeded_ctc(cfg, SEED).to_onnx(cfg).unwrap(),
        }
    }

    /// burn's outputs, in the ONNX file's output order.
    fn burn(&self, shape: [usize; 3], x: &[f32]) -> Vec<Vec<f32>> {
        match self {
            Fixture::Kws(cfg) => run_burn_kws(&seeded_kws(cfg, SEED), shape, x),
            Fixture::Ctc(cfg) => run_burn_ctc(&seeded_ctc(cfg, SEED), shape, x),
        }
    }

    /// Names of the ONNX file's outputs, in order.
    fn outputs(&self) -> &'static [&'static str] {
        match self {
            Fixture::Kws(_) => &["logits", "probs"],
            Fixture::Ctc(_) => &["log_probs"],
        }
    }
}

#[test]
#[ignore = "writes the fixture's ONNX files; run by hand before make.py"]
fn write_fixture_models() {
    for (name, fixture) in cases() {
        let path = fixtures().join(format!("{name}.onnx"));
        std::fs::write(&path, fixture.onnx()).unwrap();
        println!("wrote {}", path.display());
    }
}

#[test]
fn burn_and_tract_equal_onnxruntime_on_every_architecture() {
    let io: BTreeMap<String, NamedTensor> = load_safetensors(&fixtures().join("io.safetensors"))
        .unwrap()
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect();
    for (name, fixture) in cases() {
        let input = &io[&format!("{name}.input")];
        let shape: [usize; 3] = input.shape.clone().try_into().unwrap();
        let committed = std::fs::read(fixtures().join(format!("{name}.onnx"))).unwrap();
        let runs = [
            ("burn", fixture.burn(shape, &input.data)),
            (
                "tract (committed ONNX)",
                run_tract(onnx_typed(&committed), shape, &input.data),
            ),
            (
                "tract (fresh export)",
                run_tract(onnx_typed(&fixture.onnx()), shape, &input.data),
            ),
        ];
        for (k, out) in fixture.outputs().iter().enumerate() {
            let ort = &io[&format!("{name}.{out}")];
            assert!(spread(&ort.data) > 1e-3, "{name}.{out}: nearly constant");
            for (who, values) in &runs {
                let d = max_abs(&values[k], &ort.data);
                println!("{name} {out}: {who} vs onnxruntime {d:.2e}");
                assert!(
                    d <= 1e-4,
                    "{name} {out}: {who} differs from onnxruntime by {d}"
                );
            }
        }
    }
}
