//! A sum over the trailing axes of f32 data, as a tract op ([`SumTrailing`]) that replaces
//! tract's `Reduce<Sum>` when the axes it reduces are the last ones (a mean over frequency,
//! a global average pool): each output is the sum of one contiguous run of the input.
//! tract's generic reduction walks such runs an element at a time through ndarray views.

use tract_core::internal::*;
use tract_core::ops::nn::{Reduce, Reducer};

/// Partial sums kept apart in a long run, so that the additions can run side by side.
const PARTIAL_SUMS: usize = 8;

/// tract's `Reduce<Sum>` over the axes from `first_axis` to the last, f32; the reduced axes
/// stay, with size 1, as in tract.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SumTrailing {
    /// The first reduced axis.
    pub first_axis: usize,
}

impl SumTrailing {
    /// The op for `reduce` at `node`, when it is an f32 sum over trailing axes.
    pub fn for_reduce(model: &TypedModel, node: &TypedNode, reduce: &Reduce) -> Option<Self> {
        let input = model.outlet_fact(*node.inputs.first()?).ok()?;
        let rank = input.rank();
        let mut axes = reduce.axes.to_vec();
        axes.sort_unstable();
        let first_axis = *axes.first()?;
        let trailing = axes == (first_axis..rank).collect::<Vec<_>>();
        (matches!(reduce.reducer, Reducer::Sum)
            && trailing
            && input.datum_type == f32::datum_type()
            && node.inputs.len() == 1)
            .then_some(SumTrailing { first_axis })
    }

    /// Sums each run of `run` values of `input` into one value of `out`.
    pub fn run(input: &[f32], run: usize, out: &mut [f32]) -> TractResult<()> {
        ensure!(
            run > 0 && input.len() == run * out.len(),
            "a sum of {} values in runs of {run} into {} values",
            input.len(),
            out.len()
        );
        for (o, values) in out.iter_mut().zip(input.chunks_exact(run)) {
            let mut partial = [0f32; PARTIAL_SUMS];
            let blocks = values.chunks_exact(PARTIAL_SUMS);
            let rest: f32 = blocks.remainder().iter().sum();
            for block in blocks {
                for (p, v) in partial.iter_mut().zip(block) {
                    *p += v;
                }
            }
            *o = partial.iter().sum::<f32>() + rest;
        }
        Ok(())
    }
}

impl Op for SumTrailing {
    fn name(&self) -> StaticName {
        "HushSumTrailing".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!("axes {}..", self.first_axis)])
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

impl EvalOp for SumTrailing {
    op_out_of_plan!();

    fn eval(&self, _ctx: &EvalContext, inputs: TVec<TValue>) -> TractResult<TVec<TValue>> {
        let input = args_1!(inputs);
        let shape = input.shape();
        ensure!(
            self.first_axis < shape.len(),
            "a sum from axis {} of a rank-{} tensor",
            self.first_axis,
            shape.len()
        );
        let run: usize = shape[self.first_axis..].iter().product();
        let mut out_shape: TVec<usize> = shape.into();
        out_shape[self.first_axis..].iter_mut().for_each(|d| *d = 1);
        let mut out = vec![0f32; out_shape.iter().product()];
        Self::run(input.try_as_plain_ram()?.as_slice::<f32>()?, run, &mut out)?;
        let out = tract_ndarray::ArrayD::from_shape_vec(&*out_shape, out)?;
        Ok(tvec!(out.into_tensor().into_tvalue()))
    }
}

impl TypedOp for SumTrailing {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 1, "a sum takes one input");
        let mut shape = inputs[0].shape.to_tvec();
        ensure!(
            self.first_axis < shape.len(),
            "a sum from axis {} of a rank-{} tensor",
            self.first_axis,
            shape.len()
        );
        shape[self.first_axis..]
            .iter_mut()
            .for_each(|d| *d = 1.to_dim());
        Ok(tvec!(f32::fact(shape)))
    }

    as_op!();
}
