//! Gradient inversion of one shared update (Geiping et al. 2020, "Inverting gradients";
//! iDLG, Zhao et al. 2020, for the label), as the gradient-leakage paper (Li, Zhang, Liu,
//! arXiv 2302.10441) runs it on speech features.
//!
//! The update attacked is [`super::update`]'s: a device's single-example gradient `g`, or
//! its weight delta after K local steps, optionally clipped and noised.
//!
//! - [`idlg_label`]: the label, from the sign of the last layer's bias gradient
//!   (`∂L/∂b_c = p_c − y_c` is negative only for the true class).
//! - [`invert`]: features minimising `1 − cos(update(x̂), g) + λ·TV(x̂)` — Adam on the sign
//!   of the gradient, learning rate ×0.1 at 3/8, 5/8 and 7/8 of the iterations, several
//!   seeded restarts, the best kept by gradient loss. The gradient of the cosine term
//!   through `update` is exact ([`super::leak_net`], and through K local steps
//!   [`super::update::UpdateRule::pullback`]).
//!
//! The search runs in the model's normalised input space (features after `input_norm`),
//! where every bin has unit scale, so one learning rate and one TV weight fit every bin.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use super::leak_net::LeakNet;
use super::update::UpdateRule;
use super::AuditError;

/// Options of the attack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvertConfig {
    /// Adam steps per restart.
    pub iterations: usize,
    /// Independent random starts; the one with the lowest gradient loss is kept.
    pub restarts: usize,
    /// Initial learning rate (Adam on the sign of the gradient).
    pub lr: f64,
    /// Weight of the total-variation prior `λ`.
    pub tv_weight: f64,
    /// Seed of the starts (and of the DP noise, in [`super::update::device_update`]).
    pub seed: u64,
}

impl Default for InvertConfig {
    fn default() -> Self {
        Self {
            iterations: 3000,
            restarts: 2,
            lr: 0.1,
            tv_weight: 5e-2,
            seed: 0,
        }
    }
}

/// Upper bound on `iterations × restarts`, so a mistyped flag cannot run for days.
pub const MAX_STEPS: usize = 200_000;

impl InvertConfig {
    /// Checks the options.
    pub fn check(&self) -> Result<(), AuditError> {
        let bad = |option: &'static str, reason: String| Err(AuditError::Option { option, reason });
        if self.iterations == 0 || self.restarts == 0 {
            return bad("--iterations/--restarts", "at least 1 each".into());
        }
        if self.iterations.saturating_mul(self.restarts) > MAX_STEPS {
            return bad(
                "--iterations/--restarts",
                format!("iterations × restarts is at most {MAX_STEPS}"),
            );
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad("--lr", "a positive learning rate".into());
        }
        if !(self.tv_weight.is_finite() && self.tv_weight >= 0.0) {
            return bad("--tv-weight", "a finite weight ≥ 0".into());
        }
        Ok(())
    }
}

/// iDLG: the class whose last-layer bias gradient is the most negative (`p_c − y_c < 0`
/// only for the true class; with noise, the most negative is the best guess). For a
/// local-steps delta, `Δb = −η Σ_k (p_k − y)`: the most positive.
pub fn idlg_label(net: &LeakNet, update: &[f64], rule: UpdateRule) -> usize {
    let k = net.shape.classes;
    let sign = rule.gradient_sign();
    let bias = &update[update.len() - k..];
    bias.iter()
        .map(|&b| sign * b)
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(0, |(i, _)| i)
}

/// Anisotropic total variation of a `rows × cols` matrix, as the mean absolute difference
/// of neighbours along each axis, and its (sub)gradient.
pub fn total_variation(x: &[f64], rows: usize, cols: usize) -> (f64, Vec<f64>) {
    let mut grad = vec![0.0; x.len()];
    let mut tv = 0.0;
    let n_t = ((rows.saturating_sub(1)) * cols).max(1) as f64;
    let n_f = (rows * cols.saturating_sub(1)).max(1) as f64;
    for r in 0..rows {
        for c in 0..cols {
            let i = r * cols + c;
            if r + 1 < rows {
                let d = x[i + cols] - x[i];
                tv += d.abs() / n_t;
                let s = d.signum() / n_t;
                grad[i + cols] += s;
                grad[i] -= s;
            }
            if c + 1 < cols {
                let d = x[i + 1] - x[i];
                tv += d.abs() / n_f;
                let s = d.signum() / n_f;
                grad[i + 1] += s;
                grad[i] -= s;
            }
        }
    }
    (tv, grad)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `1 − cos(g, target)` and its gradient with respect to `g`.
pub fn cosine_loss(g: &[f64], target: &[f64]) -> (f64, Vec<f64>) {
    let ng = dot(g, g).sqrt().max(1e-30);
    let nt = dot(target, target).sqrt().max(1e-30);
    let cos = dot(g, target) / (ng * nt);
    let u = g
        .iter()
        .zip(target)
        .map(|(&gi, &ti)| -(ti / (ng * nt) - cos * gi / (ng * ng)))
        .collect();
    (1.0 - cos, u)
}

/// The attack objective at normalised input `x` and its exact gradient:
/// `(1 − cos(update(x), target), λ·TV(x), ∇_x)`, where `update` is what `rule` makes of
/// `x` (the gradient `∇_W L(x)`, or the delta of K local steps).
pub fn objective(
    net: &LeakNet,
    x: &[f64],
    label: usize,
    rule: UpdateRule,
    target: &[f64],
    tv_weight: f64,
) -> (f64, f64, Vec<f64>) {
    let sim = rule.simulate(net, x, label);
    let (loss, u) = cosine_loss(&sim.update, target);
    let mut grad = rule.pullback(net, x, label, &sim, &u);
    let (tv, tv_grad) = total_variation(x, net.shape.frames, net.shape.bins);
    for (a, b) in grad.iter_mut().zip(&tv_grad) {
        *a += tv_weight * b;
    }
    (loss, tv_weight * tv, grad)
}

/// The result of [`invert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inversion {
    /// The recovered normalised input (`frames × bins`).
    pub normalised: Vec<f64>,
    /// The gradient loss `1 − cos` of the kept restart.
    pub grad_loss: f64,
    /// The final gradient loss of every restart.
    pub restart_losses: Vec<f64>,
}

/// Reconstructs the normalised input whose update under `rule` for `label` best matches
/// `target`. `tick` is called once per iteration (progress bars).
pub fn invert(
    net: &LeakNet,
    target: &[f64],
    label: usize,
    rule: UpdateRule,
    cfg: &InvertConfig,
    tick: &mut dyn FnMut(),
) -> Result<Inversion, AuditError> {
    cfg.check()?;
    rule.check()?;
    if target.len() != net.weights.len() {
        return Err(AuditError::Option {
            option: "update",
            reason: format!(
                "{} update values for a model with {} parameters",
                target.len(),
                net.weights.len()
            ),
        });
    }
    if label >= net.shape.classes {
        return Err(AuditError::Option {
            option: "label",
            reason: format!("class {label} of {}", net.shape.classes),
        });
    }
    let n = net.shape.frames * net.shape.bins;
    let (b1, b2, eps) = (0.9, 0.999, 1e-8);
    let milestones = [3, 5, 7].map(|k| cfg.iterations * k / 8);
    let mut best: Option<Inversion> = None;
    let mut losses = Vec::with_capacity(cfg.restarts);
    for r in 0..cfg.restarts {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_add(1 + r as u64));
        let mut x: Vec<f64> = (0..n).map(|_| StandardNormal.sample(&mut rng)).collect();
        let (mut m, mut v) = (vec![0.0; n], vec![0.0; n]);
        let mut lr = cfg.lr;
        let mut best_here = (f64::INFINITY, x.clone());
        for it in 0..cfg.iterations {
            if milestones.contains(&it) && it > 0 {
                lr *= 0.1;
            }
            let (loss, _, grad) = objective(net, &x, label, rule, target, cfg.tv_weight);
            if loss < best_here.0 {
                best_here = (loss, x.clone());
            }
            let t = (it + 1) as i32;
            for i in 0..n {
                let s = grad[i].signum() * f64::from(u8::from(grad[i] != 0.0));
                m[i] = b1 * m[i] + (1.0 - b1) * s;
                v[i] = b2 * v[i] + (1.0 - b2) * s * s;
                let mh = m[i] / (1.0 - b1.powi(t));
                let vh = v[i] / (1.0 - b2.powi(t));
                x[i] -= lr * mh / (vh.sqrt() + eps);
            }
            tick();
        }
        let (last, _) = cosine_loss(&rule.simulate(net, &x, label).update, target);
        if last < best_here.0 {
            best_here = (last, x);
        }
        losses.push(best_here.0);
        if best.as_ref().is_none_or(|b| best_here.0 < b.grad_loss) {
            best = Some(Inversion {
                normalised: best_here.1,
                grad_loss: best_here.0,
                restart_losses: Vec::new(),
            });
        }
    }
    let mut out = best.ok_or(AuditError::Option {
        option: "--restarts",
        reason: "at least 1".into(),
    })?;
    out.restart_losses = losses;
    Ok(out)
}
