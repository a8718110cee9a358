//! A depthwise convolution (one input channel per group, as many outputs as inputs) as one
//! op with its own backward pass, for training on the CPU (burn flex).
//!
//! Composed from burn's primitives, a depthwise conv is a sum over kernel taps of a shifted
//! window times the tap's weight (`depthwise_by_taps` (`arch::conv`)): every tap pads, slices,
//! broadcasts and multiplies a whole activation, and its backward pass slices, multiplies,
//! reduces and scatters one back into a padded buffer. On burn flex those copies were over
//! half of a DS-CNN-S training step (BENCHMARKS.md, issue 38). Here the forward pass and both
//! gradients are loops over each `(example, channel)` plane that read the input in place:
//! no padded copy, no per-tap tensor. Other backends (the GPU) keep the composed form.
//!
//! The weights are per example or shared: `[N, C, kh·kw]` with `N` the batch or 1, as in
//! `depthwise_by_taps` (`arch::conv`), whose results this op reproduces (a test).

use std::ops::Range;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::tensor::FloatTensor;
use burn::backend::{backend_extension, Autodiff, Flex};
use burn::nn::conv::Conv2d;
use burn::tensor::{Device, Tensor, TensorData};

use super::conv::padding_pairs;

/// Where a depthwise conv's kernel taps read: kernel `[kh, kw]`, stride, dilation and the
/// zero padding `[(top, bottom), (left, right)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthwiseGeometry {
    /// Kernel `[height, width]`.
    pub kernel: [usize; 2],
    /// Stride `[height, width]`.
    pub stride: [usize; 2],
    /// Dilation `[height, width]`.
    pub dilation: [usize; 2],
    /// Zero padding `[(top, bottom), (left, right)]`.
    pub padding: [(usize, usize); 2],
}

impl DepthwiseGeometry {
    /// `c`'s geometry over an `h × w` input.
    pub fn of(c: &Conv2d, h: usize, w: usize) -> Self {
        Self {
            kernel: c.kernel_size,
            stride: c.stride,
            dilation: c.dilation,
            padding: padding_pairs(c, h, w),
        }
    }

    /// The output `[H', W']` over an `[h, w]` input.
    pub fn output(&self, [h, w]: [usize; 2]) -> [usize; 2] {
        let axis = |a: usize, len: usize| {
            let (before, after) = self.padding[a];
            let span = self.dilation[a] * (self.kernel[a] - 1) + 1;
            (len + before + after).saturating_sub(span) / self.stride[a] + 1
        };
        [axis(0, h), axis(1, w)]
    }

    /// The outputs along axis `a` whose input index for tap `t`,
    /// `o·stride + t·dilation − pad`, lies in `[0, len)`.
    fn valid(&self, a: usize, t: usize, len: usize, out: usize) -> Range<usize> {
        let (pad, stride, offset) = (self.padding[a].0, self.stride[a], t * self.dilation[a]);
        let lo = pad.saturating_sub(offset).div_ceil(stride).min(out);
        let hi = (len + pad).saturating_sub(offset).div_ceil(stride).min(out);
        lo..hi.max(lo)
    }

    /// The input index along axis `a` of output `o` under tap `t` (`o` from [`Self::valid`]).
    fn input(&self, a: usize, t: usize, o: usize) -> usize {
        o * self.stride[a] + t * self.dilation[a] - self.padding[a].0
    }
}

/// One stretch of a row that a kernel tap joins: the tap, the first input element it reads
/// and the first output element it writes (offsets within an `(example, channel)` plane),
/// and how many columns (the input stepping by the column stride, the output by one).
#[derive(Debug, Clone, Copy)]
struct RowRun {
    tap: usize,
    input: usize,
    output: usize,
    len: usize,
}

/// The shapes of one call: input `[B, C, H, W]`, weight rows `N` (1 or B), output
/// `[H', W']`, and how each plane is visited.
struct Shapes {
    batch: usize,
    channels: usize,
    weight_rows: usize,
    taps: usize,
    in_plane: usize,
    in_width: usize,
    out_plane: usize,
    out_width: usize,
    step: usize,
    visit: Visit,
}

/// How every plane of a call is visited.
enum Visit {
    /// Stride 1 on both axes: each tap is one run over the zero-padded plane.
    Padded(PaddedPlane),
    /// Otherwise: the row runs each tap joins, in place.
    Rows(Vec<RowRun>),
}

/// A zero-padded `(example, channel)` plane for a conv of stride 1: rows of `width`
/// (input width plus both pads), and one output per padded column (those past the output
/// width are never kept). Tap `t` then reads output element `r`'s input at `r + offsets[t]`
/// for every `r < outputs` in a row: each tap is one multiply-add over the whole plane.
struct PaddedPlane {
    top: usize,
    left: usize,
    width: usize,
    /// Padded plane length, plus the reach of the last tap past its end.
    len: usize,
    /// `H' · width`: the outputs, in padded-width rows.
    outputs: usize,
    offsets: Vec<usize>,
}

impl PaddedPlane {
    fn new(g: &DepthwiseGeometry, h: usize, w: usize, ho: usize) -> Option<Self> {
        if g.stride != [1, 1] {
            return None;
        }
        let [(top, bottom), (left, right)] = g.padding;
        let width = w + left + right;
        let [kh, kw] = g.kernel;
        let offsets = (0..kh)
            .flat_map(|i| (0..kw).map(move |j| i * g.dilation[0] * width + j * g.dilation[1]))
            .collect();
        Some(Self {
            top,
            left,
            width,
            len: (h + top + bottom) * width + (kw - 1) * g.dilation[1],
            outputs: ho * width,
            offsets,
        })
    }

    /// Copies `plane` `[h, w]` into the interior of `padded` (zeros around it).
    fn pad(&self, plane: &[f32], w: usize, padded: &mut [f32]) {
        for (r, row) in plane.chunks_exact(w).enumerate() {
            let at = (r + self.top) * self.width + self.left;
            padded[at..at + w].copy_from_slice(row);
        }
    }

    /// The interior `[h, w]` of `padded`, into `plane`.
    fn unpad(&self, padded: &[f32], w: usize, plane: &mut [f32]) {
        for (r, row) in plane.chunks_exact_mut(w).enumerate() {
            let at = (r + self.top) * self.width + self.left;
            row.copy_from_slice(&padded[at..at + w]);
        }
    }
}

impl Shapes {
    fn new(x: &[usize], w: &[usize], g: &DepthwiseGeometry) -> Self {
        let [batch, channels, h, width] = [x[0], x[1], x[2], x[3]];
        let [ho, wo] = g.output([h, width]);
        assert!(
            w.len() == 3 && (w[0] == 1 || w[0] == batch) && w[1] == channels,
            "depthwise weight {w:?} does not fit input {x:?}"
        );
        assert_eq!(w[2], g.kernel[0] * g.kernel[1], "depthwise weight taps");
        let visit = match PaddedPlane::new(g, h, width, ho) {
            Some(padded) => Visit::Padded(padded),
            None => Visit::Rows(row_runs(g, [h, width], [ho, wo])),
        };
        Self {
            batch,
            channels,
            weight_rows: w[0],
            taps: w[2],
            in_plane: h * width,
            in_width: width,
            out_plane: ho * wo,
            out_width: wo,
            step: g.stride[1],
            visit,
        }
    }

    /// Where example `b`, channel `c`'s taps start in the weights.
    fn taps_of(&self, b: usize, c: usize) -> usize {
        let row = if self.weight_rows == 1 { 0 } else { b };
        (row * self.channels + c) * self.taps
    }

    /// The input elements a run reads (every `step`-th of them).
    fn input_span(&self, run: &RowRun) -> Range<usize> {
        run.input..run.input + (run.len - 1) * self.step + 1
    }
}

/// The row runs of every tap over an `[h, w]` input and `[ho, wo]` output.
fn row_runs(g: &DepthwiseGeometry, [h, w]: [usize; 2], [ho, wo]: [usize; 2]) -> Vec<RowRun> {
    let [kh, kw] = g.kernel;
    let mut runs = Vec::new();
    for i in 0..kh {
        let rows = g.valid(0, i, h, ho);
        for j in 0..kw {
            let cols = g.valid(1, j, w, wo);
            if cols.is_empty() {
                continue;
            }
            let first_col = g.input(1, j, cols.start);
            runs.extend(rows.clone().map(|oh| RowRun {
                tap: i * kw + j,
                input: g.input(0, i, oh) * w + first_col,
                output: oh * wo + cols.start,
                len: cols.len(),
            }));
        }
    }
    runs
}

/// `acc[i] += a[i] · b` for a scalar `b`, or `acc[i] += a[i] · b[i]`: SIMD over equal-length
/// slices, the rest scalar.
#[inline(always)]
fn multiply_add<S: pulp::Simd>(simd: S, acc: &mut [f32], a: &[f32], b: Operand<'_>) {
    let n = acc.len();
    let (acc_v, acc_t) = S::as_mut_simd_f32s(acc);
    let (a_v, a_t) = S::as_simd_f32s(&a[..n]);
    match b {
        Operand::Scalar(b) => {
            let bv = simd.splat_f32s(b);
            for (o, x) in acc_v.iter_mut().zip(a_v) {
                *o = simd.mul_add_e_f32s(*x, bv, *o);
            }
            for (o, x) in acc_t.iter_mut().zip(a_t) {
                *o += x * b;
            }
        }
        Operand::Slice(b) => {
            let (b_v, b_t) = S::as_simd_f32s(&b[..n]);
            for ((o, x), y) in acc_v.iter_mut().zip(a_v).zip(b_v) {
                *o = simd.mul_add_e_f32s(*x, *y, *o);
            }
            for ((o, x), y) in acc_t.iter_mut().zip(a_t).zip(b_t) {
                *o += x * y;
            }
        }
    }
}

/// The second factor of [`multiply_add`].
#[derive(Clone, Copy)]
enum Operand<'a> {
    Scalar(f32),
    Slice(&'a [f32]),
}

/// `acc[i] += a[i·step] · b` (or `· b[i]`) over `acc.len()` elements, strided, scalar.
fn multiply_add_strided(acc: &mut [f32], a: &[f32], step: usize, b: Operand<'_>) {
    for (i, (o, x)) in acc.iter_mut().zip(a.iter().step_by(step)).enumerate() {
        *o += x * match b {
            Operand::Scalar(b) => b,
            Operand::Slice(b) => b[i],
        };
    }
}

/// `x[i·step] += y[i] · w` over `y.len()` elements, strided, scalar.
fn scatter_strided(x: &mut [f32], y: &[f32], step: usize, w: f32) {
    for (o, v) in x.iter_mut().step_by(step).zip(y) {
        *o += w * v;
    }
}

/// One pass of the op over every plane, run by `pulp` with the widest SIMD the CPU has
/// (AVX2 with FMA, NEON; scalar elsewhere).
enum Pass<'a> {
    /// `[B, C, H', W']` from the input and the weights.
    Forward { x: &'a [f32], weight: &'a [f32] },
    /// The input's gradient `[B, C, H, W]` from the output's and the weights.
    GradInput { grad: &'a [f32], weight: &'a [f32] },
    /// The weights' gradient `[N, C, K]` from the output's and the input (summed over the
    /// batch when `N` is 1).
    GradWeight { grad: &'a [f32], x: &'a [f32] },
}

struct Run<'a> {
    pass: Pass<'a>,
    shapes: &'a Shapes,
}

impl pulp::WithSimd for Run<'_> {
    type Output = Vec<f32>;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) -> Vec<f32> {
        let s = self.shapes;
        let runs = match &s.visit {
            Visit::Padded(pp) => return padded_pass(simd, self.pass, s, pp),
            Visit::Rows(runs) => runs,
        };
        let (cin, cout, step) = (s.in_plane, s.out_plane, s.step);
        let planes = (0..s.batch).flat_map(|b| (0..s.channels).map(move |c| (b, c)));
        match self.pass {
            Pass::Forward { x, weight } => {
                let mut y = vec![0f32; s.batch * s.channels * cout];
                for (p, (b, c)) in planes.enumerate() {
                    let taps = &weight[s.taps_of(b, c)..][..s.taps];
                    let (xp, yp) = (&x[p * cin..][..cin], &mut y[p * cout..][..cout]);
                    for run in runs {
                        let out = &mut yp[run.output..][..run.len];
                        let input = &xp[s.input_span(run)];
                        let w = Operand::Scalar(taps[run.tap]);
                        if step == 1 {
                            multiply_add(simd, out, input, w);
                        } else {
                            multiply_add_strided(out, input, step, w);
                        }
                    }
                }
                y
            }
            Pass::GradInput { grad, weight } => {
                let mut gx = vec![0f32; s.batch * s.channels * cin];
                for (p, (b, c)) in planes.enumerate() {
                    let taps = &weight[s.taps_of(b, c)..][..s.taps];
                    let (gy, gxp) = (&grad[p * cout..][..cout], &mut gx[p * cin..][..cin]);
                    for run in runs {
                        let span = s.input_span(run);
                        let (gy, w) = (&gy[run.output..][..run.len], taps[run.tap]);
                        if step == 1 {
                            multiply_add(simd, &mut gxp[span], gy, Operand::Scalar(w));
                        } else {
                            scatter_strided(&mut gxp[span], gy, step, w);
                        }
                    }
                }
                gx
            }
            Pass::GradWeight { grad, x } => {
                let wo = s.out_width;
                let mut gw = vec![0f32; s.weight_rows * s.channels * s.taps];
                // Each tap's products summed per output column across rows first, then
                // across columns once per plane.
                let mut columns = vec![0f32; s.taps * wo];
                for (p, (b, c)) in planes.enumerate() {
                    let (gy, xp) = (&grad[p * cout..][..cout], &x[p * cin..][..cin]);
                    columns.fill(0.0);
                    for run in runs {
                        let acc = &mut columns[run.tap * wo..][..run.len];
                        let gy = Operand::Slice(&gy[run.output..][..run.len]);
                        let input = &xp[s.input_span(run)];
                        if step == 1 {
                            multiply_add(simd, acc, input, gy);
                        } else {
                            multiply_add_strided(acc, input, step, gy);
                        }
                    }
                    let gt = &mut gw[s.taps_of(b, c)..][..s.taps];
                    for (t, sum) in gt.iter_mut().enumerate() {
                        *sum += columns[t * wo..][..wo].iter().sum::<f32>();
                    }
                }
                gw
            }
        }
    }
}

/// [`Run`] for stride 1: each plane padded once, each tap one multiply-add over it.
#[inline(always)]
fn padded_pass<S: pulp::Simd>(simd: S, pass: Pass<'_>, s: &Shapes, pp: &PaddedPlane) -> Vec<f32> {
    let (cin, cout, wo) = (s.in_plane, s.out_plane, s.out_width);
    let planes = (0..s.batch).flat_map(|b| (0..s.channels).map(move |c| (b, c)));
    let mut padded = vec![0f32; pp.len];
    let mut wide = vec![0f32; pp.outputs];
    match pass {
        Pass::Forward { x, weight } => {
            let mut y = vec![0f32; s.batch * s.channels * cout];
            for (p, (b, c)) in planes.enumerate() {
                let taps = &weight[s.taps_of(b, c)..][..s.taps];
                pp.pad(&x[p * cin..][..cin], s.in_width, &mut padded);
                wide.fill(0.0);
                for (t, &off) in pp.offsets.iter().enumerate() {
                    let input = &padded[off..off + pp.outputs];
                    multiply_add(simd, &mut wide, input, Operand::Scalar(taps[t]));
                }
                for (out, row) in y[p * cout..][..cout]
                    .chunks_exact_mut(wo)
                    .zip(wide.chunks_exact(pp.width))
                {
                    out.copy_from_slice(&row[..wo]);
                }
            }
            y
        }
        Pass::GradInput { grad, weight } => {
            let mut gx = vec![0f32; s.batch * s.channels * cin];
            for (p, (b, c)) in planes.enumerate() {
                let taps = &weight[s.taps_of(b, c)..][..s.taps];
                widen(&grad[p * cout..][..cout], wo, pp.width, &mut wide);
                padded.fill(0.0);
                for (t, &off) in pp.offsets.iter().enumerate() {
                    let target = &mut padded[off..off + pp.outputs];
                    multiply_add(simd, target, &wide, Operand::Scalar(taps[t]));
                }
                pp.unpad(&padded, s.in_width, &mut gx[p * cin..][..cin]);
            }
            gx
        }
        Pass::GradWeight { grad, x } => {
            let mut gw = vec![0f32; s.weight_rows * s.channels * s.taps];
            for (p, (b, c)) in planes.enumerate() {
                pp.pad(&x[p * cin..][..cin], s.in_width, &mut padded);
                widen(&grad[p * cout..][..cout], wo, pp.width, &mut wide);
                let gt = &mut gw[s.taps_of(b, c)..][..s.taps];
                for (t, &off) in pp.offsets.iter().enumerate() {
                    gt[t] += dot(simd, &wide, &padded[off..off + pp.outputs]);
                }
            }
            gw
        }
    }
}

/// `rows` `[H', wo]` laid out in rows of `width` (zeros past `wo`) in `wide`.
fn widen(rows: &[f32], wo: usize, width: usize, wide: &mut [f32]) {
    wide.fill(0.0);
    for (row, out) in rows.chunks_exact(wo).zip(wide.chunks_exact_mut(width)) {
        out[..wo].copy_from_slice(row);
    }
}

/// `Σ a[i] · b[i]` over equal-length slices, SIMD.
#[inline(always)]
fn dot<S: pulp::Simd>(simd: S, a: &[f32], b: &[f32]) -> f32 {
    let (a_v, a_t) = S::as_simd_f32s(a);
    let (b_v, b_t) = S::as_simd_f32s(&b[..a.len()]);
    let mut acc = [simd.splat_f32s(0.0); 4];
    let mut chunks = a_v.chunks_exact(4).zip(b_v.chunks_exact(4));
    for (x, y) in &mut chunks {
        for k in 0..4 {
            acc[k] = simd.mul_add_e_f32s(x[k], y[k], acc[k]);
        }
    }
    let rest = a_v.len() / 4 * 4;
    for (x, y) in a_v[rest..].iter().zip(&b_v[rest..]) {
        acc[0] = simd.mul_add_e_f32s(*x, *y, acc[0]);
    }
    let sum = simd.add_f32s(simd.add_f32s(acc[0], acc[1]), simd.add_f32s(acc[2], acc[3]));
    simd.reduce_sum_f32s(sum) + a_t.iter().zip(b_t).map(|(x, y)| x * y).sum::<f32>()
}

/// Runs `pass` over the planes of `shapes`.
fn run(pass: Pass<'_>, shapes: &Shapes) -> Vec<f32> {
    pulp::Arch::new().dispatch(Run { pass, shapes })
}

/// A flex tensor's values, in row-major order, and its shape.
fn values(t: &FloatTensor<Flex>) -> (Vec<usize>, std::borrow::Cow<'_, [f32]>) {
    let shape = t.layout().shape().to_vec();
    match t.as_slice::<f32>() {
        Some(v) => (shape, std::borrow::Cow::Borrowed(v)),
        None => {
            let data = t.to_contiguous().into_data();
            let v = data
                .try_into_vec::<f32>()
                .expect("a float tensor holds f32");
            (shape, std::borrow::Cow::Owned(v))
        }
    }
}

fn flex(values: Vec<f32>, shape: Vec<usize>) -> FloatTensor<Flex> {
    FloatTensor::<Flex>::from_data(TensorData::new(values, shape))
}

/// The depthwise conv as a backend op: implemented on burn flex and, with a hand-written
/// backward pass, on autodiff over flex.
#[backend_extension(Flex, Autodiff)]
pub trait DepthwiseOps: burn::backend::Backend {
    /// `x` `[B, C, H, W]` through per-channel kernels `weight` `[N, C, kh·kw]` (`N` is `B`
    /// or 1) with `geometry`: `[B, C, H', W']`.
    fn depthwise_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        geometry: DepthwiseGeometry,
    ) -> FloatTensor<Self>;
}

impl DepthwiseOps for Flex {
    fn depthwise_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        geometry: DepthwiseGeometry,
    ) -> FloatTensor<Self> {
        let (xs, xv) = values(&x);
        let (ws, wv) = values(&weight);
        let s = Shapes::new(&xs, &ws, &geometry);
        let y = run(
            Pass::Forward {
                x: &xv,
                weight: &wv,
            },
            &s,
        );
        let [ho, wo] = geometry.output([xs[2], xs[3]]);
        flex(y, vec![s.batch, s.channels, ho, wo])
    }
}

/// The backward step: the input's and the weights' gradients from the output's.
#[derive(Debug)]
struct DepthwiseBackward;

impl Backward<Flex, 2> for DepthwiseBackward {
    /// The checkpointed input and weights, and the geometry.
    type State = (
        burn::backend::autodiff::NodeId,
        burn::backend::autodiff::NodeId,
        DepthwiseGeometry,
    );

    fn backward(
        self,
        ops: Ops<Self::State, 2>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let [node_x, node_w] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let (x_state, w_state, geometry) = ops.state;
        let x: FloatTensor<Flex> = checkpointer.retrieve_node_output(x_state);
        let weight: FloatTensor<Flex> = checkpointer.retrieve_node_output(w_state);
        let (xs, xv) = values(&x);
        let (ws, wv) = values(&weight);
        let (_, gv) = values(&grad);
        let s = Shapes::new(&xs, &ws, &geometry);
        if let Some(node) = node_x {
            let gx = run(
                Pass::GradInput {
                    grad: &gv,
                    weight: &wv,
                },
                &s,
            );
            grads.register::<Flex>(node.id, flex(gx, xs.clone()));
        }
        if let Some(node) = node_w {
            let gw = run(Pass::GradWeight { grad: &gv, x: &xv }, &s);
            grads.register::<Flex>(node.id, flex(gw, ws.clone()));
        }
    }
}

impl<C: CheckpointStrategy> DepthwiseOps for Autodiff<Flex, C> {
    fn depthwise_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        geometry: DepthwiseGeometry,
    ) -> FloatTensor<Self> {
        let prepared = DepthwiseBackward
            .prepare::<C>([x.node(), weight.node()])
            .compute_bound()
            .stateful();
        match prepared {
            OpsKind::Tracked(mut prep) => {
                let x_state = prep.checkpoint(&x);
                let w_state = prep.checkpoint(&weight);
                let y =
                    Flex::depthwise_conv2d(x.into_primitive(), weight.into_primitive(), geometry);
                prep.finish((x_state, w_state, geometry), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(Flex::depthwise_conv2d(
                x.into_primitive(),
                weight.into_primitive(),
                geometry,
            )),
        }
    }
}

/// Whether tensors on `device` run this op (burn flex, with or without autodiff).
pub(crate) fn runs_on(device: &Device) -> bool {
    device.clone().inner() == Device::flex()
}

/// A depthwise conv of `x` `[B, C, H, W]` with `c`'s geometry and `weight` `[N, C, kh·kw]`
/// (`N` is `B` or 1): this op on burn flex, the sum over taps elsewhere.
pub(crate) fn depthwise(c: &Conv2d, x: Tensor<4>, weight: Tensor<3>) -> Tensor<4> {
    if !runs_on(&x.device()) {
        return super::conv::depthwise_by_taps(c, x, weight);
    }
    let [_, _, h, w] = x.dims();
    let geometry = DepthwiseGeometry::of(c, h, w);
    let y = <burn::backend::Dispatch as DepthwiseOps>::depthwise_conv2d(
        x.into_dispatch(),
        weight.into_dispatch(),
        geometry,
    );
    Tensor::from_dispatch(y)
}

#[cfg(test)]
mod tests {
    use burn::nn::conv::Conv2dConfig;
    use burn::nn::PaddingConfig2d;
    use burn::tensor::module::conv2d;
    use burn::tensor::ops::ConvOptions;
    use burn::tensor::{Distribution, Tensor};
    use proptest::prelude::*;

    use super::*;
    use crate::arch::conv::depthwise_by_taps;

    fn max_diff(a: Tensor<4>, b: Tensor<4>) -> f32 {
        (a - b).abs().max().into_scalar::<f32>()
    }

    /// The op's output and both gradients against burn's: the grouped conv (shared
    /// weights, `N` = 1) or the sum over taps (per-example weights), each run through
    /// burn's own autodiff, for one random geometry.
    fn check(batch: usize, [h, w]: [usize; 2], config: Conv2dConfig, per_example: bool) {
        let device = Device::flex().autodiff();
        let c = config.clone().with_bias(false).init(&device);
        let [channels, _] = config.channels;
        let (kernel, stride, dilation) = (c.kernel_size, c.stride, c.dilation);
        let rows = if per_example { batch } else { 1 };
        let k = kernel[0] * kernel[1];
        let x = Tensor::<4>::random(
            [batch, channels, h, w],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let weight =
            Tensor::<3>::random([rows, channels, k], Distribution::Normal(0.0, 1.0), &device);
        let x_ours = x.clone().require_grad();
        let w_ours = weight.clone().require_grad();
        let x_ref = x.require_grad();
        let w_ref = weight.require_grad();

        let y = depthwise(&c, x_ours.clone(), w_ours.clone());
        let y_ref = if per_example {
            depthwise_by_taps(&c, x_ref.clone(), w_ref.clone())
        } else {
            let pads = padding_pairs(&c, h, w);
            let options = ConvOptions::new_with_padding(stride, pads, dilation, channels);
            let weight = w_ref.clone().reshape([channels, 1, kernel[0], kernel[1]]);
            conv2d(x_ref.clone(), weight, None, options)
        };
        assert_eq!(y.dims(), y_ref.dims(), "output shape");
        // A loss that weighs every output differently, so a misplaced gradient shows.
        let probe = Tensor::<4>::random(y.dims(), Distribution::Normal(0.0, 1.0), &device);
        let g = (y.clone() * probe.clone()).sum().backward();
        let g_ref = (y_ref.clone() * probe).sum().backward();
        assert!(max_diff(y, y_ref) < 1e-4, "forward");
        let gx = x_ours.grad(&g).expect("input gradient");
        let gx_ref = x_ref.grad(&g_ref).expect("reference input gradient");
        assert!(max_diff(gx, gx_ref) < 1e-4, "input gradient");
        let gw = w_ours.grad(&g).expect("weight gradient");
        let gw_ref = w_ref.grad(&g_ref).expect("reference weight gradient");
        let gw_diff = (gw - gw_ref).abs().max().into_scalar::<f32>();
        assert!(gw_diff < 1e-3, "weight gradient: {gw_diff}");
    }

    #[test]
    fn it_runs_on_flex_only() {
        assert!(runs_on(&Device::flex()));
        assert!(runs_on(&Device::flex().autodiff()));
    }

    /// A depthwise conv's config: `channels` groups of one channel.
    fn depthwise_config(channels: usize, kernel: [usize; 2]) -> Conv2dConfig {
        Conv2dConfig::new([channels, channels], kernel).with_groups(channels)
    }

    #[test]
    fn ds_cnn_s_block_matches_burn() {
        // DS-CNN-S's depthwise layer on [101, 40] features: 3×3, same padding.
        let config = depthwise_config(8, [3, 3]).with_padding(PaddingConfig2d::Same);
        check(3, [51, 20], config.clone(), false);
        check(3, [51, 20], config, true);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn every_geometry_matches_burn(
            batch in 1usize..4,
            channels in 1usize..5,
            h in 1usize..12,
            w in 1usize..12,
            kernel in (1usize..4, 1usize..4),
            stride in (1usize..3, 1usize..3),
            dilation in (1usize..3, 1usize..3),
            pad in (0usize..3, 0usize..3, 0usize..3, 0usize..3),
            same in any::<bool>(),
            per_example in any::<bool>(),
        ) {
            let kernel = [kernel.0, kernel.1];
            let dilation = [dilation.0, dilation.1];
            // "Same" padding is defined for stride 1 only in burn's conv config.
            let (stride, padding) = if same {
                ([1, 1], PaddingConfig2d::Same)
            } else {
                ([stride.0, stride.1], PaddingConfig2d::Explicit(pad.0, pad.1, pad.2, pad.3))
            };
            let span = |a: usize| dilation[a] * (kernel[a] - 1) + 1;
            let fits = |a: usize, len: usize, p: usize| len + p >= span(a);
            prop_assume!(fits(0, h, pad.0 + pad.2) || same);
            prop_assume!(fits(1, w, pad.1 + pad.3) || same);
            prop_assume!(h >= span(0) || !same);
            prop_assume!(w >= span(1) || !same);
            let config = depthwise_config(channels, kernel)
                .with_stride(stride)
                .with_dilation(dilation)
                .with_padding(padding);
            check(batch, [h, w], config, per_example);
        }
    }
}
