//! The streaming sum of a round's accepted updates, in O(model) memory: each update is
//! checked, clipped (a no-op for an honest device), optionally normalized, added to the
//! running sum and dropped. Nothing else about an update is kept.
//!
//! The checks on an upload, in order, and the reply each failure gets:
//!
//! | check | status | code |
//! |---|---|---|
//! | the same idempotency key was already accepted | 200 | receipt with `duplicate: true` |
//! | the round in the path matches the header | 400 | `round_mismatch` |
//! | the device in the header is the token's | 403 | `device_mismatch` |
//! | the round is the open one | 409 / 404 | `round_closed` / `unknown_round` |
//! | the device was drawn into the cohort | 403 | `not_in_cohort` |
//! | the update starts from the round's model | 409 | `stale_model` |
//! | every layer (or the whole, flat) within its bound ([`ClipBounds::check`]) | 422 | `over_norm_bound` |
//!
//! The divisor of the sum is never the number of updates received: it is the expected
//! cohort, applied in [`hush_models::dp::GaussianMechanism::privatize`], so dropouts never
//! change it.

use hush_device::protocol::Update;
use hush_models::checkpoint::NamedTensor;
use hush_models::dp::{ClipBounds, DpError};

/// Why an upload was refused, with its HTTP status and code.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// HTTP status.
    pub status: u16,
    /// `ApiError::code`.
    pub code: &'static str,
    /// `ApiError::error`.
    pub error: String,
}

impl Rejection {
    /// A rejection.
    pub fn new(status: u16, code: &'static str, error: impl Into<String>) -> Self {
        Self {
            status,
            code,
            error: error.into(),
        }
    }
}

/// The running sum of one round.
#[derive(Debug, Clone)]
pub struct Aggregator {
    sum: Vec<NamedTensor>,
    accepted: u64,
}

/// An update's layers as named tensors (moving the data, no copy).
pub fn update_tensors(update: Update) -> Vec<NamedTensor> {
    update
        .layers
        .into_iter()
        .map(|l| NamedTensor {
            name: l.name,
            shape: l.shape.iter().map(|&d| d as usize).collect(),
            data: l.data,
        })
        .collect()
}

/// The host's norm re-check of a decoded update, then clip (and normalize when asked) so
/// that float slack can never raise the sensitivity. Over the bound → `over_norm_bound`.
pub fn check_norms(
    tensors: &mut [NamedTensor],
    bounds: &ClipBounds,
    tolerance: f32,
    normalize: bool,
) -> Result<(), Rejection> {
    match bounds.check(tensors, tolerance) {
        Ok(()) => {}
        Err(DpError::OverBound { layer, norm, bound }) => {
            return Err(Rejection::new(
                422,
                "over_norm_bound",
                format!(
                    "layer `{layer}` has L2 norm {norm}, over its bound {bound}; clip the update \
                     as the task's `clip` says"
                ),
            ))
        }
        Err(e) => return Err(Rejection::new(400, "invalid_update", e.to_string())),
    }
    let r = if normalize {
        bounds.normalize(tensors)
    } else {
        bounds.clip(tensors)
    };
    r.map(|_| ())
        .map_err(|e| Rejection::new(400, "invalid_update", e.to_string()))
}

impl Aggregator {
    /// An empty sum over `layout` (name, shape).
    pub fn new(layout: &[(String, Vec<usize>)]) -> Self {
        Self {
            sum: layout
                .iter()
                .map(|(n, s)| NamedTensor {
                    name: n.clone(),
                    shape: s.clone(),
                    data: vec![0.0; s.iter().product()],
                })
                .collect(),
            accepted: 0,
        }
    }

    /// Adds one checked update (same layout; checked by `decode_update` and
    /// [`check_norms`]) and drops it.
    pub fn add(&mut self, update: Vec<NamedTensor>) -> Result<(), Rejection> {
        if update.len() != self.sum.len()
            || update
                .iter()
                .zip(&self.sum)
                .any(|(u, s)| u.name != s.name || u.data.len() != s.data.len())
        {
            return Err(Rejection::new(
                400,
                "invalid_update",
                "the update's layers do not match the model",
            ));
        }
        for (s, u) in self.sum.iter_mut().zip(update) {
            for (a, b) in s.data.iter_mut().zip(u.data) {
                *a += b;
            }
        }
        self.accepted += 1;
        Ok(())
    }

    /// Updates added so far.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// The sum (to be privatized).
    pub fn into_sum(self) -> Vec<NamedTensor> {
        self.sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Vec<(String, Vec<usize>)> {
        vec![("a".into(), vec![2]), ("b".into(), vec![1])]
    }

    fn t(a: [f32; 2], b: f32) -> Vec<NamedTensor> {
        vec![
            NamedTensor::new("a", vec![2], a.to_vec()).unwrap(),
            NamedTensor::new("b", vec![1], vec![b]).unwrap(),
        ]
    }

    #[test]
    fn sums_and_counts() {
        let mut agg = Aggregator::new(&layout());
        agg.add(t([1.0, 2.0], 3.0)).unwrap();
        agg.add(t([0.5, -2.0], 1.0)).unwrap();
        assert_eq!(agg.accepted(), 2);
        let s = agg.into_sum();
        assert_eq!(s[0].data, vec![1.5, 0.0]);
        assert_eq!(s[1].data, vec![4.0]);
    }

    #[test]
    fn over_bound_is_rejected_and_within_is_clipped() {
        let names: Vec<(String, usize)> = vec![("a".into(), 2), ("b".into(), 1)];
        let bounds = ClipBounds::new(hush_models::dp::ClipStrategy::Flat, 1.0, &names).unwrap();
        let mut over = t([1.0, 1.0], 0.0);
        let r = check_norms(&mut over, &bounds, 1e-4, false).unwrap_err();
        assert_eq!((r.status, r.code), (422, "over_norm_bound"));
        let mut ok = t([0.6, 0.8], 0.0);
        check_norms(&mut ok, &bounds, 1e-4, false).unwrap();
        let mut small = t([0.3, 0.0], 0.0);
        check_norms(&mut small, &bounds, 1e-4, true).unwrap();
        assert!(
            (small[0].data[0] - 1.0).abs() < 1e-5,
            "normalized to the bound"
        );
    }
}
