//! The model package: one directory that every `--model` flag takes.
//!
//! A package is a keyword spotter ([`ModelCard`], task `kws`) or a speech recogniser
//! ([`AsrCard`], task `asr`); each reader refuses the other task by name.
//!
//! ```text
//! MODEL_DIR/
//!   model.json          ModelCard: format, task, architecture + config, feature config,
//!                       labels, parameter names and shapes, provenance, metrics
//!   weights.safetensors every tensor, named per layer
//!   model.onnx          inference graph (input `features` [N, frames, bins];
//!                       outputs `logits`, `probs` [N, classes])
//! ```
//!
//! The feature config is kept opaque here (`serde_json::Value`): it is the front-end's
//! type, which lives in hush-device; hush-device parses it into its typed config. This
//! crate does not depend on hush-device.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::arch::{is_trainable, ArchConfig, KwsModel};
use crate::asr::{AsrArchConfig, CtcGru, Vocabulary};
use crate::checkpoint::{load_safetensors, save_safetensors, TensorSource};
use crate::ModelError;

/// The format tag every `model.json` carries.
pub const FORMAT: &str = "hush-model/1";
/// File names inside a package.
pub const MODEL_JSON: &str = "model.json";
/// Weights file.
pub const WEIGHTS: &str = "weights.safetensors";
/// ONNX file.
pub const ONNX: &str = "model.onnx";
/// File name of a streaming model's per-frame trunk (when its architecture has a streaming
/// form: [`ArchConfig::stream_geometry`]).
pub const STREAM_FRAMES: &str = "frames.onnx";
/// File name of a streaming model's head, over the mean of a window's frames.
pub const STREAM_HEAD: &str = "head.onnx";

/// What the model does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Keyword spotting: one label per fixed-length clip.
    Kws,
    /// Speech recognition: text per utterance (CTC over characters).
    Asr,
}

impl Task {
    /// The name `model.json` uses: `kws` or `asr`.
    pub fn name(self) -> &'static str {
        match self {
            Task::Kws => "kws",
            Task::Asr => "asr",
        }
    }
}

/// Just the `task` of a `model.json`, read before the rest so that a package of the other
/// task is refused by name rather than by a serde error about its architecture.
#[derive(Deserialize)]
struct TaskOnly {
    task: Option<Task>,
}

/// The task of the package in `dir` (`model.json`'s `task`), for commands that take
/// either kind of package. Errors name the directory or file and what was expected.
pub fn package_task(dir: &Path) -> Result<Task, ModelError> {
    let path = card_path(dir)?;
    let text = std::fs::read_to_string(&path).map_err(ModelError::io(&path))?;
    match serde_json::from_str::<TaskOnly>(&text) {
        Ok(TaskOnly { task: Some(task) }) => Ok(task),
        Ok(TaskOnly { task: None }) => Err(ModelError::BadPackage {
            path,
            reason: "not a hush model.json: no `task` (expected `kws` or `asr`)".into(),
        }),
        Err(e) => Err(ModelError::BadPackage {
            path,
            reason: format!("not a hush model.json: {e}"),
        }),
    }
}

/// `dir/model.json`, after checking that `dir` is a directory.
fn card_path(dir: &Path) -> Result<PathBuf, ModelError> {
    if !dir.is_dir() {
        return Err(ModelError::BadPackage {
            path: dir.to_path_buf(),
            reason: "not a directory; a model package is a directory holding model.json, \
                     weights.safetensors and model.onnx"
                .into(),
        });
    }
    Ok(dir.join(MODEL_JSON))
}

/// Reads `dir/model.json` as text after checking that it is a package of `task`.
fn read_card_text(dir: &Path, task: Task) -> Result<(PathBuf, String), ModelError> {
    let path = card_path(dir)?;
    let text = std::fs::read_to_string(&path).map_err(ModelError::io(&path))?;
    if let Ok(TaskOnly { task: Some(found) }) = serde_json::from_str::<TaskOnly>(&text) {
        if found != task {
            return Err(ModelError::BadPackage {
                path,
                reason: format!(
                    "this is a `{}` model (model.json task `{}`); this command needs a `{}` model",
                    found.name(),
                    found.name(),
                    task.name()
                ),
            });
        }
    }
    Ok((path, text))
}

/// Writes `value` pretty-printed to `dir/model.json`.
fn write_card_json<T: Serialize>(dir: &Path, value: &T) -> Result<(), ModelError> {
    let path = dir.join(MODEL_JSON);
    let text = serde_json::to_string_pretty(value).map_err(|e| ModelError::BadPackage {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    std::fs::write(&path, text + "\n").map_err(ModelError::io(&path))
}

/// The `parameters` list of a card and its trainable count, from a model's tensors.
pub(crate) fn param_infos(tensors: Vec<crate::checkpoint::NamedTensor>) -> (Vec<ParamInfo>, usize) {
    let parameters: Vec<ParamInfo> = tensors
        .into_iter()
        .map(|t| ParamInfo {
            trainable: is_trainable(&t.name),
            name: t.name,
            shape: t.shape,
        })
        .collect();
    let num_trainable = parameters
        .iter()
        .filter(|p| p.trainable)
        .map(|p| p.shape.iter().product::<usize>())
        .sum();
    (parameters, num_trainable)
}

/// Errors unless `actual` (a loaded model's tensors) lists the same names and shapes as
/// the card's `parameters`.
fn check_parameters(
    dir: &Path,
    listed: &[ParamInfo],
    actual: &[crate::checkpoint::NamedTensor],
) -> Result<(), ModelError> {
    let listed: Vec<(&str, &[usize])> = listed
        .iter()
        .map(|p| (p.name.as_str(), p.shape.as_slice()))
        .collect();
    let actual: Vec<(&str, &[usize])> = actual
        .iter()
        .map(|t| (t.name.as_str(), t.shape.as_slice()))
        .collect();
    if listed != actual {
        return Err(ModelError::BadPackage {
            path: dir.join(MODEL_JSON),
            reason: "its `parameters` list does not match the architecture's tensors".into(),
        });
    }
    Ok(())
}

/// One tensor of `weights.safetensors`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamInfo {
    /// Per-layer name.
    pub name: String,
    /// Shape.
    pub shape: Vec<usize>,
    /// Trained by the optimizer (false: batch-norm statistics, input normalisation).
    pub trainable: bool,
}

/// How a model was trained.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The exact command line.
    pub command: String,
    /// The corpus directory.
    pub data: String,
    /// Examples per split (and anything else worth knowing about the data).
    pub data_summary: BTreeMap<String, usize>,
    /// Random seed.
    pub seed: u64,
    /// Training options as given (epochs, batch size, learning rate, augmentation, …).
    pub options: serde_json::Value,
    /// Epochs actually run (early stopping may cut the run short).
    pub epochs_run: usize,
    /// The epoch whose weights were kept (best validation accuracy); with weight
    /// averaging (`--swa-epochs`) the last, the average of the epochs up to it.
    pub best_epoch: usize,
    /// hush version that trained it.
    pub hush_version: String,
}

/// Classification quality on one split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SplitMetrics {
    /// Examples scored.
    pub examples: usize,
    /// Fraction correct.
    pub accuracy: f64,
    /// Mean per-class recall over the keyword classes (not `_silence_`/`_unknown_`);
    /// classes absent from the split are skipped.
    pub balanced_keyword_accuracy: f64,
    /// `confusion[true][predicted]` counts, classes in label order.
    pub confusion: Vec<Vec<usize>>,
}

/// Metrics a trainer reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Per split (`train`, `validation`, `test`).
    pub splits: BTreeMap<String, SplitMetrics>,
}

/// `model.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// Always [`FORMAT`].
    pub format: String,
    /// What the model does.
    pub task: Task,
    /// Architecture and its configuration.
    pub arch: ArchConfig,
    /// Feature front-end configuration (hush-device's `FeatureConfig`, opaque here).
    pub features: serde_json::Value,
    /// Output classes in order.
    pub labels: Vec<String>,
    /// Trainable parameter count.
    pub num_trainable: usize,
    /// Every tensor of `weights.safetensors`.
    pub parameters: Vec<ParamInfo>,
    /// How it was trained.
    #[serde(default)]
    pub provenance: Option<Provenance>,
    /// How well it does.
    #[serde(default)]
    pub metrics: Option<Metrics>,
}

impl ModelCard {
    /// A card for `model`, parameters filled in from it.
    pub fn new(
        arch: ArchConfig,
        features: serde_json::Value,
        labels: Vec<String>,
        model: &KwsModel,
    ) -> Result<Self, ModelError> {
        let (parameters, num_trainable) = param_infos(model.named_tensors()?);
        Ok(Self {
            format: FORMAT.into(),
            task: Task::Kws,
            arch,
            features,
            labels,
            num_trainable,
            parameters,
            provenance: None,
            metrics: None,
        })
    }

    /// Checks the card against itself: format, label count against the architecture's
    /// classes, unique labels.
    pub fn validate(&self, path: &Path) -> Result<(), ModelError> {
        let bad = |reason: String| ModelError::BadPackage {
            path: path.to_path_buf(),
            reason,
        };
        if self.format != FORMAT {
            return Err(bad(format!(
                "format is `{}`, expected `{FORMAT}`",
                self.format
            )));
        }
        if self.task != Task::Kws {
            return Err(bad(format!(
                "task is `{}`, expected `kws`",
                self.task.name()
            )));
        }
        let classes = self.arch.io().classes;
        if self.labels.len() != classes {
            return Err(bad(format!(
                "{} labels but the {} architecture has {classes} outputs",
                self.labels.len(),
                self.arch.name()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = self.labels.iter().find(|l| !seen.insert(l.as_str())) {
            return Err(bad(format!("label `{dup}` appears twice")));
        }
        Ok(())
    }

    /// Reads and validates `dir/model.json` (a keyword spotter's: an ASR package is
    /// refused, naming its task).
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        let (path, text) = read_card_text(dir, Task::Kws)?;
        let card: ModelCard = serde_json::from_str(&text).map_err(|e| ModelError::BadPackage {
            path: path.clone(),
            reason: format!("not a hush model.json: {e}"),
        })?;
        card.validate(&path)?;
        Ok(card)
    }

    /// Writes `dir/model.json` (pretty-printed).
    pub fn write(&self, dir: &Path) -> Result<(), ModelError> {
        write_card_json(dir, self)
    }
}

/// Writes a whole package: `weights.safetensors`, `model.onnx` (from `model` in
/// inference mode), the streaming form (`frames.onnx`, `head.onnx`) when the architecture
/// has one, and `model.json`. Creates `dir` if needed.
pub fn write_package(dir: &Path, card: &ModelCard, model: &KwsModel) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(ModelError::io(dir))?;
    let tensors = model.named_tensors()?;
    save_safetensors(&dir.join(WEIGHTS), &tensors)?;
    let onnx = model.to_onnx(&card.arch)?;
    let p = dir.join(ONNX);
    std::fs::write(&p, onnx).map_err(ModelError::io(&p))?;
    // The streaming form, or none: a package rewritten without one keeps no stale files.
    let stream = model.to_onnx_stream(&card.arch)?;
    for (name, bytes) in [STREAM_FRAMES, STREAM_HEAD].into_iter().zip([
        stream.as_ref().map(|s| &s.frames),
        stream.as_ref().map(|s| &s.head),
    ]) {
        let p = dir.join(name);
        match bytes {
            Some(b) => std::fs::write(&p, b).map_err(ModelError::io(&p))?,
            None if p.exists() => std::fs::remove_file(&p).map_err(ModelError::io(&p))?,
            None => {}
        }
    }
    remove_nnef_archives(dir)?;
    card.write(dir)
}

/// Removes the NNEF archives of the package in `dir` (`hush-host export --format nnef`), the
/// pulsed trunk's too: a package rewritten with new weights would make them stale, and a
/// device built without ONNX reads them in its place.
pub fn remove_nnef_archives(dir: &Path) -> Result<(), ModelError> {
    use crate::export::nnef::{
        is_pulsed_trunk_archive, NNEF, STREAM_FRAMES_NNEF, STREAM_HEAD_NNEF,
    };
    for entry in std::fs::read_dir(dir).map_err(ModelError::io(dir))? {
        let p = entry.map_err(ModelError::io(dir))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if [NNEF, STREAM_FRAMES_NNEF, STREAM_HEAD_NNEF].contains(&name)
            || is_pulsed_trunk_archive(name)
        {
            std::fs::remove_file(&p).map_err(ModelError::io(&p))?;
        }
    }
    Ok(())
}

/// Reads a package's card and rebuilds its burn model from `weights.safetensors` on
/// `device`, checking every tensor against the architecture and the card.
pub fn load_package(dir: &Path, device: &Device) -> Result<(ModelCard, KwsModel), ModelError> {
    let card = ModelCard::read(dir)?;
    let model = load_weights_as(dir, &card, &card.arch, device)?;
    Ok((card, model))
}

/// Builds `arch` on `device` with the weights of the package in `dir` (its `card`, read
/// already): the card's architecture, or another form of it with the same weights
/// ([`ArchConfig::streaming_form`]). Every tensor is checked against `arch` and the card.
pub fn load_weights_as(
    dir: &Path,
    card: &ModelCard,
    arch: &ArchConfig,
    device: &Device,
) -> Result<KwsModel, ModelError> {
    // Building the model draws initial values from burn's shared random state.
    let _rng = crate::rng::hold_backend_rng();
    let weights: PathBuf = dir.join(WEIGHTS);
    let tensors = load_safetensors(&weights)?;
    let model = arch.init(device)?;
    let model = model.load_tensors(TensorSource::new(&weights, tensors), arch.name())?;
    check_parameters(dir, &card.parameters, &model.named_tensors()?)?;
    Ok(model)
}

/// Recognition quality on one split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AsrSplitMetrics {
    /// Utterances scored.
    pub utterances: usize,
    /// Reference words.
    pub words: usize,
    /// Word error rate of greedy decoding.
    pub greedy_wer: f64,
    /// Character error rate of greedy decoding.
    pub greedy_cer: f64,
    /// Beam width of the beam-search numbers (absent: not run).
    #[serde(default)]
    pub beam_width: Option<usize>,
    /// Word error rate of prefix beam search.
    #[serde(default)]
    pub beam_wer: Option<f64>,
    /// Character error rate of prefix beam search.
    #[serde(default)]
    pub beam_cer: Option<f64>,
}

/// Metrics of a speech recogniser.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AsrMetrics {
    /// Per split (`train`, `validation`, `test`).
    pub splits: BTreeMap<String, AsrSplitMetrics>,
}

/// `model.json` of a speech recogniser (task `asr`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsrCard {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`Task::Asr`].
    pub task: Task,
    /// Architecture and its configuration.
    pub arch: AsrArchConfig,
    /// Feature front-end configuration (hush-device's `FeatureConfig`, opaque here).
    pub features: serde_json::Value,
    /// Output symbols in index order, blank first.
    pub vocabulary: Vec<String>,
    /// Trainable parameter count.
    pub num_trainable: usize,
    /// Every tensor of `weights.safetensors`.
    pub parameters: Vec<ParamInfo>,
    /// How it was trained.
    #[serde(default)]
    pub provenance: Option<Provenance>,
    /// How well it does.
    #[serde(default)]
    pub metrics: Option<AsrMetrics>,
}

impl AsrCard {
    /// A card for `model`, parameters filled in from it.
    pub fn new(
        arch: AsrArchConfig,
        features: serde_json::Value,
        vocabulary: &Vocabulary,
        model: &CtcGru,
    ) -> Result<Self, ModelError> {
        let (parameters, num_trainable) = param_infos(model.named_tensors()?);
        Ok(Self {
            format: FORMAT.into(),
            task: Task::Asr,
            arch,
            features,
            vocabulary: vocabulary.symbols().to_vec(),
            num_trainable,
            parameters,
            provenance: None,
            metrics: None,
        })
    }

    /// The card's vocabulary, checked.
    pub fn vocabulary(&self) -> Result<Vocabulary, String> {
        Vocabulary::from_symbols(&self.vocabulary)
    }

    /// Checks the card against itself: format, task, vocabulary against the
    /// architecture's outputs.
    pub fn validate(&self, path: &Path) -> Result<(), ModelError> {
        let bad = |reason: String| ModelError::BadPackage {
            path: path.to_path_buf(),
            reason,
        };
        if self.format != FORMAT {
            return Err(bad(format!(
                "format is `{}`, expected `{FORMAT}`",
                self.format
            )));
        }
        if self.task != Task::Asr {
            return Err(bad(format!(
                "task is `{}`, expected `asr`",
                self.task.name()
            )));
        }
        self.vocabulary().map_err(bad)?;
        if self.vocabulary.len() != self.arch.vocab() {
            return Err(bad(format!(
                "{} vocabulary symbols but the {} architecture has {} outputs",
                self.vocabulary.len(),
                self.arch.name(),
                self.arch.vocab()
            )));
        }
        Ok(())
    }

    /// Reads and validates `dir/model.json` (a speech recogniser's: a keyword spotter's
    /// package is refused, naming its task).
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        let (path, text) = read_card_text(dir, Task::Asr)?;
        let card: AsrCard = serde_json::from_str(&text).map_err(|e| ModelError::BadPackage {
            path: path.clone(),
            reason: format!("not a hush ASR model.json: {e}"),
        })?;
        card.validate(&path)?;
        Ok(card)
    }

    /// Writes `dir/model.json` (pretty-printed).
    pub fn write(&self, dir: &Path) -> Result<(), ModelError> {
        write_card_json(dir, self)
    }
}

/// Writes a whole ASR package: `weights.safetensors`, `model.onnx` (from `model` in
/// inference mode) and `model.json`. Creates `dir` if needed.
pub fn write_asr_package(dir: &Path, card: &AsrCard, model: &CtcGru) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(ModelError::io(dir))?;
    save_safetensors(&dir.join(WEIGHTS), &model.named_tensors()?)?;
    let onnx = model.to_onnx(&card.arch)?;
    let p = dir.join(ONNX);
    std::fs::write(&p, onnx).map_err(ModelError::io(&p))?;
    remove_nnef_archives(dir)?;
    card.write(dir)
}

/// Reads an ASR package's card and rebuilds its burn model from `weights.safetensors` on
/// `device`, checking every tensor against the architecture and the card.
pub fn load_asr_package(dir: &Path, device: &Device) -> Result<(AsrCard, CtcGru), ModelError> {
    let card = AsrCard::read(dir)?;
    let weights: PathBuf = dir.join(WEIGHTS);
    let tensors = load_safetensors(&weights)?;
    // Building the model draws from burn's random state when its parameters are first used.
    let _rng = crate::rng::hold_backend_rng();
    let model = card
        .arch
        .init(device)?
        .load_tensors(TensorSource::new(&weights, tensors), card.arch.name())?;
    check_parameters(dir, &card.parameters, &model.named_tensors()?)?;
    Ok((card, model))
}
