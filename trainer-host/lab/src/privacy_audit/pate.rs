//! The PATE audit: the noisy-label release of `hush-host pate label` (the aggregator's
//! [`Aggregator::answer_all`], GNMax, noise from the CSPRNG source), with the
//! data-independent ε it reports for a release ([`Aggregator::analyze`]) as the claim.
//!
//! Canary `i` is a speaker, planted with probability ½ in one teacher's partition, and has
//! a release of its own: `Q` queries, each with two classes `A`, `B` (random, distinct) and
//! `n` teachers — `n − 1` split evenly between `A` and `B`, and the canary's teacher, who
//! votes `A` on every query when the canary is in its data and `B` when it is not. The two
//! worlds differ by that one teacher's votes on all `Q` queries: the most one speaker can
//! change, which is what the claim covers. The releases are independent runs, and each
//! canary is in exactly one, so the one-run bound over all `m` canaries holds as in one run
//! (the joint output is as private in each canary as its own release). The teachers' votes
//! are set by the audit rather than trained: PATE's guarantee rests on the aggregation,
//! which runs exactly as a labelling run does. Score: the number of the canary's queries
//! labelled `A` minus those labelled `B`.
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
    /// Canaries `m` (one release each).
    pub canaries: usize,
    /// Queries `Q` of each release.
    pub queries: usize,
    /// The data-independent ε of a release GNMax's σ is calibrated to; `None`: DP off.
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
    /// The audit's defaults: 1 000 canaries with a release of 1 000 queries each, ε = 1 at
    /// δ = 1e-5, 251 teachers, 12 classes.
    pub fn new() -> Self {
        Self {
            canaries: 1000,
            queries: 1000,
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
        if self.queries == 0 {
            return bad("--queries", "at least 1");
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
    // One release's votes: every query tied between its A and B but for the canary's
    // teacher, who votes A if planted.
    let mut release = |planted: bool| -> (Vec<Vec<f64>>, Vec<(usize, usize)>) {
        (0..audit.queries)
            .map(|_| {
                let ab = sample(&mut rng, audit.classes, 2);
                let (a, b) = (ab.index(0), ab.index(1));
                let mut v = vec![0.0; audit.classes];
                v[a] = half;
                v[b] = half;
                v[if planted { a } else { b }] += 1.0;
                (v, (a, b))
            })
            .unzip()
    };
    // σ depends only on the number of queries: calibrated once on a release's shape.
    let shape = release(false).0;
    let sigma = match audit.epsilon {
        Some(e) => calibrate_sigma(e, &shape, audit.delta)?,
        None => DP_OFF_SIGMA,
    };
    let claimed = data_independent_epsilon(sigma, &shape, audit.delta)?;
    progress(&format!(
        "{} canaries, a release of {} queries each, {} teachers, GNMax σ = {sigma:.3}",
        audit.canaries, audit.queries, audit.teachers
    ));
    let aggregator = Aggregator::GnMax { sigma };
    let mut noise = NoiseSource::from_seed(audit.seed ^ 0x9a7e_0015);
    let mut scores = Vec::with_capacity(audit.canaries);
    for &planted in &draw.included {
        let (votes, pairs) = release(planted);
        let (answers, _) = aggregator
            .answer_all(&votes, None, &mut noise)
            .map_err(|e| PrivacyAuditError::Run(e.to_string()))?;
        // From here on, only the released labels.
        let score: f64 = answers
            .iter()
            .zip(&pairs)
            .map(|(answer, &(a, b))| match answer.class() {
                Some(c) if c == a => 1.0,
                Some(c) if c == b => -1.0,
                _ => 0.0,
            })
            .sum();
        scores.push(score);
    }
    let claim = Claim {
        epsilon_rdp: audit.epsilon.map(|_| claimed),
        epsilon_pld: None,
        delta: audit.delta,
        unit: "user".into(),
    };
    let settings = serde_json::json!({
        "audit": audit,
        "aggregator": aggregator,
        "releases": audit.canaries,
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
