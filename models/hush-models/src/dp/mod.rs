//! Differential-privacy primitives shared by DP-SGD on the host and local training and
//! aggregation in federated rounds. Each privacy invariant of DESIGN.md lives in exactly
//! one function here:
//!
//! | invariant | where |
//! |---|---|
//! | clip, per layer or flat; sensitivity `sqrt(Σ C_l²)` | [`ClipBounds::clip`], [`ClipBounds::sensitivity`] |
//! | noise `z × sensitivity` on the **sum**, divided by the **expected** count | [`GaussianMechanism::privatize`] with [`ExpectedCount`] |
//! | Poisson sampling from a CSPRNG; federated cohorts keyed per (round, device) | [`PoissonSampler`], [`KeyedPoissonSampler::includes`] |
//! | noise from a CSPRNG, drawn only here (the raw draws are `pub(crate)`); discrete-Gaussian mode | [`NoiseSource`], [`GaussianNoise`], [`LaplaceNoise`], [`NoiseKind::DiscreteGaussian`] |
//! | a DP-SGD step in one order: sample → bound each example → noise the sum → step | [`DpSgd::step`] |
//! | a receiver re-checks norms | [`ClipBounds::check`] |
//! | test-only faults that break the above on purpose, for the privacy audit | [`fault`] (feature `privacy-faults`) |
//! | adaptive clipping: the noisy unclipped count's share of the noise, `z_Δ` | [`AdaptiveClip::update`], [`gradient_noise_multiplier`] |
//! | per-example gradients (no example mixing: batch norm on stored statistics) | [`per_example_grads`] (loop), [`vectorized`] (fast path), [`clipped_grad_sum`] |
//!
//! Gradients and updates are lists of [`NamedTensor`](crate::checkpoint::NamedTensor)s
//! (the trainable tensors, named as in `weights.safetensors`); a "layer" is one tensor.

pub mod activations;
pub mod adaptive;
pub mod clip;
pub mod fault;
pub mod noise;
pub mod per_example;
pub mod sampling;
pub mod sgd;
pub mod vectorized;

pub use adaptive::{gradient_noise_multiplier, AdaptiveClip};
pub use clip::{l2_norm, layer_norms, ClipBounds, ClipStrategy};
pub use noise::{
    ExpectedCount, GaussianMechanism, GaussianNoise, LaplaceNoise, NoiseKind, NoiseSource,
};
pub use per_example::{
    apply_sgd, clipped_grad_sum, clipped_grad_sum_with, clipped_sum_by_loop, per_example_grads,
    per_example_grads_vectorized, per_example_grads_with, per_example_model, trainable_layout,
    Bounding, ClippedSum, PerExampleConfig, PerExampleMethod,
};
pub use sampling::{KeyedPoissonSampler, PoissonSampler};
pub use sgd::{DpSgd, StepStats};

/// Why a DP operation was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DpError {
    /// A parameter is out of range.
    #[error("{name} = {value}: {expected}")]
    BadParameter {
        /// Parameter name as the user knows it (`clip`, `sampling rate`, …).
        name: String,
        /// The value given.
        value: String,
        /// What is allowed.
        expected: String,
    },
    /// Tensors do not match the layout the bounds were made for.
    #[error("layout mismatch: {reason}")]
    Layout {
        /// What differs.
        reason: String,
    },
    /// An update's norm exceeds its bound.
    #[error("layer `{layer}` has norm {norm} over its bound {bound}")]
    OverBound {
        /// Layer name (`*` for the flat bound).
        layer: String,
        /// Its norm.
        norm: f32,
        /// The bound.
        bound: f32,
    },
}

pub(crate) fn bad(name: &str, value: impl std::fmt::Display, expected: &str) -> DpError {
    DpError::BadParameter {
        name: name.into(),
        value: value.to_string(),
        expected: expected.into(),
    }
}
