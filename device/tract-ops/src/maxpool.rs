//! 2-D max pooling over NCHW f32 data, as a tract op ([`MaxPoolNchw`]) that replaces
//! tract's `MaxPool` (without index outputs). Each plane is copied into a plane padded with
//! −∞ ([`Window2d::pad_into`]), so an output is the maximum of its taps with no bounds to
//! check; padding never wins, as ONNX's MaxPool requires. A pooling with no padding whose
//! window stays inside the plane (the keyword spotters' 2×2 at stride 2) reads the plane
//! where it lies.

use tract_core::internal::*;
use tract_core::ops::change_axes::AxisOp;
use tract_core::ops::cnn::MaxPool;

use crate::channels_last::MaxPoolNhwc;
use crate::window::Window2d;
use crate::{KeepsOutput, KeptOutput};

/// tract's `MaxPool` over NCHW (or CHW) f32 data, without index outputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MaxPoolNchw {
    /// The pooling's shape.
    pub window: Window2d,
}

impl MaxPoolNchw {
    /// The op for `pool` at `node`, when this op runs it: f32 NCHW or CHW images of a
    /// known shape, a 2-D window, no index outputs.
    pub fn for_max_pool(model: &TypedModel, node: &TypedNode, pool: &MaxPool) -> Option<Self> {
        let images = model.outlet_fact(*node.inputs.first()?).ok()?;
        let window = Window2d::from_pool_spec(&pool.pool_spec, &images.shape)?;
        (pool.with_index_outputs.is_none()
            && node.inputs.len() == 1
            && images.datum_type == f32::datum_type())
        .then_some(MaxPoolNchw { window })
    }

    /// Pools `images` into `out`, plane by plane: a 2×2 window at stride 2 in one pass a
    /// row ([`pool_2x2`]), any other window per output row, the maximum down the window's
    /// rows first (contiguous, so it vectorises), then along the window's columns.
    pub fn run(&self, images: &[f32], out: &mut [f32]) -> TractResult<()> {
        self.run_with(images, out, true)
    }

    /// [`MaxPoolNchw::run`]; `pairs`: whether a 2×2 window at stride 2 takes
    /// [`pool_2x2`] (the tests compare it with the general loop).
    fn run_with(&self, images: &[f32], out: &mut [f32], pairs: bool) -> TractResult<()> {
        let w = &self.window;
        w.images(images, out)?;
        let mut padded = w.padded_plane(f32::NEG_INFINITY);
        let width = w.padded_width();
        let in_place =
            w.pad_before == [0, 0] && width == w.input[1] && w.padded_rows() == w.input[0];
        let [kh, kw] = w.kernel;
        let [sh, sw] = w.strides;
        let [dh, dw] = w.dilations;
        let ow = w.output[1];
        // The columns an output row reads.
        let used = (ow - 1) * sw + (kw - 1) * dw + 1;
        let mut down = vec![f32::NEG_INFINITY; used];
        let planes = images
            .chunks_exact(w.plane_len())
            .zip(out.chunks_exact_mut(w.output_plane_len()));
        for (input, output) in planes {
            let source = if in_place {
                input
            } else {
                w.pad_into(input, &mut padded);
                &padded[..]
            };
            if pairs && [kh, sh, dh, kw, sw, dw] == [2, 2, 1, 2, 2, 1] {
                pulp::Arch::new().dispatch(|| pool_2x2(source, width, output, ow));
                continue;
            }
            for (oy, row) in output.chunks_exact_mut(ow).enumerate() {
                down.fill(f32::NEG_INFINITY);
                for ky in 0..kh {
                    let src = &source[(oy * sh + ky * dh) * width..][..used];
                    for (d, &x) in down.iter_mut().zip(src) {
                        *d = greater(x, *d);
                    }
                }
                // From f32::MIN, as tract's loop: a window over padding alone gives it.
                for (ox, o) in row.iter_mut().enumerate() {
                    *o = (0..kw).fold(f32::MIN, |m, kx| greater(down[ox * sw + kx * dw], m));
                }
            }
        }
        Ok(())
    }
}

/// A 2×2 window at stride 2 over `source` (rows of `width`) into `output` (rows of `ow`):
/// the maximum down each column pair first, then across, as the general loop takes them
/// (the same comparisons in the same order, so the same outputs, NaN taps included), in
/// one pass a row whose pairs the compiler loads and splits with vector shuffles. The
/// general loop's scalar pass over each row's pairs took leak-CNN's two max pools
/// 85 and 41 µs a window, where onnxruntime takes 23 and 15 (BENCHMARKS.md).
#[inline(always)]
fn pool_2x2(source: &[f32], width: usize, output: &mut [f32], ow: usize) {
    for (oy, row) in output.chunks_exact_mut(ow).enumerate() {
        let top = &source[2 * oy * width..][..2 * ow];
        let bottom = &source[(2 * oy + 1) * width..][..2 * ow];
        for (o, (t, b)) in row
            .iter_mut()
            .zip(top.chunks_exact(2).zip(bottom.chunks_exact(2)))
        {
            let left = greater(b[0], greater(t[0], f32::NEG_INFINITY));
            let right = greater(b[1], greater(t[1], f32::NEG_INFINITY));
            *o = greater(right, greater(left, f32::MIN));
        }
    }
}

/// `x` if it is greater than `m`, else `m`: one `max` instruction, where `f32::max`'s NaN
/// rule takes four (a NaN tap gives the running maximum, as in tract's own loop).
#[inline(always)]
fn greater(x: f32, m: f32) -> f32 {
    if x > m {
        x
    } else {
        m
    }
}

impl Op for MaxPoolNchw {
    fn name(&self) -> StaticName {
        "HushMaxPoolNchw".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!("{:?}", self.window)])
    }

    op_as_typed_op!();
}

crate::keeps_output!(MaxPoolNchw);

impl KeepsOutput for MaxPoolNchw {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let images = args_1!(inputs);
        let w = &self.window;
        let n = if w.batch { images.shape()[0] } else { 1 };
        kept.f32_output(&w.output_shape(n), |out| {
            self.run(images.try_as_plain_ram()?.as_slice::<f32>()?, out)
        })
    }
}

impl TypedOp for MaxPoolNchw {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 1, "max pooling takes the images only");
        Ok(tvec!(f32::fact(
            self.window.output_shape(inputs[0].shape[0].clone())
        )))
    }

    /// Moving the channels last, on its input or output, makes it [`MaxPoolNhwc`] (where
    /// the pooling reads no padding, which that op does not pad).
    fn change_axes(
        &self,
        _model: &TypedModel,
        _node: &TypedNode,
        io: InOut,
        change: &AxisOp,
    ) -> TractResult<Option<AxisChangeConsequence>> {
        let w = &self.window;
        let c = w.batch as usize;
        let last = AxisOp::Move(c, c + 2);
        let unpadded = w.pad_before == [0, 0]
            && w.padded_width() == w.input[1]
            && w.padded_rows() == w.input[0];
        if !matches!(io, InOut::In(0) | InOut::Out(0)) || *change != last || !unpadded {
            return Ok(None);
        }
        Ok(Some(AxisChangeConsequence {
            substitute_op: Some(Box::new(MaxPoolNhwc { window: w.clone() })),
            wire_changes: tvec!((InOut::In(0), last.clone()), (InOut::Out(0), last)),
        }))
    }

    as_op!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2×2 window at stride 2 gives what the general loop gives, bit for bit, NaN, −∞
    /// and `f32::MIN` taps among the values: planes read in place and padded, widths that
    /// do and do not fill a vector of outputs, two images.
    #[test]
    fn pairs_equal_the_general_loop_bit_for_bit() {
        let mut cases = 0;
        for (input, pad_before, output) in [
            ([4, 6], [0, 0], [2, 3]),
            ([9, 38], [0, 0], [4, 19]),
            ([7, 35], [1, 1], [4, 18]),
            ([3, 40], [0, 0], [1, 20]),
            ([2, 3], [1, 1], [2, 2]),
        ] {
            let op = MaxPoolNchw {
                window: Window2d {
                    channels: 3,
                    input,
                    kernel: [2, 2],
                    strides: [2, 2],
                    dilations: [1, 1],
                    pad_before,
                    output,
                    batch: true,
                },
            };
            let n = 2 * 3 * input[0] * input[1];
            let images: Vec<f32> = (0..n)
                .map(|i| match i % 11 {
                    3 => f32::NAN,
                    7 => f32::NEG_INFINITY,
                    9 => f32::MIN,
                    _ => ((i * 7) % 13) as f32 - 6.0,
                })
                .collect();
            let m = 2 * 3 * output[0] * output[1];
            let (mut pairs, mut general) = (vec![1.5; m], vec![-1.5; m]);
            op.run_with(&images, &mut pairs, true).unwrap();
            op.run_with(&images, &mut general, false).unwrap();
            for (i, (p, g)) in pairs.iter().zip(&general).enumerate() {
                assert_eq!(p.to_bits(), g.to_bits(), "{:?}, output {i}", op.window);
            }
            cases += 1;
        }
        assert_eq!(cases, 5);
    }
}
