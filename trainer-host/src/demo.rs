//! The main job, `hush-host demo`: the best end-to-end run hush can do on the bundled
//! data. Today: read the keyword corpus, split it by speaker, give each training speaker
//! a simulated device, plan a user-level DP federated run over those devices with the
//! accountant (ε by RDP and PLD); then train a small keyword spotter on the host (not yet
//! private, not yet federated), package it, and classify the held-out speakers' clips the
//! way a device does (tract on `model.onnx`). It writes `results.json` and the model
//! package under `--out`.

use std::path::{Path, PathBuf};

use hush_device::dataset::{read_corpus, DatasetError, Example, Split};
use serde::Serialize;

use crate::accountant::federated::FederatedPlan;
use crate::accountant::{Accountant, AccountantError, EpsilonReport};
use crate::corpus::partition::natural;
use crate::train::{train_kws, Augment, KwsTrainConfig, TrainError};
use hush_device::infer::{InferError, KwsClassifier};
use hush_models::arch::{ArchConfig, IoShape, LeakCnnConfig};

/// Settings of the demo.
#[derive(Debug, Clone, Serialize)]
pub struct DemoConfig {
    /// Keyword corpus (Speech Commands layout).
    pub data: PathBuf,
    /// Folder for `results.json`.
    pub out: PathBuf,
    /// Expected devices per round.
    pub expected_cohort: u64,
    /// Cohort the noise is calibrated for (the deployment's cohort).
    pub noise_cohort: u64,
    /// Noise multiplier at the noise cohort.
    pub noise_multiplier: f64,
    /// Federated rounds.
    pub rounds: u64,
    /// δ of the simulation's own guarantee.
    pub delta: f64,
    /// Population the deployment guarantee is extrapolated to.
    pub deployment_population: u64,
    /// δ of the deployment guarantee.
    pub deployment_delta: f64,
    /// Epochs of the keyword spotter trained on the host.
    pub epochs: usize,
}

impl DemoConfig {
    /// Defaults for the bundled corpus.
    pub fn new(data: PathBuf, out: PathBuf) -> Self {
        DemoConfig {
            data,
            out,
            expected_cohort: 8,
            noise_cohort: 32,
            noise_multiplier: 2.0,
            rounds: 100,
            delta: 1e-5,
            deployment_population: 1_000_000,
            deployment_delta: 1e-9,
            epochs: 12,
        }
    }
}

/// A small, fast keyword-spotting set-up on `data`: 20 Mel bins every 20 ms (49 frames)
/// into the 2-conv + 2-FC CNN with 8 and 16 channels, no augmentation. It learns the
/// bundled corpus in seconds per epoch on two cores.
pub fn small_kws_config(data: &Path, epochs: usize, seed: u64) -> KwsTrainConfig {
    let mut cfg = KwsTrainConfig::new(data, "leak-cnn");
    cfg.features.mel.num_bins = 20;
    cfg.features.frame.frame_shift_ms = 20.0;
    cfg.frames = 49;
    cfg.augment = Augment::none();
    let io = IoShape {
        frames: cfg.frames,
        bins: 20,
        classes: cfg.keywords.len() + 2,
    };
    cfg.arch = Some(ArchConfig::LeakCnn(LeakCnnConfig {
        channels: [8, 16],
        hidden: 64,
        dropout: 0.0,
        ..LeakCnnConfig::new(io)
    }));
    cfg.epochs = epochs;
    cfg.batch_size = 16;
    cfg.lr = 3e-3;
    cfg.seed = seed;
    cfg
}

/// What the demo found and planned; written as `results.json`.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// The settings.
    pub config: DemoConfig,
    /// Clips per split.
    pub clips: [(String, usize); 3],
    /// Simulated devices (one per training speaker).
    pub devices: usize,
    /// Fewest and most clips on one device.
    pub clips_per_device: (usize, usize),
    /// ε of the run as simulated, by each accountant.
    pub simulation_epsilon: Vec<EpsilonReport>,
    /// ε of the extrapolated deployment, by each accountant.
    pub deployment_epsilon: Vec<EpsilonReport>,
    /// Test-speaker accuracy of the host-trained model (burn).
    pub test_accuracy: f64,
    /// Balanced accuracy over the keyword classes on the test speakers.
    pub test_balanced_keyword_accuracy: f64,
    /// Accuracy of the device path (tract on model.onnx) on the same clips.
    pub device_accuracy: f64,
    /// Test clips classified on the device path.
    pub device_clips: usize,
}

/// Why the demo failed.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The corpus could not be read.
    #[error(transparent)]
    Dataset(#[from] DatasetError),
    /// The privacy plan is invalid.
    #[error(transparent)]
    Accountant(#[from] AccountantError),
    /// Training failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// Device-side inference failed.
    #[error(transparent)]
    Infer(#[from] InferError),
    /// Reading a test clip failed.
    #[error(transparent)]
    Audio(#[from] hush_device::audio::AudioError),
    /// The corpus has no training speakers.
    #[error("{0}: no training speakers in the corpus")]
    NoTrainingData(PathBuf),
    /// `results.json` could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Runs the demo, printing each step through `log`.
pub fn run_demo(cfg: &DemoConfig, log: &mut dyn FnMut(&str)) -> Result<DemoReport, DemoError> {
    log(&format!("reading {}", cfg.data.display()));
    let (_, examples) = read_corpus(&cfg.data)?;
    let count = |s: Split| examples.iter().filter(|e| e.split == s).count();
    let clips =
        [Split::Train, Split::Validation, Split::Test].map(|s| (s.name().to_string(), count(s)));
    log(&format!(
        "{} clips: {} train, {} validation, {} test (split by speaker)",
        examples.len(),
        clips[0].1,
        clips[1].1,
        clips[2].1
    ));
    let (train, rest): (Vec<Example>, Vec<Example>) =
        examples.into_iter().partition(|e| e.split == Split::Train);
    let test: Vec<Example> = rest
        .into_iter()
        .filter(|e| e.split == Split::Test)
        .collect();
    let devices = natural(&train);
    if devices.is_empty() {
        return Err(DemoError::NoTrainingData(cfg.data.clone()));
    }
    let sizes: Vec<usize> = devices.iter().map(|d| d.examples.len()).collect();
    let clips_per_device = (
        sizes.iter().copied().min().unwrap_or(0),
        sizes.iter().copied().max().unwrap_or(0),
    );
    log(&format!(
        "{} simulated devices, one per training speaker, holding {}–{} clips each",
        devices.len(),
        clips_per_device.0,
        clips_per_device.1
    ));
    let plan = FederatedPlan::new(
        devices.len() as u64,
        cfg.expected_cohort.min(devices.len() as u64),
        cfg.noise_cohort,
        cfg.noise_multiplier,
        cfg.rounds,
    )?;
    log(&format!(
        "plan: {} rounds, Poisson cohorts of expected size {} (q = {:.3}), noise multiplier {} \
         calibrated at a cohort of {}",
        plan.rounds,
        plan.expected_cohort,
        plan.sampling_rate(),
        plan.noise_multiplier,
        plan.noise_cohort
    ));
    let mut simulation_epsilon = Vec::new();
    let mut deployment_epsilon = Vec::new();
    for accountant in [Accountant::Rdp, Accountant::Pld] {
        let sim = plan.simulation_epsilon(accountant, cfg.delta)?;
        log(&format!("simulation as run: {sim}"));
        simulation_epsilon.push(sim);
        let dep =
            plan.extrapolated_epsilon(cfg.deployment_population, accountant, cfg.deployment_delta)?;
        log(&format!(
            "deployment of {} devices, cohorts of {}: {dep}",
            cfg.deployment_population, cfg.noise_cohort
        ));
        deployment_epsilon.push(dep);
    }
    let model_dir = cfg.out.join("model");
    log(&format!(
        "training a keyword spotter on the host for {} epochs (central, not yet private)",
        cfg.epochs
    ));
    let train_cfg = small_kws_config(&cfg.data, cfg.epochs, 1);
    let trained = train_kws(&train_cfg, &model_dir, "hush-host demo", &mut |e| {
        log(&format!(
            "epoch {:>2}: loss {:.3}, validation accuracy {:.3}",
            e.epoch, e.train_loss, e.val_accuracy
        ))
    })?;
    let (test_accuracy, test_balanced_keyword_accuracy) = trained
        .card
        .metrics
        .as_ref()
        .and_then(|m| m.splits.get("test"))
        .map_or((0.0, 0.0), |t| (t.accuracy, t.balanced_keyword_accuracy));
    log(&format!(
        "test speakers: accuracy {test_accuracy:.3}, balanced keyword accuracy \
         {test_balanced_keyword_accuracy:.3} (chance 1/12)"
    ));
    let classifier = KwsClassifier::load(&model_dir)?;
    let labels = hush_device::dataset::KwsLabels::new(&train_cfg.keywords);
    let (mut device_clips, mut device_correct) = (0, 0);
    for e in test.iter() {
        let audio = hush_device::audio::read_audio(&e.path)?;
        let c = classifier.classify_audio(&audio, &e.path)?;
        device_clips += 1;
        device_correct +=
            usize::from(labels.class_of(e.target_text()) == labels.class_of(&c.label));
    }
    let device_accuracy = device_correct as f64 / device_clips.max(1) as f64;
    log(&format!(
        "device path (tract on {}): {device_correct}/{device_clips} test clips right ({device_accuracy:.3})",
        model_dir.join("model.onnx").display()
    ));
    let report = DemoReport {
        test_accuracy,
        test_balanced_keyword_accuracy,
        device_accuracy,
        device_clips,
        config: cfg.clone(),
        clips,
        devices: devices.len(),
        clips_per_device,
        simulation_epsilon,
        deployment_epsilon,
    };
    write_results(&cfg.out, &report)?;
    log(&format!("wrote {}", cfg.out.join("results.json").display()));
    Ok(report)
}

fn write_results(out: &Path, report: &DemoReport) -> Result<(), DemoError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DemoError::Io { path, source }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let path = out.join("results.json");
    let tmp = out.join("results.json.partial");
    let json = serde_json::to_string_pretty(report).unwrap_or_default();
    std::fs::write(&tmp, json).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))
}
