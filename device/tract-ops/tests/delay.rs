//! hush's buffer of a pulsed model ([`ContiguousDelay`]) against tract-pulse's (`Delay`),
//! run after run on the same pulses: the same outputs, bit for bit, over delays, overlaps,
//! streaming axes and pulses shorter and longer than the buffer (its ring wrapping).

#![allow(clippy::unwrap_used)]

use hush_tract_ops::{optimize, ContiguousDelay};
use proptest::prelude::*;
use tract_core::internal::*;
use tract_pulse_opl::ops::Delay;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A model of one `Delay` over input `shape` along `axis`: tract-pulse's op, or hush's.
fn model(shape: &[usize], axis: usize, delay: usize, overlap: usize, hush: bool) -> TypedModel {
    let mut model = TypedModel::default();
    let fact = f32::fact(shape);
    let x = model.add_source("x", fact.clone()).unwrap();
    let op = Delay::new_typed(&fact, axis, delay, overlap);
    let y = if hush {
        model.wire_node("delay", ContiguousDelay { delay: op }, &[x])
    } else {
        model.wire_node("delay", op, &[x])
    }
    .unwrap();
    model.select_output_outlets(&y).unwrap();
    model
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn hush_delay_equals_tract_pulse_run_after_run(
        pulse in 1usize..6,
        delay in 0usize..7,
        overlap in 0usize..4,
        leading_axis in any::<bool>(),
        frame in (1usize..4, 1usize..5),
        seed in any::<u64>(),
    ) {
        // The streaming axis first, or after an axis of size 1 (a batch).
        let (shape, axis) = if leading_axis {
            (vec![pulse, frame.0, frame.1], 0)
        } else {
            (vec![1, pulse, frame.0, frame.1], 1)
        };
        let run = |hush: bool| {
            let plan = model(&shape, axis, delay, overlap, hush).into_runnable().unwrap();
            let mut state = plan.spawn().unwrap();
            (0..7u64)
                .map(|k| {
                    let data = values(shape.iter().product(), seed ^ k);
                    let input = Tensor::from_shape(&shape, &data).unwrap();
                    let out = state.run(tvec!(input.into_tvalue())).unwrap();
                    out[0].clone().into_tensor()
                })
                .collect::<Vec<_>>()
        };
        let (tract, hush) = (run(false), run(true));
        for (k, (t, h)) in tract.iter().zip(&hush).enumerate() {
            prop_assert_eq!(t.shape(), h.shape());
            let (t, h) = (
                t.to_plain_array_view::<f32>().unwrap(),
                h.to_plain_array_view::<f32>().unwrap(),
            );
            prop_assert!(
                t.iter().zip(h.iter()).all(|(a, b)| a.to_bits() == b.to_bits()),
                "run {}: tract-pulse {:?}, hush {:?}", k, t, h
            );
        }
    }
}

/// `optimize` swaps hush's buffer in for tract-pulse's where the frames lie one after the
/// other, and leaves it where they do not (an axis of size 2 before the streaming one).
#[test]
fn optimize_takes_contiguous_delays_only() {
    let count = |shape: &[usize], axis: usize| {
        let (_, swapped) = optimize(model(shape, axis, 1, 2, false)).unwrap();
        swapped.delays
    };
    assert_eq!(count(&[3, 4], 0), 1);
    assert_eq!(count(&[1, 3, 4], 1), 1);
    assert_eq!(count(&[2, 3, 4], 1), 0);
}
