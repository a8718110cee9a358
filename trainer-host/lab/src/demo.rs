//! The main job, `hush-host demo`: federated keyword-spotter training with user-level
//! differential privacy on the bundled corpus, end to end and on real parts. It runs
//! [`crate::simulate`] with its defaults — a real round server on loopback, one real
//! device client per training speaker talking HTTP to it, each training only on its own
//! speaker's clips and uploading a clipped update; the host adds central noise, records
//! every round in its SQLite privacy ledger before publishing the model — then checks the
//! final model on the device path (tract on `model.onnx`) on the held-out speakers, and
//! prints the accuracy, the ε with δ and unit, and where the model and the plot are.

use std::path::{Path, PathBuf};

use hush_device::dataset::KwsLabels;
use hush_device::infer::{InferError, KwsClassifier};
use serde::Serialize;

// Also reachable here, where the demo's callers and tests have always found it.
pub use crate::recipes::small_kws_config;
use crate::simulate::{simulate, RoundPoint, SimulateConfig, SimulateError, SimulateReport};

/// What the demo did; written as `results.json`.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// The federated simulation.
    pub simulation: SimulateReport,
    /// Accuracy of the device path (tract on the final `model.onnx`) on the test clips.
    pub device_accuracy: f64,
    /// Test clips classified on the device path.
    pub device_clips: usize,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The simulation failed.
    #[error(transparent)]
    Simulate(#[from] SimulateError),
    /// Device-side inference failed.
    #[error(transparent)]
    Infer(#[from] InferError),
    /// Reading the corpus failed.
    #[error(transparent)]
    Dataset(#[from] hush_device::dataset::DatasetError),
    /// Reading a test clip failed.
    #[error(transparent)]
    Audio(#[from] hush_device::audio::AudioError),
    /// `results.json` could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// The demo's simulation: [`SimulateConfig::small_kws`] on `data`, writing to `out`, over
/// HTTP (a round server on loopback and one device client per device: every real part).
pub fn demo_config(data: &Path, out: &Path) -> SimulateConfig {
    SimulateConfig {
        transport: crate::simulate::Transport::Http,
        ..SimulateConfig::small_kws(data, out)
    }
}

/// Runs the demo: `log` gets each step, `progress` each scored model version.
pub fn run_demo(
    cfg: &SimulateConfig,
    log: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(&RoundPoint, u64),
) -> Result<DemoReport, DemoError> {
    let simulation = simulate(cfg, log, progress)?;
    let classifier = KwsClassifier::load(&simulation.model)?;
    let labels = KwsLabels::new(&cfg.keywords);
    let (_, examples) = hush_device::dataset::read_corpus(&cfg.data)?;
    let (mut device_clips, mut device_correct) = (0, 0);
    for e in examples
        .iter()
        .filter(|e| e.split == hush_device::dataset::Split::Test)
    {
        let audio = hush_device::audio::read_audio(&e.path)?;
        let c = classifier.classify_audio(&audio, &e.path)?;
        device_clips += 1;
        device_correct +=
            usize::from(labels.class_of(e.target_text()) == labels.class_of(&c.label));
    }
    let device_accuracy = device_correct as f64 / device_clips.max(1) as f64;
    log(&format!(
        "device path (tract on {}): {device_correct}/{device_clips} test clips right ({device_accuracy:.3})",
        simulation.model.join("model.onnx").display()
    ));
    let report = DemoReport {
        simulation,
        device_accuracy,
        device_clips,
    };
    let path = cfg.out.join("results.json");
    let tmp = cfg.out.join("results.json.partial");
    let json = serde_json::to_string_pretty(&report).unwrap_or_default();
    std::fs::write(&tmp, json).map_err(|source| DemoError::Io {
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, &path).map_err(|source| DemoError::Io { path, source })?;
    Ok(report)
}
