//! Dense (one group) 2-D convolution over NCHW f32 data, as a tract op ([`DenseConvNchw`])
//! that replaces tract's `Conv` with one group: [`crate::pointwise`]'s product over one row
//! per (input channel, tap), each as long as an output plane. With strides of 1 the rows
//! are read in place from the padded input planes (each output row is then a run of
//! consecutive values at every tap; [`DenseConvNchw::run`] says when); otherwise the
//! window's inputs are unfolded into those rows first (im2col).
//!
//! The keyword spotters' first convolutions take one input plane to 16–64 channels through
//! a 3×3 to 10×4 window, over the whole window of features; tract ran them through its
//! lazy im2col, gathering every panel of the packed input through a per-value indirection,
//! at a quarter of its matrix kernel's speed (BENCHMARKS.md, "The pointwise op"). The
//! unfolded rows here are written once, row by row along the padded plane (or its phases,
//! with a width stride: contiguous copies either way), and read by the product in place.
//!
//! A batch norm and a ReLU after the convolution are folded into it, as
//! [`crate::depthwise`] folds them.
//!
//! With many input channels ([`crate::channels_last::CHANNELS_FIRST_FROM`]) on a CPU with
//! SIMD vectors, [`crate::DenseConvNhwc`] runs the convolution instead
//! ([`crate::DenseConvNhwc::runs_channels_first`]).

use tract_core::internal::*;
use tract_core::ops::cnn::conv::Conv;

use crate::affine::Chain;
use crate::pointwise::PointwiseNchw;
use crate::window::Window2d;
use crate::{conv_window, replace, KeepsOutput, KeptOutput, Swap};

/// tract's `Conv` with one group over NCHW (or CHW) f32 data. Inputs: the images, the
/// weights `[inputs × taps, outputs]` (input channel by input channel, tap by tap), the
/// bias `[outputs]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DenseConvNchw {
    /// The window over the input planes (`channels` input channels).
    pub window: Window2d,
    /// The product over the unfolded rows: `inputs` = input channels × taps, `outputs` =
    /// output channels, the ReLU if one follows.
    pub product: PointwiseNchw,
}

impl DenseConvNchw {
    /// The op for `conv` at `node`, when it is a float convolution with one group this op
    /// runs: NCHW or CHW images of a known shape, an OIHW kernel and a bias that are
    /// constants.
    pub fn for_conv(model: &TypedModel, node: &TypedNode, conv: &Conv) -> Option<Self> {
        let window = conv_window(model, node, conv, false)?;
        let spec = &conv.pool_spec;
        (conv.group == 1).then(|| DenseConvNchw {
            product: PointwiseNchw {
                axis: window.batch as usize,
                drop: 0,
                inputs: window.channels * window.kernel[0] * window.kernel[1],
                outputs: spec.output_channels,
                relu: false,
            },
            window,
        })
    }

    /// Replaces `node` (a `conv` this op runs, else nothing happens) by this op, with the
    /// per-channel multiplies and adds and the ReLU that follow it alone folded in. Returns
    /// what it did, or `None` if `node` stays tract's.
    pub fn swap(model: &mut TypedModel, node: usize, conv: &Conv) -> TractResult<Option<Swap>> {
        let conv_node = model.node(node);
        let Some(mut op) = Self::for_conv(model, conv_node, conv) else {
            return Ok(None);
        };
        let (rows, outputs) = (op.product.inputs, op.product.outputs);
        let chain = Chain::after(model, node, op.window.batch as usize, outputs)?;
        op.product.relu = chain.affine.relu;
        let scale = &chain.affine.scale;
        // OIHW, that is [outputs, rows]: transposed to [rows, outputs].
        let kernel = crate::constant(model, conv_node.inputs[1])?;
        let bias = crate::constant(model, conv_node.inputs[2])?;
        ensure!(
            kernel.len() == rows * outputs && (bias.len() == 1 || bias.len() == outputs),
            "a kernel of {} values and {} biases for {op:?}",
            kernel.len(),
            bias.len()
        );
        let weights: Vec<f32> = (0..rows * outputs)
            .map(|at| {
                let (r, o) = (at / outputs, at % outputs);
                kernel[o * rows + r] * scale[o]
            })
            .collect();
        let weights = Tensor::from_shape(&[rows, outputs], &weights)?;
        let bias = Tensor::from_shape(&[outputs], &chain.affine.fold_bias(&bias))?;
        replace(model, node, 0, chain.last, op, [weights, bias])?;
        Ok(Some(Swap { folded: chain.ops }))
    }

    /// Convolves `images` (whole images) with `weights` (`[inputs × taps, outputs]`) plus
    /// `bias` (`[outputs]`): the output planes, image after image, into `out`. With strides
    /// of 1 and more rows than output channels (when the output rows are narrower than the
    /// padded planes) the rows are read in place, else unfolded.
    pub fn run(
        &self,
        images: &[f32],
        weights: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
        let w = &self.window;
        let (plane, positions) = (w.plane_len(), w.output_plane_len());
        let per_image = w.channels * plane;
        let per_output = self.product.outputs * positions;
        ensure!(
            images.len().is_multiple_of(per_image)
                && out.len() == images.len() / per_image * per_output,
            "{} values in and room for {} out are not whole images of {w:?} to {} channels",
            images.len(),
            out.len(),
            self.product.outputs
        );
        // In place when it writes less than unfolding would: the wide rows' scratch (none
        // when the output rows are as wide as the padded planes) against the unfolded
        // rows, channels × taps of them. A first convolution of one input plane through
        // 3×3 unfolds 9 rows for 32 output channels: leak-CNN's took 57 µs unfolded and
        // 93 µs in place.
        let scratch = if w.padded_width() == w.output[1] {
            0
        } else {
            self.product.outputs
        };
        if w.strides == [1, 1] && scratch < self.product.inputs {
            self.run_in_place(images, weights, bias, out)
        } else {
            self.run_unfolded(images, weights, bias, out)
        }
    }

    /// [`DenseConvNchw::run`] through the unfolded window ([`DenseConvNchw::unfold`]),
    /// image by image.
    fn run_unfolded(
        &self,
        images: &[f32],
        weights: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
        let w = &self.window;
        let (per_image, positions) = (w.channels * w.plane_len(), w.output_plane_len());
        let per_output = self.product.outputs * positions;
        let mut padded = w.padded_plane(0.0);
        let mut phases = if w.strides[1] > 1 {
            w.phase_planes()
        } else {
            Vec::new()
        };
        let mut rows = Vec::with_capacity(self.product.inputs * positions + CHUNK);
        for (image, out) in images
            .chunks_exact(per_image)
            .zip(out.chunks_exact_mut(per_output))
        {
            self.unfold(image, &mut padded, &mut phases, &mut rows);
            self.product.run(&rows, weights, bias, positions, out)?;
        }
        Ok(())
    }

    /// [`DenseConvNchw::run`] with strides of 1, without unfolding: an image's padded
    /// planes are laid end to end, and the product reads each (channel, tap) row in place,
    /// as the channel's padded plane from the tap's offset on. Its positions are the
    /// output rows at the padded planes' width ("wide"): output `x` of row `y` reads
    /// `y · width + x` plus the tap's offset, so every output row is a run of consecutive
    /// values, and the columns past the output's width (reading across the end of a padded
    /// row, or into the next plane) are computed and dropped as the wide rows are copied
    /// out. On leak-CNN's second convolution (32 → 64 channels through 3×3 over 48 × 19)
    /// the unfolded rows were 288 × 782 values (900 KB, more than an L2 cache) written and
    /// read again; the padded planes are 117 KB, for 12 % more products (19 columns
    /// computed a row for 17).
    fn run_in_place(
        &self,
        images: &[f32],
        weights: &[f32],
        bias: &[f32],
        out: &mut [f32],
    ) -> TractResult<()> {
        let w = &self.window;
        let [oh, ow] = w.output;
        let width = w.padded_width();
        let plane = w.padded_rows() * width;
        let (positions, wide) = (w.output_plane_len(), oh * width);
        let outputs = self.product.outputs;
        // The last plane's last tap reads `(kernel width - 1) · dilation` values past it.
        let mut planes = vec![0.0; w.channels * plane + (w.kernel[1] - 1) * w.dilations[1] + CHUNK];
        let offsets = w.tap_offsets(width);
        let starts: Vec<usize> = (0..w.channels)
            .flat_map(|c| offsets.iter().map(move |&t| c * plane + t))
            .collect();
        let mut wide_out = if width == ow {
            Vec::new()
        } else {
            vec![0.0; outputs * wide]
        };
        for (image, out) in images
            .chunks_exact(w.channels * w.plane_len())
            .zip(out.chunks_exact_mut(outputs * positions))
        {
            for (src, padded) in image
                .chunks_exact(w.plane_len())
                .zip(planes.chunks_exact_mut(plane))
            {
                w.pad_into(src, padded);
            }
            if width == ow {
                self.product
                    .run_rows(&planes, &starts, weights, bias, wide, out)?;
            } else {
                self.product
                    .run_rows(&planes, &starts, weights, bias, wide, &mut wide_out)?;
                for (row, wide) in out.chunks_exact_mut(ow).zip(wide_out.chunks_exact(width)) {
                    row.copy_from_slice(&wide[..ow]);
                }
            }
        }
        Ok(())
    }

    /// One image's window unfolded into `rows` (cleared first): row `c × taps + t` holds,
    /// for every output position, the value tap `t` of channel `c` reads there (0 in the
    /// padding). `padded` is scratch, from [`Window2d::padded_plane`] with 0; `phases` too,
    /// from [`Window2d::phase_planes`], with a width stride. Each output row's values are
    /// consecutive in the padded plane, or with a width stride in one of its phases
    /// ([`Window2d::split_phases`]), and are copied a chunk at a time ([`push_row`]).
    fn unfold(&self, image: &[f32], padded: &mut [f32], phases: &mut [f32], rows: &mut Vec<f32>) {
        let w = &self.window;
        let [oh, ow] = w.output;
        let [sh, sw] = w.strides;
        let (width, offsets) = if sw == 1 {
            let width = w.padded_width();
            (width, w.tap_offsets(width))
        } else {
            (w.phase_width(), w.phase_offsets())
        };
        rows.clear();
        for plane in image.chunks_exact(w.plane_len()) {
            w.pad_into(plane, padded);
            let source = if sw == 1 {
                &padded[..]
            } else {
                w.split_phases(padded, phases);
                &phases[..]
            };
            for &offset in &offsets {
                for y in 0..oh {
                    push_row(rows, &source[y * sh * width + offset..], ow);
                }
            }
        }
    }
}

/// Values [`push_row`] copies at once: a vector of AVX-512's.
const CHUNK: usize = crate::window::MAX_LANES;

/// Appends `values[..n]` to `rows`, copying whole chunks of [`CHUNK`] values and then
/// dropping what was copied past `n`: `values` holds at least `n` rounded up to a whole
/// chunk (a padded plane and its phases have [`CHUNK`] values of slack after the last
/// row). A copy of a fixed size is a few vector moves, where a short row copied by its
/// length is a call to `memcpy`. With the width stride's rows taken from the phases, this
/// took DS-CNN-S's first convolution (10×4 at stride 2, rows gathered value by value
/// before) from 167 to 120 µs and BC-ResNet's from 128 to 95 (BENCHMARKS.md).
#[inline(always)]
fn push_row(rows: &mut Vec<f32>, values: &[f32], n: usize) {
    let len = rows.len();
    for chunk in values[..n.div_ceil(CHUNK) * CHUNK].chunks_exact(CHUNK) {
        if let Ok(chunk) = <&[f32; CHUNK]>::try_from(chunk) {
            rows.extend_from_slice(chunk);
        }
    }
    rows.truncate(len + n);
}

impl Op for DenseConvNchw {
    fn name(&self) -> StaticName {
        "HushDenseConvNchw".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!(
            "{:?} to {} channels{}",
            self.window,
            self.product.outputs,
            if self.product.relu { ", ReLU" } else { "" }
        )])
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

crate::keeps_output!(DenseConvNchw);

impl KeepsOutput for DenseConvNchw {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let (images, weights, bias) = args_3!(inputs);
        let w = &self.window;
        let n = if w.batch { images.shape()[0] } else { 1 };
        let mut shape = w.output_shape(n);
        shape[w.batch as usize] = self.product.outputs;
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

impl TypedOp for DenseConvNchw {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(
            inputs.len() == 3,
            "a convolution takes images, weights and bias"
        );
        let w = &self.window;
        let mut shape = w.output_shape(inputs[0].shape[0].clone());
        shape[w.batch as usize] = self.product.outputs.to_dim();
        Ok(tvec!(f32::fact(shape)))
    }

    as_op!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With strides of 1, the rows read in place from the padded planes give what the
    /// unfolded rows give, bit for bit (each output sums the same rows in the same order),
    /// and every output is written: windows with and without padding and dilation, output
    /// rows as wide as the padded planes (written directly) or narrower (copied out of the
    /// wide rows), one input channel and many, one image and two, a ReLU or not.
    #[test]
    fn rows_read_in_place_equal_unfolded_rows_bit_for_bit() {
        let values = |n: usize, k: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * k) % 29) as f32 / 9.0 - 1.5).collect()
        };
        let mut cases = 0;
        let windows = [
            // channels, input, kernel, dilations, padding before, after, outputs
            (1, [6, 9], [3, 3], [1, 1], [0, 0], [0, 0], 5),
            (3, [5, 7], [3, 1], [1, 1], [1, 0], [1, 0], 17),
            (2, [8, 5], [2, 3], [2, 1], [0, 1], [1, 2], 4),
            (32, [12, 19], [3, 3], [1, 1], [0, 0], [0, 0], 9),
            (4, [4, 4], [5, 5], [1, 1], [2, 2], [2, 2], 3),
        ];
        for (channels, input, kernel, dilations, before, after, outputs) in windows {
            let output: [usize; 2] = std::array::from_fn(|a| {
                input[a] + before[a] + after[a] - (kernel[a] - 1) * dilations[a]
            });
            for (images, relu) in [(1, false), (2, true)] {
                let op = DenseConvNchw {
                    window: Window2d {
                        channels,
                        input,
                        kernel,
                        strides: [1, 1],
                        dilations,
                        pad_before: before,
                        output,
                        batch: true,
                    },
                    product: PointwiseNchw {
                        axis: 1,
                        drop: 0,
                        inputs: channels * kernel[0] * kernel[1],
                        outputs,
                        relu,
                    },
                };
                let x = values(images * channels * input[0] * input[1], 7);
                let w = values(op.product.inputs * outputs, 5);
                let b = values(outputs, 3);
                let n = images * outputs * output[0] * output[1];
                let (mut in_place, mut unfolded) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                op.run_in_place(&x, &w, &b, &mut in_place).unwrap();
                op.run_unfolded(&x, &w, &b, &mut unfolded).unwrap();
                for (i, (a, u)) in in_place.iter().zip(&unfolded).enumerate() {
                    assert!(
                        a.to_bits() == u.to_bits() && !a.is_nan(),
                        "{:?}, output {i}: {a} in place against {u} unfolded",
                        op.window
                    );
                }
                assert!(in_place.iter().any(|&v| v > 0.0));
                cases += 1;
            }
        }
        assert_eq!(cases, 10);
    }
}
