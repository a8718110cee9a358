//! tract-pulse's `Delay` (a pulsed model's buffer along its streaming axis) over f32 frames
//! that lie one after the other, for one stream: [`ContiguousDelay`].
//!
//! tract-pulse's state makes a new output tensor every run and copies through its generic
//! slice assignment; in `listen`'s pulsed trunk its five buffers took 8 % of the CPU
//! (`memmove`, `malloc`, BENCHMARKS.md). Here the output tensor is kept from one run to
//! the next and each run of frames is one `copy_from_slice`. Where the plan seats several
//! streams (lanes), tract-pulse's own state runs it.

use tract_core::internal::*;
use tract_pulse_opl::ops::{Delay, DelayState};

use crate::kept_f32;

/// tract-pulse's [`Delay`] whose frames lie one after the other in memory (every axis
/// before its streaming axis of size 1, as a pulsed trunk's moved time axis).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContiguousDelay {
    /// The op it runs.
    pub delay: Delay,
}

impl ContiguousDelay {
    /// The op for `delay` at `node`, when its input is f32 of a known shape whose axes
    /// before the streaming axis have size 1.
    pub fn for_delay(model: &TypedModel, node: &TypedNode, delay: &Delay) -> Option<Self> {
        let input = model.outlet_fact(*node.inputs.first()?).ok()?;
        let shape = input.shape.as_concrete()?;
        (input.datum_type == f32::datum_type()
            && delay.axis < shape.len()
            && shape[..delay.axis].iter().all(|&d| d == 1))
        .then(|| ContiguousDelay {
            delay: delay.clone(),
        })
    }
}

impl Op for ContiguousDelay {
    fn name(&self) -> StaticName {
        "HushDelay".into()
    }

    fn info(&self) -> TractResult<Vec<String>> {
        self.delay.info()
    }

    op_as_typed_op!();
}

impl EvalOp for ContiguousDelay {
    not_out_of_plan!();

    fn state(&self, _ctx: &EvalContext) -> TractResult<Option<Box<dyn OpState>>> {
        Ok(Some(Box::new(ContiguousDelayState::default())))
    }
}

impl TypedOp for ContiguousDelay {
    fn output_facts(&self, inputs: &[&TypedFact]) -> TractResult<TVec<TypedFact>> {
        self.delay.output_facts(inputs)
    }

    as_op!();
}

/// The frames a [`ContiguousDelay`] holds: a ring of `delay + overlap` frames, the oldest
/// at `head`, zero before the first run; the output tensor it keeps; or, for a plan that
/// seats several streams, tract-pulse's state.
#[derive(Debug, Clone, Default)]
pub struct ContiguousDelayState {
    ring: Vec<f32>,
    head: usize,
    output: Option<Arc<Tensor>>,
    /// tract-pulse's state, once a run seats several streams (from then on it runs them).
    laned: Option<DelayState>,
}

impl ContiguousDelayState {
    /// One stream's run of `op` on `input`: the output's first frames from the ring
    /// (oldest first), the rest from the input's first frames, then the input's last
    /// frames into the ring (as tract-pulse's `DelayState` does, ring run by ring run).
    fn run(&mut self, op: &Delay, input: &Tensor) -> TractResult<TValue> {
        let axis = op.axis;
        let shape = input.shape();
        let frame: usize = shape[axis + 1..].iter().product();
        let input_pulse = shape[axis];
        let output_pulse = input_pulse + op.overlap;
        let from_input = input_pulse.saturating_sub(op.delay);
        let from_buffer = output_pulse - from_input;
        let buffered = op.buffered();
        if self.ring.len() != buffered * frame {
            self.ring = vec![0.0; buffered * frame];
            self.head = 0;
        }
        let mut out_shape: TVec<usize> = shape.into();
        out_shape[axis] = output_pulse;
        let input = input.try_as_plain_ram()?;
        let input = input.as_slice::<f32>()?;
        let (ring, head) = (&mut self.ring, &mut self.head);
        kept_f32(&mut self.output, &out_shape, |out| {
            ensure!(
                input.len() == input_pulse * frame && out.len() == output_pulse * frame,
                "{} values in and room for {} out; expected {input_pulse} and \
                 {output_pulse} frames of {frame}",
                input.len(),
                out.len()
            );
            for (at, run) in op.ring_runs(*head, from_buffer) {
                let frames = run.len();
                out[at * frame..(at + frames) * frame]
                    .copy_from_slice(&ring[run.start * frame..run.end * frame]);
            }
            out[from_buffer * frame..].copy_from_slice(&input[..from_input * frame]);
            let fresh = input_pulse.min(buffered);
            let start = op.ring_index(*head + input_pulse - fresh);
            for (at, run) in op.ring_runs(start, fresh) {
                let from = input_pulse - fresh + at;
                ring[run.start * frame..run.end * frame]
                    .copy_from_slice(&input[from * frame..(from + run.len()) * frame]);
            }
            *head = op.ring_index(*head + input_pulse);
            Ok(())
        })
    }
}

impl OpState for ContiguousDelayState {
    fn eval(
        &mut self,
        ctx: &EvalContext,
        op: &dyn Op,
        inputs: TVec<TValue>,
    ) -> TractResult<TVec<TValue>> {
        let op = op
            .downcast_ref::<ContiguousDelay>()
            .context("HushDelay's state for another op")?;
        let one_stream = ctx.seating.max_lanes() == 1 && ctx.seating.occupancy() == 1;
        if self.laned.is_none() && one_stream {
            let input = args_1!(inputs);
            return Ok(tvec!(self.run(&op.delay, &input)?));
        }
        ensure!(
            self.laned.is_some() || self.ring.iter().all(|&v| v == 0.0),
            "HushDelay: a stream's frames held, and now a run of several streams"
        );
        self.laned
            .get_or_insert_with(DelayState::default)
            .eval(ctx, &op.delay, inputs)
    }

    fn reset_lanes(&mut self, lanes: &[LaneId]) -> TractResult<()> {
        if let Some(laned) = &mut self.laned {
            return laned.reset_lanes(lanes);
        }
        if !lanes.is_empty() {
            self.ring.fill(0.0);
            self.head = 0;
        }
        Ok(())
    }
}
