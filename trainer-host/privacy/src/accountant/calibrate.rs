//! Noise calibration: the smallest noise multiplier σ whose ε after `steps` Poisson-subsampled
//! Gaussian steps is at most a target ε at a given δ, with either accountant.
//!
//! The role of dp_accounting 0.6.0 `mechanism_calibration.calibrate_dp_mechanism` (which brackets
//! from `LowerEndpointAndGuess` and runs Brent's method to `tol`): here a bracket is grown
//! geometrically from a guess and then bisected until it is narrower than `tol`; the upper end
//! (a σ that meets the target) is returned, so the answer is never on the unsafe side.
//! ε is monotone non-increasing in σ for both accountants, which makes bisection valid.

use super::{Accountant, AccountantError, Adjacency, SubsampledGaussian};

/// Absolute tolerance on σ used by [`calibrate_noise_multiplier`] callers by default.
pub const DEFAULT_TOLERANCE: f64 = 1e-5;

/// Smallest σ (within `tol`, from above) such that `steps` steps at Poisson rate `q` reach at
/// most `target_epsilon` at `delta`.
pub fn calibrate_noise_multiplier(
    accountant: Accountant,
    adjacency: Adjacency,
    target_epsilon: f64,
    delta: f64,
    q: f64,
    steps: u64,
    tol: f64,
) -> Result<f64, AccountantError> {
    super::validate::positive_finite("target_epsilon", target_epsilon)?;
    super::validate::delta(delta)?;
    super::validate::positive_finite("tol", tol)?;
    let eps_at = |sigma: f64| -> Result<f64, AccountantError> {
        let event = SubsampledGaussian::poisson(q, sigma, steps)?;
        Ok(event.epsilon(accountant, adjacency, delta)?.epsilon)
    };
    // Bracket: hi meets the target, lo does not.
    let mut hi = 1.0;
    let mut grow = 0;
    while eps_at(hi)? > target_epsilon {
        hi *= 2.0;
        grow += 1;
        if grow > 40 {
            return Err(AccountantError::NoSolution {
                what: format!(
                    "no noise multiplier up to {hi} reaches epsilon {target_epsilon} at delta {delta}"
                ),
            });
        }
    }
    let mut lo = hi / 2.0;
    let mut shrink = 0;
    while eps_at(lo)? <= target_epsilon {
        hi = lo;
        lo /= 2.0;
        shrink += 1;
        if shrink > 60 {
            return Ok(hi);
        }
    }
    while hi - lo > tol {
        let mid = 0.5 * (lo + hi);
        if eps_at(mid)? <= target_epsilon {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(hi)
}
