//! The DP-SGD step: the one place that orders a private training step, for every central
//! DP trainer in hush (keyword spotters, the ASR model, BEST-RQ pretraining).
//!
//! [`DpSgd::step`]: Poisson-sample the examples of this step ([`PoissonSampler`]), bound
//! each sampled example's gradient and sum them (the model's own per-example function —
//! [`crate::dp::clipped_grad_sum_with`], [`crate::asr::ctc_clipped_sum`],
//! [`crate::asr::bestrq::bestrq_clipped_sum`]), add the noise and divide by the expected
//! count ([`GaussianMechanism::privatize`]), and only then hand the private mean to the
//! optimizer. The trainer supplies the two model-specific parts as closures; it never sees
//! the sample's gradients before they are noised, and it cannot skip or reorder a part.

use super::{ClippedSum, DpError, GaussianMechanism, NoiseSource, PoissonSampler};
use crate::checkpoint::NamedTensor;

/// What one step did (for the loss curve and adaptive clipping).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// Examples sampled into the step.
    pub examples: usize,
    /// Of them, examples whose gradient was over its bound and was scaled down.
    pub clipped: usize,
    /// Sum of the sampled examples' losses.
    pub loss_sum: f32,
}

/// The randomness of a DP-SGD run over `population` private examples: the Poisson sampler
/// and the noise source (both from the OS in a real release).
#[derive(Debug, Clone)]
pub struct DpSgd {
    sampler: PoissonSampler,
    noise: NoiseSource,
    population: usize,
}

impl DpSgd {
    /// Steps over `population` examples, sampled by `sampler`, noised from `noise`.
    pub fn new(sampler: PoissonSampler, noise: NoiseSource, population: usize) -> Self {
        Self {
            sampler,
            noise,
            population,
        }
    }

    /// The noise source, for the other mechanisms of the same run that draw from it
    /// (adaptive clipping's noisy count, [`crate::dp::AdaptiveClip::update`]).
    pub fn noise_mut(&mut self) -> &mut NoiseSource {
        &mut self.noise
    }

    /// One step on `model`: sample, `clipped_sum` over the sampled indices (each
    /// example's gradient bounded, then summed), privatize with `mechanism`, then
    /// `apply` the private mean gradient (one tensor per bounded layer, in the bounds'
    /// order) and return the stepped model.
    pub fn step<M, E: From<DpError>>(
        &mut self,
        model: M,
        mechanism: &GaussianMechanism,
        clipped_sum: impl FnOnce(&M, &[usize]) -> Result<ClippedSum, E>,
        apply: impl FnOnce(M, &[NamedTensor]) -> Result<M, E>,
    ) -> Result<(M, StepStats), E> {
        let sampled = self.sampler.sample(self.population);
        let mut sum = clipped_sum(&model, &sampled)?;
        mechanism.privatize(&mut sum.sum, &mut self.noise)?;
        let stats = StepStats {
            examples: sum.examples,
            clipped: sum.clipped,
            loss_sum: sum.loss_sum,
        };
        let model = apply(model, &sum.sum)?;
        Ok((model, stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dp::{ExpectedCount, NoiseKind};

    /// A "model" that is one number; each example's gradient is its index, clipped to 1.
    #[test]
    fn a_step_samples_bounds_noises_then_applies_the_mean() {
        let population = 1000;
        let q = 0.1;
        let mech = GaussianMechanism::new(
            0.5,
            1.0,
            ExpectedCount::poisson(q, population).unwrap(),
            NoiseKind::Gaussian,
        )
        .unwrap();
        let mut dp = DpSgd::new(
            PoissonSampler::from_seed(q, 1).unwrap(),
            NoiseSource::from_seed(2),
            population,
        );
        let mut seen = Vec::new();
        let (model, stats) = dp
            .step(
                0.0f32,
                &mech,
                |_, idx: &[usize]| -> Result<ClippedSum, DpError> {
                    seen = idx.to_vec();
                    let sum = NamedTensor::new("w", vec![1], vec![idx.len() as f32]).unwrap();
                    Ok(ClippedSum {
                        sum: vec![sum],
                        loss_sum: 0.0,
                        examples: idx.len(),
                        clipped: idx.len(),
                    })
                },
                |m, mean| Ok(m - mean[0].data[0]),
            )
            .unwrap();
        // Poisson: a sample near q·n, every index distinct and in range.
        assert!((60..140).contains(&seen.len()), "{}", seen.len());
        assert!(seen.windows(2).all(|w| w[0] < w[1]) && seen.iter().all(|&i| i < population));
        assert_eq!((stats.examples, stats.clipped), (seen.len(), seen.len()));
        // The model moved by (count + noise) / (q·n): near −count/100, but noised.
        let exact = -(seen.len() as f32) / 100.0;
        assert!(
            model != exact && (model - exact).abs() < 0.05,
            "{model} {exact}"
        );
    }

    #[test]
    fn a_failing_per_example_pass_stops_before_any_noise_or_step() {
        let mech = GaussianMechanism::new(
            1.0,
            1.0,
            ExpectedCount::poisson(0.5, 4).unwrap(),
            NoiseKind::Gaussian,
        )
        .unwrap();
        let mut dp = DpSgd::new(
            PoissonSampler::from_seed(0.5, 1).unwrap(),
            NoiseSource::from_seed(2),
            4,
        );
        let mut applied = false;
        let r = dp.step(
            0.0f32,
            &mech,
            |_, _| {
                Err(DpError::Layout {
                    reason: "boom".into(),
                })
            },
            |m, _| {
                applied = true;
                Ok(m)
            },
        );
        assert!(r.is_err() && !applied);
    }
}
