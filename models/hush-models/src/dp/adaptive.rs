//! Adaptive clipping: the clip bound `C` follows a target quantile `γ` of the per-example
//! gradient norms, privately (Andrew, Thakkar, McMahan, Ramaswamy 2021, "Differentially
//! Private Learning with Adaptive Clipping", NeurIPS; TF Privacy's
//! `QuantileAdaptiveClipSumQuery`).
//!
//! Each step, every sampled example reports whether its gradient was within the current
//! bound (`b_i = 1`, unclipped) or not. The count is released with its own Gaussian noise
//! `σ_b`: the indicators are shifted to `b_i − ½`, so adding or removing one example moves
//! the sum by at most ½, and the noisy fraction is
//!
//! ```text
//! b̃ = (Σ (b_i − ½) + N(0, σ_b²)) / m + ½          (m: the expected batch, public)
//! C ← C · exp(−η · (b̃ − γ))                        (geometric update)
//! ```
//!
//! When more than a fraction `γ` of the examples are unclipped, `C` shrinks; when fewer,
//! it grows.
//!
//! **Privacy.** The count is a second Gaussian query on the same sample, with noise
//! multiplier `2σ_b` (std over sensitivity ½). Together with the gradient sum at noise
//! multiplier `z_Δ` it is one Gaussian query with multiplier `z = (z_Δ⁻² + (2σ_b)⁻²)^(-1/2)`
//! (the paper, section 3.1). So a run accounted at `z` (what the accountant calibrates and
//! the ledger records) noises the gradient sum with the slightly larger
//! [`gradient_noise_multiplier`] `z_Δ = (z⁻² − (2σ_b)⁻²)^(-1/2)`, which exists only when
//! `2σ_b > z`. The paper suggests `σ_b = m/20`; [`AdaptiveClip::default_count_noise`].
//!
//! With per-layer clipping, every layer's bound scales with `C` (the split of
//! [`super::ClipStrategy`] is kept) and an example counts as unclipped when every layer
//! is within its bound.

use super::noise::{ExpectedCount, NoiseSource};
use super::{bad, DpError};

/// The geometric learning rate `η_C` the paper uses (0.2).
pub const DEFAULT_LEARNING_RATE: f64 = 0.2;

/// The gradient sum's noise multiplier `z_Δ = (z⁻² − (2σ_b)⁻²)^(-1/2)` when the unclipped
/// count, noised with std `count_noise_std` (`σ_b`), shares an overall noise multiplier `z`.
/// Refused unless `2σ_b > z` (the count would use up the whole budget).
pub fn gradient_noise_multiplier(z: f64, count_noise_std: f64) -> Result<f64, DpError> {
    if !(z.is_finite() && z > 0.0) {
        return Err(bad("noise multiplier", z, "finite and > 0"));
    }
    if !(count_noise_std.is_finite() && count_noise_std > 0.0) {
        return Err(bad("count noise σ_b", count_noise_std, "finite and > 0"));
    }
    let count_z = 2.0 * count_noise_std;
    if count_z <= z {
        return Err(bad(
            "count noise σ_b",
            count_noise_std,
            &format!(
                "more than half the noise multiplier z = {z} (2σ_b ≤ z leaves no budget \
                 for the gradient)"
            ),
        ));
    }
    Ok((z.powi(-2) - count_z.powi(-2)).powf(-0.5))
}

/// The noise multiplier of the gradient sum and the count together:
/// `(z_Δ⁻² + (2σ_b)⁻²)^(-1/2)` (the inverse of [`gradient_noise_multiplier`]).
pub fn combined_noise_multiplier(gradient_z: f64, count_noise_std: f64) -> f64 {
    (gradient_z.powi(-2) + (2.0 * count_noise_std).powi(-2)).powf(-0.5)
}

/// The state of adaptive clipping: the current bound and how it moves.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveClip {
    clip: f64,
    target_quantile: f64,
    learning_rate: f64,
    count_noise_std: f64,
}

impl AdaptiveClip {
    /// Starts at `initial_clip` and moves toward the `target_quantile` (`γ`, in `(0, 1)`)
    /// of the per-example norms with geometric rate `learning_rate` (`η`, > 0); the
    /// unclipped count gets Gaussian noise of std `count_noise_std` (`σ_b`, > 0).
    pub fn new(
        initial_clip: f64,
        target_quantile: f64,
        learning_rate: f64,
        count_noise_std: f64,
    ) -> Result<Self, DpError> {
        if !(initial_clip.is_finite() && initial_clip > 0.0) {
            return Err(bad("clip", initial_clip, "a finite bound > 0"));
        }
        if !(target_quantile > 0.0 && target_quantile < 1.0) {
            return Err(bad("adaptive clip quantile", target_quantile, "in (0, 1)"));
        }
        if !(learning_rate.is_finite() && learning_rate > 0.0) {
            return Err(bad(
                "adaptive clip learning rate",
                learning_rate,
                "finite and > 0",
            ));
        }
        if !(count_noise_std.is_finite() && count_noise_std > 0.0) {
            return Err(bad("count noise σ_b", count_noise_std, "finite and > 0"));
        }
        Ok(Self {
            clip: initial_clip,
            target_quantile,
            learning_rate,
            count_noise_std,
        })
    }

    /// The paper's `σ_b = m/20` for an expected batch of `m`.
    pub fn default_count_noise(expected: ExpectedCount) -> f64 {
        expected.get() / 20.0
    }

    /// The current bound `C`.
    pub fn clip(&self) -> f64 {
        self.clip
    }

    /// `σ_b`.
    pub fn count_noise_std(&self) -> f64 {
        self.count_noise_std
    }

    /// `γ`.
    pub fn target_quantile(&self) -> f64 {
        self.target_quantile
    }

    /// `η`.
    pub fn learning_rate(&self) -> f64 {
        self.learning_rate
    }

    /// One step: `unclipped` of the sampled examples had norms within the current bound.
    /// Releases the noisy unclipped fraction `b̃` (returned) and moves `C` geometrically
    /// toward the target quantile.
    pub fn update(
        &mut self,
        unclipped: usize,
        sampled: usize,
        expected: ExpectedCount,
        noise: &mut NoiseSource,
    ) -> f64 {
        let centred = unclipped as f64 - 0.5 * sampled as f64;
        let noisy = centred + self.count_noise_std * noise.standard_normal();
        let fraction = noisy / expected.get() + 0.5;
        self.clip *= (-self.learning_rate * (fraction - self.target_quantile)).exp();
        fraction
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effective_noise_multiplier_splits_the_budget() {
        // z = 1, σ_b = 10: z_Δ = (1 − 1/400)^(-1/2).
        let zd = gradient_noise_multiplier(1.0, 10.0).unwrap();
        assert!(
            (zd - (1.0f64 - 1.0 / 400.0).powf(-0.5)).abs() < 1e-12,
            "{zd}"
        );
        assert!(zd > 1.0);
        // Combining back gives z.
        for (z, sb) in [(0.5, 3.0), (1.1, 3.2), (4.0, 50.0), (0.8, 0.41)] {
            let zd = gradient_noise_multiplier(z, sb).unwrap();
            assert!((combined_noise_multiplier(zd, sb) - z).abs() < 1e-9 * z);
        }
        // The count cannot take the whole budget.
        assert!(gradient_noise_multiplier(1.0, 0.5).is_err());
        assert!(gradient_noise_multiplier(1.0, 0.3).is_err());
        assert!(gradient_noise_multiplier(0.0, 3.0).is_err());
        assert!(gradient_noise_multiplier(1.0, f64::NAN).is_err());
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(AdaptiveClip::new(1.0, 0.5, 0.2, 1.0).is_ok());
        assert!(AdaptiveClip::new(0.0, 0.5, 0.2, 1.0).is_err());
        assert!(AdaptiveClip::new(-1.0, 0.5, 0.2, 1.0).is_err());
        assert!(AdaptiveClip::new(1.0, 0.0, 0.2, 1.0).is_err());
        assert!(AdaptiveClip::new(1.0, 1.0, 0.2, 1.0).is_err());
        assert!(AdaptiveClip::new(1.0, f64::NAN, 0.2, 1.0).is_err());
        assert!(AdaptiveClip::new(1.0, 0.5, 0.0, 1.0).is_err());
        assert!(AdaptiveClip::new(1.0, 0.5, 0.2, 0.0).is_err());
        let e = AdaptiveClip::new(1.0, 1.5, 0.2, 1.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("adaptive clip quantile"), "{e}");
    }

    /// Runs adaptive clipping on per-example norms drawn from `draw` (Poisson sampling at
    /// rate `q` from `n`) and returns the bound after `steps` steps.
    fn converge(
        quantile: f64,
        start: f64,
        steps: usize,
        draw: impl Fn(&mut NoiseSource) -> f64,
    ) -> f64 {
        let (q, n) = (0.1, 2_000);
        let expected = ExpectedCount::poisson(q, n).unwrap();
        let sb = AdaptiveClip::default_count_noise(expected);
        let mut ac = AdaptiveClip::new(start, quantile, DEFAULT_LEARNING_RATE, sb).unwrap();
        let mut src = NoiseSource::from_seed(5);
        for _ in 0..steps {
            let sampled = (0..n).filter(|_| src.uniform() < q).count();
            let unclipped = (0..sampled).filter(|_| draw(&mut src) <= ac.clip()).count();
            ac.update(unclipped, sampled, expected, &mut src);
        }
        ac.clip()
    }

    #[test]
    fn the_bound_converges_to_the_target_quantile() {
        // Norms uniform on [0, 10]: the γ-quantile is 10γ.
        for (gamma, start) in [(0.5, 0.1), (0.5, 100.0), (0.9, 1.0), (0.2, 30.0)] {
            let c = converge(gamma, start, 400, |s| 10.0 * s.uniform());
            let want = 10.0 * gamma;
            eprintln!("uniform γ = {gamma}, C0 = {start}: C = {c:.3} (quantile {want})");
            assert!((c - want).abs() < 0.1 * want, "γ {gamma}: {c} vs {want}");
        }
        // Norms exponential with mean 2: the median is 2 ln 2 (a heavy right tail).
        let c = converge(0.5, 20.0, 400, |s| -2.0 * (1.0 - s.uniform()).ln());
        let want = 2.0 * std::f64::consts::LN_2;
        eprintln!("exponential median: C = {c:.3} (quantile {want:.3})");
        assert!((c - want).abs() < 0.1 * want, "{c} vs {want}");
    }

    #[test]
    fn count_noise_is_centred_with_std_sigma_b_over_m() {
        // b̃ = (Σ(b − ½) + N(0, σ_b²))/m + ½: over many updates with all examples
        // unclipped and exactly m sampled, b̃ has mean 1 and std σ_b/m.
        let expected = ExpectedCount::poisson(0.5, 200).unwrap();
        let sb = 7.0;
        let mut ac = AdaptiveClip::new(1.0, 0.5, 1e-9, sb).unwrap();
        let mut src = NoiseSource::from_seed(9);
        let draws: Vec<f64> = (0..20_000)
            .map(|_| ac.update(100, 100, expected, &mut src))
            .collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (draws.len() - 1) as f64;
        let want = sb / 100.0;
        assert!((mean - 1.0).abs() < 4.0 * want / (draws.len() as f64).sqrt());
        assert!(
            (var.sqrt() - want).abs() < 0.03 * want,
            "{} vs {want}",
            var.sqrt()
        );
    }
}
