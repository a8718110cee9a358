//! Speech recognition with tract: load an ASR model package (task `asr`), transcribe
//! utterances of any length.
//!
//! [`AsrRecognizer::load`] reads `model.json` (checked by hush-models; a keyword
//! spotter's package is refused, naming its task), parses its feature config, loads
//! `model.onnx` with the frame count left symbolic (one optimised plan for every length)
//! and checks its input and `log_probs` output against `model.json`. Features are
//! [`utterance_features`] — the function the host trainer uses, so both sides see the
//! same numbers — and decoding is hush-models' (greedy, prefix beam search, or prefix beam
//! search over the words of a lexicon).

use std::path::Path;

use hush_models::asr::decode::{beam_search, beam_search_lexicon, greedy, Lexicon};
use hush_models::asr::Vocabulary;
use hush_models::export::onnx::LOG_PROBS;
use hush_models::package::{AsrCard, ONNX};
use serde::Serialize;
use tract_nnef::prelude::*;

use super::graph::{Dim, ModelFile};
use super::kws::parse_features;
use super::{run_plan, InferError, Plan};
use crate::audio::{read_audio, Audio};
use crate::features::{compute, FeatureConfig, FeatureError};

/// One transcribed file: the JSON line `hush-device transcribe` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transcription {
    /// The audio file.
    pub file: String,
    /// The recognised text (lower case, characters of the model's vocabulary).
    pub text: String,
}

/// How to turn per-step log-probabilities into text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoder {
    /// Best path.
    Greedy,
    /// Prefix beam search keeping this many prefixes.
    Beam(usize),
    /// Prefix beam search keeping this many prefixes, spelling only the lexicon's words
    /// (a small-vocabulary recogniser: commands of known words).
    Lexicon(usize, Lexicon),
}

/// Silence appended to every utterance before its features, in seconds. A causal
/// recogniser spells a letter a little after it hears it, so an utterance that ends right
/// after its last sound would lose its last letters ("tonigh"); on the bundled corpus
/// this tail took greedy WER from 0.337 to 0.318 with the same model.
pub const TAIL_SILENCE_S: f32 = 0.3;

/// The features of a whole utterance followed by [`TAIL_SILENCE_S`] of silence,
/// `frames × dim` row-major (the recogniser's input; the host trains on the same
/// function's output). Errors: no samples, or a bad sample or option.
pub fn utterance_features(cfg: &FeatureConfig, samples: &[f32]) -> Result<Vec<f32>, FeatureError> {
    if samples.is_empty() {
        return Err(FeatureError::EmptyInput);
    }
    let tail = (TAIL_SILENCE_S * cfg.frame.sample_rate as f32) as usize;
    let mut padded = Vec::with_capacity(samples.len() + tail);
    padded.extend_from_slice(samples);
    padded.resize(samples.len() + tail, 0.0);
    Ok(compute(cfg, &padded)?.data)
}

/// A loaded speech recogniser.
#[derive(Debug)]
pub struct AsrRecognizer {
    card: AsrCard,
    features: FeatureConfig,
    vocab: Vocabulary,
    plan: Plan,
    bins: usize,
}

impl AsrRecognizer {
    /// Loads the ASR model package in `dir`.
    pub fn load(dir: &Path) -> Result<Self, InferError> {
        let card = AsrCard::read(dir)?;
        let json = dir.join(hush_models::package::MODEL_JSON);
        let features = parse_features(&card.features, &json, card.arch.bins(), card.arch.name())?;
        let vocab = card
            .vocabulary()
            .map_err(|reason| InferError::Mismatch { path: json, reason })?;
        let bins = card.arch.bins();
        let plan = load_plan(&dir.join(ONNX), bins, vocab.len())?;
        Ok(Self {
            card,
            features,
            vocab,
            plan,
            bins,
        })
    }

    /// The model's card.
    pub fn card(&self) -> &AsrCard {
        &self.card
    }

    /// The model's output symbols (what a [`Lexicon`] is spelled in).
    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocab
    }

    /// The feature config the model was trained on.
    pub fn features(&self) -> &FeatureConfig {
        &self.features
    }

    /// Per-step log-probabilities (`steps × vocab`, row-major) of one utterance's
    /// features (`frames × bins`).
    pub fn log_probs(&self, features: &[f32], origin: &Path) -> Result<Vec<f32>, InferError> {
        let run = |reason: String| InferError::Run {
            path: origin.to_path_buf(),
            reason,
        };
        let frames = features.len() / self.bins;
        if frames == 0 || frames * self.bins != features.len() {
            return Err(run(format!(
                "{} feature values are not whole frames of {}",
                features.len(),
                self.bins
            )));
        }
        run_plan(&self.plan, features, &[1, frames, self.bins], 0, origin)
    }

    /// Transcribes decoded audio (`origin` names it in errors and in the result).
    pub fn transcribe_audio(
        &self,
        audio: &Audio,
        origin: &Path,
        decoder: &Decoder,
    ) -> Result<Transcription, InferError> {
        let expected = self.features.frame.sample_rate;
        if audio.sample_rate != expected {
            return Err(InferError::SampleRate {
                path: origin.to_path_buf(),
                got: audio.sample_rate,
                expected,
            });
        }
        let feats = utterance_features(&self.features, &audio.samples).map_err(|source| {
            InferError::Features {
                path: origin.to_path_buf(),
                source,
            }
        })?;
        let lp = self.log_probs(&feats, origin)?;
        let v = self.vocab.len();
        let labels = match decoder {
            Decoder::Greedy => greedy(&lp, v),
            Decoder::Beam(width) => beam_search(&lp, v, *width),
            Decoder::Lexicon(width, lexicon) => beam_search_lexicon(&lp, v, *width, lexicon),
        };
        Ok(Transcription {
            file: origin.display().to_string(),
            text: self.vocab.decode(&labels),
        })
    }

    /// Reads and transcribes an audio file.
    pub fn transcribe_file(
        &self,
        path: &Path,
        decoder: &Decoder,
    ) -> Result<Transcription, InferError> {
        let audio = read_audio(path)?;
        self.transcribe_audio(&audio, path, decoder)
    }
}

fn load_plan(path: &Path, bins: usize, vocab: usize) -> Result<Plan, InferError> {
    let file = ModelFile::read(path)?;
    let path = file.path();
    let load = |reason: String| InferError::load(path, reason);
    let foreign = |reason: String| InferError::foreign(path, reason);
    file.expect_inputs(&format!("`features` [1, frames, {bins}]"))?;
    let names = file.output_names();
    if names != [LOG_PROBS] {
        return Err(foreign(format!(
            "outputs are {names:?}; expected one output named `{LOG_PROBS}` [1, steps, {vocab}]"
        )));
    }
    let model = file
        .typed(&[&[Dim::Is(1), Dim::Free("frames"), Dim::Is(bins)]])
        .map_err(|e| {
            foreign(format!(
                "input does not take [1, frames, {bins}] f32: {e:#}"
            ))
        })?;
    let (model, _) = hush_tract_ops::optimize(model)
        .map_err(|e| foreign(format!("input [1, frames, {bins}] f32 does not fit: {e:#}")))?;
    let fact = model.output_fact(0).map_err(|e| load(format!("{e:#}")))?;
    let last = fact.shape.iter().last().map(|d| d.to_string());
    if fact.shape.len() != 3 || last != Some(vocab.to_string()) {
        let shape: Vec<String> = fact.shape.iter().map(|d| d.to_string()).collect();
        return Err(foreign(format!(
            "`{LOG_PROBS}` has shape [{}]; model.json has {vocab} vocabulary symbols",
            shape.join(", ")
        )));
    }
    model
        .into_runnable()
        .map(Plan::from)
        .map_err(|e| load(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::FeatureKind;

    /// The bundled recogniser's GRU keeps its hidden state in tract's `Scan`: its plan
    /// starts a fresh state every run (reusing one changed `transcribe`'s text for the
    /// second of two clips).
    #[test]
    fn the_recogniser_runs_in_a_fresh_state_every_time() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/asr");
        let asr = AsrRecognizer::load(&dir).expect("the bundled recogniser");
        assert!(!asr.plan.reuses_states());
    }

    #[test]
    fn utterance_features_end_in_the_tail_silence() {
        let cfg = FeatureConfig::kaldi(FeatureKind::Fbank);
        let sr = cfg.frame.sample_rate as usize;
        let tone: Vec<f32> = (0..sr / 2).map(|i| (i as f32 * 0.1).sin() * 0.3).collect();
        let with_tail = utterance_features(&cfg, &tone).unwrap();
        let mut padded = tone.clone();
        padded.resize(sr / 2 + (TAIL_SILENCE_S * sr as f32) as usize, 0.0);
        assert_eq!(with_tail, compute(&cfg, &padded).unwrap().data);
        assert!(with_tail.len() > compute(&cfg, &tone).unwrap().data.len());
        assert!(matches!(
            utterance_features(&cfg, &[]),
            Err(FeatureError::EmptyInput)
        ));
    }
}
