//! One round of local training: SGD from the round's model on the local data, then the
//! delta clipped to the user-level bound.

use std::path::Path;

use burn::optim::SgdConfig;
use burn::tensor::Device;
use hush_models::arch::is_trainable;
use hush_models::checkpoint::NamedTensor;
use hush_models::dp::per_example::{
    apply_sgd, clipped_grad_sum, per_example_model, trainable_layout,
};
use hush_models::dp::{layer_norms, ClipBounds, ClipStrategy, GaussianNoise, NoiseSource};
use hush_models::package::{load_package_holding_rng, ModelCard};
use hush_models::step::{apply_grads, loss_and_grads, Batch};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::protocol::{
    encode_update, LayerDelta, TrainTask, Update, UpdateHeader, UPDATE_FORMAT_VERSION,
};

use super::{LocalData, TrainingError};

/// What a local round did.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalRoundReport {
    /// Local examples.
    pub examples: usize,
    /// SGD steps taken.
    pub steps: usize,
    /// Mean training loss over the steps.
    pub mean_loss: f32,
    /// Per-layer norms of the delta before clipping.
    pub norms_before: Vec<f32>,
    /// The user-level L2 bound the update was clipped to: `sqrt(Σ C_l²)` over the task's
    /// per-layer bounds (the one bound when flat), the sensitivity the host accounts.
    pub sensitivity: f64,
}

fn trainable(tensors: Vec<NamedTensor>) -> Vec<NamedTensor> {
    tensors
        .into_iter()
        .filter(|t| is_trainable(&t.name))
        .collect()
}

/// Trains from the model package in `package` on `data` as `task` says and returns the
/// clipped update for `device_id`. Local rounds in one process run one at a time (burn's
/// random state is per process).
pub fn local_update(
    package: &Path,
    data: &LocalData,
    task: &TrainTask,
    device_id: u64,
) -> Result<(Update, LocalRoundReport), TrainingError> {
    let local = &task.local;
    if local.epochs == 0 || local.batch_size == 0 || !(local.lr.is_finite() && local.lr > 0.0) {
        return Err(TrainingError::Unusable(format!(
            "round {}: local training needs epochs ≥ 1, batch size ≥ 1 and lr > 0 (got {}, {}, {})",
            task.round, local.epochs, local.batch_size, local.lr
        )));
    }
    // burn's backend RNG (dropout masks) is one per process: hold it from seeding to the
    // last step, so that rounds trained on several threads at once (the fleet simulator,
    // the demo) each draw exactly their own seed's stream and a seeded run repeats.
    let backend_rng = hush_models::rng::hold_backend_rng();
    let device = Device::flex().autodiff();
    let seed = local.seed ^ device_id.rotate_left(17);
    device.seed(seed);
    let (card, mut model) = load_package_holding_rng(package, &device, &backend_rng)?;
    let io = card.arch.io();
    if io.frames != data.frames || io.bins != data.bins {
        return Err(TrainingError::Unusable(format!(
            "{}: the model takes {}×{} features; the local data has {}×{}",
            package.display(),
            io.frames,
            io.bins,
            data.frames,
            data.bins
        )));
    }
    let before = trainable(model.named_tensors()?);
    let bounds = ClipBounds::per_layer(task.clip.layers.clone(), task.clip.bounds.clone())?;
    let names: Vec<&str> = before.iter().map(|t| t.name.as_str()).collect();
    if names
        .iter()
        .copied()
        .ne(task.clip.layers.iter().map(String::as_str))
    {
        return Err(TrainingError::Unusable(format!(
            "round {}: the task's clip layers do not match model v{}'s trainable tensors",
            task.round, task.model_version
        )));
    }

    let example_bounds = match local.example_clip {
        Some(c) => Some(ClipBounds::new(
            ClipStrategy::Flat,
            c,
            &trainable_layout(&model)?,
        )?),
        None => None,
    };
    if example_bounds.is_some() {
        // Per-example gradients need each example's output to be its own (batch norm on
        // stored statistics; see hush_models::dp::per_example).
        model = per_example_model(&model);
    }
    let per = data.frames * data.bins;
    let k = io.classes;
    let mut optimizer = SgdConfig::new().init();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..data.len()).collect();
    let (mut steps, mut loss_sum) = (0usize, 0f64);
    for _ in 0..local.epochs {
        order.shuffle(&mut rng);
        for chunk in order.chunks(local.batch_size as usize) {
            let mut features = Vec::with_capacity(chunk.len() * per);
            let mut targets = vec![0f32; chunk.len() * k];
            for (i, &j) in chunk.iter().enumerate() {
                features.extend_from_slice(&data.features[j * per..(j + 1) * per]);
                targets[i * k + data.classes[j]] = 1.0;
            }
            let batch = Batch {
                features,
                targets,
                batch: chunk.len(),
                frames: data.frames,
                bins: data.bins,
                classes: k,
            };
            match &example_bounds {
                // Per-example clipping: each example's gradient bounded, the mean of the
                // clipped gradients stepped (no noise here; the update is noised centrally).
                Some(eb) => {
                    let c = clipped_grad_sum(&model, &batch, eb, &device)?;
                    let scale = 1.0 / c.examples.max(1) as f32;
                    let mean: Vec<NamedTensor> = c
                        .sum
                        .into_iter()
                        .map(|mut t| {
                            t.data.iter_mut().for_each(|v| *v *= scale);
                            t
                        })
                        .collect();
                    model = apply_sgd(model, &mean, local.lr)?;
                    loss_sum += f64::from(c.loss_sum * scale);
                }
                None => {
                    let (loss, grads) = loss_and_grads(&model, &batch, &device)?;
                    model = apply_grads(&mut optimizer, f64::from(local.lr), model, grads);
                    loss_sum += f64::from(loss);
                }
            }
            steps += 1;
        }
    }

    let after = trainable(model.named_tensors()?);
    let mut delta: Vec<NamedTensor> = after
        .into_iter()
        .zip(&before)
        .map(|(mut a, b)| {
            a.data.iter_mut().zip(&b.data).for_each(|(x, y)| *x -= y);
            a
        })
        .collect();
    let norms_before = if task.clip.normalize_layers {
        bounds.normalize(&mut delta)?
    } else {
        bounds.clip(&mut delta)?
    };
    if task.clip.local_noise_std > 0.0 {
        let mut noise = NoiseSource::from_os();
        let local = GaussianNoise::new(f64::from(task.clip.local_noise_std))?;
        for t in delta.iter_mut() {
            local.add_to(&mut t.data, &mut noise);
        }
        // Noise can push a layer over its bound; clipping again is post-processing.
        bounds.clip(&mut delta)?;
    }
    let update = Update {
        header: update_header(task, device_id, layer_norms(&delta)),
        layers: delta
            .into_iter()
            .map(|t| LayerDelta {
                name: t.name,
                shape: t.shape.iter().map(|&d| d as u32).collect(),
                data: t.data,
            })
            .collect(),
    };
    let report = LocalRoundReport {
        examples: data.len(),
        steps,
        mean_loss: (loss_sum / steps.max(1) as f64) as f32,
        norms_before,
        sensitivity: bounds.sensitivity(),
    };
    Ok((update, report))
}

fn update_header(task: &TrainTask, device_id: u64, layer_norms: Vec<f32>) -> UpdateHeader {
    UpdateHeader {
        format_version: UPDATE_FORMAT_VERSION,
        model_version: task.model_version,
        round: task.round,
        device_id,
        idempotency_key: Update::key(task.round, device_id),
        layer_norms,
    }
}

/// The exact size in bytes of the encoded update [`local_update`] returns for the model
/// `card` describes, `task` and `device_id`, known before training: every layer's values
/// are a fixed-width byte string, and the header depends only on the task and the device.
/// Lets a caller size a buffer without training twice.
pub fn encoded_update_len(
    card: &ModelCard,
    task: &TrainTask,
    device_id: u64,
) -> Result<usize, TrainingError> {
    let layers: Vec<LayerDelta> = card
        .parameters
        .iter()
        .filter(|p| is_trainable(&p.name))
        .map(|p| LayerDelta {
            name: p.name.clone(),
            shape: p.shape.iter().map(|&d| d as u32).collect(),
            data: vec![0.0; p.shape.iter().product()],
        })
        .collect();
    let update = Update {
        header: update_header(task, device_id, vec![0.0; layers.len()]),
        layers,
    };
    let body = encode_update(&update).map_err(|e| TrainingError::Unusable(e.to_string()))?;
    Ok(body.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{LocalTraining, UpdateClip};
    use crate::training::LabelledClip;

    fn kws12() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/kws-12")
    }

    fn task(card: &ModelCard, local_noise_std: f32) -> TrainTask {
        TrainTask {
            round: 7,
            model_version: 3,
            deadline_ms: 0,
            local: LocalTraining {
                epochs: 1,
                batch_size: 2,
                lr: 0.01,
                example_clip: None,
                seed: 1,
            },
            clip: UpdateClip {
                bounds: vec![0.5],
                layers: card
                    .parameters
                    .iter()
                    .filter(|p| is_trainable(&p.name))
                    .map(|p| p.name.clone())
                    .collect(),
                normalize_layers: false,
                local_noise_std,
            },
        }
    }

    #[test]
    fn clips_as_samples_train_and_the_update_size_is_known_before_training() {
        let dir = kws12();
        let card = ModelCard::read(&dir).unwrap();
        let tone: Vec<f32> = (0..16_000).map(|i| (i as f32 * 0.05).sin() * 0.3).collect();
        let hiss: Vec<f32> = (0..12_000u32)
            .map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.1)
            .collect();
        let clips = [
            LabelledClip {
                samples: &tone,
                sample_rate: 16_000,
                label: "yes",
            },
            LabelledClip {
                samples: &hiss,
                sample_rate: 16_000,
                label: "hello",
            },
        ];
        let data = LocalData::from_clips(&card, &dir, &clips).unwrap();
        // "hello" is none of the model's labels: the last class, `_unknown_`.
        assert_eq!(data.classes, [0, card.labels.len() - 1]);
        for noise in [0.0, 0.01] {
            let task = task(&card, noise);
            let (update, report) = local_update(&dir, &data, &task, 42).unwrap();
            let body = encode_update(&update).unwrap();
            assert_eq!(body.len(), encoded_update_len(&card, &task, 42).unwrap());
            assert!((report.sensitivity - 0.5).abs() < 1e-9);
        }

        let slow = LabelledClip {
            sample_rate: 8_000,
            ..clips[0]
        };
        let e = LocalData::from_clips(&card, &dir, &[clips[0], slow]).unwrap_err();
        assert!(e.to_string().starts_with("<clip 1>: 8000 Hz"), "{e}");
        let e = LocalData::from_clips(&card, &dir, &[]).unwrap_err();
        assert!(e.to_string().contains("no labelled clips"), "{e}");
    }
}
