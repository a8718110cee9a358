//! The federated audit: user-level DP in the in-process fleet simulator (the round engine,
//! its store, ledger and noise; [`simulate_with`]) on a KWS corpus's speakers, with `m`
//! canary clients.
//!
//! Canary `i` is a client whose update, whenever it is sampled, is a fixed random unit
//! direction `c_i` times `B` ([`AuditSettings::canary_norm`](super::AuditSettings::canary_norm) × the clip bound, so a
//! correct device clips it to `C`). The directions are sparse — [`SUPPORT`] random
//! coordinates with random signs, `1/√SUPPORT` each — so ten thousand canaries cost little
//! to make and to score, and random supports barely overlap. Each canary is enrolled with
//! probability ½ ([`CanaryDraw`]); the enrolled ones join the population the host samples
//! and accounts for. After the run the audit reads the released models only (every
//! round's published version). Under full participation (`q = 1`) it scores canary `i` by
//! `⟨w_T − w_0, c_i⟩` — with FedAvg at server learning rate 1 the sum of every round's
//! released delta. A sampled canary (`q < 1`) is scored round by round, where the data's
//! drift does not hide it ([`super::round_scores`]). Beside the rigorous one-run bound it
//! reports Andrew et al.'s (2024) one-shot estimate from the cosines of `w_T − w_0` with
//! inserted and held-back canaries, labelled as an estimate.
//!
//! DP off is the same run without the host's noise (devices still clip). With
//! [`FederatedAudit::population`] the real devices are virtual users (the population
//! simulator's), sampled as a cohort each round like the canaries.

use std::path::{Path, PathBuf};

use hush_audit::lower_bound::one_shot_estimate;
use hush_models::checkpoint::NamedTensor;
use hush_models::dp::noise::ExpectedCount;
use hush_models::dp::trainable_layout;
use hush_privacy::accountant::calibrate::{calibrate_noise_multiplier, DEFAULT_TOLERANCE};
use hush_privacy::accountant::{Accountant, Adjacency};
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use super::round_scores::{
    drift_residual, mixed_scores, participation_llr, round_deltas, DRIFT_NEIGHBOURS,
};
use super::{
    package_weights, sparse_tensors, AuditOutcome, AuditSettings, CanaryDraw, Claim, Observed,
    PrivacyAuditError,
};
use crate::fleet::GivenDeltas;
use crate::population::PopulationSpec;
use crate::simulate::{simulate_with, SimulateConfig};

/// Nonzero coordinates of a canary direction.
pub const SUPPORT: usize = 16;

/// One federated audit's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FederatedAudit {
    /// Corpus (its training speakers are the real devices), canaries, user-level claim
    /// (over the planned rounds), clip of an update, a cohort's sampling rate, seed,
    /// confidence.
    #[serde(flatten)]
    pub settings: AuditSettings,
    /// Rounds.
    pub rounds: u64,
    /// Local epochs of a real device.
    pub local_epochs: u32,
    /// Virtual users ([`crate::population`], made from `data`'s base speakers) as the
    /// real devices instead of the corpus's training speakers.
    #[serde(default)]
    pub population: Option<PopulationSpec>,
    /// Where the virtual users are cached (default: inside the run's folder).
    #[serde(default)]
    pub user_cache: Option<PathBuf>,
}

impl FederatedAudit {
    /// The audit's defaults on `data`: 10 000 canaries of norm 10 C, user-level ε = 1 at
    /// δ = 1e-5, C = 1, every device in every round (q = 1), 10 rounds, one local epoch.
    pub fn new(data: &Path) -> Self {
        Self {
            settings: AuditSettings::new(data, 10_000, 10.0, 1.0),
            rounds: 10,
            local_epochs: 1,
            population: None,
            user_cache: None,
        }
    }

    fn check(&self) -> Result<(), PrivacyAuditError> {
        self.settings.check()?;
        if self.rounds == 0 {
            return Err(PrivacyAuditError::Option {
                option: "--rounds",
                reason: "at least 1".into(),
            });
        }
        Ok(())
    }
}

/// Sparse canary directions over the model's trainable layout.
struct SparseCanaries {
    /// (layer, element count) of each trainable tensor, in the model's order.
    layout: Vec<(String, usize)>,
    /// Each canary's support: (flat coordinate, ±1/√SUPPORT).
    directions: Vec<Vec<(usize, f32)>>,
    /// Which canaries are enrolled, in enrolment order.
    enrolled: Vec<usize>,
    /// `B`.
    norm: f32,
}

impl SparseCanaries {
    fn new(layout: Vec<(String, usize)>, m: usize, seed: u64, norm: f32) -> Self {
        let d: usize = layout.iter().map(|(_, n)| n).sum();
        let mut rng = ChaCha20Rng::seed_from_u64(seed ^ 0xfed_ca4a);
        let value = 1.0 / (SUPPORT as f32).sqrt();
        let directions = (0..m)
            .map(|_| {
                sample(&mut rng, d, SUPPORT.min(d))
                    .into_iter()
                    .map(|c| (c, if rng.random_bool(0.5) { value } else { -value }))
                    .collect()
            })
            .collect();
        Self {
            layout,
            directions,
            enrolled: Vec::new(),
            norm,
        }
    }

    /// `⟨x, c_i⟩` for a flat vector `x`.
    fn project<T: Copy + Into<f64>>(&self, i: usize, x: &[T]) -> f64 {
        self.directions[i]
            .iter()
            .map(|&(c, v)| x[c].into() * f64::from(v))
            .sum()
    }
}

impl GivenDeltas for SparseCanaries {
    fn count(&self) -> usize {
        self.enrolled.len()
    }

    fn delta(&self, k: usize) -> Vec<NamedTensor> {
        sparse_tensors(&self.layout, &self.directions[self.enrolled[k]], self.norm)
    }
}

/// Runs the audited federated simulation into `dir/run` and audits what it released.
pub fn run(
    audit: &FederatedAudit,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<AuditOutcome, PrivacyAuditError> {
    audit.check()?;
    let set = &audit.settings;
    let run_err = |e: &dyn std::fmt::Display| PrivacyAuditError::Run(e.to_string());
    let run_dir = dir.join("run");
    let mut cfg = SimulateConfig::small_kws(&set.data, &run_dir);
    cfg.init_seed = set.seed;
    cfg.host.seed = Some(set.seed);
    cfg.host.rounds.rounds = audit.rounds;
    cfg.host.rounds.sampling_rate = set.sampling_rate;
    cfg.host.local.epochs = audit.local_epochs;
    cfg.host.dp.clip = set.clip;
    cfg.host.dp.noise_cohort_size = None;
    cfg.host.budget.delta = set.delta;
    cfg.host.dp.enabled = set.epsilon.is_some();
    // The audit reads the released models, not the accuracy curve: the initial and last
    // versions are scored for the progress lines, not every round's (with virtual users,
    // evaluating 300 validation users each round was most of the run).
    cfg.curve_every = audit.rounds;
    if let Some(spec) = &audit.population {
        // The audit scores no test set: a tuning run never looks at it.
        cfg.virtual_users = Some(spec.clone());
        cfg.user_cache = audit.user_cache.clone();
        cfg.tuning = true;
    }
    if let Some(eps) = set.epsilon {
        cfg.host.dp.noise_multiplier = calibrate_noise_multiplier(
            Accountant::Rdp,
            Adjacency::AddRemove,
            eps,
            set.delta,
            set.sampling_rate,
            audit.rounds,
            DEFAULT_TOLERANCE,
        )
        .map_err(|e| PrivacyAuditError::Option {
            option: "--epsilon",
            reason: e.to_string(),
        })?;
    }

    let device = burn::tensor::Device::flex();
    let layout = trainable_layout(&cfg.arch.init(&device).map_err(|e| run_err(&e))?)
        .map_err(|e| run_err(&e))?;
    let d: usize = layout.iter().map(|(_, n)| n).sum();
    let draw = CanaryDraw::new(set.canaries, set.seed);
    let mut canaries = SparseCanaries::new(
        layout.clone(),
        set.canaries,
        set.seed,
        set.canary_norm * set.clip,
    );
    canaries.enrolled = draw.inserted();
    progress(&format!(
        "{} canary clients ({} enrolled) beside the corpus's devices; {} rounds at q = {}, \
         noise multiplier {:.3}",
        set.canaries,
        canaries.enrolled.len(),
        audit.rounds,
        set.sampling_rate,
        if cfg.host.dp.enabled {
            cfg.host.dp.noise_multiplier
        } else {
            0.0
        }
    ));
    let progress = std::cell::RefCell::new(progress);
    let report = simulate_with(
        &cfg,
        Some(&canaries),
        &mut |l| (progress.borrow_mut())(l),
        &mut |p, _| {
            (progress.borrow_mut())(&format!(
                "version {}: accuracy {:.3}",
                p.version, p.accuracy
            ))
        },
    )
    .map_err(|e| run_err(&e))?;

    // From here on, only the released artifacts: the model every round published.
    let models = released_models(&run_dir.join("host").join("models"), &layout)?;
    let (initial, last) = match (models.first(), models.last()) {
        (Some(a), Some(b)) if models.len() > 1 => (a, b),
        _ => return Err(run_err(&"the run released no model after its initial one")),
    };
    let delta: Vec<f32> = last.iter().zip(initial).map(|(a, b)| a - b).collect();
    let norm = delta
        .iter()
        .map(|x| f64::from(*x).powi(2))
        .sum::<f64>()
        .sqrt();
    let total: Vec<f64> = (0..set.canaries)
        .map(|i| canaries.project(i, &delta))
        .collect();
    // A canary's clipped norm over the host's divisor (the expected cohort).
    let divisor = ExpectedCount::poisson(set.sampling_rate, report.devices)
        .map_err(|e| run_err(&e))?
        .get();
    let amplitude = f64::from(set.clip) / divisor;
    let scores = if set.sampling_rate < 1.0 {
        let deltas = round_deltas(&models);
        let projections: Vec<Vec<f64>> = (0..deltas.len())
            .map(|r| {
                let residual = drift_residual(&deltas, r, DRIFT_NEIGHBOURS);
                (0..set.canaries)
                    .map(|i| canaries.project(i, &residual))
                    .collect()
            })
            .collect();
        let llr = participation_llr(&projections, amplitude, set.sampling_rate);
        mixed_scores(&total, &llr, set.sampling_rate)
    } else {
        total.clone()
    };
    let cosines = |inserted: bool| -> Vec<f64> {
        total
            .iter()
            .zip(&draw.included)
            .filter(|(_, &i)| i == inserted)
            .map(|(s, _)| s / norm.max(f64::MIN_POSITIVE))
            .collect()
    };
    let estimate =
        one_shot_estimate(&cosines(true), &cosines(false), set.delta).map_err(|e| run_err(&e))?;
    let epsilon_of = |a: Accountant| {
        report
            .ledger_epsilon
            .iter()
            .find(|e| e.accountant == a)
            .map(|e| e.epsilon)
    };
    let claim = Claim {
        epsilon_rdp: set.epsilon.and(epsilon_of(Accountant::Rdp)),
        epsilon_pld: set.epsilon.and(epsilon_of(Accountant::Pld)),
        delta: set.delta,
        unit: "user".into(),
    };
    let settings = serde_json::json!({
        "audit": audit,
        "model": cfg.arch.name(),
        "parameters": d,
        "canary_support": SUPPORT,
        "scoring": if set.sampling_rate < 1.0 {
            "q · z(total delta) + (1 − q) · z(participation likelihood ratio over the rounds' drift residuals)"
        } else {
            "total delta"
        },
        "drift_neighbours": DRIFT_NEIGHBOURS,
        "canary_amplitude": amplitude,
        "devices": report.devices,
        "noise_multiplier": if cfg.host.dp.enabled { cfg.host.dp.noise_multiplier } else { 0.0 },
        "rounds": report.rounds.len(),
        "uploads_accepted": report.uploads_accepted,
        "uploads_refused": report.uploads_refused,
    });
    AuditOutcome::finish(
        "federated",
        Observed {
            claim,
            scores,
            included: draw.included,
            one_shot: Some(estimate),
            settings,
        },
        set.confidence,
        dir,
    )
}

/// Every model version under `models` (`v0`, the initial one, to the last), flattened over
/// `layout`, in version order.
fn released_models(
    models: &Path,
    layout: &[(String, usize)],
) -> Result<Vec<Vec<f32>>, PrivacyAuditError> {
    let unreadable =
        |e: std::io::Error| PrivacyAuditError::Run(format!("{}: {e}", models.display()));
    let mut versions: Vec<u64> = Vec::new();
    for entry in std::fs::read_dir(models).map_err(unreadable)? {
        let name = entry.map_err(unreadable)?.file_name();
        if let Some(v) = name
            .to_str()
            .and_then(|n| n.strip_prefix('v')?.parse().ok())
        {
            versions.push(v);
        }
    }
    versions.sort_unstable();
    if versions.iter().enumerate().any(|(i, &v)| v != i as u64) {
        return Err(PrivacyAuditError::Run(format!(
            "{}: model versions {versions:?}, expected v0, v1, … without gaps",
            models.display()
        )));
    }
    versions
        .iter()
        .map(|v| package_weights(&models.join(format!("v{v}")), layout))
        .collect()
}
