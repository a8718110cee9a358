//! Elementwise multiplies, adds and subtracts by constants that vary along one axis only (a
//! batch norm as tract's declutter pass leaves it, a model's input normalisation), and a
//! ReLU after them, folded into one multiply-add per value: [`follow`] walks such a chain
//! and sums it up as an [`Affine`]; [`AxisAffine`] runs one as a tract op; and
//! [`crate::depthwise`] folds one into its kernel. tract fuses such ops into the matrix
//! product before them where it can; where it cannot (after a change of axes, on a model's
//! input) it broadcasts each constant through ndarray's generic loops, one op at a time.

use tract_core::internal::*;
use tract_core::ops::binary::{BinMiniOp, OptBinByScalar, TypedBinOp};
use tract_core::ops::math::{Add, Max, Mul, Sub};

/// `y = x × scale[i] + shift[i]` at index `i` along one axis, then `max(y, 0)` if `relu`.
#[derive(Debug, Clone, PartialEq)]
pub struct Affine {
    /// One factor per index along the axis.
    pub scale: Vec<f32>,
    /// One term per index along the axis.
    pub shift: Vec<f32>,
    /// Whether a ReLU follows.
    pub relu: bool,
}

impl Affine {
    /// The bias of a convolution followed by this affine: `bias[i] × scale[i] + shift[i]`
    /// (`bias` one value per index, or one for all).
    pub fn fold_bias(&self, bias: &[f32]) -> Vec<f32> {
        let at = |i: usize| bias[if bias.len() == 1 { 0 } else { i }];
        (0..self.scale.len())
            .map(|i| at(i) * self.scale[i] + self.shift[i])
            .collect()
    }

    /// `y = x` over `len` indices.
    pub fn identity(len: usize) -> Self {
        Affine {
            scale: vec![1.0; len],
            shift: vec![0.0; len],
            relu: false,
        }
    }
}

/// A chain of ops [`follow`] found, summed up.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// What the chain computes.
    pub affine: Affine,
    /// Its last op's output.
    pub last: OutletId,
    /// How many of tract's ops it spans (0: none, and `last` is where it started).
    pub ops: usize,
}

impl Chain {
    /// The chain after `node`'s output (data of `len` indices along `axis`): what
    /// [`follow`] finds from its one successor, or nothing where the output is read by
    /// several nodes or is a model output.
    pub fn after(model: &TypedModel, node: usize, axis: usize, len: usize) -> TractResult<Chain> {
        let out = OutletId::new(node, 0);
        match model.single_succ(node)? {
            Some(next) if !model.output_outlets()?.contains(&out) => {
                follow(model, out, next, axis, len)
            }
            _ => Ok(Chain {
                affine: Affine::identity(len),
                last: out,
                ops: 0,
            }),
        }
    }
}

/// The elementwise op of `node` if it is a binary one (tract's generic form, or its form
/// for a scalar operand after codegen).
fn mini_op(node: &TypedNode) -> Option<&dyn BinMiniOp> {
    if let Some(bin) = node.op_as::<TypedBinOp>() {
        return Some(&*bin.0);
    }
    node.op_as::<OptBinByScalar>().map(|bin| &*bin.binop)
}

/// The chain of ops from `first` on (a node reading `from`, data of `len` indices along
/// `axis`): each a multiply, an add, a subtract of a constant (`x - c`) or, last, a max with
/// 0, whose constant varies along `axis` only, each but the last read by its successor alone
/// and not a model output.
pub fn follow(
    model: &TypedModel,
    from: OutletId,
    first: &TypedNode,
    axis: usize,
    len: usize,
) -> TractResult<Chain> {
    let rank = model.outlet_fact(from)?.rank();
    let mut affine = Affine::identity(len);
    let (mut last, mut ops, mut node) = (from, 0, first);
    while let Some(op) = mini_op(node) {
        let Some(values) = per_axis(model, node, last, axis, len, rank) else {
            break;
        };
        let Affine { scale, shift, relu } = &mut affine;
        if op.is::<Mul>() {
            scale.iter_mut().zip(&values).for_each(|(a, v)| *a *= v);
            shift.iter_mut().zip(&values).for_each(|(b, v)| *b *= v);
        } else if op.is::<Add>() {
            shift.iter_mut().zip(&values).for_each(|(b, v)| *b += v);
        } else if op.is::<Sub>() && node.inputs[0] == last {
            shift.iter_mut().zip(&values).for_each(|(b, v)| *b -= v);
        } else if op.is::<Max>() && values.iter().all(|&v| v == 0.0) {
            *relu = true;
        } else {
            break;
        }
        (last, ops) = (OutletId::new(node.id, 0), ops + 1);
        if affine.relu || model.output_outlets()?.contains(&last) {
            break;
        }
        match model.single_succ(node.id)? {
            Some(next) => node = next,
            None => break,
        }
    }
    Ok(Chain { affine, last, ops })
}

/// `len` values, one per index along `axis`, when `node` is a binary op between `from`
/// (rank `rank`, f32) and a constant that varies along `axis` only (or is one value).
fn per_axis(
    model: &TypedModel,
    node: &TypedNode,
    from: OutletId,
    axis: usize,
    len: usize,
    rank: usize,
) -> Option<Vec<f32>> {
    let [a, b] = node.inputs.as_slice() else {
        return None;
    };
    let other = match (*a == from, *b == from) {
        (true, false) => *b,
        (false, true) => *a,
        _ => return None,
    };
    let konst = model.outlet_fact(other).ok()?.konst.clone()?;
    let shape = konst.shape();
    let along = constant_axis(shape, rank)?;
    if konst.datum_type() != f32::datum_type()
        || along.is_some_and(|(at, n)| at != axis || n != len)
    {
        return None;
    }
    let values = konst
        .try_as_plain_ram()
        .ok()?
        .as_slice::<f32>()
        .ok()?
        .to_vec();
    Some(match along {
        Some(_) => values,
        None => vec![values[0]; len],
    })
}

/// For a constant of `shape` broadcast against data of rank `rank` (aligned on the right):
/// `Some(None)` if it is one value, `Some(Some((axis, n)))` if it varies along `axis` alone
/// (with `n` values), `None` otherwise.
fn constant_axis(shape: &[usize], rank: usize) -> Option<Option<(usize, usize)>> {
    let lead = rank.checked_sub(shape.len())?;
    let mut along = None;
    for (i, &d) in shape.iter().enumerate() {
        if d != 1 {
            if along.is_some() {
                return None;
            }
            along = Some((lead + i, d));
        }
    }
    Some(along)
}

/// An [`Affine`] along `axis` of f32 data, as a tract op: what a chain of tract's
/// multiplies, adds, subtracts and a ReLU computed, in one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxisAffine {
    /// The axis the constants vary along.
    pub axis: usize,
    /// One factor per index along it (a 1-D f32 tensor).
    pub scale: Arc<Tensor>,
    /// One term per index along it.
    pub shift: Arc<Tensor>,
    /// Whether a ReLU follows.
    pub relu: bool,
}

impl AxisAffine {
    /// Replaces, in a `model` tract has optimised, each chain of elementwise ops by
    /// constants along one axis ([`follow`]) that starts with a multiply, an add or a
    /// subtract whose constant is not one value (tract runs those fast), by one op. Returns
    /// how many of tract's ops it replaced.
    pub fn fold_all(model: &mut TypedModel) -> TractResult<usize> {
        let mut folded = 0;
        // One chain at a time, then the graph's order anew: the nodes a chain replaced are
        // no longer in it.
        while let Some((from, chain, axis)) = Self::next_chain(model)? {
            let name = model.node(chain.last.node).name.clone();
            let len = chain.affine.scale.len();
            let op = AxisAffine {
                axis,
                scale: Tensor::from_shape(&[len], &chain.affine.scale)?.into_arc_tensor(),
                shift: Tensor::from_shape(&[len], &chain.affine.shift)?.into_arc_tensor(),
                relu: chain.affine.relu,
            };
            let mut patch = TypedModelPatch::new(format!("hush affine {name}"));
            let x = patch.tap_model(model, from)?;
            let out = patch.wire_node(format!("{name}.hush_affine"), op, &[x])?;
            patch.shunt_outside(model, chain.last, out[0])?;
            patch.apply(model)?;
            folded += chain.ops;
        }
        Ok(folded)
    }

    /// The first chain [`AxisAffine::fold_all`] replaces: its input, the chain and its axis.
    fn next_chain(model: &TypedModel) -> TractResult<Option<(OutletId, Chain, usize)>> {
        for id in model.eval_order()? {
            let node = model.node(id);
            let Some(op) = mini_op(node) else { continue };
            if !(op.is::<Mul>() || op.is::<Add>() || op.is::<Sub>()) || node.inputs.len() != 2 {
                continue;
            }
            for (x, c) in [(0, 1), (1, 0)] {
                let (x, c) = (node.inputs[x], node.inputs[c]);
                let (fact, konst) = (model.outlet_fact(x)?, model.outlet_fact(c)?);
                let (Some(shape), Some(k)) = (fact.shape.as_concrete(), konst.konst.as_ref())
                else {
                    continue;
                };
                if fact.datum_type != f32::datum_type() || fact.konst.is_some() {
                    continue;
                }
                let Some(Some((axis, len))) = constant_axis(k.shape(), shape.len()) else {
                    continue;
                };
                if shape[axis] != len {
                    continue;
                }
                let chain = follow(model, x, node, axis, len)?;
                if chain.ops > 0 {
                    return Ok(Some((x, chain, axis)));
                }
            }
        }
        Ok(None)
    }

    /// Applies the op to `x`, of `shape`, in place.
    pub fn run(&self, x: &mut [f32], shape: &[usize]) -> TractResult<()> {
        let (scale, shift) = (
            self.scale.try_as_plain_ram()?,
            self.shift.try_as_plain_ram()?,
        );
        let (scale, shift) = (scale.as_slice::<f32>()?, shift.as_slice::<f32>()?);
        ensure!(
            self.axis < shape.len()
                && shape[self.axis] == scale.len()
                && scale.len() == shift.len()
                && x.len() == shape.iter().product::<usize>(),
            "an affine along axis {} of {} values over data of shape {shape:?} ({} values)",
            self.axis,
            scale.len(),
            x.len()
        );
        let inner: usize = shape[self.axis + 1..].iter().product();
        let relu = if self.relu { 0.0 } else { f32::NEG_INFINITY };
        if inner == 1 {
            for row in x.chunks_exact_mut(scale.len()) {
                for (v, (a, b)) in row.iter_mut().zip(scale.iter().zip(shift)) {
                    *v = (*v * a + b).max(relu);
                }
            }
        } else {
            for block in x.chunks_exact_mut(scale.len() * inner) {
                for ((run, a), b) in block.chunks_exact_mut(inner).zip(scale).zip(shift) {
                    for v in run {
                        *v = (*v * a + b).max(relu);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Op for AxisAffine {
    fn name(&self) -> StaticName {
        "HushAxisAffine".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!(
            "axis {}, {} values{}",
            self.axis,
            self.scale.len(),
            if self.relu { ", ReLU" } else { "" }
        )])
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

impl EvalOp for AxisAffine {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        // In place: tract hands over its last reference to the input where this op is the
        // input's last reader, and `into_tensor` copies it only where it is not.
        let mut x = args_1!(inputs).into_tensor();
        let shape: TVec<usize> = x.shape().into();
        self.run(x.try_as_plain_ram_mut()?.as_slice_mut::<f32>()?, &shape)?;
        Ok(tvec!(x.into_tvalue()))
    }
}

impl TypedOp for AxisAffine {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 1, "an affine takes one input");
        Ok(tvec!(f32::fact(inputs[0].shape.clone())))
    }

    as_op!();
}
