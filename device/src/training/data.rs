//! The device's own labelled recordings as model inputs: read once (from a corpus
//! directory, or handed over as samples by an app), features computed with the model's own
//! feature config, held in memory (a device holds tens to hundreds of clips).

use std::path::{Path, PathBuf};

use crate::audio::read_audio;
use crate::dataset::{read_corpus, KwsLabels, Layout, Target};
use crate::features::FeatureConfig;
use crate::infer::{card_features, clip_features};
use hush_models::package::ModelCard;

use super::TrainingError;

/// One labelled recording handed over as samples (what an app embedding the C API has).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabelledClip<'a> {
    /// Mono samples in [-1, 1].
    pub samples: &'a [f32],
    /// Their rate (must be the model's).
    pub sample_rate: u32,
    /// Class name; a name that is none of the model's labels counts as the last class
    /// (`_unknown_`), as a corpus word does.
    pub label: &'a str,
}

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
        let mut out = Self::empty(features, frames);
        for ex in examples {
            let Target::Label(word) = &ex.target else {
                continue;
            };
            if speaker.is_some_and(|s| s != ex.speaker) {
                continue;
            }
            let audio = read_audio(&ex.path)?;
            out.add(
                features,
                &audio.samples,
                audio.sample_rate,
                labels.class_of(word),
                &ex.path,
            )?;
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

    /// Clips handed over as samples, with what the model package at `package` was
    /// trained on (as [`LocalData::load_for_model`]). Errors name the clip by its index
    /// (`<clip 3>`): a rate other than the model's, a sample that is not finite, or no
    /// clips at all.
    pub fn from_clips(
        card: &ModelCard,
        package: &Path,
        clips: &[LabelledClip<'_>],
    ) -> Result<Self, TrainingError> {
        let features = card_features(card, package)?;
        let labels = KwsLabels {
            classes: card.labels.clone(),
        };
        let mut out = Self::empty(&features, card.arch.io().frames);
        if clips.is_empty() || labels.classes.is_empty() {
            return Err(TrainingError::Unusable(
                "no labelled clips: local training needs at least one".into(),
            ));
        }
        for (i, clip) in clips.iter().enumerate() {
            let origin = PathBuf::from(format!("<clip {i}>"));
            out.add(
                &features,
                clip.samples,
                clip.sample_rate,
                labels.class_of(clip.label),
                &origin,
            )?;
        }
        Ok(out)
    }

    fn empty(features: &FeatureConfig, frames: usize) -> Self {
        Self {
            features: Vec::new(),
            classes: Vec::new(),
            frames,
            bins: features.dim(),
        }
    }

    /// Adds one clip of class `class` (`origin` names it in errors).
    fn add(
        &mut self,
        features: &FeatureConfig,
        samples: &[f32],
        sample_rate: u32,
        class: usize,
        origin: &Path,
    ) -> Result<(), TrainingError> {
        if sample_rate != features.frame.sample_rate {
            return Err(TrainingError::Unusable(format!(
                "{}: {} Hz; the model's features need {} Hz",
                origin.display(),
                sample_rate,
                features.frame.sample_rate
            )));
        }
        let f = clip_features(features, samples, self.frames).map_err(|source| {
            TrainingError::Features {
                path: origin.to_path_buf(),
                source,
            }
        })?;
        self.features.extend(f);
        self.classes.push(class);
        Ok(())
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
