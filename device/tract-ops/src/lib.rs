//! Kernels tract 0.23 lacks or runs slowly, written as tract ops and swapped into a model's
//! graph around tract's codegen pass ([`optimize`]): hush's keyword spotters spend most of
//! their time in these ops, and tract's generic code for them is several times slower than
//! it needs to be (BENCHMARKS.md, "KWS inference latency").
//!
//! - [`depthwise`]: the depthwise 2-D convolution over NCHW data. tract walks it with a
//!   per-zone loop that does not vectorise; on x86-64 it has no vectorised depthwise kernel
//!   at all (its channels-last kernel is aarch64 and wasm only). A batch norm and a ReLU
//!   after it are folded into it.
//! - [`maxpool`]: 2-D max pooling over NCHW data.
//! - [`sum`]: a sum over consecutive axes (a mean over frequency, a global average pool).
//! - [`affine`]: chains of multiplies, adds and subtracts by constants along one axis, and
//!   a ReLU after them, as one pass: what tract's codegen could not fuse into a matrix
//!   product (a model's input normalisation, a batch norm after a change of axes).
//!
//! [`window`] holds what the first two share: the window's shape and the padded plane.
//! Each op keeps tract's inputs, shapes and semantics, so a model with the ops swapped in
//! computes what tract's own ops compute, within float rounding (the tests compare them on
//! the same graphs).

pub mod affine;
pub mod depthwise;
pub mod maxpool;
pub mod sum;
pub mod window;

use tract_core::internal::*;
use tract_core::ops::cnn::conv::Conv;
use tract_core::ops::cnn::MaxPool;
use tract_core::ops::nn::Reduce;

pub use affine::AxisAffine;
pub use depthwise::DepthwiseNchw;
pub use maxpool::MaxPoolNchw;
pub use sum::SumAxes;
pub use window::Window2d;

/// How many of each of tract's ops [`swap_in`] replaced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swapped {
    /// Depthwise convolutions.
    pub depthwise: usize,
    /// Elementwise ops after them folded into them (batch norms' multiplies and adds,
    /// ReLUs).
    pub folded: usize,
    /// Max poolings.
    pub max_pool: usize,
    /// Sums over consecutive axes.
    pub sum: usize,
    /// Elementwise ops by constants along one axis that tract left unfused after its
    /// codegen, replaced by [`AxisAffine`]s.
    pub affine: usize,
}

/// Optimises `model` for running with hush's ops: tract's declutter pass, [`swap_in`],
/// tract's codegen pass, then [`AxisAffine::fold_all`] over what codegen left.
pub fn optimize(model: TypedModel) -> TractResult<(TypedModel, Swapped)> {
    let mut model = model.into_decluttered()?;
    let mut swapped = swap_in(&mut model)?;
    model.optimize()?;
    swapped.affine = AxisAffine::fold_all(&mut model)?;
    Ok((model, swapped))
}

/// Replaces, in a decluttered `model`, each op this crate runs faster by its own: tract's
/// depthwise `Conv`s by [`DepthwiseNchw`], `MaxPool`s by [`MaxPoolNchw`], `Reduce<Sum>`s over
/// consecutive axes by [`SumAxes`], where the data is f32 of a known shape (the others stay
/// tract's). Run it after `declutter` and before `optimize`, which would otherwise lower
/// them to tract's own kernels.
pub fn swap_in(model: &mut TypedModel) -> TractResult<Swapped> {
    let mut swapped = Swapped::default();
    for id in model.eval_order()? {
        if let Some(conv) = model.node(id).op_as::<Conv>().cloned() {
            if let Some(swap) = DepthwiseNchw::swap(model, id, &conv)? {
                swapped.depthwise += 1;
                swapped.folded += swap.folded;
            }
            continue;
        }
        let node = model.node(id);
        let op: Option<Box<dyn TypedOp>> = if let Some(pool) = node.op_as::<MaxPool>() {
            MaxPoolNchw::for_max_pool(model, node, pool).map(|op| {
                swapped.max_pool += 1;
                Box::new(op) as _
            })
        } else if let Some(reduce) = node.op_as::<Reduce>() {
            SumAxes::for_reduce(model, node, reduce).map(|op| {
                swapped.sum += 1;
                Box::new(op) as _
            })
        } else {
            None
        };
        if let Some(op) = op {
            TypedModelPatch::replace_single_op(model, node, &node.inputs, op)?.apply(model)?;
        }
    }
    Ok(swapped)
}
