//! Convolutions over channels-last f32 data (NHWC, or HWC without a batch axis), and the
//! pass that moves a model there ([`move_channels_last`]).
//!
//! A depthwise convolution over NCHW data vectorises along each channel's plane: a pulsed
//! trunk's plane of 3 frames × 10 bins fills two of AVX-512's vectors, at a fixed cost per
//! plane that dwarfed the multiply-adds (BENCHMARKS.md). Channels-last, a position's
//! channels are consecutive: 64 channels are four whole vectors whatever the plane's size,
//! each tap one multiply-add a vector, and a time axis outermost makes a pulsed trunk's
//! buffers (tract-pulse's `Delay`) contiguous copies. onnxruntime runs the same layers on
//! 16 channels a vector (its NCHWc layout) for the same reason; tract moves depthwise
//! convolutions channels-last only where it has a kernel for them (aarch64, wasm).
//!
//! - [`DepthwiseNhwc`]: each output position's channels, tap by tap over the input
//!   positions its window reads (those in the padding left out).
//! - [`PointwiseNhwc`]: tract's einsum of a 1×1 convolution over channels-last data, a
//!   tile of positions × vectors of output channels accumulated in registers over the input
//!   channels (each input value broadcast once for the tile's vectors, each weight vector
//!   loaded once for its positions).
//! - [`DenseConvNhwc`]: a convolution with one group, read directly from the image (from a
//!   zero-padded copy of it where the window reads padding): a tile of positions × vectors
//!   of output channels, each input value broadcast against its weights, as
//!   [`PointwiseNhwc`]'s tiles. It folds a max pooling after it in, a band of rows at a
//!   time where the pooling's rows do not overlap. It also runs channels-first
//!   convolutions of many input channels, reading the channels-first planes as they are
//!   and moving its output's channels first at the end.
//! - [`MaxPoolNhwc`]: a max pooling no convolution folded in, a vector of channels at a
//!   time.
//!
//! A model without depthwise convolutions (leak-CNN) moves from its first convolution, of
//! one channel, whose images are then the same channels-last as channels-first. tract's
//! `MaxPool` does not change its axes, so the pass swaps hush's in first
//! ([`MaxPoolNchw`], which becomes [`MaxPoolNhwc`]).
//!
//! Each folds the batch norm and ReLU after it, as the channels-first ops do.

use std::collections::HashSet;

use tract_core::internal::*;
use tract_core::ops::change_axes::{AxisChange, AxisOp};
use tract_core::ops::cnn::conv::Conv;
use tract_core::ops::cnn::MaxPool;
use tract_core::ops::einsum::EinSum;
use tract_core::optim::change_axes::change_axes;

use crate::affine::Chain;
use crate::maxpool::MaxPoolNchw;
use crate::pointwise::{swap_product, EinsumOfConv};
use crate::window::Window2d;
use crate::{constant, conv_window, depthwise_window, replace, KeepsOutput, KeptOutput, Swap};

/// Moves the channels of each depthwise convolution of `model` (decluttered) with 8
/// channels or more last (in a model without any, those of each convolution that reads
/// one channel), through as much of the graph as carries the change (tract's
/// `change_axes`: elementwise ops, einsums, tract-pulse's buffers and the convolutions
/// around them follow; the model's inputs and outputs keep their shapes), then declutters
/// it again. `None` when no convolution could move.
pub fn move_channels_last(model: &TypedModel) -> TractResult<Option<TypedModel>> {
    let mut model = model.clone();
    hush_max_pools(&mut model)?;
    // Without depthwise convolutions, from the first convolution that reads one channel
    // (leak-CNN). Not with them: BC-ResNet, moved whole from there, ran 1.44–1.65 ms a
    // window against 0.91–1.43 ms channels-first (BENCHMARKS.md, "leak-CNN channels-last").
    let from_lone = !model
        .nodes()
        .iter()
        .any(|n| n.op_as::<Conv>().is_some_and(is_depthwise));
    let mut moved = 0;
    let mut tried = HashSet::new();
    'next: loop {
        for node in model.nodes() {
            let change = if let Some(conv) = node.op_as::<Conv>() {
                let format = conv.pool_spec.data_format;
                let channels = conv.pool_spec.input_channels;
                let lone = from_lone && conv.group == 1 && channels == 1;
                if !(is_depthwise(conv) && channels >= 8 || lone) || format.c_is_last() {
                    continue;
                }
                let rank = model.outlet_fact(node.inputs[0])?.rank();
                AxisChange {
                    outlet: node.inputs[0],
                    op: AxisOp::Move(format.has_n() as usize, rank - 1),
                }
            } else if let Some(einsum) = node.op_as::<EinSum>() {
                match channels_first_output(&model, node, einsum) {
                    Some(change) => change,
                    None => continue,
                }
            } else {
                continue;
            };
            if !tried.insert(node.id) {
                continue;
            }
            let mut interfaces = model.output_outlets()?.to_vec();
            interfaces.extend(model.input_outlets()?.iter());
            let mut explored = Default::default();
            if let Some((patch, _)) = change_axes(&model, &change, &interfaces, &[], &mut explored)?
            {
                patch.apply(&mut model)?;
                moved += 1;
                tried.clear();
                continue 'next;
            }
        }
        break;
    }
    (moved > 0).then(|| model.into_decluttered()).transpose()
}

/// Whether `conv` is depthwise: a group per input channel.
fn is_depthwise(conv: &Conv) -> bool {
    conv.group > 1 && conv.group == conv.pool_spec.input_channels
}

/// Replaces each of tract's max poolings in `model` that [`MaxPoolNchw`] runs by it: tract's
/// `MaxPool` refuses to change its axes, hush's moves its channels last ([`MaxPoolNhwc`]).
fn hush_max_pools(model: &mut TypedModel) -> TractResult<()> {
    for id in model.eval_order()? {
        let node = model.node(id);
        let Some(op) = node.op_as::<MaxPool>() else {
            continue;
        };
        if let Some(op) = MaxPoolNchw::for_max_pool(model, node, op) {
            TypedModelPatch::replace_single_op(model, node, &node.inputs, op)?.apply(model)?;
        }
    }
    Ok(())
}

/// Whether running a model moved channels-last pays on this CPU: wherever `pulp` runs
/// vectors (AVX-512's 16 lanes, AVX2's 8, NEON's 4), not on its scalar path.
///
/// At AVX2's width the channels-last ops run more instructions than the channels-first
/// ones on a whole window (+56 % for DS-CNN-S at [98, 40] under callgrind: each broadcast
/// input feeds two vectors of output channels, against AVX-512's four), and less time all
/// the same: DS-CNN-S's window and kws-12's ran 4–8 % faster channels-last on a Zen 1
/// EPYC (AVX2 on 128-bit units), BC-ResNet's in the same time, and a pulsed trunk's small
/// planes ran 24 % fewer instructions (BENCHMARKS.md, "Channels-last convolutions" and
/// "The window target on two more machines").
pub fn pays_off() -> bool {
    simd_lanes() >= 4
}

/// The f32 lanes of the widest SIMD vector this CPU runs through `pulp` (16 with
/// AVX-512, 8 with AVX2, 4 with NEON, 1 on pulp's scalar path).
pub fn simd_lanes() -> usize {
    pulp::Arch::new().dispatch(Lanes)
}

/// Asks `pulp` for its vectors' f32 lanes.
struct Lanes;

impl pulp::WithSimd for Lanes {
    type Output = usize;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _simd: S) -> usize {
        S::F32_LANES
    }
}

/// For an einsum of a 1×1 convolution that reads its images channels-last (after a move)
/// but writes its output channels-first, the move of its output's channels last.
fn channels_first_output(
    model: &TypedModel,
    node: &TypedNode,
    einsum: &EinSum,
) -> Option<AxisChange> {
    let e = EinsumOfConv::of(model, node, einsum)?;
    (e.summed == e.rank - 1 && e.merged == 0 && e.produced != e.out_rank - 1).then(|| AxisChange {
        outlet: OutletId::new(node.id, 0),
        op: AxisOp::Move(e.produced, e.out_rank - 1),
    })
}

/// tract's depthwise convolution (`Conv` with one group per channel) over NHWC (or HWC)
/// f32 data. Inputs: the images, the kernel `[taps, channels]` (tap by tap, each tap's
/// channels consecutive), the bias `[channels]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DepthwiseNhwc {
    /// The convolution's shape.
    pub window: Window2d,
    /// Whether a ReLU follows, applied as outputs are stored.
    pub relu: bool,
}

impl DepthwiseNhwc {
    /// The op for `conv` at `node`, when it is a float depthwise convolution this op runs:
    /// NHWC or HWC images of a known shape, an OIHW kernel and a bias that are constants.
    pub fn for_conv(model: &TypedModel, node: &TypedNode, conv: &Conv) -> Option<Self> {
        depthwise_window(model, node, conv, true).map(|window| DepthwiseNhwc {
            window,
            relu: false,
        })
    }

    /// Replaces `node` (a depthwise `conv` this op runs, else nothing happens) by this op,
    /// with the per-channel multiplies and adds and the ReLU that follow it alone folded
    /// in. Returns what it did, or `None` if `node` stays tract's.
    pub fn swap(model: &mut TypedModel, node: usize, conv: &Conv) -> TractResult<Option<Swap>> {
        let conv_node = model.node(node);
        let Some(mut op) = Self::for_conv(model, conv_node, conv) else {
            return Ok(None);
        };
        let w = op.window.clone();
        let c = w.channels;
        let chain = Chain::after(model, node, 2 + w.batch as usize, c)?;
        op.relu = chain.affine.relu;
        let scale = &chain.affine.scale;
        // OIHW ([channels, 1, kh, kw]) to [taps, channels], scaled per channel.
        let kernel = constant(model, conv_node.inputs[1])?;
        let bias = constant(model, conv_node.inputs[2])?;
        let taps = w.kernel[0] * w.kernel[1];
        ensure!(
            kernel.len() == c * taps,
            "a depthwise kernel of {c} × {taps}"
        );
        let kernel: Vec<f32> = (0..taps * c)
            .map(|at| {
                let (t, ch) = (at / c, at % c);
                kernel[ch * taps + t] * scale[ch]
            })
            .collect();
        let kernel = Tensor::from_shape(&[taps, c], &kernel)?;
        let bias = Tensor::from_shape(&[c], &chain.affine.fold_bias(&bias))?;
        replace(model, node, 0, chain.last, op, [kernel, bias])?;
        Ok(Some(Swap { folded: chain.ops }))
    }

    /// The output's shape for `n` images.
    fn output_shape<D: DimLike>(&self, n: D) -> TVec<D> {
        let w = &self.window;
        channels_last_shape(w, n, w.channels)
    }

    /// Convolves `images` (whole NHWC images) with `kernel` (`[taps, channels]`) plus
    /// `bias` (`[channels]`), into `out`.
    pub fn run(
        &self,
        images: &[f32],
        kernel: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
        let w = &self.window;
        let c = w.channels;
        ensure!(
            kernel.len() == c * w.kernel[0] * w.kernel[1] && bias.len() == c,
            "{} kernel values and {} biases for {w:?}",
            kernel.len(),
            bias.len()
        );
        let n = w.images(images, out)?;
        for (image, out) in images
            .chunks_exact(c * w.plane_len().max(1))
            .zip(out.chunks_exact_mut(c * w.output_plane_len()))
            .take(n)
        {
            pulp::Arch::new().dispatch(DepthwiseImage {
                w,
                image,
                kernel,
                bias,
                relu: self.relu,
                out,
            });
        }
        Ok(())
    }
}

/// The shape of channels-last data of `w`'s output size with `channels` channels, for `n`
/// images (no batch axis where `w` has none).
fn channels_last_shape<D: DimLike>(w: &Window2d, n: D, channels: usize) -> TVec<D> {
    let mut shape: TVec<D> = [w.output[0], w.output[1], channels]
        .iter()
        .map(|&d| D::from(d))
        .collect();
    if w.batch {
        shape.insert(0, n);
    }
    shape
}

/// The taps of `w`'s window at output `position` (of a plane) that read inside the input:
/// (tap, input position), in tap order.
fn window_taps(w: &Window2d, position: usize, taps: &mut Vec<(usize, usize)>) {
    taps.clear();
    let (oy, ox) = (position / w.output[1], position % w.output[1]);
    for ky in 0..w.kernel[0] {
        let Some(iy) = (oy * w.strides[0] + ky * w.dilations[0])
            .checked_sub(w.pad_before[0])
            .filter(|&y| y < w.input[0])
        else {
            continue;
        };
        for kx in 0..w.kernel[1] {
            if let Some(ix) = (ox * w.strides[1] + kx * w.dilations[1])
                .checked_sub(w.pad_before[1])
                .filter(|&x| x < w.input[1])
            {
                taps.push((ky * w.kernel[1] + kx, iy * w.input[1] + ix));
            }
        }
    }
}

/// `taps` ((tap, input position)) as offsets of `channels` values each: where the tap's
/// kernel values and the position's input values start.
fn scaled(taps: &mut [(usize, usize)], channels: usize) {
    for (tap, at) in taps.iter_mut() {
        *tap *= channels;
        *at *= channels;
    }
}

/// One image of a depthwise convolution, for `pulp`.
struct DepthwiseImage<'a> {
    w: &'a Window2d,
    /// The image, NHWC.
    image: &'a [f32],
    kernel: &'a [f32],
    bias: &'a [f32],
    relu: bool,
    /// The output image.
    out: &'a mut [f32],
}

impl pulp::WithSimd for DepthwiseImage<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(mut self, simd: S) {
        // Positions a tile where the window lies inside the row: their sums (P × 4
        // vectors) keep both fused multiply-add units busy, where one position's four
        // would wait on each other tap after tap. AVX2: 3 × 4 sums and the tap's 4
        // kernel vectors fill its sixteen registers (the inputs are read by the
        // multiply-adds), and each tap's loop and bounds checks serve 12 of them, not 8.
        if S::F32_LANES == 8 {
            self.rows::<S, 3>(simd);
        } else {
            self.rows::<S, 4>(simd);
        }
    }
}

impl DepthwiseImage<'_> {
    /// Every output row: the positions whose window lies inside the input's row (they
    /// read the same taps, shifted by the stride) in tiles of as even a number of
    /// positions as `P` a tile at most allows, the others one at a time.
    #[inline(always)]
    fn rows<S: pulp::Simd, const P: usize>(&mut self, simd: S) {
        let w = self.w;
        let c = w.channels;
        let mut taps = Vec::with_capacity(w.kernel[0] * w.kernel[1]);
        let outputs = std::mem::take(&mut self.out);
        let ow = w.output[1];
        // The columns whose window lies inside the row: one run of them.
        let first = (0..ow).find(|&x| w.inside_row(x)).unwrap_or(ow);
        let end = (first..ow).find(|&x| !w.inside_row(x)).unwrap_or(ow);
        let tiles = (end - first).div_ceil(P);
        for (y, row) in outputs.chunks_exact_mut(c * ow).enumerate() {
            for x in (0..first).chain(end..ow) {
                window_taps(w, y * ow + x, &mut taps);
                scaled(&mut taps, c);
                self.position::<S, 1>(simd, &taps, 0, &mut row[x * c..(x + 1) * c]);
            }
            if tiles == 0 {
                continue;
            }
            window_taps(w, y * ow + first, &mut taps);
            scaled(&mut taps, c);
            let mut x = first;
            for tile in 0..tiles {
                let p = (end - x).div_ceil(tiles - tile);
                let (out, shift) = (&mut row[x * c..(x + p) * c], (x - first) * w.strides[1]);
                match p {
                    4 => self.position::<S, 4>(simd, &taps, shift, out),
                    3 => self.position::<S, 3>(simd, &taps, shift, out),
                    2 => self.position::<S, 2>(simd, &taps, shift, out),
                    _ => self.position::<S, 1>(simd, &taps, shift, out),
                }
                x += p;
            }
        }
    }

    /// The channels of `P` neighbouring output positions, the first of whose windows reads
    /// `taps` (of those inside the input, where the tap's kernel values and the input
    /// position's values start: [`scaled`]) moved `shift` input positions along the row
    /// (the others read the same taps a stride further along the row each), into `out`.
    #[inline(always)]
    fn position<S: pulp::Simd, const P: usize>(
        &self,
        simd: S,
        taps: &[(usize, usize)],
        shift: usize,
        out: &mut [f32],
    ) {
        let (c, lanes) = (self.w.channels, S::F32_LANES);
        let mut from = 0;
        while c - from >= 4 * lanes {
            self.block::<S, P, 4, false>(simd, taps, shift, from, out);
            from += 4 * lanes;
        }
        while c - from >= lanes {
            self.block::<S, P, 1, false>(simd, taps, shift, from, out);
            from += lanes;
        }
        if from < c {
            self.block::<S, P, 1, true>(simd, taps, shift, from, out);
        }
    }

    /// Channels `from..` of `P` output positions (see [`DepthwiseImage::position`]), in
    /// `V` vectors (with `PARTIAL`, one vector of the channels left).
    #[inline(always)]
    fn block<S: pulp::Simd, const P: usize, const V: usize, const PARTIAL: bool>(
        &self,
        simd: S,
        taps: &[(usize, usize)],
        shift: usize,
        from: usize,
        out: &mut [f32],
    ) {
        let c = self.w.channels;
        let step = self.w.strides[1] * c;
        let len = if PARTIAL { c - from } else { V * S::F32_LANES };
        let bias = load::<S, V, PARTIAL>(simd, &self.bias[from..from + len]);
        let mut acc = [bias; P];
        let base = shift * c + from;
        for &(tap, at) in taps {
            let k = load::<S, V, PARTIAL>(simd, &self.kernel[tap + from..][..len]);
            // What the tile's positions read at this tap: position p's from p · step.
            let at = at + base;
            let inputs = &self.image[at..at + (P - 1) * step + len];
            for (p, acc) in acc.iter_mut().enumerate() {
                let x = load::<S, V, PARTIAL>(simd, &inputs[p * step..p * step + len]);
                for ((a, x), k) in acc.iter_mut().zip(x).zip(k) {
                    *a = simd.mul_add_e_f32s(x, k, *a);
                }
            }
        }
        for (p, acc) in acc.into_iter().enumerate() {
            let at = p * c + from;
            store::<S, V, PARTIAL>(simd, acc, self.relu, &mut out[at..at + len]);
        }
    }
}

/// `V` vectors of `values` (with `PARTIAL`, one vector of all of them, the rest of the
/// lanes 0).
#[inline(always)]
fn load<S: pulp::Simd, const V: usize, const PARTIAL: bool>(
    simd: S,
    values: &[f32],
) -> [S::f32s; V] {
    let mut out = [simd.splat_f32s(0.0); V];
    if PARTIAL {
        out[0] = simd.partial_load_f32s(values);
    } else {
        let (vectors, _) = S::as_simd_f32s(values);
        out.copy_from_slice(&vectors[..V]);
    }
    out
}

/// Stores `acc` (`V` vectors; with `PARTIAL` the first, partly) into `out`, through a ReLU
/// when `relu`.
#[inline(always)]
fn store<S: pulp::Simd, const V: usize, const PARTIAL: bool>(
    simd: S,
    mut acc: [S::f32s; V],
    relu: bool,
    out: &mut [f32],
) {
    if relu {
        let zero = simd.splat_f32s(0.0);
        for a in &mut acc {
            *a = simd.max_f32s(*a, zero);
        }
    }
    if PARTIAL {
        simd.partial_store_f32s(out, acc[0]);
    } else {
        let (out, _) = S::as_mut_simd_f32s(out);
        out[..V].copy_from_slice(&acc);
    }
}

/// A 1×1 convolution over channels-last f32 data, as tract's einsum of it: images `[..,
/// positions.., inputs]` to `[.., positions.., outputs]`, the positions' axes in order,
/// axes of size 1 dropped or added anywhere before the channels. Inputs: the images, the
/// weights `[inputs, outputs]`, the bias `[outputs]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PointwiseNhwc {
    /// The output's axes before its channels: each the images' axis it keeps, or `None`
    /// for an axis of size 1 of its own.
    pub out_axes: TVec<Option<usize>>,
    /// Axes of the images before the last merged with it into the input channels (a
    /// flattening folded into the weights).
    pub merged: usize,
    /// Input channels.
    pub inputs: usize,
    /// Output channels.
    pub outputs: usize,
    /// Whether a ReLU follows, applied as outputs are stored.
    pub relu: bool,
}

impl PointwiseNhwc {
    /// The op for `einsum` at `node`, its weights `[inputs, outputs]` and which input holds
    /// the images, when it is a pointwise convolution over channels-last data: f32 images
    /// whose last axis (or last axes, merged) is summed against constant weights `OI` (or
    /// `IO`), giving the output channels last, the other axes kept in order but axes of
    /// size 1 (a single position is a matrix-vector product: leak-CNN's dense layers).
    pub fn for_einsum(
        model: &TypedModel,
        node: &TypedNode,
        einsum: &EinSum,
    ) -> Option<(Self, Vec<f32>, usize)> {
        let e = EinsumOfConv::of(model, node, einsum)?;
        let images = model.outlet_fact(node.inputs[e.images]).ok()?;
        let channels = (e.rank - 1).checked_sub(e.merged)?;
        let mut out_axes: TVec<Option<usize>> = tvec![None; e.out_rank.checked_sub(1)?];
        for &(x, y) in &e.kept {
            if x >= channels || y >= out_axes.len() || images.shape[x].to_usize().is_err() {
                return None;
            }
            out_axes[y] = Some(x);
        }
        let kept: TVec<usize> = out_axes.iter().flatten().copied().collect();
        if e.summed != e.rank - 1
            || e.produced != e.out_rank - 1
            || e.kept.len() + e.dropped.len() + 1 + e.merged != e.rank
            || e.kept.len() + e.added + 1 != e.out_rank
            || kept.windows(2).any(|pair| pair[0] > pair[1])
        {
            return None;
        }
        let op = PointwiseNhwc {
            out_axes,
            merged: e.merged,
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
        let axis = model.node(node).outputs[0].fact.rank() - 1;
        let (inputs, outputs) = (op.inputs, op.outputs);
        swap_product(
            model,
            node,
            images,
            axis,
            [inputs, outputs],
            weights,
            |relu| PointwiseNhwc { relu, ..op },
        )
        .map(Some)
    }

    /// The output's shape for images of `shape`.
    fn output_shape<D: DimLike>(&self, shape: &[D]) -> TractResult<TVec<D>> {
        let channels = shape.len().checked_sub(1 + self.merged);
        let channels = channels
            .filter(|&c| self.out_axes.iter().flatten().all(|&x| x < c))
            .with_context(|| format!("images of shape {shape:?} for {self:?}: too few axes"))?;
        let inputs = shape[channels..]
            .iter()
            .fold(D::from(1), |n, d| n * d.clone());
        ensure!(
            inputs == D::from(self.inputs),
            "images of shape {shape:?}; expected {} channels in the last {} axes",
            self.inputs,
            1 + self.merged
        );
        let mut out: TVec<D> = self
            .out_axes
            .iter()
            .map(|axis| axis.map_or(D::from(1), |x| shape[x].clone()))
            .collect();
        out.push(D::from(self.outputs));
        Ok(out)
    }

    /// Multiplies `images` (positions × `inputs`) by `weights` (`[inputs, outputs]`) plus
    /// `bias`, into `out` (positions × `outputs`).
    pub fn run(
        &self,
        images: &[f32],
        weights: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
        let (i, o) = (self.inputs, self.outputs);
        let positions = images.len() / i.max(1);
        ensure!(
            i > 0
                && images.len() == positions * i
                && out.len() == positions * o
                && weights.len() == i * o
                && bias.len() == o,
            "{} values in, room for {} out, {} weights and {} biases; expected positions × \
             {i} in, positions × {o} out, {i} × {o} weights, {o} biases",
            images.len(),
            out.len(),
            weights.len(),
            bias.len()
        );
        pulp::Arch::new().dispatch(ProductNhwc {
            op: self,
            images,
            weights,
            bias,
            positions,
            out,
        });
        Ok(())
    }
}

/// A channels-last product, for `pulp`.
struct ProductNhwc<'a> {
    op: &'a PointwiseNhwc,
    images: &'a [f32],
    weights: &'a [f32],
    bias: &'a [f32],
    positions: usize,
    out: &'a mut [f32],
}

impl pulp::WithSimd for ProductNhwc<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(mut self, simd: S) {
        // Tiles of positions × vectors of output channels whose sums fit the registers
        // with the tile's weight vectors and one broadcast input (R × V + V + 1): 6 × 2 + 3
        // of AVX2's sixteen, 6 × 4 + 5 of AVX-512's and NEON's thirty-two.
        if self.positions == 1 {
            // A matrix-vector product: eight vectors of output channels a pass over the
            // weights (eight sums, each weight read once, in order).
            self.columns::<S, 8>(simd);
        } else if S::F32_LANES == 8 {
            self.columns::<S, 2>(simd);
        } else {
            self.columns::<S, 4>(simd);
        }
    }
}

impl ProductNhwc<'_> {
    /// Every output channel: `V` vectors at a time, then one vector at a time, the last
    /// perhaps partial; for each, every position.
    #[inline(always)]
    fn columns<S: pulp::Simd, const V: usize>(&mut self, simd: S) {
        let (o, lanes) = (self.op.outputs, S::F32_LANES);
        let mut from = 0;
        while o - from >= V * lanes {
            self.rows::<S, V, false>(simd, from);
            from += V * lanes;
        }
        while o - from >= lanes {
            self.rows::<S, 1, false>(simd, from);
            from += lanes;
        }
        if from < o {
            self.rows::<S, 1, true>(simd, from);
        }
    }

    /// Output channels `from..` (`V` vectors, or with `PARTIAL` one partial vector) at
    /// every position, six positions a tile and the rest in one.
    #[inline(always)]
    fn rows<S: pulp::Simd, const V: usize, const PARTIAL: bool>(&mut self, simd: S, from: usize) {
        let mut p = 0;
        while self.positions - p >= 6 {
            self.tile::<S, 6, V, PARTIAL>(simd, p, from);
            p += 6;
        }
        match self.positions - p {
            0 => {}
            1 => self.tile::<S, 1, V, PARTIAL>(simd, p, from),
            2 => self.tile::<S, 2, V, PARTIAL>(simd, p, from),
            3 => self.tile::<S, 3, V, PARTIAL>(simd, p, from),
            4 => self.tile::<S, 4, V, PARTIAL>(simd, p, from),
            _ => self.tile::<S, 5, V, PARTIAL>(simd, p, from),
        }
    }

    /// Positions `p..p + R` × output channels `from..` (`V` vectors, or one partial).
    #[inline(always)]
    fn tile<S: pulp::Simd, const R: usize, const V: usize, const PARTIAL: bool>(
        &mut self,
        simd: S,
        p: usize,
        from: usize,
    ) {
        let (i, o) = (self.op.inputs, self.op.outputs);
        let len = if PARTIAL { o - from } else { V * S::F32_LANES };
        let bias = load::<S, V, PARTIAL>(simd, &self.bias[from..from + len]);
        let mut acc = [bias; R];
        let rows = &self.images[p * i..(p + R) * i];
        for (k, w) in self.weights.chunks_exact(o).enumerate() {
            let w = load::<S, V, PARTIAL>(simd, &w[from..from + len]);
            for (acc, row) in acc.iter_mut().zip(rows.chunks_exact(i)) {
                let x = simd.splat_f32s(row[k]);
                for (a, &w) in acc.iter_mut().zip(&w) {
                    *a = simd.mul_add_e_f32s(x, w, *a);
                }
            }
        }
        for (r, acc) in acc.into_iter().enumerate() {
            let at = (p + r) * o + from;
            store::<S, V, PARTIAL>(simd, acc, self.op.relu, &mut self.out[at..at + len]);
        }
    }
}

/// tract's `MaxPool` over NHWC (or HWC) f32 data, without padding or index outputs: what
/// [`MaxPoolNchw`] becomes when a model moves channels-last, where no convolution before
/// it folds it in. A vector of channels at a time, the maximum over the window's taps.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MaxPoolNhwc {
    /// The pooling's shape.
    pub window: Window2d,
}

impl MaxPoolNhwc {
    /// Pools `images` (whole NHWC images) into `out`.
    pub fn run(&self, images: &[f32], out: &mut [f32]) -> TractResult<()> {
        let w = &self.window;
        ensure!(
            w.pad_before == [0, 0]
                && w.padded_width() == w.input[1]
                && w.padded_rows() == w.input[0],
            "{w:?}: a channels-last max pooling reads no padding"
        );
        let n = w.images(images, out)?;
        let c = w.channels;
        for (image, out) in images
            .chunks_exact(c * w.plane_len().max(1))
            .zip(out.chunks_exact_mut(c * w.output_plane_len()))
            .take(n)
        {
            pulp::Arch::new().dispatch(PoolImage { w, image, out });
        }
        Ok(())
    }

    /// The output's shape for `n` images.
    fn output_shape<D: DimLike>(&self, n: D) -> TVec<D> {
        let w = &self.window;
        channels_last_shape(w, n, w.channels)
    }
}

/// One image's channels-last max pooling, for `pulp`.
struct PoolImage<'a> {
    w: &'a Window2d,
    image: &'a [f32],
    out: &'a mut [f32],
}

impl pulp::WithSimd for PoolImage<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        max_pool(simd, self.w, self.image, self.out)
    }
}

/// Input channels from which [`DenseConvNhwc`] runs channels-first convolutions
/// ([`DenseConvNhwc::runs_channels_first`]).
pub const CHANNELS_FIRST_FROM: usize = 8;

/// tract's `Conv` with one group over NHWC (or HWC) f32 data. Inputs: the images, the
/// weights `[taps × inputs, outputs]` (tap by tap, each tap's input channels in turn), the
/// bias `[outputs]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DenseConvNhwc {
    /// The window (`channels` input channels).
    pub window: Window2d,
    /// Output channels.
    pub outputs: usize,
    /// Whether a ReLU follows, applied as outputs are stored.
    pub relu: bool,
    /// Whether its images and output are channels-first (NCHW or CHW) all the same
    /// ([`DenseConvNhwc::runs_channels_first`]): each weights row then reads its input
    /// channel's plane, and the output, computed channels-last into scratch, moves its
    /// channels first at the end ([`move_channels_first`]).
    pub channels_first: bool,
    /// A max pooling after the convolution (and its ReLU), folded in: its window over the
    /// convolution's output (`channels` = output channels), reading no padding.
    pub pool: Option<Window2d>,
}

impl DenseConvNhwc {
    /// The op for `conv` at `node`, when it is a float convolution with one group over NHWC
    /// or HWC images (or NCHW and CHW ones, [`DenseConvNhwc::channels_first`]) of a known
    /// shape, with a constant OIHW kernel and bias.
    pub fn for_conv(model: &TypedModel, node: &TypedNode, conv: &Conv) -> Option<Self> {
        let channels_first = !conv.pool_spec.data_format.c_is_last();
        let window = conv_window(model, node, conv, !channels_first)?;
        (conv.group == 1).then_some(DenseConvNhwc {
            window,
            outputs: conv.pool_spec.output_channels,
            relu: false,
            channels_first,
            pool: None,
        })
    }

    /// Whether this op may run a channels-first convolution with one group of `conv`'s
    /// input channels: from [`CHANNELS_FIRST_FROM`] input channels on a CPU with SIMD
    /// vectors. [`DenseConvNhwc::swap`] takes it where a max pooling follows, folded in, so
    /// that a quarter of the output (a 2×2 pooling's) moves channels first. Measured on
    /// AVX-512 (BENCHMARKS.md, "The dense, depthwise and pointwise ops once more"):
    /// leak-CNN's second convolution (32 → 64 channels through 3×3 over 48 × 19) took
    /// 233–240 µs channels-last against 300–360 µs channels-first
    /// ([`crate::DenseConvNchw`]), but moving all its output channels first took 40–50 µs
    /// more, value by value; without a pooling, 8 and 16 input channels ran slower than
    /// channels-first.
    pub fn runs_channels_first(conv: &Conv) -> bool {
        conv.group == 1 && conv.pool_spec.input_channels >= CHANNELS_FIRST_FROM && pays_off()
    }

    /// Rows of the weights: taps × input channels.
    fn rows(&self) -> usize {
        let w = &self.window;
        w.channels * w.kernel[0] * w.kernel[1]
    }

    /// Replaces `node` (a `conv` this op runs, else nothing happens) by this op, with the
    /// per-channel multiplies and adds and the ReLU that follow it alone folded in.
    pub fn swap(model: &mut TypedModel, node: usize, conv: &Conv) -> TractResult<Option<Swap>> {
        let conv_node = model.node(node);
        let Some(mut op) = Self::for_conv(model, conv_node, conv) else {
            return Ok(None);
        };
        let (rows, outputs, c) = (op.rows(), op.outputs, op.window.channels);
        let taps = rows / c;
        let axis = op.window.batch as usize + if op.channels_first { 0 } else { 2 };
        let chain = Chain::after(model, node, axis, outputs)?;
        op.relu = chain.affine.relu;
        let mut last = chain.last;
        if let Some((pool, pooled)) = op.pool_after(model, last)? {
            op.pool = Some(pool);
            last = pooled;
        }
        if op.channels_first && !(Self::runs_channels_first(conv) && op.pool.is_some()) {
            return Ok(None);
        }
        let scale = &chain.affine.scale;
        let kernel = constant(model, conv_node.inputs[1])?;
        let bias = constant(model, conv_node.inputs[2])?;
        ensure!(
            kernel.len() == rows * outputs,
            "a kernel of {} values for {op:?}",
            kernel.len()
        );
        // OIHW ([outputs, c, kh, kw]) to [taps × c, outputs], row (tap, channel).
        let weights: Vec<f32> = (0..rows * outputs)
            .map(|at| {
                let (r, o) = (at / outputs, at % outputs);
                let (t, ch) = (r / c, r % c);
                kernel[(o * c + ch) * taps + t] * scale[o]
            })
            .collect();
        let weights = Tensor::from_shape(&[rows, outputs], &weights)?;
        let bias = Tensor::from_shape(&[outputs], &chain.affine.fold_bias(&bias))?;
        let folded = chain.ops + op.pool.is_some() as usize;
        replace(model, node, 0, last, op, [weights, bias])?;
        Ok(Some(Swap { folded }))
    }

    /// The max pooling that alone reads `out` (this op's output after the ops folded into
    /// it), when this op can fold it in: f32 data in the op's layout, a 2-D window without
    /// padding, no index outputs. Its window and output.
    fn pool_after(
        &self,
        model: &TypedModel,
        out: OutletId,
    ) -> TractResult<Option<(Window2d, OutletId)>> {
        let Some(next) = model.single_succ(out.node)? else {
            return Ok(None);
        };
        if model.output_outlets()?.contains(&out) || next.inputs != [out] {
            return Ok(None);
        }
        let shape = &model.outlet_fact(out)?.shape;
        // tract's pooling, or hush's where a model moved channels-last.
        let window = if let Some(pool) = next.op_as::<MaxPool>() {
            if pool.with_index_outputs.is_some() {
                return Ok(None);
            }
            if self.channels_first {
                Window2d::from_pool_spec(&pool.pool_spec, shape)
            } else {
                Window2d::from_channels_last_spec(&pool.pool_spec, shape)
            }
        } else if let (Some(pool), true) = (next.op_as::<MaxPoolNchw>(), self.channels_first) {
            Some(pool.window.clone())
        } else if let (Some(pool), false) = (next.op_as::<MaxPoolNhwc>(), self.channels_first) {
            Some(pool.window.clone())
        } else {
            None
        };
        Ok(window
            .filter(|p| {
                p.channels == self.outputs
                    && p.batch == self.window.batch
                    && p.input == self.window.output
                    && p.padded_width() == p.input[1]
                    && p.padded_rows() == p.input[0]
            })
            .map(|p| (p, OutletId::new(next.id, 0))))
    }

    /// With a pooling whose windows do not overlap down the rows (a stride down the rows
    /// no smaller than the window's height), the convolution's rows each row of poolings
    /// reads: its stride.
    fn pool_band(&self) -> Option<usize> {
        let pool = self.pool.as_ref()?;
        let height = (pool.kernel[0] - 1) * pool.dilations[0] + 1;
        (pool.strides[0] >= height).then_some(pool.strides[0])
    }

    /// The size of the output planes: the convolution's, or its pooling's.
    fn output_size(&self) -> [usize; 2] {
        self.pool.as_ref().map_or(self.window.output, |p| p.output)
    }

    /// The output's shape for `n` images.
    fn output_shape<D: DimLike>(&self, n: D) -> TVec<D> {
        let [h, w] = self.output_size();
        let dims = if self.channels_first {
            [self.outputs, h, w]
        } else {
            [h, w, self.outputs]
        };
        let mut shape: TVec<D> = dims.iter().map(|&d| D::from(d)).collect();
        if self.window.batch {
            shape.insert(0, n);
        }
        shape
    }

    /// Convolves `images` (whole NHWC images, or NCHW ones [`DenseConvNhwc::channels_first`])
    /// through `weights` plus `bias` into `out`.
    pub fn run(
        &self,
        images: &[f32],
        weights: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
        let w = &self.window;
        let (rows, o, c) = (self.rows(), self.outputs, w.channels);
        let n = images.len() / (c * w.plane_len()).max(1);
        let [oh, ow] = self.output_size();
        ensure!(
            images.len() == n * c * w.plane_len()
                && out.len() == n * oh * ow * o
                && weights.len() == rows * o
                && bias.len() == o,
            "{} values in, room for {} out, {} weights and {} biases for {self:?}",
            images.len(),
            out.len(),
            weights.len(),
            bias.len()
        );
        let (width, height) = (w.padded_width(), w.padded_rows());
        // Read in place where the window reads no padding.
        let in_place = width == w.input[1] && height == w.input[0];
        let mut padded = if in_place {
            Vec::new()
        } else {
            vec![0f32; width * height * c]
        };
        // The convolution's output channels-last where the op's output is not it, and its
        // pooling's.
        let scratch = |needed: bool, len: usize| if needed { vec![0f32; len] } else { Vec::new() };
        let pooled = self.pool.is_some();
        let convolved_rows = match self.pool_band() {
            Some(band) => band,
            None if self.channels_first || pooled => w.output[0],
            None => 0,
        };
        // Aligned to 64 bytes: a band's rows are read back while its stores may still wait
        // to be written, and a load that straddles two cache lines is not forwarded.
        let convolved_len = convolved_rows * w.output[1] * o;
        let mut convolved = vec![0f32; convolved_len + 16];
        let skip = convolved.as_ptr().align_offset(64).min(16);
        let convolved = &mut convolved[skip..skip + convolved_len];
        let mut pooled = scratch(self.channels_first && pooled, oh * ow * o);
        for (image, out) in images
            .chunks_exact(c * w.plane_len())
            .zip(out.chunks_exact_mut(oh * ow * o))
        {
            let image = if in_place {
                image
            } else {
                self.pad_into(image, &mut padded);
                &padded
            };
            pulp::Arch::new().dispatch(DenseImage {
                op: self,
                image,
                weights,
                bias,
                out,
                convolved,
                pooled: &mut pooled,
            });
        }
        Ok(())
    }

    /// Copies `image` into `padded` (its padded size, in the image's layout, the border
    /// zeros).
    fn pad_into(&self, image: &[f32], padded: &mut [f32]) {
        let w = &self.window;
        if self.channels_first {
            let plane = w.padded_rows() * w.padded_width();
            for (src, padded) in image
                .chunks_exact(w.plane_len())
                .zip(padded.chunks_exact_mut(plane))
            {
                w.pad_into(src, padded);
            }
        } else {
            let (c, iw) = (w.channels, w.input[1]);
            let [top, left] = w.pad_before;
            let width = w.padded_width() * c;
            let rows = padded[top * width..].chunks_exact_mut(width);
            for (row, input) in rows.zip(image.chunks_exact(iw * c)) {
                row[left * c..(left + iw) * c].copy_from_slice(input);
            }
        }
    }
}

/// One image of a dense convolution, for `pulp`: a tile of output positions × vectors of
/// output channels summed over the window's taps and input channels, each input value
/// broadcast against the vectors of its weights for the output channels.
struct DenseImage<'a> {
    op: &'a DenseConvNhwc,
    /// The image, padded where the window reads padding, in the op's layout.
    image: &'a [f32],
    weights: &'a [f32],
    bias: &'a [f32],
    out: &'a mut [f32],
    /// Scratch for the convolution's output, channels-last, when the op's output is not
    /// it (channels-first, or pooled).
    convolved: &'a mut [f32],
    /// Scratch for the pooled output, channels-last, when the op's output is channels-first.
    pooled: &'a mut [f32],
}

impl pulp::WithSimd for DenseImage<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(mut self, simd: S) {
        // Up to six positions × V vectors of output channels a tile (R × V + V + 1
        // registers, as [`PointwiseNhwc`]'s).
        if S::F32_LANES == 8 {
            self.rows::<S, 2>(simd);
        } else {
            self.rows::<S, 4>(simd);
        }
    }
}

impl DenseImage<'_> {
    /// Every output row ([`DenseImage::row`]). Channels-first, the output is computed
    /// channels-last into scratch and then moved ([`move_channels_first`]); with a pooling,
    /// pooled from scratch ([`max_pool`]) first, a band of rows at a time where the
    /// pooling's rows do not overlap ([`DenseConvNhwc::pool_band`]): the convolution's
    /// output never leaves L1 (leak-CNN's first, 467 KB whole, took 15 µs to write).
    #[inline(always)]
    fn rows<S: pulp::Simd, const V: usize>(&mut self, simd: S) {
        let w = &self.op.window;
        let (o, c, channels_first) = (self.op.outputs, w.channels, self.op.channels_first);
        let width = w.padded_width();
        let plane = width * w.padded_rows();
        let [kh, kw] = w.kernel;
        let taps = kh * kw;
        // Where weights row `t · c + ch` (tap t, input channel ch) reads output position
        // (0, 0), and how far apart consecutive columns and rows read.
        let stride = if channels_first { 1 } else { c };
        let starts: Vec<usize> = (0..taps * c)
            .map(|r| {
                let (t, ch) = (r / c, r % c);
                let (ky, kx) = (t / kw, t % kw);
                let at = ky * w.dilations[0] * width + kx * w.dilations[1];
                if channels_first {
                    ch * plane + at
                } else {
                    at * c + ch
                }
            })
            .collect();
        let (step, row_step) = (w.strides[1] * stride, w.strides[0] * width * stride);
        let out = std::mem::take(&mut self.out);
        let convolved = std::mem::take(&mut self.convolved);
        let pooled = std::mem::take(&mut self.pooled);
        let [oh, ow] = w.output;
        let row_len = ow * o;
        let positions = match self.op.pool.as_ref() {
            Some(pool) => {
                // The convolution's rows a band at a time (the rows of one row of poolings
                // where they do not overlap, else all), each band pooled as it is done,
                // and only the columns the pooling reads.
                let band = self.op.pool_band().unwrap_or(oh);
                let [ph, pw] = pool.output;
                let bands = if band == oh { 1 } else { ph };
                let band_pool = Window2d {
                    input: [band, ow],
                    output: [pool.output[0] / bands, pw],
                    ..pool.clone()
                };
                let columns =
                    (pw - 1) * pool.strides[1] + (pool.kernel[1] - 1) * pool.dilations[1] + 1;
                let rows =
                    (ph - 1) * pool.strides[0] + (pool.kernel[0] - 1) * pool.dilations[0] + 1;
                let target = if channels_first {
                    &mut *pooled
                } else {
                    &mut *out
                };
                let pooled_rows = target.chunks_exact_mut(band_pool.output[0] * pw * o);
                for (b, target) in pooled_rows.enumerate() {
                    let scratch = convolved[..band * row_len].chunks_exact_mut(row_len);
                    for (r, scratch) in scratch.enumerate() {
                        let y = b * band + r;
                        if y < rows {
                            self.row::<S, V>(simd, &starts, y * row_step, step, columns, scratch);
                        }
                    }
                    max_pool(simd, &band_pool, &convolved[..band * row_len], target);
                }
                ph * pw
            }
            None => {
                let target = if channels_first {
                    &mut *convolved
                } else {
                    &mut *out
                };
                for (y, target) in target.chunks_exact_mut(row_len).enumerate() {
                    self.row::<S, V>(simd, &starts, y * row_step, step, ow, target);
                }
                oh * ow
            }
        };
        if channels_first {
            let result = if self.op.pool.is_some() {
                &*pooled
            } else {
                &*convolved
            };
            move_channels_first(result, positions, o, out);
        }
    }

    /// The first `columns` output positions of a row (`row`, all its output channels), the
    /// row's weights rows reading the image from `starts` plus `from`: in tiles of as even a
    /// number of positions as six a tile at most allows (20 in four tiles of five, not three
    /// of six and one of two), `V` vectors of output channels a tile.
    #[inline(always)]
    fn row<S: pulp::Simd, const V: usize>(
        &self,
        simd: S,
        starts: &[usize],
        from: usize,
        step: usize,
        columns: usize,
        row: &mut [f32],
    ) {
        let o = self.op.outputs;
        let tiles = columns.div_ceil(6);
        let mut x = 0;
        for tile in 0..tiles {
            let p = (columns - x).div_ceil(tiles - tile);
            let (out, from) = (&mut row[x * o..(x + p) * o], from + x * step);
            match p {
                6 => self.position::<S, 6, V>(simd, starts, from, step, out),
                5 => self.position::<S, 5, V>(simd, starts, from, step, out),
                4 => self.position::<S, 4, V>(simd, starts, from, step, out),
                3 => self.position::<S, 3, V>(simd, starts, from, step, out),
                2 => self.position::<S, 2, V>(simd, starts, from, step, out),
                _ => self.position::<S, 1, V>(simd, starts, from, step, out),
            }
            x += p;
        }
    }

    /// The output channels of `P` positions whose weights rows read the image from
    /// `starts` plus `from`, position after position `step` apart: `V` vectors at a time,
    /// then two, then one, the last perhaps partial.
    #[inline(always)]
    fn position<S: pulp::Simd, const P: usize, const V: usize>(
        &self,
        simd: S,
        starts: &[usize],
        from: usize,
        step: usize,
        out: &mut [f32],
    ) {
        let (o, lanes) = (self.op.outputs, S::F32_LANES);
        let mut first = 0;
        while o - first >= V * lanes {
            self.block::<S, P, V, false>(simd, starts, from, step, first, out);
            first += V * lanes;
        }
        if V > 2 && o - first >= 2 * lanes {
            self.block::<S, P, 2, false>(simd, starts, from, step, first, out);
            first += 2 * lanes;
        }
        while o - first >= lanes {
            self.block::<S, P, 1, false>(simd, starts, from, step, first, out);
            first += lanes;
        }
        if first < o {
            self.block::<S, P, 1, true>(simd, starts, from, step, first, out);
        }
    }

    /// Output channels `first..` (`V` vectors, or one partial) of `P` positions.
    #[inline(always)]
    fn block<S: pulp::Simd, const P: usize, const V: usize, const PARTIAL: bool>(
        &self,
        simd: S,
        starts: &[usize],
        from: usize,
        step: usize,
        first: usize,
        out: &mut [f32],
    ) {
        let o = self.op.outputs;
        let len = if PARTIAL { o - first } else { V * S::F32_LANES };
        let bias = load::<S, V, PARTIAL>(simd, &self.bias[first..first + len]);
        let mut acc = [bias; P];
        for (&start, weights) in starts.iter().zip(self.weights.chunks_exact(o)) {
            let k = load::<S, V, PARTIAL>(simd, &weights[first..first + len]);
            // The values the tile's positions read for this row: position p's at p · step.
            let at = start + from;
            let inputs = &self.image[at..at + (P - 1) * step + 1];
            for (p, acc) in acc.iter_mut().enumerate() {
                let x = simd.splat_f32s(inputs[p * step]);
                for (a, &k) in acc.iter_mut().zip(&k) {
                    *a = simd.mul_add_e_f32s(x, k, *a);
                }
            }
        }
        for (p, acc) in acc.into_iter().enumerate() {
            let at = p * o + first;
            store::<S, V, PARTIAL>(simd, acc, self.op.relu, &mut out[at..at + len]);
        }
    }
}

/// Moves `values` (`positions` × `channels`, channels-last) into `out` (`channels` ×
/// `positions`), [`MOVE_BLOCK`] positions at a time: each channel's values for them are
/// one run of `out`, read from as many rows of `values` (all in L1 together).
fn move_channels_first(values: &[f32], positions: usize, channels: usize, out: &mut [f32]) {
    for (p0, rows) in values.chunks(MOVE_BLOCK * channels).enumerate() {
        let p0 = p0 * MOVE_BLOCK;
        for (c, plane) in out.chunks_exact_mut(positions).enumerate() {
            let run = &mut plane[p0..p0 + rows.len() / channels];
            for (v, row) in run.iter_mut().zip(rows.chunks_exact(channels)) {
                *v = row[c];
            }
        }
    }
}

/// Positions [`move_channels_first`] moves at a time.
const MOVE_BLOCK: usize = 16;

/// Max-pools `values` (channels-last, `pool.input` positions × `pool.channels`) through
/// `pool`'s window (no padding) into `out` (channels-last), a vector of channels at a time.
#[inline(always)]
fn max_pool<S: pulp::Simd>(simd: S, pool: &Window2d, values: &[f32], out: &mut [f32]) {
    let c = pool.channels;
    let [_, iw] = pool.input;
    let [kh, kw] = pool.kernel;
    let taps: Vec<usize> = (0..kh * kw)
        .map(|t| ((t / kw) * pool.dilations[0] * iw + (t % kw) * pool.dilations[1]) * c)
        .collect();
    let lanes = S::F32_LANES;
    for (at, out) in out.chunks_exact_mut(c).enumerate() {
        let (y, x) = (at / pool.output[1], at % pool.output[1]);
        let first = (y * pool.strides[0] * iw + x * pool.strides[1]) * c;
        let mut from = 0;
        // Four whole vectors at a time (four maxima at once, not one chain of them), then
        // one (pulp's partial loads and stores are calls), then the rest.
        while c - from >= 4 * lanes {
            pool_vectors::<S, 4>(simd, &taps, &values[first + from..], &mut out[from..]);
            from += 4 * lanes;
        }
        while c - from >= lanes {
            pool_vectors::<S, 1>(simd, &taps, &values[first + from..], &mut out[from..]);
            from += lanes;
        }
        if from < c {
            let len = c - from;
            let mut m = simd.splat_f32s(f32::NEG_INFINITY);
            for &t in &taps {
                let at = first + t + from;
                m = simd.max_f32s(m, simd.partial_load_f32s(&values[at..at + len]));
            }
            simd.partial_store_f32s(&mut out[from..from + len], m);
        }
    }
}

/// The maxima of `V` whole vectors of channels over a pooling's taps: `values` from the
/// window's first position and channel, `out` from the output's first channel.
#[inline(always)]
fn pool_vectors<S: pulp::Simd, const V: usize>(
    simd: S,
    taps: &[usize],
    values: &[f32],
    out: &mut [f32],
) {
    let len = V * S::F32_LANES;
    let mut m = [simd.splat_f32s(f32::NEG_INFINITY); V];
    for &t in taps {
        let x = load::<S, V, false>(simd, &values[t..t + len]);
        for (m, x) in m.iter_mut().zip(x) {
            *m = simd.max_f32s(*m, x);
        }
    }
    store::<S, V, false>(simd, m, false, &mut out[..len]);
}

macro_rules! channels_last_op {
    ($op:ty, $name:literal, $info:expr) => {
        impl Op for $op {
            fn name(&self) -> StaticName {
                $name.into()
            }

            fn info(&self) -> TractResult<Vec<String>> {
                #[allow(clippy::redundant_closure_call)]
                Ok(vec![($info)(self)])
            }

            fn validation(&self) -> Validation {
                Validation::Rounding
            }

            op_as_typed_op!();
        }

        crate::keeps_output!($op);
    };
}

channels_last_op!(DepthwiseNhwc, "HushDepthwiseNhwc", |op: &DepthwiseNhwc| {
    format!("{:?}{}", op.window, if op.relu { ", ReLU" } else { "" })
});
channels_last_op!(PointwiseNhwc, "HushPointwiseNhwc", |op: &PointwiseNhwc| {
    format!(
        "{} to {} channels, last{}",
        op.inputs,
        op.outputs,
        if op.relu { ", ReLU" } else { "" }
    )
});
channels_last_op!(DenseConvNhwc, "HushDenseConvNhwc", |op: &DenseConvNhwc| {
    format!(
        "{:?} to {} channels{}{}{}",
        op.window,
        op.outputs,
        if op.relu { ", ReLU" } else { "" },
        if op.channels_first {
            ", channels-first"
        } else {
            ""
        },
        op.pool.as_ref().map_or(String::new(), |p| format!(
            ", max pool {:?} at stride {:?}",
            p.kernel, p.strides
        ))
    )
});

channels_last_op!(MaxPoolNhwc, "HushMaxPoolNhwc", |op: &MaxPoolNhwc| {
    format!("{:?}", op.window)
});

impl KeepsOutput for MaxPoolNhwc {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let images = args_1!(inputs);
        let n = if self.window.batch {
            images.shape()[0]
        } else {
            1
        };
        kept.f32_output(&self.output_shape(n), |out| {
            self.run(images.try_as_plain_ram()?.as_slice::<f32>()?, out)
        })
    }
}

impl TypedOp for MaxPoolNhwc {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 1, "max pooling takes the images only");
        Ok(tvec!(f32::fact(
            self.output_shape(inputs[0].shape[0].clone())
        )))
    }

    as_op!();
}

impl KeepsOutput for DepthwiseNhwc {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let (images, kernel, bias) = args_3!(inputs);
        let n = if self.window.batch {
            images.shape()[0]
        } else {
            1
        };
        kept.f32_output(&self.output_shape(n), |out| {
            self.run(
                images.try_as_plain_ram()?.as_slice::<f32>()?,
                kernel.try_as_plain_ram()?.as_slice::<f32>()?,
                bias.try_as_plain_ram()?.as_slice::<f32>()?,
                out,
            )
        })
    }
}

impl KeepsOutput for PointwiseNhwc {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let (images, weights, bias) = args_3!(inputs);
        kept.f32_output(&self.output_shape(images.shape())?, |out| {
            self.run(
                images.try_as_plain_ram()?.as_slice::<f32>()?,
                weights.try_as_plain_ram()?.as_slice::<f32>()?,
                bias.try_as_plain_ram()?.as_slice::<f32>()?,
                out,
            )
        })
    }
}

impl KeepsOutput for DenseConvNhwc {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let (images, weights, bias) = args_3!(inputs);
        let n = if self.window.batch {
            images.shape()[0]
        } else {
            1
        };
        kept.f32_output(&self.output_shape(n), |out| {
            self.run(
                images.try_as_plain_ram()?.as_slice::<f32>()?,
                weights.try_as_plain_ram()?.as_slice::<f32>()?,
                bias.try_as_plain_ram()?.as_slice::<f32>()?,
                out,
            )
        })
    }
}

impl TypedOp for DepthwiseNhwc {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 3, "depthwise takes images, kernel and bias");
        Ok(tvec!(f32::fact(
            self.output_shape(inputs[0].shape[0].clone())
        )))
    }

    as_op!();
}

impl TypedOp for PointwiseNhwc {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(
            inputs.len() == 3,
            "a pointwise convolution takes images, weights and bias"
        );
        Ok(tvec!(f32::fact(self.output_shape(&inputs[0].shape)?)))
    }

    as_op!();
}

impl TypedOp for DenseConvNhwc {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(
            inputs.len() == 3,
            "a convolution takes images, weights and bias"
        );
        Ok(tvec!(f32::fact(
            self.output_shape(inputs[0].shape[0].clone())
        )))
    }

    as_op!();
}
