//! Privacy costs that are not a subsampled Gaussian: an RDP bound known only at some orders,
//! and a δ spent outright.
//!
//! Two of hush's releases need them. PATE's smooth-sensitivity release of the data-dependent
//! ε (GNSS, Papernot et al. 2018, Thm 23) is RDP only at orders `1 < α < 1/(2β)`, unbounded
//! above, so no Gaussian bounds it. PATE-ASR's thresholded transcript vote lets a transcript
//! that only one teacher produced through with a small probability `δ'` per utterance: that
//! probability is δ spent outright, not part of any RDP curve. [`AdditionalCost`] carries
//! both into the [`super::PrivacyAccountant`] (and so into the ledger's totals):
//!
//! - the RDP part adds its bound at every order the accountant evaluates; an order that is
//!   not listed takes the value of the next listed order above it (RDP never decreases with
//!   the order), and an order above every listed one is unbounded;
//! - the δ part is subtracted from the δ at which the composed RDP (or PLD) is converted to
//!   ε: a mechanism that is `(ε, δ₁)`-DP composed with a failure event of probability `δ₂`
//!   is `(ε, δ₁ + δ₂)`-DP.

use serde::{Deserialize, Serialize};

use super::validate::invalid;
use super::AccountantError;

/// A privacy cost beside the Gaussian events: RDP at listed orders, and δ spent outright.
/// The default is no cost.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AdditionalCost {
    /// `(order, rdp)` pairs in increasing order: an upper bound of the mechanism's RDP at
    /// each listed order. Empty: no RDP part (not "unbounded").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rdp: Vec<(f64, f64)>,
    /// δ spent outright, in `[0, 1)`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delta: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

impl AdditionalCost {
    /// No additional cost.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether there is nothing to add.
    pub fn is_none(&self) -> bool {
        self.rdp.is_empty() && self.delta == 0.0
    }

    /// An RDP bound known at `points` (`(order, rdp)` pairs, orders increasing).
    pub fn rdp_at_orders(points: Vec<(f64, f64)>) -> Result<Self, AccountantError> {
        if points.is_empty() {
            return Err(invalid(
                "rdp",
                "no orders",
                "at least one (order, rdp) pair",
            ));
        }
        Self {
            rdp: points,
            delta: 0.0,
        }
        .validated()
    }

    /// δ spent outright.
    pub fn delta_spent(delta: f64) -> Result<Self, AccountantError> {
        Self {
            rdp: Vec::new(),
            delta,
        }
        .validated()
    }

    /// Checks a value built field by field (or read back from storage): orders finite,
    /// above 1 and strictly increasing; RDP values finite and ≥ 0; δ in `[0, 1)`.
    pub fn validated(self) -> Result<Self, AccountantError> {
        let mut previous = 1.0;
        for &(order, rdp) in &self.rdp {
            if !(order.is_finite() && order > previous) {
                return Err(invalid(
                    "rdp order",
                    order,
                    "finite, above 1 and above the previous order",
                ));
            }
            if !(rdp.is_finite() && rdp >= 0.0) {
                return Err(invalid("rdp", rdp, "a finite number >= 0"));
            }
            previous = order;
        }
        if !(self.delta.is_finite() && (0.0..1.0).contains(&self.delta)) {
            return Err(invalid("delta spent", self.delta, "a number in [0, 1)"));
        }
        Ok(self)
    }

    /// Upper bound of the RDP part at `order`: the value at the smallest listed order
    /// `>= order`, `+∞` above every listed order, 0 without an RDP part.
    pub fn rdp_bound(&self, order: f64) -> f64 {
        if self.rdp.is_empty() {
            return 0.0;
        }
        self.rdp
            .iter()
            .find(|(o, _)| *o >= order)
            .map_or(f64::INFINITY, |(_, r)| *r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlisted_orders_take_the_next_listed_value_and_are_unbounded_above() {
        let c = AdditionalCost::rdp_at_orders(vec![(2.0, 0.5), (4.0, 0.9)]).unwrap();
        assert_eq!(c.rdp_bound(1.5), 0.5);
        assert_eq!(c.rdp_bound(2.0), 0.5);
        assert_eq!(c.rdp_bound(3.0), 0.9);
        assert_eq!(c.rdp_bound(4.0), 0.9);
        assert_eq!(c.rdp_bound(4.5), f64::INFINITY);
        assert_eq!(
            AdditionalCost::delta_spent(1e-6).unwrap().rdp_bound(64.0),
            0.0
        );
    }

    #[test]
    fn malformed_costs_are_refused_by_name() {
        let bad = [
            AdditionalCost::rdp_at_orders(vec![]),
            AdditionalCost::rdp_at_orders(vec![(1.0, 0.1)]),
            AdditionalCost::rdp_at_orders(vec![(3.0, 0.1), (2.0, 0.2)]),
            AdditionalCost::rdp_at_orders(vec![(2.0, -0.1)]),
            AdditionalCost::rdp_at_orders(vec![(2.0, f64::NAN)]),
            AdditionalCost::delta_spent(1.0),
            AdditionalCost::delta_spent(-1e-9),
        ];
        for b in bad {
            let e = b.unwrap_err().to_string();
            assert!(e.contains("rdp") || e.contains("delta spent"), "{e}");
        }
    }
}
