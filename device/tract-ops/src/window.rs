//! The shape of a 2-D sliding window over planes of f32 data (a depthwise convolution, a
//! pooling), read from tract's [`PoolSpec`], and the padded scratch plane both ops read
//! from: each (image, channel) plane is copied into a plane whose border holds the padding
//! value, rows one after another, so the ops' inner loops have no edge cases. A row is as
//! wide as the input with its padding on both sides, so that an output row's taps read
//! inside its own row; a few values of slack after the last row let a SIMD vector that
//! starts at any output read past it (the depthwise kernel computes along the rows as if
//! the plane were one long row, and drops the outputs that straddle two rows).

use tract_core::internal::*;
use tract_core::ops::cnn::PoolSpec;
use tract_core::ops::nn::DataFormat;

/// The widest SIMD vector any dispatch target has, in f32 lanes (AVX-512).
pub const MAX_LANES: usize = 16;

/// A 2-D window over `channels` planes: every size is per spatial axis, `[height, width]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Window2d {
    /// Planes per image.
    pub channels: usize,
    /// Input height and width.
    pub input: [usize; 2],
    /// Window (kernel) height and width.
    pub kernel: [usize; 2],
    /// Strides.
    pub strides: [usize; 2],
    /// Dilations.
    pub dilations: [usize; 2],
    /// Padding rows above and columns left of the input.
    pub pad_before: [usize; 2],
    /// Output height and width.
    pub output: [usize; 2],
    /// Whether the images have a batch axis (NCHW) or not (tract's CHW, where it has
    /// dropped a batch of one).
    pub batch: bool,
}

impl Window2d {
    /// The window of `spec` over images of `shape`, when the data is NCHW or CHW, the window
    /// two-dimensional and the shape known.
    pub fn from_pool_spec(spec: &PoolSpec, shape: &ShapeFact) -> Option<Window2d> {
        Self::from_spec(spec, shape, false)
    }

    /// The window of `spec` over images of `shape`, when the data is NHWC or HWC (channels
    /// last), the window two-dimensional and the shape known.
    pub fn from_channels_last_spec(spec: &PoolSpec, shape: &ShapeFact) -> Option<Window2d> {
        Self::from_spec(spec, shape, true)
    }

    /// The window of `spec` over `shape`, when its data is channels-last or not as asked.
    fn from_spec(spec: &PoolSpec, shape: &ShapeFact, channels_last: bool) -> Option<Window2d> {
        let batch = match (spec.data_format, channels_last) {
            (DataFormat::NCHW, false) | (DataFormat::NHWC, true) => true,
            (DataFormat::CHW, false) | (DataFormat::HWC, true) => false,
            _ => return None,
        };
        let shape = shape.as_concrete()?;
        if shape.len() != 3 + batch as usize || spec.kernel_shape.len() != 2 {
            return None;
        }
        let axes = if channels_last { [2, 0, 1] } else { [0, 1, 2] };
        let [channels, h, w] = axes.map(|i| shape[i + batch as usize]);
        let kernel = [spec.kernel_shape[0], spec.kernel_shape[1]];
        let (strides, dilations) = (spec.strides(), spec.dilations());
        let strides = [strides[0], strides[1]];
        let dilations = [dilations[0], dilations[1]];
        let input = [h, w];
        let padding = spec.padding.compute(&input, &kernel, &dilations, &strides);
        let window = Window2d {
            channels,
            input,
            kernel,
            strides,
            dilations,
            pad_before: [padding[0].pad_before, padding[1].pad_before],
            output: [padding[0].convoluted, padding[1].convoluted],
            batch,
        };
        let taps = kernel[0] * kernel[1];
        (taps > 0 && window.output[0] > 0 && window.output[1] > 0 && h * w > 0).then_some(window)
    }

    /// Whether output column `x`'s window lies inside the input's row (reads no padding
    /// left or right).
    pub fn inside_row(&self, x: usize) -> bool {
        let first = x * self.strides[1];
        let last = first + (self.kernel[1] - 1) * self.dilations[1];
        first >= self.pad_before[1] && last < self.pad_before[1] + self.input[1]
    }

    /// Values in one input plane.
    pub fn plane_len(&self) -> usize {
        self.input[0] * self.input[1]
    }

    /// Values in one output plane.
    pub fn output_plane_len(&self) -> usize {
        self.output[0] * self.output[1]
    }

    /// Images in `input`, checking that `input` and `output` hold whole images.
    pub fn images(&self, input: &[f32], output: &[f32]) -> TractResult<usize> {
        let per_image = self.channels * self.plane_len();
        let n = input.len() / per_image.max(1);
        ensure!(
            input.len() == n * per_image
                && output.len() == n * self.channels * self.output_plane_len(),
            "buffers of {} and {} values do not fit {self:?}",
            input.len(),
            output.len()
        );
        Ok(n)
    }

    /// The output's shape for `n` images.
    pub fn output_shape<D: DimLike>(&self, n: D) -> TVec<D> {
        let mut shape: TVec<D> = [self.channels, self.output[0], self.output[1]]
            .iter()
            .map(|&d| D::from(d))
            .collect();
        if self.batch {
            shape.insert(0, n);
        }
        shape
    }

    /// Length of a padded row: the input row with its padding before and after, at least
    /// as long as the columns an output row reads.
    pub fn padded_width(&self) -> usize {
        let read =
            (self.output[1] - 1) * self.strides[1] + (self.kernel[1] - 1) * self.dilations[1] + 1;
        (self.pad_before[1] + self.input[1]).max(read)
    }

    /// Rows of the padded plane: the input's with its padding above and below, at least as
    /// many as the outputs read.
    pub fn padded_rows(&self) -> usize {
        let read =
            (self.output[0] - 1) * self.strides[0] + (self.kernel[0] - 1) * self.dilations[0] + 1;
        (self.pad_before[0] + self.input[0]).max(read)
    }

    /// A padded plane, every value `fill`, with [`MAX_LANES`] values of slack after its
    /// last row.
    pub fn padded_plane(&self, fill: f32) -> Vec<f32> {
        vec![fill; self.padded_rows() * self.padded_width() + MAX_LANES]
    }

    /// Copies one input plane into `padded` (from [`Window2d::padded_plane`]) at its place;
    /// the border keeps its fill.
    pub fn pad_into(&self, plane: &[f32], padded: &mut [f32]) {
        let [_, w] = self.input;
        let width = self.padded_width();
        let [top, left] = self.pad_before;
        let rows = padded[top * width..].chunks_exact_mut(width);
        for (src, row) in plane.chunks_exact(w).zip(rows) {
            row[left..left + w].copy_from_slice(src);
        }
    }

    /// Length of a row of one phase of the padded plane ([`Window2d::phase_planes`]): the
    /// padded row's values at one remainder modulo the width stride.
    pub fn phase_width(&self) -> usize {
        self.padded_width().div_ceil(self.strides[1])
    }

    /// Room for the padded plane split into its phases: one plane per remainder modulo the
    /// width stride, each [`Window2d::padded_rows`] × [`Window2d::phase_width`], with
    /// [`MAX_LANES`] values of slack after the last.
    pub fn phase_planes(&self) -> Vec<f32> {
        let plane = self.padded_rows() * self.phase_width();
        vec![0.0; self.strides[1] * plane + MAX_LANES]
    }

    /// Splits a padded plane into its phases, in `phases` (from
    /// [`Window2d::phase_planes`]): value `x` of a padded row goes to phase `x % stride`,
    /// place `x / stride` of its row. Output `x` of a row then reads, at a tap `dx` columns
    /// in, phase `(dx · dilation) % stride` at place `x + (dx · dilation) / stride`: the
    /// outputs of a row read consecutive values of each phase, as with no stride.
    pub fn split_phases(&self, padded: &[f32], phases: &mut [f32]) {
        let (width, pw, sw) = (self.padded_width(), self.phase_width(), self.strides[1]);
        let plane = self.padded_rows() * pw;
        for (k, phase) in phases.chunks_exact_mut(plane).take(sw).enumerate() {
            for (row, out) in padded.chunks_exact(width).zip(phase.chunks_exact_mut(pw)) {
                let values = row[k.min(width)..].iter().step_by(sw);
                for (o, &v) in out.iter_mut().zip(values) {
                    *o = v;
                }
            }
        }
    }

    /// Each tap's offset from the value its output's first tap reads, in the phases of
    /// [`Window2d::split_phases`].
    pub fn phase_offsets(&self) -> Vec<usize> {
        let [kh, kw] = self.kernel;
        let [dh, dw] = self.dilations;
        let (pw, sw) = (self.phase_width(), self.strides[1]);
        let plane = self.padded_rows() * pw;
        (0..kh * kw)
            .map(|t| {
                let dx = (t % kw) * dw;
                (dx % sw) * plane + (t / kw) * dh * pw + dx / sw
            })
            .collect()
    }

    /// Each tap's offset from the top-left value its output reads, in a plane whose rows are
    /// `width` values apart (the padded plane's [`Window2d::padded_width`], or the input's
    /// own width for a plane read where it lies).
    pub fn tap_offsets(&self, width: usize) -> Vec<usize> {
        let [kh, kw] = self.kernel;
        let [dh, dw] = self.dilations;
        (0..kh * kw)
            .map(|t| (t / kw) * dh * width + (t % kw) * dw)
            .collect()
    }
}
