//! The device's own labelled recordings as model inputs: read once, features computed
//! with the model's own feature config, held in memory (a device holds tens to hundreds
//! of clips).

use std::path::Path;

use crate::audio::read_audio;
use crate::dataset::{read_corpus, KwsLabels, Layout, Target};
use crate::features::FeatureConfig;
use crate::infer::{card_features, clip_features};
use hush_models::package::ModelCard;

use super::TrainingError;

/// Features and classes of the local clips.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalData {
    /// `examples × frames × bins` features, row-major.
    pub features: Vec<f32>,
    /// Class index of each example (in the model's label order).
    pub classes: Vec<usize>,
    /// Frames per example.
    pub frames: usize,
    /// Values per frame.
    pub bins: usize,
}

impl LocalData {
    /// [`LocalData::load`] with what the model package at `package` was trained on: its
    /// feature config, input frames and class names.
    pub fn load_for_model(
        card: &ModelCard,
        package: &Path,
        dir: &Path,
        speaker: Option<&str>,
    ) -> Result<Self, TrainingError> {
        let features = card_features(card, package)?;
        Self::load(dir, speaker, &features, card.arch.io().frames, &card.labels)
    }

    /// Reads the Speech Commands corpus in `dir` (only `speaker`'s clips when given),
    /// computing features with `features` over `frames` frames and labelling with
    /// `labels` (the model's class names).
    pub fn load(
        dir: &Path,
        speaker: Option<&str>,
        features: &FeatureConfig,
        frames: usize,
        labels: &[String],
    ) -> Result<Self, TrainingError> {
        let (layout, examples) = read_corpus(dir)?;
        if layout != Layout::SpeechCommands {
            return Err(TrainingError::Unusable(format!(
                "{}: local keyword training needs a Speech Commands corpus (<word>/<speaker>_nohash_<k>.wav), found {layout:?}",
                dir.display()
            )));
        }
        let labels = KwsLabels {
            classes: labels.to_vec(),
        };
        let mut out = Self {
            features: Vec::new(),
            classes: Vec::new(),
            frames,
            bins: features.dim(),
        };
        for ex in examples {
            let Target::Label(word) = &ex.target else {
                continue;
            };
            if speaker.is_some_and(|s| s != ex.speaker) {
                continue;
            }
            let audio = read_audio(&ex.path)?;
            if audio.sample_rate != features.frame.sample_rate {
                return Err(TrainingError::Unusable(format!(
                    "{}: {} Hz; the model's features need {} Hz",
                    ex.path.display(),
                    audio.sample_rate,
                    features.frame.sample_rate
                )));
            }
            let f = clip_features(features, &audio.samples, frames).map_err(|source| {
                TrainingError::Features {
                    path: ex.path.clone(),
                    source,
                }
            })?;
            out.features.extend(f);
            out.classes.push(labels.class_of(word));
        }
        if out.classes.is_empty() {
            return Err(TrainingError::Unusable(format!(
                "{}: no labelled clips{}",
                dir.display(),
                speaker.map_or(String::new(), |s| format!(" of speaker {s}"))
            )));
        }
        Ok(out)
    }

    /// Number of examples.
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }
}
