//! The pretrained-encoder directory: what `hush-host pretrain` writes and
//! `hush-host train --task asr --init DIR` reads.
//!
//! ```text
//! ENCODER_DIR/
//!   encoder.json         EncoderCard: format, architecture + config, feature config,
//!                        BEST-RQ config (quantizer seed inside), encoder tensor names and
//!                        shapes, loss curve, privacy report (DP runs), provenance
//!   weights.safetensors  the encoder's tensors (every `ctc-gru` tensor but `out.*`),
//!                        named as in the recogniser's own weights.safetensors
//! ```
//!
//! [`load_encoder_into`] puts the encoder's tensors into a freshly initialised recogniser
//! of the same architecture; its output layer keeps its initial weights.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::asr::bestrq::BestRqConfig;
use crate::asr::ctc_gru::is_encoder_tensor;
use crate::asr::{AsrArchConfig, CtcGru};
use crate::checkpoint::{load_safetensors, save_safetensors, NamedTensor, TensorSource};
use crate::package::{param_infos, ParamInfo, Provenance, WEIGHTS};
use crate::ModelError;

/// The format tag of `encoder.json`.
pub const ENCODER_FORMAT: &str = "hush-encoder/1";
/// The card's file name.
pub const ENCODER_JSON: &str = "encoder.json";

/// One pretraining epoch's losses (BEST-RQ cross-entropy on masked steps, in nats).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PretrainEpoch {
    /// 1-based epoch (0: after the public warm start of a DP run).
    pub epoch: usize,
    /// Mean training loss (the DP phase: over the sampled private utterances, before
    /// clipping and noise; epoch 0: the public warm start's last epoch).
    pub train_loss: f64,
    /// Loss on the validation split (fixed masks).
    pub val_loss: f64,
    /// Learning rate at the end of the epoch.
    pub lr: f64,
}

/// `encoder.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EncoderCard {
    /// Always [`ENCODER_FORMAT`].
    pub format: String,
    /// The recogniser architecture whose encoder this is.
    pub arch: AsrArchConfig,
    /// Feature front-end configuration (hush-device's `FeatureConfig`, opaque here).
    pub features: serde_json::Value,
    /// BEST-RQ options, the quantizer seed among them.
    pub bestrq: BestRqConfig,
    /// Every tensor of `weights.safetensors`.
    pub parameters: Vec<ParamInfo>,
    /// Trainable encoder parameters.
    pub num_trainable: usize,
    /// Per-epoch losses.
    pub loss_curve: Vec<PretrainEpoch>,
    /// The privacy report of a DP run (the host's `PrivacyReport`, opaque here).
    #[serde(default)]
    pub privacy: Option<serde_json::Value>,
    /// How it was trained.
    #[serde(default)]
    pub provenance: Option<Provenance>,
}

impl EncoderCard {
    /// A card for the encoder `tensors` of an `arch` model.
    pub fn new(
        arch: AsrArchConfig,
        features: serde_json::Value,
        bestrq: BestRqConfig,
        tensors: &[NamedTensor],
    ) -> Self {
        let (parameters, num_trainable) = param_infos(tensors.to_vec());
        Self {
            format: ENCODER_FORMAT.into(),
            arch,
            features,
            bestrq,
            parameters,
            num_trainable,
            loss_curve: Vec::new(),
            privacy: None,
            provenance: None,
        }
    }

    /// Reads and checks `dir/encoder.json`.
    pub fn read(dir: &Path) -> Result<Self, ModelError> {
        let path = dir.join(ENCODER_JSON);
        if !dir.is_dir() {
            return Err(ModelError::BadPackage {
                path: dir.to_path_buf(),
                reason: "not a directory; a pretrained encoder is a directory holding \
                         encoder.json and weights.safetensors (from `hush-host pretrain`)"
                    .into(),
            });
        }
        let text = std::fs::read_to_string(&path).map_err(ModelError::io(&path))?;
        let card: Self = serde_json::from_str(&text).map_err(|e| ModelError::BadPackage {
            path: path.clone(),
            reason: format!("not a hush encoder.json: {e}"),
        })?;
        if card.format != ENCODER_FORMAT {
            return Err(ModelError::BadPackage {
                path,
                reason: format!("format is `{}`, expected `{ENCODER_FORMAT}`", card.format),
            });
        }
        Ok(card)
    }
}

/// Writes `dir/encoder.json` and `dir/weights.safetensors` (the encoder `tensors`);
/// creates `dir` if needed.
pub fn write_encoder(
    dir: &Path,
    card: &EncoderCard,
    tensors: &[NamedTensor],
) -> Result<(), ModelError> {
    std::fs::create_dir_all(dir).map_err(ModelError::io(dir))?;
    save_safetensors(&dir.join(WEIGHTS), tensors)?;
    let path = dir.join(ENCODER_JSON);
    let text = serde_json::to_string_pretty(card).map_err(|e| ModelError::BadPackage {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    std::fs::write(&path, text + "\n").map_err(ModelError::io(&path))
}

/// Reads a pretrained encoder: its card and its tensors (checked against the card).
pub fn read_encoder(dir: &Path) -> Result<(EncoderCard, Vec<NamedTensor>), ModelError> {
    let card = EncoderCard::read(dir)?;
    let weights: PathBuf = dir.join(WEIGHTS);
    let tensors = load_safetensors(&weights)?;
    // The file keeps its own order: compare names and shapes as sets.
    let mut listed: Vec<(&str, &[usize])> = card
        .parameters
        .iter()
        .map(|p| (p.name.as_str(), p.shape.as_slice()))
        .collect();
    let mut found: Vec<(&str, &[usize])> = tensors
        .iter()
        .map(|t| (t.name.as_str(), t.shape.as_slice()))
        .collect();
    listed.sort_unstable();
    found.sort_unstable();
    if listed != found {
        return Err(ModelError::BadPackage {
            path: weights,
            reason: format!("its tensors do not match the `parameters` of {ENCODER_JSON}"),
        });
    }
    Ok((card, tensors))
}

/// `model` with every encoder tensor taken from `encoder` (names and shapes checked;
/// nothing may be missing or left over); its output layer is kept. `origin` names the
/// encoder's file in errors.
pub fn load_encoder_into(
    model: CtcGru,
    encoder: Vec<NamedTensor>,
    arch: &str,
    origin: &Path,
) -> Result<CtcGru, ModelError> {
    if let Some(t) = encoder.iter().find(|t| !is_encoder_tensor(&t.name)) {
        return Err(ModelError::UnexpectedTensor {
            path: origin.to_path_buf(),
            name: t.name.clone(),
            arch: format!("{arch} encoder"),
        });
    }
    let mut tensors = encoder;
    tensors.extend(
        model
            .named_tensors()?
            .into_iter()
            .filter(|t| !is_encoder_tensor(&t.name)),
    );
    model.load_tensors(TensorSource::new(origin, tensors), arch)
}
