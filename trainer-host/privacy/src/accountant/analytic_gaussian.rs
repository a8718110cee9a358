//! The exact (ε, δ) curve of a single Gaussian mechanism (Balle & Wang 2018, "Improving the
//! Gaussian mechanism", Thm 8), solved for ε by bisection.
//!
//! With `μ = sensitivity / σ`, the mechanism is (ε, δ)-DP exactly when
//! `δ ≥ Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2)`. A composition of `T` Gaussians with noise
//! multiplier `σ` (no subsampling) is one Gaussian with `μ = √T / σ`, so this gives the exact
//! value the PLD accountant must upper-bound at `q = 1`. The bisection mirrors the script in
//! `accountant-goldens.md` §5a (`analytic_gaussian_eps`); `e^ε Φ(·)` is evaluated as
//! `exp(ε + ln Φ(·))` so that it never overflows.

use super::special::{log_ndtr, ndtr};

/// δ(ε) of the Gaussian mechanism with `mu = sensitivity / sigma`.
pub fn delta_for_epsilon(mu: f64, eps: f64) -> f64 {
    ndtr(-eps / mu + mu / 2.0) - (eps + log_ndtr(-eps / mu - mu / 2.0)).exp()
}

/// Smallest ε (to bisection precision, returned from above) with `δ(ε) <= delta`, searched on
/// `[0, 100]` with 200 halvings (as the golden script does). `mu > 0`, `delta` in `(0, 1)`.
pub fn epsilon_for_delta(mu: f64, delta: f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 100.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if delta_for_epsilon(mu, mid) > delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// ε of `steps` un-subsampled Gaussian steps with noise multiplier `sigma` (sensitivity 1).
pub fn composed_gaussian_epsilon(sigma: f64, steps: u64, delta: f64) -> f64 {
    epsilon_for_delta((steps as f64).sqrt() / sigma, delta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_case_c() {
        // accountant-goldens.md §1: mu = 2, delta = 1e-5 -> 9.997256146434303.
        let e = epsilon_for_delta(2.0, 1e-5);
        assert!((e - 9.997_256_146_434_303).abs() < 1e-9, "{e}");
    }
}
