//! The main job, `hush-host demo`: the best end-to-end run hush can do on the bundled
//! data. Today: read the keyword corpus, split it by speaker, give each training speaker
//! a simulated device, and plan a user-level DP federated run over those devices with the
//! accountant, reporting ε by RDP and PLD. It writes `results.json` beside its log.

use std::path::{Path, PathBuf};

use hush_device::dataset::{read_corpus, DatasetError, Example, Split};
use serde::Serialize;

use crate::accountant::federated::FederatedPlan;
use crate::accountant::{Accountant, AccountantError, EpsilonReport};
use crate::corpus::partition::natural;

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
        }
    }
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
    let train: Vec<Example> = examples
        .into_iter()
        .filter(|e| e.split == Split::Train)
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
    let report = DemoReport {
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
