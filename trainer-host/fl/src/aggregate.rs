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
//! | the sum has room (at most [`MAX_UPDATES`] per round) | 503 | `round_full` |
//!
//! Decoding and the norm re-check need only the round's public parameters
//! ([`UpdateValidator`]), so a server runs them on its own threads, outside any lock; the
//! engine then checks who sent it for which round and adds it.
//!
//! **The sum is order-free.** Each value is truncated toward zero onto a fixed-point grid
//! of `2^-40` times the clip bound and added as an `i64`: integer addition is associative,
//! so the sum — and the noise added to it, and the released model — do not depend on the
//! order updates arrived in or on how partial sums were split across threads. Truncation
//! never raises a value's magnitude, so it never raises an update's norm (the sensitivity
//! holds), and the grid step is about `10^-12 C` against noise of `z·C`.
//!
//! The divisor of the sum is never the number of updates received: it is the expected
//! cohort, applied in [`hush_models::dp::GaussianMechanism::privatize`], so dropouts never
//! change it.

use hush_device::protocol::{decode_update, ProtocolError, Update, UpdateHeader, UpdateLimits};
use hush_models::checkpoint::NamedTensor;
use hush_models::dp::fault::{self, PrivacyFault};
use hush_models::dp::{ClipBounds, DpError};

/// Bits of the fixed-point grid below the clip bound.
pub const FRACTION_BITS: u32 = 40;

/// Most updates one round's sum can hold: each value is at most `2^40` on the grid, so
/// `2^22` of them stay below `2^62`, leaving room for float slack in the clip.
pub const MAX_UPDATES: u64 = 1 << (62 - FRACTION_BITS);

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

/// An upload decoded and norm-checked by [`UpdateValidator`], waiting for the engine to
/// check its sender and round: the header, the body size, and either the clipped layers or
/// why their norms were refused.
#[derive(Debug, Clone)]
pub struct CheckedUpdate {
    /// The update's header.
    pub header: UpdateHeader,
    /// Body size in bytes (logged with the report).
    pub bytes: u64,
    pub(crate) layers: Result<Vec<NamedTensor>, Rejection>,
}

/// The checks an upload gets before the engine sees it, from the run's public parameters
/// only (the layout, its bounds and the body limit): a server calls it on any thread,
/// outside any lock.
#[derive(Debug, Clone)]
pub struct UpdateValidator {
    /// Largest body and expected layout.
    pub limits: UpdateLimits,
    bounds: ClipBounds,
    tolerance: f32,
    normalize: bool,
}

impl UpdateValidator {
    /// A validator for `limits` and `bounds`, with the config's norm tolerance and
    /// layer-normalization switch.
    pub fn new(limits: UpdateLimits, bounds: ClipBounds, tolerance: f32, normalize: bool) -> Self {
        Self {
            limits,
            bounds,
            tolerance,
            normalize,
        }
    }

    /// Decodes a body (size, checksum, layout; [`decode_update`]) and checks its norms.
    pub fn validate(
        &self,
        body: &[u8],
        checksum: Option<&str>,
    ) -> Result<CheckedUpdate, ProtocolError> {
        let update = decode_update(body, checksum, &self.limits)?;
        Ok(self.check(update, body.len() as u64))
    }

    /// Checks the norms of an update already decoded (an in-process driver).
    pub fn check(&self, update: Update, bytes: u64) -> CheckedUpdate {
        let header = update.header.clone();
        let mut tensors = update_tensors(update);
        let layers = check_norms(&mut tensors, &self.bounds, self.tolerance, self.normalize)
            .map(|()| tensors);
        CheckedUpdate {
            header,
            bytes,
            layers,
        }
    }
}

/// One layer of the running sum, on the fixed-point grid.
#[derive(Debug, Clone)]
struct FixedLayer {
    name: String,
    shape: Vec<usize>,
    data: Vec<i64>,
}

/// The running sum of one round, order-free (see the module doc).
#[derive(Debug, Clone)]
pub struct Aggregator {
    sum: Vec<FixedLayer>,
    /// Grid steps per unit: `2^40 / C`.
    scale: f64,
    accepted: u64,
}

impl Aggregator {
    /// An empty sum over `layout` (name, shape) for updates of total L2 norm at most
    /// `bound` (the clip's sensitivity: no value of a clipped update is larger).
    pub fn new(layout: &[(String, Vec<usize>)], bound: f64) -> Self {
        Self {
            sum: layout
                .iter()
                .map(|(n, s)| FixedLayer {
                    name: n.clone(),
                    shape: s.clone(),
                    data: vec![0; s.iter().product()],
                })
                .collect(),
            scale: (1u64 << FRACTION_BITS) as f64 / bound,
            accepted: 0,
        }
    }

    /// Whether `update` can be added after the `queued` updates already promised a place
    /// (a replica's group commit): its layout matches and the sum has room.
    pub fn admits(&self, update: &[NamedTensor], queued: u64) -> Result<(), Rejection> {
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
        if self.accepted.saturating_add(queued) >= MAX_UPDATES {
            return Err(Rejection::new(
                503,
                "round_full",
                format!("this round already holds {MAX_UPDATES} updates, the most one sum can"),
            ));
        }
        Ok(())
    }

    /// Adds one checked update (checked by `decode_update` and [`check_norms`]; refused
    /// unless [`Aggregator::admits`] it); nothing of it is kept.
    pub fn add(&mut self, update: &[NamedTensor]) -> Result<(), Rejection> {
        self.admits(update, 0)?;
        let limit = (1i64 << FRACTION_BITS) + (1i64 << (FRACTION_BITS - 4));
        // A test-only privacy fault (hush_models::dp::fault): the update counted twice.
        let times = if fault::is(PrivacyFault::DoubleCount) {
            2
        } else {
            1
        };
        for (s, u) in self.sum.iter_mut().zip(update) {
            for (a, b) in s.data.iter_mut().zip(&u.data) {
                // Truncation toward zero by the cast itself (`as` truncates and saturates;
                // a NaN becomes 0; an explicit `trunc()` first is a libm call per value on
                // x86-64 without SSE4.1, and doubled this loop's time); the clamp only guards
                // against a value the clip let through with float slack.
                let q = ((f64::from(*b) * self.scale) as i64).clamp(-limit, limit);
                *a += times * q;
            }
        }
        self.accepted += 1;
        Ok(())
    }

    /// Updates added so far.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// The sum's grid values as little-endian `i64`s, layer after layer (a replica's
    /// partial sum as the database keeps it; [`Aggregator::add_partial`] reads it back).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 * self.sum.iter().map(|l| l.data.len()).sum::<usize>());
        for l in &self.sum {
            for v in &l.data {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Adds another partial sum of the same layout (from [`Aggregator::to_bytes`]) holding
    /// `accepted` updates: integer addition, so the total is the one a single sum of
    /// every update would hold, however they were split.
    pub fn add_partial(&mut self, bytes: &[u8], accepted: u64) -> Result<(), String> {
        let values: usize = self.sum.iter().map(|l| l.data.len()).sum();
        if bytes.len() != 8 * values {
            return Err(format!(
                "a partial sum of {} bytes does not fit the model's {values} values",
                bytes.len()
            ));
        }
        let mut chunks = bytes.chunks_exact(8);
        for l in &mut self.sum {
            for (a, c) in l.data.iter_mut().zip(&mut chunks) {
                let v = i64::from_le_bytes(c.try_into().expect("chunks of 8"));
                *a = a
                    .checked_add(v)
                    .ok_or_else(|| "partial sums overflow the grid".to_string())?;
            }
        }
        self.accepted += accepted;
        Ok(())
    }

    /// The sum as floats (to be privatized).
    pub fn into_sum(self) -> Vec<NamedTensor> {
        let scale = self.scale;
        self.sum
            .into_iter()
            .map(|l| NamedTensor {
                name: l.name,
                shape: l.shape,
                data: l.data.iter().map(|&v| (v as f64 / scale) as f32).collect(),
            })
            .collect()
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
    fn values_go_onto_the_grid_truncated_toward_zero_and_clamped() {
        // Bound 1: the grid step is 2^-40, so 2.5 steps truncate to 2 and -2.5 to -2.
        let step = 1.0 / (1u64 << FRACTION_BITS) as f64;
        let layout = vec![("a".to_string(), vec![5])];
        let mut agg = Aggregator::new(&layout, 1.0);
        let values = [2.5 * step, -2.5 * step, 3.0, -3.0, f64::NAN];
        agg.add(&[NamedTensor {
            name: "a".into(),
            shape: vec![5],
            data: values.iter().map(|&v| v as f32).collect(),
        }])
        .unwrap();
        let grid: Vec<i64> = agg
            .to_bytes()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let limit = (1i64 << FRACTION_BITS) + (1i64 << (FRACTION_BITS - 4));
        assert_eq!(grid, vec![2, -2, limit, -limit, 0]);
    }

    #[test]
    fn sums_and_counts() {
        let mut agg = Aggregator::new(&layout(), 4.0);
        agg.add(&t([1.0, 2.0], 3.0)).unwrap();
        agg.add(&t([0.5, -2.0], 1.0)).unwrap();
        assert_eq!(agg.accepted(), 2);
        let s = agg.into_sum();
        assert_eq!(s[0].data, vec![1.5, 0.0]);
        assert_eq!(s[1].data, vec![4.0]);
    }

    #[test]
    fn the_sum_is_the_same_bits_in_any_order_and_any_split() {
        // Values whose float sum depends on the order: (big + tiny) - big loses tiny.
        let updates: Vec<Vec<NamedTensor>> = (0..50)
            .map(|i| {
                let x = ((i * 7919) % 101) as f32 / 97.0 - 0.5;
                t(
                    [x * 1e-3, (x * 37.0).sin() * 0.3],
                    if i % 2 == 0 { 0.9 } else { 1e-7 * x },
                )
            })
            .collect();
        let bits = |order: &[usize]| -> Vec<u32> {
            let mut agg = Aggregator::new(&layout(), 1.0);
            for &i in order {
                agg.add(&updates[i]).unwrap();
            }
            agg.into_sum()
                .iter()
                .flat_map(|l| l.data.iter().map(|v| v.to_bits()))
                .collect()
        };
        let forward: Vec<usize> = (0..50).collect();
        let backward: Vec<usize> = (0..50).rev().collect();
        let shuffled: Vec<usize> = (0..50).map(|i| (i * 17) % 50).collect();
        assert_eq!(bits(&forward), bits(&backward));
        assert_eq!(bits(&forward), bits(&shuffled));
        // Within the grid step of the exact (f64) sum.
        let mut agg = Aggregator::new(&layout(), 1.0);
        for u in &updates {
            agg.add(u).unwrap();
        }
        let got = agg.into_sum();
        let exact: f64 = updates.iter().map(|u| f64::from(u[0].data[1])).sum();
        assert!((f64::from(got[0].data[1]) - exact).abs() < 1e-6, "{exact}");
    }

    #[test]
    fn room_is_counted_with_the_updates_already_queued() {
        let agg = Aggregator::new(&layout(), 1.0);
        let u = t([0.1, 0.1], 0.1);
        assert!(agg.admits(&u, MAX_UPDATES - 1).is_ok());
        let full = agg.admits(&u, MAX_UPDATES).unwrap_err();
        assert_eq!((full.status, full.code), (503, "round_full"));
    }

    #[test]
    fn truncation_never_raises_a_value() {
        let mut agg = Aggregator::new(&[("a".into(), vec![3])], 1.0);
        agg.add(&[NamedTensor::new("a", vec![3], vec![0.3, -0.7, 1e-13]).unwrap()])
            .unwrap();
        let s = agg.into_sum();
        assert!(s[0].data[0] <= 0.3 && s[0].data[0] > 0.3 - 1e-6);
        assert!(s[0].data[1] >= -0.7 && s[0].data[1] < -0.7 + 1e-6);
        assert_eq!(s[0].data[2], 0.0, "below the grid step");
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
