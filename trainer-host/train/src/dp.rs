//! Central DP-SGD for keyword spotters (`hush-host train --dp …`), example-level privacy.
//!
//! The run, in order:
//!
//! 1. **Checks before any work**: clip, δ, sampling rate, freeze fraction and the ε target
//!    are validated ([`DpConfig::check`]); once the data is loaded, δ must be below
//!    `1/n`, the noise multiplier is calibrated for the target ε over the planned steps
//!    (RDP by default) and refused if it would be larger than
//!    [`DpConfig::max_noise_multiplier`] (default `q·n`: the target is then unreachable
//!    within the steps at any useful noise), and the planned release is authorised against the
//!    ledger's budget ([`hush_privacy::ledger::Ledger::authorize`]).
//! 2. **Public warm start** (optional): a fraction of the training speakers is public,
//!    chosen by a deterministic hash of the speaker id ([`is_public_speaker`]; SHA-256 of a
//!    salted id, so the choice is independent of the split hash). The model first trains on
//!    them without noise (AdamW, batch statistics on). Public data also supplies the input
//!    normalisation and the batch-norm running statistics; without public data the input
//!    normalisation comes from the validation split (never trained on; reported in
//!    `privacy.json`) and batch norms keep their initial statistics.
//! 3. **Gradient-based layer freezing** (optional, needs the warm start): during the warm
//!    start each layer (trainable tensor) accumulates `Σ_steps ‖g_l‖² / d_l`; the
//!    `⌊F·L⌋` layers with the least are frozen. DP then updates only the rest, and the clip
//!    bounds (hence the sensitivity) cover only the rest.
//! 4. **DP-SGD** on the private speakers, one [`hush_models::dp::DpSgd::step`] per step
//!    (the step every central DP trainer shares): Poisson-samples examples with rate `q`
//!    ([`hush_models::dp::PoissonSampler`], ChaCha20), sums per-example clipped (or
//!    layer-normalised) gradients ([`clipped_grad_sum_with`]: vectorised per-example
//!    gradients in physical batches within [`DpConfig::max_grad_memory_mb`]; batch norms on
//!    stored statistics, see [`hush_models::dp::per_example`]), adds Gaussian noise `σ·sensitivity` to the sum
//!    and divides by the expected count `q·n` ([`GaussianMechanism::privatize`](hush_models::dp::GaussianMechanism::privatize)), then
//!    takes an AdamW step on the noisy mean (post-processing). With adaptive clipping
//!    (`--adaptive-clip-quantile`, [`AdaptiveClip`]) the bound follows a quantile of the
//!    per-example norms through a separately noised unclipped count; σ (accounted, in the
//!    ledger) then covers both queries and the gradient sum gets
//!    `z_Δ = (σ⁻² − (2σ_b)⁻²)^(-1/2)`.
//! 5. **Release**: the epoch with the best validation accuracy is kept (the last one with
//!    [`KwsTrainConfig::keep_last_epoch`]); the release (the
//!    steps actually run) is recorded durably in the ledger **before** the model package
//!    is written ([`hush_privacy::ledger::Ledger::complete`], the one release order); `privacy.json` (ε by RDP and PLD, δ, unit, adjacency) is written beside
//!    the model and copied into the card's provenance options.
//!
//! Not done yet: speaker-level (user) privacy in central DP-SGD (the unit is one example),
//! and data augmentation during the DP phase (clean features are used).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::AdamWConfig;
use hush_device::infer::clip_samples;

use hush_models::checkpoint::{NamedTensor, TensorSource};
use hush_models::dp::{
    clipped_grad_sum_with, gradient_noise_multiplier, trainable_layout, AdaptiveClip, Bounding,
    ClipStrategy, NoiseKind, PerExampleConfig, PerExampleMethod,
};
use hush_models::package::{write_package, Metrics, ModelCard, Provenance};
use hush_models::step::{apply_grads, loss_and_grads, Batch};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::data::{load_kws, Clip};
use super::dp_run::{
    dp_sgd, frozen_count, mechanism, privacy_err, split_public, DpPlan, DpRelease, LayerScores,
};
use super::schedule::WarmupCosine;
use super::{
    evaluate, features_of, input_stats, BestEpoch, EpochReport, KwsTrainConfig, Prepared,
    TrainError,
};
use hush_privacy::accountant::{Accountant, Adjacency, EpsilonReport, PrivacyUnit};
use hush_privacy::ledger::{Mechanism, ReleaseRecord};

/// How much noise: a target ε (the noise multiplier is calibrated) or a fixed multiplier.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseTarget {
    /// Calibrate σ so the planned steps reach at most this ε at δ.
    Epsilon(f64),
    /// Use this σ; ε follows from it.
    NoiseMultiplier(f64),
}

/// Everything DP-SGD decides on top of [`KwsTrainConfig`] (which still gives the data,
/// architecture, features, epochs, batch size, learning rate, patience and seed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DpConfig {
    /// Target ε or fixed noise multiplier.
    pub noise: NoiseTarget,
    /// δ of the guarantee (must be below 1/n).
    pub delta: f64,
    /// Total clip bound `C` (L2, over all DP-trained layers).
    pub clip: f32,
    /// How `C` is shared among layers.
    pub clipping: ClipStrategy,
    /// Scale every example's layers to exactly their bounds instead of clipping.
    pub normalize_layers: bool,
    /// Poisson sampling rate `q`; `None`: batch size / private examples.
    pub sampling_rate: Option<f64>,
    /// Fraction of layers (trainable tensors) to freeze after the warm start, in `[0, 1)`.
    pub freeze_fraction: f64,
    /// Fraction of training speakers that are public (warm start without noise), in `[0, 1)`.
    pub warm_start_public: f64,
    /// Epochs of the public warm start.
    pub warm_start_epochs: usize,
    /// Discrete-Gaussian noise on an integer grid instead of floating-point Gaussian.
    pub discrete_noise: bool,
    /// Accountant used to calibrate σ and for the ledger budget.
    pub accountant: Accountant,
    /// Refuse a calibrated σ above this: the target is then unreachable within the
    /// steps at any useful noise. `None`: the expected batch `q·n`, where the noise std on
    /// each coordinate of the averaged gradient, `σ·C/(q·n)`, reaches the clip bound `C`.
    pub max_noise_multiplier: Option<f64>,
    /// The privacy ledger (SQLite file; created if missing).
    pub ledger: PathBuf,
    /// The ledger's total ε budget; `None`: the target ε (or this run's ε).
    pub budget_epsilon: Option<f64>,
    /// Seed noise and sampling from the training seed (reproducible runs and tests only:
    /// the noise is then predictable). Off: both come from the operating system.
    pub reproducible: bool,
    /// Most MiB of per-example weight copies and gradients held at once: larger steps are
    /// split into physical batches with gradient accumulation ([`PerExampleConfig`]).
    #[serde(default = "default_max_grad_memory_mb")]
    pub max_grad_memory_mb: usize,
    /// How per-example gradients are computed (all give the same gradients; speed
    /// differs by architecture, BENCHMARKS.md).
    #[serde(default)]
    pub per_example_method: PerExampleMethod,
    /// Threads per-example gradients are computed on ([`PerExampleConfig::threads`]): the
    /// same gradients at any count; with dropout, seeded runs repeat only at 1.
    #[serde(default = "one")]
    pub per_example_threads: usize,
    /// Adaptive clipping ([`AdaptiveClip`], Andrew et al. 2021): starting from `clip`, move
    /// the bound toward this quantile of the per-example gradient norms, in `(0, 1)`.
    /// `None`: a fixed bound.
    #[serde(default)]
    pub adaptive_clip_quantile: Option<f64>,
    /// Geometric learning rate `η` of adaptive clipping.
    #[serde(default = "default_adaptive_clip_lr")]
    pub adaptive_clip_lr: f64,
    /// Noise std `σ_b` of the unclipped count; `None`: the expected batch / 20 (the paper's
    /// choice). Must exceed half the noise multiplier.
    #[serde(default)]
    pub adaptive_clip_count_noise: Option<f64>,
}

fn one() -> usize {
    1
}

fn default_max_grad_memory_mb() -> usize {
    256
}

fn default_adaptive_clip_lr() -> f64 {
    hush_models::dp::adaptive::DEFAULT_LEARNING_RATE
}

impl DpConfig {
    /// Defaults around a target ε, δ and clip bound: flat clipping, `q` from the batch
    /// size, no freezing or warm start, continuous noise, RDP, σ at most `q·n`, ledger
    /// `hush-ledger.sqlite`, OS randomness.
    pub fn new(target_epsilon: f64, delta: f64, clip: f32) -> Self {
        Self {
            noise: NoiseTarget::Epsilon(target_epsilon),
            delta,
            clip,
            clipping: ClipStrategy::Flat,
            normalize_layers: false,
            sampling_rate: None,
            freeze_fraction: 0.0,
            warm_start_public: 0.0,
            warm_start_epochs: 3,
            discrete_noise: false,
            accountant: Accountant::Rdp,
            max_noise_multiplier: None,
            ledger: PathBuf::from("hush-ledger.sqlite"),
            budget_epsilon: None,
            reproducible: false,
            max_grad_memory_mb: default_max_grad_memory_mb(),
            per_example_method: PerExampleMethod::default(),
            per_example_threads: 1,
            adaptive_clip_quantile: None,
            adaptive_clip_lr: default_adaptive_clip_lr(),
            adaptive_clip_count_noise: None,
        }
    }

    /// Checks that need no data; errors name the CLI flag.
    pub fn check(&self) -> Result<(), TrainError> {
        let bad = |option, reason: String| Err(TrainError::Option { option, reason });
        match self.noise {
            NoiseTarget::Epsilon(e) if !(e.is_finite() && e > 0.0) => {
                return bad("--target-epsilon", format!("{e}: must be a finite ε > 0"))
            }
            NoiseTarget::NoiseMultiplier(z) if !(z.is_finite() && z > 0.0) => {
                return bad("--noise-multiplier", format!("{z}: must be finite and > 0"))
            }
            _ => {}
        }
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return bad("--delta", format!("{}: must be in (0, 1)", self.delta));
        }
        if !(self.clip.is_finite() && self.clip > 0.0) {
            return bad(
                "--clip",
                format!("{}: must be a finite bound > 0", self.clip),
            );
        }
        if let Some(q) = self.sampling_rate {
            if !(q > 0.0 && q <= 1.0) {
                return bad("--sampling-rate", format!("{q}: must be in (0, 1]"));
            }
        }
        if !(0.0..1.0).contains(&self.freeze_fraction) {
            return bad(
                "--freeze-fraction",
                format!(
                    "{}: must be in [0, 1) (1 would freeze every layer)",
                    self.freeze_fraction
                ),
            );
        }
        if !(0.0..1.0).contains(&self.warm_start_public) {
            return bad(
                "--warm-start-public",
                format!(
                    "{}: must be in [0, 1) (some speakers must stay private)",
                    self.warm_start_public
                ),
            );
        }
        if self.freeze_fraction > 0.0 && self.warm_start_public == 0.0 {
            return bad(
                "--freeze-fraction",
                "layers are ranked on public data: needs --warm-start-public > 0".into(),
            );
        }
        if self.warm_start_public > 0.0 && self.warm_start_epochs == 0 {
            return bad(
                "--warm-start-epochs",
                "at least 1 with a public warm start".into(),
            );
        }
        if self.per_example_threads == 0 {
            return bad("--per-example-threads", "0: need at least 1".into());
        }
        if let Some(m) = self.max_noise_multiplier {
            if !(m.is_finite() && m > 0.0) {
                return bad(
                    "max noise multiplier",
                    format!("{m}: must be finite and > 0"),
                );
            }
        }
        if let Some(g) = self.adaptive_clip_quantile {
            if !(g > 0.0 && g < 1.0) {
                return bad(
                    "--adaptive-clip-quantile",
                    format!("{g}: must be in (0, 1)"),
                );
            }
            if self.normalize_layers {
                return bad(
                    "--adaptive-clip-quantile",
                    "cannot combine with --normalize-layers (every example is scaled to its \
                     bound, so there is no unclipped fraction to adapt to)"
                        .into(),
                );
            }
            if !(self.adaptive_clip_lr.is_finite() && self.adaptive_clip_lr > 0.0) {
                return bad(
                    "--adaptive-clip-lr",
                    format!("{}: must be finite and > 0", self.adaptive_clip_lr),
                );
            }
            if let Some(sb) = self.adaptive_clip_count_noise {
                if !(sb.is_finite() && sb > 0.0) {
                    return bad(
                        "--adaptive-clip-count-noise",
                        format!("{sb}: must be finite and > 0"),
                    );
                }
            }
        }
        if self.max_grad_memory_mb == 0 {
            return bad("--max-grad-memory-mb", "0: must be at least 1 (MiB)".into());
        }
        if let Some(b) = self.budget_epsilon {
            if !(b.is_finite() && b > 0.0) {
                return bad("--budget-epsilon", format!("{b}: must be a finite ε > 0"));
            }
        }
        Ok(())
    }
}

/// Whether `speaker` is public when a fraction `fraction` of speakers is: the first 8
/// bytes of SHA-256(`hush-public-speaker:` + id), as a number in `[0, 1)`, below
/// `fraction`. Deterministic, so the public set is the same on every run and machine.
pub fn is_public_speaker(speaker: &str, fraction: f64) -> bool {
    let digest = Sha256::digest(format!("hush-public-speaker:{speaker}").as_bytes());
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(head) as f64 / 2f64.powi(64)) < fraction
}

/// The privacy claim of a DP-SGD release: written as `privacy.json` beside the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrivacyReport {
    /// `dp_sgd`.
    pub mechanism: Mechanism,
    /// ε by RDP (δ, adjacency, unit and accountant inside).
    pub epsilon_rdp: EpsilonReport,
    /// ε by PLD, when the PLD accountant could compute it.
    pub epsilon_pld: Option<EpsilonReport>,
    /// δ.
    pub delta: f64,
    /// Unit of privacy (one training example).
    pub unit: PrivacyUnit,
    /// Adjacency (add/remove one example).
    pub adjacency: Adjacency,
    /// Noise multiplier σ (noise std on the sum over the sensitivity).
    pub noise_multiplier: f64,
    /// Target ε the noise was calibrated for, if any.
    pub target_epsilon: Option<f64>,
    /// Poisson sampling rate.
    pub sampling_rate: f64,
    /// Noisy steps run.
    pub steps: u64,
    /// Private examples (the population sampled from).
    pub population: usize,
    /// Expected examples per step, `q·n` (the divisor of the noisy sum).
    pub expected_batch: f64,
    /// Total clip bound C.
    pub clip: f32,
    /// Clipping strategy.
    pub clipping: ClipStrategy,
    /// Layer-wise normalisation instead of clipping.
    pub normalize_layers: bool,
    /// L2 sensitivity of one example, `sqrt(Σ C_l²)`.
    pub sensitivity: f64,
    /// `gaussian` or `discrete_gaussian`.
    pub noise: NoiseKind,
    /// Public speakers (warm start, not protected by ε).
    pub public_speakers: usize,
    /// Public examples.
    pub public_examples: usize,
    /// Private speakers.
    pub private_speakers: usize,
    /// Layers frozen after the warm start (not updated by DP).
    pub frozen_layers: Vec<String>,
    /// Where the input normalisation came from (`public speakers` or `validation split`).
    pub input_norm_source: String,
    /// Where the batch-norm statistics came from.
    pub batch_norm_statistics: String,
    /// Whether noise and sampling were seeded (reproducible, not for real releases).
    pub reproducible_noise: bool,
    /// Adaptive clipping, when it was on (`clip` and `sensitivity` above are then the
    /// initial ones).
    #[serde(default)]
    pub adaptive_clip: Option<AdaptiveClipReport>,
    /// The ledger file and the record's id.
    pub ledger: String,
    /// Ledger record id.
    pub ledger_record: i64,
}

/// How adaptive clipping ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveClipReport {
    /// Target quantile `γ` of the per-example norms.
    pub target_quantile: f64,
    /// Geometric learning rate `η`.
    pub learning_rate: f64,
    /// Noise std `σ_b` of the unclipped count.
    pub count_noise_std: f64,
    /// Noise multiplier of the gradient sum, `z_Δ = (z⁻² − (2σ_b)⁻²)^(-1/2)`; the
    /// accounted `noise_multiplier` `z` covers the gradient and the count together.
    pub gradient_noise_multiplier: f64,
    /// The bound after the last step.
    pub final_clip: f64,
}

/// What DP training produced.
#[derive(Debug, Clone)]
pub struct DpTrainReport {
    /// The card written to `model.json`.
    pub card: ModelCard,
    /// Per-epoch numbers of the DP phase.
    pub epochs: Vec<EpochReport>,
    /// The privacy claim (also in `privacy.json`).
    pub privacy: PrivacyReport,
    /// The ledger record.
    pub record: ReleaseRecord,
}

fn make_batch(p: &Prepared, idx: &[usize], per: usize, dims: (usize, usize, usize)) -> Batch {
    let (frames, bins, k) = dims;
    let mut features = Vec::with_capacity(idx.len() * per);
    let mut targets = vec![0f32; idx.len() * k];
    for (i, &j) in idx.iter().enumerate() {
        features.extend_from_slice(&p.feats[j * per..(j + 1) * per]);
        targets[i * k + p.classes[j]] = 1.0;
    }
    Batch {
        features,
        targets,
        batch: idx.len(),
        frames,
        bins,
        classes: k,
    }
}

/// Trains a keyword spotter with DP-SGD and writes its package and `privacy.json` to
/// `out`, after recording the release in the ledger. `progress` sees every DP epoch, and
/// epoch 0 (validation accuracy after the public warm start) when there is one.
pub fn train_kws_dp(
    cfg: &KwsTrainConfig,
    dp: &DpConfig,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&EpochReport),
) -> Result<DpTrainReport, TrainError> {
    train_kws_dp_with(cfg, dp, &NoGradientExamples, out, command, progress)
}

/// Private examples given by their gradient instead of a clip: an audit's canaries
/// (`hush-host audit privacy`). They join the private training set: DP-SGD samples them
/// with the clips, bounds their gradients like any example's, counts them in the
/// population and in the expected batch.
pub trait GradientExamples {
    /// How many.
    fn count(&self) -> usize;
    /// Example `i`'s gradient (before bounding) over the DP-trained `layers` (name,
    /// element count), one tensor per layer in that order.
    fn gradient(&self, i: usize, layers: &[(String, usize)]) -> Vec<NamedTensor>;
}

/// No gradient-space examples (every ordinary run).
#[derive(Debug, Clone, Copy)]
pub struct NoGradientExamples;

impl GradientExamples for NoGradientExamples {
    fn count(&self) -> usize {
        0
    }
    fn gradient(&self, _: usize, _: &[(String, usize)]) -> Vec<NamedTensor> {
        Vec::new()
    }
}

/// The initial trainable weights of a DP-SGD run of `cfg` (the seed's): public, as the
/// seed is. The privacy audit scores its canaries by how far the released weights moved
/// from them.
pub fn kws_initial_weights(cfg: &KwsTrainConfig) -> Result<Vec<NamedTensor>, TrainError> {
    let (_, _, arch) = cfg.resolve_arch()?;
    let device = super::device(cfg.compute).autodiff();
    Ok(arch.init_seeded(&device, cfg.seed)?.named_tensors()?)
}

/// [`train_kws_dp`] with `extra` private examples given by their gradients.
pub fn train_kws_dp_with(
    cfg: &KwsTrainConfig,
    dp: &DpConfig,
    extra: &dyn GradientExamples,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&EpochReport),
) -> Result<DpTrainReport, TrainError> {
    cfg.check()?;
    dp.check()?;
    if cfg.balance_classes {
        // The weights would be the private data's class counts, which no noise covers.
        return Err(TrainError::option(
            "--balance-classes",
            "not offered with --dp: class weights would come from the private clips' class \
             counts, which DP-SGD does not protect",
        ));
    }
    if cfg.swa_epochs > 0 {
        // Averaging DP-SGD's iterates is post-processing, but re-estimating the batch
        // norms of the average reads the private clips outside DP-SGD's noise.
        return Err(TrainError::option(
            "--swa-epochs",
            "not offered with --dp: re-estimating batch-norm statistics would read the \
             private clips outside DP-SGD's noise",
        ));
    }
    let (labels, io, arch) = cfg.resolve_arch()?;
    let bins = io.bins;
    let plain = super::device(cfg.compute);
    let layers = trainable_layout(&arch.init(&plain)?)?;
    let n_frozen = frozen_count(dp, layers.len())?;

    // Data: public and private training speakers.
    let sr = cfg.features.frame.sample_rate;
    let clip_len = clip_samples(&cfg.features, cfg.frames);
    let data = load_kws(&cfg.data, &labels, sr, clip_len)?;
    let (public, private) = split_public(data.train.iter().cloned(), |c: &Clip| &c.speaker, dp)?;
    let real = private.len();
    let plan = DpPlan::new(dp, real + extra.count(), cfg.batch_size, cfg.epochs)?;
    let (n, q, steps_per_epoch) = (plan.n, plan.q, plan.steps_per_epoch);
    let expected = plan.expected;
    // Adaptive clipping: the unclipped count takes a share of σ; the gradient gets z_Δ.
    let mut adaptive = match dp.adaptive_clip_quantile {
        None => None,
        Some(gamma) => {
            let sb = dp
                .adaptive_clip_count_noise
                .unwrap_or_else(|| AdaptiveClip::default_count_noise(expected));
            gradient_noise_multiplier(plan.sigma, sb).map_err(|e| TrainError::Option {
                option: "--adaptive-clip-quantile",
                reason: format!(
                    "the unclipped count's noise σ_b = {sb:.3} must exceed half the noise \
                     multiplier {:.3} (raise --adaptive-clip-count-noise, or the \
                     expected batch q·n = {:.1}, whose default σ_b is q·n/20): {e}",
                    plan.sigma,
                    expected.get()
                ),
            })?;
            Some(
                AdaptiveClip::new(f64::from(dp.clip), gamma, dp.adaptive_clip_lr, sb)
                    .map_err(privacy_err)?,
            )
        }
    };
    let gradient_sigma = match &adaptive {
        Some(a) => {
            gradient_noise_multiplier(plan.sigma, a.count_noise_std()).map_err(privacy_err)?
        }
        None => plan.sigma,
    };
    // Refused here, before any training, when over budget.
    let release = DpRelease::open(dp, plan, format!("kws model {}", out.display()))?;

    // Features.
    let public_feats = features_of(&public, &cfg.features, cfg.frames)?;
    let private_feats = features_of(&private, &cfg.features, cfg.frames)?;
    let val = features_of(&data.validation, &cfg.features, cfg.frames)?;
    let test = features_of(&data.test, &cfg.features, cfg.frames)?;
    let (norm_source, (mean, scale)) = if public.is_empty() {
        ("validation split", input_stats(&val.feats, bins))
    } else {
        ("public speakers", input_stats(&public_feats.feats, bins))
    };

    let device = plain.clone().autodiff();
    let mut model = arch.init_seeded(&device, cfg.seed)?;
    model.set_input_norm(&mean, &scale)?;
    let per = cfg.frames * bins;
    let dims = (cfg.frames, bins, io.classes);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);

    // Public warm start, ranking layers by normalised squared gradient norms.
    let mut scores = LayerScores::new(&layers);
    if !public.is_empty() {
        let mut opt = AdamWConfig::new()
            .with_weight_decay(cfg.weight_decay)
            .init();
        let mut order: Vec<usize> = (0..public.len()).collect();
        let spe = public.len().div_ceil(cfg.batch_size);
        let schedule = WarmupCosine {
            peak: cfg.lr,
            warmup: spe.min(50),
            total: spe * dp.warm_start_epochs,
            min_ratio: 0.01,
        };
        let mut step = 0;
        for _ in 0..dp.warm_start_epochs {
            order.shuffle(&mut rng);
            for chunk in order.chunks(cfg.batch_size) {
                let batch = make_batch(&public_feats, chunk, per, dims);
                let (_, grads) = loss_and_grads(&model, &batch, &device)?;
                scores.add(&model.named_grads(&grads)?);
                model = apply_grads(&mut opt, schedule.lr(step), model, grads);
                step += 1;
            }
        }
        // Epoch 0: where the warm start left the model.
        let v = evaluate(
            &model.valid(),
            &val,
            cfg.frames,
            bins,
            &labels.classes,
            &plain,
        )?;
        progress(&EpochReport {
            epoch: 0,
            train_loss: f64::NAN,
            val_accuracy: v.accuracy,
            lr: cfg.lr,
            best: false,
        });
    }
    let (frozen, dp_layers) = scores.freeze(n_frozen);
    // The clip bounds and the mechanism for a total bound C (fixed, or each step's
    // adaptive bound).
    let mechanism_for = |c: f32| mechanism(dp, c, &dp_layers, gradient_sigma, expected);
    let (initial_bounds, initial_mechanism) = mechanism_for(dp.clip)?;
    let mut sgd = dp_sgd(dp, q, n, cfg.seed)?;
    let per_example = PerExampleConfig {
        method: dp.per_example_method,
        max_grad_memory: dp.max_grad_memory_mb << 20,
        threads: dp.per_example_threads,
    };
    let bounding = if dp.normalize_layers {
        Bounding::Normalize
    } else {
        Bounding::Clip
    };

    // DP-SGD: batch norms on the (public or initial) statistics from here on.
    model = model.with_batch_statistics(false);
    let mut opt = AdamWConfig::new()
        .with_weight_decay(cfg.weight_decay)
        .init();
    let schedule = WarmupCosine {
        peak: cfg.lr,
        warmup: steps_per_epoch.min(50),
        total: plan.planned_steps as usize,
        min_ratio: 0.01,
    };
    let mut step = 0usize;
    let mut tracker = BestEpoch::new(cfg.patience).keeping_last(cfg.keep_last_epoch);
    for epoch in 1..=cfg.epochs {
        let (mut loss_sum, mut seen) = (0f64, 0usize);
        let mut lr = schedule.lr(step);
        for _ in 0..steps_per_epoch {
            let (bounds, mechanism) = match &adaptive {
                Some(a) => mechanism_for(a.clip() as f32)?,
                None => (initial_bounds.clone(), initial_mechanism.clone()),
            };
            lr = schedule.lr(step);
            let stepped = sgd.step(
                model,
                &mechanism,
                |m, idx| {
                    // Sampled indices are sorted: the clips first, then gradient examples.
                    let split = idx.partition_point(|&i| i < real);
                    let batch = make_batch(&private_feats, &idx[..split], per, dims);
                    let mut sum =
                        clipped_grad_sum_with(m, &batch, &bounds, bounding, &per_example, &device)?;
                    for &i in &idx[split..] {
                        sum.add_example(extra.gradient(i - real, &dp_layers), &bounds, bounding)?;
                    }
                    Ok::<_, TrainError>(sum)
                },
                |m, mean| {
                    let grads = m.grads_params(mean)?;
                    Ok(apply_grads(&mut opt, lr, m, grads))
                },
            )?;
            let stats;
            (model, stats) = stepped;
            if let Some(a) = adaptive.as_mut() {
                a.update(
                    stats.examples - stats.clipped,
                    stats.examples,
                    expected,
                    sgd.noise_mut(),
                );
            }
            loss_sum += f64::from(stats.loss_sum);
            seen += stats.examples;
            step += 1;
        }
        let stop = tracker.end_epoch(
            &model,
            &val,
            (cfg.frames, bins),
            &labels.classes,
            &plain,
            (epoch, loss_sum / seen.max(1) as f64, lr),
            progress,
        )?;
        if stop {
            break;
        }
    }
    let (best_epoch, tensors, reports) = tracker.finish()?;

    // Record the release (the steps actually run) before anything is published.
    release.complete(
        dp,
        step as u64,
        &initial_bounds,
        &initial_mechanism,
        |record, base| {
            let count_speakers = |clips: &[Clip]| {
                clips
                    .iter()
                    .map(|c| c.speaker.as_str())
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
            };
            let privacy = PrivacyReport {
                public_speakers: count_speakers(&public),
                public_examples: public.len(),
                private_speakers: count_speakers(&private),
                frozen_layers: frozen,
                input_norm_source: norm_source.into(),
                batch_norm_statistics: if public.is_empty() {
                    "initial (mean 0, variance 1), frozen".into()
                } else {
                    "public warm start, frozen during DP".into()
                },
                adaptive_clip: adaptive.as_ref().map(|a| AdaptiveClipReport {
                    target_quantile: a.target_quantile(),
                    learning_rate: a.learning_rate(),
                    count_noise_std: a.count_noise_std(),
                    gradient_noise_multiplier: gradient_sigma,
                    final_clip: a.clip(),
                }),
                ..base
            };

            let model = arch.init(&plain)?.load_tensors(
                TensorSource::new(Path::new("<best epoch>"), tensors),
                arch.name(),
            )?;
            let mut metrics = Metrics::default();
            for (name, p) in [("validation", &val), ("test", &test)] {
                let m = evaluate(&model, p, cfg.frames, bins, &labels.classes, &plain)?;
                metrics.splits.insert(name.to_string(), m);
            }
            let features_json =
                serde_json::to_value(&cfg.features).map_err(|e| TrainError::Option {
                    option: "features",
                    reason: e.to_string(),
                })?;
            let privacy_json = serde_json::to_value(&privacy).map_err(privacy_err)?;
            let mut card = ModelCard::new(arch, features_json, labels.classes.clone(), &model)?;
            let mut summary = BTreeMap::new();
            summary.insert("train_private".to_string(), private.len());
            summary.insert("train_public".to_string(), public.len());
            summary.insert("validation".to_string(), data.validation.len());
            summary.insert("test".to_string(), data.test.len());
            card.provenance = Some(Provenance {
                command: command.to_string(),
                data: cfg.data.display().to_string(),
                data_summary: summary,
                seed: cfg.seed,
                options: serde_json::json!({
                    "epochs": cfg.epochs,
                    "batch_size": cfg.batch_size,
                    "lr": cfg.lr,
                    "weight_decay": cfg.weight_decay,
                    "patience": cfg.patience,
                    "optimizer": "adamw",
                    "schedule": "warmup-cosine",
                    "dp": dp,
                    "privacy": privacy_json,
                }),
                epochs_run: reports.len(),
                best_epoch,
                hush_version: env!("CARGO_PKG_VERSION").to_string(),
            });
            card.metrics = Some(metrics);
            write_package(out, &card, &model)?;
            let path = out.join("privacy.json");
            let text = serde_json::to_string_pretty(&privacy).map_err(privacy_err)?;
            std::fs::write(&path, text).map_err(|source| TrainError::Io { path, source })?;
            Ok(DpTrainReport {
                card,
                epochs: reports,
                privacy,
                record: record.clone(),
            })
        },
    )
}
