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
//!   [`PointwiseNhwc`]'s tiles.
//!
//! Each folds the batch norm and ReLU after it, as the channels-first ops do.

use std::collections::HashSet;

use tract_core::internal::*;
use tract_core::ops::change_axes::{AxisChange, AxisOp};
use tract_core::ops::cnn::conv::Conv;
use tract_core::ops::einsum::EinSum;
use tract_core::optim::change_axes::change_axes;

use crate::affine::Chain;
use crate::pointwise::{swap_product, EinsumOfConv};
use crate::window::Window2d;
use crate::{constant, conv_window, depthwise_window, replace, KeepsOutput, KeptOutput, Swap};

/// Moves the channels of each depthwise convolution of `model` (decluttered) with 8
/// channels or more last, through as much of the graph as carries the change (tract's
/// `change_axes`: elementwise ops, einsums, tract-pulse's buffers and the convolutions
/// around them follow; the model's inputs and outputs keep their shapes), then declutters
/// it again. `None` when no convolution could move.
pub fn move_channels_last(model: &TypedModel) -> TractResult<Option<TypedModel>> {
    let mut model = model.clone();
    let mut moved = 0;
    let mut tried = HashSet::new();
    'next: loop {
        for node in model.nodes() {
            let change = if let Some(conv) = node.op_as::<Conv>() {
                let format = conv.pool_spec.data_format;
                let channels = conv.pool_spec.input_channels;
                let depthwise = conv.group > 1 && conv.group == channels;
                if !depthwise || channels < 8 || format.c_is_last() {
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

/// The most positions in a depthwise output plane for which channels-last pays at AVX2's
/// width (a pulsed trunk's few frames × bins: 30 for the bundled keyword spotter).
pub const AVX2_PLANE: usize = 64;

/// Whether running `moved` (moved channels-last, hush's ops swapped in) pays on this CPU:
/// with 16 lanes a vector (AVX-512) or 4 (NEON); with AVX2's 8 only where its depthwise
/// planes are small (at most [`AVX2_PLANE`] positions), and not on the scalar path.
///
/// Measured with callgrind, which runs pulp's AVX2 path: instructions per run fell by 24 %
/// for the bundled keyword spotter's pulsed trunk (30 positions a plane) and rose by 46 %
/// for its whole window (120 to 200) and 56 % for DS-CNN-S's at [98, 40] (980), where
/// each broadcast input feeds two vectors of outputs against AVX-512's four; on AVX-512 all
/// three ran faster (BENCHMARKS.md, "Channels-last convolutions").
pub fn pays_off(moved: &TypedModel) -> bool {
    let largest = moved
        .nodes()
        .iter()
        .filter_map(|n| n.op_as::<DepthwiseNhwc>())
        .map(|op| op.window.output_plane_len())
        .max()
        .unwrap_or(0);
    match simd_lanes() {
        8 => largest <= AVX2_PLANE,
        lanes => lanes >= 4,
    }
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
    (e.summed == e.rank - 1 && e.produced != e.out_rank - 1).then(|| AxisChange {
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
        // would wait on each other tap after tap.
        if S::F32_LANES == 8 {
            self.rows::<S, 2>(simd);
        } else {
            self.rows::<S, 4>(simd);
        }
    }
}

impl DepthwiseImage<'_> {
    /// Every output row: the positions whose window lies inside the input's row `P` at a
    /// time (they read the same taps, shifted by the stride), the others one at a time.
    #[inline(always)]
    fn rows<S: pulp::Simd, const P: usize>(&mut self, simd: S) {
        let w = self.w;
        let c = w.channels;
        let mut taps = Vec::with_capacity(w.kernel[0] * w.kernel[1]);
        let outputs = std::mem::take(&mut self.out);
        let ow = w.output[1];
        for (y, row) in outputs.chunks_exact_mut(c * ow).enumerate() {
            let mut x = 0;
            while x < ow {
                let position = y * ow + x;
                window_taps(w, position, &mut taps);
                let out = &mut row[x * c..];
                if x + P <= ow && w.inside_row(x) && w.inside_row(x + P - 1) {
                    self.position::<S, P>(simd, &taps, &mut out[..P * c]);
                    x += P;
                } else {
                    self.position::<S, 1>(simd, &taps, &mut out[..c]);
                    x += 1;
                }
            }
        }
    }

    /// The channels of `P` neighbouring output positions, the first of whose windows reads
    /// `taps` ((tap, input position) of those inside the input; the others read the same
    /// taps a stride further along the row each), into `out`.
    #[inline(always)]
    fn position<S: pulp::Simd, const P: usize>(
        &self,
        simd: S,
        taps: &[(usize, usize)],
        out: &mut [f32],
    ) {
        let (c, lanes) = (self.w.channels, S::F32_LANES);
        let mut from = 0;
        while c - from >= 4 * lanes {
            self.block::<S, P, 4, false>(simd, taps, from, out);
            from += 4 * lanes;
        }
        while c - from >= lanes {
            self.block::<S, P, 1, false>(simd, taps, from, out);
            from += lanes;
        }
        if from < c {
            self.block::<S, P, 1, true>(simd, taps, from, out);
        }
    }

    /// Channels `from..` of `P` output positions (see [`DepthwiseImage::position`]), in
    /// `V` vectors (with `PARTIAL`, one vector of the channels left).
    #[inline(always)]
    fn block<S: pulp::Simd, const P: usize, const V: usize, const PARTIAL: bool>(
        &self,
        simd: S,
        taps: &[(usize, usize)],
        from: usize,
        out: &mut [f32],
    ) {
        let c = self.w.channels;
        let step = self.w.strides[1] * c;
        let len = if PARTIAL { c - from } else { V * S::F32_LANES };
        let bias = load::<S, V, PARTIAL>(simd, &self.bias[from..from + len]);
        let mut acc = [bias; P];
        for &(tap, at) in taps {
            let k = load::<S, V, PARTIAL>(simd, &self.kernel[tap * c + from..][..len]);
            // What the tile's positions read at this tap: position p's from p · step.
            let at = at * c + from;
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
/// positions.., inputs]` to `[.., positions.., outputs]`, the output without the images'
/// first `drop` axes and with `add` leading axes of its own (each of size 1). Inputs: the
/// images, the weights `[inputs, outputs]`, the bias `[outputs]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PointwiseNhwc {
    /// Leading axes of size 1 of the images that the output does not have.
    pub drop: usize,
    /// Leading axes of size 1 the output has that the images do not.
    pub add: usize,
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
    /// whose last axis is summed against constant weights `OI` (or `IO`), giving the output
    /// channels last, every other axis in place but leading ones of size 1, over two
    /// positions or more (a single position is a matrix-vector product, tract's).
    pub fn for_einsum(
        model: &TypedModel,
        node: &TypedNode,
        einsum: &EinSum,
    ) -> Option<(Self, Vec<f32>, usize)> {
        let e = EinsumOfConv::of(model, node, einsum)?;
        let (drop, add) = (e.dropped.len(), e.added);
        // The dropped and added axes lead; the kept ones follow in order.
        let images = model.outlet_fact(node.inputs[e.images]).ok()?;
        let positions: usize = e
            .kept
            .iter()
            .map(|&(x, _)| images.shape[x].to_usize().ok())
            .product::<Option<usize>>()?;
        if e.summed != e.rank - 1
            || e.produced != e.out_rank - 1
            || e.kept.len() + drop + 1 != e.rank
            || e.kept.len() + add + 1 != e.out_rank
            || e.kept.iter().any(|&(x, y)| x < drop || x - drop + add != y)
            || positions < 2
        {
            return None;
        }
        let op = PointwiseNhwc {
            drop,
            add,
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
        ensure!(
            shape.len() > self.drop && shape.last() == Some(&D::from(self.inputs)),
            "images of shape {shape:?}; expected {} channels last",
            self.inputs
        );
        let mut out: TVec<D> = (0..self.add).map(|_| D::from(1)).collect();
        out.extend(shape[self.drop..shape.len() - 1].iter().cloned());
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
        if S::F32_LANES == 8 {
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
}

impl DenseConvNhwc {
    /// The op for `conv` at `node`, when it is a float convolution with one group over NHWC
    /// or HWC images of a known shape, with a constant OIHW kernel and bias.
    pub fn for_conv(model: &TypedModel, node: &TypedNode, conv: &Conv) -> Option<Self> {
        let window = conv_window(model, node, conv, true)?;
        (conv.group == 1).then_some(DenseConvNhwc {
            window,
            outputs: conv.pool_spec.output_channels,
            relu: false,
        })
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
        let chain = Chain::after(model, node, 2 + op.window.batch as usize, outputs)?;
        op.relu = chain.affine.relu;
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
        replace(model, node, 0, chain.last, op, [weights, bias])?;
        Ok(Some(Swap { folded: chain.ops }))
    }

    /// Convolves `images` (whole NHWC images) through `weights` plus `bias` into `out`.
    pub fn run(
        &self,
        images: &[f32],
        weights: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
        let w = &self.window;
        let (rows, o) = (self.rows(), self.outputs);
        let n = images.len() / (w.channels * w.plane_len()).max(1);
        ensure!(
            images.len() == n * w.channels * w.plane_len()
                && out.len() == n * w.output_plane_len() * o
                && weights.len() == rows * o
                && bias.len() == o,
            "{} values in, room for {} out, {} weights and {} biases for {self:?}",
            images.len(),
            out.len(),
            weights.len(),
            bias.len()
        );
        for (image, out) in images
            .chunks_exact(w.channels * w.plane_len())
            .zip(out.chunks_exact_mut(w.output_plane_len() * o))
        {
            pulp::Arch::new().dispatch(DenseImage {
                op: self,
                image,
                weights,
                bias,
                out,
            });
        }
        Ok(())
    }
}

/// One image of a dense channels-last convolution, for `pulp`: each output position's
/// channels summed over its window's taps inside the input and their input channels, each
/// input value broadcast against the vectors of its weights for the output channels.
struct DenseImage<'a> {
    op: &'a DenseConvNhwc,
    image: &'a [f32],
    weights: &'a [f32],
    bias: &'a [f32],
    out: &'a mut [f32],
}

impl pulp::WithSimd for DenseImage<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(mut self, simd: S) {
        // Six positions × V vectors of output channels a tile (R × V + V + 1 registers, as
        // [`PointwiseNhwc`]'s).
        if S::F32_LANES == 8 {
            self.rows::<S, 2>(simd);
        } else {
            self.rows::<S, 4>(simd);
        }
    }
}

impl DenseImage<'_> {
    /// Every output row, six positions at a time and the rest in one tile, over the image
    /// copied into a zero-padded one where the window reads padding (read in place
    /// otherwise), so that every position reads every tap; `V` vectors of output channels
    /// a tile.
    #[inline(always)]
    fn rows<S: pulp::Simd, const V: usize>(&mut self, simd: S) {
        let w = &self.op.window;
        let (c, o) = (w.channels, self.op.outputs);
        let (width, height) = (w.padded_width(), w.padded_rows());
        let [top, left] = w.pad_before;
        let padded_copy;
        let image: &[f32] = if width == w.input[1] && height == w.input[0] && top == 0 {
            self.image
        } else {
            let mut padded = vec![0f32; width * height * c];
            let rows = padded[top * width * c..].chunks_exact_mut(width * c);
            for (row, input) in rows.zip(self.image.chunks_exact(w.input[1] * c)) {
                row[left * c..(left + w.input[1]) * c].copy_from_slice(input);
            }
            padded_copy = padded;
            &padded_copy
        };
        let [kh, kw] = w.kernel;
        let mut taps = vec![0; kh * kw];
        let outputs = std::mem::take(&mut self.out);
        let ow = w.output[1];
        for (y, row) in outputs.chunks_exact_mut(o * ow).enumerate() {
            for (t, at) in taps.iter_mut().enumerate() {
                let (ky, kx) = (t / kw, t % kw);
                *at = (y * w.strides[0] + ky * w.dilations[0]) * width + kx * w.dilations[1];
            }
            let mut x = 0;
            while ow - x >= 6 {
                self.position::<S, 6, V>(simd, image, &taps, x, &mut row[x * o..(x + 6) * o]);
                x += 6;
            }
            let out = &mut row[x * o..];
            match ow - x {
                0 => {}
                1 => self.position::<S, 1, V>(simd, image, &taps, x, out),
                2 => self.position::<S, 2, V>(simd, image, &taps, x, out),
                3 => self.position::<S, 3, V>(simd, image, &taps, x, out),
                4 => self.position::<S, 4, V>(simd, image, &taps, x, out),
                _ => self.position::<S, 5, V>(simd, image, &taps, x, out),
            }
        }
    }

    /// The output channels of the `P` positions from column `x` of a row whose taps read
    /// the padded `image` at `taps` (for column 0), `V` vectors at a time, then one, the
    /// last perhaps partial.
    #[inline(always)]
    fn position<S: pulp::Simd, const P: usize, const V: usize>(
        &self,
        simd: S,
        image: &[f32],
        taps: &[usize],
        x: usize,
        out: &mut [f32],
    ) {
        let (o, lanes) = (self.op.outputs, S::F32_LANES);
        let mut from = 0;
        while o - from >= V * lanes {
            self.block::<S, P, V, false>(simd, image, taps, x, from, out);
            from += V * lanes;
        }
        while o - from >= lanes {
            self.block::<S, P, 1, false>(simd, image, taps, x, from, out);
            from += lanes;
        }
        if from < o {
            self.block::<S, P, 1, true>(simd, image, taps, x, from, out);
        }
    }

    /// Output channels `from..` (`V` vectors, or one partial) of `P` positions.
    #[inline(always)]
    fn block<S: pulp::Simd, const P: usize, const V: usize, const PARTIAL: bool>(
        &self,
        simd: S,
        image: &[f32],
        taps: &[usize],
        x: usize,
        from: usize,
        out: &mut [f32],
    ) {
        let (w, o) = (&self.op.window, self.op.outputs);
        let c = w.channels;
        let step = w.strides[1] * c;
        let len = if PARTIAL { o - from } else { V * S::F32_LANES };
        let bias = load::<S, V, PARTIAL>(simd, &self.bias[from..from + len]);
        let mut acc = [bias; P];
        for (&at, weights) in taps.iter().zip(self.weights.chunks_exact(c * o)) {
            let at = (at + x * w.strides[1]) * c;
            // The values the tile's positions read at this tap: position p's from p · step.
            let inputs = &image[at..at + (P - 1) * step + c];
            for (ci, weights) in weights.chunks_exact(o).enumerate() {
                let k = load::<S, V, PARTIAL>(simd, &weights[from..from + len]);
                let mut xs = [0f32; P];
                for (p, x) in xs.iter_mut().enumerate() {
                    *x = inputs[p * step + ci];
                }
                for (acc, &x) in acc.iter_mut().zip(&xs) {
                    let x = simd.splat_f32s(x);
                    for (a, &k) in acc.iter_mut().zip(&k) {
                        *a = simd.mul_add_e_f32s(x, k, *a);
                    }
                }
            }
        }
        for (p, acc) in acc.into_iter().enumerate() {
            let at = p * o + from;
            store::<S, V, PARTIAL>(simd, acc, self.op.relu, &mut out[at..at + len]);
        }
    }
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
        "{:?} to {} channels{}",
        op.window,
        op.outputs,
        if op.relu { ", ReLU" } else { "" }
    )
});

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
        let shape = channels_last_shape(&self.window, n, self.outputs);
        kept.f32_output(&shape, |out| {
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
        let n = inputs[0].shape[0].clone();
        Ok(tvec!(f32::fact(channels_last_shape(
            &self.window,
            n,
            self.outputs
        ))))
    }

    as_op!();
}
