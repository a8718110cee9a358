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
//! **One pass over each update.** A server decodes an upload's frame outside any lock
//! ([`UpdateValidator::validate`]: size, header, names, shapes and value counts; nothing
//! copied). The engine checks who sent it for which round, then reads its values once
//! ([`Aggregator::add_received`]): the checksum, each value's finiteness and the sum of
//! its squares are computed while the value goes onto the grid and into the sum. An update
//! refused by that pass (checksum, a NaN, a norm over its bound) is taken back out
//! exactly — integer addition can be undone — and one the host must scale down is taken
//! out and added again scaled; an honest device's update needs neither (it clips with
//! headroom). A refusal made before the pass (a closed round, a duplicate…) is answered
//! only after the checksum is verified ([`ReceivedUpdate::verify_checksum`]), so a
//! corrupted body is never answered as if it were what its sender sent.
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

use std::ops::Range;

use bytes::Bytes;
use hush_device::protocol::{
    checksum_mismatch, claimed_checksum, decode_frame, non_finite, ProtocolError, UpdateHeader,
    UpdateLimits,
};
use hush_models::checkpoint::NamedTensor;
use hush_models::dp::fault::{self, PrivacyFault};
use hush_models::dp::{ClipBounds, DpError};

use crate::value_pass::{pass, Grid, Moments};

/// Bits of the fixed-point grid below the clip bound.
pub const FRACTION_BITS: u32 = 40;

/// The largest magnitude a value takes on the grid: the clip bound plus 1/16 for float
/// slack in the clip (a larger value is clamped to it).
const GRID_LIMIT: i64 = (1 << FRACTION_BITS) + (1 << (FRACTION_BITS - 4));

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

impl From<ProtocolError> for Rejection {
    /// The refusal of a body that does not decode, or whose checksum or values are wrong.
    fn from(e: ProtocolError) -> Self {
        let (status, code) = match &e {
            ProtocolError::TooLarge { .. } => (413, "too_large"),
            ProtocolError::Malformed { .. } => (400, "malformed"),
            ProtocolError::Checksum { .. } => (400, "bad_checksum"),
            ProtocolError::Invalid { .. } => (400, "invalid_update"),
        };
        Rejection::new(status, code, e.to_string())
    }
}

/// Why the pass over an update's values refused it.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Answered, not recorded as the device's report: the body is not what was sent
    /// (checksum) or holds a NaN or an infinity (400), or the sum has no room for it (503);
    /// the device may send it again.
    NotRecorded(Rejection),
    /// A layer (or the whole) over its norm bound: answered (422) and recorded as the
    /// device's report for the round.
    OverBound(Rejection),
}

/// Bytes of the body read per step of the pass (a multiple of the pass's lanes): the
/// checksum reads a block, then the values are read from the L1 cache, and the block of the
/// sum they go into (twice the bytes) fits there too. 8 KiB took the pass from 0.37 to 0.31
/// ms per 4 MB update against 64 KiB blocks (BENCHMARKS.md, "Federated aggregation").
const BLOCK_BYTES: usize = 8 * 1024;

/// An upload as the engine receives it: its frame decoded and checked against the layout
/// ([`decode_frame`]); the checksum and the values are checked in the pass that adds them.
#[derive(Debug, Clone)]
pub struct ReceivedUpdate {
    /// The update's header.
    pub header: UpdateHeader,
    /// Body size in bytes (logged with the report).
    pub bytes: u64,
    body: Bytes,
    /// Each layer's values in `body`.
    values: Vec<Range<usize>>,
    /// The CRC-32 the sender claimed; `None` for an update made in this process.
    checksum: Option<u32>,
}

impl ReceivedUpdate {
    /// Reads the body in order — the checksum over every byte when one was claimed — and
    /// calls `f(layer, first value, bytes)` for each block of a layer's values; returns the
    /// body's CRC-32 when it was computed.
    fn walk(&self, crc: bool, mut f: impl FnMut(usize, usize, &[u8])) -> Option<u32> {
        let mut hasher = crc.then(crc32fast::Hasher::new);
        let body = &self.body[..];
        let mut at = 0;
        for (layer, range) in self.values.iter().enumerate() {
            if let Some(h) = hasher.as_mut() {
                h.update(&body[at..range.start]);
            }
            for (k, block) in body[range.clone()].chunks(BLOCK_BYTES).enumerate() {
                if let Some(h) = hasher.as_mut() {
                    h.update(block);
                }
                f(layer, k * BLOCK_BYTES / 4, block);
            }
            at = range.end;
        }
        hasher.map(|mut h| {
            h.update(&body[at..]);
            h.finalize()
        })
    }

    /// The checksum alone: a refusal made before the values are read is answered only for
    /// a body that is what its sender sent.
    pub fn verify_checksum(&self) -> Result<(), Rejection> {
        match self.checksum {
            Some(claimed) => check_crc(crc32fast::hash(&self.body), claimed),
            None => Ok(()),
        }
    }

    /// Values per layer.
    fn lens(&self) -> impl Iterator<Item = usize> + '_ {
        self.values.iter().map(|r| r.len() / 4)
    }

    /// Layer `layer`'s value `index`.
    fn value(&self, layer: usize, index: usize) -> f32 {
        let at = self.values[layer].start + 4 * index;
        let b = &self.body[at..at + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

fn check_crc(actual: u32, claimed: u32) -> Result<(), Rejection> {
    if actual == claimed {
        Ok(())
    } else {
        Err(checksum_mismatch(actual, claimed).into())
    }
}

/// What an upload gets before the engine sees it, and the rules its values are checked
/// by, from the run's public parameters only (the layout, its bounds and the body limit):
/// a server decodes frames on any thread, outside any lock.
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

    /// Decodes a body's frame ([`decode_frame`]) and reads the claimed checksum (required).
    /// A body whose frame does not decode is refused for its checksum first when that does
    /// not match (a truncated body is named as such).
    pub fn validate(
        &self,
        body: Bytes,
        checksum: Option<&str>,
    ) -> Result<ReceivedUpdate, ProtocolError> {
        if body.len() > self.limits.max_bytes {
            return Err(ProtocolError::TooLarge {
                got: body.len(),
                limit: self.limits.max_bytes,
            });
        }
        let claimed = claimed_checksum(checksum)?;
        let frame = decode_frame(&body, &self.limits).map_err(|e| {
            let actual = crc32fast::hash(&body);
            if actual == claimed {
                e
            } else {
                checksum_mismatch(actual, claimed)
            }
        })?;
        Ok(ReceivedUpdate {
            header: frame.header,
            bytes: body.len() as u64,
            body,
            values: frame.values,
            checksum: Some(claimed),
        })
    }

    /// An update body encoded in this process ([`encode_update`]; an in-process driver),
    /// as the engine receives it: no checksum to verify.
    pub fn received(&self, body: Bytes) -> Result<ReceivedUpdate, ProtocolError> {
        let frame = decode_frame(&body, &self.limits)?;
        Ok(ReceivedUpdate {
            header: frame.header,
            bytes: body.len() as u64,
            body,
            values: frame.values,
            checksum: None,
        })
    }

    /// Reads an update's values without adding them (a replica checks an upload before
    /// queueing it for a group commit): the factor each layer is to be added with, or why
    /// the update is refused.
    pub fn check_values(&self, u: &ReceivedUpdate) -> Result<Vec<f32>, Refusal> {
        let mut moments = vec![Moments::default(); u.values.len()];
        let grid = Grid {
            scale: 1.0,
            scaled: false,
            factor: 1.0,
            limit: 0.0,
            subtract: false,
        };
        let crc = u.walk(u.checksum.is_some(), |l, _, block| {
            pass(block, None, grid, &mut moments[l]);
        });
        self.verdict(u, crc, &moments)
    }

    /// The host's norm re-check of an update whose values were read (checksum `crc` when
    /// one was claimed, `moments` per layer): refused when corrupt or over its bound
    /// (within the tolerance, for float rounding), otherwise the factor each layer is
    /// added with — below 1 to clip away float slack (so it can never raise the
    /// sensitivity), or to the bound when layers are normalized.
    fn verdict(
        &self,
        u: &ReceivedUpdate,
        crc: Option<u32>,
        moments: &[Moments],
    ) -> Result<Vec<f32>, Refusal> {
        if let (Some(actual), Some(claimed)) = (crc, u.checksum) {
            check_crc(actual, claimed).map_err(Refusal::NotRecorded)?;
        }
        if let Some(l) = moments.iter().position(|m| m.non_finite) {
            let (name, _) = &self.limits.layout[l];
            let i = (0..u.values[l].len() / 4)
                .find(|&i| !u.value(l, i).is_finite())
                .unwrap_or(0);
            return Err(Refusal::NotRecorded(
                non_finite(name, i, u.value(l, i)).into(),
            ));
        }
        let norms: Vec<f32> = moments.iter().map(Moments::norm).collect();
        match self.bounds.check_norms(&norms, self.tolerance) {
            Ok(()) => {}
            Err(DpError::OverBound { layer, norm, bound }) => {
                return Err(Refusal::OverBound(Rejection::new(
                    422,
                    "over_norm_bound",
                    format!(
                        "layer `{layer}` has L2 norm {norm}, over its bound {bound}; clip the \
                         update as the task's `clip` says"
                    ),
                )))
            }
            Err(e) => {
                return Err(Refusal::OverBound(Rejection::new(
                    400,
                    "invalid_update",
                    e.to_string(),
                )))
            }
        }
        Ok(self.bounds.factors(&norms, self.normalize))
    }
}

/// How an update was added — each layer's factor, and how many times (twice only under
/// the test-only double-count fault) — so that it can be taken back out exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct Added {
    factors: Vec<f32>,
    times: u32,
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

    /// Whether an update with `lens` values per layer can be added after the `queued`
    /// updates already promised a place (a replica's group commit): its layout matches
    /// and the sum has room.
    fn fits(&self, lens: impl Iterator<Item = usize>, queued: u64) -> Result<(), Rejection> {
        let mut layers = 0;
        let mut same = true;
        for (i, len) in lens.enumerate() {
            layers += 1;
            same &= self.sum.get(i).is_some_and(|s| s.data.len() == len);
        }
        if !same || layers != self.sum.len() {
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

    /// Whether `update` can be added after the `queued` updates already promised a place
    /// (a replica's group commit): its layout matches and the sum has room.
    pub fn admits(&self, update: &ReceivedUpdate, queued: u64) -> Result<(), Rejection> {
        self.fits(update.lens(), queued)
    }

    /// The grid values go onto, scaled by `factor` (and clamped) unless it is 1.
    fn grid(&self, factor: f32, subtract: bool) -> Grid {
        Grid {
            scale: self.scale,
            scaled: factor != 1.0,
            factor,
            limit: GRID_LIMIT as f64,
            subtract,
        }
    }

    /// Adds (or subtracts) layer `layer` of `u`, scaled by `factor`.
    fn pass_layer(&mut self, u: &ReceivedUpdate, layer: usize, factor: f32, subtract: bool) {
        let grid = self.grid(factor, subtract);
        let sum = &mut self.sum[layer].data;
        let body = &u.body[u.values[layer].clone()];
        for (block, s) in body
            .chunks(BLOCK_BYTES)
            .zip(sum.chunks_mut(BLOCK_BYTES / 4))
        {
            pass(block, Some(s), grid, &mut Moments::default());
        }
    }

    /// Adds (or subtracts) every layer of `u` with its factor, `times` times.
    fn pass_all(&mut self, u: &ReceivedUpdate, factors: &[f32], times: u32, subtract: bool) {
        for _ in 0..times {
            for (l, &f) in factors.iter().enumerate() {
                self.pass_layer(u, l, f, subtract);
            }
        }
    }

    /// How many times an update counts: once, or twice under the test-only privacy fault
    /// ([`hush_models::dp::fault`]) that counts it twice.
    fn times() -> u32 {
        if fault::is(PrivacyFault::DoubleCount) {
            2
        } else {
            1
        }
    }

    /// Checks and adds a received update in one pass over its values (module doc): the
    /// checksum, finiteness and norms are computed as the values go into the sum. A refused
    /// update is taken back out exactly; a layer the host scales (clip slack,
    /// normalization) is taken out and added again scaled. One the sum has no room for
    /// ([`Aggregator::admits`]) is refused before the pass.
    pub fn add_received(
        &mut self,
        u: &ReceivedUpdate,
        rules: &UpdateValidator,
    ) -> Result<Added, Refusal> {
        // The checksum first: a refusal is answered only for a body that is what was sent.
        self.admits(u, 0)
            .map_err(|rej| Refusal::NotRecorded(u.verify_checksum().err().unwrap_or(rej)))?;
        if rules.normalize {
            // Every layer is scaled: reading the norms first costs less than undoing.
            let factors = rules.check_values(u)?;
            return Ok(self.add_checked(u, factors));
        }
        let mut moments = vec![Moments::default(); u.values.len()];
        let grid = self.grid(1.0, false);
        let sum = &mut self.sum;
        let crc = u.walk(u.checksum.is_some(), |l, first, block| {
            let s = &mut sum[l].data[first..first + block.len() / 4];
            pass(block, Some(s), grid, &mut moments[l]);
        });
        let factors = match rules.verdict(u, crc, &moments) {
            Ok(f) => f,
            Err(refusal) => {
                let ones = vec![1.0; u.values.len()];
                self.pass_all(u, &ones, 1, true);
                return Err(refusal);
            }
        };
        for (l, &f) in factors.iter().enumerate() {
            if f != 1.0 {
                self.pass_layer(u, l, 1.0, true);
                self.pass_layer(u, l, f, false);
            }
        }
        let times = Self::times();
        self.pass_all(u, &factors, times - 1, false);
        self.accepted += 1;
        Ok(Added { factors, times })
    }

    /// Adds an update whose values were checked already ([`UpdateValidator::check_values`]
    /// gave `factors`; a replica's group commit), one pass over its values.
    pub fn add_checked(&mut self, u: &ReceivedUpdate, factors: Vec<f32>) -> Added {
        let times = Self::times();
        self.pass_all(u, &factors, times, false);
        self.accepted += 1;
        Added { factors, times }
    }

    /// Takes an update added by [`Aggregator::add_received`] or
    /// [`Aggregator::add_checked`] back out, exactly (the store refused to record it).
    pub fn remove(&mut self, u: &ReceivedUpdate, added: &Added) {
        self.pass_all(u, &added.factors, added.times, true);
        self.accepted -= 1;
    }

    /// Adds one update given as tensors (values already checked and clipped: an in-process
    /// caller, or a test); refused unless its layout matches and the sum has room.
    pub fn add(&mut self, update: &[NamedTensor]) -> Result<(), Rejection> {
        self.fits(update.iter().map(|t| t.data.len()), 0)?;
        // Clamped: nothing checked these values' norms here.
        let grid = Grid {
            scaled: true,
            ..self.grid(1.0, false)
        };
        for _ in 0..Self::times() {
            for (s, u) in self.sum.iter_mut().zip(update) {
                let bytes: &[u8] = bytemuck::cast_slice(&u.data);
                pass(bytes, Some(&mut s.data), grid, &mut Moments::default());
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
    use hush_device::protocol::{encode_update, Update};

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
        // A NaN goes to the lower limit (a NaN is refused before it reaches the sum).
        assert_eq!(grid, vec![2, -2, GRID_LIMIT, -GRID_LIMIT, -GRID_LIMIT]);
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
        let v = validator(1.0, false);
        let u = upload(&v, &update([0.1, 0.1], 0.1), true);
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

    /// A validator for `layout()` with one flat bound `c`.
    fn validator(c: f32, normalize: bool) -> UpdateValidator {
        let lay: Vec<(String, Vec<usize>)> = layout();
        let sizes: Vec<(String, usize)> = lay.iter().map(|(n, s)| (n.clone(), s[0])).collect();
        let bounds = ClipBounds::new(hush_models::dp::ClipStrategy::Flat, c, &sizes).unwrap();
        UpdateValidator::new(UpdateLimits::for_layout(lay), bounds, 1e-4, normalize)
    }

    fn update(a: [f32; 2], b: f32) -> Update {
        use hush_device::protocol::{LayerDelta, UPDATE_FORMAT_VERSION};
        Update {
            header: UpdateHeader {
                format_version: UPDATE_FORMAT_VERSION,
                model_version: 0,
                round: 1,
                device_id: 2,
                idempotency_key: Update::key(1, 2),
                layer_norms: vec![0.0; 2],
            },
            layers: vec![
                LayerDelta {
                    name: "a".into(),
                    shape: vec![2],
                    data: a.to_vec(),
                },
                LayerDelta {
                    name: "b".into(),
                    shape: vec![1],
                    data: vec![b],
                },
            ],
        }
    }

    /// `u` as an upload with its checksum (or a wrong one).
    fn upload(v: &UpdateValidator, u: &Update, good_checksum: bool) -> ReceivedUpdate {
        let body = encode_update(u).unwrap();
        let crc = crc32fast::hash(&body) ^ u32::from(!good_checksum);
        v.validate(Bytes::from(body), Some(&format!("{crc:08x}")))
            .unwrap()
    }

    #[test]
    fn one_pass_adds_what_the_tensors_add() {
        let v = validator(1.0, false);
        let mut pass = Aggregator::new(&layout(), 1.0);
        let mut tensors = Aggregator::new(&layout(), 1.0);
        for (a, b) in [([0.6, -0.1], 0.3), ([-1e-9, 0.2], -0.5), ([0.0, 0.0], 0.0)] {
            pass.add_received(&upload(&v, &update(a, b), true), &v)
                .unwrap();
            tensors.add(&t(a, b)).unwrap();
        }
        assert_eq!(pass.to_bytes(), tensors.to_bytes());
        assert_eq!(pass.accepted(), 3);
        // In-process, with no checksum; and checked first, then added (a replica).
        let mut other = Aggregator::new(&layout(), 1.0);
        for (a, b) in [([0.6, -0.1], 0.3), ([-1e-9, 0.2], -0.5)] {
            let body = Bytes::from(encode_update(&update(a, b)).unwrap());
            other.add_received(&v.received(body).unwrap(), &v).unwrap();
        }
        let u = upload(&v, &update([0.0, 0.0], 0.0), true);
        let factors = v.check_values(&u).unwrap();
        other.add_checked(&u, factors);
        assert_eq!(other.to_bytes(), pass.to_bytes());
    }

    #[test]
    fn a_refused_update_leaves_no_trace() {
        let v = validator(1.0, false);
        let mut agg = Aggregator::new(&layout(), 1.0);
        agg.add_received(&upload(&v, &update([0.5, 0.5], 0.1), true), &v)
            .unwrap();
        let before = agg.to_bytes();
        let over = agg
            .add_received(&upload(&v, &update([1.0, 1.0], 0.0), true), &v)
            .unwrap_err();
        let Refusal::OverBound(r) = over else {
            panic!("{over:?}")
        };
        assert_eq!((r.status, r.code), (422, "over_norm_bound"));
        let corrupt = agg
            .add_received(&upload(&v, &update([0.1, 0.1], 0.1), false), &v)
            .unwrap_err();
        let Refusal::NotRecorded(r) = corrupt else {
            panic!("{corrupt:?}")
        };
        assert_eq!((r.status, r.code), (400, "bad_checksum"));
        let nan = agg
            .add_received(&upload(&v, &update([0.1, f32::NAN], 0.1), true), &v)
            .unwrap_err();
        let Refusal::NotRecorded(r) = nan else {
            panic!("{nan:?}")
        };
        assert_eq!((r.status, r.code), (400, "invalid_update"));
        assert!(
            r.error.contains("layers[a].data") && r.error.contains("value 1"),
            "{r:?}"
        );
        assert_eq!(agg.to_bytes(), before);
        assert_eq!(agg.accepted(), 1);
        // Taken back out after it was added (the store refused to record it).
        let u = upload(&v, &update([0.3, -0.2], 0.25), true);
        let added = agg.add_received(&u, &v).unwrap();
        assert_ne!(agg.to_bytes(), before);
        agg.remove(&u, &added);
        assert_eq!((agg.to_bytes(), agg.accepted()), (before, 1));
    }

    #[test]
    fn float_slack_is_clipped_and_layers_are_normalized_as_the_bounds_say() {
        // Norm 1 + 5e-5: within the tolerance, so accepted, and clipped to the bound.
        let (a, b) = ([0.6 * (1.0 + 5e-5), 0.8 * (1.0 + 5e-5)], 0.0);
        for normalize in [false, true] {
            let v = validator(1.0, normalize);
            let mut agg = Aggregator::new(&layout(), 1.0);
            agg.add_received(&upload(&v, &update(a, b), true), &v)
                .unwrap();
            let mut want = t(a, b);
            let names: Vec<(String, usize)> = vec![("a".into(), 2), ("b".into(), 1)];
            let bounds = ClipBounds::new(hush_models::dp::ClipStrategy::Flat, 1.0, &names).unwrap();
            if normalize {
                bounds.normalize(&mut want).unwrap();
            } else {
                bounds.clip(&mut want).unwrap();
            }
            let mut reference = Aggregator::new(&layout(), 1.0);
            reference.add(&want).unwrap();
            assert_eq!(
                agg.to_bytes(),
                reference.to_bytes(),
                "normalize {normalize}"
            );
        }
        // A small update is normalized up to the bound.
        let v = validator(1.0, true);
        let mut agg = Aggregator::new(&layout(), 1.0);
        agg.add_received(&upload(&v, &update([0.3, 0.0], 0.0), true), &v)
            .unwrap();
        let s = agg.into_sum();
        assert!((s[0].data[0] - 1.0).abs() < 1e-5, "{:?}", s[0].data);
    }

    #[test]
    fn a_truncated_body_is_named_by_its_checksum() {
        let v = validator(1.0, false);
        let body = encode_update(&update([0.1, 0.1], 0.1)).unwrap();
        let crc = format!("{:08x}", crc32fast::hash(&body));
        let cut = Bytes::copy_from_slice(&body[..body.len() - 3]);
        let e = v.validate(cut.clone(), Some(&crc)).unwrap_err();
        assert!(matches!(e, ProtocolError::Checksum { .. }), "{e:?}");
        let own = format!("{:08x}", crc32fast::hash(&cut));
        let e = v.validate(cut, Some(&own)).unwrap_err();
        assert!(matches!(e, ProtocolError::Malformed { .. }), "{e:?}");
        let e = v.validate(Bytes::from(body), None).unwrap_err();
        assert!(matches!(e, ProtocolError::Checksum { .. }), "{e:?}");
    }
}
