//! A sum over consecutive axes of f32 data, as a tract op ([`SumAxes`]) that replaces
//! tract's `Reduce<Sum>` when the axes it reduces follow one another: a mean over frequency
//! or a global average pool (the last axes: each output is the sum of one contiguous run of
//! the input), or a mean over frequency in a channels-last layout (a middle axis: each
//! output row is the sum of a few contiguous rows). tract's generic reduction walks either
//! an element at a time through ndarray views.

use tract_core::internal::*;
use tract_core::ops::nn::{Reduce, Reducer};

use crate::{KeepsOutput, KeptOutput};

/// Partial sums kept apart in a long run, so that the additions can run side by side.
const PARTIAL_SUMS: usize = 8;

/// tract's `Reduce<Sum>` over the axes `first_axis..end_axis`, f32; the reduced axes stay,
/// with size 1, as in tract.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SumAxes {
    /// The first reduced axis.
    pub first_axis: usize,
    /// The axis after the last reduced one (the rank when the last axes are reduced).
    pub end_axis: usize,
}

impl SumAxes {
    /// The op for `reduce` at `node`, when it is an f32 sum over consecutive axes.
    pub fn for_reduce(model: &TypedModel, node: &TypedNode, reduce: &Reduce) -> Option<Self> {
        let input = model.outlet_fact(*node.inputs.first()?).ok()?;
        let mut axes = reduce.axes.to_vec();
        axes.sort_unstable();
        let (first_axis, end_axis) = (*axes.first()?, axes.last()? + 1);
        let consecutive = axes == (first_axis..end_axis).collect::<Vec<_>>();
        (matches!(reduce.reducer, Reducer::Sum)
            && consecutive
            && end_axis <= input.rank()
            && input.datum_type == f32::datum_type()
            && node.inputs.len() == 1)
            .then_some(SumAxes {
                first_axis,
                end_axis,
            })
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

    /// Sums each group of `rows` consecutive rows of `inner` values of `input` into one row
    /// of `out`, row after row.
    pub fn run_rows(input: &[f32], rows: usize, inner: usize, out: &mut [f32]) -> TractResult<()> {
        ensure!(
            rows > 0 && inner > 0 && input.len() == rows * out.len(),
            "a sum of {} values in groups of {rows} rows of {inner} into {} values",
            input.len(),
            out.len()
        );
        for (o, group) in out
            .chunks_exact_mut(inner)
            .zip(input.chunks_exact(rows * inner))
        {
            pulp::Arch::new().dispatch(RowSums {
                group,
                inner,
                out: o,
            });
        }
        Ok(())
    }

    /// The output shape for an input of `shape`: the reduced axes at 1.
    fn reduced<D: Clone>(&self, shape: &[D], one: D) -> TractResult<TVec<D>> {
        ensure!(
            self.first_axis < self.end_axis && self.end_axis <= shape.len(),
            "a sum over axes {}..{} of a rank-{} tensor",
            self.first_axis,
            self.end_axis,
            shape.len()
        );
        let mut out: TVec<D> = shape.into();
        out[self.first_axis..self.end_axis]
            .iter_mut()
            .for_each(|d| *d = one.clone());
        Ok(out)
    }
}

/// One group of rows summed into `out`, for `pulp`: [`ROW_SUM_VECTORS`] vectors of the
/// rows' values at a time, their sums kept in registers down the rows (DS-CNN-S's global
/// average pool channels-last: 980 rows of 64 channels, 9.3 µs when each row's sums went
/// through memory).
struct RowSums<'a> {
    group: &'a [f32],
    inner: usize,
    out: &'a mut [f32],
}

/// Vectors of a row [`RowSums`] sums at a time.
const ROW_SUM_VECTORS: usize = 4;

impl pulp::WithSimd for RowSums<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let lanes = S::F32_LANES;
        let mut from = 0;
        while from < self.inner {
            let len = (ROW_SUM_VECTORS * lanes).min(self.inner - from);
            let mut sums = [simd.splat_f32s(0.0); ROW_SUM_VECTORS];
            if len == ROW_SUM_VECTORS * lanes {
                for row in self.group.chunks_exact(self.inner) {
                    let (values, _) = S::as_simd_f32s(&row[from..from + len]);
                    for (sum, v) in sums.iter_mut().zip(values) {
                        *sum = simd.add_f32s(*sum, *v);
                    }
                }
            } else {
                for row in self.group.chunks_exact(self.inner) {
                    let values = &row[from..from + len];
                    for (sum, part) in sums.iter_mut().zip(values.chunks(lanes)) {
                        *sum = simd.add_f32s(*sum, simd.partial_load_f32s(part));
                    }
                }
            }
            for (sum, part) in sums
                .iter()
                .zip(self.out[from..from + len].chunks_mut(lanes))
            {
                simd.partial_store_f32s(part, *sum);
            }
            from += len;
        }
    }
}

impl Op for SumAxes {
    fn name(&self) -> StaticName {
        "HushSumAxes".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        Ok(vec![format!("axes {}..{}", self.first_axis, self.end_axis)])
    }

    fn validation(&self) -> Validation {
        Validation::Rounding
    }

    op_as_typed_op!();
}

crate::keeps_output!(SumAxes);

impl KeepsOutput for SumAxes {
    fn eval_kept(&self, inputs: TVec<TValue>, kept: &mut KeptOutput) -> TractResult<TVec<TValue>> {
        let input = args_1!(inputs);
        let shape = input.shape();
        let out_shape = self.reduced(shape, 1)?;
        let rows: usize = shape[self.first_axis..self.end_axis].iter().product();
        let inner: usize = shape[self.end_axis..].iter().product();
        let values = input.try_as_plain_ram()?.as_slice::<f32>()?;
        kept.f32_output(&out_shape, |out| {
            if inner == 1 {
                Self::run(values, rows, out)
            } else {
                Self::run_rows(values, rows, inner, out)
            }
        })
    }
}

impl TypedOp for SumAxes {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        ensure!(inputs.len() == 1, "a sum takes one input");
        Ok(tvec!(f32::fact(
            self.reduced(&inputs[0].shape, 1.to_dim())?
        )))
    }

    as_op!();
}
