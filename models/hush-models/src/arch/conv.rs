//! Conv geometry shared by the plain forward pass ([`super::layers`]) and the
//! per-example weight copies of DP: the padding burn's `Conv2d` applies, the input window
//! each kernel tap multiplies, and a depthwise conv computed as a sum over those taps.

use burn::nn::conv::Conv2d;
use burn::nn::PaddingConfig2d;
use burn::tensor::ops::PadMode;
use burn::tensor::{Slice, Tensor};

/// `[(top, bottom), (left, right)]` padding of `c` over an `h × w` input, as
/// `Conv2d::forward` computes it (burn-nn 0.22.1 `padding.rs`, whose helper is private;
/// `Same` puts an odd extra pad at the end).
pub(crate) fn padding_pairs(c: &Conv2d, h: usize, w: usize) -> [(usize, usize); 2] {
    let same = |k: usize, stride: usize, size: usize| {
        let out = size.div_ceil(stride);
        let total = if out > 0 {
            ((out - 1) * stride + k).saturating_sub(size)
        } else {
            0
        };
        (total / 2, total - total / 2)
    };
    match c.padding {
        PaddingConfig2d::Valid => [(0, 0), (0, 0)],
        PaddingConfig2d::Same => [
            same(c.kernel_size[0], c.stride[0], h),
            same(c.kernel_size[1], c.stride[1], w),
        ],
        PaddingConfig2d::Explicit(top, left, bottom, right) => [(top, bottom), (left, right)],
    }
}

/// The input of a conv with `c`'s kernel, stride, dilation and padding, one tensor per
/// kernel tap `(i, j)` (in that order): the shifted, strided window of `x` `[B, C, H, W]`
/// that the tap multiplies, `[B, C, H', W']`.
pub(crate) fn taps(c: &Conv2d, x: Tensor<4>) -> Vec<Tensor<4>> {
    let [_, _, h, w] = x.dims();
    let [kh, kw] = c.kernel_size;
    let [sh, sw] = c.stride;
    let [dh, dw] = c.dilation;
    let [(top, bottom), (left, right)] = padding_pairs(c, h, w);
    let x = if top + bottom + left + right > 0 {
        x.pad([(top, bottom), (left, right)], PadMode::Constant(0.0))
    } else {
        x
    };
    let (hp, wp) = (h + top + bottom, w + left + right);
    let ho = (hp - dh * (kh - 1) - 1) / sh + 1;
    let wo = (wp - dw * (kw - 1) - 1) / sw + 1;
    let span = |start: usize, n: usize, step: usize| {
        Slice::new(
            start as isize,
            Some((start + (n - 1) * step + 1) as isize),
            step as isize,
        )
    };
    let mut taps = Vec::with_capacity(kh * kw);
    for i in 0..kh {
        for j in 0..kw {
            taps.push(x.clone().slice([
                Slice::full(),
                Slice::full(),
                span(i * dh, ho, sh),
                span(j * dw, wo, sw),
            ]));
        }
    }
    taps
}

/// [`taps`] stacked: `[B, C, kh·kw, H', W']`, the columns a dense conv multiplies its
/// `[C_out, C·kh·kw]` weights with.
pub(crate) fn unfold(c: &Conv2d, x: Tensor<4>) -> Tensor<5> {
    Tensor::stack(taps(c, x), 2)
}

/// A depthwise conv (one input channel per group, as many outputs as inputs) of `x`
/// `[B, C, H, W]` with `c`'s geometry, as the sum over kernel taps of each tap's window
/// times its weight: `weight` `[1 or B, C, kh·kw]` (one set for the batch, or one per
/// example). Its gradients are slices and products, which on burn flex beat the grouped
/// conv's general (transposed) 3-D conv loops; [`super::depthwise`] replaces it there and
/// keeps it for the other backends (the GPU).
pub(crate) fn depthwise_by_taps(c: &Conv2d, x: Tensor<4>, weight: Tensor<3>) -> Tensor<4> {
    let [n, ch, k] = weight.dims();
    let mut y: Option<Tensor<4>> = None;
    for (t, tap) in taps(c, x).into_iter().enumerate().take(k) {
        let term = tap
            * weight
                .clone()
                .slice([0..n, 0..ch, t..t + 1])
                .reshape([n, ch, 1, 1]);
        y = Some(match y {
            Some(y) => y + term,
            None => term,
        });
    }
    y.expect("a kernel has at least one tap")
}
