//! Rényi-DP of the subsampled Gaussian mechanism, and the RDP → (ε, δ) conversion.
//!
//! A port of dp_accounting 0.6.0 `rdp/rdp_privacy_accountant.py`:
//! - [`poisson_subsampled_gaussian`] is `_compute_rdp_poisson_subsampled_gaussian`
//!   (`_compute_log_a_int` for integer orders, `_compute_log_a_frac` for fractional ones, both
//!   summed in log space; Mironov, Talwar, Zhang 2019, arXiv:1908.10530 §3.3). Add/remove
//!   adjacency.
//! - [`sample_without_replacement_gaussian`] is `_compute_rdp_sample_wor_gaussian`, the
//!   Wang–Balle–Kasiviswanathan bound (AISTATS 2019, Thm 27) for a fixed-size batch `m` of `n`,
//!   replace-one adjacency.
//! - [`epsilon_from_rdp`] is `compute_epsilon`: the improved conversion
//!   `ε = rdp + ln(1 - 1/α) - ln(δ·α)/(α - 1)` (Balle et al. 2020 Thm 21; Canonne, Kamath,
//!   Steinke 2020 Prop 12), with dp_accounting's fallback to the KL bound
//!   `δ ≤ sqrt(1 - e^{-rdp})` (ε = 0 when `δ² + expm1(-rdp) > 0`).
//! - [`default_orders`] is `DEFAULT_RDP_ORDERS`.
//!
//! All functions take validated inputs (see [`super::validate`]); they never panic.

use super::special::{ln_gamma, log_ndtr, LOG_2};

/// dp_accounting's `DEFAULT_RDP_ORDERS`: `1 + x/10` for `x` in 1..100, then 11..=63, 128, 256,
/// 512, 1024 (156 orders).
pub fn default_orders() -> Vec<f64> {
    let mut orders: Vec<f64> = (1..100).map(|x| 1.0 + x as f64 / 10.0).collect();
    orders.extend((11..64).map(|a| a as f64));
    orders.extend([128.0, 256.0, 512.0, 1024.0]);
    orders
}

/// `ln(e^x + e^y)` as dp_accounting's `_log_add`.
fn log_add(logx: f64, logy: f64) -> f64 {
    let (a, b) = if logx < logy {
        (logx, logy)
    } else {
        (logy, logx)
    };
    if a == f64::NEG_INFINITY {
        return b;
    }
    (a - b).exp().ln_1p() + b
}

/// `(sign, ln|e^x - e^y|)` as dp_accounting's `_log_sub_sign`.
fn log_sub_sign(logx: f64, logy: f64) -> (bool, f64) {
    if logx > logy {
        (true, logx + (-(logy - logx).exp()).ln_1p())
    } else if logx < logy {
        (false, logy + (-(logx - logy).exp()).ln_1p())
    } else {
        (true, f64::NEG_INFINITY)
    }
}

/// `ln C(n, k)` through `lgamma`, as `_log_comb`.
fn log_comb(n: f64, k: f64) -> f64 {
    ln_gamma_cached(n + 1.0) - ln_gamma_cached(k + 1.0) - ln_gamma_cached(n - k + 1.0)
}

/// Size of the table of `ln Γ(k)` for integer `k` (covers the default orders).
const LN_GAMMA_TABLE: usize = 1100;

/// `ln Γ(x)`, read from a table of the very same `lgamma` values when `x` is a small positive
/// integer (the integer-order series calls it thousands of times).
fn ln_gamma_cached(x: f64) -> f64 {
    static TABLE: std::sync::OnceLock<Vec<f64>> = std::sync::OnceLock::new();
    if x >= 1.0 && x < LN_GAMMA_TABLE as f64 && x.fract() == 0.0 {
        let table = TABLE.get_or_init(|| (0..LN_GAMMA_TABLE).map(|k| ln_gamma(k as f64)).collect());
        table[x as usize]
    } else {
        ln_gamma(x)
    }
}

/// `ln erfc(x)` as `_log_erfc`: `ln 2 + log_ndtr(-x·√2)`.
fn log_erfc(x: f64) -> f64 {
    LOG_2 + log_ndtr(-x * std::f64::consts::SQRT_2)
}

/// `ln A_α` for integer `α` and `0 < q < 1` (`_compute_log_a_int`).
fn log_a_int(q: f64, sigma: f64, alpha: u64) -> f64 {
    let mut log_a = f64::NEG_INFINITY;
    let log1mq = (-q).ln_1p();
    let logq = q.ln();
    let a = alpha as f64;
    for i in 0..=alpha {
        let fi = i as f64;
        let log_coef_i = log_comb(a, fi) + fi * logq + (a - fi) * log1mq;
        let s = log_coef_i + (fi * fi - fi) / (2.0 * (sigma * sigma));
        log_a = log_add(log_a, s);
    }
    log_a
}

/// Iteration cap of the fractional series, as `_MAX_STEPS_LOG_A_FRAC`.
const MAX_STEPS_LOG_A_FRAC: usize = 1000;

/// `ln A_α` for fractional `α` and `0 < q < 1` (`_compute_log_a_frac`); `+∞` when the series
/// does not converge (dp_accounting then excludes the order, which `+∞` does for free).
fn log_a_frac(q: f64, sigma: f64, alpha: f64) -> f64 {
    let mut log_a0 = f64::NEG_INFINITY;
    let mut log_a1 = f64::NEG_INFINITY;
    let z0 = sigma * sigma * (1.0 / q - 1.0).ln() + 0.5;
    let log1mq = (-q).ln_1p();
    let logq = q.ln();
    let mut last_s0 = f64::NEG_INFINITY;
    let mut last_s1 = f64::NEG_INFINITY;
    let sqrt2_sigma = std::f64::consts::SQRT_2 * sigma;
    let lg_alpha1 = ln_gamma_cached(alpha + 1.0);
    for i in 0..MAX_STEPS_LOG_A_FRAC {
        let fi = i as f64;
        // log_comb(alpha, i), with ln Γ(alpha + 1) hoisted out of the loop.
        let log_coef = lg_alpha1 - ln_gamma_cached(fi + 1.0) - ln_gamma(alpha - fi + 1.0);
        let j = alpha - fi;
        let log_t0 = log_coef + fi * logq + j * log1mq;
        let log_t1 = log_coef + j * logq + fi * log1mq;
        let log_e0 = 0.5f64.ln() + log_erfc((fi - z0) / sqrt2_sigma);
        let log_e1 = 0.5f64.ln() + log_erfc((z0 - j) / sqrt2_sigma);
        let log_s0 = log_t0 + (fi * fi - fi) / (2.0 * (sigma * sigma)) + log_e0;
        let log_s1 = log_t1 + (j * j - j) / (2.0 * (sigma * sigma)) + log_e1;
        log_a0 = log_add(log_a0, log_s0);
        log_a1 = log_add(log_a1, log_s1);
        let total = log_add(log_a0, log_a1);
        if log_s0 < last_s0 && log_s1 < last_s1 && log_s0.max(log_s1) < total - 30.0 {
            return total;
        }
        last_s0 = log_s0;
        last_s1 = log_s1;
    }
    f64::INFINITY
}

/// RDP at order `alpha` of one step of the Poisson-subsampled Gaussian (add/remove).
///
/// `q` in `[0, 1]`, `sigma >= 0`, `alpha > 1`.
pub fn poisson_subsampled_gaussian_order(q: f64, sigma: f64, alpha: f64) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if alpha.is_infinite() || sigma == 0.0 {
        return f64::INFINITY;
    }
    if q == 1.0 {
        return alpha / (2.0 * sigma * sigma);
    }
    let log_a = if alpha.fract() == 0.0 {
        log_a_int(q, sigma, alpha as u64)
    } else {
        log_a_frac(q, sigma, alpha)
    };
    log_a / (alpha - 1.0)
}

/// RDP of one step of the Poisson-subsampled Gaussian at each order (add/remove adjacency).
pub fn poisson_subsampled_gaussian(q: f64, sigma: f64, orders: &[f64]) -> Vec<f64> {
    orders
        .iter()
        .map(|&a| poisson_subsampled_gaussian_order(q, sigma, a))
        .collect()
}

/// RDP of one step of the Gaussian on a fixed-size batch drawn without replacement
/// (`q = m / n`, replace-one adjacency), Wang–Balle–Kasiviswanathan Thm 27; fractional orders
/// interpolate the CGF (their Cor. 10).
pub fn sample_without_replacement_gaussian(q: f64, sigma: f64, orders: &[f64]) -> Vec<f64> {
    orders
        .iter()
        .map(|&a| sample_wor_gaussian_order(q, sigma, a))
        .collect()
}

/// One order of [`sample_without_replacement_gaussian`] (`_compute_rdp_sample_wor_gaussian_scalar`).
pub fn sample_wor_gaussian_order(q: f64, sigma: f64, alpha: f64) -> f64 {
    if q == 0.0 {
        return 0.0;
    }
    if q == 1.0 {
        return alpha / (2.0 * sigma * sigma);
    }
    if alpha.is_infinite() {
        return f64::INFINITY;
    }
    if alpha.fract() == 0.0 {
        sample_wor_gaussian_int(q, sigma, alpha as u64) / (alpha - 1.0)
    } else {
        let alpha_f = alpha.floor();
        let alpha_c = alpha.ceil();
        let x = sample_wor_gaussian_int(q, sigma, alpha_f as u64);
        let y = sample_wor_gaussian_int(q, sigma, alpha_c as u64);
        let t = alpha - alpha_f;
        ((1.0 - t) * x + t * y) / (alpha - 1.0)
    }
}

/// `_stable_inplace_diff_in_log`: replaces the first `n` entries by the log-abs (and sign) of
/// forward differences.
fn stable_inplace_diff_in_log(vec: &mut [f64], signs: &mut [bool], n: usize) {
    for j in 0..n {
        if signs[j] == signs[j + 1] {
            let (s, v) = log_sub_sign(vec[j + 1], vec[j]);
            signs[j] = s;
            vec[j] = v;
            if !signs[j + 1] {
                signs[j] = !signs[j];
            }
        } else {
            vec[j] = log_add(vec[j], vec[j + 1]);
            signs[j] = signs[j + 1];
        }
    }
}

/// `_get_forward_diffs`: log-abs of the forward differences of `exp(fun)` at 0, up to order `n`.
fn forward_diffs(fun: impl Fn(f64) -> f64, n: usize) -> Vec<f64> {
    let mut func_vec = vec![0.0; n + 3];
    let mut signs = vec![true; n + 3];
    let mut deltas = vec![0.0; n + 2];
    for (i, v) in func_vec.iter_mut().enumerate().skip(1) {
        *v = fun((i - 1) as f64);
    }
    for (i, d) in deltas.iter_mut().enumerate() {
        stable_inplace_diff_in_log(&mut func_vec, &mut signs, n + 2 - i);
        *d = func_vec[0];
    }
    deltas
}

/// `_compute_rdp_sample_wor_gaussian_int`: `ln A_α` of the WBK bound for integer `α`.
fn sample_wor_gaussian_int(q: f64, sigma: f64, alpha: u64) -> f64 {
    const MAX_ALPHA: u64 = 256;
    if alpha == 1 {
        return 0.0;
    }
    let cgf = |x: f64| x * (x + 1.0) / (2.0 * sigma * sigma);
    let func = |x: f64| x / (2.0 * sigma * sigma);
    let a = alpha as f64;
    let logq = q.ln();
    let mut log_a = 0.0;
    let log_f2m1 = func(2.0) + (-(-func(2.0)).exp()).ln_1p();
    let term2 = 2.0 * logq + log_comb(a, 2.0) + (4f64.ln() + log_f2m1).min(func(2.0) + 2f64.ln());
    if alpha <= MAX_ALPHA {
        let deltas = forward_diffs(cgf, alpha as usize);
        for i in 2..=alpha {
            let s = if i == 2 {
                term2
            } else {
                let fi = i as f64;
                let lo = (2.0 * (fi / 2.0).floor()) as usize - 1;
                let hi = (2.0 * (fi / 2.0).ceil()) as usize - 1;
                let s = 4f64.ln() + 0.5 * (deltas[lo] + deltas[hi]);
                let s = s.min(2f64.ln() + cgf(fi - 1.0));
                s + fi * logq + log_comb(a, fi)
            };
            log_a = log_add(log_a, s);
        }
    } else {
        for i in 2..=alpha {
            let fi = i as f64;
            let s = if i == 2 {
                term2
            } else {
                2f64.ln() + cgf(fi - 1.0) + fi * logq + log_comb(a, fi)
            };
            log_a = log_add(log_a, s);
        }
    }
    log_a
}

/// Improved RDP → (ε, δ) conversion exactly as dp_accounting's `compute_epsilon`.
///
/// Returns `(ε, optimal order)`. `delta` in `(0, 1)`; orders `>= 1`; `rdp` the same length.
pub fn epsilon_from_rdp(orders: &[f64], rdp: &[f64], delta: f64) -> (f64, f64) {
    let mut best = (f64::INFINITY, orders.first().copied().unwrap_or(f64::NAN));
    let mut first = true;
    for (&a, &r) in orders.iter().zip(rdp) {
        let eps = if r < 0.0 || delta * delta + (-r).exp_m1() > 0.0 {
            0.0
        } else if a > 1.01 {
            r + (-1.0 / a).ln_1p() - (delta * a).ln() / (a - 1.0)
        } else {
            f64::INFINITY
        };
        // np.argmin: the first minimum wins; NaN would win too, but inputs are validated.
        if first || eps < best.0 {
            best = (eps, a);
            first = false;
        }
    }
    (best.0.max(0.0), best.1)
}

/// Classic conversion (Mironov 2017, Prop 3): `min_α rdp(α) + ln(1/δ)/(α - 1)`; `(ε, order)`.
pub fn epsilon_from_rdp_classic(orders: &[f64], rdp: &[f64], delta: f64) -> (f64, f64) {
    let mut best = (f64::INFINITY, f64::NAN);
    for (&a, &r) in orders.iter().zip(rdp) {
        if a <= 1.0 {
            continue;
        }
        let eps = r - delta.ln() / (a - 1.0);
        if eps < best.0 {
            best = (eps, a);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_orders_have_156_entries() {
        let o = default_orders();
        assert_eq!(o.len(), 156);
        assert_eq!(o[0], 1.1);
        assert_eq!(o[98], 10.9);
        assert_eq!(o[99], 11.0);
        assert_eq!(*o.last().unwrap_or(&0.0), 1024.0);
    }

    #[test]
    fn full_batch_is_plain_gaussian() {
        assert_eq!(poisson_subsampled_gaussian_order(1.0, 5.0, 2.0), 0.04);
        assert_eq!(poisson_subsampled_gaussian_order(0.0, 5.0, 2.0), 0.0);
    }
}
