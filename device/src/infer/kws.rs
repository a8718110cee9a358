//! Keyword spotting with tract: load a model package, classify clips.
//!
//! [`KwsClassifier::load`] reads `model.json` (checked by hush-models), parses its
//! feature config into the front-end's typed [`FeatureConfig`], checks it against the
//! architecture, loads `model.onnx` (or its NNEF archive, [`super::graph`]) into tract for a
//! batch of one and checks its input and `probs` output against `model.json` — so a foreign
//! or mismatched model file is refused at load time with the reason, not at the first clip.
//! [`KwsClassifier::load_for_streams`] (what `listen` loads) leaves the whole-window model
//! of a package with a streaming form until something asks for it: a stream runs the form.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use hush_models::export::onnx::PROBS;
use hush_models::package::{ModelCard, ONNX};
use serde::Serialize;
use tract_nnef::prelude::*;

use super::clip::clip_features;
use super::frames::StreamForm;
use super::graph::{Dim, ModelFile};
use super::{run_plan, InferError, Plan};
use crate::audio::{read_audio, Audio};
use crate::features::FeatureConfig;

/// One classified clip: the JSON line `hush-device classify` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Classification {
    /// The audio file.
    pub file: String,
    /// The most probable class.
    pub label: String,
    /// Its probability.
    pub score: f32,
    /// Every class's probability.
    pub scores: BTreeMap<String, f32>,
}

/// A loaded keyword spotter. Cloning is cheap: the optimised models are shared.
#[derive(Debug, Clone)]
pub struct KwsClassifier {
    card: ModelCard,
    features: FeatureConfig,
    /// `model.onnx` (or its archive: [`ModelFile::read`] says which).
    whole_path: PathBuf,
    /// The whole-window model, once loaded.
    whole: Arc<OnceLock<WholeWindow>>,
    stream: Option<StreamForm>,
    frames: usize,
    bins: usize,
}

/// The whole-window model (`model.onnx`), loaded and checked.
#[derive(Debug)]
struct WholeWindow {
    plan: Plan,
    swapped: hush_tract_ops::Swapped,
    probs_output: usize,
}

impl KwsClassifier {
    /// Loads the model package in `dir`: every model file in it is read and checked now.
    pub fn load(dir: &Path) -> Result<Self, InferError> {
        let clf = Self::load_for_streams(dir)?;
        clf.whole()?;
        Ok(clf)
    }

    /// Loads the model package in `dir` for streams ([`KwsStream`](super::KwsStream),
    /// `listen`): as [`KwsClassifier::load`], except that when the package has a streaming
    /// form, which is what a stream runs, the whole-window model (`model.onnx`) is read
    /// and checked the first time something asks for it, not at load. Listening then
    /// neither spends the time nor keeps the memory of a model it does not run.
    pub fn load_for_streams(dir: &Path) -> Result<Self, InferError> {
        let card = ModelCard::read(dir)?;
        let features = card_features(&card, dir)?;
        let io = card.arch.io();
        let stream = StreamForm::load(dir, &card)?;
        let clf = Self {
            card,
            features,
            whole_path: dir.join(ONNX),
            whole: Arc::default(),
            stream,
            frames: io.frames,
            bins: io.bins,
        };
        if clf.stream.is_none() {
            clf.whole()?;
        }
        Ok(clf)
    }

    /// The whole-window model, loaded at the first call.
    fn whole(&self) -> Result<&WholeWindow, InferError> {
        if let Some(whole) = self.whole.get() {
            return Ok(whole);
        }
        let io = self.card.arch.io();
        let whole = load_whole(&self.whole_path, io.frames, io.bins, io.classes)?;
        Ok(self.whole.get_or_init(|| whole))
    }

    /// The model's card.
    pub fn card(&self) -> &ModelCard {
        &self.card
    }

    /// The feature config the model was trained on.
    pub fn features(&self) -> &FeatureConfig {
        &self.features
    }

    /// The package's streaming form (`frames.onnx` and `head.onnx`), when it has one.
    pub fn stream_form(&self) -> Option<&StreamForm> {
        self.stream.as_ref()
    }

    /// Which of tract's ops the whole-window model runs with hush's own kernels
    /// (`hush_tract_ops`); loads that model if it is not yet.
    pub fn hush_kernels(&self) -> Result<hush_tract_ops::Swapped, InferError> {
        Ok(self.whole()?.swapped)
    }

    /// Class probabilities (label order) of one clip of features, `frames × bins`, from the
    /// whole-window model (loaded at the first call if it is not yet).
    pub fn probs(&self, features: &[f32], origin: &Path) -> Result<Vec<f32>, InferError> {
        let whole = self.whole()?;
        run_plan(
            &whole.plan,
            features,
            &[1, self.frames, self.bins],
            whole.probs_output,
            origin,
        )
    }

    /// Classifies decoded audio (`origin` names it in errors and in the result).
    pub fn classify_audio(
        &self,
        audio: &Audio,
        origin: &Path,
    ) -> Result<Classification, InferError> {
        let expected = self.features.frame.sample_rate;
        if audio.sample_rate != expected {
            return Err(InferError::SampleRate {
                path: origin.to_path_buf(),
                got: audio.sample_rate,
                expected,
            });
        }
        let feats =
            clip_features(&self.features, &audio.samples, self.frames).map_err(|source| {
                InferError::Features {
                    path: origin.to_path_buf(),
                    source,
                }
            })?;
        let probs = self.probs(&feats, origin)?;
        Ok(self.result(origin, &probs))
    }

    /// Reads and classifies an audio file.
    pub fn classify_file(&self, path: &Path) -> Result<Classification, InferError> {
        let audio = read_audio(path)?;
        self.classify_audio(&audio, path)
    }

    fn result(&self, origin: &Path, probs: &[f32]) -> Classification {
        let (best, score) = best_class(probs);
        Classification {
            file: origin.display().to_string(),
            label: self.card.labels.get(best).cloned().unwrap_or_default(),
            score,
            scores: self
                .card
                .labels
                .iter()
                .cloned()
                .zip(probs.iter().copied())
                .collect(),
        }
    }
}

/// The most probable class and its probability (the first on ties; `(0, -inf)` for none).
pub(crate) fn best_class(probs: &[f32]) -> (usize, f32) {
    probs.iter().copied().enumerate().fold(
        (0, f32::NEG_INFINITY),
        |a, (i, p)| if p > a.1 { (i, p) } else { a },
    )
}

/// The feature config a model package was trained on (`model.json`'s `features`),
/// validated and checked against the architecture's input width. `dir` is the package
/// (named in errors).
pub fn card_features(card: &ModelCard, dir: &Path) -> Result<FeatureConfig, InferError> {
    let json = dir.join(hush_models::package::MODEL_JSON);
    parse_features(&card.features, &json, card.arch.io().bins, card.arch.name())
}

/// Parses and validates a `model.json` `features` value (`json` names the file in errors)
/// and checks that it gives `bins` values per frame, as the architecture `arch` takes.
pub fn parse_features(
    value: &serde_json::Value,
    json: &Path,
    bins: usize,
    arch: &str,
) -> Result<FeatureConfig, InferError> {
    let features: FeatureConfig =
        serde_json::from_value(value.clone()).map_err(|e| InferError::FeatureConfig {
            path: json.to_path_buf(),
            reason: e.to_string(),
        })?;
    features.validate().map_err(|e| InferError::FeatureConfig {
        path: json.to_path_buf(),
        reason: e.to_string(),
    })?;
    if features.dim() != bins {
        return Err(InferError::Mismatch {
            path: json.to_path_buf(),
            reason: format!(
                "the feature config gives {} values per frame but the {arch} architecture takes \
                 {bins}",
                features.dim(),
            ),
        });
    }
    Ok(features)
}

/// `model.onnx` (or its archive) at `path`, checked against the card: input `features`
/// `[N, frames, bins]`, an output `probs` `[1, classes]` for one clip.
fn load_whole(
    path: &Path,
    frames: usize,
    bins: usize,
    classes: usize,
) -> Result<WholeWindow, InferError> {
    let file = ModelFile::read(path)?;
    let path = file.path();
    let load = |reason: String| InferError::load(path, reason);
    let foreign = |reason: String| InferError::foreign(path, reason);
    file.expect_inputs(&format!("`features` [N, {frames}, {bins}]"))?;
    let names = file.output_names();
    let probs_output = names.iter().position(|n| n == PROBS).ok_or_else(|| {
        foreign(format!(
            "outputs are {names:?}; expected an output named `{PROBS}` [N, {classes}]"
        ))
    })?;
    let model = file
        .typed(&[&[Dim::Is(1), Dim::Is(frames), Dim::Is(bins)]])
        .map_err(|e| {
            foreign(format!(
                "input does not take [1, {frames}, {bins}] f32: {e:#}"
            ))
        })?;
    let (model, swapped) = hush_tract_ops::optimize(model).map_err(|e| {
        foreign(format!(
            "input [1, {frames}, {bins}] f32 does not fit: {e:#}"
        ))
    })?;
    let fact = model
        .output_fact(probs_output)
        .map_err(|e| load(format!("{e:#}")))?;
    let shape: Vec<String> = fact.shape.iter().map(|d| d.to_string()).collect();
    if shape != [1.to_string(), classes.to_string()] {
        return Err(foreign(format!(
            "`{PROBS}` has shape [{}] for one clip; model.json has {classes} labels",
            shape.join(", ")
        )));
    }
    let plan = model.into_runnable().map_err(|e| load(format!("{e:#}")))?;
    Ok(WholeWindow {
        plan: plan.into(),
        swapped,
        probs_output,
    })
}

/// Walks `paths` (files, or directories recursively) for WAV/FLAC files, sorted per
/// directory.
pub fn audio_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InferError> {
    let mut out = Vec::new();
    for p in paths {
        walk(p, &mut out)?;
    }
    Ok(out)
}

fn walk(p: &Path, out: &mut Vec<PathBuf>) -> Result<(), InferError> {
    let io = |source| {
        InferError::Audio(crate::audio::AudioError::Io {
            path: p.to_path_buf(),
            source,
        })
    };
    if p.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(io)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(io)?;
        entries.sort();
        for e in entries {
            if e.is_dir() || is_audio(&e) {
                walk(&e, out)?;
            }
        }
    } else if p.exists() {
        out.push(p.to_path_buf());
    } else {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "no such file or directory",
        )));
    }
    Ok(())
}

fn is_audio(p: &Path) -> bool {
    matches!(
        p.extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("wav" | "flac")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bundled keyword spotter's whole-window plan reuses its state: all the state its
    /// ops keep is hush's kept outputs.
    #[test]
    fn the_spotter_reuses_its_state() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/kws-12");
        let kws = KwsClassifier::load(&dir).expect("the bundled spotter");
        assert!(kws
            .whole()
            .expect("its whole-window model")
            .plan
            .reuses_states());
    }
}
