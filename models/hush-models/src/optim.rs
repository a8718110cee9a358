//! Server optimizers for federated rounds: the host treats the **negated** private mean
//! update `g = −Δ` as a pseudo-gradient and steps the global weights with it.
//!
//! - [`ServerOptimizerConfig::FedAvg`]: `m ← μ·m + g`, `w ← w − η·m` (`η = 1, μ = 0` is
//!   plain federated averaging, `w ← w + Δ`).
//! - [`ServerOptimizerConfig::FedAdam`] (Reddi et al., "Adaptive Federated Optimization",
//!   2021, Algorithm 2, no bias correction): `m ← β₁m + (1−β₁)g`, `v ← β₂v + (1−β₂)g²`,
//!   `w ← w − η·m / (√v + τ)`.
//! - [`ServerOptimizerConfig::Lamb`] (You et al. 2020): Adam moments with bias correction,
//!   `r = m̂ / (√v̂ + ε) + λw`, and a per-layer trust ratio `‖w‖ / ‖r‖` (1 when either is
//!   zero): `w ← w − η · ratio · r`. Each tensor is one layer.
//!
//! The optimizer only sees the already-private mean, so it is post-processing: it cannot
//! change the privacy guarantee.

use serde::{Deserialize, Serialize};

use crate::checkpoint::NamedTensor;

/// Why an optimizer step was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptimError {
    /// A hyper-parameter is out of range.
    #[error("server optimizer `{name}` = {value}: {expected}")]
    BadParameter {
        /// Parameter name.
        name: &'static str,
        /// Value given.
        value: f64,
        /// What is allowed.
        expected: &'static str,
    },
    /// The update does not match the weights (or the state from earlier steps).
    #[error("server optimizer layout mismatch: {reason}")]
    Layout {
        /// What differs.
        reason: String,
    },
}

/// Which server optimizer and its hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServerOptimizerConfig {
    /// Federated averaging with server learning rate and (heavy-ball) momentum.
    FedAvg {
        /// Server learning rate η.
        lr: f64,
        /// Momentum μ in `[0, 1)`.
        momentum: f64,
    },
    /// FedAdam (Reddi et al.).
    FedAdam {
        /// Server learning rate η.
        lr: f64,
        /// β₁.
        beta1: f64,
        /// β₂.
        beta2: f64,
        /// Adaptivity τ (added to `√v`).
        eps: f64,
    },
    /// LAMB: Adam with a per-layer trust ratio.
    Lamb {
        /// Server learning rate η.
        lr: f64,
        /// β₁.
        beta1: f64,
        /// β₂.
        beta2: f64,
        /// ε added to `√v̂`.
        eps: f64,
        /// Decoupled weight decay λ.
        weight_decay: f64,
    },
}

impl Default for ServerOptimizerConfig {
    /// Plain federated averaging (`η = 1`, no momentum).
    fn default() -> Self {
        Self::FedAvg {
            lr: 1.0,
            momentum: 0.0,
        }
    }
}

fn check(
    name: &'static str,
    value: f64,
    ok: bool,
    expected: &'static str,
) -> Result<(), OptimError> {
    if ok && value.is_finite() {
        Ok(())
    } else {
        Err(OptimError::BadParameter {
            name,
            value,
            expected,
        })
    }
}

impl ServerOptimizerConfig {
    /// Checks every hyper-parameter's range.
    pub fn validate(&self) -> Result<(), OptimError> {
        let beta = |name, b: f64| check(name, b, (0.0..1.0).contains(&b), "in [0, 1)");
        match *self {
            Self::FedAvg { lr, momentum } => {
                check("lr", lr, lr > 0.0, "> 0")?;
                beta("momentum", momentum)
            }
            Self::FedAdam {
                lr,
                beta1,
                beta2,
                eps,
            } => {
                check("lr", lr, lr > 0.0, "> 0")?;
                beta("beta1", beta1)?;
                beta("beta2", beta2)?;
                check("eps", eps, eps > 0.0, "> 0")
            }
            Self::Lamb {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                check("lr", lr, lr > 0.0, "> 0")?;
                beta("beta1", beta1)?;
                beta("beta2", beta2)?;
                check("eps", eps, eps > 0.0, "> 0")?;
                check("weight_decay", weight_decay, weight_decay >= 0.0, ">= 0")
            }
        }
    }

    /// Short name (`fedavg`, `fedadam`, `lamb`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::FedAvg { .. } => "fedavg",
            Self::FedAdam { .. } => "fedadam",
            Self::Lamb { .. } => "lamb",
        }
    }
}

/// What a server optimizer carries from one step to the next: kept beside the weights it
/// produced so a restarted host goes on with the same moments instead of from zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerOptimizerState {
    /// The configuration the state belongs to.
    pub config: ServerOptimizerConfig,
    /// Steps taken (LAMB's bias correction depends on it).
    pub steps: u64,
    /// First moments, one vector per tensor (empty before the first step).
    pub m: Vec<Vec<f64>>,
    /// Second moments, one vector per tensor.
    pub v: Vec<Vec<f64>>,
}

/// A server optimizer with its state (first and second moments per value).
#[derive(Debug, Clone)]
pub struct ServerOptimizer {
    config: ServerOptimizerConfig,
    /// First moment (momentum buffer for FedAvg), one vector per tensor.
    m: Vec<Vec<f64>>,
    /// Second moment (adaptive methods).
    v: Vec<Vec<f64>>,
    steps: u64,
}

fn norm(x: impl Iterator<Item = f64>) -> f64 {
    x.map(|v| v * v).sum::<f64>().sqrt()
}

impl ServerOptimizer {
    /// An optimizer with empty state.
    pub fn new(config: ServerOptimizerConfig) -> Result<Self, OptimError> {
        config.validate()?;
        Ok(Self {
            config,
            m: Vec::new(),
            v: Vec::new(),
            steps: 0,
        })
    }

    /// Goes on from `state` when it was made with `config`; a state made with another
    /// configuration (the operator changed the optimizer) is refused, since its moments
    /// mean something else.
    pub fn resume(
        config: ServerOptimizerConfig,
        state: ServerOptimizerState,
    ) -> Result<Self, OptimError> {
        config.validate()?;
        if state.config != config {
            return Err(OptimError::Layout {
                reason: format!(
                    "the saved state belongs to `{}` {:?}, not the configured `{}` {:?}",
                    state.config.name(),
                    state.config,
                    config.name(),
                    config
                ),
            });
        }
        if state.m.len() != state.v.len()
            || state
                .m
                .iter()
                .zip(&state.v)
                .any(|(m, v)| m.len() != v.len())
        {
            return Err(OptimError::Layout {
                reason: "the saved first and second moments differ in shape".into(),
            });
        }
        Ok(Self {
            config,
            m: state.m,
            v: state.v,
            steps: state.steps,
        })
    }

    /// A copy of the state, for saving.
    pub fn state(&self) -> ServerOptimizerState {
        ServerOptimizerState {
            config: self.config,
            steps: self.steps,
            m: self.m.clone(),
            v: self.v.clone(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> ServerOptimizerConfig {
        self.config
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    fn check_layout(
        &mut self,
        weights: &[NamedTensor],
        mean_update: &[NamedTensor],
    ) -> Result<(), OptimError> {
        if weights.len() != mean_update.len() {
            return Err(OptimError::Layout {
                reason: format!(
                    "{} weight tensors but {} update tensors",
                    weights.len(),
                    mean_update.len()
                ),
            });
        }
        for (w, u) in weights.iter().zip(mean_update) {
            if w.name != u.name || w.data.len() != u.data.len() {
                return Err(OptimError::Layout {
                    reason: format!(
                        "weight `{}` ({} values) against update `{}` ({} values)",
                        w.name,
                        w.data.len(),
                        u.name,
                        u.data.len()
                    ),
                });
            }
        }
        if self.m.is_empty() {
            self.m = weights.iter().map(|w| vec![0.0; w.data.len()]).collect();
            self.v = self.m.clone();
        } else if self.m.len() != weights.len()
            || self
                .m
                .iter()
                .zip(weights)
                .any(|(m, w)| m.len() != w.data.len())
        {
            return Err(OptimError::Layout {
                reason: "the weights changed shape since the previous step".into(),
            });
        }
        Ok(())
    }

    /// One server step: `weights` (trainable tensors) move along the private mean update
    /// `mean_update` (same names and order), i.e. against the pseudo-gradient `−Δ`.
    pub fn step(
        &mut self,
        weights: &mut [NamedTensor],
        mean_update: &[NamedTensor],
    ) -> Result<(), OptimError> {
        self.check_layout(weights, mean_update)?;
        self.steps += 1;
        let t = self.steps as f64;
        for (i, (w, u)) in weights.iter_mut().zip(mean_update).enumerate() {
            let m = &mut self.m[i];
            let v = &mut self.v[i];
            match self.config {
                ServerOptimizerConfig::FedAvg { lr, momentum } => {
                    for ((w, &d), m) in w.data.iter_mut().zip(&u.data).zip(m.iter_mut()) {
                        let g = -f64::from(d);
                        *m = momentum * *m + g;
                        *w = (f64::from(*w) - lr * *m) as f32;
                    }
                }
                ServerOptimizerConfig::FedAdam {
                    lr,
                    beta1,
                    beta2,
                    eps,
                } => {
                    for (((w, &d), m), v) in w
                        .data
                        .iter_mut()
                        .zip(&u.data)
                        .zip(m.iter_mut())
                        .zip(v.iter_mut())
                    {
                        let g = -f64::from(d);
                        *m = beta1 * *m + (1.0 - beta1) * g;
                        *v = beta2 * *v + (1.0 - beta2) * g * g;
                        *w = (f64::from(*w) - lr * *m / (v.sqrt() + eps)) as f32;
                    }
                }
                ServerOptimizerConfig::Lamb {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay,
                } => {
                    let c1 = 1.0 - beta1.powf(t);
                    let c2 = 1.0 - beta2.powf(t);
                    let mut r = Vec::with_capacity(w.data.len());
                    for (((w, &d), m), v) in w
                        .data
                        .iter()
                        .zip(&u.data)
                        .zip(m.iter_mut())
                        .zip(v.iter_mut())
                    {
                        let g = -f64::from(d);
                        *m = beta1 * *m + (1.0 - beta1) * g;
                        *v = beta2 * *v + (1.0 - beta2) * g * g;
                        let (mh, vh) = (*m / c1, *v / c2);
                        r.push(mh / (vh.sqrt() + eps) + weight_decay * f64::from(*w));
                    }
                    let wn = norm(w.data.iter().map(|&x| f64::from(x)));
                    let rn = norm(r.iter().copied());
                    let ratio = if wn > 0.0 && rn > 0.0 { wn / rn } else { 1.0 };
                    for (w, r) in w.data.iter_mut().zip(r) {
                        *w = (f64::from(*w) - lr * ratio * r) as f32;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumed_optimizer_steps_exactly_like_the_uninterrupted_one() {
        let config = ServerOptimizerConfig::Lamb {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-6,
            weight_decay: 0.01,
        };
        let delta = vec![t("a", vec![0.5, -0.25, 1.0])];
        let delta2 = vec![t("a", vec![-1.0, 0.5, 0.1])];
        let mut w_straight = vec![t("a", vec![1.0, 2.0, 3.0])];
        let mut straight = ServerOptimizer::new(config).unwrap();
        let mut w_resumed = w_straight.clone();
        let mut first = ServerOptimizer::new(config).unwrap();
        straight.step(&mut w_straight, &delta).unwrap();
        first.step(&mut w_resumed, &delta).unwrap();
        let mut resumed = ServerOptimizer::resume(config, first.state()).unwrap();
        straight.step(&mut w_straight, &delta2).unwrap();
        resumed.step(&mut w_resumed, &delta2).unwrap();
        assert_eq!(w_straight[0].data, w_resumed[0].data);
        assert_eq!(resumed.steps(), 2);
        // A fresh optimizer (moments lost) lands elsewhere: the state matters.
        let mut w_fresh = vec![t("a", vec![1.0, 2.0, 3.0])];
        let mut fresh = ServerOptimizer::new(config).unwrap();
        fresh.step(&mut w_fresh, &delta).unwrap();
        let mut fresh = ServerOptimizer::new(config).unwrap();
        fresh.step(&mut w_fresh, &delta2).unwrap();
        assert_ne!(w_straight[0].data, w_fresh[0].data);
    }

    #[test]
    fn state_of_another_configuration_is_refused() {
        let fedavg = ServerOptimizerConfig::FedAvg {
            lr: 1.0,
            momentum: 0.9,
        };
        let other = ServerOptimizerConfig::FedAvg {
            lr: 1.0,
            momentum: 0.5,
        };
        let state = ServerOptimizer::new(fedavg).unwrap().state();
        let e = ServerOptimizer::resume(other, state).unwrap_err();
        assert!(e.to_string().contains("saved state"), "{e}");
    }

    fn t(name: &str, data: Vec<f32>) -> NamedTensor {
        NamedTensor {
            name: name.into(),
            shape: vec![data.len()],
            data,
        }
    }

    fn close(a: &[f32], b: &[f64]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((f64::from(*x) - y).abs() < 1e-6, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn fedavg_without_momentum_adds_the_scaled_update() {
        let mut opt = ServerOptimizer::new(ServerOptimizerConfig::FedAvg {
            lr: 0.5,
            momentum: 0.0,
        })
        .unwrap();
        let mut w = vec![t("a", vec![1.0, -2.0])];
        opt.step(&mut w, &[t("a", vec![0.2, 0.4])]).unwrap();
        close(&w[0].data, &[1.1, -1.8]);
    }

    #[test]
    fn fedavg_momentum_accumulates() {
        // m1 = g1 = -1 → w = 0 + 1 = 1; m2 = 0.9·(-1) + (-1) = -1.9 → w = 1 + 1.9 = 2.9.
        let mut opt = ServerOptimizer::new(ServerOptimizerConfig::FedAvg {
            lr: 1.0,
            momentum: 0.9,
        })
        .unwrap();
        let mut w = vec![t("a", vec![0.0])];
        opt.step(&mut w, &[t("a", vec![1.0])]).unwrap();
        close(&w[0].data, &[1.0]);
        opt.step(&mut w, &[t("a", vec![1.0])]).unwrap();
        close(&w[0].data, &[2.9]);
    }

    #[test]
    fn fedadam_matches_hand_computation() {
        // Δ = 2 → g = -2; m = 0.1·(-2) = -0.2; v = 0.01·4 = 0.04; √v = 0.2;
        // w = 1 − 0.1·(−0.2)/(0.2 + 0.01) = 1 + 0.0952380952…
        let mut opt = ServerOptimizer::new(ServerOptimizerConfig::FedAdam {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.99,
            eps: 0.01,
        })
        .unwrap();
        let mut w = vec![t("a", vec![1.0, 0.0])];
        opt.step(&mut w, &[t("a", vec![2.0, 0.0])]).unwrap();
        close(&w[0].data, &[1.0 + 0.02 / 0.21, 0.0]);
        // Step 2 with Δ = 0: m = 0.9·(−0.2) = −0.18; v = 0.99·0.04 = 0.0396.
        opt.step(&mut w, &[t("a", vec![0.0, 0.0])]).unwrap();
        let w2 = 1.0 + 0.02 / 0.21 + 0.1 * 0.18 / (0.0396f64.sqrt() + 0.01);
        close(&w[0].data, &[w2, 0.0]);
    }

    #[test]
    fn lamb_scales_each_layer_by_its_trust_ratio() {
        // Step 1 with bias correction: m̂ = g, v̂ = g², r = g/(|g| + ε) ≈ sign(g).
        // Layer a: w = [3, 4] (‖w‖ = 5), Δ = [1, 1] → r ≈ [−1, −1]·(1/(1+ε)), ‖r‖ = √2/(1+ε)
        // → w − η·(5/‖r‖)·r = w + η·5/√2·[1, 1].
        let eps = 1e-6;
        let mut opt = ServerOptimizer::new(ServerOptimizerConfig::Lamb {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps,
            weight_decay: 0.0,
        })
        .unwrap();
        let mut w = vec![t("a", vec![3.0, 4.0]), t("b", vec![0.0])];
        opt.step(&mut w, &[t("a", vec![1.0, 1.0]), t("b", vec![-0.5])])
            .unwrap();
        let s = 0.1 * 5.0 / 2f64.sqrt();
        close(&w[0].data, &[3.0 + s, 4.0 + s]);
        // Layer b has ‖w‖ = 0: ratio 1, r = 0.5/(0.5+ε) → w = −0.1·r.
        close(&w[1].data, &[-0.1 * 0.5 / (0.5 + eps)]);
    }

    #[test]
    fn refuses_mismatched_layouts_and_bad_parameters() {
        let mut opt = ServerOptimizer::new(ServerOptimizerConfig::default()).unwrap();
        let mut w = vec![t("a", vec![0.0, 0.0])];
        assert!(opt.step(&mut w, &[t("b", vec![0.0, 0.0])]).is_err());
        assert!(opt.step(&mut w, &[t("a", vec![0.0])]).is_err());
        assert!(ServerOptimizer::new(ServerOptimizerConfig::FedAvg {
            lr: 1.0,
            momentum: 1.0
        })
        .is_err());
        assert!(ServerOptimizer::new(ServerOptimizerConfig::FedAdam {
            lr: f64::NAN,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-3
        })
        .is_err());
    }
}
