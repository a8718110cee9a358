//! The teacher ensemble: one model (a keyword spotter here; a recogniser in [`super::asr`])
//! per speaker-disjoint part of the private data
//! ([`super::partition_by_speaker`]), each in its own package directory, and their votes on
//! public clips.
//!
//! Training is resumable: `partition.json` fixes who trains which teacher, a finished
//! teacher (its `model.json` present) is kept, and a teacher is written to a scratch
//! directory and renamed only when complete, so an interrupted run never leaves a half
//! teacher that looks finished. A teacher sees only its own speakers — for training,
//! validation and early stopping alike — so one speaker influences one vote per query.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex};

use burn::module::Module;
use burn::tensor::Device;
use hush_device::dataset::KwsLabels;
use hush_device::infer::{card_features, clip_features, clip_samples};
use hush_models::package::{load_package, MODEL_JSON};
use hush_models::step::predict;
use serde::{Deserialize, Serialize};

use super::{partition_by_speaker, vote_histogram, PateError};
use hush_train::data::{read_kws, Clip, KwsData};
use hush_train::{train_kws_on, KwsTrainConfig};

/// The file in the teachers' directory that records the partition.
pub const PARTITION_JSON: &str = "partition.json";

/// Who trains which teacher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Partition {
    /// The private corpus.
    pub private: PathBuf,
    /// Shuffle seed.
    pub seed: u64,
    /// Per teacher, its speakers (sorted).
    pub teachers: Vec<Vec<String>>,
}

impl Partition {
    /// Reads `partition.json`, naming the file in errors.
    pub fn read(path: &Path) -> Result<Self, PateError> {
        super::read_json_file(path, "a PATE partition file")
    }
}

/// The package directory of teacher `t` under `root`.
pub fn teacher_dir(root: &Path, t: usize) -> PathBuf {
    root.join(format!("teacher-{t:03}"))
}

/// Trains `n` teachers on the private corpus `cfg.data` (every split: the private data is
/// all the teachers'), writes them under `out` and returns their directories. `progress`
/// gets `(teacher, n, already done)` before each teacher.
pub fn train_teachers(
    cfg: &KwsTrainConfig,
    n: usize,
    seed: u64,
    out: &Path,
    progress: &mut Progress<'_>,
) -> Result<Vec<PathBuf>, PateError> {
    train_teachers_in_parallel(cfg, n, seed, 1, out, progress)
}

/// [`train_teachers`] with up to `jobs` teachers training at once (see the module docs).
pub fn train_teachers_in_parallel(
    cfg: &KwsTrainConfig,
    n: usize,
    seed: u64,
    jobs: usize,
    out: &Path,
    progress: &mut Progress<'_>,
) -> Result<Vec<PathBuf>, PateError> {
    let labels = KwsLabels::new(&cfg.keywords);
    let clip_len = clip_samples(&cfg.features, cfg.frames);
    let data = read_kws(&cfg.data, &labels, cfg.features.frame.sample_rate, clip_len)?;
    let clips: Vec<&Clip> = data
        .train
        .iter()
        .chain(&data.validation)
        .chain(&data.test)
        .collect();
    let ensemble = Ensemble {
        private: &cfg.data,
        n,
        seed,
        jobs,
        out,
    };
    ensemble.train_on(&clips, |c| &c.speaker, progress, &|t, own, scratch| {
        let teacher_data = KwsData {
            train: own.clone(),
            validation: own.clone(),
            test: own,
            noises: data.noises.clone(),
        };
        let mut teacher_cfg = cfg.clone();
        teacher_cfg.seed = teacher_seed(cfg.seed, t);
        let command = format!("hush-host pate train-teachers (teacher {t} of {n})");
        train_kws_on(&teacher_cfg, &teacher_data, scratch, &command, &mut |_| {})?;
        Ok(())
    })
}

/// Teacher `t`'s training seed, from the run's seed: each teacher its own.
pub(crate) fn teacher_seed(seed: u64, t: usize) -> u64 {
    seed.wrapping_add(t as u64)
}

/// Trains one teacher: `(teacher, its private example indices, scratch directory)`.
pub(crate) type TrainOne<'a> = dyn Fn(usize, &[usize], &Path) -> Result<(), PateError> + Sync + 'a;

/// Progress of teacher training: `(teacher, teachers, already done)` as each starts.
pub type Progress<'a> = dyn FnMut(usize, usize, bool) + 'a;

/// Trains one teacher on its own examples: `(teacher, its private examples, scratch
/// directory)`.
pub(crate) type TrainOwn<'a, E> = dyn Fn(usize, Vec<E>, &Path) -> Result<(), PateError> + Sync + 'a;

/// A teacher ensemble to train, for any task: the private corpus, the teacher count, the
/// partition seed, how many train at once and the output directory.
pub(crate) struct Ensemble<'a> {
    /// The private corpus (recorded in `partition.json`).
    pub private: &'a Path,
    /// Number of teachers.
    pub n: usize,
    /// Partition seed.
    pub seed: u64,
    /// Teachers trained at once (1: one after another).
    pub jobs: usize,
    /// The teachers' directory.
    pub out: &'a Path,
}

impl Ensemble<'_> {
    /// [`Ensemble::train`] over `examples` (every private example, whatever the task;
    /// `speaker` names each one's speaker): `train_one` gets each teacher's own examples.
    pub fn train_on<E: Clone + Sync>(
        &self,
        examples: &[&E],
        speaker: impl Fn(&E) -> &str,
        progress: &mut Progress<'_>,
        train_one: &TrainOwn<'_, E>,
    ) -> Result<Vec<PathBuf>, PateError> {
        let speakers: Vec<&str> = examples.iter().map(|e| speaker(e)).collect();
        self.train(&speakers, progress, &|t, part, scratch| {
            let own: Vec<E> = part.iter().map(|&i| examples[i].clone()).collect();
            train_one(t, own, scratch)
        })
    }

    /// Partitions the speakers ([`partition_by_speaker`]), writes or checks
    /// `partition.json`, and for every teacher not yet finished calls
    /// `train_one(teacher, its example indices, scratch dir)`, which writes the teacher's
    /// package to the scratch directory; that is renamed into place when complete (see
    /// the module docs). Returns the teachers' directories.
    fn train(
        &self,
        speakers: &[&str],
        progress: &mut Progress<'_>,
        train_one: &TrainOne<'_>,
    ) -> Result<Vec<PathBuf>, PateError> {
        let (n, out) = (self.n, self.out);
        if self.jobs == 0 {
            return Err(PateError::Option {
                option: "--jobs",
                reason: "must be at least 1".into(),
            });
        }
        let parts = partition_by_speaker(speakers, n, self.seed)?;
        let partition = Partition {
            private: self.private.to_path_buf(),
            seed: self.seed,
            teachers: parts
                .iter()
                .map(|p| {
                    let mut s: Vec<String> = p.iter().map(|&i| speakers[i].to_string()).collect();
                    s.sort();
                    s.dedup();
                    s
                })
                .collect(),
        };
        std::fs::create_dir_all(out).map_err(|source| PateError::Io {
            path: out.to_path_buf(),
            source,
        })?;
        check_or_write_partition(&out.join(PARTITION_JSON), &partition)?;
        // Trains teacher `t` into a scratch directory, renamed into place when complete.
        let train_teacher = |t: usize| -> Result<(), PateError> {
            let dir = teacher_dir(out, t);
            let scratch = out.join(format!(".teacher-{t:03}.partial"));
            if scratch.exists() {
                std::fs::remove_dir_all(&scratch).map_err(|source| PateError::Io {
                    path: scratch.clone(),
                    source,
                })?;
            }
            train_one(t, &parts[t], &scratch)?;
            std::fs::rename(&scratch, &dir).map_err(|source| PateError::Io { path: dir, source })
        };
        let finished = |t: usize| teacher_dir(out, t).join(MODEL_JSON).is_file();
        if self.jobs == 1 {
            for t in 0..n {
                let done = finished(t);
                progress(t, n, done);
                if !done {
                    train_teacher(t)?;
                }
            }
        } else {
            // Workers take the next teacher until none is left or one has failed, and tell
            // this thread, which reports progress, as each starts.
            let next = AtomicUsize::new(0);
            let failed: Mutex<Option<PateError>> = Mutex::new(None);
            let (started, starts) = mpsc::channel::<(usize, bool)>();
            std::thread::scope(|s| {
                for _ in 0..self.jobs.min(n) {
                    let started = started.clone();
                    let (next, failed) = (&next, &failed);
                    s.spawn(move || loop {
                        let stop = failed.lock().map_or(true, |f| f.is_some());
                        let t = next.fetch_add(1, Ordering::SeqCst);
                        if stop || t >= n {
                            break;
                        }
                        let done = finished(t);
                        let _ = started.send((t, done));
                        if done {
                            continue;
                        }
                        if let Err(e) = train_teacher(t) {
                            if let Ok(mut f) = failed.lock() {
                                f.get_or_insert(e);
                            }
                            break;
                        }
                    });
                }
                drop(started);
                for (t, done) in starts {
                    progress(t, n, done);
                }
            });
            if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
                return Err(e);
            }
        }
        Ok((0..n).map(|t| teacher_dir(out, t)).collect())
    }
}

/// Writes the partition, or checks that an existing one (a resumed run) is the same.
fn check_or_write_partition(path: &Path, partition: &Partition) -> Result<(), PateError> {
    let bad = |reason: String| PateError::File {
        path: path.to_path_buf(),
        reason,
    };
    if path.exists() {
        if &Partition::read(path)? != partition {
            return Err(bad(
                "it records another partition (other private data, teacher count or seed); \
                 use a new output directory"
                    .into(),
            ));
        }
        return Ok(());
    }
    let json = serde_json::to_string_pretty(partition).map_err(|e| bad(e.to_string()))?;
    std::fs::write(path, json).map_err(|e| bad(e.to_string()))
}

/// The teachers' vote histogram for every clip (`[clip][class]`), and the class names.
/// Every teacher must share one class list and one feature config.
pub fn teacher_votes(
    teachers: &[PathBuf],
    clips: &[Clip],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Vec<Vec<f64>>, Vec<String>), PateError> {
    let device = Device::flex();
    let mut votes: Vec<Vec<f64>> = Vec::new();
    let mut shared: Option<(Vec<String>, serde_json::Value, Vec<f32>)> = None;
    for (t, dir) in teachers.iter().enumerate() {
        progress(t, teachers.len());
        let (card, model) = load_package(dir, &device)?;
        let model = model.valid();
        if shared.as_ref().is_some_and(|(labels, features, _)| {
            *labels != card.labels || *features != card.features
        }) {
            return Err(PateError::File {
                path: dir.join(MODEL_JSON),
                reason: format!(
                    "its classes {:?} or feature config differ from the first teacher's \
                     (every teacher must be trained on one label set and front-end)",
                    card.labels
                ),
            });
        }
        if shared.is_none() {
            let feats = package_features(&card, dir, clips)?;
            votes = vec![vec![0.0; card.labels.len()]; clips.len()];
            shared = Some((card.labels.clone(), card.features.clone(), feats));
        }
        let Some((_, _, feats)) = &shared else {
            continue;
        };
        let probs = probabilities(&model, card.arch.io(), feats, clips.len(), &device)?;
        for (row, p) in votes.iter_mut().zip(probs) {
            let h = vote_histogram([hush_train::metrics::argmax(&p)], row.len());
            for (a, b) in row.iter_mut().zip(h) {
                *a += b;
            }
        }
    }
    let labels = shared.map(|(l, _, _)| l).unwrap_or_default();
    Ok((votes, labels))
}

/// A model package's class probabilities on every clip (`[clip][class]`), and its classes
/// (the interactive aggregator asks the student this way).
pub fn package_probabilities(
    dir: &Path,
    clips: &[Clip],
) -> Result<(Vec<Vec<f32>>, Vec<String>), PateError> {
    let device = Device::flex();
    let (card, model) = load_package(dir, &device)?;
    let feats = package_features(&card, dir, clips)?;
    let probs = probabilities(&model.valid(), card.arch.io(), &feats, clips.len(), &device)?;
    Ok((probs, card.labels))
}

/// The features of `clips` under the front-end of the package in `dir`, concatenated.
fn package_features(
    card: &hush_models::package::ModelCard,
    dir: &Path,
    clips: &[Clip],
) -> Result<Vec<f32>, PateError> {
    let io = card.arch.io();
    let cfg = card_features(card, dir)?;
    let mut feats = Vec::with_capacity(clips.len() * io.frames * io.bins);
    for c in clips {
        feats.extend(
            clip_features(&cfg, &c.samples, io.frames).map_err(|source| PateError::File {
                path: c.path.clone(),
                reason: source.to_string(),
            })?,
        );
    }
    Ok(feats)
}

/// Class probabilities of `n` examples of `feats`, in batches of 64.
fn probabilities(
    model: &hush_models::arch::KwsModel,
    io: hush_models::arch::IoShape,
    feats: &[f32],
    n: usize,
    device: &Device,
) -> Result<Vec<Vec<f32>>, PateError> {
    let per = io.frames * io.bins;
    let mut out = Vec::with_capacity(n);
    for start in (0..n).step_by(64) {
        let end = (start + 64).min(n);
        out.extend(predict(
            model,
            &feats[start * per..end * per],
            end - start,
            io.frames,
            io.bins,
            device,
        )?);
    }
    Ok(out)
}
