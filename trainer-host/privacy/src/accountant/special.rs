//! Special functions the accountants need, in `f64`: the normal CDF and its log, its inverse,
//! `lgamma`, and log-space addition.
//!
//! These mirror the SciPy routines dp_accounting 0.6.0 calls (`scipy.special.gammaln`,
//! `log_ndtr`, `ndtr`, `ndtri`, `erfcinv`, `scipy.stats.norm`). `erfc` and `lgamma` come from
//! the `libm` crate (a port of musl's, accurate to about one ulp); the log-CDF uses the same
//! asymptotic series as Cephes' `log_ndtr` far in the lower tail, so it never underflows.

use std::f64::consts::{FRAC_1_SQRT_2, LN_2, PI};

/// `ln Γ(x)` for `x > 0` (SciPy `gammaln`).
pub fn ln_gamma(x: f64) -> f64 {
    libm::lgamma(x)
}

/// Standard normal CDF `Φ(x)` (SciPy `ndtr`).
pub fn ndtr(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    0.5 * libm::erfc(-x * FRAC_1_SQRT_2)
}

/// `ln Φ(x)`, accurate in both tails (SciPy `log_ndtr`).
pub fn log_ndtr(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    if x > 6.0 {
        // ln(1 - Φ(-x)) with Φ(-x) tiny.
        return (-ndtr(-x)).ln_1p();
    }
    if x > -20.0 {
        return ndtr(x).ln();
    }
    // Asymptotic expansion of the Mills ratio (as in Cephes `log_ndtr`):
    // ln Φ(x) = -x²/2 - ln(-x) - ln(2π)/2 + ln(1 - 1/x² + 3/x⁴ - 15/x⁶ + …).
    let log_lhs = -0.5 * x * x - (-x).ln() - 0.5 * (2.0 * PI).ln();
    let x2 = x * x;
    let mut rhs: f64 = 1.0;
    let mut last_total: f64 = 0.0;
    let mut numerator = 1.0;
    let mut denom_factor = 1.0;
    let mut denom_cons = 1.0 / x2;
    let mut sign = 1.0;
    let mut i = 0;
    while (last_total - rhs).abs() > f64::EPSILON && i < 100 {
        i += 1;
        last_total = rhs;
        sign = -sign;
        denom_factor *= denom_cons;
        numerator *= (2 * i - 1) as f64;
        rhs += sign * numerator * denom_factor;
        denom_cons = 1.0 / x2;
    }
    log_lhs + rhs.ln()
}

/// `ln(1 - Φ(x)) = ln Φ(-x)` (SciPy `norm.logsf`).
pub fn log_sf(x: f64) -> f64 {
    log_ndtr(-x)
}

/// Inverse of the standard normal CDF (SciPy `ndtri`), for `p` in `[0, 1]`.
///
/// Acklam's rational approximation refined by Newton steps on `ln Φ`, which keeps full relative
/// precision far in the tails (the PLD truncates at `p ≈ 1e-22`).
pub fn ndtri(p: f64) -> f64 {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    if p > 0.5 {
        return -ndtri_lower(1.0 - p, (-p).ln_1p());
    }
    ndtri_lower(p, p.ln())
}

/// `ndtri` for `p <= 0.5` given `ln p`.
fn ndtri_lower(p: f64, log_p: f64) -> f64 {
    let mut x = acklam(p);
    for _ in 0..8 {
        let lf = log_ndtr(x);
        // d/dx ln Φ(x) = φ(x) / Φ(x) = exp(ln φ(x) - ln Φ(x)).
        let log_pdf = -0.5 * x * x - 0.5 * (2.0 * PI).ln();
        let slope = (log_pdf - lf).exp();
        let step = (lf - log_p) / slope;
        x -= step;
        if step.abs() <= 1e-15 * x.abs().max(1.0) {
            break;
        }
    }
    x
}

/// Acklam's approximation of the normal quantile (relative error about 1e-9).
fn acklam(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p_low = 0.024_25;
    if p < p_low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Inverse complementary error function (SciPy `erfcinv`), for `y` in `[0, 2]`.
pub fn erfcinv(y: f64) -> f64 {
    -ndtri(0.5 * y) * FRAC_1_SQRT_2
}

/// `erfc(x)` (SciPy `erfc`).
pub fn erfc(x: f64) -> f64 {
    libm::erfc(x)
}

/// `ln(e^a + e^b)`, exact for infinite arguments (NumPy `logaddexp`).
pub fn log_add_exp(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    hi + (lo - hi).exp().ln_1p()
}

/// `ln(1 - e^x)` for `x <= 0` (PATE `_log1mexp`); `None` for `x > 0`.
pub fn log1mexp(x: f64) -> Option<f64> {
    if x < -1.0 {
        Some((-x.exp()).ln_1p())
    } else if x < 0.0 {
        Some((-x.exp_m1()).ln())
    } else if x == 0.0 {
        Some(f64::NEG_INFINITY)
    } else {
        None
    }
}

/// `ln 2`, re-exported for the series that need it.
pub const LOG_2: f64 = LN_2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndtr_and_log_ndtr_agree_with_known_values() {
        assert!((ndtr(0.0) - 0.5).abs() < 1e-16);
        assert!((ndtr(1.96) - 0.975_002_104_851_780).abs() < 1e-14);
        // scipy.special.log_ndtr(-30) = -454.32124395634327 (SciPy 1.17.1)
        let v = log_ndtr(-30.0);
        assert!((v - (-454.321_243_956_343_27)).abs() < 1e-9, "{v}");
        // Continuity across the switch at -20.
        let a = log_ndtr(-20.0 + 1e-9);
        let b = log_ndtr(-20.0 - 1e-9);
        assert!((a - b).abs() < 1e-6);
    }

    #[test]
    fn ndtri_inverts_ndtr_in_the_tails() {
        for &p in &[
            1e-300,
            9.6e-23,
            1e-10,
            0.01,
            0.3,
            0.5,
            0.7,
            0.99,
            1.0 - 1e-12,
        ] {
            let x = ndtri(p);
            let back = ndtr(x);
            assert!(((back - p) / p).abs() < 1e-12, "p={p} x={x} back={back}");
        }
    }
}
