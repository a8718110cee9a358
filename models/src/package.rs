//! The model package: one directory that every `--model` flag takes.
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

/// What the model does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// Keyword spotting: one label per fixed-length clip.
    Kws,
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
    /// The epoch whose weights were kept (best validation accuracy).
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
        let parameters: Vec<ParamInfo> = model
            .named_tensors()?
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

    /// Reads and validates `dir/model.json`.
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        if !dir.is_dir() {
            return Err(ModelError::BadPackage {
                path: dir.to_path_buf(),
                reason: "not a directory; a model package is a directory holding model.json, \
                         weights.safetensors and model.onnx"
                    .into(),
            });
        }
        let path = dir.join(MODEL_JSON);
        let text = std::fs::read_to_string(&path).map_err(ModelError::io(&path))?;
        let card: ModelCard = serde_json::from_str(&text).map_err(|e| ModelError::BadPackage {
            path: path.clone(),
            reason: format!("not a hush model.json: {e}"),
        })?;
        card.validate(&path)?;
        Ok(card)
    }

    /// Writes `dir/model.json` (pretty-printed).
    pub fn write(&self, dir: &Path) -> Result<(), ModelError> {
        let path = dir.join(MODEL_JSON);
        let text = serde_json::to_string_pretty(self).map_err(|e| ModelError::BadPackage {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&path, text + "\n").map_err(ModelError::io(&path))
    }
}

/// Writes a whole package: `weights.safetensors`, `model.onnx` (from `model` in
/// inference mode) and `model.json`. Creates `dir` if needed.
pub fn write_package(dir: &Path, card: &ModelCard, model: &KwsModel) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(ModelError::io(dir))?;
    let tensors = model.named_tensors()?;
    save_safetensors(&dir.join(WEIGHTS), &tensors)?;
    let onnx = model.to_onnx(&card.arch)?;
    let p = dir.join(ONNX);
    std::fs::write(&p, onnx).map_err(ModelError::io(&p))?;
    card.write(dir)
}

/// Reads a package's card and rebuilds its burn model from `weights.safetensors` on
/// `device`, checking every tensor against the architecture and the card.
pub fn load_package(dir: &Path, device: &Device) -> Result<(ModelCard, KwsModel), ModelError> {
    let card = ModelCard::read(dir)?;
    let weights: PathBuf = dir.join(WEIGHTS);
    let tensors = load_safetensors(&weights)?;
    let model = card.arch.init(device)?;
    let model = model.load_tensors(TensorSource::new(&weights, tensors), card.arch.name())?;
    let listed: Vec<(&str, &[usize])> = card
        .parameters
        .iter()
        .map(|p| (p.name.as_str(), p.shape.as_slice()))
        .collect();
    let actual = model.named_tensors()?;
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
    Ok((card, model))
}
