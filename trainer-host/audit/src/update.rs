//! The update a device shares for one clip, and the attacker's simulation of it.
//!
//! A device picked for a round shares either
//!
//! - [`UpdateRule::Gradient`]: the single-example gradient `∇_W L(x)`, or
//! - [`UpdateRule::LocalSteps`]: the weight delta `W_K − W_0` after `K` local SGD steps on
//!   the clip (batch 1, learning rate `η`), as federated averaging sends it;
//!
//! optionally clipped to a flat L2 bound `C` and noised with `N(0, σ²C²)`.
//!
//! **Device side** ([`device_update`]): the gradient comes from the hand-written net
//! (checked against burn in the tests); the `K` steps are run by the device's own local
//! training ([`hush_device::training::local_update`], burn, f32), so the audit attacks what
//! a device really sends; clipping and noise are hush-models' ([`ClipBounds`],
//! [`GaussianMechanism`]), the code every device and the host use ([`privatize`]).
//!
//! **Attacker side** ([`UpdateRule::simulate`], [`UpdateRule::pullback`]): the update a
//! candidate input `x̂` would produce, and the exact gradient of `⟨update(x̂), u⟩` with
//! respect to `x̂`. For `K` steps `W_{k+1} = W_k − η ∇_W L(x̂, W_k)` this is reverse mode
//! through the unrolled steps: with `λ_K = u`, for `k = K−1 … 0`,
//!
//! ```text
//! ∇_x̂ += −η · ∇_x̂ ⟨∇_W L(x̂, W_k), λ_{k+1}⟩          (mixed second derivative)
//! λ_k  = λ_{k+1} − η · H_WW(x̂, W_k) λ_{k+1}            (Hessian-vector product)
//! ```
//!
//! both products exact, from one dual-number pass per step
//! ([`LeakNet::second_order_at`]). No first-order approximation (such as treating
//! `−Δ / (Kη)` as a gradient) is made: the attacker differentiates through all `K` steps,
//! at about `K` times the cost of the single-gradient attack.

use std::path::Path;

use hush_device::training::{local_update, LocalData};
use hush_models::checkpoint::NamedTensor;
use hush_models::dp::{
    ClipBounds, ClipStrategy, ExpectedCount, GaussianMechanism, NoiseKind, NoiseSource,
};
use serde::{Deserialize, Serialize};

use super::leak_net::LeakNet;
use super::AuditError;

/// Clipping and noise a device applies to its update before sharing it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DpNoise {
    /// Flat L2 clip bound `C`.
    pub clip: f32,
    /// Noise multiplier `σ`: Gaussian noise of std `σ·C` on every coordinate.
    pub noise_multiplier: f64,
}

/// The most local steps an audit simulates (the attack's cost grows with `K`).
pub const MAX_LOCAL_STEPS: usize = 50;

/// What the device computes from the clip before clipping and noise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateRule {
    /// The single-example gradient `∇_W L`.
    #[default]
    Gradient,
    /// The weight delta `W_K − W_0` after `steps` SGD steps of learning rate `lr` on the
    /// clip alone.
    LocalSteps {
        /// `K ≥ 1`.
        steps: usize,
        /// `η > 0`.
        lr: f64,
    },
}

/// The update a candidate input produces, with what [`UpdateRule::pullback`] needs.
#[derive(Debug, Clone)]
pub struct Simulated {
    /// The update (flat, [`super::leak_net::LeakShape::layout`] order).
    pub update: Vec<f64>,
    /// The loss at the first step.
    pub loss: f64,
    /// `W_0 … W_{K−1}` (empty for a single gradient).
    trajectory: Vec<Vec<f64>>,
}

impl std::fmt::Display for UpdateRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Gradient => write!(f, "a single-example gradient"),
            Self::LocalSteps { steps, lr } => {
                write!(f, "the weight delta of {steps} local SGD steps (lr {lr})")
            }
        }
    }
}

impl UpdateRule {
    /// Checks `K` and `η` (as the CLI flags `--local-steps`, `--local-lr`).
    pub fn check(&self) -> Result<(), AuditError> {
        let Self::LocalSteps { steps, lr } = *self else {
            return Ok(());
        };
        if steps == 0 || steps > MAX_LOCAL_STEPS {
            return Err(AuditError::Option {
                option: "--local-steps",
                reason: format!(
                    "{steps} steps: between 1 and {MAX_LOCAL_STEPS} (leave it out for a single \
                     gradient)"
                ),
            });
        }
        if !(lr.is_finite() && lr > 0.0) {
            return Err(AuditError::Option {
                option: "--local-lr",
                reason: format!("{lr}: a finite learning rate > 0"),
            });
        }
        Ok(())
    }

    /// Forward-and-backward passes one simulation costs (1, or `K`).
    pub fn steps(&self) -> usize {
        match *self {
            Self::Gradient => 1,
            Self::LocalSteps { steps, .. } => steps,
        }
    }

    /// `+1` when the update points along the gradient, `−1` when against it (a descent
    /// delta): what turns the update's last-layer bias into iDLG's `p − y` signs.
    pub fn gradient_sign(&self) -> f64 {
        match self {
            Self::Gradient => 1.0,
            Self::LocalSteps { .. } => -1.0,
        }
    }

    /// The update the normalised input `x` with class `label` produces (no clipping, no
    /// noise), in f64.
    ///
    /// # Panics
    /// When `x` or `label` do not fit the net (callers check first).
    pub fn simulate(&self, net: &LeakNet, x: &[f64], label: usize) -> Simulated {
        match *self {
            Self::Gradient => {
                let (loss, update) = net.weight_grad(x, label);
                Simulated {
                    update,
                    loss,
                    trajectory: Vec::new(),
                }
            }
            Self::LocalSteps { steps, lr } => {
                let mut w = net.weights.clone();
                let mut trajectory = Vec::with_capacity(steps);
                let mut first_loss = f64::NAN;
                for k in 0..steps {
                    let (loss, g) = net.weight_grad_at(&w, x, label);
                    if k == 0 {
                        first_loss = loss;
                    }
                    trajectory.push(w.clone());
                    w.iter_mut().zip(&g).for_each(|(w, g)| *w -= lr * g);
                }
                w.iter_mut().zip(&net.weights).for_each(|(w, w0)| *w -= w0);
                Simulated {
                    update: w,
                    loss: first_loss,
                    trajectory,
                }
            }
        }
    }

    /// `∇_x ⟨update(x), u⟩`, exactly (see the module docs), for the `sim` that
    /// [`UpdateRule::simulate`] returned at the same `x` and `label`.
    ///
    /// # Panics
    /// As [`UpdateRule::simulate`], and when `u` has the wrong length.
    pub fn pullback(
        &self,
        net: &LeakNet,
        x: &[f64],
        label: usize,
        sim: &Simulated,
        u: &[f64],
    ) -> Vec<f64> {
        let Self::LocalSteps { lr, .. } = *self else {
            return net.grad_dot_input_grad(x, label, u);
        };
        let mut dx = vec![0.0; x.len()];
        let mut lambda = u.to_vec();
        for (k, w) in sim.trajectory.iter().enumerate().rev() {
            let hx = if k == 0 {
                net.grad_dot_input_grad_at(w, x, label, &lambda)
            } else {
                let (hx, hw) = net.second_order_at(w, x, label, &lambda);
                lambda.iter_mut().zip(&hw).for_each(|(l, h)| *l -= lr * h);
                hx
            };
            dx.iter_mut().zip(&hx).for_each(|(d, h)| *d -= lr * h);
        }
        dx
    }
}

/// Clips `update` (flat, [`super::leak_net::LeakShape::layout`] order) to `dp.clip` and
/// adds `N(0, σ²C²)` to every coordinate with hush-models' own clipping and Gaussian
/// mechanism (one contribution: the expected count is 1); noise seeded from `seed`,
/// reproducible (this is an audit, not a release). `None`: the update unchanged.
pub fn privatize(
    net: &LeakNet,
    update: Vec<f64>,
    dp: Option<DpNoise>,
    seed: u64,
) -> Result<Vec<f64>, AuditError> {
    let Some(dp) = dp else {
        return Ok(update);
    };
    let mut tensors = Vec::new();
    let mut off = 0;
    for (name, shape) in net.shape.layout() {
        let n: usize = shape.iter().product();
        let data = update[off..off + n].iter().map(|&v| v as f32).collect();
        tensors.push(NamedTensor::new(name, shape, data)?);
        off += n;
    }
    let sizes: Vec<(String, usize)> = tensors.iter().map(|t| (t.name.clone(), t.len())).collect();
    let bounds = ClipBounds::new(ClipStrategy::Flat, dp.clip, &sizes)?;
    bounds.clip(&mut tensors)?;
    let mech = GaussianMechanism::new(
        dp.noise_multiplier,
        bounds.sensitivity(),
        ExpectedCount::poisson(1.0, 1)?,
        NoiseKind::Gaussian,
    )?;
    mech.privatize(&mut tensors, &mut NoiseSource::from_seed(seed))?;
    Ok(tensors
        .iter()
        .flat_map(|t| t.data.iter().map(|&v| f64::from(v)))
        .collect())
}

/// The single-example gradient a device shares for the normalised example `x`, through
/// [`privatize`].
pub fn shared_update(
    net: &LeakNet,
    x: &[f64],
    label: usize,
    dp: Option<DpNoise>,
    seed: u64,
) -> Result<Vec<f64>, AuditError> {
    privatize(net, net.weight_grad(x, label).1, dp, seed)
}

/// The weight delta of `steps` local SGD steps of learning rate `lr` on one clip (model
/// features `features`, class `label`), run by the device's own local training on the
/// model package `package` (whose twin `net` is), unclipped; flat in
/// [`super::leak_net::LeakShape::layout`] order. A model with dropout drops units at random
/// in these steps, which the attacker's deterministic simulation does not (the audit's
/// target models have none).
pub fn local_steps_delta(
    net: &LeakNet,
    package: &Path,
    features: &[f32],
    label: usize,
    steps: usize,
    lr: f64,
) -> Result<Vec<f64>, AuditError> {
    use hush_device::protocol::{LocalTraining, TrainTask, UpdateClip};
    UpdateRule::LocalSteps { steps, lr }.check()?;
    let sh = net.shape;
    let layout = sh.layout();
    let data = LocalData {
        features: features.to_vec(),
        classes: vec![label],
        frames: sh.frames,
        bins: sh.bins,
    };
    let task = TrainTask {
        round: 0,
        model_version: 0,
        deadline_ms: 0,
        local: LocalTraining {
            epochs: u32::try_from(steps).unwrap_or(u32::MAX),
            batch_size: 1,
            lr: lr as f32,
            example_clip: None,
            seed: 0,
        },
        // Unclipped here: the audit clips and noises in `privatize`, for both rules alike.
        clip: UpdateClip {
            bounds: vec![f32::MAX],
            layers: layout.iter().map(|(n, _)| n.to_string()).collect(),
            normalize_layers: false,
            local_noise_std: 0.0,
        },
    };
    let (update, _) = local_update(package, &data, &task, 0)?;
    let mut flat = Vec::with_capacity(sh.num_params());
    for (name, shape) in &layout {
        let layer = update
            .layers
            .iter()
            .find(|l| l.name == *name)
            .ok_or_else(|| AuditError::UnsupportedModel {
                reason: format!("the device's update has no `{name}` layer"),
            })?;
        if layer.data.len() != shape.iter().product::<usize>() {
            return Err(AuditError::UnsupportedModel {
                reason: format!(
                    "the device's update has {} values in `{name}`, expected shape {shape:?}",
                    layer.data.len()
                ),
            });
        }
        flat.extend(layer.data.iter().map(|&v| f64::from(v)));
    }
    Ok(flat)
}

/// The update a device shares for one clip (model features `features`, class `label`)
/// under `rule`, clipped and noised when `dp` is given: [`shared_update`] or
/// [`local_steps_delta`], then [`privatize`].
pub fn device_update(
    net: &LeakNet,
    package: &Path,
    features: &[f32],
    label: usize,
    rule: UpdateRule,
    dp: Option<DpNoise>,
    seed: u64,
) -> Result<Vec<f64>, AuditError> {
    rule.check()?;
    match rule {
        UpdateRule::Gradient => shared_update(net, &net.normalise(features), label, dp, seed),
        UpdateRule::LocalSteps { steps, lr } => {
            let delta = local_steps_delta(net, package, features, label, steps, lr)?;
            privatize(net, delta, dp, seed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_local_steps_and_rates_are_refused_by_flag() {
        let err = |r: UpdateRule| r.check().unwrap_err().to_string();
        let e = err(UpdateRule::LocalSteps { steps: 0, lr: 0.1 });
        assert!(e.contains("--local-steps") && e.contains("0 steps"), "{e}");
        let e = err(UpdateRule::LocalSteps {
            steps: MAX_LOCAL_STEPS + 1,
            lr: 0.1,
        });
        assert!(e.contains("--local-steps"), "{e}");
        for lr in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = err(UpdateRule::LocalSteps { steps: 2, lr });
            assert!(e.contains("--local-lr"), "{e}");
        }
        assert!(UpdateRule::Gradient.check().is_ok());
        assert!(UpdateRule::LocalSteps { steps: 3, lr: 0.05 }
            .check()
            .is_ok());
    }
}
