//! Empirical privacy from canary scores: a lower bound on ε, and an estimate.
//!
//! - **Bound** ([`epsilon_lower_bound`], [`one_run_bound`], [`best_one_run_bound`]): Steinke,
//!   Nasr & Jagielski (2023), "Privacy auditing with one (1) training run", Appendix D. Each of
//!   `m` canaries is included in training by an independent fair coin; the auditor ranks them
//!   by score and guesses "included" for the `k+` highest and "excluded" for the `k-` lowest.
//!   If `v` of the `r = k+ + k-` guesses are right, any ε for which that many is too unlikely
//!   under (ε, δ)-DP (p-value below `1 - confidence`) is ruled out. The bound is valid only if
//!   `k+` and `k-` are fixed before the scores are seen.
//! - **Estimate** ([`one_shot_estimate`]): Andrew et al. (2024), "One-shot empirical privacy
//!   estimation for federated learning". Not a bound: it fits Gaussians to the scores of
//!   inserted and held-back canaries and reports the ε of the matching μ-Gaussian-DP
//!   mechanism.
//!
//! The binomial terms use Loader's saddle-point form (Stirling error plus a stable
//! `x ln(x/np) + np - x`), accurate for `r` up to 10⁵ and beyond; the normal CDF uses Cody's
//! rational approximations of `erfc`, in log space far in the lower tail. Both are checked
//! against SciPy (`tests/fixtures/audit/one_run_bound.json`).

use serde::{Deserialize, Serialize};

use crate::AuditError;

/// Width of the ε interval the one-run bisection stops at.
const BISECTION_TOLERANCE: f64 = 1e-10;

/// Terms more than `e^TAIL_CUTOFF` below the largest are dropped once the sum is past the mode.
const TAIL_CUTOFF: f64 = -60.0;

/// `ln √(2π)`.
const LN_SQRT_2PI: f64 = 0.918_938_533_204_672_8;

// --- The one-run audit --------------------------------------------------------------------

/// The p-value of `v` correct guesses out of `r`, with `m` canaries, under (ε, δ)-DP
/// (Steinke et al. 2023, Appendix D, `p_value_DP_audit`); at most 1.
///
/// `P[Binomial(r, q) ≥ v] + 2mδ · max_{1≤i≤v} P[v-i ≤ Binomial(r, q) ≤ v-1] / i`, with
/// `q = e^ε / (1 + e^ε)`.
pub fn p_value(m: usize, r: usize, v: usize, epsilon: f64, delta: f64) -> f64 {
    if epsilon.is_nan() || delta.is_nan() {
        return f64::NAN;
    }
    let binom = Binomial::new(r, epsilon);
    let ln_beta = binom.ln_upper_tail(v);
    let mut ln_p = ln_beta;
    if delta > 0.0 && m > 0 {
        let ln_alpha = binom.ln_alpha(v);
        ln_p = log_add_exp(ln_p, ln_alpha + (2.0 * m as f64 * delta).ln());
    }
    ln_p.exp().min(1.0)
}

/// The largest ε that `v` correct guesses out of `r` (with `m` canaries) rule out at
/// `confidence` (e.g. 0.95); 0 where none is (Steinke et al. 2023, `get_eps_audit`,
/// bisected to 1e-10 rather than 30 steps).
pub fn epsilon_lower_bound(
    m: usize,
    r: usize,
    v: usize,
    delta: f64,
    confidence: f64,
) -> Result<f64, AuditError> {
    if v > r || r > m {
        return Err(AuditError::Option {
            option: "--guesses",
            reason: format!("need correct ≤ guesses ≤ canaries, got {v} ≤ {r} ≤ {m}"),
        });
    }
    check_delta(delta, true)?;
    check_confidence(confidence)?;
    let p = 1.0 - confidence;
    let rejects = |eps: f64| p_value(m, r, v, eps, delta) < p;
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    // As in the reference: grow the upper end by 1 until it is not rejected. The p-value
    // reaches 1 once e^-ε underflows (ε ≈ 745), so this ends.
    while rejects(hi) && hi < 1e4 {
        hi += 1.0;
    }
    while hi - lo > BISECTION_TOLERANCE {
        let mid = 0.5 * (lo + hi);
        if rejects(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// How many guesses an auditor made and how many were right.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guesses {
    /// Guesses made (`k+ + k-`).
    pub guesses: usize,
    /// Guesses that were right.
    pub correct: usize,
}

/// The guesses of the rule "included" for the `k_plus` highest scores and "excluded" for the
/// `k_minus` lowest, abstaining on the rest. Equal scores rank by index (the lower index
/// counts as the higher score).
pub fn guesses_at(
    scores: &[f64],
    included: &[bool],
    k_plus: usize,
    k_minus: usize,
) -> Result<Guesses, AuditError> {
    let order = rank(scores, included)?;
    check_counts(scores.len(), k_plus, k_minus)?;
    let top = order[..k_plus].iter().filter(|&&i| included[i]).count();
    let bottom = order[order.len() - k_minus..]
        .iter()
        .filter(|&&i| !included[i])
        .count();
    Ok(Guesses {
        guesses: k_plus + k_minus,
        correct: top + bottom,
    })
}

/// A one-run audit's result: the guesses it scored and the ε they rule out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneRunBound {
    /// Canaries (`m`), each included by a fair coin.
    pub canaries: usize,
    /// Guesses made (`r = k+ + k-`).
    pub guesses: usize,
    /// Guesses that were right (`v`).
    pub correct: usize,
    /// Canaries guessed "included" (the highest scores).
    pub k_plus: usize,
    /// Canaries guessed "excluded" (the lowest scores).
    pub k_minus: usize,
    /// The lower bound on ε.
    pub epsilon: f64,
    /// The confidence the bound holds at (for a sweep, over the whole grid).
    pub confidence: f64,
    /// The δ the bound is for.
    pub delta: f64,
}

/// The ε lower bound of fixed guess counts `k_plus`, `k_minus` (chosen before the scores
/// were seen), with one canary per score.
pub fn one_run_bound(
    scores: &[f64],
    included: &[bool],
    k_plus: usize,
    k_minus: usize,
    delta: f64,
    confidence: f64,
) -> Result<OneRunBound, AuditError> {
    let g = guesses_at(scores, included, k_plus, k_minus)?;
    let epsilon = epsilon_lower_bound(scores.len(), g.guesses, g.correct, delta, confidence)?;
    Ok(OneRunBound {
        canaries: scores.len(),
        guesses: g.guesses,
        correct: g.correct,
        k_plus,
        k_minus,
        epsilon,
        confidence,
        delta,
    })
}

/// Fractions of the canaries guessed in [`default_grid`].
pub const GRID_FRACTIONS: [f64; 7] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];

/// A grid of `(k+, k-)` fixed by the number of canaries alone: for each of
/// [`GRID_FRACTIONS`], that share of the canaries guessed (at least 1), half "included"
/// (rounded up) and half "excluded"; duplicates dropped.
pub fn default_grid(canaries: usize) -> Vec<(usize, usize)> {
    let mut grid: Vec<(usize, usize)> = Vec::new();
    if canaries == 0 {
        return grid;
    }
    for f in GRID_FRACTIONS {
        let r = ((f * canaries as f64).round() as usize).clamp(1, canaries);
        let k = (r.div_ceil(2), r / 2);
        if !grid.contains(&k) {
            grid.push(k);
        }
    }
    grid
}

/// The best bound over a grid of `(k+, k-)` declared before the scores were seen, each
/// grid point bounded at confidence `1 - (1 - confidence) / grid.len()` (Bonferroni), so that
/// the largest of them still holds at `confidence`. Picking the best point of a grid without
/// this correction (or choosing the counts after looking at which guesses were right) makes
/// the bound invalid. Ties go to the earlier grid point.
pub fn best_one_run_bound(
    scores: &[f64],
    included: &[bool],
    grid: &[(usize, usize)],
    delta: f64,
    confidence: f64,
) -> Result<OneRunBound, AuditError> {
    check_confidence(confidence)?;
    if grid.is_empty() {
        return Err(AuditError::Option {
            option: "--grid",
            reason: "at least one (k+, k-) pair".into(),
        });
    }
    let per_point = 1.0 - (1.0 - confidence) / grid.len() as f64;
    let mut best: Option<OneRunBound> = None;
    for &(k_plus, k_minus) in grid {
        let b = one_run_bound(scores, included, k_plus, k_minus, delta, per_point)?;
        if best.as_ref().is_none_or(|old| b.epsilon > old.epsilon) {
            best = Some(b);
        }
    }
    let mut best = best.ok_or(AuditError::Option {
        option: "--grid",
        reason: "at least one (k+, k-) pair".into(),
    })?;
    best.confidence = confidence;
    Ok(best)
}

/// Canary indices from the highest score to the lowest, ties by index.
fn rank(scores: &[f64], included: &[bool]) -> Result<Vec<usize>, AuditError> {
    if scores.len() != included.len() {
        return Err(AuditError::Option {
            option: "scores",
            reason: format!(
                "one inclusion flag per score, got {} scores and {} flags",
                scores.len(),
                included.len()
            ),
        });
    }
    if let Some(i) = scores.iter().position(|s| s.is_nan()) {
        return Err(AuditError::Option {
            option: "scores",
            reason: format!("score {i} is NaN"),
        });
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    Ok(order)
}

fn check_counts(canaries: usize, k_plus: usize, k_minus: usize) -> Result<(), AuditError> {
    if k_plus.checked_add(k_minus).is_none_or(|r| r > canaries) {
        return Err(AuditError::Option {
            option: "--k-plus/--k-minus",
            reason: format!("k+ + k- ≤ {canaries} canaries, got {k_plus} + {k_minus}"),
        });
    }
    Ok(())
}

fn check_delta(delta: f64, zero_ok: bool) -> Result<(), AuditError> {
    let ok = if zero_ok {
        (0.0..1.0).contains(&delta)
    } else {
        delta > 0.0 && delta < 1.0
    };
    if ok {
        return Ok(());
    }
    Err(AuditError::Option {
        option: "--delta",
        reason: format!(
            "{delta} is not in {}",
            if zero_ok { "[0, 1)" } else { "(0, 1)" }
        ),
    })
}

fn check_confidence(confidence: f64) -> Result<(), AuditError> {
    if confidence > 0.0 && confidence < 1.0 {
        return Ok(());
    }
    Err(AuditError::Option {
        option: "--confidence",
        reason: format!("{confidence} is not in (0, 1)"),
    })
}

/// `Binomial(n, q)` with `q = e^ε / (1 + e^ε)`, in log space.
struct Binomial {
    n: usize,
    /// Success probability `q`.
    p: f64,
    /// `1 - q`, computed on its own so it keeps its precision when `q` is near 1.
    p_fail: f64,
    /// `ln q`.
    ln_p: f64,
    /// `ln(1 - q)`.
    ln_fail: f64,
}

impl Binomial {
    fn new(n: usize, epsilon: f64) -> Self {
        Self {
            n,
            p: 1.0 / (1.0 + (-epsilon).exp()),
            p_fail: 1.0 / (1.0 + epsilon.exp()),
            ln_p: -softplus(-epsilon),
            ln_fail: -softplus(epsilon),
        }
    }

    /// The (lower) mode, `⌊(n + 1) q⌋`, at most `n`.
    fn mode(&self) -> usize {
        (((self.n as f64 + 1.0) * self.p).floor() as usize).min(self.n)
    }

    /// `ln P[X = k]` (Loader's saddle-point form, as R's `dbinom_raw`).
    fn ln_pmf(&self, k: usize) -> f64 {
        let n = self.n;
        if k > n {
            return f64::NEG_INFINITY;
        }
        if k == 0 {
            return n as f64 * self.ln_fail;
        }
        if k == n {
            return n as f64 * self.ln_p;
        }
        let (nf, kf) = (n as f64, k as f64);
        let jf = nf - kf;
        let lc = stirling_error(n)
            - stirling_error(k)
            - stirling_error(n - k)
            - bd0(kf, nf * self.p)
            - bd0(jf, nf * self.p_fail);
        // ln √(2π k (n - k) / n)
        let lf = LN_SQRT_2PI + 0.5 * (kf.ln() + jf.ln() - nf.ln());
        lc - lf
    }

    /// `ln P[X ≥ v]`.
    fn ln_upper_tail(&self, v: usize) -> f64 {
        if v == 0 {
            return 0.0;
        }
        if v > self.n {
            return f64::NEG_INFINITY;
        }
        let mode = self.mode();
        let peak = self.ln_pmf(v.max(mode));
        if peak == f64::NEG_INFINITY {
            return f64::NEG_INFINITY;
        }
        let mut sum = 0.0;
        for k in v..=self.n {
            let d = self.ln_pmf(k) - peak;
            sum += d.exp();
            if k > mode && d < TAIL_CUTOFF {
                break;
            }
        }
        peak + sum.ln()
    }

    /// `ln max_{1≤i≤v} P[v-i ≤ X ≤ v-1] / i` (the reference's `alpha`); `-∞` for `v = 0`.
    fn ln_alpha(&self, v: usize) -> f64 {
        if v == 0 {
            return f64::NEG_INFINITY;
        }
        let top = (v - 1).min(self.n);
        let mode = self.mode();
        let peak = self.ln_pmf(top.min(mode));
        if peak == f64::NEG_INFINITY {
            return f64::NEG_INFINITY;
        }
        let (mut sum, mut best) = (0.0_f64, 0.0_f64);
        for j in (0..=top).rev() {
            let d = self.ln_pmf(j) - peak;
            sum += d.exp();
            best = best.max(sum / (v - j) as f64);
            // Below the mode the terms only shrink: the partial sums stop growing and the
            // ratio only falls.
            if j < mode && d < TAIL_CUTOFF {
                break;
            }
        }
        peak + best.ln()
    }
}

/// `ln(1 + e^x)` without overflow.
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

/// `ln(e^a + e^b)`.
fn log_add_exp(a: f64, b: f64) -> f64 {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// The Stirling error `ln n! - ln(√(2πn) (n/e)^n)` of an integer `n`.
fn stirling_error(n: usize) -> f64 {
    const S0: f64 = 1.0 / 12.0;
    const S1: f64 = 1.0 / 360.0;
    const S2: f64 = 1.0 / 1260.0;
    const S3: f64 = 1.0 / 1680.0;
    const S4: f64 = 1.0 / 1188.0;
    if n == 0 {
        // ln 0! - ln √(2π·0)·… is not finite; Loader's convention.
        return 0.0;
    }
    let nf = n as f64;
    if n <= 15 {
        // n! ≤ 15! < 2^53 is exact.
        let fact: f64 = (1..=n).map(|i| i as f64).product();
        return fact.ln() - (nf + 0.5) * nf.ln() + nf - LN_SQRT_2PI;
    }
    let nn = nf * nf;
    if n > 500 {
        return (S0 - S1 / nn) / nf;
    }
    if n > 80 {
        return (S0 - (S1 - S2 / nn) / nn) / nf;
    }
    if n > 35 {
        return (S0 - (S1 - (S2 - S3 / nn) / nn) / nn) / nf;
    }
    (S0 - (S1 - (S2 - (S3 - S4 / nn) / nn) / nn) / nn) / nf
}

/// `x ln(x / np) + np - x`, without cancellation when `x ≈ np` (Loader's `bd0`).
fn bd0(x: f64, np: f64) -> f64 {
    if (x - np).abs() < 0.1 * (x + np) {
        let mut v = (x - np) / (x + np);
        let mut s = (x - np) * v;
        let mut ej = 2.0 * x * v;
        v *= v;
        for j in 1..1000 {
            ej *= v;
            let s1 = s + ej / f64::from(2 * j + 1);
            if s1 == s {
                return s1;
            }
            s = s1;
        }
        return s;
    }
    x * (x / np).ln() + np - x
}

// --- The one-shot estimate ----------------------------------------------------------------

/// An empirical ε estimate (Andrew et al. 2024): not a bound.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneShotEstimate {
    /// The fitted Gaussian-DP parameter: the inserted canaries' mean score above the
    /// held-back canaries', in held-back standard deviations.
    pub mu: f64,
    /// The ε of μ-Gaussian DP at `delta`.
    pub epsilon: f64,
    /// The δ the estimate is for.
    pub delta: f64,
}

/// Andrew et al.'s one-shot estimate from the scores of inserted canaries and of held-back
/// (never inserted) ones: `μ = (mean(inserted) - mean(held_back)) / sd(held_back)` (sample
/// standard deviation), and ε of μ-GDP at `delta` ([`gaussian_dp_epsilon`]).
pub fn one_shot_estimate(
    inserted: &[f64],
    held_back: &[f64],
    delta: f64,
) -> Result<OneShotEstimate, AuditError> {
    check_delta(delta, false)?;
    let bad = |reason: String| {
        Err(AuditError::Option {
            option: "scores",
            reason,
        })
    };
    if inserted.is_empty() || held_back.len() < 2 {
        return bad(format!(
            "at least 1 inserted and 2 held-back canaries, got {} and {}",
            inserted.len(),
            held_back.len()
        ));
    }
    if inserted.iter().chain(held_back).any(|s| !s.is_finite()) {
        return bad("scores must be finite".into());
    }
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len() as f64;
    let out_mean = mean(held_back);
    let var = held_back
        .iter()
        .map(|s| (s - out_mean).powi(2))
        .sum::<f64>()
        / (held_back.len() - 1) as f64;
    let sd = var.sqrt();
    if !sd.is_finite() || sd <= 0.0 {
        return bad(format!("the held-back scores' standard deviation is {sd}"));
    }
    let mu = (mean(inserted) - out_mean) / sd;
    Ok(OneShotEstimate {
        mu,
        epsilon: gaussian_dp_epsilon(mu, delta),
        delta,
    })
}

/// δ(ε) of μ-Gaussian DP: `Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2)`, for `μ > 0`.
pub fn gaussian_dp_delta(mu: f64, epsilon: f64) -> f64 {
    let a = normal_cdf(-epsilon / mu + mu / 2.0);
    let b = (epsilon + ln_normal_cdf(-epsilon / mu - mu / 2.0)).exp();
    (a - b).max(0.0)
}

/// The ε at which μ-Gaussian DP has `delta`, by bisection; 0 when `μ ≤ 0` or `δ(0) ≤ delta`.
pub fn gaussian_dp_epsilon(mu: f64, delta: f64) -> f64 {
    if mu.is_nan() || delta.is_nan() {
        return f64::NAN;
    }
    if mu <= 0.0 || gaussian_dp_delta(mu, 0.0) <= delta {
        return 0.0;
    }
    if mu == f64::INFINITY {
        return f64::INFINITY;
    }
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    while gaussian_dp_delta(mu, hi) > delta {
        lo = hi;
        hi *= 2.0;
        if hi > 1e300 {
            return f64::INFINITY;
        }
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi || hi - lo <= 1e-13 * hi.max(1.0) {
            break;
        }
        if gaussian_dp_delta(mu, mid) > delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The standard normal CDF `Φ(x)`.
fn normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
}

/// `ln Φ(x)`, finite far into the lower tail (where `Φ` underflows).
fn ln_normal_cdf(x: f64) -> f64 {
    if x < -5.0 {
        // Φ(x) = ½ erfcx(t) e^{-t²} with t = -x/√2, and t² = x²/2.
        let t = -x * std::f64::consts::FRAC_1_SQRT_2;
        return (0.5 * erfcx(t)).ln() - 0.5 * x * x;
    }
    if x > 5.0 {
        return (-normal_cdf(-x)).ln_1p();
    }
    normal_cdf(x).ln()
}

/// Cody's erf coefficients for `|x| ≤ 0.46875` (numerator, denominator).
const ERF_A: [f64; 5] = [
    3.161_123_743_870_565_6,
    1.138_641_541_510_501_6e2,
    3.774_852_376_853_02e2,
    3.209_377_589_138_469_5e3,
    1.857_777_061_846_031_5e-1,
];
const ERF_B: [f64; 4] = [
    2.360_129_095_234_412_1e1,
    2.440_246_379_344_441_7e2,
    1.282_616_526_077_372_3e3,
    2.844_236_833_439_171e3,
];
/// Cody's erfcx coefficients for `0.46875 < x ≤ 4`.
const ERF_C: [f64; 9] = [
    5.641_884_969_886_701e-1,
    8.883_149_794_388_376,
    6.611_919_063_714_163e1,
    2.986_351_381_974_001e2,
    8.819_522_212_417_69e2,
    1.712_047_612_634_070_6e3,
    2.051_078_377_826_071_5e3,
    1.230_339_354_797_997_2e3,
    2.153_115_354_744_038_5e-8,
];
const ERF_D: [f64; 8] = [
    1.574_492_611_070_983_5e1,
    1.176_939_508_913_125e2,
    5.371_811_018_620_099e2,
    1.621_389_574_566_690_2e3,
    3.290_799_235_733_459_6e3,
    4.362_619_090_143_247e3,
    3.439_367_674_143_721_6e3,
    1.230_339_354_803_749_5e3,
];
/// Cody's erfcx coefficients for `x > 4` (in `1/x²`).
const ERF_P: [f64; 6] = [
    3.053_266_349_612_323_4e-1,
    3.603_448_999_498_044_4e-1,
    1.257_817_261_112_292_5e-1,
    1.608_378_514_874_227_5e-2,
    6.587_491_615_298_378e-4,
    1.631_538_713_730_209_8e-2,
];
const ERF_Q: [f64; 5] = [
    2.568_520_192_289_822,
    1.872_952_849_923_460_4,
    5.279_051_029_514_284e-1,
    6.051_834_131_244_132e-2,
    2.335_204_976_268_691_8e-3,
];
/// `1/√π`.
const FRAC_1_SQRT_PI: f64 = 0.564_189_583_547_756_3;

/// `erf(x)` for `|x| ≤ 0.46875`.
fn erf_small(x: f64) -> f64 {
    let y2 = x * x;
    let mut num = ERF_A[4] * y2;
    let mut den = y2;
    for i in 0..3 {
        num = (num + ERF_A[i]) * y2;
        den = (den + ERF_B[i]) * y2;
    }
    x * (num + ERF_A[3]) / (den + ERF_B[3])
}

/// The scaled complementary error function `e^{x²} erfc(x)` for `x ≥ 0.46875`
/// (W. J. Cody, "Rational Chebyshev approximations for the error function", 1969).
fn erfcx_large(y: f64) -> f64 {
    if y <= 4.0 {
        let mut num = ERF_C[8] * y;
        let mut den = y;
        for i in 0..7 {
            num = (num + ERF_C[i]) * y;
            den = (den + ERF_D[i]) * y;
        }
        return (num + ERF_C[7]) / (den + ERF_D[7]);
    }
    if y >= 6.71e7 {
        return FRAC_1_SQRT_PI / y;
    }
    let z = 1.0 / (y * y);
    let mut num = ERF_P[5] * z;
    let mut den = z;
    for i in 0..4 {
        num = (num + ERF_P[i]) * z;
        den = (den + ERF_Q[i]) * z;
    }
    let r = z * (num + ERF_P[4]) / (den + ERF_Q[4]);
    (FRAC_1_SQRT_PI - r) / y
}

/// `e^{x²} erfc(x)` for `x ≥ 0`.
fn erfcx(x: f64) -> f64 {
    if x <= 0.468_75 {
        return (x * x).exp() * (1.0 - erf_small(x));
    }
    erfcx_large(x)
}

/// `erfc(x)`, to about one part in 10¹⁵ of its value.
fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    let y = x.abs();
    if y <= 0.468_75 {
        return 1.0 - erf_small(x);
    }
    let tail = if y >= 26.543 {
        0.0
    } else {
        // e^{-y²} split as e^{-h²} e^{-(y-h)(y+h)} with h = y rounded down to 1/16, which keeps
        // the exponent's rounding error out of the result.
        let h = (y * 16.0).trunc() / 16.0;
        (-h * h).exp() * (-(y - h) * (y + h)).exp() * erfcx_large(y)
    };
    if x < 0.0 {
        2.0 - tail
    } else {
        tail
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const FIXTURE: &str = include_str!("../../tests/fixtures/audit/one_run_bound.json");

    fn fixture() -> serde_json::Value {
        serde_json::from_str(FIXTURE).unwrap()
    }

    fn num(v: &serde_json::Value, key: &str) -> f64 {
        v[key].as_f64().unwrap()
    }

    fn int(v: &serde_json::Value, key: &str) -> usize {
        v[key].as_u64().unwrap() as usize
    }

    fn close_rel(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs() + 1e-300
    }

    #[test]
    fn bounds_match_the_reference() {
        for case in fixture()["bounds"].as_array().unwrap() {
            let (m, r, v) = (int(case, "m"), int(case, "r"), int(case, "v"));
            let (delta, conf) = (num(case, "delta"), num(case, "confidence"));
            let want = num(case, "epsilon");
            let got = epsilon_lower_bound(m, r, v, delta, conf).unwrap();
            assert!(
                (got - want).abs() < 1e-6,
                "m={m} r={r} v={v} δ={delta}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn p_values_match_the_reference() {
        for case in fixture()["p_values"].as_array().unwrap() {
            let (m, r, v) = (int(case, "m"), int(case, "r"), int(case, "v"));
            let (delta, eps) = (num(case, "delta"), num(case, "epsilon"));
            let want = num(case, "p_value");
            let got = p_value(m, r, v, eps, delta);
            assert!(
                close_rel(got, want, 1e-9),
                "m={m} r={r} v={v} δ={delta} ε={eps}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn binomial_terms_sum_to_one() {
        for (n, eps) in [
            (1usize, 0.3),
            (20, 0.0),
            (1000, 2.0),
            (100_000, 0.4),
            (50, 30.0),
        ] {
            let b = Binomial::new(n, eps);
            let total: f64 = (0..=n).map(|k| b.ln_pmf(k).exp()).sum();
            assert!((total - 1.0).abs() < 1e-12, "n={n} ε={eps}: {total}");
            assert!(b.ln_upper_tail(0).abs() < 1e-15);
        }
    }

    #[test]
    fn all_correct_without_delta_is_the_closed_form() {
        for r in [10usize, 100, 1000, 10_000] {
            let p = 0.05_f64.powf(1.0 / r as f64);
            let want = (p / (1.0 - p)).ln();
            let got = epsilon_lower_bound(r, r, r, 0.0, 0.95).unwrap();
            assert!((got - want).abs() < 1e-8, "r={r}: {got} vs {want}");
        }
        let at_100 = epsilon_lower_bound(100, 100, 100, 0.0, 0.95).unwrap();
        assert!((at_100 - 3.49).abs() < 0.01);
        let at_1000 = epsilon_lower_bound(1000, 1000, 1000, 0.0, 0.95).unwrap();
        assert!((at_1000 - 5.8).abs() < 0.01);
    }

    #[test]
    fn no_better_than_chance_bounds_nothing() {
        for (r, delta) in [(10usize, 0.0), (100, 1e-5), (1000, 0.0), (1001, 1e-6)] {
            for v in [0, r / 4, r / 2] {
                assert_eq!(epsilon_lower_bound(2 * r, r, v, delta, 0.95).unwrap(), 0.0);
            }
        }
    }

    #[test]
    fn more_correct_never_lowers_the_bound() {
        for delta in [0.0, 1e-5] {
            let mut last = 0.0;
            for v in (0..=200).step_by(5) {
                let e = epsilon_lower_bound(1000, 200, v, delta, 0.95).unwrap();
                assert!(e >= last - 1e-9, "v={v}: {e} < {last}");
                last = e;
            }
            assert!(last > 3.0);
        }
    }

    #[test]
    fn bad_inputs_are_refused() {
        let refused = |m, r, v, delta, conf| epsilon_lower_bound(m, r, v, delta, conf).is_err();
        assert!(refused(100, 10, 11, 0.0, 0.95)); // v > r
        assert!(refused(100, 101, 50, 0.0, 0.95)); // r > m
        assert!(refused(100, 10, 5, 0.0, 0.0));
        assert!(refused(100, 10, 5, 0.0, 1.0));
        assert!(refused(100, 10, 5, 0.0, f64::NAN));
        assert!(refused(100, 10, 5, -1e-9, 0.95));
        assert!(refused(100, 10, 5, 1.0, 0.95));
        assert!(guesses_at(&[1.0, 2.0], &[true], 1, 0).is_err());
        assert!(guesses_at(&[1.0, f64::NAN], &[true, false], 1, 0).is_err());
        assert!(guesses_at(&[1.0, 2.0], &[true, false], 2, 1).is_err());
        assert!(best_one_run_bound(&[1.0, 2.0], &[true, false], &[], 0.0, 0.95).is_err());
        assert!(one_shot_estimate(&[1.0], &[0.0], 1e-5).is_err());
        assert!(one_shot_estimate(&[1.0], &[0.0, 0.0], 1e-5).is_err());
        assert!(one_shot_estimate(&[1.0], &[0.0, 1.0], 0.0).is_err());
    }

    #[test]
    fn guesses_follow_the_ranking() {
        // Ranked high to low: 5 (0.9), 1 (0.8), 3 (0.8, a tie: higher index ranks lower),
        // 0 (0.5), 4 (0.2), 2 (0.1).
        let scores = [0.5, 0.8, 0.1, 0.8, 0.2, 0.9];
        let included = [true, true, false, false, true, true];
        // Top 2 (5, 1) both included; bottom 2 (4, 2): 2 excluded, 4 not.
        let g = guesses_at(&scores, &included, 2, 2).unwrap();
        assert_eq!(
            g,
            Guesses {
                guesses: 4,
                correct: 3
            }
        );
        // Top 3 takes index 1 before 3 of the same score: 5, 1 right, 3 wrong.
        let g = guesses_at(&scores, &included, 3, 0).unwrap();
        assert_eq!(g.correct, 2);
        // Bottom 3: 2 right, 4 wrong, 0 wrong.
        let g = guesses_at(&scores, &included, 0, 3).unwrap();
        assert_eq!(g.correct, 1);
        assert_eq!(guesses_at(&scores, &included, 0, 0).unwrap().guesses, 0);
        assert_eq!(guesses_at(&scores, &included, 6, 0).unwrap().correct, 4);
    }

    /// Canaries whose score is their inclusion plus noise, from a fixed LCG.
    fn separated(m: usize, gap: f64) -> (Vec<f64>, Vec<bool>) {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let included: Vec<bool> = (0..m).map(|_| next() < 0.5).collect();
        let scores = included
            .iter()
            .map(|&inc| if inc { gap } else { 0.0 } + next())
            .collect();
        (scores, included)
    }

    #[test]
    fn the_corrected_sweep_never_beats_its_best_point_uncorrected() {
        for gap in [0.0, 0.5, 0.9, 2.0] {
            let (scores, included) = separated(1000, gap);
            let grid = default_grid(scores.len());
            assert_eq!(grid.len(), GRID_FRACTIONS.len());
            let swept = best_one_run_bound(&scores, &included, &grid, 1e-5, 0.95).unwrap();
            let best_single = grid
                .iter()
                .map(|&(kp, km)| {
                    one_run_bound(&scores, &included, kp, km, 1e-5, 0.95)
                        .unwrap()
                        .epsilon
                })
                .fold(0.0, f64::max);
            assert!(swept.epsilon <= best_single + 1e-12, "gap {gap}");
            assert_eq!(swept.confidence, 0.95);
            assert_eq!(swept.canaries, 1000);
            assert_eq!(swept.guesses, swept.k_plus + swept.k_minus);
            // The reported point's bound is the corrected one.
            let at = epsilon_lower_bound(
                1000,
                swept.guesses,
                swept.correct,
                1e-5,
                1.0 - 0.05 / grid.len() as f64,
            )
            .unwrap();
            assert!((at - swept.epsilon).abs() < 1e-12);
            if gap >= 2.0 {
                // Perfectly separated: every guess right.
                assert_eq!(swept.correct, swept.guesses);
                assert!(swept.epsilon > 4.0, "{}", swept.epsilon);
            }
        }
    }

    #[test]
    fn default_grid_is_small_and_fits() {
        assert!(default_grid(0).is_empty());
        assert_eq!(default_grid(1), vec![(1, 0)]);
        for m in [2usize, 7, 50, 1000, 100_000] {
            let grid = default_grid(m);
            assert!(!grid.is_empty() && grid.len() <= GRID_FRACTIONS.len());
            for &(kp, km) in &grid {
                assert!(kp + km <= m && kp >= km && kp - km <= 1);
            }
        }
        assert_eq!(default_grid(1000)[6], (500, 500));
    }

    #[test]
    fn normal_cdf_matches_scipy_far_in_the_tail() {
        for case in fixture()["normal"].as_array().unwrap() {
            let x = num(case, "x");
            let (cdf, log_cdf) = (num(case, "cdf"), num(case, "log_cdf"));
            assert!(close_rel(normal_cdf(x), cdf, 1e-13), "Φ({x})");
            assert!(close_rel(ln_normal_cdf(x), log_cdf, 1e-13), "ln Φ({x})");
        }
    }

    #[test]
    fn gaussian_dp_matches_the_reference() {
        let f = fixture();
        for case in f["gdp_epsilon"].as_array().unwrap() {
            let (mu, delta) = (num(case, "mu"), num(case, "delta"));
            let want = num(case, "epsilon");
            let got = gaussian_dp_epsilon(mu, delta);
            assert!(
                (got - want).abs() < 1e-6,
                "μ={mu} δ={delta}: {got} vs {want}"
            );
        }
        for case in f["gdp_delta"].as_array().unwrap() {
            let (mu, eps) = (num(case, "mu"), num(case, "epsilon"));
            let want = num(case, "delta");
            let got = gaussian_dp_delta(mu, eps);
            assert!(
                close_rel(got, want, 1e-9),
                "μ={mu} ε={eps}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn one_shot_estimate_recovers_mu() {
        // Held back: mean 0, sample sd exactly 1; inserted: mean 2 → μ = 2, whose ε at
        // δ = 1e-5 is in the fixture (9.99725614643…).
        // (Σx² = 4 over n - 1 = 4.)
        let held_back = [-1.0, 1.0, -1.0, 1.0, 0.0];
        let inserted = [1.5, 2.5, 2.0];
        let est = one_shot_estimate(&inserted, &held_back, 1e-5).unwrap();
        assert!((est.mu - 2.0).abs() < 1e-15);
        let want = fixture()["gdp_epsilon"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| num(c, "mu") == 2.0)
            .map(|c| num(c, "epsilon"))
            .unwrap();
        assert!((est.epsilon - want).abs() < 1e-6);
        assert_eq!(est.delta, 1e-5);
        // Inserted below the held-back mean: nothing to report.
        let low = one_shot_estimate(&[-1.0], &held_back, 1e-5).unwrap();
        assert_eq!(low.epsilon, 0.0);
        assert!(low.mu < 0.0);
    }

    #[test]
    fn large_mu_does_not_overflow() {
        let e = gaussian_dp_epsilon(30.0, 1e-5);
        assert!(e.is_finite() && e > 500.0, "{e}");
        // Past where e^ε overflows.
        let e = gaussian_dp_epsilon(60.0, 1e-5);
        assert!(e.is_finite() && e > 1800.0, "{e}");
        let d = gaussian_dp_delta(60.0, e);
        assert!((d - 1e-5).abs() < 1e-9, "{d}");
        let est = one_shot_estimate(&[30.0], &[-1.0, 1.0, -1.0, 1.0, 0.0], 1e-5).unwrap();
        assert!((est.mu - 30.0).abs() < 1e-12);
        assert!(est.epsilon.is_finite());
        // The one-run bound at a large ε and r stays finite too.
        assert!(p_value(100_000, 100_000, 100_000, 40.0, 1e-6) <= 1.0);
        let e = epsilon_lower_bound(100_000, 100_000, 100_000, 1e-6, 0.95).unwrap();
        assert!(e.is_finite() && e > 10.0, "{e}");
    }

    #[test]
    fn bounds_serialise() {
        let b = OneRunBound {
            canaries: 10,
            guesses: 4,
            correct: 4,
            k_plus: 2,
            k_minus: 2,
            epsilon: 0.5,
            confidence: 0.95,
            delta: 0.0,
        };
        let json = serde_json::to_string(&b).unwrap();
        let back: OneRunBound = serde_json::from_str(&json).unwrap();
        assert_eq!(back, b);
        let est = OneShotEstimate {
            mu: 1.0,
            epsilon: 4.0,
            delta: 1e-5,
        };
        let back: OneShotEstimate =
            serde_json::from_str(&serde_json::to_string(&est).unwrap()).unwrap();
        assert_eq!(back, est);
    }
}
