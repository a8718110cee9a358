//! Fleet simulation, `hush-host simulate`: federated rounds with one device per training
//! speaker, each training on its own speaker's clips only, through one of two transports
//! ([`Transport`]): in process — the round engine itself (its SQLite store, ledger, noise
//! and clock) driven directly, each round's reachable cohort trained together in one
//! batched model ([`crate::fleet`]), no HTTP and no thread per device — or over HTTP — a
//! real round server on loopback and one real device client (thread) per device. Both run
//! the same engine, the same local training and the same seeds, so they release the same
//! models.
//!
//! The corpus is split by speaker ([`hush_device::dataset::split_of_speaker`]): training
//! speakers become devices; validation speakers are the *public* data the initial model's
//! input normalisation is computed from (no private data touches the initial model); test
//! speakers are held out and every published model version (or every `curve_every`-th) is
//! scored on them. With virtual users ([`crate::population`], `--users`) the devices are
//! users made from the training speakers, validation users give the input statistics and
//! the curve, and test users are scored once, at the end. The privacy guarantee is the
//! host's ledger (user level, RDP and PLD, as the simulation really ran) and, for a
//! simulation with a noise cohort, the guarantee extrapolated to a deployment of
//! `population` devices with cohorts of that size (Apple's pfl methodology;
//! [`hush_privacy::accountant::federated`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::tensor::Device;
use hush_device::client::{join, DeviceIdentity, DeviceState, HostClient, JoinConfig, JoinSummary};
use hush_device::dataset::{read_corpus, split_of_speaker, KwsLabels, Split, Target};
use hush_device::features::FeatureConfig;
use hush_device::training::{CohortSplit, LocalData};

use crate::fleet::{FleetRun, FleetUsers, GivenDeltas, InProcessFleet, WithGiven};
use crate::population::{default_cache, Population, PopulationSpec, UserSplit};
use hush_models::arch::ArchConfig;
use hush_models::package::{load_package, write_package, ModelCard, SplitMetrics};
use hush_models::step::predict;
use serde::Serialize;

use hush_fl::{FlConfig, RoundLog};
use hush_plot::{line_plot, Series};
use hush_privacy::accountant::federated::FederatedPlan;
use hush_privacy::accountant::{Accountant, EpsilonReport};
use hush_server::start_host;
use hush_train::metrics::{argmax, score};

/// How the simulated devices reach the round engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// The round engine driven in this process: its store, ledger and noise as a server
    /// runs them, a manual clock, each round's cohort trained together ([`crate::fleet`]).
    #[default]
    InProcess,
    /// A real round server on loopback and one device client (a thread) per device.
    Http,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "in-process" => Ok(Self::InProcess),
            "http" => Ok(Self::Http),
            _ => Err(format!("{s:?}: expected in-process or http")),
        }
    }
}

/// Everything a simulation needs: the host's configuration (rounds, sampling, noise,
/// clipping, local recipe, server optimizer, budget) and the fleet around it.
#[derive(Debug, Clone, Serialize)]
pub struct SimulateConfig {
    /// Keyword corpus (Speech Commands layout).
    pub data: PathBuf,
    /// Output folder: `results.json`, `accuracy.png`, `host/` (SQLite, model versions),
    /// `devices/` (each device's state), `model/` (the final package).
    pub out: PathBuf,
    /// At most this many devices (training speakers, in name order); `None`: all.
    pub devices: Option<usize>,
    /// Keywords.
    pub keywords: Vec<String>,
    /// Features of the model.
    pub features: FeatureConfig,
    /// Frames per example.
    pub frames: usize,
    /// Architecture of the model.
    pub arch: ArchConfig,
    /// Seed of the initial weights.
    pub init_seed: u64,
    /// The host's configuration (its `server.initial_model`, `data_dir` and `listen` are
    /// set by the simulation).
    pub host: FlConfig,
    /// Set the host's ε budget to the planned run's own ε (plus 1 %), so the ledger
    /// refuses any round beyond the plan; otherwise `host.budget` is used as given.
    pub budget_from_plan: bool,
    /// Population the guarantee is extrapolated to (with cohorts of the noise cohort).
    pub deployment_population: u64,
    /// δ of the extrapolated guarantee.
    pub deployment_delta: f64,
    /// How devices reach the engine.
    pub transport: Transport,
    /// Who is reachable, drops out or comes late (in process only).
    pub participation: FleetParticipation,
    /// How the in-process fleet batches a round's local training (rows per batched step,
    /// threads); changes no result.
    pub local_batching: CohortSplit,
    /// Virtual users made from the corpus's base speakers ([`crate::population`]) instead
    /// of one device per training speaker (in process only); `None`: the speakers.
    pub virtual_users: Option<PopulationSpec>,
    /// Where virtual users are cached (default: `out/virtual-users`).
    pub user_cache: Option<PathBuf>,
    /// A tuning run: the final model is not scored on the test set (hyper-parameters are
    /// chosen on the validation curve of virtual users only).
    pub tuning: bool,
    /// The curve scores every this many model versions, the initial and the last always
    /// (1: every version). A privacy audit reads the released models, not the curve: it
    /// scores the ends only, sparing an evaluation of the held-out set every round.
    pub curve_every: u64,
}

/// How the simulated fleet takes part, as real fleets do: only part of it is reachable in a
/// round (a daily cycle), and some drawn devices drop out before uploading or upload after
/// the deadline. Each is one draw keyed by (seed, round, device), made after the engine's
/// own cohort draw and independent of it, so the accountant's `q` stays an upper bound on
/// every device's participation. The host is told only `availability` (its published
/// estimate, `rounds.availability`, the divisor's factor).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FleetParticipation {
    /// Mean fraction of devices reachable in a round (default 1).
    pub availability: f64,
    /// Relative swing of availability over a day: `a(r) = availability × (1 + swing ×
    /// sin(2π r / rounds_per_day))`, clamped to [0, 1] (default 0).
    pub daily_swing: f64,
    /// Rounds per simulated day (default 24).
    pub rounds_per_day: u32,
    /// Probability that a drawn, reachable device trains but never uploads (default 0).
    pub dropout: f64,
    /// Probability that it uploads after the round's deadline (default 0).
    pub straggle: f64,
}

impl Default for FleetParticipation {
    fn default() -> Self {
        Self {
            availability: 1.0,
            daily_swing: 0.0,
            rounds_per_day: 24,
            dropout: 0.0,
            straggle: 0.0,
        }
    }
}

impl FleetParticipation {
    /// Checks every fraction is in range.
    fn validate(&self) -> Result<(), SimulateError> {
        let fraction = |name: &str, v: f64, lo_open: bool| {
            let ok = v.is_finite() && v <= 1.0 && if lo_open { v > 0.0 } else { v >= 0.0 };
            if ok {
                Ok(())
            } else {
                Err(SimulateError::Unusable(format!(
                    "participation: {name} = {v}: expected a fraction in {}",
                    if lo_open { "(0, 1]" } else { "[0, 1]" }
                )))
            }
        };
        fraction("availability", self.availability, true)?;
        fraction("daily swing", self.daily_swing, false)?;
        fraction("dropout", self.dropout, false)?;
        fraction("straggle", self.straggle, false)?;
        if self.rounds_per_day == 0 {
            return Err(SimulateError::Unusable(
                "participation: rounds per day must be ≥ 1".into(),
            ));
        }
        Ok(())
    }

    /// Whether every device is always reachable, uploads and is on time.
    fn is_full(&self) -> bool {
        self.availability == 1.0
            && self.daily_swing == 0.0
            && self.dropout == 0.0
            && self.straggle == 0.0
    }

    /// Fraction of devices reachable in round `round`.
    pub(crate) fn available_fraction(&self, round: u64) -> f64 {
        let phase = std::f64::consts::TAU * (round % u64::from(self.rounds_per_day)) as f64
            / f64::from(self.rounds_per_day);
        (self.availability * (1.0 + self.daily_swing * phase.sin())).clamp(0.0, 1.0)
    }
}

/// What the fleet did with the rounds it was drawn into (in process).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ParticipationCounts {
    /// Drawn but not reachable: never checked in.
    pub unavailable: u64,
    /// Trained but never uploaded.
    pub dropped: u64,
    /// Uploaded after the deadline (refused as too late).
    pub late: u64,
}

/// A uniform draw in [0, 1) keyed by (seed, round, device, what): the fleet's own
/// behaviour, not privacy noise (SplitMix64 over the key).
pub(crate) fn fleet_draw(seed: u64, round: u64, device: u64, what: u64) -> f64 {
    let mut x = seed
        ^ round.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ device.wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ what.wrapping_mul(0x1656_67B1_9E37_79F9);
    for _ in 0..2 {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
    }
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// One published model version, scored on the held-out set ([`SimulateReport::curve_on`]).
#[derive(Debug, Clone, Serialize)]
pub struct RoundPoint {
    /// Model version (0 = initial).
    pub version: u64,
    /// Accuracy on the held-out set the curve is scored on.
    pub accuracy: f64,
    /// Balanced accuracy over the keyword classes.
    pub balanced_keyword_accuracy: f64,
    /// Seconds since the host started.
    pub elapsed_s: f64,
}

/// What a simulation did; written as `results.json`.
#[derive(Debug, Clone, Serialize)]
pub struct SimulateReport {
    /// Settings.
    pub config: SimulateConfig,
    /// Devices that took part.
    pub devices: usize,
    /// Fewest and most clips on one device.
    pub clips_per_device: (usize, usize),
    /// Accuracy of every published version (every `curve_every`-th) on the held-out set
    /// named by `curve_on`.
    pub curve: Vec<RoundPoint>,
    /// What the curve is scored on: the test speakers, or with virtual users the
    /// validation users (the test users are scored once, at the end: `test`).
    pub curve_on: String,
    /// The virtual users, when the fleet was made of them.
    pub population: Option<PopulationSummary>,
    /// The host's log of every round (cohort, reports, ε so far).
    pub rounds: Vec<RoundLog>,
    /// Final model's metrics on the test speakers (or test users); None for a tuning run
    /// ([`SimulateConfig::tuning`]), which never looks at them.
    pub test: Option<SplitMetrics>,
    /// ε the host's ledger holds for this run, by RDP and PLD (user level).
    pub ledger_epsilon: Vec<EpsilonReport>,
    /// ε of the extrapolated deployment, by RDP and PLD (when a noise cohort is set).
    pub deployment_epsilon: Vec<EpsilonReport>,
    /// Uploads accepted / refused as the devices saw them.
    pub uploads_accepted: u64,
    /// Uploads refused.
    pub uploads_refused: u64,
    /// Drawn devices that were away, dropped out or came late (in process).
    pub participation: ParticipationCounts,
    /// Wall time of the run.
    pub seconds: f64,
    /// Device updates trained per second of wall time, over the whole run.
    pub updates_per_second: f64,
    /// The final model package.
    pub model: PathBuf,
}

/// A population of virtual users as run.
#[derive(Debug, Clone, Serialize)]
pub struct PopulationSummary {
    /// Training, validation and test users.
    pub users: [usize; 3],
    /// Base speakers behind them (users sharing one are not independent people).
    pub base_speakers: [usize; 3],
    /// Clips of the training users: fewest, mean, most.
    pub clips_per_user: (usize, f64, usize),
    /// The cache folder.
    pub cache: PathBuf,
}

/// Why a simulation failed.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// Reading the corpus failed.
    #[error(transparent)]
    Dataset(#[from] hush_device::dataset::DatasetError),
    /// Local data could not be prepared.
    #[error(transparent)]
    Training(#[from] hush_device::training::TrainingError),
    /// The model failed.
    #[error(transparent)]
    Model(#[from] hush_models::ModelError),
    /// The host failed.
    #[error(transparent)]
    Host(#[from] hush_fl::FlError),
    /// The accountant refused the plan.
    #[error(transparent)]
    Accountant(#[from] hush_privacy::accountant::AccountantError),
    /// A device failed for a reason that is not a refused upload.
    #[error("device {index}: {source}")]
    Device {
        /// Which device.
        index: usize,
        /// What failed.
        source: hush_device::client::ClientError,
    },
    /// A file could not be written.
    #[error("{path}: {reason}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The corpus cannot be simulated.
    #[error("{0}")]
    Unusable(String),
}

pub(crate) fn io_err(path: &Path, e: impl std::fmt::Display) -> SimulateError {
    SimulateError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

/// Speakers of each split, sorted.
fn speakers(data: &Path) -> Result<[Vec<String>; 3], SimulateError> {
    let (_, examples) = read_corpus(data)?;
    let mut out: [Vec<String>; 3] = Default::default();
    for e in examples {
        if !matches!(e.target, Target::Label(_)) {
            continue;
        }
        let i = match split_of_speaker(&e.speaker) {
            Split::Train => 0,
            Split::Validation => 1,
            Split::Test => 2,
        };
        out[i].push(e.speaker);
    }
    for s in &mut out {
        s.sort();
        s.dedup();
    }
    Ok(out)
}

/// Clips of `speakers`, concatenated.
fn pooled(
    cfg: &SimulateConfig,
    speakers: &[String],
    labels: &[String],
) -> Result<LocalData, SimulateError> {
    let mut all: Option<LocalData> = None;
    for s in speakers {
        let d = LocalData::load(&cfg.data, Some(s), &cfg.features, cfg.frames, labels)?;
        match &mut all {
            None => all = Some(d),
            Some(a) => {
                a.features.extend(d.features);
                a.classes.extend(d.classes);
            }
        }
    }
    all.ok_or_else(|| SimulateError::Unusable("no speakers in this split".into()))
}

/// Per-bin mean and inverse standard deviation.
fn input_stats(data: &LocalData) -> (Vec<f32>, Vec<f32>) {
    let bins = data.bins;
    let mut sum = vec![0f64; bins];
    let mut sq = vec![0f64; bins];
    let rows = data.features.len() / bins.max(1);
    for row in data.features.chunks(bins) {
        for (i, &v) in row.iter().enumerate() {
            sum[i] += f64::from(v);
            sq[i] += f64::from(v) * f64::from(v);
        }
    }
    let n = rows.max(1) as f64;
    let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
    let scale = sum
        .iter()
        .zip(&sq)
        .map(|(s, q)| {
            let m = s / n;
            (1.0 / (q / n - m * m).max(1e-6).sqrt()) as f32
        })
        .collect();
    (mean, scale)
}

/// Scores the model package in `dir` on `test`.
pub fn evaluate(
    dir: &Path,
    test: &LocalData,
    labels: &[String],
) -> Result<SplitMetrics, SimulateError> {
    let device = Device::flex();
    let (_, model) = load_package(dir, &device)?;
    let per = test.frames * test.bins;
    let mut predicted = Vec::with_capacity(test.len());
    for chunk in test.features.chunks(64 * per) {
        let probs = predict(
            &model,
            chunk,
            chunk.len() / per,
            test.frames,
            test.bins,
            &device,
        )?;
        predicted.extend(probs.iter().map(|p| argmax(p)));
    }
    Ok(score(&test.classes, &predicted, labels))
}

/// Where a simulation's devices come from.
enum FleetSource {
    /// One device per training speaker, with the speaker's clips.
    Speakers(Vec<(String, LocalData)>),
    /// Virtual users ([`crate::population`]) and their cache folder.
    Virtual(Box<Population>, PathBuf),
}

impl FleetSource {
    /// The devices, as the in-process fleet sees them.
    fn train(&self) -> Box<dyn FleetUsers + '_> {
        match self {
            Self::Speakers(users) => Box::new(users.as_slice()),
            Self::Virtual(population, _) => Box::new(population.split(UserSplit::Train)),
        }
    }

    fn count(&self) -> usize {
        self.train().count()
    }

    /// Fewest, mean and most clips on one device.
    fn clip_counts(&self) -> (usize, f64, usize) {
        let counts: Vec<usize> = match self {
            Self::Speakers(users) => users.iter().map(|(_, d)| d.len()).collect(),
            Self::Virtual(population, _) => population
                .users()
                .iter()
                .filter(|u| u.split == UserSplit::Train)
                .map(|u| u.classes.len())
                .collect(),
        };
        let mean = counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64;
        let min = counts.iter().copied().min().unwrap_or(0);
        (min, mean, counts.iter().copied().max().unwrap_or(0))
    }

    fn curve_on(&self) -> &'static str {
        match self {
            Self::Speakers(_) => "test speakers",
            Self::Virtual(..) => "validation users",
        }
    }

    fn summary(&self, clips_per_user: (usize, f64, usize)) -> Option<PopulationSummary> {
        let Self::Virtual(population, cache) = self else {
            return None;
        };
        let count = |split| {
            population
                .users()
                .iter()
                .filter(|u| u.split == split)
                .count()
        };
        Some(PopulationSummary {
            users: [
                count(UserSplit::Train),
                count(UserSplit::Validation),
                count(UserSplit::Test),
            ],
            base_speakers: population.base_speakers(),
            clips_per_user,
            cache: cache.clone(),
        })
    }
}

/// One device per training speaker (at most `cfg.devices`), the validation speakers'
/// clips pooled (public data) and the test speakers' clips pooled.
fn speaker_users(
    cfg: &SimulateConfig,
    labels: &[String],
    log: &mut dyn FnMut(&str),
) -> Result<(FleetSource, LocalData, LocalData), SimulateError> {
    let [mut train, public, test_speakers] = speakers(&cfg.data)?;
    if let Some(n) = cfg.devices {
        train.truncate(n);
    }
    if train.is_empty() || public.is_empty() || test_speakers.is_empty() {
        return Err(SimulateError::Unusable(format!(
            "{}: need training, validation (public) and test speakers; found {}, {}, {}",
            cfg.data.display(),
            train.len(),
            public.len(),
            test_speakers.len()
        )));
    }
    log(&format!(
        "{} devices (one per training speaker); {} public speakers for the input statistics; {} held-out test speakers",
        train.len(),
        public.len(),
        test_speakers.len()
    ));
    // Each training speaker's clips, as its device computes them (the in-process fleet
    // trains on these; over HTTP each device loads its own).
    let mut users = Vec::with_capacity(train.len());
    for s in train {
        let data = LocalData::load(&cfg.data, Some(&s), &cfg.features, cfg.frames, labels)?;
        users.push((s, data));
    }
    let public_data = pooled(cfg, &public, labels)?;
    let test = pooled(cfg, &test_speakers, labels)?;
    Ok((FleetSource::Speakers(users), public_data, test))
}

/// Runs the simulation; `progress` sees each published version as it is scored.
pub fn simulate(
    cfg: &SimulateConfig,
    log: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(&RoundPoint, u64),
) -> Result<SimulateReport, SimulateError> {
    simulate_with(cfg, None, log, progress)
}

/// [`simulate`] with `given` clients enrolled after the real devices, each uploading a
/// given delta instead of training (the federated privacy audit's canaries; in process
/// only).
pub fn simulate_with(
    cfg: &SimulateConfig,
    given: Option<&dyn GivenDeltas>,
    log: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(&RoundPoint, u64),
) -> Result<SimulateReport, SimulateError> {
    let started = Instant::now();
    if given.is_some() && cfg.transport == Transport::Http {
        return Err(SimulateError::Unusable(
            "clients with given deltas are simulated in process only (--transport in-process)"
                .into(),
        ));
    }
    let labels = KwsLabels::new(&cfg.keywords).classes;
    let (users, public_data, test) = match &cfg.virtual_users {
        None => speaker_users(cfg, &labels, log)?,
        Some(spec) => {
            if cfg.transport == Transport::Http {
                return Err(SimulateError::Unusable(
                    "virtual users are simulated in process only (--transport in-process)".into(),
                ));
            }
            let cache = cfg
                .user_cache
                .clone()
                .unwrap_or_else(|| default_cache(&cfg.out));
            let population = Population::open_or_build(
                &cache,
                &cfg.data,
                spec,
                &cfg.features,
                cfg.frames,
                &labels,
                log,
            )?;
            let validation = population.pooled(UserSplit::Validation)?;
            let test = population.pooled(UserSplit::Test)?;
            log(&format!(
                "{} devices (virtual users); {} validation users ({} clips: input statistics, the curve); {} test users ({} clips, {})",
                spec.users,
                spec.validation_users,
                validation.len(),
                spec.test_users,
                test.len(),
                if cfg.tuning {
                    "not scored: a tuning run"
                } else {
                    "scored once, at the end"
                }
            ));
            (
                FleetSource::Virtual(Box::new(population), cache),
                validation,
                test,
            )
        }
    };
    let devices = users.count() + given.map_or(0, |g| g.count());
    let clips_per_device = users.clip_counts();
    // The initial model: fresh weights, input statistics from public speakers only.
    std::fs::create_dir_all(&cfg.out).map_err(|e| io_err(&cfg.out, e))?;
    let initial = cfg.out.join("initial-model");
    let device = Device::flex();
    {
        // Other threads of this process may be training: the initial weights must be this
        // seed's, whatever they draw.
        let mut model = cfg.arch.init_seeded(&device, cfg.init_seed)?;
        let (mean, scale) = input_stats(&public_data);
        model.set_input_norm(&mean, &scale)?;
        let features_json = serde_json::to_value(&cfg.features).map_err(|e| io_err(&initial, e))?;
        let card = ModelCard::new(cfg.arch.clone(), features_json, labels.clone(), &model)?;
        write_package(&initial, &card, &model)?;
    }

    let host_dir = cfg.out.join("host");
    if host_dir.exists() {
        std::fs::remove_dir_all(&host_dir).map_err(|e| io_err(&host_dir, e))?;
    }
    cfg.participation.validate()?;
    if cfg.transport == Transport::Http && !cfg.participation.is_full() {
        return Err(SimulateError::Unusable(
            "availability, dropouts and stragglers are simulated in process only \
             (--transport in-process)"
                .into(),
        ));
    }
    let mut host_cfg = cfg.host.clone();
    // The host knows only the published availability estimate (the divisor's factor).
    host_cfg.rounds.availability = cfg.participation.availability;
    host_cfg.server.initial_model = initial.clone();
    host_cfg.server.data_dir = host_dir;
    host_cfg.server.listen = "127.0.0.1:0".into();
    // The simulated devices read ONNX: no NNEF archive to write at each release.
    host_cfg.server.nnef_archives = false;
    host_cfg.rounds.min_devices = devices as u64;
    // A configuration the engine would refuse (e.g. a participation scheme the accountant
    // cannot account for) is refused before anything runs.
    host_cfg.validate()?;
    let rounds = host_cfg.rounds.rounds;
    let expected = (host_cfg.rounds.sampling_rate * devices as f64)
        .round()
        .max(1.0) as u64;
    let plan = if host_cfg.dp.enabled {
        let noise_cohort = host_cfg
            .dp
            .noise_cohort_size
            .map_or(expected, |m| m.round() as u64);
        Some(
            FederatedPlan::new(
                devices as u64,
                expected,
                noise_cohort,
                host_cfg.dp.noise_multiplier,
                rounds,
            )?
            .with_availability(host_cfg.rounds.availability)?,
        )
    } else {
        None
    };
    if let (true, Some(plan)) = (cfg.budget_from_plan, &plan) {
        let own = plan.simulation_epsilon(host_cfg.budget.accountant, host_cfg.budget.delta)?;
        host_cfg.budget.epsilon = own.epsilon * 1.01;
        log(&format!(
            "ledger budget: ε = {:.4} at δ = {} ({:?}; the planned run's own ε + 1 %)",
            host_cfg.budget.epsilon, host_cfg.budget.delta, host_cfg.budget.accountant
        ));
    }
    // With virtual users the curve is the validation users' (tuning looks at it); the test
    // users are scored once, at the end.
    let curve_set = match &users {
        FleetSource::Speakers(_) => &test,
        FleetSource::Virtual(..) => &public_data,
    };
    let mut scorer = Scorer {
        held_out: curve_set,
        labels: &labels,
        started,
        rounds,
        every: cfg.curve_every.max(1),
        curve: Vec::new(),
    };
    let fleet = match (&users, cfg.transport) {
        (FleetSource::Speakers(speakers), Transport::Http) => {
            let names: Vec<String> = speakers.iter().map(|(n, _)| n.clone()).collect();
            run_http(cfg, &host_cfg, &names, &mut scorer, log, progress)?
        }
        (users, _) => {
            let fleet = InProcessFleet {
                participation: cfg.participation,
                batching: cfg.local_batching,
            };
            let train = users.train();
            let with_given;
            let fleet_users: &dyn FleetUsers = match given {
                Some(given) => {
                    with_given = WithGiven {
                        users: train.as_ref(),
                        given,
                    };
                    &with_given
                }
                None => train.as_ref(),
            };
            fleet.run(&host_cfg, fleet_users, log, &mut |version, dir| {
                scorer.observe(version, dir, false, progress)
            })?
        }
    };
    let FleetRun {
        round_log,
        status,
        final_dir,
        final_version,
        uploads_accepted,
        uploads_refused,
        participation,
    } = fleet;
    scorer.observe(final_version, &final_dir, true, progress)?;
    let curve = scorer.curve;
    let model_out = cfg.out.join("model");
    copy_package(&final_dir, &model_out)?;
    let test_metrics = if cfg.tuning {
        None
    } else {
        Some(evaluate(&model_out, &test, &labels)?)
    };

    let delta = host_cfg.budget.delta;
    let mut ledger_epsilon = Vec::new();
    for (accountant, eps) in [
        (Accountant::Rdp, status.epsilon_rdp),
        (Accountant::Pld, status.epsilon_pld),
    ] {
        if let Some(epsilon) = eps {
            ledger_epsilon.push(EpsilonReport {
                epsilon,
                delta,
                accountant,
                adjacency: hush_privacy::accountant::Adjacency::AddRemove,
                unit: hush_privacy::accountant::PrivacyUnit::User,
                optimal_order: None,
            });
        }
    }
    let mut deployment_epsilon = Vec::new();
    let released = round_log
        .iter()
        .filter(|r| r.released_version.is_some())
        .count() as u64;
    if let (Some(plan), Some(_)) = (plan, host_cfg.dp.noise_cohort_size) {
        let plan = FederatedPlan {
            rounds: released.max(1),
            ..plan
        };
        for accountant in [Accountant::Rdp, Accountant::Pld] {
            deployment_epsilon.push(plan.extrapolated_epsilon(
                cfg.deployment_population,
                accountant,
                cfg.deployment_delta,
            )?);
        }
    }
    let report = SimulateReport {
        config: cfg.clone(),
        devices,
        clips_per_device: (clips_per_device.0, clips_per_device.2),
        curve,
        curve_on: users.curve_on().into(),
        population: users.summary(clips_per_device),
        rounds: round_log,
        test: test_metrics,
        ledger_epsilon,
        deployment_epsilon,
        uploads_accepted,
        uploads_refused,
        participation,
        seconds: started.elapsed().as_secs_f64(),
        updates_per_second: uploads_accepted as f64 / started.elapsed().as_secs_f64(),
        model: model_out,
    };
    let plot = cfg.out.join("accuracy.png");
    let series = vec![
        Series {
            name: "accuracy".into(),
            points: report
                .curve
                .iter()
                .map(|p| (p.version as f64, p.accuracy))
                .collect(),
        },
        Series {
            name: "balanced keyword accuracy".into(),
            points: report
                .curve
                .iter()
                .map(|p| (p.version as f64, p.balanced_keyword_accuracy))
                .collect(),
        },
    ];
    let title = plot_title(&report);
    line_plot(&plot, &title, "model version (round)", "accuracy", &series)
        .map_err(|e| io_err(&plot, e))?;
    let json = serde_json::to_vec_pretty(&report).map_err(|e| io_err(&cfg.out, e))?;
    let path = cfg.out.join("results.json");
    std::fs::write(&path, json).map_err(|e| io_err(&path, e))?;
    Ok(report)
}

/// The plot's title: the guarantee of what was run (the ledger's) and, when there is one,
/// the extrapolated deployment's, each labelled as such.
fn plot_title(report: &SimulateReport) -> String {
    let eps = |e: f64| {
        if e < 100.0 {
            format!("{e:.3}")
        } else {
            format!("{e:.0}")
        }
    };
    let mut parts = Vec::new();
    if let Some(e) = report.ledger_epsilon.first() {
        parts.push(format!(
            "as run: ε = {} (δ = {:e})",
            eps(e.epsilon),
            e.delta
        ));
    }
    if let Some(e) = report.deployment_epsilon.first() {
        parts.push(format!(
            "extrapolated to {} devices: ε = {} (δ = {:e})",
            report.config.deployment_population,
            eps(e.epsilon),
            e.delta
        ));
    }
    if parts.is_empty() {
        format!("federated KWS, {} (not private)", report.curve_on)
    } else {
        format!("federated KWS; {}", parts.join("; "))
    }
}

/// Scores each published model version once, in order.
struct Scorer<'a> {
    held_out: &'a LocalData,
    labels: &'a [String],
    started: Instant,
    rounds: u64,
    /// Scores every this many versions ([`SimulateConfig::curve_every`]).
    every: u64,
    curve: Vec<RoundPoint>,
}

impl Scorer<'_> {
    /// Scores `version` (in `dir`) unless it was just scored, or is off the curve's step
    /// and not the run's `last` version.
    fn observe(
        &mut self,
        version: u64,
        dir: &Path,
        last: bool,
        progress: &mut dyn FnMut(&RoundPoint, u64),
    ) -> Result<(), SimulateError> {
        if self.curve.last().is_some_and(|p| p.version == version)
            || (!last && !version.is_multiple_of(self.every))
        {
            return Ok(());
        }
        let m = evaluate(dir, self.held_out, self.labels)?;
        let point = RoundPoint {
            version,
            accuracy: m.accuracy,
            balanced_keyword_accuracy: m.balanced_keyword_accuracy,
            elapsed_s: self.started.elapsed().as_secs_f64(),
        };
        progress(&point, self.rounds);
        self.curve.push(point);
        Ok(())
    }
}

/// The fleet over HTTP: a round server on loopback, one device client thread per device.
fn run_http(
    cfg: &SimulateConfig,
    host_cfg: &FlConfig,
    train: &[String],
    scorer: &mut Scorer<'_>,
    log: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(&RoundPoint, u64),
) -> Result<FleetRun, SimulateError> {
    let mut host_cfg = host_cfg.clone();
    // The whole fleet shares one address (loopback): per-address limits would throttle it
    // as one device behind a NAT; per-device limits still apply.
    host_cfg.limits.register_per_address_per_minute = 1e6;
    host_cfg.limits.checkin_per_address_per_second = 1e6;
    let host = start_host(host_cfg)?;
    log(&format!("host listening on {}", host.url()));
    // The operator enrols exactly the simulated fleet.
    let enrolment = host.enrol(
        "simulation",
        train.len() as u64,
        Duration::from_secs(86_400),
    )?;

    // Devices register in speaker order before any of them starts: device ids key the
    // cohort draws, so each id must be the same speaker in every run of a seed.
    let anonymous = HostClient::new(&host.url(), Duration::from_secs(30))
        .map_err(|source| SimulateError::Device { index: 0, source })?;
    for (i, speaker) in train.iter().enumerate() {
        let device = |source| SimulateError::Device { index: i, source };
        let state = DeviceState::open(&cfg.out.join("devices").join(format!("device-{i:03}")))
            .map_err(device)?;
        let r = anonymous
            .register(&format!("sim-{speaker}"), &enrolment)
            .map_err(device)?;
        state
            .save_identity(&DeviceIdentity {
                server: host.url(),
                device_id: r.device_id,
                token: r.token,
            })
            .map_err(device)?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, speaker) in train.iter().enumerate() {
        let mut jc = JoinConfig::new(
            &host.url(),
            cfg.data.clone(),
            cfg.out.join("devices").join(format!("device-{i:03}")),
        );
        jc.speaker = Some(speaker.clone());
        jc.label = format!("sim-{speaker}");
        jc.max_backoff = Duration::from_secs(2);
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || join(&jc, &stop, &mut |_| {})));
    }

    loop {
        let finished = host.is_finished();
        let (version, dir) = host.latest_model();
        scorer.observe(version, &dir, false, progress)?;
        if finished {
            break;
        }
        if threads.iter().all(|t| t.is_finished()) {
            // Every device stopped before the host finished: collect their errors below.
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let mut summaries: Vec<JoinSummary> = Vec::new();
    for (index, t) in threads.into_iter().enumerate() {
        match t.join() {
            Ok(Ok(s)) => summaries.push(s),
            Ok(Err(source)) => return Err(SimulateError::Device { index, source }),
            Err(_) => {
                return Err(SimulateError::Unusable(format!(
                    "device {index}: its thread panicked"
                )))
            }
        }
    }
    let round_log = host.round_log()?;
    let status = host.status()?;
    let (final_version, final_dir) = host.latest_model();
    host.shutdown()?;
    Ok(FleetRun {
        round_log,
        status,
        final_version,
        final_dir,
        uploads_accepted: summaries.iter().map(|s| s.uploads_accepted).sum(),
        uploads_refused: summaries.iter().map(|s| s.uploads_refused).sum(),
        participation: ParticipationCounts::default(),
    })
}

fn copy_package(from: &Path, to: &Path) -> Result<(), SimulateError> {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| io_err(to, e))?;
    }
    std::fs::create_dir_all(to).map_err(|e| io_err(to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| io_err(from, e))?;
    for e in entries {
        let e = e.map_err(|e| io_err(from, e))?;
        if e.path().is_file() {
            let dest = to.join(e.file_name());
            std::fs::copy(e.path(), &dest).map_err(|err| io_err(&dest, err))?;
        }
    }
    Ok(())
}

impl SimulateConfig {
    /// The small keyword spotter of [`crate::recipes::small_kws_config`] (20 Mel bins,
    /// 49 frames, a 2-conv + 2-FC CNN with 33 K parameters) with the host's defaults
    /// for a fleet simulation on the bundled corpus: Poisson cohorts of expected size 8
    /// (q = 0.25 over 32 devices), flat clipping at 1.0, noise multiplier 2.0 calibrated for
    /// a noise cohort of 1 000, FedAvg (server lr 1), five local epochs of SGD (lr 0.3, batch 8), 60
    /// rounds; extrapolated to a deployment of 10⁶ devices at δ = 10⁻⁹.
    pub fn small_kws(data: &Path, out: &Path) -> Self {
        let kws = crate::recipes::small_kws_config(data, 1, 1);
        let arch = kws.arch.clone().unwrap_or_else(|| {
            ArchConfig::LeakCnn(hush_models::arch::LeakCnnConfig::new(
                hush_models::arch::IoShape {
                    frames: kws.frames,
                    bins: kws.features.dim(),
                    classes: kws.keywords.len() + 2,
                },
            ))
        });
        let mut host = FlConfig::with_model(Path::new(""), Path::new(""));
        host.rounds.rounds = 60;
        host.rounds.sampling_rate = 0.25;
        host.rounds.deadline_secs = 120.0;
        host.rounds.retry_after_ms = 50;
        host.dp.enabled = true;
        host.dp.noise_multiplier = 2.0;
        host.dp.noise_cohort_size = Some(1000.0);
        host.dp.clip = 1.0;
        host.local.epochs = 5;
        host.local.batch_size = 8;
        host.local.lr = 0.3;
        host.optimizer.lr = Some(1.0);
        host.budget.epsilon = 1e9;
        host.budget.delta = 1e-5;
        host.seed = Some(2026);
        Self {
            data: data.to_path_buf(),
            out: out.to_path_buf(),
            devices: None,
            keywords: kws.keywords,
            features: kws.features,
            frames: kws.frames,
            arch,
            init_seed: 1,
            host,
            budget_from_plan: true,
            deployment_population: 1_000_000,
            deployment_delta: 1e-9,
            transport: Transport::InProcess,
            participation: FleetParticipation::default(),
            local_batching: CohortSplit::default(),
            virtual_users: None,
            user_cache: None,
            tuning: false,
            curve_every: 1,
        }
    }
}
