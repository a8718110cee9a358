//! One round of local training: SGD from the round's model on the local data
//! ([`hush_models::cohort`], for one device or a simulated cohort at once), then the delta
//! clipped to the user-level bound.

use std::path::Path;

use burn::tensor::Device;
use hush_models::arch::is_trainable;
use hush_models::checkpoint::NamedTensor;
use hush_models::cohort::{train_cohort, LocalExamples, LocalRecipe, LocalResult};
use hush_models::dp::{layer_norms, ClipBounds, GaussianNoise, NoiseSource};
use hush_models::package::{load_package, ModelCard};
use hush_models::ModelError;

pub use hush_models::cohort::CohortSplit;

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
/// clipped update for `device_id`: [`local_updates`] for a cohort of one.
pub fn local_update(
    package: &Path,
    data: &LocalData,
    task: &TrainTask,
    device_id: u64,
) -> Result<(Update, LocalRoundReport), TrainingError> {
    let mut out = local_updates(package, &[(data, task, device_id)], CohortSplit::default())?;
    out.pop()
        .ok_or_else(|| TrainingError::Unusable("no update trained".into()))
}

/// Trains several devices of one round from the model package in `package` together in one
/// batched model ([`hush_models::cohort`]: each equal to training alone) and returns each
/// one's clipped update, in order: `(data, task, device id)` per device, every task of the
/// same round and model version with the same local recipe (but its own seed); `split`
/// bounds the rows per batched step and sets the threads. Each device's seed is the
/// task's, keyed by its id.
pub fn local_updates(
    package: &Path,
    cohort: &[(&LocalData, &TrainTask, u64)],
    split: CohortSplit,
) -> Result<Vec<(Update, LocalRoundReport)>, TrainingError> {
    let Some((_, first, _)) = cohort.first() else {
        return Ok(Vec::new());
    };
    // Everything but the seed (each device's own) is the round's.
    let recipe_of = |t: &TrainTask| {
        let l = &t.local;
        (
            t.round,
            t.model_version,
            l.epochs,
            l.batch_size,
            l.lr,
            l.example_clip,
        )
    };
    if let Some((_, other, id)) = cohort
        .iter()
        .find(|(_, t, _)| recipe_of(t) != recipe_of(first))
    {
        return Err(TrainingError::Unusable(format!(
            "device {id}: round {} v{} is not the cohort's round {} v{} with the same recipe",
            other.round, other.model_version, first.round, first.model_version
        )));
    }
    let local = &first.local;
    let device = Device::flex().autodiff();
    let (card, model) = load_package(package, &device)?;
    let io = card.arch.io();
    if let Some((data, _, id)) = cohort
        .iter()
        .find(|(d, _, _)| (d.frames, d.bins) != (io.frames, io.bins))
    {
        return Err(TrainingError::Unusable(format!(
            "{}: the model takes {}×{} features; device {id}'s local data has {}×{}",
            package.display(),
            io.frames,
            io.bins,
            data.frames,
            data.bins
        )));
    }
    let before = trainable(model.named_tensors()?);
    let names: Vec<&str> = before.iter().map(|t| t.name.as_str()).collect();
    for (_, task, _) in cohort {
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
    }
    let recipe = LocalRecipe {
        epochs: local.epochs,
        batch_size: local.batch_size,
        lr: local.lr,
        example_clip: local.example_clip,
    };
    let members: Vec<LocalExamples<'_>> = cohort
        .iter()
        .map(|(data, task, id)| LocalExamples {
            features: &data.features,
            classes: &data.classes,
            seed: task.local.seed ^ id.rotate_left(17),
        })
        .collect();
    // A recipe or data the trainer cannot use is the task's or the data's fault.
    let trained =
        train_cohort(&model, io, &members, &recipe, split, &device).map_err(|e| match e {
            ModelError::BadBatch { reason } => {
                TrainingError::Unusable(format!("round {}: {reason}", first.round))
            }
            e => e.into(),
        })?;
    cohort
        .iter()
        .zip(trained)
        .map(|(&(data, task, id), t)| finish_update(task, id, data.len(), &before, t))
        .collect()
}

/// A device's trained tensors → its update: the delta from `before`, bounded
/// ([`bound_delta`]).
fn finish_update(
    task: &TrainTask,
    device_id: u64,
    examples: usize,
    before: &[NamedTensor],
    trained: LocalResult,
) -> Result<(Update, LocalRoundReport), TrainingError> {
    let mut delta: Vec<NamedTensor> = trained
        .trained
        .into_iter()
        .zip(before)
        .map(|(mut a, b)| {
            a.data.iter_mut().zip(&b.data).for_each(|(x, y)| *x -= y);
            a
        })
        .collect();
    let (norms_before, sensitivity) = bound_delta(task, &mut delta)?;
    let report = LocalRoundReport {
        examples,
        steps: trained.steps,
        mean_loss: trained.mean_loss,
        norms_before,
        sensitivity,
    };
    Ok((into_update(task, device_id, delta), report))
}

/// The update a device uploads for a delta it did not train (a privacy audit's canary
/// client, whose delta is a fixed direction): bounded exactly as a trained delta is.
pub fn given_update(
    task: &TrainTask,
    device_id: u64,
    mut delta: Vec<NamedTensor>,
) -> Result<Update, TrainingError> {
    bound_delta(task, &mut delta)?;
    Ok(into_update(task, device_id, delta))
}

/// Clips (or normalises) `delta` to the task's user-level bounds, then adds local noise if
/// the task asks for it; returns the layer norms before and the bounds' sensitivity.
fn bound_delta(
    task: &TrainTask,
    delta: &mut [NamedTensor],
) -> Result<(Vec<f32>, f64), TrainingError> {
    let bounds = ClipBounds::per_layer(task.clip.layers.clone(), task.clip.bounds.clone())?;
    let norms_before = if task.clip.normalize_layers {
        bounds.normalize(delta)?
    } else {
        bounds.clip(delta)?
    };
    if task.clip.local_noise_std > 0.0 {
        let mut noise = NoiseSource::from_os();
        let local = GaussianNoise::new(f64::from(task.clip.local_noise_std))?;
        for t in delta.iter_mut() {
            local.add_to(&mut t.data, &mut noise);
        }
        // Noise can push a layer over its bound; clipping again is post-processing.
        bounds.clip(delta)?;
    }
    Ok((norms_before, bounds.sensitivity()))
}

/// A bounded delta as the update a device uploads.
fn into_update(task: &TrainTask, device_id: u64, delta: Vec<NamedTensor>) -> Update {
    Update {
        header: update_header(task, device_id, layer_norms(&delta)),
        layers: delta
            .into_iter()
            .map(|t| LayerDelta {
                name: t.name,
                shape: t.shape.iter().map(|&d| d as u32).collect(),
                data: t.data,
            })
            .collect(),
    }
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
