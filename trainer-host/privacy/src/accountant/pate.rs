//! PATE: privacy cost of noisy teacher-vote aggregation (LNMax, GNMax, Confident-GNMax), and
//! the smooth-sensitivity release of the data-dependent ε.
//!
//! A port of tensorflow/privacy `research/pate_2018/core.py` (commit
//! 3d038a490a0cdd809c030435281c2e94e44c2f83) and `research/pate_2018/smooth_sensitivity.py`
//! (Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable Private Learning with
//! PATE", ICLR 2018, arXiv:1802.08908).
//!
//! # Costs per query
//!
//! - **GNMax** (Gaussian noise σ on each vote count, release the argmax). Data-independent RDP
//!   `α/σ²` (Prop 8; the vote histogram has L2 sensitivity √2). Data-dependent (Thm 6): with
//!   `q ≥ Pr[answer ≠ plurality]` from the union bound of Prop 7
//!   ([`compute_logq_gaussian`]), and `μ₂ = σ√(ln 1/q)`, `μ₁ = μ₂ + 1`, `ε_i = μ_i/σ²`
//!   (Prop 10), the bound
//!   `1/(α-1) · ln((1-q)·A^{α-1} + q·B^{α-1})`, `A = (1-q)/(1-(q e^{ε₂})^{(μ₂-1)/μ₂})`,
//!   `B = e^{ε₁}/q^{1/(μ₁-1)}` holds when `μ₁ > α`, `μ₂ > 1`, `q ≤ e^{(μ₂-1)ε₂}/(μ₁/(μ₁-1) ·
//!   μ₂/(μ₂-1))^{μ₂}` and `ln(1/q) > ε₂` — these admissibility conditions are checked, and the
//!   data-independent value is used wherever they fail ([`rdp_gaussian`]).
//! - **Confident-GNMax threshold step** (noise σ₁ on the max vote, answer if above `T`): the
//!   input has sensitivity 1, so it is [`rdp_gaussian`] with `√2·σ₁` and
//!   `q = min(p, 1-p)`, `p = Pr[answered]` ([`compute_rdp_threshold`]).
//! - **LNMax** (Laplace noise of scale `λ`): data-independent pure `ε = 2/λ`, as RDP
//!   `min(ε²α/2, ε)`; data-dependent via [`compute_logq_laplace`] and [`rdp_pure_eps`]
//!   (Papernot et al. 2017, Thm 3).
//!
//! Queries compose by adding RDP at each order ([`analyze_gnmax`]). With a threshold, every
//! query pays the threshold step, and — since which queries pass is itself random and not in
//! the votes file — every query is also charged the GNMax step: an upper bound on the
//! adaptive composition.
//!
//! # Releasing the data-dependent ε
//!
//! The data-dependent ε is a function of the teachers' votes, so publishing it leaks. The
//! reference sanitises it with smooth sensitivity (§4 and App. C of the paper): at a fixed
//! order `λ`, compute for each query the local sensitivity of its data-dependent RDP at every
//! distance `d` (Algorithms 3–5, [`local_sensitivity_bounds_gnmax`],
//! [`local_sensitivity_bounds_threshold`]), add them over queries, and take the
//! `β`-smooth sensitivity `SS_β = max_d e^{-βd} · LS(d)` ([`discounted_max`]). The released
//! value is
//!
//! ```text
//! R̃(λ) = R(λ) + SS_β · σ_ss · Z,   Z ~ N(0, 1),
//! ```
//!
//! and releasing it is itself `(λ, ρ)`-RDP with
//! `ρ = λ e^{2β}/σ_ss² + (βλ - ½ ln(1 - 2λβ))/(λ - 1)` for `1 < λ < 1/(2β)` (the GNSS mechanism,
//! Thm 23; [`rdp_of_smooth_sensitivity_gaussian`]). The published guarantee at δ is then
//! `ε = R̃(λ) + ρ + ln(1/δ)/(λ-1)` — [`SmoothSensitivityRelease`].

use super::rdp::epsilon_from_rdp;
use super::special::{erfc, erfcinv, log1mexp, log_sf};
use super::validate::invalid;
use super::AccountantError;

/// `_logaddexp` over a list: `m + ln Σ e^{x - m}`.
fn logaddexp_list(x: &[f64]) -> f64 {
    let m = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if m == f64::NEG_INFINITY {
        return m;
    }
    m + x.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
}

/// Index of the first maximum (`np.argmax`).
fn argmax(v: &[f64]) -> usize {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best
}

/// Checks a vote vector: at least two classes, finite non-negative counts.
pub fn validate_votes(votes: &[f64]) -> Result<(), AccountantError> {
    if votes.len() < 2 {
        return Err(invalid(
            "votes",
            votes.len(),
            "at least 2 classes per query",
        ));
    }
    if let Some(v) = votes.iter().find(|v| !v.is_finite() || **v < 0.0) {
        return Err(invalid("votes", v, "finite non-negative vote counts"));
    }
    Ok(())
}

/// Upper bound on `ln Pr[GNMax answer ≠ plurality]` (Prop 7, union bound;
/// `compute_logq_gaussian`).
pub fn compute_logq_gaussian(counts: &[f64], sigma: f64) -> f64 {
    let n = counts.len();
    let idx = argmax(counts);
    let scale = (2.0 * sigma * sigma).sqrt();
    let terms: Vec<f64> = counts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != idx)
        .map(|(_, c)| log_sf((counts[idx] - c) / scale))
        .collect();
    logaddexp_list(&terms).min((1.0 - 1.0 / n as f64).ln())
}

/// Data-independent RDP of GNMax, `α/σ²` (Prop 8).
pub fn rdp_data_independent_gaussian(sigma: f64, orders: &[f64]) -> Vec<f64> {
    orders.iter().map(|a| a / (sigma * sigma)).collect()
}

/// Data-dependent RDP of GNMax given `logq` (Thm 6 with Prop 10), falling back to the
/// data-independent bound at orders where the conditions fail (`rdp_gaussian`).
pub fn rdp_gaussian(logq: f64, sigma: f64, orders: &[f64]) -> Result<Vec<f64>, AccountantError> {
    if logq > 0.0 || logq.is_nan() {
        return Err(invalid("logq", logq, "a log-probability <= 0"));
    }
    if !(sigma.is_finite() && sigma > 0.0) {
        return Err(invalid("sigma", sigma, "a finite number > 0"));
    }
    if let Some(a) = orders.iter().find(|a| a.is_nan() || **a <= 1.0) {
        return Err(invalid("order", a, "orders > 1"));
    }
    if logq == f64::NEG_INFINITY {
        return Ok(vec![0.0; orders.len()]);
    }
    let variance = sigma * sigma;
    let mu_hi2 = (variance * -logq).sqrt();
    let mu_hi1 = mu_hi2 + 1.0;
    let mut ret = rdp_data_independent_gaussian(sigma, orders);
    let mask: Vec<bool> = orders.iter().map(|&a| mu_hi1 > a && mu_hi2 > 1.0).collect();
    let rdp_hi1 = mu_hi1 / variance;
    let rdp_hi2 = mu_hi2 / variance;
    let log_a2 = (mu_hi2 - 1.0) * rdp_hi2;
    if mask.iter().any(|m| *m)
        && logq
            <= log_a2
                - mu_hi2 * ((1.0 + 1.0 / (mu_hi1 - 1.0)).ln() + (1.0 + 1.0 / (mu_hi2 - 1.0)).ln())
        && -logq > rdp_hi2
    {
        let log1q = log1mexp(logq).ok_or_else(|| invalid("logq", logq, "<= 0"))?;
        let inner = log1mexp((logq + rdp_hi2) * (1.0 - 1.0 / mu_hi2))
            .ok_or_else(|| invalid("logq", logq, "inside Theorem 6's range"))?;
        for (i, &a) in orders.iter().enumerate() {
            if !mask[i] {
                continue;
            }
            let log_a = (a - 1.0) * (log1q - inner);
            let log_b = (a - 1.0) * (rdp_hi1 - logq / (mu_hi1 - 1.0));
            let log_s = super::special::log_add_exp(log1q + log_a, logq + log_b);
            ret[i] = ret[i].min(log_s / (a - 1.0));
        }
    }
    Ok(ret)
}

/// `ln Pr[noisy max vote ≥ threshold]` for Confident-GNMax (`compute_logpr_answered`); the max
/// vote is rounded half-to-even as Python's `round`.
pub fn compute_logpr_answered(threshold: f64, sigma1: f64, counts: &[f64]) -> f64 {
    let max = counts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    log_sf((threshold - max.round_ties_even()) / sigma1)
}

/// Data-independent RDP of the threshold step, `α/(2σ₁²)`.
pub fn compute_rdp_data_independent_threshold(sigma1: f64, orders: &[f64]) -> Vec<f64> {
    rdp_data_independent_gaussian(std::f64::consts::SQRT_2 * sigma1, orders)
}

/// Data-dependent RDP of the threshold step (`compute_rdp_threshold`).
pub fn compute_rdp_threshold(
    log_pr_answered: f64,
    sigma1: f64,
    orders: &[f64],
) -> Result<Vec<f64>, AccountantError> {
    let other = log1mexp(log_pr_answered)
        .ok_or_else(|| invalid("log_pr_answered", log_pr_answered, "a log-probability <= 0"))?;
    let logq = log_pr_answered.min(other);
    rdp_gaussian(logq, std::f64::consts::SQRT_2 * sigma1, orders)
}

/// Upper bound on `ln Pr[LNMax answer ≠ plurality]` with Laplace scale `lambda`
/// (`compute_logq_laplace`).
pub fn compute_logq_laplace(counts: &[f64], lambda: f64) -> f64 {
    let idx = argmax(counts);
    let terms: Vec<f64> = counts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != idx)
        .map(|(_, c)| {
            let r = (c - counts[idx]) / lambda;
            (2.0 - r).ln() + 0.25f64.ln() + r
        })
        .collect();
    logaddexp_list(&terms).min((1.0 - 1.0 / counts.len() as f64).ln())
}

/// RDP of a pure `pure_eps`-DP mechanism whose non-plurality probability is `e^logq`
/// (Papernot et al. 2017 Thm 3; `rdp_pure_eps`).
pub fn rdp_pure_eps(logq: f64, pure_eps: f64, orders: &[f64]) -> Vec<f64> {
    let q = logq.exp();
    orders
        .iter()
        .map(|&a| {
            let mut log_t = f64::INFINITY;
            if q <= 1.0 / (pure_eps.exp() + 1.0) {
                if let Some(l) = log1mexp(pure_eps + logq) {
                    let logt_one = (-q).ln_1p() + ((-q).ln_1p() - l) * (a - 1.0);
                    let logt_two = logq + pure_eps * (a - 1.0);
                    log_t = super::special::log_add_exp(logt_one, logt_two);
                }
            }
            (0.5 * pure_eps * pure_eps * a)
                .min(log_t / (a - 1.0))
                .min(pure_eps)
        })
        .collect()
}

/// Data-independent RDP of LNMax with Laplace scale `lambda` (pure `ε = 2/λ`):
/// `min(ε²α/2, ε)`.
pub fn rdp_data_independent_laplace(lambda: f64, orders: &[f64]) -> Vec<f64> {
    let eps = 2.0 / lambda;
    orders
        .iter()
        .map(|&a| (0.5 * eps * eps * a).min(eps))
        .collect()
}

/// Data-dependent RDP of LNMax for one vote vector.
pub fn rdp_laplace(counts: &[f64], lambda: f64, orders: &[f64]) -> Vec<f64> {
    rdp_pure_eps(compute_logq_laplace(counts, lambda), 2.0 / lambda, orders)
}

// ---------------------------------------------------------------------------------------------
// Smooth sensitivity (smooth_sensitivity.py)
// ---------------------------------------------------------------------------------------------

fn mu1_mu2(sigma: f64, logq: f64) -> (f64, f64) {
    let mu2 = sigma * (-logq).sqrt();
    (mu2 + 1.0, mu2)
}

/// Theorem 6 without its preconditions (`_compute_data_dep_bound_gnmax`).
fn data_dep_bound_gnmax(sigma: f64, logq: f64, order: f64) -> f64 {
    let variance = sigma * sigma;
    let (mu1, mu2) = mu1_mu2(sigma, logq);
    let eps1 = mu1 / variance;
    let eps2 = mu2 / variance;
    let log1q = (-logq.exp()).ln_1p();
    let log_a = (order - 1.0) * (log1q - (-((logq + eps2) * (1.0 - 1.0 / mu2)).exp()).ln_1p());
    let log_b = (order - 1.0) * (eps1 - logq / (mu1 - 1.0));
    super::special::log_add_exp(log1q + log_a, logq + log_b) / (order - 1.0)
}

/// `ln q₀`: below it the data-dependent GNMax bound is valid and better than the
/// data-independent one (`compute_logq0_gnmax`; Brent's method replaced by bisection).
pub fn compute_logq0_gnmax(sigma: f64, order: f64) -> Result<f64, AccountantError> {
    let indep = order / (sigma * sigma);
    let compare = |logq: f64| data_dep_bound_gnmax(sigma, logq, order) - indep;
    let logub = (-(1.0 + 1.0 / sigma).powi(2))
        .min(-((order - 0.99) / sigma).powi(2))
        .min(-1.0 / (sigma * sigma));
    if compare(logub) < 0.0 {
        return Ok(logub);
    }
    let mut loglb = 2.0 * logub;
    while compare(loglb) > 0.0 {
        if loglb <= -10000.0 {
            return Err(AccountantError::NoSolution {
                what: format!("q0 for GNMax at sigma={sigma}, order={order} is below e^-10000"),
            });
        }
        loglb *= 1.5;
    }
    // compare(loglb) <= 0 < compare(logub).
    let (mut lo, mut hi) = (loglb, logub);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid == lo || mid == hi {
            break;
        }
        if compare(mid) > 0.0 {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(0.5 * (lo + hi))
}

fn bl_gnmax(q: f64, sigma: f64, num_classes: usize) -> f64 {
    let m1 = (num_classes - 1) as f64;
    m1 / 2.0 * erfc(1.0 / sigma + erfcinv(2.0 * q / m1))
}

fn bu_gnmax(q: f64, sigma: f64, num_classes: usize) -> f64 {
    let m1 = (num_classes - 1) as f64;
    (m1 / 2.0 * erfc(-1.0 / sigma + erfcinv(2.0 * q / m1))).min(1.0)
}

/// Cached thresholds of the GNMax smooth-sensitivity analysis at one (σ, order, classes).
#[derive(Debug, Clone, Copy)]
struct GnmaxSs {
    sigma: f64,
    order: f64,
    num_classes: usize,
    logq0: f64,
    logq1: f64,
}

impl GnmaxSs {
    fn new(sigma: f64, order: f64, num_classes: usize) -> Result<Self, AccountantError> {
        let logq0 = compute_logq0_gnmax(sigma, order)?;
        let logq1 = bl_gnmax(logq0.exp(), sigma, num_classes).ln().min(logq0);
        Ok(Self {
            sigma,
            order,
            num_classes,
            logq0,
            logq1,
        })
    }

    fn rdp(&self, logq: f64) -> f64 {
        if logq >= self.logq0 {
            self.order / (self.sigma * self.sigma)
        } else {
            data_dep_bound_gnmax(self.sigma, logq, self.order)
        }
    }

    /// Algorithm 3: upper bound on the local sensitivity at `logq`.
    fn local_sens(&self, mut logq: f64) -> f64 {
        if self.logq1 <= logq && logq <= self.logq0 {
            logq = self.logq1;
        }
        let q = logq.exp();
        let beta = self.rdp(logq);
        let beta_bu = self.rdp(bu_gnmax(q, self.sigma, self.num_classes).ln());
        let beta_bl = self.rdp(bl_gnmax(q, self.sigma, self.num_classes).ln());
        (beta_bu - beta).max(beta - beta_bl)
    }
}

/// Local sensitivity of GNMax's data-dependent RDP at each distance `0..num_teachers`
/// (Algorithms 4 and 5, `compute_local_sensitivity_bounds_gnmax`).
pub fn local_sensitivity_bounds_gnmax(
    votes: &[f64],
    num_teachers: usize,
    sigma: f64,
    order: f64,
) -> Result<Vec<f64>, AccountantError> {
    validate_votes(votes)?;
    let ss = GnmaxSs::new(sigma, order, votes.len())?;
    let mut logq = compute_logq_gaussian(votes, sigma);
    let plateau = ss.local_sens(ss.logq1);
    let mut res = vec![plateau; num_teachers.max(1)];
    if ss.logq1 <= logq && logq <= ss.logq0 {
        return Ok(res);
    }
    let mut v: Vec<f64> = votes.to_vec();
    v.sort_by(|a, b| b.total_cmp(a));
    res[0] = ss.local_sens(logq);
    let mut d = 0usize;
    let go_left = logq > ss.logq0;
    while (go_left && logq > ss.logq0 && v[1] > 0.0) || (!go_left && logq < ss.logq1) {
        d += 1;
        if d >= res.len() {
            break;
        }
        if go_left {
            v[0] += 1.0;
            v[1] -= 1.0;
            let mut idx = 1;
            while idx < v.len() - 1 && v[idx] < v[idx + 1] {
                v.swap(idx, idx + 1);
                idx += 1;
            }
        } else {
            v[0] -= 1.0;
            v[1] += 1.0;
        }
        logq = compute_logq_gaussian(&v, sigma);
        res[d] = ss.local_sens(logq);
    }
    Ok(res)
}

/// Local sensitivity of the threshold step's RDP at each distance
/// (`compute_local_sensitivity_bounds_threshold`).
pub fn local_sensitivity_bounds_threshold(
    counts: &[f64],
    num_teachers: usize,
    threshold: f64,
    sigma1: f64,
    order: f64,
) -> Result<Vec<f64>, AccountantError> {
    let mut rdp_list = Vec::with_capacity(num_teachers + 1);
    for v in 0..=num_teachers {
        let logp = log_sf((threshold - v as f64) / sigma1);
        rdp_list.push(compute_rdp_threshold(logp, sigma1, &[order])?[0]);
    }
    let ls_at = |v: usize| -> f64 {
        let mut m = f64::NEG_INFINITY;
        if v > 0 {
            m = m.max((rdp_list[v - 1] - rdp_list[v]).abs());
        }
        if v < num_teachers {
            m = m.max((rdp_list[v + 1] - rdp_list[v]).abs());
        }
        m
    };
    let max = counts.iter().copied().fold(0.0, f64::max);
    let cur = (max.round_ties_even() as usize).min(num_teachers);
    let mut ls = vec![0.0; num_teachers.max(1)];
    for (d, slot) in ls.iter_mut().enumerate().take(cur.max(num_teachers - cur)) {
        let mut m = f64::NEG_INFINITY;
        if cur + d <= num_teachers {
            m = m.max(ls_at(cur + d));
        }
        if cur >= d {
            m = m.max(ls_at(cur - d));
        }
        *slot = m;
    }
    Ok(ls)
}

/// `max_d e^{-βd} · a[d]` (`compute_discounted_max`).
pub fn discounted_max(beta: f64, a: &[f64]) -> f64 {
    a.iter()
        .enumerate()
        .map(|(d, v)| v * (-beta * d as f64).exp())
        .fold(f64::NEG_INFINITY, f64::max)
}

/// RDP at `order` of releasing a value plus `SS_β · σ_ss · N(0,1)` (GNSS, Thm 23;
/// `compute_rdp_of_smooth_sensitivity_gaussian`). Needs `1 < order < 1/(2β)`.
pub fn rdp_of_smooth_sensitivity_gaussian(
    beta: f64,
    sigma_ss: f64,
    order: f64,
) -> Result<f64, AccountantError> {
    if beta > 0.0 && !(1.0 < order && order < 1.0 / (2.0 * beta)) {
        return Err(invalid("order", order, "inside (1, 1/(2*beta))"));
    }
    Ok(order * (2.0 * beta).exp() / (sigma_ss * sigma_ss)
        + (-0.5 * (1.0 - 2.0 * order * beta).ln() + beta * order) / (order - 1.0))
}

/// The whole RDP curve of a GNSS release with `params`: [`rdp_of_smooth_sensitivity_gaussian`]
/// at every order of `orders` inside `(1, 1/(2β))`, where it is bounded — the release's
/// cost as the ledger composes it (unbounded at higher orders). Refused when no order of
/// `orders` lies in that range.
pub fn smooth_sensitivity_release_cost(
    params: SmoothSensitivityParams,
    orders: &[f64],
) -> Result<super::AdditionalCost, AccountantError> {
    super::validate::positive_finite("beta", params.beta)?;
    super::validate::positive_finite("sigma_ss", params.sigma_ss)?;
    let points = orders
        .iter()
        .filter(|&&o| 1.0 < o && o < 1.0 / (2.0 * params.beta))
        .map(|&o| {
            Ok((
                o,
                rdp_of_smooth_sensitivity_gaussian(params.beta, params.sigma_ss, o)?,
            ))
        })
        .collect::<Result<Vec<_>, AccountantError>>()?;
    if points.is_empty() {
        return Err(invalid(
            "beta",
            params.beta,
            "small enough that some analysed order lies below 1/(2*beta)",
        ));
    }
    super::AdditionalCost::rdp_at_orders(points)
}

/// Confident-GNMax threshold parameters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Threshold {
    /// Threshold `T` on the noisy max vote.
    pub threshold: f64,
    /// Noise σ₁ of the threshold step.
    pub sigma1: f64,
}

/// Smooth-sensitivity parameters for releasing the data-dependent ε.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SmoothSensitivityParams {
    /// Smoothness `β`; must satisfy `order < 1/(2β)`.
    pub beta: f64,
    /// Noise multiplier of the release, `σ_ss`.
    pub sigma_ss: f64,
}

/// The smooth-sensitivity release of the data-dependent RDP at one order.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SmoothSensitivityRelease {
    /// Order λ of the release (the data-dependent optimum).
    pub order: f64,
    /// Parameters used.
    pub params: SmoothSensitivityParams,
    /// Data-dependent total RDP at λ (private; do not publish).
    pub data_dependent_rdp: f64,
    /// `SS_β` of the total RDP at λ.
    pub smooth_sensitivity: f64,
    /// Std of the noise added to the RDP value, `SS_β · σ_ss`.
    pub noise_std: f64,
    /// RDP of the GNSS release itself at λ.
    pub release_rdp: f64,
}

impl SmoothSensitivityRelease {
    /// The publishable ε at `delta` given a standard-normal draw `z`:
    /// `R(λ) + SS·σ_ss·z + ρ + ln(1/δ)/(λ-1)`.
    pub fn epsilon_with_noise(&self, z: f64, delta: f64) -> f64 {
        self.data_dependent_rdp + self.noise_std * z + self.release_rdp
            - delta.ln() / (self.order - 1.0)
    }

    /// The expected published ε (`z = 0`); useful for planning only.
    pub fn expected_epsilon(&self, delta: f64) -> f64 {
        self.epsilon_with_noise(0.0, delta)
    }
}

/// Result of a GNMax / Confident-GNMax analysis over many queries.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PateAnalysis {
    /// Number of queries.
    pub queries: usize,
    /// Orders the RDP is evaluated at.
    pub orders: Vec<f64>,
    /// Total data-dependent RDP (private).
    pub rdp_data_dependent: Vec<f64>,
    /// Total data-independent RDP.
    pub rdp_data_independent: Vec<f64>,
    /// Data-dependent ε and its order (private until sanitised).
    pub epsilon_data_dependent: (f64, f64),
    /// Data-independent ε and its order (publishable).
    pub epsilon_data_independent: (f64, f64),
    /// Smooth-sensitivity release at the data-dependent optimal order, when requested.
    pub smooth_sensitivity: Option<SmoothSensitivityRelease>,
}

/// How a thresholded aggregator ran one query's threshold step: the value it tested (the
/// top vote for Confident-GNMax; `max_j (n_j − O_j)` against the student's scaled
/// probabilities `O` for the interactive variant — both of sensitivity 1) and whether the
/// noisy value reached the threshold.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThresholdCheck {
    /// The value the threshold step tested.
    pub statistic: f64,
    /// Whether it passed (the teachers then answered with GNMax).
    pub passed: bool,
}

/// Analyses `votes` (one vote vector per query) answered with GNMax(σ), optionally behind a
/// Confident-GNMax threshold, at `delta`, over `orders` (dp_accounting's default orders
/// when called from the CLI). See the module docs for the composition rule: without the
/// run's threshold outcomes every query is charged both steps.
pub fn analyze_gnmax(
    votes: &[Vec<f64>],
    sigma: f64,
    threshold: Option<Threshold>,
    delta: f64,
    orders: &[f64],
    smooth: Option<SmoothSensitivityParams>,
) -> Result<PateAnalysis, AccountantError> {
    analyze_gnmax_core(votes, sigma, threshold, None, delta, orders, smooth)
}

/// Analyses a thresholded run whose threshold outcomes are known (Papernot et al. 2018,
/// §4): every query pays the threshold step on its `checks[i].statistic` — a refused
/// query pays that and nothing more — and only the queries that passed pay GNMax(σ₂).
/// This is adaptive composition: whether the GNMax step runs is the threshold step's own
/// released outcome. The smooth-sensitivity release needs the statistic to be the top
/// vote (Confident-GNMax); the interactive statistic is refused there.
pub fn analyze_thresholded_run(
    votes: &[Vec<f64>],
    checks: &[ThresholdCheck],
    sigma2: f64,
    threshold: Threshold,
    delta: f64,
    orders: &[f64],
    smooth: Option<SmoothSensitivityParams>,
) -> Result<PateAnalysis, AccountantError> {
    if checks.len() != votes.len() {
        return Err(invalid(
            "checks",
            checks.len(),
            "one threshold outcome per query",
        ));
    }
    analyze_gnmax_core(
        votes,
        sigma2,
        Some(threshold),
        Some(checks),
        delta,
        orders,
        smooth,
    )
}

/// [`analyze_gnmax`] at the data-dependent optimal order λ with a smooth-sensitivity
/// release of smoothness `beta` (default `0.4/λ`, inside GNSS's `λ < 1/(2β)`) and noise
/// multiplier `sigma_ss`; `checks` as in [`analyze_thresholded_run`] when known.
#[allow(clippy::too_many_arguments)]
pub fn analyze_for_release(
    votes: &[Vec<f64>],
    sigma: f64,
    threshold: Option<Threshold>,
    checks: Option<&[ThresholdCheck]>,
    delta: f64,
    orders: &[f64],
    sigma_ss: f64,
    beta: Option<f64>,
) -> Result<PateAnalysis, AccountantError> {
    let first = analyze_gnmax_core(votes, sigma, threshold, checks, delta, orders, None)?;
    let order = first.epsilon_data_dependent.1;
    let params = SmoothSensitivityParams {
        beta: beta.unwrap_or(0.4 / order),
        sigma_ss,
    };
    analyze_gnmax_core(votes, sigma, threshold, checks, delta, orders, Some(params))
}

fn analyze_gnmax_core(
    votes: &[Vec<f64>],
    sigma: f64,
    threshold: Option<Threshold>,
    checks: Option<&[ThresholdCheck]>,
    delta: f64,
    orders: &[f64],
    smooth: Option<SmoothSensitivityParams>,
) -> Result<PateAnalysis, AccountantError> {
    super::validate::positive_finite("sigma", sigma)?;
    super::validate::delta(delta)?;
    if votes.is_empty() {
        return Err(invalid("votes", 0, "at least one query"));
    }
    if let Some(t) = threshold {
        if !t.threshold.is_finite() {
            return Err(invalid("threshold", t.threshold, "a finite number"));
        }
        super::validate::positive_finite("sigma1", t.sigma1)?;
    }
    let mut dep = vec![0.0; orders.len()];
    let mut indep = vec![0.0; orders.len()];
    let add = |acc: &mut [f64], r: Vec<f64>| acc.iter_mut().zip(r).for_each(|(a, r)| *a += r);
    for (row, v) in votes.iter().enumerate() {
        validate_votes(v).map_err(|e| AccountantError::MalformedVotes {
            row: row + 1,
            message: e.to_string(),
        })?;
        let check = checks.map(|c| c[row]);
        if check.is_none_or(|c| c.passed) {
            let logq = compute_logq_gaussian(v, sigma);
            add(&mut dep, rdp_gaussian(logq, sigma, orders)?);
            add(&mut indep, rdp_data_independent_gaussian(sigma, orders));
        }
        if let Some(t) = threshold {
            let lpa = match check {
                Some(c) if c.statistic.is_finite() => {
                    log_sf((t.threshold - c.statistic) / t.sigma1)
                }
                Some(c) => return Err(invalid("statistic", c.statistic, "a finite number")),
                None => compute_logpr_answered(t.threshold, t.sigma1, v),
            };
            add(&mut dep, compute_rdp_threshold(lpa, t.sigma1, orders)?);
            add(
                &mut indep,
                compute_rdp_data_independent_threshold(t.sigma1, orders),
            );
        }
    }
    let eps_dep = epsilon_from_rdp(orders, &dep, delta);
    let eps_indep = epsilon_from_rdp(orders, &indep, delta);
    let smooth_sensitivity = match smooth {
        None => None,
        Some(p) => Some(smooth_sensitivity_release(
            votes, sigma, threshold, checks, eps_dep.1, &dep, orders, p,
        )?),
    };
    Ok(PateAnalysis {
        queries: votes.len(),
        orders: orders.to_vec(),
        rdp_data_dependent: dep,
        rdp_data_independent: indep,
        epsilon_data_dependent: eps_dep,
        epsilon_data_independent: eps_indep,
        smooth_sensitivity,
    })
}

/// Analyses `votes` answered with LNMax (Laplace noise of scale `lambda` on each count) at
/// `delta`: data-dependent RDP by [`rdp_laplace`], data-independent by
/// [`rdp_data_independent_laplace`], composed by adding over queries.
pub fn analyze_lnmax(
    votes: &[Vec<f64>],
    lambda: f64,
    delta: f64,
    orders: &[f64],
) -> Result<PateAnalysis, AccountantError> {
    super::validate::positive_finite("lambda", lambda)?;
    super::validate::delta(delta)?;
    if votes.is_empty() {
        return Err(invalid("votes", 0, "at least one query"));
    }
    let mut dep = vec![0.0; orders.len()];
    let indep: Vec<f64> = rdp_data_independent_laplace(lambda, orders)
        .iter()
        .map(|r| r * votes.len() as f64)
        .collect();
    for (row, v) in votes.iter().enumerate() {
        validate_votes(v).map_err(|e| AccountantError::MalformedVotes {
            row: row + 1,
            message: e.to_string(),
        })?;
        for (d, r) in dep.iter_mut().zip(rdp_laplace(v, lambda, orders)) {
            *d += r;
        }
    }
    Ok(PateAnalysis {
        queries: votes.len(),
        orders: orders.to_vec(),
        epsilon_data_dependent: epsilon_from_rdp(orders, &dep, delta),
        epsilon_data_independent: epsilon_from_rdp(orders, &indep, delta),
        rdp_data_dependent: dep,
        rdp_data_independent: indep,
        smooth_sensitivity: None,
    })
}

/// Smooth sensitivity of the total data-dependent RDP at `order`, and its GNSS release cost.
#[allow(clippy::too_many_arguments)]
fn smooth_sensitivity_release(
    votes: &[Vec<f64>],
    sigma: f64,
    threshold: Option<Threshold>,
    checks: Option<&[ThresholdCheck]>,
    order: f64,
    dep: &[f64],
    orders: &[f64],
    params: SmoothSensitivityParams,
) -> Result<SmoothSensitivityRelease, AccountantError> {
    super::validate::positive_finite("beta", params.beta)?;
    super::validate::positive_finite("sigma_ss", params.sigma_ss)?;
    let idx = orders
        .iter()
        .position(|o| *o == order)
        .ok_or_else(|| invalid("order", order, "one of the analysed orders"))?;
    let num_teachers = votes
        .iter()
        .map(|v| v.iter().sum::<f64>().round() as usize)
        .max()
        .unwrap_or(0)
        .max(1);
    let mut ls_total = vec![0.0; num_teachers];
    for (row, v) in votes.iter().enumerate() {
        let check = checks.map(|c| c[row]);
        if let Some(c) = check {
            let top = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if c.statistic != top {
                return Err(invalid(
                    "statistic",
                    c.statistic,
                    "the top vote (the smooth sensitivity of the interactive threshold step \
                     is not implemented)",
                ));
            }
        }
        if check.is_none_or(|c| c.passed) {
            let ls = local_sensitivity_bounds_gnmax(v, num_teachers, sigma, order)?;
            for (t, l) in ls_total.iter_mut().zip(ls) {
                *t += l;
            }
        }
        if let Some(t) = threshold {
            let ls =
                local_sensitivity_bounds_threshold(v, num_teachers, t.threshold, t.sigma1, order)?;
            for (acc, l) in ls_total.iter_mut().zip(ls) {
                *acc += l;
            }
        }
    }
    let ss = discounted_max(params.beta, &ls_total);
    let release_rdp = rdp_of_smooth_sensitivity_gaussian(params.beta, params.sigma_ss, order)?;
    Ok(SmoothSensitivityRelease {
        order,
        params,
        data_dependent_rdp: dep[idx],
        smooth_sensitivity: ss,
        noise_std: ss * params.sigma_ss,
        release_rdp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unanimous_votes_give_tiny_logq() {
        let mut v = vec![0.0; 10];
        v[0] = 250.0;
        let lq = compute_logq_gaussian(&v, 40.0);
        assert!((lq - (-10.019_228_294_289_038)).abs() < 1e-9 * 10.0);
    }

    #[test]
    fn gnss_needs_order_below_half_inverse_beta() {
        assert!(rdp_of_smooth_sensitivity_gaussian(0.1, 10.0, 6.0).is_err());
        assert!(rdp_of_smooth_sensitivity_gaussian(0.01, 10.0, 6.0).is_ok());
    }
}
