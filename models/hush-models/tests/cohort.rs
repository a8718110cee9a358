//! Batched local training of a cohort (`hush_models::cohort`): every device's result equals
//! training it alone — for every architecture, with and without per-example clipping, with
//! dropout, with uneven local data, split into groups and threads — and a device alone
//! takes the step that burn's own batch gradient (and, clipped, the DP machinery's clipped
//! sum) gives.

// Test helpers panic on failure, like the tests that call them.
#![allow(clippy::unwrap_used)]

mod common;

use burn::tensor::Device;
use hush_models::arch::{is_trainable, ArchConfig, IoShape, KwsModel};
use hush_models::checkpoint::NamedTensor;
use hush_models::cohort::{train_cohort, CohortSplit, LocalExamples, LocalRecipe, LocalResult};
use hush_models::dp::{
    clipped_grad_sum, per_example_model, trainable_layout, ClipBounds, ClipStrategy,
};
use hush_models::step::{loss_and_grads, Batch};

const IO: IoShape = IoShape {
    frames: 16,
    bins: 10,
    classes: 4,
};

fn archs(dropout: f64) -> Vec<ArchConfig> {
    common::small_archs(IO, dropout)
}

/// Model `cfg`, every tensor from a seeded stream, on the autodiff `device`.
fn model(cfg: &ArchConfig, device: &Device) -> KwsModel {
    common::seeded_kws_on(cfg, 5, device)
}

/// `n` examples of features and classes from `seed`.
fn examples(n: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let mut rng = common::Rng(seed | 1);
    let features = rng.values(n * IO.frames * IO.bins, 2.0);
    let classes = (0..n)
        .map(|_| ((rng.next() + 1.0) * 2.0) as usize % IO.classes)
        .collect();
    (features, classes)
}

fn recipe(example_clip: Option<f32>) -> LocalRecipe {
    LocalRecipe {
        epochs: 2,
        batch_size: 3,
        lr: 0.1,
        example_clip,
    }
}

/// Largest difference between two devices' trained tensors, relative to their largest
/// value.
fn rel_diff(a: &LocalResult, b: &LocalResult) -> f32 {
    let (mut diff, mut scale) = (0f32, 0f32);
    for (x, y) in a.trained.iter().zip(&b.trained) {
        assert_eq!(x.name, y.name);
        for (u, v) in x.data.iter().zip(&y.data) {
            diff = diff.max((u - v).abs());
            scale = scale.max(u.abs());
        }
    }
    diff / scale.max(1e-6)
}

fn trainable(model: &KwsModel) -> Vec<NamedTensor> {
    model
        .named_tensors()
        .unwrap()
        .into_iter()
        .filter(|t| is_trainable(&t.name))
        .collect()
}

#[test]
fn a_cohort_trained_together_equals_each_device_alone() {
    let device = Device::flex().autodiff();
    // Uneven local data: more and fewer steps than the others, one device with nothing.
    let data: Vec<(Vec<f32>, Vec<usize>)> = [5, 3, 8, 1, 0, 4]
        .iter()
        .enumerate()
        .map(|(i, &n)| examples(n, 100 + i as u64))
        .collect();
    let members: Vec<LocalExamples<'_>> = data
        .iter()
        .enumerate()
        .map(|(i, (f, c))| LocalExamples {
            features: f,
            classes: c,
            seed: 7_000 + i as u64,
        })
        .collect();
    let one_batch = CohortSplit {
        max_rows: 1_000,
        threads: 1,
    };
    for cfg in archs(0.3) {
        let m = model(&cfg, &device);
        let before = trainable(&m);
        for clip in [None, Some(0.5)] {
            let r = recipe(clip);
            let together = train_cohort(&m, IO, &members, &r, one_batch, &device).unwrap();
            let split = CohortSplit {
                max_rows: 4,
                threads: 2,
            };
            let in_groups = train_cohort(&m, IO, &members, &r, split, &device).unwrap();
            assert_eq!(together.len(), members.len());
            for (i, member) in members.iter().enumerate() {
                let alone = train_cohort(&m, IO, &[*member], &r, one_batch, &device).unwrap();
                let what = format!("{} clip {clip:?} device {i}", cfg.name());
                assert!(
                    rel_diff(&alone[0], &together[i]) < 1e-5,
                    "{what}: together differs from alone by {}",
                    rel_diff(&alone[0], &together[i])
                );
                assert!(
                    rel_diff(&alone[0], &in_groups[i]) < 1e-5,
                    "{what}: groups and threads differ from alone"
                );
                assert_eq!(alone[0].steps, together[i].steps, "{what}");
                assert!((alone[0].mean_loss - together[i].mean_loss).abs() < 1e-4);
                let expected_steps = 2 * member.classes.len().div_ceil(3);
                assert_eq!(together[i].steps, expected_steps, "{what}");
                // Training moved every device with data, and only those.
                let moved = together[i]
                    .trained
                    .iter()
                    .zip(&before)
                    .any(|(a, b)| a.data != b.data);
                assert_eq!(moved, expected_steps > 0, "{what}");
            }
        }
    }
}

#[test]
fn each_device_draws_its_own_dropout_masks() {
    let device = Device::flex().autodiff();
    let (f, c) = examples(6, 3);
    let member = |seed| LocalExamples {
        features: &f,
        classes: &c,
        seed,
    };
    // One step over all six examples: the order does not matter, only the masks do.
    let r = LocalRecipe {
        epochs: 1,
        batch_size: 6,
        lr: 0.1,
        example_clip: None,
    };
    let split = CohortSplit::default();
    for cfg in archs(0.5) {
        if matches!(cfg, ArchConfig::BcResNet(_)) {
            continue; // no dropout
        }
        let m = model(&cfg, &device);
        let out = train_cohort(
            &m,
            IO,
            &[member(1), member(2), member(1)],
            &r,
            split,
            &device,
        )
        .unwrap();
        assert_eq!(out[0], out[2], "{}: same seed, same masks", cfg.name());
        assert!(
            rel_diff(&out[0], &out[1]) > 1e-4,
            "{}: another seed must draw other masks",
            cfg.name()
        );
    }
}

/// A device alone, one step over its whole batch: burn's own gradient of the batch-mean
/// loss (batch norms on stored statistics, no dropout) and, with an example clip, the DP
/// machinery's clipped sum divided by the batch.
#[test]
fn a_device_alone_steps_as_the_batch_gradient_and_the_clipped_mean() {
    let device = Device::flex().autodiff();
    let (f, c) = examples(5, 42);
    let member = LocalExamples {
        features: &f,
        classes: &c,
        seed: 9,
    };
    let mut targets = vec![0f32; c.len() * IO.classes];
    for (i, &k) in c.iter().enumerate() {
        targets[i * IO.classes + k] = 1.0;
    }
    let batch = Batch {
        features: f.clone(),
        targets,
        batch: c.len(),
        frames: IO.frames,
        bins: IO.bins,
        classes: IO.classes,
    };
    let lr = 0.1f32;
    for cfg in archs(0.0) {
        let m = model(&cfg, &device);
        let dp_form = per_example_model(&m);
        let before = trainable(&m);
        for clip in [None, Some(0.3)] {
            let r = LocalRecipe {
                epochs: 1,
                batch_size: 5,
                lr,
                example_clip: clip,
            };
            let got =
                &train_cohort(&m, IO, &[member], &r, CohortSplit::default(), &device).unwrap()[0];
            let grads: Vec<NamedTensor> = match clip {
                None => {
                    let (_, g) = loss_and_grads(&dp_form, &batch, &device).unwrap();
                    dp_form.named_grads(&g).unwrap()
                }
                Some(bound) => {
                    let layout = trainable_layout(&dp_form).unwrap();
                    let bounds = ClipBounds::new(ClipStrategy::Flat, bound, &layout).unwrap();
                    let s = clipped_grad_sum(&dp_form, &batch, &bounds, &device).unwrap();
                    assert!(s.clipped > 0, "{}: the bound must bite", cfg.name());
                    s.sum
                        .into_iter()
                        .map(|mut t| {
                            t.data.iter_mut().for_each(|v| *v /= c.len() as f32);
                            t
                        })
                        .collect()
                }
            };
            let want = LocalResult {
                trained: before
                    .iter()
                    .map(|b| {
                        let g = grads.iter().find(|g| g.name == b.name).unwrap();
                        let mut t = b.clone();
                        t.data
                            .iter_mut()
                            .zip(&g.data)
                            .for_each(|(w, g)| *w -= lr * g);
                        t
                    })
                    .collect(),
                steps: 1,
                mean_loss: got.mean_loss,
            };
            assert!(
                rel_diff(&want, got) < 1e-5,
                "{} clip {clip:?}: {} off the reference step",
                cfg.name(),
                rel_diff(&want, got)
            );
        }
    }
}

#[test]
fn unusable_local_data_is_refused_with_the_reason() {
    let device = Device::flex().autodiff();
    let m = model(&archs(0.0)[0], &device);
    let (f, c) = examples(2, 1);
    let split = CohortSplit::default();
    let short = LocalExamples {
        features: &f[..10],
        classes: &c,
        seed: 0,
    };
    let e = train_cohort(&m, IO, &[short], &recipe(None), split, &device).unwrap_err();
    assert!(e.to_string().contains("feature values"), "{e}");
    let bad_class = [9usize, 0];
    let wrong = LocalExamples {
        features: &f,
        classes: &bad_class,
        seed: 0,
    };
    let e = train_cohort(&m, IO, &[wrong], &recipe(None), split, &device).unwrap_err();
    assert!(e.to_string().contains("class 9"), "{e}");
    let no_lr = LocalRecipe {
        lr: 0.0,
        ..recipe(None)
    };
    let ok = LocalExamples {
        features: &f,
        classes: &c,
        seed: 0,
    };
    let e = train_cohort(&m, IO, &[ok], &no_lr, split, &device).unwrap_err();
    assert!(e.to_string().contains("lr > 0"), "{e}");
}
