//! Depthwise 2-D convolution over NCHW f32 data, as a tract op ([`DepthwiseNchw`]) that
//! replaces tract's `Conv` with one group per channel.
//!
//! Each plane is copied into a zero-padded plane ([`Window2d::pad_into`]), then
//! [`ROWS`] output rows × one SIMD vector of neighbouring outputs are accumulated together,
//! tap by tap, in registers: independent accumulators, so that one tap's multiply-add does
//! not wait for the previous one's. The SIMD width is picked at run time through `pulp`
//! (AVX2 + FMA on x86-64, NEON on aarch64, scalar elsewhere). Its `mul_add_e` is fused where
//! the target has FMA and a plain multiply and add where it has not (32-bit ARM's VFPv3),
//! rather than a software fused multiply-add there.
//!
//! A batch norm after the convolution (a per-channel multiply and add, as tract's declutter
//! pass leaves it) and a ReLU after that are folded into the op ([`DepthwiseNchw::swap`]):
//! the kernel and bias are scaled and shifted once when the model is prepared, and the ReLU
//! is applied as the outputs are stored, instead of three more passes over the output.

use tract_core::internal::*;
use tract_core::ops::cnn::conv::{Conv, KernelFormat};

use crate::affine::{follow, Affine, Chain};
use crate::window::{Window2d, ROWS};

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

/// What [`DepthwiseNchw::swap`] did to one convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swap {
    /// tract's elementwise ops after the convolution folded into it (a multiply, an add, a
    /// ReLU).
    pub folded: usize,
}

impl DepthwiseNchw {
    /// The op for `conv` at `node`, when it is a float depthwise convolution this op runs:
    /// NCHW or CHW images of a known shape, an OIHW kernel and a bias that are constants.
    pub fn for_conv(model: &TypedModel, node: &TypedNode, conv: &Conv) -> Option<Self> {
        let spec = &conv.pool_spec;
        let images = model.outlet_fact(*node.inputs.first()?).ok()?;
        let consts = node.inputs[1..]
            .iter()
            .all(|i| model.outlet_fact(*i).is_ok_and(|f| f.konst.is_some()));
        let window = Window2d::from_pool_spec(spec, &images.shape)?;
        let depthwise = conv.group == window.channels
            && spec.input_channels == window.channels
            && spec.output_channels == window.channels;
        (conv.q_params.is_none()
            && conv.kernel_fmt == KernelFormat::OIHW
            && depthwise
            && node.inputs.len() == 3
            && consts
            && images.datum_type == f32::datum_type())
        .then_some(DepthwiseNchw {
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
        let conv_out = OutletId::new(node, 0);
        let chain = match model.single_succ(node)? {
            Some(next) if !model.output_outlets()?.contains(&conv_out) => {
                follow(model, conv_out, next, w.batch as usize, w.channels)?
            }
            _ => Chain {
                affine: Affine::identity(w.channels),
                last: conv_out,
                ops: 0,
            },
        };
        let Affine { scale, shift, relu } = chain.affine;
        op.relu = relu;
        let kernel = constant(model, conv_node.inputs[1])?;
        let bias = constant(model, conv_node.inputs[2])?;
        let taps = kernel.len() / w.channels;
        let kernel: Vec<f32> = kernel
            .iter()
            .enumerate()
            .map(|(i, k)| k * scale[i / taps])
            .collect();
        let bias: Vec<f32> = (0..w.channels)
            .map(|c| bias[if bias.len() == 1 { 0 } else { c }] * scale[c] + shift[c])
            .collect();
        let name = conv_node.name.clone();
        let mut patch = TypedModelPatch::new(format!("hush depthwise {name}"));
        let images = patch.tap_model(model, conv_node.inputs[0])?;
        let kernel_shape = [w.channels, 1, w.kernel[0], w.kernel[1]];
        let kernel = patch.add_const(
            format!("{name}.kernel"),
            Tensor::from_shape(&kernel_shape, &kernel)?,
        )?;
        let bias = patch.add_const(
            format!("{name}.bias"),
            Tensor::from_shape(&[w.channels], &bias)?,
        )?;
        let out = patch.wire_node(&name, op, &[images, kernel, bias])?;
        patch.shunt_outside(model, chain.last, out[0])?;
        patch.apply(model)?;
        Ok(Some(Swap { folded: chain.ops }))
    }

    /// Convolves `images` with `kernel` (`[channels, 1, kh, kw]`) plus `bias` (one per
    /// channel, or one for all) into `out`.
    pub fn run(
        &self,
        images: &[f32],
        kernel: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
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
        w.images(images, out)?;
        pulp::Arch::new().dispatch(Convolve {
            w,
            relu: self.relu,
            images,
            kernel,
            bias,
            out,
        });
        Ok(())
    }
}

/// The values of the constant at `outlet`, as f32s.
fn constant(model: &TypedModel, outlet: OutletId) -> TractResult<Vec<f32>> {
    let fact = model.outlet_fact(outlet)?;
    let konst = fact.konst.as_ref().context("a constant input")?;
    Ok(konst.try_as_plain_ram()?.as_slice::<f32>()?.to_vec())
}

/// One call of the convolution, for `pulp` to run with the widest SIMD the CPU has.
struct Convolve<'a> {
    w: &'a Window2d,
    relu: bool,
    images: &'a [f32],
    kernel: &'a [f32],
    bias: &'a [f32],
    out: &'a mut [f32],
}

impl pulp::WithSimd for Convolve<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let Convolve {
            w,
            relu,
            images,
            kernel,
            bias,
            out,
        } = self;
        let taps = w.kernel[0] * w.kernel[1];
        let mut padded = w.padded_plane(0.0);
        let offsets = w.tap_offsets();
        let planes = images
            .chunks_exact(w.plane_len())
            .zip(out.chunks_exact_mut(w.output_plane_len()));
        for (plane, (input, output)) in planes.enumerate() {
            let c = plane % w.channels;
            w.pad_into(input, &mut padded);
            let k = &kernel[c * taps..(c + 1) * taps];
            let b = if bias.len() == 1 { bias[0] } else { bias[c] };
            if w.strides[1] == 1 {
                convolve_plane(simd, w, &padded, &offsets, k, b, relu, output);
            } else {
                convolve_plane_strided(w, &padded, &offsets, k, b, relu, output);
            }
        }
    }
}

/// The SIMD vector of `plane` from `at` on.
#[inline(always)]
fn load<S: pulp::Simd>(plane: &[f32], at: usize) -> S::f32s {
    let (vector, _) = S::as_simd_f32s(&plane[at..at + S::F32_LANES]);
    vector[0]
}

/// One plane of a convolution with a width stride of 1, from its padded plane; `relu`:
/// negative outputs stored as 0.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn convolve_plane<S: pulp::Simd>(
    simd: S,
    w: &Window2d,
    padded: &[f32],
    offsets: &[usize],
    kernel: &[f32],
    bias: f32,
    relu: bool,
    output: &mut [f32],
) {
    let [oh, ow] = w.output;
    let lanes = S::F32_LANES;
    // One output row to the next, in the padded plane; how far a block of outputs reads.
    let step = w.strides[0] * w.padded_width();
    let span = offsets.iter().max().copied().unwrap_or(0) + (ROWS - 1) * step + lanes;
    let weights: Vec<S::f32s> = kernel.iter().map(|&k| simd.splat_f32s(k)).collect();
    for oy in (0..oh).step_by(ROWS) {
        for start in (0..ow).step_by(lanes) {
            let window = &padded[oy * step + start..][..span];
            let mut acc = [simd.splat_f32s(bias); ROWS];
            for (&at, &wt) in offsets.iter().zip(&weights) {
                let [a0, a1, a2, a3] = &mut acc;
                *a0 = simd.mul_add_e_f32s(wt, load::<S>(window, at), *a0);
                *a1 = simd.mul_add_e_f32s(wt, load::<S>(window, at + step), *a1);
                *a2 = simd.mul_add_e_f32s(wt, load::<S>(window, at + 2 * step), *a2);
                *a3 = simd.mul_add_e_f32s(wt, load::<S>(window, at + 3 * step), *a3);
            }
            if relu {
                acc = acc.map(|a| simd.max_f32s(a, simd.splat_f32s(0.0)));
            }
            for (r, acc) in acc.iter().enumerate().take(oh - oy) {
                let dst = &mut output[(oy + r) * ow + start..][..lanes.min(ow - start)];
                match S::as_mut_simd_f32s(dst) {
                    ([whole], _) => *whole = *acc,
                    (_, part) => simd.partial_store_f32s(part, *acc),
                }
            }
        }
    }
}

/// One plane of a convolution strided along the width, output by output (no hush model
/// has one; kept correct, not fast).
fn convolve_plane_strided(
    w: &Window2d,
    padded: &[f32],
    offsets: &[usize],
    kernel: &[f32],
    bias: f32,
    relu: bool,
    output: &mut [f32],
) {
    let width = w.padded_width();
    let [sh, sw] = w.strides;
    for (oy, row) in output.chunks_exact_mut(w.output[1]).enumerate() {
        for (ox, o) in row.iter_mut().enumerate() {
            let at = oy * sh * width + ox * sw;
            let sum = offsets
                .iter()
                .zip(kernel)
                .fold(bias, |acc, (off, k)| acc + k * padded[at + off]);
            *o = if relu { sum.max(0.0) } else { sum };
        }
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

impl EvalOp for DepthwiseNchw {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let (images, kernel, bias) = args_3!(inputs);
        let w = &self.window;
        let n = if w.batch { images.shape()[0] } else { 1 };
        let mut out = vec![0f32; n * w.channels * w.output_plane_len()];
        self.run(
            images.try_as_plain_ram()?.as_slice::<f32>()?,
            kernel.try_as_plain_ram()?.as_slice::<f32>()?,
            bias.try_as_plain_ram()?.as_slice::<f32>()?,
            &mut out,
        )?;
        let out = tract_ndarray::ArrayD::from_shape_vec(&*w.output_shape(n), out)?;
        Ok(tvec!(out.into_tensor().into_tvalue()))
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
