//! The privacy side of a central DP-SGD run, shared by every central DP trainer (keyword
//! spotters, [`super::dp`]; BEST-RQ pretraining of the ASR encoder, [`super::pretrain`]).
//! The trainers own their models, data and loops; this module owns, once:
//!
//! - the public/private split of the training speakers ([`split_public`]);
//! - the plan: δ against `1/n`, the sampling rate, the planned steps and σ calibrated to the
//!   target ε, refused above the largest useful σ ([`DpPlan::new`]);
//! - the ledger: the planned release authorised before any work ([`DpRelease::open`]),
//!   the steps actually run recorded before anything is published, and the base of the
//!   privacy report ([`DpRelease::record`]);
//! - gradient-based layer freezing: ranking layers by their normalised squared gradient
//!   norms during the public warm start ([`LayerScores`]);
//! - clip bounds and the Gaussian mechanism for the layers DP trains ([`mechanism`]), and
//!   the run's seeded or OS sampling and noise ([`dp_sgd`]; the step itself is
//!   [`hush_models::dp::DpSgd::step`], the same for every trainer).

use hush_models::checkpoint::NamedTensor;
use hush_models::dp::{
    ClipBounds, DpSgd, ExpectedCount, GaussianMechanism, NoiseKind, NoiseSource, PoissonSampler,
};

use super::dp::{is_public_speaker, DpConfig, NoiseTarget, PrivacyReport};
use super::TrainError;
use hush_privacy::accountant::calibrate::{calibrate_noise_multiplier, DEFAULT_TOLERANCE};
use hush_privacy::accountant::{Accountant, Adjacency, PrivacyUnit, SubsampledGaussian};
use hush_privacy::ledger::sqlite::SqliteLedgerStore;
use hush_privacy::ledger::{Budget, Ledger, Mechanism, Release, ReleaseRecord};

pub(crate) fn privacy_err(what: impl std::fmt::Display) -> TrainError {
    TrainError::Privacy(what.to_string())
}

/// Splits training items into public and private by their speaker
/// ([`is_public_speaker`] with `dp.warm_start_public`). Errors when no item is private,
/// or when a warm start was asked for and no item is public.
pub(crate) fn split_public<T>(
    items: impl IntoIterator<Item = T>,
    speaker: impl Fn(&T) -> &str,
    dp: &DpConfig,
) -> Result<(Vec<T>, Vec<T>), TrainError> {
    let (public, private): (Vec<T>, Vec<T>) = items
        .into_iter()
        .partition(|t| is_public_speaker(speaker(t), dp.warm_start_public));
    if private.is_empty() {
        return Err(TrainError::Option {
            option: "--warm-start-public",
            reason: "every training speaker came out public; lower the fraction".into(),
        });
    }
    if dp.warm_start_public > 0.0 && public.is_empty() {
        return Err(TrainError::Option {
            option: "--warm-start-public",
            reason: "no training speaker came out public; raise the fraction".into(),
        });
    }
    Ok((public, private))
}

/// Layers frozen by `dp.freeze_fraction` out of `layers`; an error if that is all of them.
pub(crate) fn frozen_count(dp: &DpConfig, layers: usize) -> Result<usize, TrainError> {
    let n = (dp.freeze_fraction * layers as f64).floor() as usize;
    if n >= layers {
        return Err(TrainError::Option {
            option: "--freeze-fraction",
            reason: format!(
                "{} of {layers} layers would freeze every layer",
                dp.freeze_fraction
            ),
        });
    }
    Ok(n)
}

/// The sampling and noise of a run, fixed before any training.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DpPlan {
    /// Private examples.
    pub n: usize,
    /// Poisson sampling rate.
    pub q: f64,
    /// Steps per epoch, `round(1/q)`.
    pub steps_per_epoch: usize,
    /// Steps planned over every epoch.
    pub planned_steps: u64,
    /// The noise multiplier (calibrated or given).
    pub sigma: f64,
    /// The expected examples per step, `q·n`.
    pub expected: ExpectedCount,
}

impl DpPlan {
    /// The plan for `n` private examples, an expected batch `batch_size` (unless
    /// `dp.sampling_rate` is set) and `epochs` epochs. Refuses δ ≥ 1/n and an ε target
    /// that needs σ above the largest useful one.
    pub fn new(
        dp: &DpConfig,
        n: usize,
        batch_size: usize,
        epochs: usize,
    ) -> Result<Self, TrainError> {
        if dp.delta >= 1.0 / n as f64 {
            return Err(TrainError::Option {
                option: "--delta",
                reason: format!(
                    "{} is not below 1/n = 1/{n} (private examples); a δ that large allows \
                     releasing an example outright",
                    dp.delta
                ),
            });
        }
        let q = dp
            .sampling_rate
            .unwrap_or((batch_size as f64 / n as f64).min(1.0));
        let steps_per_epoch = (1.0 / q).round().max(1.0) as usize;
        let planned_steps = (steps_per_epoch * epochs) as u64;
        let sigma = match dp.noise {
            NoiseTarget::NoiseMultiplier(z) => z,
            NoiseTarget::Epsilon(eps) => calibrate_noise_multiplier(
                dp.accountant,
                Adjacency::AddRemove,
                eps,
                dp.delta,
                q,
                planned_steps,
                DEFAULT_TOLERANCE,
            )
            .map_err(|e| TrainError::Option {
                option: "--target-epsilon",
                reason: format!("cannot reach ε = {eps} in {planned_steps} steps at q = {q}: {e}"),
            })?,
        };
        let max_sigma = dp.max_noise_multiplier.unwrap_or(q * n as f64);
        if matches!(dp.noise, NoiseTarget::Epsilon(_)) && sigma > max_sigma {
            return Err(TrainError::Option {
                option: "--target-epsilon",
                reason: format!(
                    "unreachable within {planned_steps} steps at q = {q}: it needs noise \
                     multiplier {sigma:.1} (> {max_sigma:.1}), which drowns the gradient; use \
                     a larger ε, fewer epochs or more examples per step"
                ),
            });
        }
        let expected = ExpectedCount::poisson(q, n).map_err(privacy_err)?;
        Ok(Self {
            n,
            q,
            steps_per_epoch,
            planned_steps,
            sigma,
            expected,
        })
    }
}

/// The ledger of one run: authorised for the planned steps before any work, recorded for
/// the steps run before anything is published.
pub(crate) struct DpRelease {
    ledger: Ledger<SqliteLedgerStore>,
    plan: DpPlan,
    delta: f64,
    released: String,
}

impl DpRelease {
    /// Opens `dp.ledger` with the run's budget (`dp.budget_epsilon`, else the target ε,
    /// else the planned ε) and authorises the planned release of `released` (what is
    /// published: "kws model DIR", …); refused here, before any training, when over
    /// budget.
    pub fn open(dp: &DpConfig, plan: DpPlan, released: String) -> Result<Self, TrainError> {
        let planned_eps = SubsampledGaussian::poisson(plan.q, plan.sigma, plan.planned_steps)
            .map_err(privacy_err)?
            .epsilon(dp.accountant, Adjacency::AddRemove, dp.delta)
            .map_err(privacy_err)?
            .epsilon;
        let budget_eps = dp.budget_epsilon.unwrap_or(match dp.noise {
            NoiseTarget::Epsilon(e) => e,
            NoiseTarget::NoiseMultiplier(_) => planned_eps,
        });
        let budget = Budget::new(
            budget_eps,
            dp.delta,
            dp.accountant,
            Adjacency::AddRemove,
            PrivacyUnit::Example,
        )
        .map_err(privacy_err)?;
        let store = SqliteLedgerStore::open(&dp.ledger).map_err(privacy_err)?;
        let this = Self {
            ledger: Ledger::new(store, budget),
            plan,
            delta: dp.delta,
            released,
        };
        this.ledger.authorize(&this.release(plan.planned_steps)?)?;
        Ok(this)
    }

    fn release(&self, steps: u64) -> Result<Release, TrainError> {
        Ok(Release {
            mechanism: Mechanism::DpSgd,
            event: SubsampledGaussian::poisson(self.plan.q, self.plan.sigma, steps.max(1))
                .map_err(privacy_err)?,
            unit: PrivacyUnit::Example,
            adjacency: Adjacency::AddRemove,
            population: Some(self.plan.n as u64),
            delta: self.delta,
            released: self.released.clone(),
            additional: Default::default(),
        })
    }

    /// Completes the release of the `steps_run` steps actually run
    /// ([`Ledger::complete`]: re-checked against the budget and recorded durably) and only
    /// then calls `publish` with the record and the privacy report's trainer-independent
    /// part: ε by RDP and PLD, the plan, the clipping of `bounds` and the noise of
    /// `mechanism`. The trainer's `publish` fills in the rest (public and private data,
    /// frozen layers, input normalisation, batch norms, adaptive clipping) and writes the
    /// model.
    pub fn complete<T>(
        mut self,
        dp: &DpConfig,
        steps_run: u64,
        bounds: &ClipBounds,
        mechanism: &GaussianMechanism,
        publish: impl FnOnce(&ReleaseRecord, PrivacyReport) -> Result<T, TrainError>,
    ) -> Result<T, TrainError> {
        let actual = self.release(steps_run)?;
        let plan = self.plan;
        self.ledger.complete(
            &actual,
            |store, sealed| Ok(sealed.append_to(store)?),
            |record| {
                let event = record.release.event;
                let epsilon_rdp = event
                    .epsilon(Accountant::Rdp, Adjacency::AddRemove, dp.delta)
                    .map_err(privacy_err)?;
                let epsilon_pld = event
                    .epsilon(Accountant::Pld, Adjacency::AddRemove, dp.delta)
                    .ok();
                let report = PrivacyReport {
                    mechanism: Mechanism::DpSgd,
                    epsilon_rdp,
                    epsilon_pld,
                    delta: dp.delta,
                    unit: PrivacyUnit::Example,
                    adjacency: Adjacency::AddRemove,
                    noise_multiplier: plan.sigma,
                    target_epsilon: match dp.noise {
                        NoiseTarget::Epsilon(e) => Some(e),
                        NoiseTarget::NoiseMultiplier(_) => None,
                    },
                    sampling_rate: plan.q,
                    steps: event.steps,
                    population: plan.n,
                    expected_batch: plan.expected.get(),
                    clip: dp.clip,
                    clipping: dp.clipping,
                    normalize_layers: dp.normalize_layers,
                    sensitivity: bounds.sensitivity(),
                    noise: mechanism.kind,
                    public_speakers: 0,
                    public_examples: 0,
                    private_speakers: 0,
                    frozen_layers: Vec::new(),
                    input_norm_source: String::new(),
                    batch_norm_statistics: String::new(),
                    reproducible_noise: dp.reproducible,
                    adaptive_clip: None,
                    ledger: dp.ledger.display().to_string(),
                    ledger_record: record.id,
                };
                publish(record, report)
            },
        )
    }
}

/// Gradient-based layer freezing: during the public warm start each layer accumulates
/// `Σ_steps ‖g_l‖² / d_l`; the `k` layers with the least are frozen.
#[derive(Debug, Clone)]
pub(crate) struct LayerScores {
    layers: Vec<(String, usize)>,
    scores: Vec<f64>,
}

impl LayerScores {
    /// Zero scores for the trainable `layers` (`(name, size)`, in gradient order).
    pub fn new(layers: &[(String, usize)]) -> Self {
        Self {
            layers: layers.to_vec(),
            scores: vec![0.0; layers.len()],
        }
    }

    /// Adds one step's gradients (named and ordered like the layers).
    pub fn add(&mut self, grads: &[NamedTensor]) {
        for (s, g) in self.scores.iter_mut().zip(grads) {
            let sq: f64 = g.data.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
            *s += sq / g.data.len().max(1) as f64;
        }
    }

    /// The `k` lowest-scoring layers' names (frozen), and the others (trained with DP).
    pub fn freeze(&self, k: usize) -> (Vec<String>, Vec<(String, usize)>) {
        let mut ranked: Vec<usize> = (0..self.layers.len()).collect();
        ranked.sort_by(|&a, &b| self.scores[a].total_cmp(&self.scores[b]));
        let frozen: Vec<String> = ranked[..k.min(ranked.len())]
            .iter()
            .map(|&i| self.layers[i].0.clone())
            .collect();
        let trained = self
            .layers
            .iter()
            .filter(|(name, _)| !frozen.contains(name))
            .cloned()
            .collect();
        (frozen, trained)
    }
}

/// The clip bounds of total bound `c` over the DP-trained `layers`, and the Gaussian
/// mechanism with noise multiplier `sigma` on their sensitivity, dividing by `expected`.
pub(crate) fn mechanism(
    dp: &DpConfig,
    c: f32,
    layers: &[(String, usize)],
    sigma: f64,
    expected: ExpectedCount,
) -> Result<(ClipBounds, GaussianMechanism), TrainError> {
    let bounds = ClipBounds::new(dp.clipping, c, layers).map_err(privacy_err)?;
    let dim: usize = layers.iter().map(|(_, d)| d).sum();
    let kind = if dp.discrete_noise {
        // Grid step: the rounding's worst case γ√d adds at most 1 % to the sensitivity.
        NoiseKind::DiscreteGaussian {
            granularity: bounds.sensitivity() / (100.0 * (dim as f64).sqrt()),
        }
    } else {
        NoiseKind::Gaussian
    };
    let mechanism =
        GaussianMechanism::new(sigma, bounds.sensitivity(), expected, kind).map_err(privacy_err)?;
    Ok((bounds, mechanism))
}

/// The run's DP-SGD randomness over `n` private examples at rate `q` ([`DpSgd`]: the
/// Poisson sampler and the noise source): from the OS, or seeded from `seed` when
/// `dp.reproducible` (tests and measurements only: the noise is then predictable).
pub(crate) fn dp_sgd(dp: &DpConfig, q: f64, n: usize, seed: u64) -> Result<DpSgd, TrainError> {
    let (sampler, noise) = if dp.reproducible {
        (
            PoissonSampler::from_seed(q, seed ^ 0x5eed_0001).map_err(privacy_err)?,
            NoiseSource::from_seed(seed ^ 0x5eed_0002),
        )
    } else {
        (
            PoissonSampler::from_os(q).map_err(privacy_err)?,
            NoiseSource::from_os(),
        )
    };
    Ok(DpSgd::new(sampler, noise, n))
}
