//! Depthwise 2-D convolution over NCHW f32 data, as a tract op ([`DepthwiseNchw`]) that
//! replaces tract's `Conv` with one group per channel.
//!
//! Each plane is copied into a zero-padded plane ([`Window2d::pad_into`]). With a width
//! stride of 1, an output `x` of row `y` reads the padded values from `y · stride · width +
//! x` on at each tap's offset, so a run of outputs along the padded plane's rows is one
//! long row: up to [`BLOCK`] SIMD vectors of neighbouring outputs are accumulated together,
//! tap by tap, in registers (independent accumulators, so that one tap's multiply-add does
//! not wait for the previous one's). With a height stride of 1 the whole plane is one such
//! run, and a small plane (a pulsed trunk's few frames × 10 bins) fills its vectors instead
//! of leaving most of each row's last vector idle; the outputs that fall on the padding
//! between rows are computed and dropped. With a width stride (BC-ResNet's 1×3 windows at
//! stride 2 along frequency), the padded plane is split into its phases first (the values at
//! each remainder modulo the stride, [`Window2d::split_phases`]), where a row's outputs read
//! consecutive values at each tap, and the same runs go over those. The SIMD width is picked
//! at run time through `pulp` (AVX-512 or AVX2 + FMA on x86-64, NEON on aarch64, scalar
//! elsewhere). Its `mul_add_e` is fused where
//! the target has FMA and a plain multiply and add where it has not (32-bit ARM's VFPv3),
//! rather than a software fused multiply-add there.
//!
//! A plane whose output is as wide as its input, with no stride (DS-CNN-S's 3×3
//! convolutions with "same" padding, a pulsed trunk's few frames × 10 bins), is not copied
//! at all: it is read where it lies, the kernel rows that would read the padding above or
//! below left out of the rows they would, and the taps that would read the padding left or
//! right masked to 0 (`Convolve::in_place`), with the same outputs bit for bit.
//!
//! A batch norm after the convolution (a per-channel multiply and add, as tract's declutter
//! pass leaves it) and a ReLU after that are folded into the op ([`DepthwiseNchw::swap`]):
//! the kernel and bias are scaled and shifted once when the model is prepared, and the ReLU
//! is applied as the outputs are stored, instead of three more passes over the output.

use tract_core::internal::*;
use tract_core::ops::cnn::conv::Conv;

use crate::affine::Chain;
use crate::window::Window2d;
use crate::{constant, depthwise_window, replace, KeepsOutput, KeptOutput, Swap};

/// The most SIMD vectors of outputs accumulated together (eight accumulators, a weight and
/// an input: ten of AVX2's sixteen registers).
pub const BLOCK: usize = 8;

/// tract's depthwise convolution (`Conv` with one group per channel) over NCHW (or CHW) f32
/// data. Inputs as tract's: the images, the kernel `[c, 1, kh, kw]`, the bias (`[c]` or one
/// value).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DepthwiseNchw {
    /// The convolution's shape.
    pub window: Window2d,
    /// Whether a ReLU follows, applied as outputs are stored.
    pub relu: bool,
}

impl DepthwiseNchw {
    /// The op for `conv` at `node`, when it is a float depthwise convolution this op runs:
    /// NCHW or CHW images of a known shape, an OIHW kernel and a bias that are constants.
    pub fn for_conv(model: &TypedModel, node: &TypedNode, conv: &Conv) -> Option<Self> {
        depthwise_window(model, node, conv, false).map(|window| DepthwiseNchw {
            window,
            relu: false,
        })
    }

    /// Replaces `node` (a depthwise `conv` this op runs, else nothing happens) by this op,
    /// with the per-channel multiplies and adds and the ReLU (a max with 0) that follow it
    /// alone folded in. Returns what it did, or `None` if `node` stays tract's.
    pub fn swap(model: &mut TypedModel, node: usize, conv: &Conv) -> TractResult<Option<Swap>> {
        let conv_node = model.node(node);
        let Some(mut op) = Self::for_conv(model, conv_node, conv) else {
            return Ok(None);
        };
        let w = op.window.clone();
        let chain = Chain::after(model, node, w.batch as usize, w.channels)?;
        op.relu = chain.affine.relu;
        let scale = &chain.affine.scale;
        let kernel = constant(model, conv_node.inputs[1])?;
        let bias = constant(model, conv_node.inputs[2])?;
        let taps = kernel.len() / w.channels;
        let kernel: Vec<f32> = kernel
            .iter()
            .enumerate()
            .map(|(i, k)| k * scale[i / taps])
            .collect();
        let kernel = Tensor::from_shape(&[w.channels, 1, w.kernel[0], w.kernel[1]], &kernel)?;
        let bias = Tensor::from_shape(&[w.channels], &chain.affine.fold_bias(&bias))?;
        replace(model, node, 0, chain.last, op, [kernel, bias])?;
        Ok(Some(Swap { folded: chain.ops }))
    }

    /// Convolves `images` with `kernel` (`[channels, 1, kh, kw]`) plus `bias` (one per
    /// channel, or one for all): the output planes, one after another, into `out`.
    pub fn run(
        &self,
        images: &[f32],
        kernel: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
        let w = &self.window;
        self.check_weights(kernel, bias)?;
        let per_image = w.channels * w.plane_len();
        ensure!(
            images.len().is_multiple_of(per_image),
            "{} values are not whole images of {w:?}",
            images.len()
        );
        let outputs = images.len() / w.plane_len() * w.output_plane_len();
        ensure!(
            out.len() == outputs,
            "room for {} outputs; {w:?} gives {outputs}",
            out.len()
        );
        pulp::Arch::new().dispatch(Convolve {
            w,
            weights: Weights {
                kernel,
                bias,
                relu: self.relu,
            },
            images,
            out,
            in_place: true,
        });
        Ok(())
    }

    /// That `kernel` holds each channel's taps and `bias` one value or one a channel.
    fn check_weights(&self, kernel: &[f32], bias: &[f32]) -> TractResult<()> {
        let w = &self.window;
        let taps = w.kernel[0] * w.kernel[1];
        ensure!(
            kernel.len() == w.channels * taps,
            "depthwise kernel has {} values; expected {} channels × {taps} taps",
            kernel.len(),
            w.channels
        );
        ensure!(
            bias.len() == w.channels || bias.len() == 1,
            "depthwise bias has {} values; expected 1 or {}",
            bias.len(),
            w.channels
        );
        Ok(())
    }
}

/// One call of the convolution, for `pulp` to run with the widest SIMD the CPU has.
struct Convolve<'a> {
    w: &'a Window2d,
    weights: Weights<'a>,
    images: &'a [f32],
    /// Where the output planes go, one after another.
    out: &'a mut [f32],
    /// Whether planes [`Convolve::in_place`] can run are read in place (else every plane
    /// is padded; the tests compare the two).
    in_place: bool,
}

/// The kernel and bias of a call, per channel, and whether a ReLU follows.
struct Weights<'a> {
    kernel: &'a [f32],
    bias: &'a [f32],
    relu: bool,
}

impl Weights<'_> {
    /// Channel `c`'s taps `taps` (of all the kernel's, read at `offsets`) over `padded`,
    /// masked by `masks` from the given output of a plane on.
    #[inline(always)]
    fn channel<'b>(
        &'b self,
        c: usize,
        padded: &'b [f32],
        offsets: &'b [usize],
        taps: std::ops::Range<usize>,
        masks: Option<(&'b ColumnMasks, usize)>,
    ) -> Taps<'b> {
        let kernel = &self.kernel[c * offsets.len()..(c + 1) * offsets.len()];
        Taps {
            padded,
            first_tap: taps.start,
            offsets: &offsets[taps.clone()],
            kernel: &kernel[taps],
            bias: self.bias[if self.bias.len() == 1 { 0 } else { c }],
            relu: self.relu,
            masks,
        }
    }
}

impl pulp::WithSimd for Convolve<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let columns = self.in_place.then(|| ColumnMasks::for_window::<S>(self.w));
        match columns.flatten() {
            Some(columns) => self.in_place(simd, &columns),
            None => self.padded(simd),
        }
    }
}

impl Convolve<'_> {
    /// Each plane copied into a zero-padded plane and convolved there.
    #[inline(always)]
    fn padded<S: pulp::Simd>(self, simd: S) {
        let Convolve {
            w,
            weights,
            images,
            out,
            ..
        } = self;
        let mut padded = w.padded_plane(0.0);
        // With a width stride, the padded plane split into its phases (`Window2d::phases`),
        // read at each tap's place there.
        let sw = w.strides[1];
        let (width, offsets, mut phases) = if sw == 1 {
            let width = w.padded_width();
            (width, w.tap_offsets(width), None)
        } else {
            let width = w.phase_width();
            (width, w.phase_offsets(), Some(w.phase_planes()))
        };
        let [oh, ow] = w.output;
        // The runs of outputs along the padded rows: the whole plane at a height stride of
        // 1, else one run an output row. Run `y` reads the padded plane from `y · stride ·
        // width` on and is written to `scratch` from row `y` on.
        let (runs, run_len) = if w.strides[0] == 1 {
            (1, (oh - 1) * width + ow)
        } else {
            (oh, ow)
        };
        let mut scratch = vec![0f32; oh * width + S::F32_LANES];
        let planes = images.chunks_exact(w.plane_len());
        for ((plane, input), out) in planes.enumerate().zip(out.chunks_exact_mut(oh * ow)) {
            let c = plane % w.channels;
            w.pad_into(input, &mut padded);
            let source = match &mut phases {
                None => &padded[..],
                Some(phases) => {
                    w.split_phases(&padded, phases);
                    &phases[..]
                }
            };
            let conv = weights.channel(c, source, &offsets, 0..offsets.len(), None);
            for y in 0..runs {
                let from = y * w.strides[0] * width;
                conv.run(simd, from, run_len, &mut scratch[y * width..]);
            }
            for (row, out) in scratch.chunks(width).zip(out.chunks_exact_mut(ow)) {
                out.copy_from_slice(&row[..ow]);
            }
        }
    }

    /// The planes read where they lie, for windows as wide as their input: with strides of
    /// 1 and as much padding left and right as the kernel is wide, an output plane is as
    /// wide as its input, so output `p` of a plane (`y · width + x`) reads input `p + dy ·
    /// dh · width + dx · dw − top · width − left` at tap `(dy, dx)`, and the plane's outputs
    /// are runs along it with no padding to copy in and no rows to copy out. The rows are
    /// split into segments ([`RowSegment`]) by which kernel rows read inside the plane: a
    /// segment's outputs run over those kernel rows alone, so nothing is read from the
    /// padding above or below (the interior rows, all of them, are one segment). A tap
    /// column that reaches past a row's end for some outputs reads the next or the previous
    /// row there, so its inputs are masked to 0 on those lanes ([`ColumnMasks`]). What is
    /// left out or masked is exactly what the padding gives, so the outputs are the padded
    /// path's, bit for bit. A segment's last vector may spill into the next segment's
    /// outputs, which are written after it. DS-CNN-S's 3×3 convolutions ("same" padding)
    /// and a pulsed trunk's (a few frames × 10 bins, no padding in time) run here: copying
    /// each small plane in and out cost more than convolving it.
    #[inline(always)]
    fn in_place<S: pulp::Simd>(self, simd: S, columns: &ColumnMasks) {
        let Convolve {
            w,
            weights,
            images,
            out,
            ..
        } = self;
        let mut planes = InPlacePlanes::new::<S>(w, weights, columns);
        // A plane's last vector may spill into the next plane's outputs, which are written
        // after it; a plane whose spill would pass the end of `out` is written to `last`
        // and copied from there.
        let run_len = w.output_plane_len();
        let mut last = vec![0f32; planes.written];
        for plane in 0..images.len() / w.plane_len() {
            let at = plane * run_len;
            if at + planes.written <= out.len() {
                planes.convolve(simd, images, plane, &mut out[at..]);
            } else {
                planes.convolve(simd, images, plane, &mut last);
                out[at..at + run_len].copy_from_slice(&last[..run_len]);
            }
        }
    }
}

/// The convolution of planes [`Convolve::in_place`] reads where they lie, one plane at a
/// time.
struct InPlacePlanes<'a> {
    w: &'a Window2d,
    weights: Weights<'a>,
    columns: &'a ColumnMasks,
    segments: Vec<RowSegment>,
    /// Each tap's offset in the unpadded plane from the value `front` before the one its
    /// output's first tap reads.
    offsets: Vec<usize>,
    front: usize,
    /// What a plane's outputs read, from `front` values before the plane on.
    reach: usize,
    /// How many outputs a plane's runs write: its own and up to a vector past them.
    written: usize,
    /// A copy of a plane whose reads would leave the images, with zeros around it.
    edge: Vec<f32>,
}

impl<'a> InPlacePlanes<'a> {
    /// What every plane of `w` shares: its row segments, tap offsets and reach.
    #[inline(always)]
    fn new<S: pulp::Simd>(w: &'a Window2d, weights: Weights<'a>, columns: &'a ColumnMasks) -> Self {
        let lanes = S::F32_LANES;
        let kw = w.kernel[1];
        let width = w.input[1];
        let segments = RowSegment::of(w);
        let offsets = w.tap_offsets(width);
        let front = w.pad_before[0] * width + w.pad_before[1];
        let reach = segments
            .iter()
            .filter(|s| s.kernel_rows.start < s.kernel_rows.end)
            .map(|s| {
                let last_tap = s.kernel_rows.end * kw - 1;
                s.rows.start * width
                    + (s.rows.len() * width).div_ceil(lanes) * lanes
                    + offsets[last_tap]
            })
            .max()
            .unwrap_or(0);
        let edge = vec![0f32; (front + w.plane_len()).max(reach)];
        InPlacePlanes {
            w,
            weights,
            columns,
            segments,
            offsets,
            front,
            reach,
            written: w.output_plane_len() + lanes,
            edge,
        }
    }

    /// Plane `plane` of `images` (whole images, planes one after another) convolved into
    /// the start of `dst`, which has room for [`InPlacePlanes::written`] outputs. The
    /// plane's outputs read the planes before and after it only on lanes masked to 0.
    #[inline(always)]
    fn convolve<S: pulp::Simd>(&mut self, simd: S, images: &[f32], plane: usize, dst: &mut [f32]) {
        let InPlacePlanes {
            w,
            weights,
            columns,
            segments,
            offsets,
            front,
            reach,
            edge,
            ..
        } = self;
        let (kw, width, plane_len) = (w.kernel[1], w.input[1], w.plane_len());
        let c = plane % w.channels;
        let at = plane * plane_len;
        let (source, from) = if at >= *front && at - *front + *reach <= images.len() {
            (images, at - *front)
        } else {
            edge[*front..*front + plane_len].copy_from_slice(&images[at..at + plane_len]);
            (&edge[..], 0)
        };
        for s in segments.iter() {
            let taps = s.kernel_rows.start * kw..s.kernel_rows.end * kw;
            let first = s.rows.start * width;
            let masks = Some((&**columns, first));
            let conv = weights.channel(c, source, offsets, taps, masks);
            conv.run(simd, from + first, s.rows.len() * width, &mut dst[first..]);
        }
    }
}

/// Output rows of a window [`Convolve::in_place`] runs that read the same kernel rows
/// inside the plane: the rest of the kernel's rows would read the padding above or below.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RowSegment {
    /// The output rows.
    rows: std::ops::Range<usize>,
    /// The kernel rows that read inside the plane for each of them.
    kernel_rows: std::ops::Range<usize>,
}

impl RowSegment {
    /// The segments of `w`'s output rows, in order.
    fn of(w: &Window2d) -> Vec<RowSegment> {
        let [kh, _] = w.kernel;
        let [dh, _] = w.dilations;
        let (ih, top) = (w.input[0], w.pad_before[0]);
        let mut segments: Vec<RowSegment> = Vec::new();
        for y in 0..w.output[0] {
            // Kernel row `dy` reads input row `y + dy · dh − top`.
            let inside = |dy: &usize| (y + dy * dh).checked_sub(top).is_some_and(|r| r < ih);
            let kernel_rows = match (0..kh).find(inside) {
                Some(first) => first..(first..kh).find(|dy| !inside(dy)).unwrap_or(kh),
                None => 0..0,
            };
            match segments.last_mut() {
                Some(s) if s.kernel_rows == kernel_rows => s.rows.end = y + 1,
                _ => segments.push(RowSegment {
                    rows: y..y + 1,
                    kernel_rows,
                }),
            }
        }
        segments
    }
}

/// For a convolution [`Convolve::in_place`] runs, which input lanes each tap column may
/// read: one mask a plane's output and column (and a vector's worth past the last output,
/// where a run's last vector reads),
/// all ones where the column's input lies inside the output's row and zero where it lies
/// in the row before or after.
struct ColumnMasks {
    /// Where each tap's masks start in `bits`, if its column reaches past a row's ends for
    /// some output.
    taps: Vec<Option<usize>>,
    /// The masks, `[column][output]`.
    bits: Vec<u32>,
}

impl ColumnMasks {
    /// The masks of `w` at `S`'s vector width, when [`Convolve::in_place`] runs `w`: with
    /// strides of 1 and an output as wide as the input.
    fn for_window<S: pulp::Simd>(w: &Window2d) -> Option<ColumnMasks> {
        let [kh, kw] = w.kernel;
        let [_, dw] = w.dilations;
        let iw = w.input[1];
        if w.strides != [1, 1] || w.output[1] != iw {
            return None;
        }
        // A run's last vector ends less than a vector past the plane's last output.
        let outputs = w.output_plane_len() + S::F32_LANES;
        let mut masked = vec![false; kw];
        let mut bits = vec![0u32; kw * outputs];
        // Each column's masks repeat a row's (no division by the width per output: this
        // runs on every call).
        let mut row = vec![0u32; iw];
        for (dx, column) in bits.chunks_exact_mut(outputs).enumerate() {
            for (x, bit) in row.iter_mut().enumerate() {
                let inside = (x + dx * dw)
                    .checked_sub(w.pad_before[1])
                    .is_some_and(|x| x < iw);
                *bit = if inside { u32::MAX } else { 0 };
                masked[dx] |= !inside;
            }
            for chunk in column.chunks_mut(iw) {
                chunk.copy_from_slice(&row[..chunk.len()]);
            }
        }
        let taps = (0..kh * kw)
            .map(|t| masked[t % kw].then_some(t % kw * outputs))
            .collect();
        Some(ColumnMasks { taps, bits })
    }

    /// The masks of tap `tap`'s column from output `p` of a plane on, if it needs them.
    #[inline(always)]
    fn of(&self, tap: usize, p: usize) -> Option<&[u32]> {
        Some(&self.bits[self.taps[tap]? + p..])
    }
}

/// One plane's padded values and the kernel taps over them.
struct Taps<'a> {
    padded: &'a [f32],
    /// The kernel's tap `offsets[0]` and `kernel[0]` belong to.
    first_tap: usize,
    offsets: &'a [usize],
    kernel: &'a [f32],
    bias: f32,
    relu: bool,
    /// For [`Convolve::in_place`]: the lanes each tap column may read, and the output of
    /// the plane the run starts at.
    masks: Option<(&'a ColumnMasks, usize)>,
}

impl Taps<'_> {
    /// The `len` outputs whose first reads the padded plane at `from`, into `out` (which
    /// has room for `len` rounded up to whole vectors).
    #[inline(always)]
    fn run<S: pulp::Simd>(&self, simd: S, from: usize, len: usize, out: &mut [f32]) {
        let lanes = S::F32_LANES;
        let vectors = len.div_ceil(lanes);
        let mut v = 0;
        while vectors - v >= BLOCK {
            self.block::<S, BLOCK>(simd, from, v, &mut out[v * lanes..]);
            v += BLOCK;
        }
        // The rest in one block, so that its vectors too accumulate side by side.
        let out = &mut out[v * lanes..];
        match vectors - v {
            0 => {}
            1 => self.block::<S, 1>(simd, from, v, out),
            2 => self.block::<S, 2>(simd, from, v, out),
            3 => self.block::<S, 3>(simd, from, v, out),
            4 => self.block::<S, 4>(simd, from, v, out),
            5 => self.block::<S, 5>(simd, from, v, out),
            6 => self.block::<S, 6>(simd, from, v, out),
            _ => self.block::<S, 7>(simd, from, v, out),
        }
    }

    /// `B` vectors of outputs from the run's vector `v` on (the run's first output reads the
    /// padded plane at `from`), into the start of `out`.
    #[inline(always)]
    fn block<S: pulp::Simd, const B: usize>(
        &self,
        simd: S,
        from: usize,
        v: usize,
        out: &mut [f32],
    ) {
        let lanes = S::F32_LANES;
        let at = from + v * lanes;
        let mut acc = [simd.splat_f32s(self.bias); B];
        for (tap, (&offset, &k)) in self.offsets.iter().zip(self.kernel).enumerate() {
            let weight = simd.splat_f32s(k);
            let (inputs, _) = S::as_simd_f32s(&self.padded[at + offset..][..B * lanes]);
            let masks = self
                .masks
                .and_then(|(m, p)| m.of(self.first_tap + tap, p + v * lanes));
            match masks {
                None => {
                    for (a, &x) in acc.iter_mut().zip(inputs) {
                        *a = simd.mul_add_e_f32s(weight, x, *a);
                    }
                }
                Some(masks) => {
                    let (masks, _) = S::as_simd_u32s(&masks[..B * lanes]);
                    for ((a, &x), &m) in acc.iter_mut().zip(inputs).zip(masks) {
                        let x =
                            simd.transmute_f32s_u32s(simd.and_u32s(simd.transmute_u32s_f32s(x), m));
                        *a = simd.mul_add_e_f32s(weight, x, *a);
                    }
                }
            }
        }
        if self.relu {
            let zero = simd.splat_f32s(0.0);
            for a in &mut acc {
                *a = simd.max_f32s(*a, zero);
            }
        }
        let (dst, _) = S::as_mut_simd_f32s(&mut out[..B * lanes]);
        dst.copy_from_slice(&acc);
    }
}

impl Op for DepthwiseNchw {
    fn name(&self) -> StaticName {
        "HushDepthwiseNchw".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!("{:?}", self.window)])
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

crate::keeps_output!(DepthwiseNchw);

impl KeepsOutput for DepthwiseNchw {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let (images, kernel, bias) = args_3!(inputs);
        let w = &self.window;
        let n = if w.batch { images.shape()[0] } else { 1 };
        kept.f32_output(&w.output_shape(n), |out| {
            self.run(
                images.try_as_plain_ram()?.as_slice::<f32>()?,
                kernel.try_as_plain_ram()?.as_slice::<f32>()?,
                bias.try_as_plain_ram()?.as_slice::<f32>()?,
                out,
            )
        })
    }
}

impl TypedOp for DepthwiseNchw {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 3, "depthwise takes images, kernel and bias");
        Ok(tvec!(f32::fact(
            self.window.output_shape(inputs[0].shape[0].clone())
        )))
    }

    as_op!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scalar path (32-bit ARM's, one lane a vector) gives what the widest path this
    /// machine has gives, on planes whose runs end inside a block, on a block's edge and
    /// past several blocks, with both strides.
    #[test]
    fn the_scalar_path_equals_the_widest_one() {
        for (input, kernel, strides, pad) in [
            ([5, 10], [3, 3], [1, 1], [0, 1]),
            ([2, 3], [1, 3], [1, 1], [0, 1]),
            ([24, 20], [3, 3], [1, 1], [1, 1]),
            ([9, 23], [3, 1], [2, 1], [1, 0]),
            ([7, 11], [2, 3], [1, 2], [2, 1]),
        ] {
            let output = [0, 1].map(|a| (input[a] + 2 * pad[a] - kernel[a]) / strides[a] + 1);
            let op = DepthwiseNchw {
                window: Window2d {
                    channels: 3,
                    input,
                    kernel,
                    strides,
                    dilations: [1, 1],
                    pad_before: pad,
                    output,
                    batch: true,
                },
                relu: true,
            };
            let values = |n: usize, k: usize| -> Vec<f32> {
                (0..n).map(|i| ((i * k) % 23) as f32 / 7.0 - 1.5).collect()
            };
            let images = values(2 * 3 * input[0] * input[1], 7);
            let weights = values(3 * kernel[0] * kernel[1], 5);
            let bias = values(3, 3);
            // NaN where nothing was written.
            let outputs = 2 * 3 * output[0] * output[1];
            let mut widest = vec![f32::NAN; outputs];
            op.run(&images, &weights, &bias, &mut widest).unwrap();
            let mut scalar = vec![f32::NAN; outputs];
            pulp::WithSimd::with_simd(
                Convolve {
                    w: &op.window,
                    weights: Weights {
                        kernel: &weights,
                        bias: &bias,
                        relu: true,
                    },
                    images: &images,
                    out: &mut scalar,
                    in_place: true,
                },
                pulp::Scalar::new(),
            );
            for (i, (a, b)) in widest.iter().zip(&scalar).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5,
                    "{input:?} {kernel:?} {strides:?}: {i}"
                );
            }
            assert!(widest.iter().any(|&v| v > 0.0) && widest.contains(&0.0));
        }
    }

    /// Planes read in place give the padded path's outputs bit for bit, at the widest
    /// SIMD width and the scalar one: every width padding that keeps a plane as wide as its
    /// input (all left, all right, split), padding above and below or not (as much as the
    /// kernel is high, more, all above, all below), dilated or not, planes smaller than a
    /// vector and larger than a block, one image and several, a ReLU or not, one bias or
    /// one a channel.
    #[test]
    fn planes_read_in_place_equal_padded_planes_bit_for_bit() {
        let mut cases = 0;
        for (input, kernel, dilations) in [
            ([5, 10], [3, 3], [1, 1]),
            ([3, 10], [3, 3], [1, 1]),
            ([1, 1], [1, 1], [1, 1]),
            ([4, 2], [2, 3], [1, 1]),
            ([6, 7], [2, 3], [2, 2]),
            ([9, 23], [3, 5], [1, 1]),
            ([40, 33], [3, 3], [1, 1]),
            ([7, 13], [1, 4], [1, 3]),
        ] {
            let span = (kernel[1] - 1) * dilations[1];
            let height: usize = (kernel[0] - 1) * dilations[0];
            let vertical = [
                (0, 0),
                (height / 2, height - height / 2),
                (height, 0),
                (0, height),
                (height + 2, 1),
            ];
            for ((top, bottom), left) in vertical
                .into_iter()
                .flat_map(|v| (0..=span).map(move |l| (v, l)))
            {
                let Some(rows) = (input[0] + top + bottom).checked_sub(height) else {
                    continue;
                };
                for (relu, channels, images) in [(true, 3, 2), (false, 1, 1), (true, 2, 3)] {
                    let output = [rows, input[1]];
                    let window = Window2d {
                        channels,
                        input,
                        kernel,
                        strides: [1, 1],
                        dilations,
                        pad_before: [top, left],
                        output,
                        batch: true,
                    };
                    let values = |n: usize, k: usize| -> Vec<f32> {
                        (0..n).map(|i| ((i * k) % 29) as f32 / 9.0 - 1.5).collect()
                    };
                    let data = values(images * channels * input[0] * input[1], 7);
                    let weights = values(channels * kernel[0] * kernel[1], 5);
                    let bias = values(if relu { channels } else { 1 }, 3);
                    let run = |in_place: bool, scalar: bool| {
                        // NaN where nothing was written.
                        let mut out = vec![f32::NAN; images * channels * output[0] * output[1]];
                        let conv = Convolve {
                            w: &window,
                            weights: Weights {
                                kernel: &weights,
                                bias: &bias,
                                relu,
                            },
                            images: &data,
                            out: &mut out,
                            in_place,
                        };
                        if scalar {
                            pulp::WithSimd::with_simd(conv, pulp::Scalar::new());
                        } else {
                            pulp::Arch::new().dispatch(conv);
                        }
                        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    };
                    assert!(ColumnMasks::for_window::<pulp::Scalar>(&window).is_some());
                    for scalar in [false, true] {
                        let padded = run(false, scalar);
                        assert!(padded.iter().all(|&v| !f32::from_bits(v).is_nan()));
                        assert_eq!(run(true, scalar), padded, "{window:?}, scalar {scalar}");
                    }
                    cases += 1;
                }
            }
        }
        assert!(cases > 200);
    }

    /// DS-CNN-S's 3×3 window with "same" padding: the first output row leaves out the
    /// kernel's top row, the last its bottom row, and every row between reads all three.
    #[test]
    fn rows_are_split_where_the_kernel_reads_the_padding() {
        let w = Window2d {
            channels: 1,
            input: [49, 20],
            kernel: [3, 3],
            strides: [1, 1],
            dilations: [1, 1],
            pad_before: [1, 1],
            output: [49, 20],
            batch: true,
        };
        let segments = |w: &Window2d| {
            RowSegment::of(w)
                .into_iter()
                .map(|s| (s.rows, s.kernel_rows))
                .collect::<Vec<_>>()
        };
        assert_eq!(segments(&w), [(0..1, 1..3), (1..48, 0..3), (48..49, 0..2)]);
        // Padding taller than the kernel: rows that read nothing but padding.
        let tall = Window2d {
            input: [2, 20],
            kernel: [2, 3],
            pad_before: [3, 1],
            output: [5, 20],
            ..w
        };
        assert_eq!(
            segments(&tall),
            [(0..2, 0..0), (2..3, 1..2), (3..4, 0..2), (4..5, 0..1)]
        );
    }
}
