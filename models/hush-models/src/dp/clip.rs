//! Clipping: one flat bound over all layers, or one bound per layer.
//!
//! Per-layer bounds follow the Google paper's variants: "uniform" gives every layer
//! `C/√L`; "dim" gives layer `l` a bound proportional to `√d_l` (its parameter count),
//! both scaled so that `Σ C_l² = C²` — the sensitivity of the clipped sum stays `C`.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{bad, DpError};
use crate::checkpoint::NamedTensor;

/// How a total bound `C` is shared out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClipStrategy {
    /// One bound over the concatenation of all layers.
    Flat,
    /// `C_l = C/√L`.
    PerLayerUniform,
    /// `C_l = C·√(d_l / Σ d)`.
    PerLayerDim,
}

impl FromStr for ClipStrategy {
    type Err = DpError;
    fn from_str(s: &str) -> Result<Self, DpError> {
        match s {
            "flat" => Ok(Self::Flat),
            "per-layer-uniform" => Ok(Self::PerLayerUniform),
            "per-layer-dim" => Ok(Self::PerLayerDim),
            _ => Err(bad(
                "clipping",
                s,
                "one of flat, per-layer-uniform, per-layer-dim",
            )),
        }
    }
}

impl std::fmt::Display for ClipStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Flat => "flat",
            Self::PerLayerUniform => "per-layer-uniform",
            Self::PerLayerDim => "per-layer-dim",
        })
    }
}

/// Clip bounds for a model layout: either one flat bound or one per layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClipBounds {
    layers: Vec<String>,
    /// One entry (flat) or one per layer.
    bounds: Vec<f32>,
}

/// L2 norm (accumulated in f64).
pub fn l2_norm(x: &[f32]) -> f32 {
    x.iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt() as f32
}

/// L2 norm of each tensor.
pub fn layer_norms(tensors: &[NamedTensor]) -> Vec<f32> {
    tensors.iter().map(|t| l2_norm(&t.data)).collect()
}

fn global_norm(norms: &[f32]) -> f32 {
    norms
        .iter()
        .map(|&n| f64::from(n) * f64::from(n))
        .sum::<f64>()
        .sqrt() as f32
}

/// Multiplies `t` by `factor`; a zero factor zeroes the tensor (also any NaN or ∞ in it).
fn scale(t: &mut NamedTensor, factor: f32) {
    if factor == 0.0 {
        t.data.iter_mut().for_each(|v| *v = 0.0);
    } else {
        t.data.iter_mut().for_each(|v| *v *= factor);
    }
}

impl ClipBounds {
    /// Bounds for `strategy` with total `c` over `layout` (tensor name, parameter count).
    pub fn new(
        strategy: ClipStrategy,
        c: f32,
        layout: &[(String, usize)],
    ) -> Result<Self, DpError> {
        if !(c.is_finite() && c > 0.0) {
            return Err(bad("clip", c, "a finite bound > 0"));
        }
        if layout.is_empty() || layout.iter().any(|(_, d)| *d == 0) {
            return Err(DpError::Layout {
                reason: "no trainable layers, or an empty one".into(),
            });
        }
        let layers: Vec<String> = layout.iter().map(|(n, _)| n.clone()).collect();
        let l = layout.len() as f64;
        let total: f64 = layout.iter().map(|(_, d)| *d as f64).sum();
        let c = f64::from(c);
        let bounds = match strategy {
            ClipStrategy::Flat => vec![c as f32],
            ClipStrategy::PerLayerUniform => vec![(c / l.sqrt()) as f32; layout.len()],
            ClipStrategy::PerLayerDim => layout
                .iter()
                .map(|(_, d)| (c * (*d as f64 / total).sqrt()) as f32)
                .collect(),
        };
        Ok(Self { layers, bounds })
    }

    /// Explicit per-layer bounds (e.g. received from the host).
    pub fn per_layer(layers: Vec<String>, bounds: Vec<f32>) -> Result<Self, DpError> {
        if bounds.is_empty() || (bounds.len() != 1 && bounds.len() != layers.len()) {
            return Err(DpError::Layout {
                reason: format!("{} bounds for {} layers", bounds.len(), layers.len()),
            });
        }
        if let Some(b) = bounds.iter().find(|b| !(b.is_finite() && **b > 0.0)) {
            return Err(bad("clip bound", b, "a finite bound > 0"));
        }
        Ok(Self { layers, bounds })
    }

    /// Whether this is one bound over all layers.
    pub fn is_flat(&self) -> bool {
        self.bounds.len() == 1
    }

    /// The bounds (one entry when flat).
    pub fn bounds(&self) -> &[f32] {
        &self.bounds
    }

    /// Layer names, in order.
    pub fn layers(&self) -> &[String] {
        &self.layers
    }

    /// L2 sensitivity of one clipped contribution: `sqrt(Σ C_l²)` (`C` when flat).
    pub fn sensitivity(&self) -> f64 {
        self.bounds
            .iter()
            .map(|&b| f64::from(b) * f64::from(b))
            .sum::<f64>()
            .sqrt()
    }

    fn check_layout(&self, t: &[NamedTensor]) -> Result<(), DpError> {
        if t.len() != self.layers.len() || t.iter().zip(&self.layers).any(|(t, n)| &t.name != n) {
            return Err(DpError::Layout {
                reason: format!(
                    "tensors [{}] for bounds over [{}]",
                    t.iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    self.layers.join(", ")
                ),
            });
        }
        Ok(())
    }

    /// Scales `t` down so that each layer (or the whole, when flat) is within its bound;
    /// returns the layer norms before clipping.
    pub fn clip(&self, t: &mut [NamedTensor]) -> Result<Vec<f32>, DpError> {
        self.rescale(t, false)
    }

    /// Layer-wise normalization: scales every layer (or the whole, when flat) to exactly
    /// its bound, so all contributions weigh the same; returns the norms before.
    pub fn normalize(&self, t: &mut [NamedTensor]) -> Result<Vec<f32>, DpError> {
        self.rescale(t, true)
    }

    fn rescale(&self, t: &mut [NamedTensor], exact: bool) -> Result<Vec<f32>, DpError> {
        self.check_layout(t)?;
        let norms = layer_norms(t);
        for (x, f) in t.iter_mut().zip(self.factors(&norms, exact)) {
            scale(x, f);
        }
        Ok(norms)
    }

    /// The factor each layer of a contribution with layer norms `norms` is multiplied by:
    /// what [`ClipBounds::clip`] (`exact = false`) or [`ClipBounds::normalize`]
    /// (`exact = true`) apply, one per layer (all equal when flat). A non-finite norm gives
    /// 0 (the contribution is dropped), a zero norm 1.
    pub fn factors(&self, norms: &[f32], exact: bool) -> Vec<f32> {
        let skip = super::fault::is(super::fault::PrivacyFault::NoClip);
        let factor = |norm: f32, bound: f32| {
            if skip && norm.is_finite() {
                1.0
            } else if norm <= 0.0 || !norm.is_finite() {
                if norm.is_finite() {
                    1.0
                } else {
                    0.0
                }
            } else if exact || norm > bound {
                // One ulp of headroom so rounding never leaves a norm over its bound.
                bound / norm * (1.0 - f32::EPSILON)
            } else {
                1.0
            }
        };
        if self.is_flat() {
            vec![factor(global_norm(norms), self.bounds[0]); norms.len()]
        } else {
            norms
                .iter()
                .zip(&self.bounds)
                .map(|(&n, &b)| factor(n, b))
                .collect()
        }
    }

    /// Whether a contribution with layer norms `norms` is over its bound (the flat bound,
    /// or any layer's): it is then scaled down by [`ClipBounds::clip`].
    pub fn is_over(&self, norms: &[f32]) -> bool {
        if self.is_flat() {
            global_norm(norms) > self.bounds[0]
        } else {
            norms.iter().zip(&self.bounds).any(|(n, b)| n > b)
        }
    }

    /// The receiver's check: every layer (or the whole) within its bound times
    /// `1 + tolerance` (for float rounding). Errors name the first offending layer.
    pub fn check(&self, t: &[NamedTensor], tolerance: f32) -> Result<(), DpError> {
        self.check_layout(t)?;
        self.check_norms(&layer_norms(t), tolerance)
    }

    /// [`ClipBounds::check`] on layer norms already computed (one per layer, in order).
    // `!(n <= bound)` on purpose: a NaN norm must fail the check.
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    pub fn check_norms(&self, norms: &[f32], tolerance: f32) -> Result<(), DpError> {
        if norms.len() != self.layers.len() {
            return Err(DpError::Layout {
                reason: format!("{} norms for {} layers", norms.len(), self.layers.len()),
            });
        }
        if super::fault::is(super::fault::PrivacyFault::NoClip) {
            return Ok(());
        }
        let slack = 1.0 + tolerance.max(0.0);
        if self.is_flat() {
            let n = global_norm(norms);
            if !(n <= self.bounds[0] * slack) {
                return Err(DpError::OverBound {
                    layer: "*".into(),
                    norm: n,
                    bound: self.bounds[0],
                });
            }
        } else {
            for ((n, &b), name) in norms.iter().zip(&self.bounds).zip(&self.layers) {
                if !(*n <= b * slack) {
                    return Err(DpError::OverBound {
                        layer: name.clone(),
                        norm: *n,
                        bound: b,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Vec<(String, usize)> {
        vec![("a".into(), 100), ("b".into(), 4), ("c".into(), 1)]
    }

    fn tensors(scale: f32) -> Vec<NamedTensor> {
        layout()
            .iter()
            .enumerate()
            .map(|(i, (n, d))| {
                let data = (0..*d).map(|j| scale * ((i + j) as f32 - 2.0)).collect();
                NamedTensor::new(n, vec![*d], data).unwrap()
            })
            .collect()
    }

    #[test]
    fn per_layer_bounds_keep_total_sensitivity() {
        for s in [
            ClipStrategy::Flat,
            ClipStrategy::PerLayerUniform,
            ClipStrategy::PerLayerDim,
        ] {
            let b = ClipBounds::new(s, 3.0, &layout()).unwrap();
            assert!(
                (b.sensitivity() - 3.0).abs() < 1e-5,
                "{s}: {}",
                b.sensitivity()
            );
        }
        let dim = ClipBounds::new(ClipStrategy::PerLayerDim, 3.0, &layout()).unwrap();
        // Bounds grow with √d: 100 values get 10× the bound of 1 value.
        assert!((dim.bounds()[0] / dim.bounds()[2] - 10.0).abs() < 1e-4);
    }

    #[test]
    fn clipped_norms_never_exceed_bounds() {
        for s in [
            ClipStrategy::Flat,
            ClipStrategy::PerLayerUniform,
            ClipStrategy::PerLayerDim,
        ] {
            let b = ClipBounds::new(s, 0.7, &layout()).unwrap();
            for scale in [1e-4, 0.01, 1.0, 1e3, 1e7] {
                let mut t = tensors(scale);
                b.clip(&mut t).unwrap();
                b.check(&t, 0.0).unwrap();
                let total = global_norm(&layer_norms(&t));
                assert!(f64::from(total) <= b.sensitivity() + 1e-9);
            }
        }
    }

    #[test]
    fn small_updates_are_untouched_and_normalize_hits_the_bound() {
        let b = ClipBounds::new(ClipStrategy::PerLayerUniform, 1e6, &layout()).unwrap();
        let mut t = tensors(0.01);
        b.clip(&mut t).unwrap();
        assert_eq!(t, tensors(0.01));
        let b = ClipBounds::new(ClipStrategy::PerLayerUniform, 1.0, &layout()).unwrap();
        let before = b.normalize(&mut t).unwrap();
        for ((n, &bound), was) in layer_norms(&t).iter().zip(b.bounds()).zip(before) {
            // A zero layer has no direction to scale; it stays zero.
            let want = if was == 0.0 { 0.0 } else { bound };
            assert!((n - want).abs() < 1e-5, "{n} vs {want}");
        }
    }

    #[test]
    fn check_rejects_over_bound_and_bad_layout() {
        let b = ClipBounds::new(ClipStrategy::Flat, 1.0, &layout()).unwrap();
        assert!(matches!(
            b.check(&tensors(10.0), 1e-4),
            Err(DpError::OverBound { .. })
        ));
        let mut nan = tensors(0.0);
        nan[0].data[0] = f32::NAN;
        assert!(b.check(&nan, 1e-4).is_err());
        // Clipping a non-finite contribution zeroes it rather than passing NaN on.
        b.clip(&mut nan).unwrap();
        assert!(nan.iter().all(|t| t.data.iter().all(|v| *v == 0.0)));
        assert!(matches!(
            b.check(&tensors(1.0)[..2], 0.0),
            Err(DpError::Layout { .. })
        ));
        assert!(ClipBounds::new(ClipStrategy::Flat, 0.0, &layout()).is_err());
        assert!(ClipBounds::new(ClipStrategy::Flat, f32::NAN, &layout()).is_err());
    }
}
