//! Kernels tract 0.23 lacks or runs slowly, written as tract ops and swapped into a model's
//! graph around tract's codegen pass ([`optimize`]): hush's keyword spotters spend most of
//! their time in these ops, and tract's generic code for them is several times slower than
//! it needs to be (BENCHMARKS.md, "KWS inference latency").
//!
//! - [`depthwise`]: the depthwise 2-D convolution over NCHW data. tract walks it with a
//!   per-zone loop that does not vectorise; on x86-64 it has no vectorised depthwise kernel
//!   at all (its channels-last kernel is aarch64 and wasm only). A batch norm and a ReLU
//!   after it are folded into it.
//! - [`dense`]: the dense (one group) 2-D convolution over NCHW data, as the unfolded
//!   window's rows times the weights through [`pointwise`]'s product; a batch norm and a
//!   ReLU after it are folded into it.
//! - [`pointwise`]: the 1×1 convolution over NCHW data (tract's einsum of it), read where
//!   it lies instead of packed into panels first; a batch norm and a ReLU after it are
//!   folded into it.
//! - [`maxpool`]: 2-D max pooling over NCHW data.
//! - [`delay`]: tract-pulse's buffer of a pulsed model, over frames that lie one after the
//!   other, its output kept and its frames copied run by run.
//! - [`sum`]: a sum over consecutive axes (a mean over frequency, a global average pool).
//! - [`affine`]: chains of multiplies, adds and subtracts by constants along one axis, and
//!   a ReLU after them, as one pass: what tract's codegen could not fuse into a matrix
//!   product (a model's input normalisation, a batch norm after a change of axes).
//! - [`channels_last`]: the depthwise, pointwise and dense convolutions and the max pooling
//!   over channels-last data, and the pass that moves a model there from its depthwise
//!   convolutions (DS-CNN-S, whole-window and pulsed: each position's channels are whole
//!   SIMD vectors however small the plane) or, without any, from its first convolution of
//!   one channel (leak-CNN: its poolings folded into the convolutions before them, its
//!   dense layer over the channels-last flattening), which [`optimize`] takes where hush's
//!   ops then run every convolution. Its dense op also runs channels-first convolutions of
//!   many channels with a max pooling after them, and its pointwise op dense layers in
//!   either layout (matrix-vector products).
//!
//! [`window`] holds what the first two share: the window's shape and the padded plane.
//! Every op but the affine one (which works in place on its input) writes its output into
//! a tensor it keeps in the plan's state from one run to the next ([`KeptOutput`]).
//! Each op keeps tract's inputs, shapes and semantics, so a model with the ops swapped in
//! computes what tract's own ops compute, within float rounding (the tests compare them on
//! the same graphs).

pub mod affine;
pub mod channels_last;
pub mod delay;
pub mod dense;
pub mod depthwise;
pub mod maxpool;
pub mod pointwise;
pub mod sum;
pub mod window;

use tract_core::internal::*;
use tract_core::ops::cnn::conv::Conv;
use tract_core::ops::cnn::MaxPool;
use tract_core::ops::einsum::EinSum;
use tract_core::ops::nn::Reduce;

pub use affine::AxisAffine;
pub use channels_last::{DenseConvNhwc, DepthwiseNhwc, MaxPoolNhwc, PointwiseNhwc};
pub use delay::ContiguousDelay;
pub use dense::DenseConvNchw;
pub use depthwise::DepthwiseNchw;
pub use maxpool::MaxPoolNchw;
pub use pointwise::PointwiseNchw;
pub use sum::SumAxes;
pub use window::Window2d;

/// The output tensor one of this crate's ops keeps from one run of a plan to the next (the
/// op's `OpState`): the next run writes over it where nothing reads it any more (tract lets
/// go of a value after its last reader has run). Without it each run made, and zeroed, a
/// fresh tensor for every op's output: `memset` alone was 8.5 % of a DS-CNN-S window on the
/// AVX-512 Xeon (BENCHMARKS.md).
#[derive(Debug)]
pub struct KeptOutput {
    tensor: Option<Arc<Tensor>>,
    /// The op's [`KeepsOutput::eval_kept`], for the plan's call of the state.
    eval: EvalKept,
}

/// How a [`KeptOutput`] runs the op it belongs to (given as tract's `&dyn Op`).
type EvalKept = fn(&dyn Op, TVec<TValue>, &mut KeptOutput) -> TractResult<TVec<TValue>>;

impl KeptOutput {
    /// The state of an op `O`, keeping no tensor yet.
    pub(crate) fn of<O: KeepsOutput>() -> Self {
        KeptOutput {
            tensor: None,
            eval: |op, inputs, kept| {
                let name = op.name();
                op.downcast_ref::<O>()
                    .with_context(|| {
                        format!("{name} for the state of {}", std::any::type_name::<O>())
                    })?
                    .eval_kept(inputs, kept)
            },
        }
    }

    /// An f32 output of `shape`, written by `fill` (every value of it) into the kept
    /// tensor when it has that shape and nothing else holds it, else into a new one, which
    /// is kept.
    pub(crate) fn f32_output(
        &mut self,
        shape: &[usize],
        fill: impl FnOnce(&mut [f32]) -> TractResult<()>,
    ) -> TractResult<TVec<TValue>> {
        Ok(tvec!(kept_f32(&mut self.tensor, shape, fill)?))
    }
}

/// An f32 value of `shape`, written by `fill` (every value of it) into `kept` when it has
/// that shape and nothing else holds it, else into a new tensor, which `kept` then holds.
pub(crate) fn kept_f32(
    kept: &mut Option<Arc<Tensor>>,
    shape: &[usize],
    fill: impl FnOnce(&mut [f32]) -> TractResult<()>,
) -> TractResult<TValue> {
    let reusable = kept
        .as_mut()
        .and_then(Arc::get_mut)
        .is_some_and(|t| t.shape() == shape && t.datum_type() == f32::datum_type());
    if !reusable {
        *kept = Some(Arc::new(Tensor::zero::<f32>(shape)?));
    }
    let tensor = kept
        .as_mut()
        .and_then(Arc::get_mut)
        .context("a tensor this op alone holds")?;
    fill(tensor.try_as_plain_ram_mut()?.as_slice_mut::<f32>()?)?;
    Ok(TValue::from_const(Arc::clone(
        kept.as_ref().context("the kept tensor")?,
    )))
}

/// A clone (of a plan's state) keeps no tensor: two states never share a tensor to write.
impl Clone for KeptOutput {
    fn clone(&self) -> Self {
        KeptOutput {
            tensor: None,
            eval: self.eval,
        }
    }
}

/// Whether `state` is one of this crate's ops' [`KeptOutput`]s: state that saves the next
/// run work, and that no output depends on. A plan whose every op state is one may run in
/// the same state again; other state (a `Scan`'s hidden state, a pulsed model's buffers)
/// carries one run into the next.
pub fn is_kept_output(state: &dyn OpState) -> bool {
    state.is::<KeptOutput>()
}

/// One of this crate's ops computing its output into a [`KeptOutput`].
pub(crate) trait KeepsOutput: Op + Sized {
    /// The op's outputs of `inputs`, the tensor written from `kept`.
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>>;
}

impl OpState for KeptOutput {
    fn eval(
        &mut self,
        _ctx: &EvalContext,
        op: &dyn Op,
        inputs: TVec<TValue>,
    ) -> TractResult<TVec<TValue>> {
        (self.eval)(op, inputs, self)
    }

    fn reset_lanes(&mut self, _lanes: &[LaneId]) -> TractResult<()> {
        Ok(())
    }
}

/// `EvalOp` for an op that [`KeepsOutput`]: in a plan the op runs from its state, outside
/// one (constant folding, shape inference) into a tensor of its own.
macro_rules! keeps_output {
    ($op:ty) => {
        impl EvalOp for $op {
            op_out_of_plan!();

            fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
                self.eval_kept(inputs, &mut $crate::KeptOutput::of::<Self>())
            }

            fn state(&self, _ctx: &EvalContext) -> TractResult<Option<Box<dyn OpState>>> {
                Ok(Some(Box::new($crate::KeptOutput::of::<Self>())))
            }
        }
    };
}
pub(crate) use keeps_output;

/// What an op's `swap` did to one node of tract's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swap {
    /// tract's ops after the node folded into the op (a multiply, an add, a ReLU, a max
    /// pooling).
    pub folded: usize,
}

/// The window of `conv` at `node`, when it is a float convolution hush's convolution ops
/// may run: NCHW or CHW f32 images (NHWC or HWC with `channels_last`) of a known shape, a
/// 2-D window, an OIHW kernel and a bias that are constants. Its groups are for each op to
/// check.
pub(crate) fn conv_window(
    model: &TypedModel,
    node: &TypedNode,
    conv: &Conv,
    channels_last: bool,
) -> Option<Window2d> {
    use tract_core::ops::cnn::conv::KernelFormat;
    let images = model.outlet_fact(*node.inputs.first()?).ok()?;
    let consts = node.inputs[1..]
        .iter()
        .all(|i| model.outlet_fact(*i).is_ok_and(|f| f.konst.is_some()));
    let window = if channels_last {
        Window2d::from_channels_last_spec(&conv.pool_spec, &images.shape)?
    } else {
        Window2d::from_pool_spec(&conv.pool_spec, &images.shape)?
    };
    (conv.q_params.is_none()
        && conv.kernel_fmt == KernelFormat::OIHW
        && node.inputs.len() == 3
        && consts
        && images.datum_type == f32::datum_type()
        && conv.pool_spec.input_channels == window.channels)
        .then_some(window)
}

/// The window of `conv` at `node` when it is a depthwise convolution (one group per
/// channel, as many outputs as inputs) hush's depthwise ops may run ([`conv_window`]).
pub(crate) fn depthwise_window(
    model: &TypedModel,
    node: &TypedNode,
    conv: &Conv,
    channels_last: bool,
) -> Option<Window2d> {
    let window = conv_window(model, node, conv, channels_last)?;
    (conv.group == window.channels && conv.pool_spec.output_channels == window.channels)
        .then_some(window)
}

/// The values of the constant at `outlet`, as f32s.
pub(crate) fn constant(model: &TypedModel, outlet: OutletId) -> TractResult<Vec<f32>> {
    let fact = model.outlet_fact(outlet)?;
    let konst = fact.konst.as_ref().context("a constant input")?;
    Ok(konst.try_as_plain_ram()?.as_slice::<f32>()?.to_vec())
}

/// Replaces `node` and the ops after it up to `last` (a chain folded into `op`) by `op`,
/// reading `node`'s input `images` and two constants (`op`'s weights and bias).
pub(crate) fn replace(
    model: &mut TypedModel,
    node: usize,
    images: usize,
    last: OutletId,
    op: impl TypedOp,
    [weights, bias]: [Tensor; 2],
) -> TractResult<()> {
    let node = model.node(node);
    let name = node.name.clone();
    let mut patch = TypedModelPatch::new(format!("hush {} {name}", op.name()));
    let images = patch.tap_model(model, node.inputs[images])?;
    let weights = patch.add_const(format!("{name}.weights"), weights)?;
    let bias = patch.add_const(format!("{name}.bias"), bias)?;
    let out = patch.wire_node(&name, op, &[images, weights, bias])?;
    patch.shunt_outside(model, last, out[0])?;
    patch.apply(model)
}

/// How many of each of tract's ops [`swap_in`] replaced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swapped {
    /// Depthwise convolutions.
    pub depthwise: usize,
    /// Dense (one group) convolutions.
    pub dense: usize,
    /// Pointwise (1×1) convolutions, as tract's einsums of them.
    pub pointwise: usize,
    /// Dense layers: einsums of one position (matrix-vector products, a classifier's
    /// head), which hush's channels-last pointwise op runs. Not convolutions: a model
    /// moved channels-last for them alone would not run faster.
    pub dense_layers: usize,
    /// Ops after the convolutions folded into them (batch norms' multiplies and adds,
    /// ReLUs, max poolings).
    pub folded: usize,
    /// Max poolings.
    pub max_pool: usize,
    /// Sums over consecutive axes.
    pub sum: usize,
    /// tract-pulse's buffers over contiguous frames ([`ContiguousDelay`]).
    pub delays: usize,
    /// Elementwise ops by constants along one axis that tract left unfused after its
    /// codegen, replaced by [`AxisAffine`]s.
    pub affine: usize,
    /// Whether hush's channels-last ops run some of the model's convolutions: where
    /// [`optimize`] moved it channels-last, or tract's declutter pass did (on aarch64, for
    /// depthwise convolutions).
    pub channels_last: bool,
}

/// Optimises `model` for running with hush's ops: tract's declutter pass, [`swap_in`],
/// tract's codegen pass, then [`AxisAffine::fold_all`] over what codegen left. Where it
/// can move channels-last ([`channels_last::move_channels_last`]: from its depthwise
/// convolutions, or its convolutions of one channel), it runs channels-last when hush's ops then
/// take every convolution, at least as many as channels-first (dense layers, which either
/// layout runs alike, not counted), and the CPU runs SIMD vectors
/// ([`channels_last::pays_off`]).
pub fn optimize(model: TypedModel) -> TractResult<(TypedModel, Swapped)> {
    let decluttered = model.into_decluttered()?;
    let mut model = decluttered.clone();
    let mut swapped = swap_in(&mut model)?;
    if let Some(mut moved) = channels_last::move_channels_last(&decluttered)? {
        let moved_swapped = swap_in(&mut moved)?;
        let convolutions = |s: &Swapped| s.depthwise + s.dense + s.pointwise;
        if tract_convolutions(&moved) == 0
            && convolutions(&moved_swapped) >= convolutions(&swapped)
            && channels_last::pays_off()
        {
            model = moved;
            swapped = moved_swapped;
        }
    }
    swapped.channels_last = model.nodes().iter().any(|n| {
        n.op_is::<DepthwiseNhwc>() || n.op_is::<DenseConvNhwc>() || n.op_is::<PointwiseNhwc>()
    });
    model.optimize()?;
    swapped.affine = AxisAffine::fold_all(&mut model)?;
    Ok((model, swapped))
}

/// tract's convolutions left in `model`.
fn tract_convolutions(model: &TypedModel) -> usize {
    model.nodes().iter().filter(|n| n.op_is::<Conv>()).count()
}

/// Replaces, in a decluttered `model`, each op this crate runs faster by its own: tract's
/// depthwise `Conv`s by [`DepthwiseNchw`] (channels-last: [`DepthwiseNhwc`]), other `Conv`s
/// with one group by [`DenseConvNchw`] ([`DenseConvNhwc`], which also takes channels-first
/// ones of many channels with a max pooling after them), einsums of 1×1 convolutions and
/// dense layers by [`PointwiseNchw`] ([`PointwiseNhwc`] where the channels are last),
/// `MaxPool`s by [`MaxPoolNchw`], `Reduce<Sum>`s over consecutive axes by [`SumAxes`],
/// tract-pulse's `Delay`s over contiguous frames by [`ContiguousDelay`],
/// where the data is f32 of a known shape (the others stay tract's). Run it after
/// `declutter` and before `optimize`, which would otherwise lower them to tract's own
/// kernels.
pub fn swap_in(model: &mut TypedModel) -> TractResult<Swapped> {
    let mut swapped = Swapped::default();
    for id in model.eval_order()? {
        if let Some(conv) = model.node(id).op_as::<Conv>().cloned() {
            type SwapConv = fn(&mut TypedModel, usize, &Conv) -> TractResult<Option<Swap>>;
            // Channels-first, the channels-last dense op takes a convolution of many
            // channels with a pooling after it (`DenseConvNhwc::runs_channels_first`).
            let (depthwise, dense): (SwapConv, &[SwapConv]) =
                if conv.pool_spec.data_format.c_is_last() {
                    (DepthwiseNhwc::swap, &[DenseConvNhwc::swap])
                } else {
                    (
                        DepthwiseNchw::swap,
                        &[DenseConvNhwc::swap, DenseConvNchw::swap],
                    )
                };
            if let Some(swap) = depthwise(model, id, &conv)? {
                swapped.depthwise += 1;
                swapped.folded += swap.folded;
                continue;
            }
            for dense in dense {
                if let Some(swap) = dense(model, id, &conv)? {
                    swapped.dense += 1;
                    swapped.folded += swap.folded;
                    break;
                }
            }
            continue;
        }
        if let Some(einsum) = model.node(id).op_as::<EinSum>().cloned() {
            let shape = &model.node(id).outputs[0].fact.shape;
            let one_position = shape.iter().rev().skip(1).all(|d| d.is_one());
            // Channels-last first: the channels-first op would take an einsum over the last
            // axis too, as images of one position each.
            let swap = match PointwiseNhwc::swap(model, id, &einsum)? {
                Some(swap) => Some(swap),
                None => PointwiseNchw::swap(model, id, &einsum)?,
            };
            if let Some(swap) = swap {
                if one_position {
                    swapped.dense_layers += 1;
                } else {
                    swapped.pointwise += 1;
                }
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
        } else if node.op_is::<MaxPoolNchw>() || node.op_is::<MaxPoolNhwc>() {
            // Hush's already: a model moved channels-last
            // ([`channels_last::move_channels_last`]) has its poolings swapped in first.
            swapped.max_pool += 1;
            None
        } else if let Some(delay) = node.op_as::<tract_pulse_opl::ops::Delay>() {
            ContiguousDelay::for_delay(model, node, delay).map(|op| {
                swapped.delays += 1;
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
