//! The student: a keyword spotter trained on the public clips that the aggregator
//! answered, with the aggregated labels only. Its early stopping uses a held-out tenth of
//! those answered clips (also with aggregated labels), so no true public label shapes it;
//! the public corpus's test split, with its true labels, only judges it.
//!
//! Refused clips are left out by [`train_student`]. [`train_student_self_training`] uses
//! them (semi-supervised, as Papernot et al. use the unanswered queries): the student that
//! learnt from the answered clips labels every refused clip it is confident about, and a
//! second student learns from both. This costs no privacy: those pseudo-labels are a
//! function of the first student — itself post-processing of the noisy labels — and of
//! public clips; the teachers are not asked again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hush_device::dataset::KwsLabels;
use hush_device::infer::clip_samples;
use serde::{Deserialize, Serialize};

use super::label::LabelFile;
use super::teachers::package_probabilities;
use super::PateError;
use hush_train::data::{read_kws, Clip, KwsData};
use hush_train::{train_kws_on, EpochReport, KwsTrainConfig, KwsTrainReport};

/// Trains the student on `cfg.data` (the public corpus the labels were made on) with the
/// labels of `labels`, and writes its package to `out`.
pub fn train_student(
    cfg: &KwsTrainConfig,
    labels: &LabelFile,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&EpochReport),
) -> Result<KwsTrainReport, PateError> {
    let public = PublicClips::read(cfg, labels)?;
    public.train(cfg, Vec::new(), out, command, progress)
}

/// Self-training on the refused clips: a clip gets the first student's label when that
/// student's top class probability is at least `confidence`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SelfTraining {
    /// Least top-class probability for a refused clip to be pseudo-labelled, in `(0, 1]`.
    pub confidence: f32,
}

/// What self-training did.
#[derive(Debug, Clone)]
pub struct SelfTrainingReport {
    /// The student trained on the answered clips only (its package is in
    /// [`SelfTrainingReport::first_dir`]).
    pub first: KwsTrainReport,
    /// Where the first student's package was written: `<out>-answered-only`.
    pub first_dir: PathBuf,
    /// How many clips the aggregator refused.
    pub refused: usize,
    /// The refused clips the first student labelled (relative to the public corpus), with
    /// the class it gave them.
    pub pseudo_labelled: Vec<(PathBuf, String)>,
    /// The second student, trained on the answered and the pseudo-labelled clips.
    pub student: KwsTrainReport,
}

/// [`train_student`], then self-training on the refused clips: the student trained on the
/// answered clips is written to `<out>-answered-only`, pseudo-labels the refused clips it
/// is confident about, and a fresh student (same config and seed) trains on the answered
/// and pseudo-labelled clips into `out`. Early stopping still uses answered clips only.
pub fn train_student_self_training(
    cfg: &KwsTrainConfig,
    labels: &LabelFile,
    self_training: SelfTraining,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&EpochReport),
) -> Result<SelfTrainingReport, PateError> {
    let c = self_training.confidence;
    if !(c > 0.0 && c <= 1.0) {
        return Err(PateError::Option {
            option: "--self-train-confidence",
            reason: format!("{c} is not a probability in (0, 1]"),
        });
    }
    let Some(name) = out.file_name() else {
        return Err(PateError::Option {
            option: "--out",
            reason: format!(
                "{} has no directory name to put the first student beside (NAME-answered-only)",
                out.display()
            ),
        });
    };
    let mut first_name = name.to_os_string();
    first_name.push("-answered-only");
    let public = PublicClips::read(cfg, labels)?;
    let first_dir = out.with_file_name(first_name);
    let first = public.train(cfg, Vec::new(), &first_dir, command, progress)?;
    let mut pseudo = Vec::new();
    if !public.refused.is_empty() {
        let (probs, classes) = package_probabilities(&first_dir, &public.refused)?;
        for (clip, p) in public.refused.iter().zip(probs) {
            let (best, top) =
                p.iter().enumerate().fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, &v)| if v > b.1 { (i, v) } else { b },
                );
            if top >= c {
                let mut clip = clip.clone();
                clip.class = best;
                pseudo.push((clip, classes[best].clone()));
            }
        }
    }
    let pseudo_labelled = pseudo
        .iter()
        .map(|(clip, class)| (public.relative(&clip.path), class.clone()))
        .collect();
    let extra = pseudo.into_iter().map(|(clip, _)| clip).collect();
    let student = public.train(cfg, extra, out, command, progress)?;
    Ok(SelfTrainingReport {
        first,
        first_dir,
        refused: public.refused.len(),
        pseudo_labelled,
        student,
    })
}

/// The public corpus split by the labels file: answered clips (with the aggregated
/// label), refused clips, and the test split (true labels, for judging only).
struct PublicClips {
    root: PathBuf,
    answered: Vec<Clip>,
    refused: Vec<Clip>,
    test: Vec<Clip>,
    noises: Vec<Vec<f32>>,
}

impl PublicClips {
    fn read(cfg: &KwsTrainConfig, labels: &LabelFile) -> Result<Self, PateError> {
        let classes = KwsLabels::new(&cfg.keywords);
        if classes.classes != labels.classes {
            return Err(PateError::Option {
                option: "--keywords",
                reason: format!(
                    "the student's classes {:?} differ from the labels' {:?}",
                    classes.classes, labels.classes
                ),
            });
        }
        let by_file: HashMap<&Path, Option<&str>> = labels
            .labels
            .iter()
            .map(|l| (l.file.as_path(), l.label.as_deref()))
            .collect();
        let clip_len = clip_samples(&cfg.features, cfg.frames);
        let public = read_kws(
            &cfg.data,
            &classes,
            cfg.features.frame.sample_rate,
            clip_len,
        )?;
        let (mut answered, mut refused) = (Vec::new(), Vec::new());
        for mut clip in public.train.into_iter().chain(public.validation) {
            let relative = clip.path.strip_prefix(&cfg.data).unwrap_or(&clip.path);
            match by_file.get(relative) {
                Some(Some(label)) => {
                    clip.class = classes.class_of(label);
                    answered.push(clip);
                }
                Some(None) => refused.push(clip),
                None => {}
            }
        }
        if answered.len() < 10 {
            return Err(PateError::File {
                path: cfg.data.clone(),
                reason: format!(
                    "only {} of its clips carry an answered label; the student needs at least \
                     10",
                    answered.len()
                ),
            });
        }
        Ok(Self {
            root: cfg.data.clone(),
            answered,
            refused,
            test: public.test,
            noises: public.noises,
        })
    }

    fn relative(&self, path: &Path) -> PathBuf {
        path.strip_prefix(&self.root).unwrap_or(path).to_path_buf()
    }

    /// Trains a student on the answered clips plus `extra` (every tenth answered clip, in
    /// file order, held out for early stopping).
    fn train(
        &self,
        cfg: &KwsTrainConfig,
        extra: Vec<Clip>,
        out: &Path,
        command: &str,
        progress: &mut dyn FnMut(&EpochReport),
    ) -> Result<KwsTrainReport, PateError> {
        let (validation, train): (Vec<_>, Vec<_>) = self
            .answered
            .iter()
            .cloned()
            .enumerate()
            .partition(|(i, _)| i % 10 == 9);
        let data = KwsData {
            train: train.into_iter().map(|(_, c)| c).chain(extra).collect(),
            validation: validation.into_iter().map(|(_, c)| c).collect(),
            test: self.test.clone(),
            noises: self.noises.clone(),
        };
        Ok(train_kws_on(cfg, &data, out, command, progress)?)
    }
}
