//! The PATE audit: the noisy-label release of `hush-host pate label` (the aggregator's
//! [`Aggregator::answer_all`], GNMax, noise from the CSPRNG source) on `m` canary queries,
//! with the data-independent ε it reports ([`Aggregator::analyze`]) as the claim.
//!
//! Canary query `i` has two classes `A_i`, `B_i` (random, distinct) and `n` teachers: `n − 1`
//! of them split evenly between `A_i` and `B_i`, and one — the teacher whose partition holds
//! canary `i`'s speaker — votes `A_i` when the canary is in its data (planted, probability ½)
//! and `B_i` when it is not: the two worlds differ by one teacher's vote, the most one
//! speaker can change (the sensitivity the accountant assumes). The teachers' votes are set by
//! the audit rather than trained: PATE's guarantee rests on the aggregation, which this runs
//! exactly as a labelling run does. The observation is the released label: score +1 for
//! `A_i`, −1 for `B_i`, 0 for any other class or a refusal.
//!
//! Each canary changes one query, while the claim covers all `m`: a correct run's bound
//! stays far under it, and only bugs that remove most of the noise can lift a single
//! query's leak over the claim of the whole release.
//!
//! DP off is GNMax with σ = [`DP_OFF_SIGMA`] (the argmax, in effect).

use std::path::Path;

use hush_models::dp::NoiseSource;
use hush_pate::Aggregator;
use hush_privacy::accountant::rdp::default_orders;
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use super::{check_canaries, AuditOutcome, CanaryDraw, Claim, Observed, PrivacyAuditError};

/// σ of a DP-off run.
pub const DP_OFF_SIGMA: f64 = 1e-6;

/// One PATE audit's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PateAudit {
    /// Canary queries `m`.
    pub canaries: usize,
    /// The data-independent ε of the whole release GNMax's σ is calibrated to; `None`:
    /// DP off.
    pub epsilon: Option<f64>,
    /// δ.
    pub delta: f64,
    /// Teachers `n` (odd: the other `n − 1` split evenly).
    pub teachers: usize,
    /// Classes.
    pub classes: usize,
    /// Seed of the canaries and of the noise.
    pub seed: u64,
    /// Confidence of the bound.
    pub confidence: f64,
}

impl PateAudit {
    /// The audit's defaults: 1 000 canary queries, ε = 1 at δ = 1e-5, 251 teachers, 12
    /// classes.
    pub fn new() -> Self {
        Self {
            canaries: 1000,
            epsilon: Some(1.0),
            delta: 1e-5,
            teachers: 251,
            classes: 12,
            seed: 1,
            confidence: 0.95,
        }
    }

    fn check(&self) -> Result<(), PrivacyAuditError> {
        let bad = |option, reason: &str| {
            Err(PrivacyAuditError::Option {
                option,
                reason: reason.into(),
            })
        };
        check_canaries(self.canaries, self.confidence)?;
        if self.teachers < 3 || self.teachers.is_multiple_of(2) {
            return bad("--teachers", "an odd number, at least 3");
        }
        if self.classes < 2 {
            return bad("--classes", "at least 2");
        }
        Ok(())
    }
}

impl Default for PateAudit {
    fn default() -> Self {
        Self::new()
    }
}

/// The data-independent ε of GNMax with `sigma` over `queries` queries at `delta`.
fn data_independent_epsilon(
    sigma: f64,
    queries: &[Vec<f64>],
    delta: f64,
) -> Result<f64, PrivacyAuditError> {
    Aggregator::GnMax { sigma }
        .analyze(queries, None, delta, &default_orders(), None)
        .map(|a| a.epsilon_data_independent.0)
        .map_err(|e| PrivacyAuditError::Run(e.to_string()))
}

/// The smallest GNMax σ (to 0.1 %) whose data-independent ε over `queries` is at most
/// `epsilon`.
fn calibrate_sigma(
    epsilon: f64,
    queries: &[Vec<f64>],
    delta: f64,
) -> Result<f64, PrivacyAuditError> {
    let (mut lo, mut hi) = (1e-3, 1.0);
    while data_independent_epsilon(hi, queries, delta)? > epsilon {
        hi *= 2.0;
        if hi > 1e9 {
            return Err(PrivacyAuditError::Option {
                option: "--epsilon",
                reason: format!("{epsilon}: no GNMax σ reaches it"),
            });
        }
    }
    while hi / lo > 1.001 {
        let mid = (lo * hi).sqrt();
        if data_independent_epsilon(mid, queries, delta)? > epsilon {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(hi)
}

/// Runs the audited label release and audits its labels; writes into `dir`.
pub fn run(
    audit: &PateAudit,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<AuditOutcome, PrivacyAuditError> {
    audit.check()?;
    let draw = CanaryDraw::new(audit.canaries, audit.seed);
    let mut rng = ChaCha20Rng::seed_from_u64(audit.seed ^ 0x9a7e_ca4a);
    let half = ((audit.teachers - 1) / 2) as f64;
    let mut pairs = Vec::with_capacity(audit.canaries);
    let votes: Vec<Vec<f64>> = draw
        .included
        .iter()
        .map(|&planted| {
            let ab = sample(&mut rng, audit.classes, 2);
            let (a, b) = (ab.index(0), ab.index(1));
            pairs.push((a, b));
            let mut v = vec![0.0; audit.classes];
            v[a] = half;
            v[b] = half;
            v[if planted { a } else { b }] += 1.0;
            v
        })
        .collect();
    let sigma = match audit.epsilon {
        Some(e) => calibrate_sigma(e, &votes, audit.delta)?,
        None => DP_OFF_SIGMA,
    };
    progress(&format!(
        "{} canary queries, {} teachers, GNMax σ = {sigma:.3}",
        audit.canaries, audit.teachers
    ));
    let aggregator = Aggregator::GnMax { sigma };
    let mut noise = NoiseSource::from_seed(audit.seed ^ 0x9a7e_0015);
    let (answers, _) = aggregator
        .answer_all(&votes, None, &mut noise)
        .map_err(|e| PrivacyAuditError::Run(e.to_string()))?;
    let claimed = data_independent_epsilon(sigma, &votes, audit.delta)?;

    // From here on, only the released labels.
    let scores: Vec<f64> = answers
        .iter()
        .zip(&pairs)
        .map(|(answer, &(a, b))| match answer.class() {
            Some(c) if c == a => 1.0,
            Some(c) if c == b => -1.0,
            _ => 0.0,
        })
        .collect();
    let claim = Claim {
        epsilon_rdp: audit.epsilon.map(|_| claimed),
        epsilon_pld: None,
        delta: audit.delta,
        unit: "user".into(),
    };
    let settings = serde_json::json!({
        "audit": audit,
        "aggregator": aggregator,
        "queries": audit.canaries,
    });
    AuditOutcome::finish(
        "pate",
        Observed {
            claim,
            scores,
            included: draw.included,
            one_shot: None,
            settings,
        },
        audit.confidence,
        dir,
    )
}
