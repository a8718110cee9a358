//! Empirical privacy audits (`hush-host audit privacy`): canaries planted in a private
//! run, each included with probability ½, scored from what the run released; the number
//! of correct guesses of which were included turns into a lower bound on ε that holds at
//! 95 % confidence whatever the code did (Steinke, Nasr & Jagielski 2023, "Privacy
//! auditing with one (1) training run"; [`hush_audit::lower_bound`]). A bound above the ε
//! hush claims means the claim is false: a clip, a sample, a noise draw or a count is not
//! what the accountant assumed.
//!
//! - [`dp_sgd`]: central DP-SGD of a keyword spotter, with Dirac canaries in gradient
//!   space (one coordinate each, so hundreds of them do not swamp a 600-clip corpus).
//! - [`federated`]: user-level DP in the in-process fleet simulator, with canary clients
//!   that upload a fixed random direction whenever they are sampled; beside the bound,
//!   Andrew et al.'s (2024) one-shot estimate, labelled as an estimate.
//! - [`pate`]: PATE's noisy-label release on canary queries whose teacher votes differ
//!   between the worlds by one teacher's vote.
//!
//! Every audit writes the same files ([`AuditOutcome::write`]): `results.json` (the
//! canaries' scores and inclusion, the bound, the claim), `report.md` and `scores.png`
//! (the score distributions of inserted and held-back canaries).
//!
//! One audit configuration serves DP on, DP off and every injected fault
//! (`HUSH_PRIVACY_FAULT`, [`hush_models::dp::fault`]): the audit sees only the released
//! artifacts and its canaries, never how the run went.

pub mod dp_sgd;
pub mod federated;
pub mod pate;
pub mod round_scores;

use std::path::{Path, PathBuf};

use hush_audit::lower_bound::{best_one_run_bound, default_grid, OneRunBound, OneShotEstimate};
use hush_models::checkpoint::{load_safetensors, NamedTensor};
use hush_models::package::WEIGHTS;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Why an audit failed.
#[derive(Debug, thiserror::Error)]
pub enum PrivacyAuditError {
    /// An option is out of range.
    #[error("option {option}: {reason}")]
    Option {
        /// The CLI flag.
        option: &'static str,
        /// What is expected.
        reason: String,
    },
    /// The audited run failed.
    #[error("the audited run failed: {0}")]
    Run(String),
    /// Writing a result failed.
    #[error("{path}: {reason}")]
    Output {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// What every audit's configuration sets: the corpus, the canaries, the claim the run is
/// calibrated to, its clip and sampling rate, the seed and the bound's confidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditSettings {
    /// The KWS corpus (e.g. the bundled `data/corpus/kws`).
    pub data: PathBuf,
    /// Canaries `m`.
    pub canaries: usize,
    /// The ε the run is calibrated to (RDP); `None`: DP off.
    pub epsilon: Option<f64>,
    /// δ.
    pub delta: f64,
    /// Clip bound `C` (flat).
    pub clip: f32,
    /// A canary's norm, in units of `C`.
    pub canary_norm: f32,
    /// Poisson sampling rate.
    pub sampling_rate: f64,
    /// Seed of the run and of the canaries.
    pub seed: u64,
    /// Confidence of the bound.
    pub confidence: f64,
}

impl AuditSettings {
    /// `data`, `canaries` of norm `canary_norm` C, `sampling_rate`; ε = 1 at δ = 1e-5,
    /// C = 1, seed 1, 95 %.
    pub fn new(data: &Path, canaries: usize, canary_norm: f32, sampling_rate: f64) -> Self {
        Self {
            data: data.to_path_buf(),
            canaries,
            epsilon: Some(1.0),
            delta: 1e-5,
            clip: 1.0,
            canary_norm,
            sampling_rate,
            seed: 1,
            confidence: 0.95,
        }
    }

    /// Refuses settings no audit can use, naming the flag.
    pub fn check(&self) -> Result<(), PrivacyAuditError> {
        let bad = |option, reason: &str| {
            Err(PrivacyAuditError::Option {
                option,
                reason: reason.into(),
            })
        };
        check_canaries(self.canaries, self.confidence)?;
        if !(self.canary_norm.is_finite() && self.canary_norm > 0.0) {
            return bad("--canary-norm", "a finite multiple of the clip bound > 0");
        }
        if !(self.sampling_rate > 0.0 && self.sampling_rate <= 1.0) {
            return bad("--sampling-rate", "in (0, 1]");
        }
        Ok(())
    }
}

/// Refuses fewer than 2 canaries or a confidence outside (0, 1), naming the flag.
fn check_canaries(canaries: usize, confidence: f64) -> Result<(), PrivacyAuditError> {
    if canaries < 2 {
        return Err(PrivacyAuditError::Option {
            option: "--canaries",
            reason: "at least 2 canaries".into(),
        });
    }
    if !(confidence > 0.0 && confidence < 1.0) {
        return Err(PrivacyAuditError::Option {
            option: "--confidence",
            reason: "in (0, 1)".into(),
        });
    }
    Ok(())
}

/// Which canaries are inserted: each independently with probability ½, from a ChaCha20
/// stream keyed by the audit's seed (so a seeded audit cannot flake), with a random sign
/// per canary.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryDraw {
    /// Whether canary `i` is inserted into the run.
    pub included: Vec<bool>,
    /// Canary `i`'s sign (±1), for canaries that are a direction.
    pub signs: Vec<f32>,
}

impl CanaryDraw {
    /// The draw for `m` canaries from `seed`.
    pub fn new(m: usize, seed: u64) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(seed ^ 0xca4a_4e71);
        let included = (0..m).map(|_| rng.random_bool(0.5)).collect();
        let signs = (0..m)
            .map(|_| if rng.random_bool(0.5) { 1.0 } else { -1.0 })
            .collect();
        Self { included, signs }
    }

    /// The indices of the inserted canaries, in order.
    pub fn inserted(&self) -> Vec<usize> {
        (0..self.included.len())
            .filter(|&i| self.included[i])
            .collect()
    }
}

/// The privacy the audited run claims, from its own report or ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    /// ε by the RDP accountant (`None`: DP off, no claim).
    pub epsilon_rdp: Option<f64>,
    /// ε by the PLD accountant, when reported.
    pub epsilon_pld: Option<f64>,
    /// δ of the claim.
    pub delta: f64,
    /// What the claim is about (`example`, `user`, `label`).
    pub unit: String,
}

impl Claim {
    /// The tightest ε the run reports: the PLD accountant's where it computed one (it is
    /// at or under the RDP accountant's; both are upper bounds on the true ε, so a lower
    /// bound over either refutes the run's guarantee), else the RDP accountant's. `None`
    /// with DP off.
    pub fn tightest(&self) -> Option<f64> {
        self.epsilon_rdp
            .map(|rdp| self.epsilon_pld.map_or(rdp, |pld| pld.min(rdp)))
    }
}

/// What one audit found, written as `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditOutcome {
    /// `dp-sgd`, `federated` or `pate`.
    pub kind: String,
    /// `dp-on` or `dp-off`.
    pub mode: String,
    /// The injected fault (`HUSH_PRIVACY_FAULT`), if any.
    pub fault: Option<String>,
    /// The audited run's own claim.
    pub claim: Claim,
    /// The one-run lower bound (95 %).
    pub bound: OneRunBound,
    /// Andrew et al.'s one-shot ε estimate (not a bound), where the audit makes one.
    #[serde(default)]
    pub one_shot: Option<OneShotEstimate>,
    /// Each canary's score (higher: more likely inserted).
    pub scores: Vec<f64>,
    /// Whether each canary was inserted.
    pub included: Vec<bool>,
    /// The audited run's settings, for the report.
    pub settings: serde_json::Value,
}

/// What a run's audit saw, before the bound: its claim (no ε: DP off), every canary's
/// score and inclusion, the one-shot estimate where the audit makes one, and the settings.
pub struct Observed {
    /// The run's claim.
    pub claim: Claim,
    /// Each canary's score.
    pub scores: Vec<f64>,
    /// Whether each canary was planted.
    pub included: Vec<bool>,
    /// Andrew et al.'s estimate, if made.
    pub one_shot: Option<OneShotEstimate>,
    /// The settings, for the report.
    pub settings: serde_json::Value,
}

impl AuditOutcome {
    /// The `kind` audit's outcome from what it `observed`: the one-run bound at
    /// `confidence` over the grid [`default_grid`] fixes for the number of canaries, the
    /// fault this process runs with; written into `dir` ([`AuditOutcome::write`]).
    pub fn finish(
        kind: &str,
        observed: Observed,
        confidence: f64,
        dir: &Path,
    ) -> Result<Self, PrivacyAuditError> {
        let Observed {
            claim,
            scores,
            included,
            one_shot,
            settings,
        } = observed;
        let bound = best_one_run_bound(
            &scores,
            &included,
            &default_grid(scores.len()),
            claim.delta,
            confidence,
        )
        .map_err(|e| PrivacyAuditError::Run(e.to_string()))?;
        let outcome = Self {
            kind: kind.into(),
            mode: if claim.epsilon_rdp.is_some() {
                "dp-on"
            } else {
                "dp-off"
            }
            .into(),
            fault: active_fault(),
            claim,
            bound,
            one_shot,
            scores,
            included,
            settings,
        };
        outcome.write(dir)?;
        Ok(outcome)
    }

    /// Whether the bound exceeds the claim — the tightest ε the run reports
    /// ([`Claim::tightest`]): the run leaks more than it says.
    pub fn claim_refuted(&self) -> bool {
        self.claim
            .tightest()
            .is_some_and(|e| self.bound.epsilon > e)
    }

    /// Writes `results.json`, `report.md` and `scores.png` into `dir` (created).
    pub fn write(&self, dir: &Path) -> Result<(), PrivacyAuditError> {
        let out = |path: PathBuf, e: &dyn std::fmt::Display| PrivacyAuditError::Output {
            path,
            reason: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(|e| out(dir.to_path_buf(), &e))?;
        let json = dir.join("results.json");
        let text = serde_json::to_string_pretty(self).map_err(|e| out(json.clone(), &e))?;
        write_atomically(&json, text.as_bytes()).map_err(|e| out(json.clone(), &e))?;
        let md = dir.join("report.md");
        write_atomically(&md, self.report().as_bytes()).map_err(|e| out(md.clone(), &e))?;
        let png = dir.join("scores.png");
        hush_plot::line_plot(
            &png,
            &format!(
                "{} {}{}: ε lower bound {:.2} (95 %), claimed {}",
                self.kind,
                self.mode,
                self.fault
                    .as_deref()
                    .map(|f| format!(", fault {f}"))
                    .unwrap_or_default(),
                self.bound.epsilon,
                self.claim
                    .epsilon_rdp
                    .map_or("none".to_string(), |e| format!("{e:.2}"))
            ),
            "canary score",
            "canaries per bin",
            &self.histograms(30),
        )
        .map_err(|e| out(png.clone(), &e))?;
        Ok(())
    }

    /// Score histograms of the inserted and the held-back canaries over `bins` common bins.
    fn histograms(&self, bins: usize) -> Vec<hush_plot::Series> {
        let (lo, hi) = self
            .scores
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &s| (a.min(s), b.max(s)));
        let width = ((hi - lo) / bins as f64).max(1e-12);
        let hist = |inserted: bool| {
            let mut counts = vec![0usize; bins];
            for (s, _) in self
                .scores
                .iter()
                .zip(&self.included)
                .filter(|(_, &i)| i == inserted)
            {
                let b = (((s - lo) / width) as usize).min(bins - 1);
                counts[b] += 1;
            }
            counts
                .iter()
                .enumerate()
                .map(|(b, &c)| (lo + (b as f64 + 0.5) * width, c as f64))
                .collect()
        };
        vec![
            hush_plot::Series {
                name: "inserted".into(),
                points: hist(true),
            },
            hush_plot::Series {
                name: "held back".into(),
                points: hist(false),
            },
        ]
    }

    /// The report: the claim against the bound, the guesses, the settings.
    pub fn report(&self) -> String {
        let b = &self.bound;
        let claim = match self.claim.epsilon_rdp {
            Some(e) => format!(
                "ε = {e:.3} (RDP){} at δ = {:e}, {}-level",
                self.claim
                    .epsilon_pld
                    .map(|p| format!(", {p:.3} (PLD)"))
                    .unwrap_or_default(),
                self.claim.delta,
                self.claim.unit
            ),
            None => "none (DP off)".into(),
        };
        let verdict = match self.claim.epsilon_rdp {
            Some(_) if self.claim_refuted() => {
                "**The bound exceeds the claim (its tightest ε): this run leaks more than it \
                 reports.**"
            }
            Some(_) => "The bound is at or under the claim: the audit found no violation.",
            None => "No claim to check (DP off): the bound shows what the audit can detect.",
        };
        format!(
            "# Privacy audit: {kind}, {mode}{fault}\n\n\
             | | |\n|---|---|\n\
             | claimed | {claim} |\n\
             | ε lower bound | {eps:.3} at {conf:.0} % confidence (one run, Steinke et al. 2023) |\n\
             | canaries | {m} ({ins} inserted) |\n\
             | guesses | {r} ({kp} \"inserted\", {km} \"held back\"), {v} correct |\n\
             {one_shot}\n\
             {verdict}\n\n\
             The bound holds whatever the code did; it is a lower bound, usually well under \
             the true ε of a correct run (one run, final artifacts only). Settings:\n\n\
             ```json\n{settings}\n```\n",
            kind = self.kind,
            mode = self.mode,
            fault = self
                .fault
                .as_deref()
                .map(|f| format!(", fault `{f}`"))
                .unwrap_or_default(),
            eps = b.epsilon,
            conf = b.confidence * 100.0,
            m = self.scores.len(),
            ins = self.included.iter().filter(|&&i| i).count(),
            r = b.guesses,
            kp = b.k_plus,
            km = b.k_minus,
            v = b.correct,
            one_shot = self
                .one_shot
                .as_ref()
                .map(|e| format!(
                    "| one-shot ε estimate (Andrew et al. 2024; an estimate, not a bound) | \
                     {:.3} (μ = {:.3}) |\n",
                    e.epsilon, e.mu
                ))
                .unwrap_or_default(),
            settings = serde_json::to_string_pretty(&self.settings).unwrap_or_default(),
        )
    }
}

/// Tensors over `layout` (name, element count), zero but for `support`'s flat coordinates,
/// each set to its value × `scale`: a canary's gradient or update.
fn sparse_tensors(
    layout: &[(String, usize)],
    support: &[(usize, f32)],
    scale: f32,
) -> Vec<NamedTensor> {
    let mut start = 0;
    layout
        .iter()
        .map(|(name, n)| {
            let mut data = vec![0.0; *n];
            for &(c, v) in support {
                if (start..start + n).contains(&c) {
                    data[c - start] = v * scale;
                }
            }
            start += n;
            NamedTensor {
                name: name.clone(),
                shape: vec![*n],
                data,
            }
        })
        .collect()
}

/// `tensors`' layers named in `layout`, flattened in its order (what a flat canary
/// coordinate indexes); `what` names the tensors in an error.
fn flatten(
    tensors: &[NamedTensor],
    layout: &[(String, usize)],
    what: &Path,
) -> Result<Vec<f32>, PrivacyAuditError> {
    let mut flat = Vec::with_capacity(layout.iter().map(|(_, n)| n).sum());
    for (name, n) in layout {
        let t = tensors
            .iter()
            .find(|t| &t.name == name && t.data.len() == *n)
            .ok_or_else(|| {
                PrivacyAuditError::Run(format!(
                    "{}: no trainable tensor `{name}` of {n} values",
                    what.display()
                ))
            })?;
        flat.extend_from_slice(&t.data);
    }
    Ok(flat)
}

/// The released package in `dir`'s weights over `layout`, flattened ([`flatten`]).
fn package_weights(dir: &Path, layout: &[(String, usize)]) -> Result<Vec<f32>, PrivacyAuditError> {
    let tensors = load_safetensors(&dir.join(WEIGHTS))
        .map_err(|e| PrivacyAuditError::Run(format!("{}: {e}", dir.display())))?;
    flatten(&tensors, layout, dir)
}

/// Writes `bytes` to `path` through a temporary file and a rename (no partial file).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// The fault this process runs with, by name (`None` in a normal build).
pub fn active_fault() -> Option<String> {
    hush_models::dp::fault::active().map(|f| f.name().to_string())
}
