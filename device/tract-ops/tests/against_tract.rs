//! Each op of hush-tract-ops against the tract op it replaces, on the same graph: a model
//! with one depthwise or dense `Conv` (a 1×1 one becomes tract's einsum, which hush's
//! pointwise op takes), `MaxPool` or `Reduce<Sum>` is run as tract optimises it and
//! again with `swap_in` applied before tract's codegen; the outputs must agree within float
//! rounding, over random shapes, paddings, strides and dilations (proptest). hush's buffer
//! of a pulsed model runs against tract-pulse's, pulse after pulse, bit for bit.

#![allow(clippy::unwrap_used)]

use hush_tract_ops::{optimize, ContiguousDelay, Swapped};
use proptest::prelude::*;
use tract_core::internal::*;
use tract_core::ops::binary::TypedBinOp;
use tract_core::ops::cnn::conv::{Conv, KernelFormat};
use tract_core::ops::cnn::{MaxPool, PaddingSpec, PoolSpec};
use tract_core::ops::math::{Add, Max, Mul, Sub};
use tract_core::ops::nn::{DataFormat, Reduce, Reducer};
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

/// The window of one case: spatial sizes, kernel, strides, dilations, paddings.
#[derive(Debug, Clone)]
struct Case {
    batch: Option<usize>,
    channels: usize,
    input: [usize; 2],
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    before: [usize; 2],
    after: [usize; 2],
    seed: u64,
    /// NHWC (HWC) data instead of NCHW (CHW).
    channels_last: bool,
}

impl Case {
    fn shape(&self) -> TVec<usize> {
        let [h, w] = self.input;
        let mut shape = if self.channels_last {
            tvec![h, w, self.channels]
        } else {
            tvec![self.channels, h, w]
        };
        if let Some(n) = self.batch {
            shape.insert(0, n);
        }
        shape
    }

    /// The channel axis of the case's images (and outputs).
    fn channel_axis(&self) -> usize {
        let rank = self.shape().len();
        if self.channels_last {
            rank - 1
        } else {
            rank - 3
        }
    }

    fn pool_spec(&self, output_channels: usize) -> PoolSpec {
        PoolSpec {
            data_format: match (self.batch.is_some(), self.channels_last) {
                (true, false) => DataFormat::NCHW,
                (false, false) => DataFormat::CHW,
                (true, true) => DataFormat::NHWC,
                (false, true) => DataFormat::HWC,
            },
            kernel_shape: self.kernel.iter().copied().collect(),
            padding: PaddingSpec::Explicit(
                self.before.iter().copied().collect(),
                self.after.iter().copied().collect(),
            ),
            dilations: Some(self.dilations.iter().copied().collect()),
            strides: Some(self.strides.iter().copied().collect()),
            input_channels: self.channels,
            output_channels,
        }
    }

    /// Whether every output has at least one input under its window.
    fn has_output(&self) -> bool {
        (0..2).all(|a| {
            let span = (self.kernel[a] - 1) * self.dilations[a] + 1;
            self.input[a] + self.before[a] + self.after[a] >= span
                && self.before[a] < span
                && self.after[a] < span
        })
    }
}

fn cases() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(None), Just(Some(1)), Just(Some(2))],
        1usize..5,
        (1usize..10, 1usize..24),
        (1usize..4, 1usize..4),
        (1usize..3, 1usize..3),
        (1usize..3, 1usize..3),
        (0usize..3, 0usize..3, 0usize..3, 0usize..3),
        any::<u64>(),
    )
        .prop_map(
            |(batch, channels, input, kernel, strides, dilations, pads, seed)| Case {
                batch,
                channels,
                input: [input.0, input.1],
                kernel: [kernel.0, kernel.1],
                strides: [strides.0, strides.1],
                dilations: [dilations.0, dilations.1],
                before: [pads.0, pads.1],
                after: [pads.2, pads.3],
                seed,
                channels_last: false,
            },
        )
        .prop_filter("an empty output", Case::has_output)
}

/// Cases over channels-last data, with as few channels as the others' or enough for
/// several SIMD vectors and a partial one (up to 70).
fn channels_last_cases() -> impl Strategy<Value = Case> {
    (cases(), prop_oneof![1usize..5, 15usize..20, 60usize..71]).prop_map(|(case, channels)| Case {
        channels,
        channels_last: true,
        ..case
    })
}

/// The model's output as tract optimises it, and as hush does (`optimize`), and what
/// hush swapped.
fn run_both(model: TypedModel, input: Tensor) -> (Tensor, Tensor, Swapped) {
    let run = |m: TypedModel| {
        let out = m
            .into_runnable()
            .unwrap()
            .run(tvec![input.clone().into()])
            .unwrap();
        out[0].clone().into_tensor()
    };
    let tract = run(model.clone().into_optimized().unwrap());
    let (hush, swapped) = optimize(model).unwrap();
    (tract, run(hush), swapped)
}

/// Whether hush's output equals tract's within float rounding: 3e-5 × (1 + |tract's|). A
/// convolution sums up to 70 channels × 9 taps of values in [-1, 1) in another order than
/// tract's, and the two roundings differ by about 1e-5 at worst (a case of 63 channels × 6
/// taps, its sum -0.0269, differed by 1.17e-5); a wrong or missing term differs by far more.
fn assert_close(tract: &Tensor, hush: &Tensor, case: &impl std::fmt::Debug) {
    assert_eq!(tract.shape(), hush.shape(), "{case:?}");
    let t = tract.to_plain_array_view::<f32>().unwrap();
    let h = hush.to_plain_array_view::<f32>().unwrap();
    for (a, b) in t.iter().zip(h.iter()) {
        assert!(
            (a - b).abs() <= 3e-5 * (1.0 + a.abs()),
            "tract {a} against hush {b} in {case:?}"
        );
    }
}

fn input(case: &Case) -> (TypedModel, OutletId, Tensor) {
    let mut model = TypedModel::default();
    let shape = case.shape();
    let x = model.add_source("x", f32::fact(&shape)).unwrap();
    let data = values(shape.iter().product(), case.seed);
    (model, x, Tensor::from_shape(&shape, &data).unwrap())
}

/// Wires a depthwise `Conv` of `case` over `x` into `model`: a kernel of the case's values,
/// `bias`.
fn depthwise(model: &mut TypedModel, x: OutletId, case: &Case, bias: Tensor) -> OutletId {
    let c = case.channels;
    let taps = case.kernel[0] * case.kernel[1];
    let k = Tensor::from_shape(
        &[c, 1, case.kernel[0], case.kernel[1]],
        &values(c * taps, case.seed ^ 1),
    )
    .unwrap();
    let k = model.add_const(model.unique_name("k"), k).unwrap();
    let b = model.add_const("b", bias).unwrap();
    let conv = Conv {
        pool_spec: case.pool_spec(c),
        kernel_fmt: KernelFormat::OIHW,
        group: c,
        q_params: None,
    };
    model
        .wire_node(model.unique_name("dw"), conv, &[x, k, b])
        .unwrap()[0]
}

/// Wires a dense (one group) `Conv` of `case` to `outputs` channels over `x` into `model`,
/// then, if `fold`, a per-channel multiply and add and a ReLU.
fn dense(model: &mut TypedModel, x: OutletId, case: &Case, outputs: usize, fold: bool) -> OutletId {
    let (c, taps) = (case.channels, case.kernel[0] * case.kernel[1]);
    let k = Tensor::from_shape(
        &[outputs, c, case.kernel[0], case.kernel[1]],
        &values(outputs * c * taps, case.seed ^ 1),
    )
    .unwrap();
    let k = model.add_const(model.unique_name("k"), k).unwrap();
    let b = Tensor::from_shape(&[outputs], &values(outputs, case.seed ^ 2)).unwrap();
    let b = model.add_const(model.unique_name("b"), b).unwrap();
    let conv = Conv {
        pool_spec: case.pool_spec(outputs),
        kernel_fmt: KernelFormat::OIHW,
        group: 1,
        q_params: None,
    };
    let mut y = model
        .wire_node(model.unique_name("conv"), conv, &[x, k, b])
        .unwrap()[0];
    if fold {
        let rank = case.shape().len();
        let mut shape = vec![1; rank];
        shape[case.channel_axis()] = outputs;
        let ops: [(&str, Box<dyn tract_core::ops::binary::BinMiniOp>); 3] = [
            ("scale", Box::new(Mul)),
            ("shift", Box::new(Add)),
            ("relu", Box::new(Max)),
        ];
        for (i, (name, op)) in ops.into_iter().enumerate() {
            let v = if i == 2 {
                vec![0.0; outputs]
            } else {
                values(outputs, case.seed ^ 3 ^ i as u64)
            };
            let v = model
                .add_const(
                    model.unique_name(format!("{name}.value")),
                    Tensor::from_shape(&shape, &v).unwrap(),
                )
                .unwrap();
            y = model
                .wire_node(model.unique_name(name), TypedBinOp(op, None), &[y, v])
                .unwrap()[0];
        }
    }
    y
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A dense convolution (one group) of any window, to any number of channels, with a
    /// batch norm and a ReLU after it or not: hush's dense op, or its pointwise op for a
    /// 1×1 window tract has made an einsum of, with the batch norm and ReLU folded in.
    /// Over random shapes, windows, strides, dilations and paddings.
    #[test]
    fn dense_and_pointwise_convolutions_match_tract(
        case in cases(),
        outputs in 1usize..20,
        fold in any::<bool>(),
    ) {
        // One channel in or out under a 1×1 kernel is a scaling or a dot product, of which
        // tract's declutter pass makes an einsum without that channel axis (which stays
        // tract's).
        prop_assume!(case.kernel != [1, 1] || (case.channels > 1 && outputs > 1));
        let (mut model, x, data) = input(&case);
        let out = dense(&mut model, x, &case, outputs, fold);
        model.select_output_outlets(&[out]).unwrap();
        let (tract, hush, swapped) = run_both(model.clone(), data);
        // (One channel to one is depthwise too.)
        let convs = swapped.dense + swapped.pointwise + swapped.depthwise;
        prop_assert_eq!(convs, 1, "{:?}", swapped);
        // Nothing is left of the bias (an add after tract's einsum of a 1×1 convolution), the
        // batch norm and the ReLU: folded into hush's op, or (one input channel) taken into
        // the convolution by tract's declutter pass first.
        let (optimized, _) = optimize(model.clone()).unwrap();
        let left: Vec<_> = optimized.nodes().iter().map(|n| n.op.name().to_string()).filter(|n| ["Mul", "Add", "Max", "Affine"].iter().any(|op| n.contains(op))).collect();
        prop_assert!(left.is_empty(), "{:?} left", left);
        assert_close(&tract, &hush, &case);
    }

    /// Over channels-last data (NHWC or HWC): a depthwise convolution and a dense one, with
    /// a batch norm and a ReLU after it or not, run by hush's channels-last ops (a 1×1
    /// dense one as tract's einsum of it, by the channels-last pointwise op, where it has
    /// two positions or more).
    #[test]
    fn channels_last_convolutions_match_tract(
        case in channels_last_cases(),
        outputs in prop_oneof![1usize..5, 17usize..20, 60usize..70],
        fold in any::<bool>(),
        depthwise_conv in any::<bool>(),
    ) {
        prop_assume!(case.channels > 1 || case.kernel != [1, 1]);
        prop_assume!(depthwise_conv || case.kernel != [1, 1] || outputs > 1);
        let (mut model, x, data) = input(&case);
        let out = if depthwise_conv {
            let b = Tensor::from_shape(&[case.channels], &values(case.channels, case.seed ^ 2))
                .unwrap();
            depthwise(&mut model, x, &case, b)
        } else {
            dense(&mut model, x, &case, outputs, fold)
        };
        model.select_output_outlets(&[out]).unwrap();
        let (tract, hush, swapped) = run_both(model, data);
        let one_position = case.input == [1, 1] && case.batch.unwrap_or(1) == 1;
        let convs = swapped.dense + swapped.pointwise + swapped.depthwise;
        if !(case.kernel == [1, 1] && one_position) {
            prop_assert_eq!(convs, 1, "{:?}", swapped);
        }
        assert_close(&tract, &hush, &case);
    }

    /// A dense convolution with many input channels (channels-first: as many as
    /// `DenseConvNhwc` takes from, `CHANNELS_FIRST_FROM`) in either layout, a batch norm and
    /// a ReLU after it or not, then a max pooling without padding or not: hush's
    /// channels-last dense op (moving channels first's channels in and out) with the pooling
    /// folded in, where the CPU has SIMD vectors.
    #[test]
    fn dense_convolutions_with_many_channels_and_a_pool_after_match_tract(
        case in cases(),
        channels in prop_oneof![8usize..10, 30usize..40],
        channels_last in any::<bool>(),
        outputs in prop_oneof![1usize..5, 15usize..20, 60usize..70],
        fold in any::<bool>(),
        pool in prop::option::of(((1usize..4, 1usize..4), (1usize..3, 1usize..3))),
    ) {
        prop_assume!(case.kernel != [1, 1]);
        let case = Case { channels, channels_last, ..case };
        let (mut model, x, data) = input(&case);
        let mut out = dense(&mut model, x, &case, outputs, fold);
        let conv_out: Vec<usize> = model.outlet_fact(out).unwrap().shape.as_concrete().unwrap().to_vec();
        let spatial = if channels_last { conv_out.len() - 3 } else { conv_out.len() - 2 };
        let pool = pool.filter(|((kh, kw), _)| {
            conv_out[spatial] >= *kh && conv_out[spatial + 1] >= *kw
        });
        if let Some(((kh, kw), (sh, sw))) = pool {
            let pooled = Case {
                channels: outputs,
                kernel: [kh, kw],
                strides: [sh, sw],
                dilations: [1, 1],
                before: [0, 0],
                after: [0, 0],
                ..case.clone()
            };
            let pool = MaxPool { pool_spec: pooled.pool_spec(outputs), with_index_outputs: None };
            out = model.wire_node("pool", pool, &[out]).unwrap()[0];
        }
        model.select_output_outlets(&[out]).unwrap();
        let (tract, hush, swapped) = run_both(model.clone(), data);
        prop_assert_eq!(swapped.dense, 1, "{:?}", swapped);
        let ops = optimized_ops(model);
        // Channels-first, the channels-last op takes the convolution where a pooling
        // follows, on a CPU with SIMD vectors.
        let vectors = hush_tract_ops::channels_last::simd_lanes() >= 4;
        if channels_last || (vectors && pool.is_some()) {
            prop_assert!(ops.iter().any(|op| op == "HushDenseConvNhwc"), "{:?}", ops);
            prop_assert!(!ops.iter().any(|op| op.contains("Pool")), "{:?}", ops);
            prop_assert_eq!(swapped.max_pool, 0);
        } else {
            prop_assert!(ops.iter().any(|op| op == "HushDenseConvNchw"), "{:?}", ops);
        }
        assert_close(&tract, &hush, &(&case, outputs, pool));
    }

    #[test]
    fn depthwise_matches_tract(case in cases(), per_channel_bias in any::<bool>()) {
        // One channel under a 1×1 kernel is a product, which tract's declutter pass turns
        // into an einsum before any depthwise op sees it.
        prop_assume!(case.channels > 1 || case.kernel != [1, 1]);
        let (mut model, x, data) = input(&case);
        let b = if per_channel_bias {
            Tensor::from_shape(&[case.channels], &values(case.channels, case.seed ^ 2)).unwrap()
        } else {
            tensor0(0.25f32)
        };
        let out = depthwise(&mut model, x, &case, b);
        model.select_output_outlets(&[out]).unwrap();
        let (tract, hush, swapped) = run_both(model, data);
        prop_assert_eq!(swapped, Swapped { depthwise: 1, ..Swapped::default() });
        assert_close(&tract, &hush, &case);
    }

    /// A batch norm (multiply, add: per channel or one value) and a ReLU after the
    /// convolution are folded into hush's op when they follow it alone, in any subset; a
    /// second reader of the convolution's output, or a max with another value than 0, stops
    /// the folding there.
    #[test]
    fn depthwise_folds_the_batch_norm_and_relu_after_it(
        case in cases(),
        ops in (any::<bool>(), any::<bool>(), any::<bool>()),
        per_channel in any::<bool>(),
        stop in prop_oneof![Just(None), Just(Some(0usize)), Just(Some(1)), Just(Some(2))],
    ) {
        // One channel is an ordinary convolution, whose bias tract's declutter pass takes an
        // add into before any op of hush's sees it.
        prop_assume!(case.channels > 1);
        let (mut model, x, data) = input(&case);
        let c = case.channels;
        let mut y = depthwise(&mut model, x, &case, tensor0(0.25f32));
        // A constant that broadcasts along channels: [c, 1, 1] for CHW, [1, c, 1, 1] NCHW.
        let rank = case.shape().len();
        let mut shape = vec![1; rank];
        if per_channel {
            shape[case.channel_axis()] = c;
        }
        let n: usize = shape.iter().product();
        let (mut folded, mut stopped, mut outputs) = (0, false, vec![]);
        let wanted = [ops.0, ops.1, ops.2];
        for (i, op) in wanted.iter().enumerate() {
            if !op {
                continue;
            }
            if stop == Some(i) {
                stopped = true;
                if i < 2 {
                    // A second reader of the value before this op.
                    outputs.push(y);
                }
            }
            let (name, bin, konst) = match i {
                0 => ("scale", TypedBinOp(Box::new(Mul), None), values(n, case.seed ^ 3)),
                1 => ("shift", TypedBinOp(Box::new(Add), None), values(n, case.seed ^ 4)),
                _ if stop == Some(2) => ("max", TypedBinOp(Box::new(Max), None), vec![0.5; n]),
                _ => ("relu", TypedBinOp(Box::new(Max), None), vec![0.0; n]),
            };
            let konst = model
                .add_const(format!("{name}.value"), Tensor::from_shape(&shape, &konst).unwrap())
                .unwrap();
            y = model.wire_node(name, bin, &[y, konst]).unwrap()[0];
            if !stopped {
                folded += 1;
            }
        }
        // The end of the chain first: it is the output compared.
        outputs.insert(0, y);
        model.select_output_outlets(&outputs).unwrap();
        let (tract, hush, swapped) = run_both(model, data);
        // (What the folding left after the convolution may go to an `AxisAffine`.)
        prop_assert_eq!((swapped.depthwise, swapped.folded), (1, folded));
        assert_close(&tract, &hush, &case);
    }

    /// A subtract, multiply and add by constants along one axis (or one value) and a ReLU,
    /// in any subset, on a model's input: what tract's codegen leaves unfused, in one op.
    #[test]
    fn elementwise_chains_along_an_axis_match_tract(
        shape in prop::collection::vec(1usize..6, 2..5),
        axis in 0usize..4,
        ops in prop::collection::vec((any::<bool>(), any::<bool>()), 4),
        seed in any::<u64>(),
    ) {
        let axis = axis % shape.len();
        let mut model = TypedModel::default();
        let mut y = model.add_source("x", f32::fact(&shape)).unwrap();
        let data = Tensor::from_shape(&shape, &values(shape.iter().product(), seed)).unwrap();
        // The constant: [1, .., n, .., 1] along `axis`, or all ones (one value).
        let mut along = vec![1; shape.len()];
        along[axis] = shape[axis];
        let one = vec![1; shape.len()];
        let mut all_along = true;
        let mut present = 0;
        for (i, &(wanted, is_along)) in ops.iter().enumerate() {
            if !wanted {
                continue;
            }
            let konst_shape: &[usize] = if is_along && i < 3 { &along } else { &one };
            all_along &= is_along || i == 3;
            let n: usize = konst_shape.iter().product();
            let (konst, mini): (Vec<f32>, Box<dyn tract_core::ops::binary::BinMiniOp>) = match i {
                0 => (values(n, seed ^ 5), Box::new(Sub)),
                1 => (values(n, seed ^ 6), Box::new(Mul)),
                2 => (values(n, seed ^ 7), Box::new(Add)),
                _ => (vec![0.0; n], Box::new(Max)),
            };
            let c = model
                .add_const(format!("c{i}"), Tensor::from_shape(konst_shape, &konst).unwrap())
                .unwrap();
            y = model.wire_node(format!("op{i}"), TypedBinOp(mini, None), &[y, c]).unwrap()[0];
            present += 1;
        }
        prop_assume!(present > 0);
        model.select_output_outlets(&[y]).unwrap();
        let case = format!("{shape:?} along {axis}, ops {ops:?}");
        // tract's generic (broadcasting) elementwise ops in a model's running order.
        let generic = |m: &TypedModel| {
            m.eval_order().unwrap().iter().filter(|&&n| m.node(n).op_is::<TypedBinOp>()).count()
        };
        let tract_model = model.clone().into_optimized().unwrap();
        let (hush_model, swapped) = optimize(model).unwrap();
        let run = |m: TypedModel| {
            m.into_runnable().unwrap().run(tvec![data.clone().into()]).unwrap()[0]
                .clone()
                .into_tensor()
        };
        let (left, tract) = (generic(&tract_model), run(tract_model));
        let (hush_left, hush) = (generic(&hush_model), run(hush_model));
        prop_assert_eq!(tract.shape(), hush.shape());
        let t = tract.to_plain_array_view::<f32>().unwrap();
        let h = hush.to_plain_array_view::<f32>().unwrap();
        for (a, b) in t.iter().zip(h.iter()) {
            prop_assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "tract {a}, hush {b}: {case}");
        }
        // When each constant varies along the axis, hush takes every op tract's codegen left
        // generic (a chain by constants along a leading axis tract runs fast itself; a lone
        // ReLU, or constants of one value, too).
        let starts = ops[..3].iter().any(|&(w, _)| w);
        if all_along && starts && shape[axis] > 1 {
            prop_assert_eq!(hush_left, 0, "{}", case);
            prop_assert!(swapped.affine >= left, "{left} generic ops, {swapped:?}: {case}");
        }
        prop_assert!(swapped.affine <= present, "{}", case);
    }

    #[test]
    fn max_pool_matches_tract(case in cases()) {
        let (mut model, x, data) = input(&case);
        let pool = MaxPool { pool_spec: case.pool_spec(case.channels), with_index_outputs: None };
        let out = model.wire_node("pool", pool, &[x]).unwrap();
        model.select_output_outlets(&out).unwrap();
        let (tract, hush, swapped) = run_both(model, data);
        prop_assert_eq!(swapped, Swapped { max_pool: 1, ..Swapped::default() });
        assert_close(&tract, &hush, &case);
    }

    #[test]
    fn sum_over_consecutive_axes_matches_tract(case in cases(), first in 0usize..4, len in 1usize..4) {
        let (mut model, x, data) = input(&case);
        let rank = case.shape().len();
        let first = first.min(rank - 1);
        let end = (first + len).min(rank);
        let reduce = Reduce::new((first..end).collect(), Reducer::Sum);
        let out = model.wire_node("sum", reduce, &[x]).unwrap();
        model.select_output_outlets(&out).unwrap();
        let (tract, hush, swapped) = run_both(model, data);
        prop_assert_eq!(swapped, Swapped { sum: 1, ..Swapped::default() });
        assert_close(&tract, &hush, &case);
    }
}

/// What the ops do not take stays tract's: a grouped (not depthwise) convolution, a sum
/// over axes that do not follow one another, a max.
#[test]
fn other_ops_stay_tract() {
    let case = Case {
        batch: Some(1),
        channels: 4,
        input: [6, 5],
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [1, 1],
        before: [1, 1],
        after: [1, 1],
        seed: 3,
        channels_last: false,
    };
    let (mut model, x, data) = input(&case);
    let k = model
        .add_const(
            "k",
            Tensor::from_shape(&[4, 2, 3, 3], &values(72, 4)).unwrap(),
        )
        .unwrap();
    let b = model.add_const("b", tensor0(0f32)).unwrap();
    let conv = Conv {
        pool_spec: case.pool_spec(4),
        kernel_fmt: KernelFormat::OIHW,
        group: 2,
        q_params: None,
    };
    let y = model.wire_node("grouped", conv, &[x, k, b]).unwrap();
    let y = model
        .wire_node("apart", Reduce::new(tvec![1, 3], Reducer::Sum), &y)
        .unwrap();
    let y = model
        .wire_node("max", Reduce::new(tvec![3], Reducer::Max), &y)
        .unwrap();
    model.select_output_outlets(&y).unwrap();
    let (tract, hush, swapped) = run_both(model, data);
    assert_eq!(swapped, Swapped::default());
    assert_close(&tract, &hush, &case);
}

/// The einsums tract's declutter pass makes of 1×1 convolutions, in the forms hush's
/// pointwise op takes: with a batch axis, without, with the weights `OI` or `IO`, and a
/// batch of one the output drops (BC-ResNet's first pointwise convolution), with the
/// weights first (a pulsed trunk's products, as tract's declutter pass writes them), and
/// over channels-last data (adding or dropping a batch of one), each with a ReLU after it.
#[test]
fn pointwise_einsums_match_tract() {
    for (expr, images, weights) in [
        ("NIHW,OI->NOHW", &[2, 5, 3, 7][..], &[6, 5][..]),
        ("IHW,OI->OHW", &[5, 4, 9][..], &[6, 5][..]),
        ("NIT,IO->NOT", &[1, 5, 33][..], &[5, 6][..]),
        ("NIHW,OI->OHW", &[1, 5, 3, 7][..], &[6, 5][..]),
        ("OI,IHW->OHW", &[5, 3, 10][..], &[6, 5][..]),
        ("OI,NIHW->OHW", &[1, 5, 3, 10][..], &[6, 5][..]),
        // Channels-last, as a model moved channels-last has them.
        ("NHWI,OI->NHWO", &[2, 3, 7, 5][..], &[6, 5][..]),
        ("OI,NHWI->HWO", &[1, 3, 10, 5][..], &[6, 5][..]),
        ("HWI,OI->NHWO", &[3, 10, 5][..], &[6, 5][..]),
        ("HWI,IO->HWO", &[3, 10, 5][..], &[5, 6][..]),
        // One position: a matrix-vector product (leak-CNN's dense layers), the outputs in
        // passes of eight vectors, then one vector at a time, the last partial.
        ("NI,OI->NO", &[1, 300][..], &[40, 300][..]),
        ("NI,IO->NO", &[1, 37][..], &[37, 200][..]),
        // Axes of size 1 dropped between the kept ones and the channels (DS-CNN-S's head
        // after its sum over the positions).
        ("MBAK,KN->MN", &[1, 1, 1, 5][..], &[5, 6][..]),
        // Several summed axes: a flattening tract's declutter pass folded into the
        // weights, as it does leak-CNN's before its dense layer.
        ("NBAK,BAKO->NO", &[1, 4, 3, 5][..], &[4, 3, 5, 20][..]),
        ("NBAK,OBAK->NO", &[1, 4, 3, 5][..], &[20, 4, 3, 5][..]),
    ] {
        let mut model = TypedModel::default();
        let x = model.add_source("x", f32::fact(images)).unwrap();
        let w = Tensor::from_shape(weights, &values(weights.iter().product(), 8)).unwrap();
        let w = model.add_const("w", w).unwrap();
        let axes: tract_core::axes::AxesMapping = expr.parse().unwrap();
        let einsum = tract_core::ops::einsum::EinSum::new(axes, f32::datum_type());
        let inputs = if expr.starts_with("OI,") {
            [w, x]
        } else {
            [x, w]
        };
        let y = model.wire_node("einsum", einsum, &inputs).unwrap()[0];
        let rank = model.outlet_fact(y).unwrap().rank();
        let zero = Tensor::from_shape(&vec![1; rank], &[0f32]).unwrap();
        let zero = model.add_const("zero", zero).unwrap();
        let relu = TypedBinOp(Box::new(Max), None);
        let y = model.wire_node("relu", relu, &[y, zero]).unwrap();
        model.select_output_outlets(&y).unwrap();
        let data = values(images.iter().product(), 9);
        let data = Tensor::from_shape(images, &data).unwrap();
        let (tract, hush, swapped) = run_both(model, data);
        // (An einsum of one position is a dense layer.)
        assert_eq!(
            (swapped.pointwise + swapped.dense_layers, swapped.folded),
            (1, 1),
            "{expr}: {swapped:?}"
        );
        assert_close(&tract, &hush, &expr);
        let t = tract.to_plain_array_view::<f32>().unwrap();
        assert!(
            t.iter().any(|&v| v > 0.0) && t.iter().any(|&v| v == 0.0),
            "{expr}"
        );
    }
}

/// A plan's state keeps each op's output tensor and writes the next run's output over it
/// only when nothing holds it any more: over several runs of one state (a dense
/// convolution, a depthwise one after it and a max pooling, all hush's), every output still
/// held equals tract's for its own input, a dropped output's tensor is written again, and a
/// clone of the state writes tensors of its own.
#[test]
fn kept_outputs_are_written_again_only_when_nothing_holds_them() {
    let case = Case {
        batch: Some(1),
        channels: 3,
        input: [9, 11],
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [1, 1],
        before: [1, 1],
        after: [1, 1],
        seed: 5,
        channels_last: false,
    };
    let (mut model, x, _) = input(&case);
    let y = dense(&mut model, x, &case, 3, true);
    let bias = Tensor::from_shape(&[3], &values(3, 9)).unwrap();
    let y = depthwise(&mut model, y, &case, bias);
    let pool = MaxPool {
        pool_spec: case.pool_spec(3),
        with_index_outputs: None,
    };
    let out = model.wire_node("pool", pool, &[y]).unwrap();
    model.select_output_outlets(&out).unwrap();
    let inputs: Vec<Tensor> = (0..4)
        .map(|seed| Tensor::from_shape(&case.shape(), &values(3 * 9 * 11, 40 + seed)).unwrap())
        .collect();
    let tract = model
        .clone()
        .into_optimized()
        .unwrap()
        .into_runnable()
        .unwrap();
    let (hush, swapped) = optimize(model).unwrap();
    assert_eq!(
        (swapped.dense, swapped.depthwise, swapped.max_pool),
        (1, 1, 1)
    );
    let hush = hush.into_runnable().unwrap();
    let expected: Vec<Tensor> = inputs
        .iter()
        .map(|i| {
            tract.run(tvec![i.clone().into()]).unwrap()[0]
                .clone()
                .into_tensor()
        })
        .collect();
    let mut state = SimpleState::new(&hush).unwrap();
    let run = |state: &mut TypedSimpleState, i: usize| {
        let out = state.run(tvec![inputs[i].clone().into()]).unwrap();
        assert_close(&expected[i], &out[0], &i);
        out[0].clone()
    };
    // Held: the next run writes elsewhere.
    let first = run(&mut state, 0);
    let second = run(&mut state, 1);
    assert_ne!(
        first.as_ptr::<f32>().unwrap(),
        second.as_ptr::<f32>().unwrap()
    );
    assert_close(
        &expected[0],
        &first,
        &"the first output, held over the second run",
    );
    // Dropped: the next run writes over it.
    let at = second.as_ptr::<f32>().unwrap();
    drop(second);
    let third = run(&mut state, 2);
    assert_eq!(third.as_ptr::<f32>().unwrap(), at);
    // A clone writes its own tensors, and leaves the original's alone.
    let mut clone = state.clone();
    let from_clone = run(&mut clone, 3);
    assert_ne!(from_clone.as_ptr::<f32>().unwrap(), at);
    assert_close(
        &expected[2],
        &third,
        &"the third output, held over the clone's run",
    );
    assert_close(&expected[0], &first, &"the first output, at the end");
}

/// A DS-CNN block over NCHW data (a dense convolution from one plane to 16 channels, a
/// depthwise 3×3 one, a 1×1 one as tract's einsum of it, each with a batch norm and a ReLU,
/// then a sum over the positions and a dense head) runs channels-last: the depthwise
/// convolution moves its channels last (hush's pass; on aarch64 tract's declutter pass
/// already has), the rest of the graph follows, every convolution and the head are hush's
/// channels-last ops, and the output equals tract's. The model's input and output keep their shapes.
/// A model of features `[1, frames, bins]` given a channel axis (as the keyword spotters'
/// graphs do: the model's input keeps its shape), its channel-axis outlet, and input data.
fn features(frames: usize, bins: usize, seed: u64) -> (TypedModel, OutletId, Tensor) {
    let mut model = TypedModel::default();
    let x = model.add_source("x", f32::fact([1, frames, bins])).unwrap();
    let data = Tensor::from_shape(&[1, frames, bins], &values(frames * bins, seed)).unwrap();
    let x = model
        .wire_node(
            "channel",
            tract_core::ops::change_axes::AxisOp::Add(1),
            &[x],
        )
        .unwrap()[0];
    (model, x, data)
}

/// Wires a 2×2 max pooling at stride 2 of `channels` channels over `y` (`case`'s layout).
fn max_pool_2x2(model: &mut TypedModel, y: OutletId, case: &Case, channels: usize) -> OutletId {
    let pooling = Case {
        channels,
        kernel: [2, 2],
        strides: [2, 2],
        dilations: [1, 1],
        before: [0, 0],
        after: [0, 0],
        ..case.clone()
    };
    let pooling = MaxPool {
        pool_spec: pooling.pool_spec(channels),
        with_index_outputs: None,
    };
    let name = model.unique_name("pool");
    model.wire_node(name, pooling, &[y]).unwrap()[0]
}

/// The names of the ops of `model` as hush optimises it.
fn optimized_ops(model: TypedModel) -> Vec<String> {
    let (optimized, _) = optimize(model).unwrap();
    optimized
        .nodes()
        .iter()
        .map(|n| n.op.name().to_string())
        .collect()
}

/// A block of DS-CNN (a first convolution of one channel, a depthwise one, a pointwise one,
/// a global sum, a dense head), with a max pooling after the depthwise convolution or not:
/// moved channels-last where the CPU has SIMD vectors, every convolution hush's
/// channels-last op and the pooling hush's channels-last one: with depthwise planes of 50
/// positions (a pulsed trunk's size) and of 140 (more than the 64 that AVX2's width once
/// moved at most; whole windows move there too).
#[test]
fn a_depthwise_block_runs_channels_last() {
    for frames in [12, 30] {
        for pool in [false, true] {
            depthwise_block(frames, pool);
        }
    }
}

fn depthwise_block(frames: usize, pool: bool) {
    let case = Case {
        batch: Some(1),
        channels: 1,
        input: [frames, 10],
        kernel: [4, 3],
        strides: [2, 1],
        dilations: [1, 1],
        before: [0, 1],
        after: [0, 1],
        seed: 7,
        channels_last: false,
    };
    let (mut model, x, data) = features(frames, 10, case.seed);
    let y = dense(&mut model, x, &case, 16, true);
    let rows = (frames - 4) / 2 + 1;
    let block = Case {
        channels: 16,
        input: [rows, 10],
        kernel: [3, 3],
        strides: [1, 1],
        before: [1, 1],
        after: [1, 1],
        seed: 8,
        ..case.clone()
    };
    let y = depthwise(
        &mut model,
        y,
        &block,
        Tensor::from_shape(&[16], &values(16, 9)).unwrap(),
    );
    let zero = model
        .add_const("zero", Tensor::from_shape(&[1, 1, 1, 1], &[0f32]).unwrap())
        .unwrap();
    let mut y = model
        .wire_node("dw.relu", TypedBinOp(Box::new(Max), None), &[y, zero])
        .unwrap()[0];
    let mut block = block;
    if pool {
        y = max_pool_2x2(&mut model, y, &block, 16);
        block.input = [rows / 2, 5];
    }
    let pointwise = Case {
        kernel: [1, 1],
        before: [0, 0],
        after: [0, 0],
        seed: 10,
        ..block.clone()
    };
    let y = dense(&mut model, y, &pointwise, 16, true);
    let mean = Reduce::new(tvec![2, 3], Reducer::Sum);
    let y = model.wire_node("mean", mean, &[y]).unwrap()[0];
    // The head: a dense layer to 4 classes (an einsum, which takes any layout).
    let head = Tensor::from_shape(&[4, 16], &values(64, 11)).unwrap();
    let head = model.add_const("head.weights", head).unwrap();
    let axes: tract_core::axes::AxesMapping = "NCHW,KC->NK".parse().unwrap();
    let einsum = tract_core::ops::einsum::EinSum::new(axes, f32::datum_type());
    let y = model.wire_node("head", einsum, &[y, head]).unwrap();
    model.select_output_outlets(&y).unwrap();
    let (tract, hush, swapped) = run_both(model.clone(), data);
    // Channels-last, the head is hush's too: a dense layer over the sums' channels, last
    // once the graph has moved.
    assert_eq!(
        (swapped.dense, swapped.depthwise, swapped.pointwise),
        (1, 1, 1),
        "{swapped:?}"
    );
    assert_eq!(swapped.dense_layers, swapped.channels_last as usize);
    // (pulp's scalar path, on a CPU without AVX2 or NEON, stays channels-first.)
    if hush_tract_ops::channels_last::simd_lanes() >= 4 {
        assert!(swapped.channels_last, "{swapped:?}");
        let names = optimized_ops(model);
        let pooling = ["HushMaxPoolNhwc"].into_iter().filter(|_| pool);
        for op in [
            "HushDenseConvNhwc",
            "HushDepthwiseNhwc",
            "HushPointwiseNhwc",
        ]
        .into_iter()
        .chain(pooling)
        {
            assert!(names.iter().any(|n| n == op), "{op} not in {names:?}");
        }
    }
    assert_eq!(tract.shape(), [1, 4]);
    assert_close(&tract, &hush, &case);
}

/// Features through two dense convolutions, each with a ReLU and a 2×2 max pooling after
/// it, and a dense layer over the flattened result: leak-CNN's graph. With no depthwise
/// convolution, it moves channels-last from its first convolution (of one channel) where
/// the CPU has SIMD vectors: both convolutions hush's channels-last dense op with their
/// poolings folded in (the first's rows a band at a time, an odd column left out), the
/// dense layer hush's over the channels-last flattening (its weights' summed axes in
/// another order than the images').
#[test]
fn a_leak_cnn_graph_runs_channels_last() {
    let first = Case {
        batch: Some(1),
        channels: 1,
        input: [18, 15],
        kernel: [3, 3],
        strides: [1, 1],
        dilations: [1, 1],
        before: [0, 0],
        after: [0, 0],
        seed: 21,
        channels_last: false,
    };
    let (mut model, x, data) = features(18, 15, first.seed);
    // [1, 8, 16, 13], pooled to [1, 8, 8, 6].
    let y = dense(&mut model, x, &first, 8, true);
    let y = max_pool_2x2(&mut model, y, &first, 8);
    // [1, 16, 6, 4], pooled to [1, 16, 3, 2].
    let second = Case {
        channels: 8,
        input: [8, 6],
        seed: 22,
        ..first.clone()
    };
    let y = dense(&mut model, y, &second, 16, true);
    let y = max_pool_2x2(&mut model, y, &second, 16);
    let weights = Tensor::from_shape(&[16, 3, 2, 5], &values(480, 23)).unwrap();
    let weights = model.add_const("fc.weights", weights).unwrap();
    let axes: tract_core::axes::AxesMapping = "NCHW,CHWK->NK".parse().unwrap();
    let einsum = tract_core::ops::einsum::EinSum::new(axes, f32::datum_type());
    let y = model.wire_node("fc", einsum, &[y, weights]).unwrap();
    model.select_output_outlets(&y).unwrap();
    let (tract, hush, swapped) = run_both(model.clone(), data);
    assert_eq!((swapped.dense, swapped.dense_layers), (2, 1), "{swapped:?}");
    if hush_tract_ops::channels_last::simd_lanes() >= 4 {
        assert!(swapped.channels_last, "{swapped:?}");
        let names = optimized_ops(model);
        let hush = |op: &str| names.iter().filter(|n| *n == op).count();
        assert_eq!(hush("HushDenseConvNhwc"), 2, "{names:?}");
        assert_eq!(hush("HushPointwiseNhwc"), 1, "{names:?}");
        assert!(!names.iter().any(|n| n.contains("Pool")), "{names:?}");
    }
    assert_eq!(tract.shape(), [1, 5]);
    assert_close(&tract, &hush, &first);
}

/// hush's buffer of a pulsed model ([`ContiguousDelay`]) against tract-pulse's (`Delay`):
/// a model of one `Delay` over input `shape` along `axis`: tract-pulse's op, or hush's.
fn delay_model(
    shape: &[usize],
    axis: usize,
    delay: usize,
    overlap: usize,
    hush: bool,
) -> TypedModel {
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
            let plan = delay_model(&shape, axis, delay, overlap, hush).into_runnable().unwrap();
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
        let (_, swapped) = optimize(delay_model(shape, axis, 1, 2, false)).unwrap();
        swapped.delays
    };
    assert_eq!(count(&[3, 4], 0), 1);
    assert_eq!(count(&[1, 3, 4], 1), 1);
    assert_eq!(count(&[2, 3, 4], 1), 0);
}
