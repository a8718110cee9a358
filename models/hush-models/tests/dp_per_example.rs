//! Per-example gradients for every architecture: both fast paths (weight copies, and
//! activations with output gradients) equal the per-example loop, their mean equals the batch gradient, memory-aware physical batches
//! add up to one big batch, clipped norms stay within their bounds, names match
//! `named_tensors()`, and named gradients go back into burn losslessly.
//!
//! Comparability with the batch gradient: batch norms run on stored statistics
//! (`per_example_model`, what DP training uses; the statistics are first moved off their
//! initial values by one training-mode forward so the check is not trivial) and dropout is
//! configured to 0. Then the batch-mean loss's gradient is exactly the mean of the
//! per-example gradients, up to float rounding.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use burn::tensor::{Device, Tensor, TensorData};
use hush_models::arch::{is_trainable, ArchConfig, IoShape, KwsModel};
use hush_models::checkpoint::NamedTensor;
use hush_models::dp::vectorized::PerExampleWeights;
use hush_models::dp::{
    apply_sgd, clipped_grad_sum, clipped_grad_sum_with, l2_norm, layer_norms, per_example_grads,
    per_example_grads_vectorized, per_example_grads_with, per_example_model, trainable_layout,
    Bounding, ClipBounds, ClipStrategy, PerExampleConfig, PerExampleMethod,
};
use hush_models::step::{loss_and_grads, Batch};

const IO: IoShape = IoShape {
    frames: 20,
    bins: 12,
    classes: 4,
};

fn archs() -> Vec<ArchConfig> {
    common::small_archs(IO, 0.0)
}

fn lcg(state: &mut u64) -> f32 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn batch(b: usize, seed: u64) -> Batch {
    let mut s = seed;
    let features = (0..b * IO.frames * IO.bins)
        .map(|_| 2.0 * lcg(&mut s))
        .collect();
    let mut targets = Vec::new();
    for _ in 0..b {
        // Soft targets (like label smoothing or mixup), each row summing to 1.
        let row: Vec<f32> = (0..IO.classes).map(|_| lcg(&mut s).abs() + 0.05).collect();
        let total: f32 = row.iter().sum();
        targets.extend(row.iter().map(|v| v / total));
    }
    Batch {
        features,
        targets,
        batch: b,
        frames: IO.frames,
        bins: IO.bins,
        classes: IO.classes,
    }
}

fn model(cfg: &ArchConfig, device: &Device) -> KwsModel {
    device.seed(11);
    let m = cfg.init(device).unwrap();
    // One training-mode forward moves the batch-norm running statistics off 0/1.
    let b = batch(8, 99);
    let x = Tensor::<3>::from_data(
        TensorData::new(b.features.clone(), [b.batch, b.frames, b.bins]),
        device,
    );
    let _ = m.forward(x.mul_scalar(3.0).add_scalar(0.5));
    m
}

fn max_abs_diff(a: &[NamedTensor], b: &[NamedTensor]) -> (f32, f32) {
    let mut diff = 0f32;
    let mut scale = 0f32;
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.name, y.name);
        assert_eq!(x.shape, y.shape);
        for (u, v) in x.data.iter().zip(&y.data) {
            diff = diff.max((u - v).abs());
            scale = scale.max(u.abs());
        }
    }
    (diff, scale)
}

#[test]
fn mean_of_per_example_grads_is_the_batch_gradient_for_every_arch() {
    let device = Device::flex().autodiff();
    for cfg in archs() {
        let m = model(&cfg, &device);
        let b = batch(5, 7);
        let per = per_example_grads(&m, &b, &device).unwrap();
        assert_eq!(per.len(), 5);
        let (_, grads) = loss_and_grads(&per_example_model(&m), &b, &device).unwrap();
        let whole = m.named_grads(&grads).unwrap();
        let mut mean = per[0].clone();
        for t in &mut mean {
            t.data.iter_mut().for_each(|v| *v = 0.0);
        }
        for g in &per {
            for (m, t) in mean.iter_mut().zip(g) {
                m.data
                    .iter_mut()
                    .zip(&t.data)
                    .for_each(|(m, v)| *m += v / 5.0);
            }
        }
        let (diff, scale) = max_abs_diff(&whole, &mean);
        eprintln!(
            "{}: max |batch − mean per-example| = {diff:e} (largest gradient value {scale:e})",
            cfg.name()
        );
        assert!(diff <= 1e-5, "{}: {diff}", cfg.name());
        assert!(scale > 1e-3, "{}: gradients are all ~0", cfg.name());
        // Examples differ: the per-example gradients are not all the same.
        let (d01, _) = max_abs_diff(&per[0], &per[1]);
        assert!(d01 > 1e-4, "{}", cfg.name());
    }
}

#[test]
fn grad_names_match_the_trainable_named_tensors() {
    let device = Device::flex().autodiff();
    for cfg in archs() {
        let m = model(&cfg, &device);
        let per = per_example_grads(&m, &batch(2, 3), &device).unwrap();
        let want: Vec<(String, Vec<usize>)> = m
            .named_tensors()
            .unwrap()
            .into_iter()
            .filter(|t| is_trainable(&t.name))
            .map(|t| (t.name, t.shape))
            .collect();
        for g in &per {
            let got: Vec<(String, Vec<usize>)> = g
                .iter()
                .map(|t| (t.name.clone(), t.shape.clone()))
                .collect();
            assert_eq!(got, want, "{}", cfg.name());
        }
        let layout = trainable_layout(&m).unwrap();
        assert_eq!(layout.len(), want.len());
        assert_eq!(
            layout.iter().map(|(_, d)| d).sum::<usize>(),
            m.num_trainable().unwrap()
        );
    }
}

#[test]
fn clipped_per_example_norms_never_exceed_their_bounds() {
    let device = Device::flex().autodiff();
    for cfg in archs() {
        let m = model(&cfg, &device);
        let b = batch(4, 21);
        let per = per_example_grads(&m, &b, &device).unwrap();
        let layout = trainable_layout(&m).unwrap();
        for strategy in [
            ClipStrategy::Flat,
            ClipStrategy::PerLayerUniform,
            ClipStrategy::PerLayerDim,
        ] {
            // A bound well below the gradients' norms, so clipping really happens.
            let bounds = ClipBounds::new(strategy, 1e-3, &layout).unwrap();
            let mut manual: Option<Vec<NamedTensor>> = None;
            for g in &per {
                let mut g = g.clone();
                bounds.clip(&mut g).unwrap();
                let norms = layer_norms(&g);
                if bounds.is_flat() {
                    assert!(l2_norm(&norms) <= bounds.bounds()[0]);
                } else {
                    for (n, b) in norms.iter().zip(bounds.bounds()) {
                        assert!(n <= b, "{}: {n} > {b}", cfg.name());
                    }
                }
                bounds.check(&g, 0.0).unwrap();
                manual = Some(match manual {
                    None => g,
                    Some(mut s) => {
                        for (s, t) in s.iter_mut().zip(&g) {
                            s.data.iter_mut().zip(&t.data).for_each(|(s, v)| *s += v);
                        }
                        s
                    }
                });
            }
            let sum = clipped_grad_sum(&m, &b, &bounds, &device).unwrap();
            assert_eq!(sum.examples, 4);
            assert_eq!(sum.clipped, 4, "{} {strategy}", cfg.name());
            let (diff, _) = max_abs_diff(&sum.sum, &manual.unwrap());
            assert!(diff <= 1e-7, "{} {strategy}: {diff}", cfg.name());
            // The sum of n clipped contributions is within n × sensitivity.
            let total = l2_norm(&layer_norms(&sum.sum));
            assert!(f64::from(total) <= 4.0 * bounds.sensitivity() * (1.0 + 1e-5));
        }
    }
}

#[test]
fn normalized_layers_hit_their_bounds_and_frozen_layers_are_left_out() {
    let device = Device::flex().autodiff();
    let cfg = &archs()[2];
    let m = model(cfg, &device);
    let b = batch(1, 5);
    // Freeze the convs: bounds over the FC layers only.
    let layout: Vec<(String, usize)> = trainable_layout(&m)
        .unwrap()
        .into_iter()
        .filter(|(n, _)| n.starts_with("fc"))
        .collect();
    let bounds = ClipBounds::new(ClipStrategy::PerLayerUniform, 2.0, &layout).unwrap();
    for per in [PerExampleConfig::default(), PerExampleConfig::looped()] {
        let s = clipped_grad_sum_with(&m, &b, &bounds, Bounding::Normalize, &per, &device).unwrap();
        let names: Vec<&str> = s.sum.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
        for (n, b) in layer_norms(&s.sum).iter().zip(bounds.bounds()) {
            assert!((n - b).abs() < 1e-4 * b, "{n} vs {b}");
        }
    }
}

#[test]
fn empty_batch_sums_to_zeros() {
    let device = Device::flex().autodiff();
    let cfg = &archs()[0];
    let m = model(cfg, &device);
    let layout = trainable_layout(&m).unwrap();
    let bounds = ClipBounds::new(ClipStrategy::Flat, 1.0, &layout).unwrap();
    let empty = Batch {
        features: vec![],
        targets: vec![],
        batch: 0,
        ..batch(1, 0)
    };
    let s = clipped_grad_sum(&m, &empty, &bounds, &device).unwrap();
    assert_eq!(s.examples, 0);
    assert_eq!(s.sum.len(), layout.len());
    assert!(s.sum.iter().all(|t| t.data.iter().all(|v| *v == 0.0)));
}

#[test]
fn named_grads_go_back_into_burn_and_sgd_applies_them() {
    let device = Device::flex().autodiff();
    for cfg in archs() {
        let m = model(&cfg, &device);
        let (_, grads) = loss_and_grads(&per_example_model(&m), &batch(3, 8), &device).unwrap();
        let named = m.named_grads(&grads).unwrap();
        let back = m.grads_params(&named).unwrap();
        assert_eq!(m.named_grads(&back).unwrap(), named);
        // Unknown names are refused.
        let mut bad = named.clone();
        bad[0].name = "nope.weight".into();
        assert!(m.grads_params(&bad).is_err());
        // SGD: w ← w − lr·g on the given tensors only (the first is left out).
        let before = m.named_tensors().unwrap();
        let lr = 0.5;
        let after = apply_sgd(m, &named[1..], lr)
            .unwrap()
            .named_tensors()
            .unwrap();
        let mut changed = 0;
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(b.name, a.name);
            match named[1..].iter().find(|g| g.name == b.name) {
                Some(g) => {
                    for ((w0, w1), g) in b.data.iter().zip(&a.data).zip(&g.data) {
                        assert!((w0 - lr * g - w1).abs() <= 1e-6, "{}", b.name);
                    }
                    changed += 1;
                }
                None => assert_eq!(b.data, a.data, "{} changed", b.name),
            }
        }
        assert_eq!(changed, named.len() - 1);
    }
}

/// Per-example gradients from activations, in one physical batch.
fn activations() -> PerExampleConfig {
    PerExampleConfig {
        method: PerExampleMethod::Activations,
        max_grad_memory: usize::MAX,
        threads: 1,
    }
}

#[test]
fn fast_per_example_grads_equal_the_loop_for_every_arch() {
    let device = Device::flex().autodiff();
    for cfg in archs() {
        let m = model(&cfg, &device);
        let b = batch(6, 17);
        let looped = per_example_grads(&m, &b, &device).unwrap();
        for (method, fast) in [
            (
                "vectorised",
                per_example_grads_vectorized(&m, &b, &device).unwrap(),
            ),
            (
                "activations",
                per_example_grads_with(&m, &b, &activations(), &device).unwrap(),
            ),
        ] {
            assert_eq!(fast.len(), looped.len());
            let mut worst = (0f32, 0f32);
            for (f, l) in fast.iter().zip(&looped) {
                let (diff, scale) = max_abs_diff(l, f);
                worst = (worst.0.max(diff), worst.1.max(scale));
            }
            eprintln!(
                "{}: max |{method} − loop| = {:e} (largest gradient value {:e})",
                cfg.name(),
                worst.0,
                worst.1
            );
            assert!(worst.0 <= 1e-5, "{} {method}: {}", cfg.name(), worst.0);
            assert!(worst.1 > 1e-3, "{}: gradients are all ~0", cfg.name());
        }
    }
}

/// The clipped sum from activations (linear weights never materialised) equals the
/// loop's, for flat and per-layer bounds, clipping and normalising, with and without
/// frozen layers.
#[test]
fn clipped_sum_from_activations_equals_the_loop() {
    let device = Device::flex().autodiff();
    for cfg in archs() {
        let m = model(&cfg, &device);
        let b = batch(7, 29);
        let layout = trainable_layout(&m).unwrap();
        for (strategy, bounding, frozen) in [
            (ClipStrategy::Flat, Bounding::Clip, 0),
            (ClipStrategy::PerLayerDim, Bounding::Clip, 0),
            (ClipStrategy::PerLayerDim, Bounding::Normalize, 0),
            (ClipStrategy::Flat, Bounding::Clip, 2),
        ] {
            let bounds = ClipBounds::new(strategy, 0.5, &layout[frozen..]).unwrap();
            let want = clipped_grad_sum_with(
                &m,
                &b,
                &bounds,
                bounding,
                &PerExampleConfig::looped(),
                &device,
            )
            .unwrap();
            let got =
                clipped_grad_sum_with(&m, &b, &bounds, bounding, &activations(), &device).unwrap();
            let what = format!("{} {strategy} {bounding:?} frozen {frozen}", cfg.name());
            assert_eq!(got.examples, 7, "{what}");
            assert_eq!(got.clipped, want.clipped, "{what}");
            assert!(want.clipped > 0, "{what}: the bound clips nothing");
            let (diff, scale) = max_abs_diff(&want.sum, &got.sum);
            assert!(diff <= 1e-5 * scale.max(1.0), "{what}: {diff}");
        }
    }
}

#[test]
fn memory_aware_physical_batches_add_up_to_one_big_batch() {
    let device = Device::flex().autodiff();
    for cfg in archs() {
        let m = model(&cfg, &device);
        let b = batch(7, 23);
        let layout = trainable_layout(&m).unwrap();
        let numel: usize = layout.iter().map(|(_, d)| d).sum();
        // A bound that clips some examples and not others.
        let bounds = ClipBounds::new(ClipStrategy::PerLayerDim, 0.5, &layout).unwrap();
        let big = PerExampleConfig {
            method: PerExampleMethod::Vectorized,
            max_grad_memory: usize::MAX,
            threads: 1,
        };
        // Room for 3 examples' copies and gradients: physical batches of 3, 3, 1.
        let small = PerExampleConfig {
            max_grad_memory: PerExampleWeights::bytes(3, numel),
            ..big
        };
        assert_eq!(small.physical_batch(numel), 3);
        // Room for none: the loop runs.
        let none = PerExampleConfig {
            max_grad_memory: PerExampleWeights::bytes(1, numel) - 1,
            ..big
        };
        assert_eq!(none.physical_batch(numel), 0);
        let one = clipped_grad_sum_with(&m, &b, &bounds, Bounding::Clip, &big, &device).unwrap();
        assert_eq!(one.examples, 7);
        // The same sums with the physical batches shared over threads (2 and 3 threads:
        // runs of 4 + 3 and 3 + 3 + 1 examples; the loop's 7 single examples as 4 + 3).
        let threaded = [
            PerExampleConfig { threads: 2, ..big },
            PerExampleConfig {
                threads: 3,
                ..small
            },
            PerExampleConfig {
                threads: 2,
                ..PerExampleConfig::looped()
            },
            PerExampleConfig {
                method: PerExampleMethod::Activations,
                threads: 2,
                ..big
            },
        ];
        for per in [small, none, PerExampleConfig::looped()]
            .into_iter()
            .chain(threaded)
        {
            let acc =
                clipped_grad_sum_with(&m, &b, &bounds, Bounding::Clip, &per, &device).unwrap();
            assert_eq!(acc.examples, one.examples, "{}", cfg.name());
            assert_eq!(acc.clipped, one.clipped, "{}", cfg.name());
            let (diff, scale) = max_abs_diff(&one.sum, &acc.sum);
            assert!(
                diff <= 1e-5 * scale.max(1.0),
                "{} {per:?}: {diff}",
                cfg.name()
            );
            assert!((acc.loss_sum - one.loss_sum).abs() <= 1e-4 * one.loss_sum.abs());
        }
        let zero = PerExampleConfig { threads: 0, ..big };
        let err = clipped_grad_sum_with(&m, &b, &bounds, Bounding::Clip, &zero, &device)
            .unwrap_err()
            .to_string();
        assert!(err.contains("threads"), "{err}");
        // The per-example gradients themselves, split into physical batches.
        let split = per_example_grads_with(&m, &b, &small, &device).unwrap();
        let whole = per_example_grads_vectorized(&m, &b, &device).unwrap();
        for (s, w) in split.iter().zip(&whole) {
            assert!(max_abs_diff(w, s).0 <= 1e-6, "{}", cfg.name());
        }
    }
}
