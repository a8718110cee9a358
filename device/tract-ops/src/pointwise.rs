//! Pointwise (1×1) convolution over channels-first f32 data, as a tract op
//! ([`PointwiseNchw`]) that replaces the einsum tract's declutter pass makes of a 1×1 `Conv`
//! (`NIHW,OI->NOHW`): every output channel a weighted sum of the input channels, position
//! by position.
//!
//! tract runs that einsum as a packed matrix product: each call copies the whole input
//! into the kernel's panel layout first (on x86-64 with AVX-512, 48 positions a panel,
//! through a generic loop that took half as long as the product itself on DS-CNN-S's
//! 64 × 980 blocks). Here the product reads the input where it lies: a channel's positions
//! are contiguous in NCHW data, so a tile of a few output channels × a few SIMD vectors of
//! positions is accumulated in registers, one input channel after another, each input
//! vector loaded once for all the tile's output channels and each weight broadcast once
//! for all its vectors. A tile reads the input channels' rows over its positions
//! (`channels × vectors` values, a few KiB) and the weights (laid out input channel by
//! input channel, so a tile's weights for one input channel are adjacent); both stay in
//! the L1 cache while the output channels' tiles go by. No packing, no scratch. The input
//! rows may also start anywhere in one buffer and overlap: [`crate::dense`] reads a
//! convolution's (channel, tap) rows in place from the padded planes that way.
//!
//! A batch norm after the product (a per-channel multiply and add) and a ReLU after that
//! are folded into the op, as [`crate::depthwise`] folds them: the weights are scaled and
//! the bias shifted once when the model is prepared, the ReLU applied as outputs are
//! stored.

use tract_core::internal::*;
use tract_core::ops::einsum::EinSum;

use crate::affine::{Affine, Chain};
use crate::{replace, KeepsOutput, KeptOutput, Swap};

/// A 1×1 convolution over channels-first f32 data: `[.., inputs, ..]` to `[.., outputs,
/// ..]` along axis `axis`, the axes before it images, the axes after it positions; the
/// output without the first `drop` axes of the images, of size 1 (tract's einsum of a
/// batch of one to an output without its batch axis). Inputs:
/// the images, the weights `[inputs, outputs]` (input channel by input channel), the bias
/// `[outputs]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PointwiseNchw {
    /// The channel axis of the images.
    pub axis: usize,
    /// Leading axes of size 1 of the images that the output does not have.
    pub drop: usize,
    /// Input channels.
    pub inputs: usize,
    /// Output channels.
    pub outputs: usize,
    /// Whether a ReLU follows, applied as outputs are stored.
    pub relu: bool,
}

impl PointwiseNchw {
    /// The op for `einsum` at `node`, its weights `[inputs, outputs]` and which of the
    /// einsum's inputs holds the images, when it is a pointwise convolution this op runs:
    /// f32 images `[.., I, ..]` times constant weights `OI` (or `IO`) summed over `I`,
    /// giving `[.., O, ..]` with every other axis in place. The weights may be either input
    /// (tract's declutter pass writes a pulsed trunk's products weights first).
    pub fn for_einsum(
        model: &TypedModel,
        node: &TypedNode,
        einsum: &EinSum,
    ) -> Option<(Self, Vec<f32>, usize)> {
        let e = EinsumOfConv::of(model, node, einsum)?;
        let drop = e.dropped.len();
        let in_place = e.kept.iter().all(|&(x, y)| x == y + drop);
        if !e.dropped.iter().all(|&x| x < drop)
            || e.merged > 0
            || !in_place
            || e.added > 0
            || e.summed != e.produced + drop
            || e.out_rank + drop != e.rank
        {
            return None;
        }
        let op = PointwiseNchw {
            axis: e.summed,
            drop,
            inputs: e.inputs,
            outputs: e.outputs,
            relu: false,
        };
        Some((op, e.weights, e.images))
    }

    /// Replaces `node` (an `einsum` this op runs, else nothing happens) by this op, with
    /// the per-channel multiplies and adds and the ReLU that follow it alone folded in.
    /// Returns what it did, or `None` if `node` stays tract's.
    pub fn swap(model: &mut TypedModel, node: usize, einsum: &EinSum) -> TractResult<Option<Swap>> {
        let Some((op, weights, images)) = Self::for_einsum(model, model.node(node), einsum) else {
            return Ok(None);
        };
        let axis = op.axis - op.drop;
        let (inputs, outputs) = (op.inputs, op.outputs);
        swap_product(
            model,
            node,
            images,
            axis,
            [inputs, outputs],
            weights,
            |relu| PointwiseNchw { relu, ..op },
        )
        .map(Some)
    }

    /// The output's shape for images of `shape`.
    fn output_shape<D: DimLike>(&self, shape: &[D]) -> TractResult<TVec<D>> {
        ensure!(
            shape.len() > self.axis && shape[self.axis] == D::from(self.inputs),
            "images of shape {shape:?}; expected {} channels on axis {}",
            self.inputs,
            self.axis
        );
        let mut out: TVec<D> = shape[self.drop..].into();
        out[self.axis - self.drop] = D::from(self.outputs);
        Ok(out)
    }

    /// Multiplies `images` (whole images of `inputs` channels × `positions`) by `weights`
    /// (`[inputs, outputs]`) plus `bias` (`[outputs]`), into `out` (whole images of
    /// `outputs` channels × `positions`).
    pub fn run(
        &self,
        images: &[f32],
        weights: &[f32],
        bias: &[f32],
        positions: usize,
        out: &mut [f32],
    ) -> TractResult<()> {
        let (i, o) = (self.inputs, self.outputs);
        if images.is_empty() && out.is_empty() {
            return Ok(());
        }
        ensure!(
            positions > 0
                && images.len().is_multiple_of(i * positions)
                && out.len() == images.len() / i * o,
            "{} values in and room for {} out are not whole images of {i} and {o} channels × \
             {positions} positions",
            images.len(),
            out.len()
        );
        self.check_weights(weights, bias)?;
        for (images, out) in images
            .chunks_exact(i * positions)
            .zip(out.chunks_exact_mut(o * positions))
        {
            pulp::Arch::new().dispatch(Product::<false> {
                op: self,
                images,
                starts: &[],
                weights,
                bias,
                positions,
                out,
            });
        }
        Ok(())
    }

    /// That `weights` are `[inputs, outputs]` and `bias` `[outputs]`.
    fn check_weights(&self, weights: &[f32], bias: &[f32]) -> TractResult<()> {
        let (i, o) = (self.inputs, self.outputs);
        ensure!(
            weights.len() == i * o && bias.len() == o,
            "{} weights and {} biases; expected {i} × {o} and {o}",
            weights.len(),
            bias.len()
        );
        Ok(())
    }

    /// One image's product over input rows that start anywhere in `images`: row `r` the
    /// `positions` values from `starts[r]` on (rows may overlap, as the taps of a
    /// convolution's window read the same plane shifted). `out` holds `outputs` channels
    /// × `positions`.
    pub(crate) fn run_rows(
        &self,
        images: &[f32],
        starts: &[usize],
        weights: &[f32],
        bias: &[f32],
        positions: usize,
        out: &mut [f32],
    ) -> TractResult<()> {
        let (i, o) = (self.inputs, self.outputs);
        self.check_weights(weights, bias)?;
        ensure!(
            starts.len() == i
                && starts.iter().all(|&s| s + positions <= images.len())
                && out.len() == o * positions,
            "{} rows of {positions} positions in {} values, room for {} out; expected {i} \
             rows and {o} × {positions} out",
            starts.len(),
            images.len(),
            out.len()
        );
        if positions > 0 {
            pulp::Arch::new().dispatch(Product::<true> {
                op: self,
                images,
                starts,
                weights,
                bias,
                positions,
                out,
            });
        }
        Ok(())
    }
}

/// Replaces einsum `node` (its images at input `images`) by the op `make` gives, with the
/// per-channel multiplies and adds and the ReLU that follow it along `axis` alone folded
/// into its `weights` (`[inputs, outputs]`) and a bias: `make` is told whether a ReLU
/// follows. Shared by the channels-first and channels-last pointwise ops.
pub(crate) fn swap_product<O: TypedOp>(
    model: &mut TypedModel,
    node: usize,
    images: usize,
    axis: usize,
    [inputs, outputs]: [usize; 2],
    weights: Vec<f32>,
    make: impl FnOnce(bool) -> O,
) -> TractResult<Swap> {
    let chain = Chain::after(model, node, axis, outputs)?;
    let Affine { scale, shift, relu } = chain.affine;
    let weights: Vec<f32> = weights
        .iter()
        .enumerate()
        .map(|(at, w)| w * scale[at % outputs])
        .collect();
    let weights = Tensor::from_shape(&[inputs, outputs], &weights)?;
    let bias = Tensor::from_shape(&[outputs], &shift)?;
    replace(model, node, images, chain.last, make(relu), [weights, bias])?;
    Ok(Swap { folded: chain.ops })
}

/// An einsum as a 1×1 convolution, in whatever layout: f32 images times constant weights
/// `OI` or `IO` (either input), summed over the images' channel axis; what each layout's op
/// checks further.
pub(crate) struct EinsumOfConv {
    /// Which of the einsum's inputs holds the images.
    pub images: usize,
    /// The images' rank.
    pub rank: usize,
    /// The output's rank.
    pub out_rank: usize,
    /// The images' channel axis (summed).
    pub summed: usize,
    /// Summed axes of the images just before `summed`, merged with it into the input
    /// channels (a flattening tract's declutter pass folded into the weights: leak-CNN's
    /// dense layer sums its images' three last axes).
    pub merged: usize,
    /// The output's channel axis (produced).
    pub produced: usize,
    /// Axes of the images kept in the output: (images, output).
    pub kept: TVec<(usize, usize)>,
    /// Axes of size 1 of the images the output drops.
    pub dropped: TVec<usize>,
    /// Axes of size 1 the output adds.
    pub added: usize,
    /// Input channels.
    pub inputs: usize,
    /// Output channels.
    pub outputs: usize,
    /// The weights, `[inputs, outputs]` (input channel by input channel).
    pub weights: Vec<f32>,
}

impl EinsumOfConv {
    /// `einsum` at `node` read as a 1×1 convolution, if it is one.
    pub fn of(model: &TypedModel, node: &TypedNode, einsum: &EinSum) -> Option<Self> {
        let axes = &einsum.axes;
        if einsum.q_params.is_some()
            || einsum.operating_dt != f32::datum_type()
            || node.inputs.len() != 2
            || axes.input_count() != 2
            || axes.output_count() != 1
        {
            return None;
        }
        let fact = |i: usize| model.outlet_fact(node.inputs[i]).ok();
        // The images: the input that is not a constant (the first, if both are).
        let x_in = if fact(0)?.konst.is_none() || fact(1)?.konst.is_some() {
            0
        } else {
            1
        };
        let (images, weights) = (fact(x_in)?, fact(1 - x_in)?);
        let output = &node.outputs.first()?.fact;
        if images.datum_type != f32::datum_type() || weights.rank() < 2 || images.rank() < 1 {
            return None;
        }
        let (mut summed, mut produced) = (TVec::<(usize, usize)>::new(), None);
        let (mut kept, mut dropped, mut added) = (TVec::new(), TVec::new(), 0);
        for axis in axes.iter_all_axes() {
            let at = |slots: &TVec<TVec<usize>>, i: usize| match slots[i].as_slice() {
                [] => Some(None),
                [p] => Some(Some(*p)),
                _ => None,
            };
            let (x, w, y) = (
                at(&axis.inputs, x_in)?,
                at(&axis.inputs, 1 - x_in)?,
                at(&axis.outputs, 0)?,
            );
            match (x, w, y) {
                (Some(x), Some(w), None) => summed.push((x, w)),
                (None, Some(w), Some(y)) => produced = Some((y, w)),
                (Some(x), None, Some(y)) => kept.push((x, y)),
                (Some(x), None, None) if images.shape[x].is_one() => dropped.push(x),
                (None, None, Some(y)) if output.shape[y].is_one() => added += 1,
                _ => return None,
            }
        }
        // The summed axes: consecutive in the images; in the weights in any order (a
        // model moved channels-last sums its images' channels last, its weights' first).
        summed.sort_unstable();
        let (produced, w_out) = produced?;
        let (&(last, _), merged) = (summed.last()?, summed.len() - 1);
        let in_order = summed
            .iter()
            .enumerate()
            .all(|(i, &(x, _))| x + merged == last + i);
        let konst = weights.konst.as_ref()?;
        if !in_order || weights.rank() != merged + 2 {
            return None;
        }
        let w_shape = konst.shape();
        let mut w_strides = vec![1; w_shape.len()];
        for a in (0..w_shape.len() - 1).rev() {
            w_strides[a] = w_strides[a + 1] * w_shape[a + 1];
        }
        let outputs = w_shape[w_out];
        let mut inputs = 1;
        for &(x, w) in &summed {
            if images.shape[x].to_usize().ok()? != w_shape[w] {
                return None;
            }
            inputs *= w_shape[w];
        }
        // Where each input channel's weights start, in the images' order of the summed
        // axes (the last fastest).
        let mut starts = vec![0usize; inputs];
        let mut run = 1;
        for &(_, w) in summed.iter().rev() {
            for (i, start) in starts.iter_mut().enumerate() {
                *start += (i / run % w_shape[w]) * w_strides[w];
            }
            run *= w_shape[w];
        }
        let values = konst.try_as_plain_ram().ok()?;
        let values = values.as_slice::<f32>().ok()?;
        let weights = (0..inputs * outputs)
            .map(|at| {
                let (i, o) = (at / outputs, at % outputs);
                values[starts[i] + o * w_strides[w_out]]
            })
            .collect();
        Some(EinsumOfConv {
            images: x_in,
            rank: images.rank(),
            out_rank: output.rank(),
            summed: last,
            merged,
            produced,
            kept,
            dropped,
            added,
            inputs,
            outputs,
            weights,
        })
    }
}

/// How many bytes of input rows a tile reads over its positions, a block of input
/// channels at a time: half of a 48 KiB L1 data cache (x86-64), most of a 32 KiB one
/// (Cortex-A53 to A76).
const L1_BLOCK_BYTES: usize = 24 << 10;

/// One image's product, for `pulp` to run with the widest SIMD the CPU has; its input rows
/// one after the other in `images`, or with `STARTS` where `starts` says. (Two loops, not
/// one over `starts` always: with a row's start loaded and its end checked in the loop
/// over input channels, DS-CNN-S's 64 → 64 products took 15–20 % longer on AVX2.)
struct Product<'a, const STARTS: bool> {
    op: &'a PointwiseNchw,
    images: &'a [f32],
    /// With `STARTS`, where each input row starts in `images`.
    starts: &'a [usize],
    weights: &'a [f32],
    bias: &'a [f32],
    positions: usize,
    out: &'a mut [f32],
}

impl<const STARTS: bool> pulp::WithSimd for Product<'_, STARTS> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(mut self, simd: S) {
        // Tiles of output channels × vectors whose accumulators fit the registers with the
        // tile's weights and one vector of inputs (R × B + R + 1): up to 2 × 6 + 2 + 1 of
        // AVX2's sixteen, 4 × 6 + 4 + 1 of AVX-512's and NEON's thirty-two. A run of fewer
        // vectors (the positions past the last run of six, all of a pulsed trunk's few)
        // takes as many output channels a tile as still fit, so that it has more
        // independent sums to keep the fused multiply-adds busy than the two a tile of one
        // vector had.
        if S::F32_LANES == 8 {
            self.tiles::<S, 2, 2, 2, 2, 4, 4>(simd);
        } else {
            self.tiles::<S, 4, 4, 4, 4, 8, 8>(simd);
        }
    }
}

impl<const STARTS: bool> Product<'_, STARTS> {
    /// Every output: the positions in runs of six vectors, then the rest (one to six
    /// vectors, the last of them partial when the positions end inside one) as one run;
    /// `R6` … `R1` output channels a tile for a run of six … one vectors.
    #[inline(always)]
    fn tiles<
        S: pulp::Simd,
        const R6: usize,
        const R5: usize,
        const R4: usize,
        const R3: usize,
        const R2: usize,
        const R1: usize,
    >(
        &mut self,
        simd: S,
    ) {
        let lanes = S::F32_LANES;
        // Input channels a block: their rows over a run of six vectors in 24 KiB.
        let block = (L1_BLOCK_BYTES / (6 * lanes * 4)).max(1);
        let mut from = 0;
        // Whole runs of six, leaving the last one to six vectors (where the positions
        // end) to the tail.
        while self.positions - from > 6 * lanes {
            self.run::<S, R6, 6, false>(simd, from, 6 * lanes, block);
            from += 6 * lanes;
        }
        let len = self.positions - from;
        match len.div_ceil(lanes) {
            0 => {}
            1 => self.run::<S, R1, 1, true>(simd, from, len, block),
            2 => self.run::<S, R2, 2, true>(simd, from, len, block),
            3 => self.run::<S, R3, 3, true>(simd, from, len, block),
            4 => self.run::<S, R4, 4, true>(simd, from, len, block),
            5 => self.run::<S, R5, 5, true>(simd, from, len, block),
            _ => self.run::<S, R6, 6, true>(simd, from, len, block),
        }
    }

    /// The `len` positions from `from` on (`B` whole vectors, or with `TAIL` `B` vectors
    /// the last of which may be partial), for every output channel, `block` input
    /// channels at a time, `R` output channels a tile and then one at a time.
    #[inline(always)]
    fn run<S: pulp::Simd, const R: usize, const B: usize, const TAIL: bool>(
        &mut self,
        simd: S,
        from: usize,
        len: usize,
        block: usize,
    ) {
        let (inputs, outputs) = (self.op.inputs, self.op.outputs);
        let mut first = 0;
        while first < inputs {
            let last = (first + block).min(inputs);
            let mut o = 0;
            while outputs - o >= R {
                self.tile::<S, R, B, TAIL>(simd, o, from, len, first..last);
                o += R;
            }
            while o < outputs {
                self.tile::<S, 1, B, TAIL>(simd, o, from, len, first..last);
                o += 1;
            }
            first = last;
        }
    }

    /// Output channels `o..o + R` at the `len` positions from `from` on (`B` whole vectors;
    /// with `TAIL`, `B - 1` whole vectors and a last one of the rest, read and written
    /// partially), summed over the input channels `ins`: from the bias for the first
    /// block, from what the blocks before stored otherwise; the ReLU after the last.
    #[inline(always)]
    fn tile<S: pulp::Simd, const R: usize, const B: usize, const TAIL: bool>(
        &mut self,
        simd: S,
        o: usize,
        from: usize,
        len: usize,
        ins: std::ops::Range<usize>,
    ) {
        let positions = self.positions;
        let outputs = self.op.outputs;
        // The vectors read and written whole; with `TAIL` the last is partial (from
        // `whole · lanes` on).
        let whole = if TAIL { B - 1 } else { B };
        let split = whole * S::F32_LANES;
        let (first, last) = (ins.start == 0, ins.end == self.op.inputs);
        let mut acc = [[simd.splat_f32s(0.0); B]; R];
        for (r, (acc, &b)) in acc.iter_mut().zip(&self.bias[o..o + R]).enumerate() {
            let at = (o + r) * positions + from;
            let out = &self.out[at..at + len];
            if first {
                *acc = [simd.splat_f32s(b); B];
            } else {
                acc[..whole].copy_from_slice(&S::as_simd_f32s(&out[..split]).0[..whole]);
                if TAIL {
                    acc[B - 1] = simd.partial_load_f32s(&out[split..]);
                }
            }
        }
        let weights = self.weights.chunks_exact(outputs).skip(ins.start);
        if STARTS {
            for (&start, weights) in self.starts[ins].iter().zip(weights) {
                let row = &self.images[start + from..start + from + len];
                add_row::<S, R, B, TAIL>(simd, &mut acc, row, &weights[o..o + R]);
            }
        } else {
            let rows = self.images.chunks_exact(positions).skip(ins.start);
            for (row, weights) in rows.zip(weights).take(ins.len()) {
                let row = &row[from..from + len];
                add_row::<S, R, B, TAIL>(simd, &mut acc, row, &weights[o..o + R]);
            }
        }
        let zero = simd.splat_f32s(0.0);
        for (r, acc) in acc.iter_mut().enumerate() {
            if last && self.op.relu {
                for a in acc.iter_mut() {
                    *a = simd.max_f32s(*a, zero);
                }
            }
            let at = (o + r) * positions + from;
            let out = &mut self.out[at..at + len];
            let (out, rest) = out.split_at_mut(split);
            S::as_mut_simd_f32s(out).0[..whole].copy_from_slice(&acc[..whole]);
            if TAIL {
                simd.partial_store_f32s(rest, acc[B - 1]);
            }
        }
    }
}

/// Adds one input row's values (`row`: `B` whole vectors, or with `TAIL` `B - 1` and a
/// partial last one) times each of the tile's `R` output channels' weights for it (`w`)
/// to the tile's sums.
#[inline(always)]
fn add_row<S: pulp::Simd, const R: usize, const B: usize, const TAIL: bool>(
    simd: S,
    acc: &mut [[S::f32s; B]; R],
    row: &[f32],
    w: &[f32],
) {
    let whole = if TAIL { B - 1 } else { B };
    let split = whole * S::F32_LANES;
    let mut ws = [simd.splat_f32s(0.0); R];
    for (ws, &v) in ws.iter_mut().zip(w) {
        *ws = simd.splat_f32s(v);
    }
    let (x, _) = S::as_simd_f32s(&row[..split]);
    for (b, &x) in x[..whole].iter().enumerate() {
        for (acc, &w) in acc.iter_mut().zip(&ws) {
            acc[b] = simd.mul_add_e_f32s(w, x, acc[b]);
        }
    }
    if TAIL {
        let x = simd.partial_load_f32s(&row[split..]);
        for (acc, &w) in acc.iter_mut().zip(&ws) {
            acc[B - 1] = simd.mul_add_e_f32s(w, x, acc[B - 1]);
        }
    }
}

impl Op for PointwiseNchw {
    fn name(&self) -> StaticName {
        "HushPointwiseNchw".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!(
            "{} to {} channels on axis {}{}{}",
            self.inputs,
            self.outputs,
            self.axis,
            if self.drop > 0 {
                format!(", {} axes dropped", self.drop)
            } else {
                String::new()
            },
            if self.relu { ", ReLU" } else { "" }
        )])
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

crate::keeps_output!(PointwiseNchw);

impl KeepsOutput for PointwiseNchw {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let (images, weights, bias) = args_3!(inputs);
        let shape = self.output_shape(images.shape())?;
        let positions = images.shape()[self.axis + 1..].iter().product();
        kept.f32_output(&shape, |out| {
            self.run(
                images.try_as_plain_ram()?.as_slice::<f32>()?,
                weights.try_as_plain_ram()?.as_slice::<f32>()?,
                bias.try_as_plain_ram()?.as_slice::<f32>()?,
                positions,
                out,
            )
        })
    }
}

impl TypedOp for PointwiseNchw {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(
            inputs.len() == 3,
            "a pointwise convolution takes images, weights and bias"
        );
        Ok(tvec!(f32::fact(self.output_shape(&inputs[0].shape)?)))
    }

    as_op!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scalar path and the widest path this machine has both give what a plain sum (in
    /// f64) gives, over positions that end inside a vector, on a tile's edge and past
    /// several tiles (so that runs of one to six vectors end them at AVX2's and
    /// AVX-512's widths), output channels that do and do not fill whole tiles, input channels
    /// in one block and in several (300: five blocks at AVX-512's width), one image and
    /// several, a ReLU or not.
    #[test]
    fn every_path_equals_a_plain_sum() {
        let values = |n: usize, k: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * k) % 23) as f32 / 7.0 - 1.5).collect()
        };
        let mut cases = 0;
        let shapes = [
            (3, 5, 1),
            (4, 7, 37),
            (8, 12, 96),
            (5, 13, 250),
            (300, 9, 100),
            (6, 20, 30),
            (7, 17, 20),
        ];
        for (inputs, outputs, positions) in shapes {
            for (images, relu) in [(1, false), (2, true)] {
                let op = PointwiseNchw {
                    axis: 1,
                    drop: 0,
                    inputs,
                    outputs,
                    relu,
                };
                let x = values(images * inputs * positions, 7);
                let w = values(inputs * outputs, 5);
                let b = values(outputs, 3);
                // Each output, and the sum of its terms' magnitudes (its rounding's scale).
                let mut plain = vec![(0f64, 0f64); images * outputs * positions];
                for (n, plain) in plain.chunks_exact_mut(outputs * positions).enumerate() {
                    for (at, y) in plain.iter_mut().enumerate() {
                        let (o, p) = (at / positions, at % positions);
                        let terms = (0..inputs).map(|i| {
                            w[i * outputs + o] as f64 * x[(n * inputs + i) * positions + p] as f64
                        });
                        let (sum, scale) = terms
                            .fold((b[o] as f64, b[o].abs() as f64), |acc, t| {
                                (acc.0 + t, acc.1 + t.abs())
                            });
                        *y = (if relu { sum.max(0.0) } else { sum }, scale);
                    }
                }
                // NaN where nothing was written.
                let mut widest = vec![f32::NAN; plain.len()];
                op.run(&x, &w, &b, positions, &mut widest).unwrap();
                let mut scalar = vec![f32::NAN; plain.len()];
                for (x, scalar) in x
                    .chunks_exact(inputs * positions)
                    .zip(scalar.chunks_exact_mut(outputs * positions))
                {
                    pulp::WithSimd::with_simd(
                        Product::<false> {
                            op: &op,
                            images: x,
                            starts: &[],
                            weights: &w,
                            bias: &b,
                            positions,
                            out: scalar,
                        },
                        pulp::Scalar::new(),
                    );
                }
                for (path, got) in [("widest", &widest), ("scalar", &scalar)] {
                    for (i, (&a, &(b, scale))) in got.iter().zip(&plain).enumerate() {
                        assert!(
                            (a as f64 - b).abs() <= 1e-6 * (1.0 + scale),
                            "{path} {inputs}→{outputs} × {positions}, output {i}: {a} against {b}"
                        );
                    }
                }
                assert!(plain.iter().any(|v| v.0 > 0.0) && plain.iter().any(|v| v.0 <= 0.0));
                cases += 1;
            }
        }
        assert_eq!(cases, 14);
    }

    /// Images, weights or room for the outputs of the wrong size are refused, naming the
    /// sizes.
    #[test]
    fn wrong_sizes_are_refused() {
        let op = PointwiseNchw {
            axis: 1,
            drop: 0,
            inputs: 2,
            outputs: 3,
            relu: false,
        };
        let mut out = vec![0f32; 12];
        let err = op
            .run(&[0.0; 8], &[0.0; 5], &[0.0; 3], 4, &mut out)
            .unwrap_err();
        assert!(err.to_string().contains("5 weights"), "{err}");
        let err = op
            .run(&[0.0; 7], &[0.0; 6], &[0.0; 3], 4, &mut out)
            .unwrap_err();
        assert!(err.to_string().contains("7 values in"), "{err}");
        let err = op
            .run(&[0.0; 8], &[0.0; 6], &[0.0; 3], 4, &mut out[..11])
            .unwrap_err();
        assert!(err.to_string().contains("room for 11"), "{err}");
    }
}
