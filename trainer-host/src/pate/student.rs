//! The student: a keyword spotter trained on the public clips that the aggregator
//! answered, with the aggregated labels only. Its early stopping uses a held-out tenth of
//! those answered clips (also with aggregated labels), so no true public label shapes it;
//! the public corpus's test split, with its true labels, only judges it. Refused clips are
//! left out.

use std::collections::HashMap;
use std::path::Path;

use hush_device::dataset::KwsLabels;
use hush_device::infer::clip_samples;

use super::label::LabelFile;
use super::PateError;
use crate::train::data::{read_kws, KwsData};
use crate::train::{train_kws_on, EpochReport, KwsTrainConfig, KwsTrainReport};

/// Trains the student on `cfg.data` (the public corpus the labels were made on) with the
/// labels of `labels`, and writes its package to `out`.
pub fn train_student(
    cfg: &KwsTrainConfig,
    labels: &LabelFile,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&EpochReport),
) -> Result<KwsTrainReport, PateError> {
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
    let by_file: HashMap<&Path, &str> = labels
        .labels
        .iter()
        .filter_map(|l| l.label.as_deref().map(|c| (l.file.as_path(), c)))
        .collect();
    let clip_len = clip_samples(&cfg.features, cfg.frames);
    let public = read_kws(
        &cfg.data,
        &classes,
        cfg.features.frame.sample_rate,
        clip_len,
    )?;
    let mut answered = Vec::new();
    for mut clip in public.train.into_iter().chain(public.validation) {
        let relative = clip.path.strip_prefix(&cfg.data).unwrap_or(&clip.path);
        if let Some(label) = by_file.get(relative) {
            clip.class = classes.class_of(label);
            answered.push(clip);
        }
    }
    if answered.len() < 10 {
        return Err(PateError::File {
            path: cfg.data.clone(),
            reason: format!(
                "only {} of its clips carry an answered label; the student needs at least 10",
                answered.len()
            ),
        });
    }
    // Every tenth answered clip (in file order) for early stopping.
    let (validation, train): (Vec<_>, Vec<_>) = answered
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 10 == 9);
    let data = KwsData {
        train: train.into_iter().map(|(_, c)| c).collect(),
        validation: validation.into_iter().map(|(_, c)| c).collect(),
        test: public.test,
        noises: public.noises,
    };
    Ok(train_kws_on(cfg, &data, out, command, progress)?)
}
