//! Privacy-loss distributions (PLD) of the (Poisson-subsampled) Gaussian mechanism, composed by
//! FFT.
//!
//! A port of the parts of dp_accounting 0.6.0 `pld/` that the Gaussian path uses:
//! - `privacy_loss_mechanism.py` `GaussianPrivacyLoss` (ADD, REMOVE and REPLACE adjacency types,
//!   with subsampling): [`GaussianPrivacyLoss`];
//! - `privacy_loss_distribution.py` `_create_pld_pmf_from_monotone_privacy_loss` with
//!   `use_connect_dots=True` and `pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap`
//!   (Doroshenko et al. 2022, "Connect the Dots", Algorithm 1): the pessimistic estimate;
//! - `pld_pmf.py` `DensePLDPmf` (`compose`, `self_compose`, `_truncate_tails`,
//!   `_get_epsilon_for_delta`, `_get_delta_for_epsilon`) and `common.py` `self_convolve` /
//!   `compute_self_convolve_bounds` (Chernoff bound on the output range of a T-fold
//!   self-convolution): [`PldPmf`];
//! - `PrivacyLossDistribution` (pair of PMFs for REMOVE and ADD, ε = max of both): [`Pld`].
//!
//! Tail truncation is conservative: the Gaussian's tails beyond `exp(-50)` mass go to `+∞` loss
//! (pessimistic), and every truncation of a composed PMF moves the left tail onto the smallest
//! kept loss and the right tail to `+∞`, so δ(ε) is never under-estimated. The T-fold
//! self-composition keeps only the Chernoff window (mass outside it at most
//! `tail_mass_truncation`, which is added to the `+∞` mass).
//!
//! FFTs use `realfft` (real-to-complex) on top of `rustfft`, on 7-smooth lengths (SciPy picks
//! 11-smooth ones).
//!
//! **One deliberate deviation.** FFT round-off leaves values of about ±1e-17 in every bin, so
//! the far tails of a composed PMF hold noise summing to about ±1e-13. dp_accounting keeps the
//! negative values; at δ = 1e-9 that noise alone moves ε by up to ~5e-4 in either direction.
//! Here negative masses are clamped to zero after every FFT, which can only raise δ(ε): the
//! result stays on the pessimistic side of dp_accounting's (measured: +3e-4 at most on the
//! goldens, and within 1e-7 of it at δ = 1e-5).

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::RealFftPlanner;

use super::special::{log_add_exp, log_ndtr, ndtr, ndtri};
use super::AccountantError;

/// Default truncation of tails during composition (dp_accounting's `tail_mass_truncation`).
pub const TAIL_MASS_TRUNCATION: f64 = 1e-15;
/// Default discretisation of privacy-loss values (dp_accounting's default).
pub const DEFAULT_VALUE_DISCRETIZATION_INTERVAL: f64 = 1e-4;
/// `ln` of the noise mass discarded at each tail of the Gaussian (dp_accounting's default).
const LOG_MASS_TRUNCATION_BOUND: f64 = -50.0;
/// Tolerance on non-monotone δ(ε) values in connect-the-dots (dp_accounting's).
const DELTA_DIFF_TOLERANCE: f64 = 1e-12;

/// Which pair of distributions a PLD compares (dp_accounting's `AdjacencyType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairType {
    /// `mu_upper = M(D)`, `mu_lower = M(D + x)`.
    Add,
    /// `mu_upper = M(D + x)`, `mu_lower = M(D)`.
    Remove,
    /// One record replaced by another.
    Replace,
}

/// `python math.isclose` with its default relative tolerance.
fn isclose(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// `common.log_a_times_exp_b_plus_c`: `ln(a·e^b + c)`.
fn log_a_times_exp_b_plus_c(a: f64, b: f64, c: f64) -> f64 {
    let log_sub = |x: f64, y: f64| x + (-(y - x).exp()).ln_1p();
    if a == 0.0 {
        return c.ln();
    }
    if a < 0.0 {
        return log_sub(c.ln(), (-a).ln() + b);
    }
    if b == 0.0 {
        return (a + c).ln();
    }
    let d = b + a.ln();
    if c == 0.0 {
        d
    } else if c < 0.0 {
        log_sub(d, (-c).ln())
    } else {
        log_add_exp(d, c.ln())
    }
}

/// `common.log_sinh`.
fn log_sinh(a: f64) -> f64 {
    if a == 0.0 {
        return 0.0;
    }
    a + (-(-2.0 * a).exp()).ln_1p() - 2f64.ln()
}

/// `common.asinh_exp`: `asinh(b·e^a)`.
fn asinh_exp(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return 0.0;
    }
    let (sign, abs_b) = if b >= 0.0 { (1.0, b) } else { (-1.0, -b) };
    let l = abs_b.ln() + a;
    sign * log_add_exp(0.5 * log_add_exp(0.0, 2.0 * l), l)
}

/// Privacy loss of the Gaussian mechanism with sensitivity 1 and Poisson subsampling `q`
/// (dp_accounting's `GaussianPrivacyLoss`, pessimistic, `log_mass_truncation_bound = -50`).
#[derive(Debug, Clone, Copy)]
pub struct GaussianPrivacyLoss {
    sigma: f64,
    q: f64,
    pair: PairType,
}

impl GaussianPrivacyLoss {
    const SENSITIVITY: f64 = 1.0;

    /// `sigma > 0`, `q` in `(0, 1]` (validated by the caller).
    pub fn new(sigma: f64, q: f64, pair: PairType) -> Self {
        Self { sigma, q, pair }
    }

    fn noise_cdf(&self, x: f64) -> f64 {
        ndtr(x / self.sigma)
    }

    fn noise_log_cdf(&self, x: f64) -> f64 {
        log_ndtr(x / self.sigma)
    }

    fn mu_upper_cdf(&self, x: f64) -> f64 {
        match self.pair {
            PairType::Add => self.noise_cdf(x),
            PairType::Remove | PairType::Replace => {
                if self.q == 1.0 {
                    self.noise_cdf(x + Self::SENSITIVITY)
                } else {
                    (1.0 - self.q) * self.noise_cdf(x)
                        + self.q * self.noise_cdf(x + Self::SENSITIVITY)
                }
            }
        }
    }

    fn mu_lower_log_cdf(&self, x: f64) -> f64 {
        match self.pair {
            PairType::Add | PairType::Replace => {
                if self.q == 1.0 {
                    self.noise_log_cdf(x - Self::SENSITIVITY)
                } else {
                    log_add_exp(
                        (-self.q).ln_1p() + self.noise_log_cdf(x),
                        self.q.ln() + self.noise_log_cdf(x - Self::SENSITIVITY),
                    )
                }
            }
            PairType::Remove => self.noise_log_cdf(x),
        }
    }

    fn loss_without_subsampling_remove(&self, x: f64) -> f64 {
        Self::SENSITIVITY * (-0.5 * Self::SENSITIVITY - x) / (self.sigma * self.sigma)
    }

    fn inverse_loss_without_subsampling_remove(&self, loss: f64) -> f64 {
        -0.5 * Self::SENSITIVITY - loss * (self.sigma * self.sigma) / Self::SENSITIVITY
    }

    fn loss_remove(&self, x: f64) -> f64 {
        let l = self.loss_without_subsampling_remove(x);
        if self.q == 1.0 {
            l
        } else {
            log_a_times_exp_b_plus_c(self.q, l, 1.0 - self.q)
        }
    }

    /// Privacy loss `ln(mu_upper(x) / mu_lower(x))`, non-increasing in `x`.
    pub fn privacy_loss(&self, x: f64) -> f64 {
        match self.pair {
            PairType::Add => -self.loss_remove(-x),
            PairType::Remove => self.loss_remove(x),
            PairType::Replace => self.loss_remove(x) - self.loss_remove(-x),
        }
    }

    /// Largest `x` whose privacy loss is at least `loss`.
    fn inverse_privacy_loss(&self, loss: f64) -> f64 {
        let q = self.q;
        match self.pair {
            PairType::Add => {
                if q == 1.0 {
                    return Self::SENSITIVITY + self.inverse_loss_without_subsampling_remove(loss);
                }
                if isclose(loss, -(1.0 - q).ln()) {
                    return Self::SENSITIVITY
                        + self.inverse_loss_without_subsampling_remove(f64::INFINITY);
                }
                let l = -log_a_times_exp_b_plus_c(1.0 / q, -loss, 1.0 - 1.0 / q);
                Self::SENSITIVITY + self.inverse_loss_without_subsampling_remove(l)
            }
            PairType::Remove => {
                if q == 1.0 {
                    return self.inverse_loss_without_subsampling_remove(loss);
                }
                if isclose(loss, (1.0 - q).ln()) {
                    return self.inverse_loss_without_subsampling_remove(f64::NEG_INFINITY);
                }
                let l = log_a_times_exp_b_plus_c(1.0 / q, loss, 1.0 - 1.0 / q);
                self.inverse_loss_without_subsampling_remove(l)
            }
            PairType::Replace => {
                if loss == 0.0 {
                    return 0.0;
                }
                let s2 = self.sigma * self.sigma;
                if q == 1.0 {
                    return -loss * s2 / Self::SENSITIVITY / 2.0;
                }
                let sign = if loss >= 0.0 { 1.0 } else { -1.0 };
                let log_alpha =
                    0.5 * (Self::SENSITIVITY / self.sigma).powi(2) + (-q).ln_1p() - q.ln();
                let log_sinh_term = log_alpha + log_sinh(loss.abs() / 2.0);
                let asinh_term = asinh_exp(log_sinh_term, -sign);
                s2 / Self::SENSITIVITY * (asinh_term - loss / 2.0)
            }
        }
    }

    /// Hockey-stick divergence δ(ε) of the (continuous) mechanism (`get_delta_for_epsilon`).
    pub fn delta_for_epsilon(&self, eps: f64) -> f64 {
        let use_inverse = match self.pair {
            _ if self.q == 1.0 => true,
            PairType::Replace => true,
            PairType::Add => eps < -(-self.q).ln_1p(),
            PairType::Remove => eps > (-self.q).ln_1p(),
        };
        let delta = if use_inverse {
            let x = self.inverse_privacy_loss(eps);
            self.mu_upper_cdf(x) - (eps + self.mu_lower_log_cdf(x)).exp()
        } else if self.pair == PairType::Remove {
            -eps.exp_m1()
        } else {
            0.0
        };
        delta.clamp(0.0, 1.0)
    }

    /// `(lower_x, upper_x)` truncation points of the noise (`privacy_loss_tail`).
    fn truncation(&self) -> (f64, f64) {
        let mut lower = self.sigma * ndtri(0.5 * LOG_MASS_TRUNCATION_BOUND.exp());
        let mut upper = -lower;
        match self.pair {
            PairType::Add => upper += Self::SENSITIVITY,
            PairType::Remove | PairType::Replace => lower -= Self::SENSITIVITY,
        }
        (lower, upper)
    }

    /// Pessimistic connect-the-dots PMF on the grid `k · vdi`
    /// (`_create_pld_pmf_from_monotone_privacy_loss` with `use_connect_dots=True`).
    pub fn connect_the_dots_pmf(&self, vdi: f64) -> Result<PldPmf, AccountantError> {
        let (lower_x, upper_x) = self.truncation();
        let eps_upper = self.privacy_loss(lower_x);
        let eps_lower = self.privacy_loss(upper_x);
        let k_upper = (eps_upper / vdi).ceil();
        let k_lower = (eps_lower / vdi).floor();
        let n = k_upper - k_lower + 1.0;
        if !n.is_finite() || n < 1.0 {
            return Err(AccountantError::Numerical {
                what: format!(
                    "PLD grid for sigma={} q={} has {n} points (vdi={vdi})",
                    self.sigma, self.q
                ),
            });
        }
        check_grid(n as usize)?;
        let k_lower = k_lower as i64;
        let n = n as usize;
        let deltas: Vec<f64> = (0..n)
            .map(|i| self.delta_for_epsilon((k_lower + i as i64) as f64 * vdi))
            .collect();
        pessimistic_connect_dots_fixed_gap(vdi, k_lower, deltas)
    }
}

/// `pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap`.
fn pessimistic_connect_dots_fixed_gap(
    vdi: f64,
    k_lower: i64,
    mut deltas: Vec<f64>,
) -> Result<PldPmf, AccountantError> {
    if deltas.len() == 1 {
        return Ok(PldPmf {
            discretization: vdi,
            lower_loss: k_lower,
            probs: vec![1.0 - deltas[0]],
            infinity_mass: deltas[0],
        });
    }
    for w in deltas.windows(2) {
        if w[1] - w[0] > DELTA_DIFF_TOLERANCE {
            return Err(AccountantError::Numerical {
                what: format!(
                    "connect-the-dots: deltas not non-increasing ({} < {})",
                    w[0], w[1]
                ),
            });
        }
    }
    // np.minimum.accumulate
    for i in 1..deltas.len() {
        if deltas[i] > deltas[i - 1] {
            deltas[i] = deltas[i - 1];
        }
    }
    let n = deltas.len();
    let em1 = vdi.exp_m1();
    let e = vdi.exp();
    let diff = |i: usize| deltas[i + 1] - deltas[i];
    let mut probs = vec![0.0; n];
    probs[0] = 1.0 - deltas[0] + diff(0) / em1;
    for (i, p) in probs.iter_mut().enumerate().take(n - 1).skip(1) {
        *p = (diff(i) - diff(i - 1) * e) / em1;
    }
    probs[n - 1] = diff(n - 2) / (-vdi).exp_m1();
    for p in probs.iter_mut() {
        *p = p.max(0.0);
    }
    Ok(PldPmf {
        discretization: vdi,
        lower_loss: k_lower,
        probs,
        infinity_mass: deltas[n - 1],
    })
}

/// A dense PMF of a discretised privacy-loss distribution: mass `probs[i]` at loss
/// `(lower_loss + i) · discretization`, plus `infinity_mass` at `+∞` (dp_accounting's
/// `DensePLDPmf`, pessimistic).
#[derive(Debug, Clone, PartialEq)]
pub struct PldPmf {
    /// Grid step of the losses.
    pub discretization: f64,
    /// Index of the first loss on the grid.
    pub lower_loss: i64,
    /// Probability masses.
    pub probs: Vec<f64>,
    /// Mass at infinite loss.
    pub infinity_mass: f64,
}

/// Smallest `n' >= n` whose only prime factors are 2, 3, 5 and 7 (fast for `rustfft`).
pub fn next_fast_len(n: usize) -> usize {
    let mut m = n.max(1);
    loop {
        let mut k = m;
        for p in [2, 3, 5, 7] {
            while k.is_multiple_of(p) {
                k /= p;
            }
        }
        if k == 1 {
            return m;
        }
        m += 1;
    }
}

/// `scipy.special.logsumexp(a, b=b)`.
fn logsumexp_weighted(a: impl Iterator<Item = f64> + Clone, b: &[f64]) -> f64 {
    let m = a.clone().fold(f64::NEG_INFINITY, f64::max);
    let s: f64 = a.zip(b).map(|(ai, bi)| bi * (ai - m).exp()).sum();
    m + s.ln()
}

/// `common.compute_self_convolve_bounds`: Chernoff window `(lower, upper)` in index units.
fn self_convolve_bounds(probs: &[f64], num_times: u64, tail: f64) -> (i64, i64) {
    let len = probs.len();
    let mut upper = (len as i64 - 1) * num_times as i64;
    let mut lower = 0i64;
    if tail == 0.0 {
        return (lower, upper);
    }
    let orders = (-20..0).chain(1..21).map(|o| o as f64 / len as f64);
    for order in orders {
        let log_mgf = logsumexp_weighted((0..len).map(|i| i as f64 * order), probs);
        let bound = (num_times as f64 * log_mgf + (2.0 / tail).ln()) / order;
        if !bound.is_finite() {
            continue;
        }
        if order > 0.0 {
            upper = upper.min(bound.ceil() as i64);
        } else {
            lower = lower.max(bound.floor() as i64);
        }
    }
    (lower, upper)
}

/// Element-wise complex power by squaring.
fn cpow(mut z: Complex<f64>, mut n: u64) -> Complex<f64> {
    let mut acc = Complex::new(1.0, 0.0);
    while n > 0 {
        if n & 1 == 1 {
            acc *= z;
        }
        z *= z;
        n >>= 1;
    }
    acc
}

/// Circular FFT self-convolution of `input` (`num_times` copies) on length `fft_len`.
/// Most grid points a composed PLD may hold (2^25 floats, 256 MiB per buffer); beyond
/// it the loss is too spread to discretise and the accountant refuses instead of
/// exhausting memory.
const MAX_PLD_POINTS: usize = 1 << 25;

fn check_grid(points: usize) -> Result<(), AccountantError> {
    if points > MAX_PLD_POINTS {
        return Err(AccountantError::Numerical {
            what: format!(
                "the composed privacy-loss distribution needs {points} grid points, more than \
                 the limit of {MAX_PLD_POINTS}: the noise multiplier is too small for the PLD \
                 accountant at this discretisation (use the RDP accountant)"
            ),
        });
    }
    Ok(())
}

fn fft_power(input: &[f64], num_times: u64, fft_len: usize) -> Result<Vec<f64>, AccountantError> {
    check_grid(fft_len)?;
    let mut planner = RealFftPlanner::<f64>::new();
    let fwd: Arc<dyn realfft::RealToComplex<f64>> = planner.plan_fft_forward(fft_len);
    let inv = planner.plan_fft_inverse(fft_len);
    let mut buf = vec![0.0; fft_len];
    buf[..input.len()].copy_from_slice(input);
    let mut spec = fwd.make_output_vec();
    fwd.process(&mut buf, &mut spec).map_err(fft_err)?;
    for z in spec.iter_mut() {
        *z = cpow(*z, num_times);
    }
    // The inverse of a real signal's spectrum needs exactly real DC / Nyquist bins.
    if let Some(z) = spec.first_mut() {
        z.im = 0.0;
    }
    if fft_len.is_multiple_of(2) {
        if let Some(z) = spec.last_mut() {
            z.im = 0.0;
        }
    }
    let mut out = inv.make_output_vec();
    inv.process(&mut spec, &mut out).map_err(fft_err)?;
    let scale = 1.0 / fft_len as f64;
    for v in out.iter_mut() {
        *v *= scale;
    }
    Ok(out)
}

fn fft_err(e: realfft::FftError) -> AccountantError {
    AccountantError::Numerical {
        what: format!("FFT failed: {e}"),
    }
}

/// Linear convolution of two real sequences by FFT (`scipy.signal.fftconvolve`).
fn fft_convolve(a: &[f64], b: &[f64]) -> Result<Vec<f64>, AccountantError> {
    let out_len = a.len() + b.len() - 1;
    check_grid(out_len)?;
    if a.len() == 1 {
        return Ok(b.iter().map(|v| v * a[0]).collect());
    }
    if b.len() == 1 {
        return Ok(a.iter().map(|v| v * b[0]).collect());
    }
    let n = next_fast_len(out_len);
    let mut planner = RealFftPlanner::<f64>::new();
    let fwd = planner.plan_fft_forward(n);
    let inv = planner.plan_fft_inverse(n);
    let mut xa = vec![0.0; n];
    xa[..a.len()].copy_from_slice(a);
    let mut xb = vec![0.0; n];
    xb[..b.len()].copy_from_slice(b);
    let mut sa = fwd.make_output_vec();
    let mut sb = fwd.make_output_vec();
    fwd.process(&mut xa, &mut sa).map_err(fft_err)?;
    fwd.process(&mut xb, &mut sb).map_err(fft_err)?;
    for (x, y) in sa.iter_mut().zip(&sb) {
        *x *= y;
    }
    if let Some(z) = sa.first_mut() {
        z.im = 0.0;
    }
    if n.is_multiple_of(2) {
        if let Some(z) = sa.last_mut() {
            z.im = 0.0;
        }
    }
    let mut out = inv.make_output_vec();
    inv.process(&mut sa, &mut out).map_err(fft_err)?;
    let scale = 1.0 / n as f64;
    out.truncate(out_len);
    for v in out.iter_mut() {
        *v *= scale;
    }
    Ok(out)
}

/// `pld_pmf._truncate_tails` (pessimistic): `(offset, kept probs, mass moved to +∞)`.
fn truncate_tails(mut probs: Vec<f64>, tail: f64) -> (usize, Vec<f64>, f64) {
    if tail == 0.0 {
        return (0, probs, 0.0);
    }
    let prefix = |it: &mut dyn Iterator<Item = f64>| -> usize {
        let mut s = 0.0;
        let mut count = 0;
        for v in it {
            s += v;
            if s > tail / 2.0 {
                return count;
            }
            count += 1;
        }
        count
    };
    let n = probs.len();
    let left = prefix(&mut probs.iter().copied());
    let right = n - prefix(&mut probs.iter().rev().copied());
    let right = right.max(left + 1).min(n);
    let left_mass: f64 = probs[..left].iter().sum();
    let right_mass: f64 = probs[right..].iter().sum();
    probs.truncate(right);
    let mut kept = probs.split_off(left.min(probs.len()));
    if let Some(first) = kept.first_mut() {
        *first += left_mass;
    }
    (left, kept, right_mass)
}

impl PldPmf {
    /// The identity PMF (no privacy loss).
    pub fn identity(discretization: f64) -> Self {
        Self {
            discretization,
            lower_loss: 0,
            probs: vec![1.0],
            infinity_mass: 0.0,
        }
    }

    /// `num_times`-fold composition with itself (`DensePLDPmf.self_compose`).
    pub fn self_compose(&self, num_times: u64, tail: f64) -> Result<Self, AccountantError> {
        let (lo, hi) = self_convolve_bounds(&self.probs, num_times, tail);
        let output_len = (hi - lo + 1).max(1) as usize;
        let fft_len = next_fast_len(output_len.max(self.probs.len()));
        let circ = fft_power(&self.probs, num_times, fft_len)?;
        let shift = lo.rem_euclid(fft_len as i64) as usize;
        let probs: Vec<f64> = (0..output_len)
            .map(|i| circ[(i + shift) % fft_len].max(0.0))
            .collect();
        let inf = tail - (num_times as f64 * (-self.infinity_mass).ln_1p()).exp_m1();
        Ok(Self {
            discretization: self.discretization,
            lower_loss: self.lower_loss * num_times as i64 + lo,
            probs,
            infinity_mass: inf,
        })
    }

    /// Composition with another PMF on the same grid (`DensePLDPmf.compose`).
    pub fn compose(&self, other: &Self, tail: f64) -> Result<Self, AccountantError> {
        if self.discretization != other.discretization {
            return Err(AccountantError::Numerical {
                what: format!(
                    "cannot compose PLDs with discretisations {} and {}",
                    self.discretization, other.discretization
                ),
            });
        }
        let mut probs = fft_convolve(&self.probs, &other.probs)?;
        for p in probs.iter_mut() {
            *p = p.max(0.0);
        }
        let inf =
            self.infinity_mass + other.infinity_mass - self.infinity_mass * other.infinity_mass;
        let (offset, probs, right) = truncate_tails(probs, tail);
        Ok(Self {
            discretization: self.discretization,
            lower_loss: self.lower_loss + other.lower_loss + offset as i64,
            probs,
            infinity_mass: inf + right,
        })
    }

    /// Smallest ε whose hockey-stick divergence is at most `delta` (`_get_epsilon_for_delta`).
    pub fn epsilon_for_delta(&self, delta: f64) -> f64 {
        if self.infinity_mass > delta {
            return f64::INFINITY;
        }
        let mut mass_upper = self.infinity_mass;
        let mut mass_lower = 0.0;
        let mut loss = (self.lower_loss + self.probs.len() as i64 - 1) as f64 * self.discretization;
        for &prob in self.probs.iter().rev() {
            if mass_upper > delta
                && mass_lower > 0.0
                && ((mass_upper - delta) / mass_lower).ln() >= loss
            {
                break;
            }
            mass_upper += prob;
            mass_lower += (-loss).exp() * prob;
            if mass_upper >= delta && mass_lower == 0.0 {
                return loss.max(0.0);
            }
            loss -= self.discretization;
        }
        if mass_upper <= mass_lower + delta {
            return 0.0;
        }
        ((mass_upper - delta) / mass_lower).ln()
    }

    /// Hockey-stick divergence δ(ε) (`_get_delta_for_epsilon`).
    pub fn delta_for_epsilon(&self, eps: f64) -> f64 {
        let mut d = self.infinity_mass;
        for (i, &p) in self.probs.iter().enumerate() {
            let loss = (self.lower_loss + i as i64) as f64 * self.discretization;
            if loss > eps {
                d += -(eps - loss).exp_m1() * p;
            }
        }
        d
    }
}

/// A privacy-loss distribution: the REMOVE-pair PMF and, when different, the ADD-pair PMF
/// (dp_accounting's `PrivacyLossDistribution`).
#[derive(Debug, Clone, PartialEq)]
pub struct Pld {
    /// PMF for the REMOVE pair (or REPLACE, or the symmetric case).
    pub remove: PldPmf,
    /// PMF for the ADD pair when it differs from REMOVE.
    pub add: Option<PldPmf>,
}

impl Pld {
    /// The identity PLD.
    pub fn identity(vdi: f64) -> Self {
        Self {
            remove: PldPmf::identity(vdi),
            add: None,
        }
    }

    /// PLD of one step of the Gaussian with noise multiplier `sigma` and Poisson rate `q`
    /// (`from_gaussian_mechanism`, connect-the-dots, pessimistic). `replace_one` picks the
    /// REPLACE pair; otherwise add/remove (two PMFs when `q < 1`).
    pub fn gaussian(
        sigma: f64,
        q: f64,
        vdi: f64,
        replace_one: bool,
    ) -> Result<Self, AccountantError> {
        if sigma < MIN_PLD_SIGMA {
            return Err(AccountantError::Numerical {
                what: format!(
                    "noise multiplier {sigma} is below {MIN_PLD_SIGMA}: its privacy-loss distribution \
                     spreads over too many grid points to compose in reasonable time (use the RDP \
                     accountant)"
                ),
            });
        }
        if replace_one {
            let pmf =
                GaussianPrivacyLoss::new(sigma, q, PairType::Replace).connect_the_dots_pmf(vdi)?;
            return Ok(Self {
                remove: pmf,
                add: None,
            });
        }
        let remove =
            GaussianPrivacyLoss::new(sigma, q, PairType::Remove).connect_the_dots_pmf(vdi)?;
        if q == 1.0 {
            return Ok(Self { remove, add: None });
        }
        let add = GaussianPrivacyLoss::new(sigma, q, PairType::Add).connect_the_dots_pmf(vdi)?;
        Ok(Self {
            remove,
            add: Some(add),
        })
    }

    /// `num_times`-fold self-composition.
    pub fn self_compose(&self, num_times: u64) -> Result<Self, AccountantError> {
        Ok(Self {
            remove: self.remove.self_compose(num_times, TAIL_MASS_TRUNCATION)?,
            add: match &self.add {
                Some(a) => Some(a.self_compose(num_times, TAIL_MASS_TRUNCATION)?),
                None => None,
            },
        })
    }

    /// Composition with another PLD.
    pub fn compose(&self, other: &Self) -> Result<Self, AccountantError> {
        let remove = self.remove.compose(&other.remove, TAIL_MASS_TRUNCATION)?;
        let add = match (&self.add, &other.add) {
            (None, None) => None,
            (a, b) => {
                let a = a.as_ref().unwrap_or(&self.remove);
                let b = b.as_ref().unwrap_or(&other.remove);
                Some(a.compose(b, TAIL_MASS_TRUNCATION)?)
            }
        };
        Ok(Self { remove, add })
    }

    /// ε for `delta`: the max over the REMOVE and ADD PMFs.
    pub fn epsilon_for_delta(&self, delta: f64) -> f64 {
        let e = self.remove.epsilon_for_delta(delta);
        match &self.add {
            Some(a) => e.max(a.epsilon_for_delta(delta)),
            None => e,
        }
    }

    /// δ for `eps`: the max over the REMOVE and ADD PMFs.
    pub fn delta_for_epsilon(&self, eps: f64) -> f64 {
        let d = self.remove.delta_for_epsilon(eps);
        match &self.add {
            Some(a) => d.max(a.delta_for_epsilon(eps)),
            None => d,
        }
    }
}

/// Smallest noise multiplier the PLD accountant takes. Below it the discretised loss needs
/// tens of millions of points and minutes per composition (σ = 0.016 took 100 s); such
/// runs (noise-cohort simulations) are accounted by RDP only.
pub const MIN_PLD_SIGMA: f64 = 0.1;

/// ε of `steps` compositions of the Poisson-subsampled Gaussian, as dp_accounting's
/// `PLDAccountant` computes it for `SelfComposedDpEvent(PoissonSampledDpEvent(q,
/// GaussianDpEvent(sigma)), steps)`: build, self-compose, compose onto the identity (which
/// applies one more tail truncation), read ε.
pub fn poisson_gaussian_pld(
    q: f64,
    sigma: f64,
    steps: u64,
    vdi: f64,
    replace_one: bool,
) -> Result<Pld, AccountantError> {
    let single = Pld::gaussian(sigma, q, vdi, replace_one)?;
    let composed = single.self_compose(steps)?;
    Pld::identity(vdi).compose(&composed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_below_the_pld_floor_is_refused_at_once() {
        let event = crate::accountant::SubsampledGaussian::poisson(0.25, 0.016, 1).unwrap();
        let e = event.epsilon(
            crate::accountant::Accountant::Pld,
            crate::accountant::Adjacency::AddRemove,
            1e-5,
        );
        assert!(matches!(e, Err(AccountantError::Numerical { .. })), "{e:?}");
    }

    #[test]
    fn a_loss_too_spread_to_discretise_is_refused_not_allocated() {
        // The guard runs before any buffer of that size is allocated.
        let e = check_grid(MAX_PLD_POINTS + 1).unwrap_err();
        assert!(e.to_string().contains("grid points"), "{e}");
        assert!(check_grid(MAX_PLD_POINTS).is_ok());
    }

    #[test]
    fn next_fast_len_is_7_smooth() {
        assert_eq!(next_fast_len(1), 1);
        assert_eq!(next_fast_len(11), 12);
        assert_eq!(next_fast_len(97), 98);
        assert_eq!(next_fast_len(1025), 1029);
    }

    #[test]
    fn fft_convolve_matches_direct() -> Result<(), AccountantError> {
        let a = [0.1, 0.2, 0.3, 0.4];
        let b = [0.5, 0.25, 0.25];
        let c = fft_convolve(&a, &b)?;
        let mut d = vec![0.0; a.len() + b.len() - 1];
        for (i, x) in a.iter().enumerate() {
            for (j, y) in b.iter().enumerate() {
                d[i + j] += x * y;
            }
        }
        for (x, y) in c.iter().zip(&d) {
            assert!((x - y).abs() < 1e-15);
        }
        Ok(())
    }

    #[test]
    fn connect_dots_mass_sums_to_one() -> Result<(), AccountantError> {
        let pmf =
            GaussianPrivacyLoss::new(1.0, 0.1, PairType::Remove).connect_the_dots_pmf(1e-3)?;
        let total: f64 = pmf.probs.iter().sum::<f64>() + pmf.infinity_mass;
        assert!((total - 1.0).abs() < 1e-9, "{total}");
        Ok(())
    }
}
