//! Local training of a cohort: many devices' local rounds trained together in one batched
//! model, each device's result equal to training it alone.
//!
//! This is the one local-training loop of a federated round: a device (`hush-device`)
//! runs it for itself, a cohort of one; the simulator runs it for a whole cohort at once.
//!
//! Every device starts from the same model and keeps its own copy of the trainable
//! tensors: per tensor one `[D, numel]` matrix, row `d` device `d`'s. A step stacks each
//! device's next local batch into one batch of `R` rows and runs the model once over it
//! with the per-example weight machinery of [`crate::dp::vectorized`]: row `r` is computed
//! with the weights of the device it belongs to (rows gathered from the device matrix, so
//! the backward sums each device's gradient into its own row). Devices with fewer local
//! steps drop out of later steps; their rows stay as they are.
//!
//! What a device trains with, alone or in a cohort:
//! - batch norms normalise with their **stored statistics** ([`crate::dp::per_example`]'s
//!   semantics): no example's output depends on another's, and, since the statistics are
//!   not trained in federated rounds, the model trained is the model evaluated;
//! - **dropout** masks come from each device's own stream, seeded from its seed, never from
//!   the backend's shared random state, so a device's masks do not depend on who else is
//!   in the batch (or on other threads);
//! - plain SGD on the local batch's mean loss; with an example clip, each example's
//!   gradient clipped (flat, [`ClipBounds::factors`]) and the mean of the clipped
//!   gradients stepped (an example with a non-finite gradient counts as zero).
//!
//! Equal to one device at a time within float rounding (sums over a larger batch are
//! ordered differently): `tests/cohort.rs` checks 1e-5 on every architecture.

use std::cell::RefCell;
use std::collections::HashMap;

use burn::module::Module;
use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Dropout, Linear};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::arch::layers::{named, LayerRunner};
use crate::arch::{IoShape, KwsModel};
use crate::checkpoint::NamedTensor;
use crate::dp::per_example::{per_example_model, trainable_layout};
use crate::dp::vectorized::PerExampleWeights;
use crate::dp::{ClipBounds, ClipStrategy};
use crate::ModelError;

/// Keys a device's dropout stream apart from its shuffle stream (same seed).
const DROPOUT_STREAM: u64 = 0xD7_0F_0F_5E_ED;

/// How every device of a round trains locally.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalRecipe {
    /// Passes over the local data.
    pub epochs: u32,
    /// Examples per local step.
    pub batch_size: u32,
    /// SGD learning rate.
    pub lr: f32,
    /// Per-example gradient bound (flat, over all trainable tensors); `None`: none.
    pub example_clip: Option<f32>,
}

/// One device's local examples.
#[derive(Debug, Clone, Copy)]
pub struct LocalExamples<'a> {
    /// `examples × frames × bins` features, row-major.
    pub features: &'a [f32],
    /// Class index of each example.
    pub classes: &'a [usize],
    /// The device's seed: its shuffle order and dropout masks.
    pub seed: u64,
}

impl LocalExamples<'_> {
    fn len(&self) -> usize {
        self.classes.len()
    }
}

/// What one device's local training gave.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalResult {
    /// The trainable tensors after training, named and in order as
    /// [`KwsModel::named_tensors`] lists them.
    pub trained: Vec<NamedTensor>,
    /// SGD steps taken.
    pub steps: usize,
    /// Mean over the steps of the local batch's mean loss.
    pub mean_loss: f32,
}

/// How a cohort is split for training: devices are batched in groups of at most
/// `max_rows` rows per step (at least one device per group), groups run on `threads`
/// threads. Neither changes any result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CohortSplit {
    /// Examples per batched step, summed over the group's devices (memory: activations
    /// grow with it).
    pub max_rows: usize,
    /// Threads, each on its own fork of the model.
    pub threads: usize,
}

impl CohortSplit {
    /// 16 rows (one or two devices per group at the usual local batch sizes), one thread.
    /// On burn's CPU backend small groups are fastest: a step's activations stay in cache
    /// (BENCHMARKS.md, "Population scale").
    pub const DEFAULT: Self = Self {
        max_rows: 16,
        threads: 1,
    };
}

impl Default for CohortSplit {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Trains every member from `model` (its architecture's input and output shape `io`, on
/// an autodiff `device`) as `recipe` says; results in member order.
pub fn train_cohort(
    model: &KwsModel,
    io: IoShape,
    members: &[LocalExamples<'_>],
    recipe: &LocalRecipe,
    split: CohortSplit,
    device: &Device,
) -> Result<Vec<LocalResult>, ModelError> {
    check(io, members, recipe)?;
    let model = per_example_model(model);
    let step_rows = |m: &LocalExamples<'_>| m.len().min(recipe.batch_size as usize).max(1);
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    let mut start = 0;
    let mut rows = 0;
    for (i, m) in members.iter().enumerate() {
        if i > start && rows + step_rows(m) > split.max_rows.max(1) {
            groups.push(start..i);
            (start, rows) = (i, 0);
        }
        rows += step_rows(m);
    }
    if start < members.len() {
        groups.push(start..members.len());
    }
    let threads = split.threads.clamp(1, groups.len().max(1));
    if threads == 1 {
        let mut out = Vec::with_capacity(members.len());
        for g in groups {
            out.extend(train_group(&model, io, &members[g], recipe, device)?);
        }
        return Ok(out);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done: std::sync::Mutex<Vec<Option<Vec<LocalResult>>>> =
        std::sync::Mutex::new(vec![None; groups.len()]);
    let (groups, model, next_ref, done_ref) = (&groups, &model, &next, &done);
    std::thread::scope(|s| -> Result<(), ModelError> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || -> Result<(), ModelError> {
                    // A fork: fresh parameter leaves, so the threads' graphs share nothing.
                    let model = model.clone().fork(device);
                    loop {
                        let g = next_ref.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(range) = groups.get(g) else {
                            return Ok(());
                        };
                        let r = train_group(&model, io, &members[range.clone()], recipe, device)?;
                        done_ref.lock().map_err(|_| poisoned())?[g] = Some(r);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| ModelError::BadBatch {
                reason: "a cohort training thread panicked".into(),
            })??;
        }
        Ok(())
    })?;
    let done = done.into_inner().map_err(|_| poisoned())?;
    Ok(done.into_iter().flatten().flatten().collect())
}

fn poisoned() -> ModelError {
    ModelError::BadBatch {
        reason: "a cohort training thread failed while holding the results".into(),
    }
}

fn check(
    io: IoShape,
    members: &[LocalExamples<'_>],
    recipe: &LocalRecipe,
) -> Result<(), ModelError> {
    let (frames, bins) = (io.frames, io.bins);
    let bad = |reason: String| Err(ModelError::BadBatch { reason });
    if recipe.epochs == 0 || recipe.batch_size == 0 || !(recipe.lr.is_finite() && recipe.lr > 0.0) {
        return bad(format!(
            "local training needs epochs ≥ 1, batch size ≥ 1 and lr > 0 (got {}, {}, {})",
            recipe.epochs, recipe.batch_size, recipe.lr
        ));
    }
    for (i, m) in members.iter().enumerate() {
        if m.features.len() != m.len() * frames * bins {
            return bad(format!(
                "device {i}: {} feature values for {} examples of {frames}×{bins}",
                m.features.len(),
                m.len()
            ));
        }
        if let Some(c) = m.classes.iter().find(|&&c| c >= io.classes) {
            return bad(format!(
                "device {i}: class {c} of a model with {} classes",
                io.classes
            ));
        }
    }
    Ok(())
}

/// One device's place in a group: its steps' example indices and its dropout stream.
struct Schedule {
    steps: Vec<Vec<usize>>,
    dropout: ChaCha8Rng,
    loss_sum: f64,
}

impl Schedule {
    /// The shuffle a device draws from `seed`: each epoch a fresh permutation, cut into
    /// batches of `batch`.
    fn new(examples: usize, recipe: &LocalRecipe, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut order: Vec<usize> = (0..examples).collect();
        let mut steps = Vec::new();
        for _ in 0..recipe.epochs {
            order.shuffle(&mut rng);
            steps.extend(
                order
                    .chunks(recipe.batch_size as usize)
                    .map(<[usize]>::to_vec),
            );
        }
        Self {
            steps,
            dropout: ChaCha8Rng::seed_from_u64(seed ^ DROPOUT_STREAM),
            loss_sum: 0.0,
        }
    }
}

/// The per-row weights of one batched step, with each device's own dropout masks.
struct CohortRunner<'a> {
    weights: PerExampleWeights,
    /// The device (index into `streams`) of each row.
    row_device: &'a [usize],
    streams: RefCell<Vec<&'a mut ChaCha8Rng>>,
}

impl LayerRunner for CohortRunner<'_> {
    fn conv(&self, c: &Conv2d, x: Tensor<4>) -> Tensor<4> {
        self.weights.conv(c, x)
    }
    fn batch_norm(&self, b: &BatchNorm, x: Tensor<4>) -> Tensor<4> {
        self.weights.batch_norm(b, x)
    }
    fn linear(&self, l: &Linear, x: Tensor<2>) -> Tensor<2> {
        self.weights.linear(l, x)
    }
    /// Inverted dropout, row `r`'s mask drawn from its device's stream, rows in order.
    fn dropout(&self, d: &Dropout, x: Tensor<2>) -> Tensor<2> {
        if d.prob == 0.0 || !d.training.is_enabled() {
            return x;
        }
        let [rows, width] = x.dims();
        let keep = 1.0 / (1.0 - d.prob) as f32;
        let mut mask = Vec::with_capacity(rows * width);
        let mut streams = self.streams.borrow_mut();
        for &dev in self.row_device {
            let rng = &mut streams[dev];
            mask.extend((0..width).map(|_| {
                if rng.random::<f64>() < d.prob {
                    0.0
                } else {
                    keep
                }
            }));
        }
        let device = x.device();
        x * Tensor::<2>::from_data(TensorData::new(mask, [rows, width]), &device)
    }
}

/// [`train_cohort`] for one group, batched in one model.
fn train_group(
    model: &KwsModel,
    io: IoShape,
    members: &[LocalExamples<'_>],
    recipe: &LocalRecipe,
    device: &Device,
) -> Result<Vec<LocalResult>, ModelError> {
    let (frames, bins) = (io.frames, io.bins);
    let per = frames * bins;
    let classes = io.classes;
    let inner = device.clone().inner();
    let layout = trainable_layout(model)?;
    let initial: Vec<NamedTensor> = model
        .named_tensors()?
        .into_iter()
        .filter(|t| layout.iter().any(|(n, _)| *n == t.name))
        .collect();
    let d_count = members.len();
    // Per trainable tensor, every device's copy: `[D, numel]` on the inner device.
    let mut state: Vec<Tensor<2>> = initial
        .iter()
        .map(|t| {
            let n = t.data.len();
            Tensor::<2>::from_data(
                TensorData::new(t.data.repeat(d_count), [d_count, n]),
                &inner,
            )
        })
        .collect();
    let example_bounds = match recipe.example_clip {
        Some(c) => Some(
            ClipBounds::new(ClipStrategy::Flat, c, &layout).map_err(|e| ModelError::BadBatch {
                reason: format!("local example clip: {e}"),
            })?,
        ),
        None => None,
    };
    let mut schedules: Vec<Schedule> = members
        .iter()
        .map(|m| Schedule::new(m.len(), recipe, m.seed))
        .collect();
    let total_steps = schedules.iter().map(|s| s.steps.len()).max().unwrap_or(0);
    for step in 0..total_steps {
        // This step's rows: each device still training, its batch in order.
        let mut features = Vec::new();
        let mut targets = Vec::new();
        let mut row_device = Vec::new();
        for (d, (m, s)) in members.iter().zip(&schedules).enumerate() {
            let Some(batch) = s.steps.get(step) else {
                continue;
            };
            for &j in batch {
                features.extend_from_slice(&m.features[j * per..(j + 1) * per]);
                let mut t = vec![0f32; classes];
                t[m.classes[j]] = 1.0;
                targets.extend(t);
                row_device.push(d);
            }
        }
        let rows = row_device.len();
        let x = Tensor::<3>::from_data(TensorData::new(features, [rows, frames, bins]), device);
        let y = Tensor::<2>::from_data(TensorData::new(targets, [rows, classes]), device);
        let index: Vec<i64> = row_device.iter().map(|&d| d as i64).collect();
        let index = Tensor::<1, Int>::from_data(TensorData::new(index, [rows]), &inner);
        // Each row's share of its device's mean loss.
        let share: Vec<f32> = row_device
            .iter()
            .map(|&d| 1.0 / schedules[d].steps[step].len() as f32)
            .collect();

        // Per-device leaves (no example clip: each device's gradient is its rows' sum);
        // per-row leaves (example clip: each example's own gradient, clipped on the host).
        let per_row = example_bounds.is_some();
        let leaves: Vec<Tensor<2>> = state
            .iter()
            .map(|w| {
                let w = if per_row {
                    w.clone().select(0, index.clone())
                } else {
                    w.clone()
                };
                Tensor::from_inner(w).require_grad()
            })
            .collect();
        let by_name: HashMap<&str, &Tensor<2>> = initial
            .iter()
            .map(|t| t.name.as_str())
            .zip(&leaves)
            .collect();
        let index_ad = Tensor::from_inner(index.clone());
        let mut rows_of = |t: &NamedTensor| -> Result<Tensor<2>, ModelError> {
            let leaf = by_name
                .get(t.name.as_str())
                .ok_or_else(|| ModelError::TensorData {
                    name: t.name.clone(),
                    reason: "a trainable tensor without a per-device copy".into(),
                })?;
            Ok(if per_row {
                (*leaf).clone()
            } else {
                (*leaf).clone().select(0, index_ad.clone())
            })
        };
        let weights = PerExampleWeights::from_rows(model, rows, None, &mut rows_of)?;
        let runner = CohortRunner {
            weights,
            row_device: &row_device,
            streams: RefCell::new(schedules.iter_mut().map(|s| &mut s.dropout).collect()),
        };
        let logits = model.forward_with(x, &runner);
        drop(runner);
        // Per-row loss, weighted by the row's share: the sum is every device's mean loss.
        let row_loss = (log_softmax(logits, 1) * y).sum_dim(1).neg();
        let loss_values = named("local loss", row_loss.clone().detach())?.data;
        let loss = if per_row {
            // Each example's own gradient, unscaled: clipped first, weighted after.
            row_loss.sum()
        } else {
            let shares = Tensor::<2>::from_data(TensorData::new(share.clone(), [rows, 1]), device);
            (row_loss * shares).sum()
        };
        let grads = loss.backward();
        // A tensor the loss did not reach has a zero gradient.
        let leaf_grads: Vec<Tensor<2>> = leaves
            .iter()
            .map(|leaf| {
                leaf.grad(&grads)
                    .unwrap_or_else(|| Tensor::zeros(leaf.dims(), &inner))
            })
            .collect();
        drop(grads);
        let step_grads = match &example_bounds {
            None => leaf_grads,
            Some(bounds) => {
                clipped_device_means(leaf_grads, bounds, &row_device, &share, d_count, &inner)?
            }
        };
        for (w, g) in state.iter_mut().zip(step_grads) {
            *w = w.clone() - g.mul_scalar(f64::from(recipe.lr));
        }
        for (r, &d) in row_device.iter().enumerate() {
            schedules[d].loss_sum += f64::from(loss_values[r] * share[r]);
        }
    }
    let values: Vec<Vec<f32>> = state
        .into_iter()
        .zip(&initial)
        .map(|(w, t)| Ok(named(&t.name, w)?.data))
        .collect::<Result<_, ModelError>>()?;
    Ok(schedules
        .iter()
        .enumerate()
        .map(|(d, s)| LocalResult {
            trained: initial
                .iter()
                .zip(&values)
                .map(|(t, v)| {
                    let n = t.data.len();
                    NamedTensor {
                        name: t.name.clone(),
                        shape: t.shape.clone(),
                        data: v[d * n..(d + 1) * n].to_vec(),
                    }
                })
                .collect(),
            steps: s.steps.len(),
            mean_loss: (s.loss_sum / s.steps.len().max(1) as f64) as f32,
        })
        .collect())
}

/// Each example's gradient (`grads[layer]`: `[R, numel]`) clipped to `bounds`, then
/// averaged per device with each row's `share` (1 / its device's batch size): `[D, numel]`
/// per layer, zero rows for devices without rows.
fn clipped_device_means(
    grads: Vec<Tensor<2>>,
    bounds: &ClipBounds,
    row_device: &[usize],
    share: &[f32],
    devices: usize,
    inner: &Device,
) -> Result<Vec<Tensor<2>>, ModelError> {
    let rows = row_device.len();
    // norms[layer][row]
    let norms: Vec<Vec<f32>> = grads
        .iter()
        .map(|g| {
            Ok(named("example norms", (g.clone() * g.clone()).sum_dim(1))?
                .data
                .into_iter()
                .map(f32::sqrt)
                .collect())
        })
        .collect::<Result<_, ModelError>>()?;
    // An example with a non-finite gradient counts as zero (its factor is 0, but 0 × NaN
    // is NaN in the product below): zero its rows first.
    let bad_rows: Vec<usize> = (0..rows)
        .filter(|&r| norms.iter().any(|l| !l[r].is_finite()))
        .collect();
    let grads: Vec<Tensor<2>> = if bad_rows.is_empty() {
        grads
    } else {
        grads
            .into_iter()
            .map(|g| {
                let [_, n] = g.dims();
                let mut v = named("example gradients", g)?.data;
                for &r in &bad_rows {
                    v[r * n..(r + 1) * n].fill(0.0);
                }
                Ok(Tensor::<2>::from_data(TensorData::new(v, [rows, n]), inner))
            })
            .collect::<Result<_, ModelError>>()?
    };
    // mix[layer]: `[D, R]`, row r's factor × share in its device's column.
    let mut mix = vec![vec![0f32; devices * rows]; grads.len()];
    for r in 0..rows {
        let n: Vec<f32> = norms.iter().map(|l| l[r]).collect();
        for (m, f) in mix.iter_mut().zip(bounds.factors(&n, false)) {
            m[row_device[r] * rows + r] = f * share[r];
        }
    }
    Ok(grads
        .into_iter()
        .zip(mix)
        .map(|(g, m)| Tensor::<2>::from_data(TensorData::new(m, [devices, rows]), inner).matmul(g))
        .collect())
}
