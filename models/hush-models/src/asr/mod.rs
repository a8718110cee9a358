//! Speech recognition: CTC acoustic models over characters, their decoders and error
//! rates. Kept apart from the keyword spotters of [`crate::arch`] (whose per-example DP
//! machinery walks every KWS architecture): a recogniser maps a variable-length utterance
//! to per-step log-probabilities, not a clip to one label.
//!
//! - [`vocab`]: the character set (blank, space, apostrophe, a–z) and transcript
//!   normalisation;
//! - [`ctc_gru`]: the `ctc-gru` architecture (conv subsampling ×4 or ×2 + GRU + linear);
//! - [`bestrq`]: BEST-RQ self-supervised pretraining of its encoder (random-projection
//!   quantizer, span masking, masked-step prediction);
//! - [`decode`]: greedy and prefix-beam-search CTC decoding (host and device);
//! - [`wer`]: word and character error rates.
//!
//! ```
//! use burn::tensor::{Device, Tensor};
//! use hush_models::asr::{AsrArchConfig, Vocabulary};
//! let cfg = AsrArchConfig::default_for("ctc-gru-small", 40, Vocabulary::characters().len()).unwrap();
//! let model = cfg.init(&Device::flex()).unwrap();
//! let log_probs = model.forward(Tensor::zeros([1, 100, 40], &Device::flex()));
//! assert_eq!(log_probs.dims(), [1, 25, 29]);
//! ```

pub mod bestrq;
pub mod ctc_gru;
pub mod decode;
pub mod vocab;
pub mod wer;

use burn::nn::loss::CTCLossConfig;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::arch::is_trainable;
use crate::arch::layers::{read_grads, read_values, write_grads, NamedModule, TensorVisitor};
use crate::arch::onnx::{OnnxGraph, INPUT};
use crate::checkpoint::{NamedTensor, TensorSource};
use crate::ModelError;

pub use ctc_gru::{output_steps, output_steps_at, CtcGru, CtcGruConfig};
pub use vocab::{normalize_transcript, Vocabulary, BLANK};

/// A speech recogniser's architecture and configuration, as stored in `model.json`
/// (`{"name": "ctc-gru", …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "kebab-case")]
pub enum AsrArchConfig {
    /// Conv subsampling ×4 (or ×2) + unidirectional GRU + linear, trained with CTC.
    CtcGru(CtcGruConfig),
}

/// Names accepted by [`AsrArchConfig::default_for`]: `ctc-gru` (1.35 M parameters over
/// 80 bins), `ctc-gru-s2` (the same tensors at time subsampling 2: one step per 20 ms)
/// and `ctc-gru-small` (the same layers, smaller; for tests and quick runs).
pub const ASR_ARCH_NAMES: [&str; 3] = ["ctc-gru", "ctc-gru-s2", "ctc-gru-small"];

impl AsrArchConfig {
    /// The configuration called `name` (one of [`ASR_ARCH_NAMES`]) over `bins` values
    /// per frame and `vocab` outputs.
    pub fn default_for(name: &str, bins: usize, vocab: usize) -> Result<Self, ModelError> {
        match name {
            "ctc-gru" => Ok(Self::CtcGru(CtcGruConfig::standard(bins, vocab))),
            "ctc-gru-s2" => Ok(Self::CtcGru(CtcGruConfig::standard_s2(bins, vocab))),
            "ctc-gru-small" => Ok(Self::CtcGru(CtcGruConfig::small(bins, vocab))),
            _ => Err(ModelError::config(
                name,
                "name",
                format!(
                    "unknown ASR architecture; expected one of {}",
                    ASR_ARCH_NAMES.join(", ")
                ),
            )),
        }
    }

    /// The architecture's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::CtcGru(_) => "ctc-gru",
        }
    }

    /// Values per input frame.
    pub fn bins(&self) -> usize {
        match self {
            Self::CtcGru(c) => c.bins,
        }
    }

    /// Output symbols, blank included.
    pub fn vocab(&self) -> usize {
        match self {
            Self::CtcGru(c) => c.vocab,
        }
    }

    /// Whether `other` has the same tensors, name by name and shape by shape: the same
    /// configuration up to the time subsampling (a conv's stride, not a tensor). A model
    /// of one subsampling can then start training at the other.
    pub fn same_tensors(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::CtcGru(a), Self::CtcGru(b)) => {
                CtcGruConfig {
                    subsampling: b.subsampling,
                    ..a.clone()
                } == *b
            }
        }
    }

    /// Input frames per output step in time.
    pub fn subsampling(&self) -> usize {
        match self {
            Self::CtcGru(c) => c.subsampling,
        }
    }

    /// Output steps for `frames` input frames.
    pub fn output_steps(&self, frames: usize) -> usize {
        output_steps_at(frames, self.subsampling())
    }

    /// Builds a freshly initialised model on `device`.
    pub fn init(&self, device: &Device) -> Result<CtcGru, ModelError> {
        match self {
            Self::CtcGru(c) => c.init(device),
        }
    }
}

impl NamedModule for CtcGru {
    fn visit_tensors<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError> {
        self.visit(v)
    }
}

impl CtcGru {
    /// Every tensor, named per layer as in `weights.safetensors`, in layer order.
    pub fn named_tensors(&self) -> Result<Vec<NamedTensor>, ModelError> {
        read_values(self)
    }

    /// The gradient of every trainable tensor in `grads`, named as in
    /// [`CtcGru::named_tensors`] (zeros where the loss did not reach).
    pub fn named_grads(&self, grads: &GradientsParams) -> Result<Vec<NamedTensor>, ModelError> {
        read_grads(self, grads)
    }

    /// Gradients given by name as burn [`GradientsParams`]; tensors left out get none, so
    /// an optimizer leaves them unchanged (layer freezing).
    pub fn grads_params(&self, grads: &[NamedTensor]) -> Result<GradientsParams, ModelError> {
        write_grads(self, grads)
    }

    /// Loads every tensor from `src`; nothing may be missing or left over.
    pub fn load_tensors(self, mut src: TensorSource, arch: &str) -> Result<Self, ModelError> {
        let m = self.load(&mut src)?;
        src.finish(arch)?;
        Ok(m)
    }

    /// Sets the fixed input normalisation (per-bin mean and inverse std).
    pub fn set_input_norm(&mut self, mean: &[f32], scale: &[f32]) -> Result<(), ModelError> {
        let [bins] = self.input_norm.mean.value().dims();
        if mean.len() != bins || scale.len() != bins {
            return Err(ModelError::ShapeMismatch {
                name: "input_norm".into(),
                expected: vec![bins],
                got: vec![mean.len(), scale.len()],
            });
        }
        let device = self.input_norm.mean.value().device();
        self.input_norm.set(mean, scale, &device);
        Ok(())
    }

    /// Number of trainable parameters (the input normalisation not counted).
    pub fn num_trainable(&self) -> Result<usize, ModelError> {
        Ok(self
            .named_tensors()?
            .iter()
            .filter(|t| is_trainable(&t.name))
            .map(NamedTensor::len)
            .sum())
    }

    /// The model as an encoded ONNX `ModelProto` (opset 17): input `features`
    /// `[1, frames, bins]` (frames symbolic), output `log_probs` `[1, ⌈frames/4⌉, vocab]`.
    pub fn to_onnx(&self, cfg: &AsrArchConfig) -> Result<Vec<u8>, ModelError> {
        let mut g = OnnxGraph::new();
        let scores = self.write_onnx(&mut g, INPUT)?;
        Ok(g.finish_ctc(&scores, cfg.bins(), cfg.vocab(), cfg.name()))
    }
}

/// A batch of utterances in host memory for CTC training: features padded to the longest
/// utterance, `[batch, frames, bins]` row-major, and each utterance's frame count and
/// label sequence (no blanks).
#[derive(Debug, Clone, PartialEq)]
pub struct CtcBatch {
    /// Features, `batch × frames × bins` (padding frames after each utterance's end).
    pub features: Vec<f32>,
    /// Frames of each utterance (≤ `frames`).
    pub lengths: Vec<usize>,
    /// Label sequence of each utterance.
    pub labels: Vec<Vec<usize>>,
    /// Padded frame count.
    pub frames: usize,
    /// Values per frame.
    pub bins: usize,
    /// For each utterance, the output steps before its speech begins, which must all be
    /// blank (empty: no constraint). A causal recogniser that may spell before it hears
    /// learns to guess an utterance's first word from how sentences usually begin; this
    /// takes that path away (see [`ctc_loss`]).
    pub leading_blanks: Vec<usize>,
}

/// Log-probability added to every non-blank symbol of a step that must be blank: far
/// below any real one, finite so that no sum over paths becomes NaN.
const FORBIDDEN: f32 = -1.0e4;

/// Steps of CTC output needed for `labels`: one per label plus one blank between each
/// pair of equal neighbours.
pub fn ctc_min_steps(labels: &[usize]) -> usize {
    labels.len() + labels.windows(2).filter(|w| w[0] == w[1]).count()
}

impl CtcBatch {
    fn check(&self, vocab: usize, subsampling: usize) -> Result<(), ModelError> {
        let bad = |reason: String| Err(ModelError::BadBatch { reason });
        let b = self.lengths.len();
        if b == 0 || self.labels.len() != b {
            return bad(format!(
                "{b} lengths and {} label sequences",
                self.labels.len()
            ));
        }
        if self.features.len() != b * self.frames * self.bins {
            return bad(format!(
                "{} feature values for {b}×{}×{}",
                self.features.len(),
                self.frames,
                self.bins
            ));
        }
        if !self.leading_blanks.is_empty() && self.leading_blanks.len() != b {
            return bad(format!(
                "{b} utterances and {} leading-blank counts",
                self.leading_blanks.len()
            ));
        }
        for (i, (&len, labels)) in self.lengths.iter().zip(&self.labels).enumerate() {
            if len == 0 || len > self.frames {
                return bad(format!("utterance {i}: {len} frames of {}", self.frames));
            }
            if labels.is_empty() {
                return bad(format!("utterance {i}: empty transcript"));
            }
            if let Some(l) = labels.iter().find(|&&l| l == BLANK || l >= vocab) {
                return bad(format!(
                    "utterance {i}: label {l} is blank or outside 1..{vocab}"
                ));
            }
            let lead = self.leading_blanks.get(i).copied().unwrap_or(0);
            let steps = output_steps_at(len, subsampling).saturating_sub(lead);
            if ctc_min_steps(labels) > steps {
                return bad(format!(
                    "utterance {i}: {} labels need ≥ {} output steps, {len} frames give {steps}",
                    labels.len(),
                    ctc_min_steps(labels)
                ));
            }
        }
        Ok(())
    }
}

/// The batch's CTC loss on `model`: the sum over utterances of `−log p(labels | audio)`
/// divided by the total label count (PyTorch's `reduction = "mean"` divides per utterance
/// first; this weights utterances by length). Inputs are checked first: every utterance
/// needs a non-empty transcript that fits its output steps.
pub fn ctc_loss(
    model: &CtcGru,
    batch: &CtcBatch,
    device: &Device,
) -> Result<Tensor<1>, ModelError> {
    let vocab = model.out.weight.dims()[1];
    batch.check(vocab, model.subsampling)?;
    let b = batch.lengths.len();
    let x = Tensor::<3>::from_data(
        TensorData::new(batch.features.clone(), [b, batch.frames, batch.bins]),
        device,
    );
    let mut log_probs = model.forward(x).swap_dims(0, 1); // [T', B, V]
    if batch.leading_blanks.iter().any(|&n| n > 0) {
        // Paths that spell a label before the speech begins get (almost) no probability,
        // so the loss charges `−log p(blank)` on those steps instead.
        let [steps, _, _] = log_probs.dims();
        let mut mask = vec![0f32; steps * b * vocab];
        for (i, &n) in batch.leading_blanks.iter().enumerate() {
            for t in 0..n.min(steps) {
                for (s, m) in mask[(t * b + i) * vocab..(t * b + i + 1) * vocab]
                    .iter_mut()
                    .enumerate()
                {
                    if s != BLANK {
                        *m = FORBIDDEN;
                    }
                }
            }
        }
        log_probs =
            log_probs + Tensor::<3>::from_data(TensorData::new(mask, [steps, b, vocab]), device);
    }
    let max_len = batch.labels.iter().map(Vec::len).max().unwrap_or(1);
    let mut targets = vec![0i64; b * max_len];
    for (i, l) in batch.labels.iter().enumerate() {
        for (j, &v) in l.iter().enumerate() {
            targets[i * max_len + j] = v as i64;
        }
    }
    let targets = Tensor::<2, Int>::from_data(TensorData::new(targets, [b, max_len]), device);
    let input_lengths: Vec<i64> = batch
        .lengths
        .iter()
        .map(|&n| model.output_steps(n) as i64)
        .collect();
    let target_lengths: Vec<i64> = batch.labels.iter().map(|l| l.len() as i64).collect();
    let total: usize = batch.labels.iter().map(Vec::len).sum();
    let loss = CTCLossConfig::new().init().forward(
        log_probs,
        targets,
        Tensor::<1, Int>::from_data(TensorData::new(input_lengths, [b]), device),
        Tensor::<1, Int>::from_data(TensorData::new(target_lengths, [b]), device),
    );
    Ok(loss.sum().div_scalar(total as f64))
}

/// DP-SGD's sum of per-utterance clipped CTC gradients: each utterance of `batch` (its own
/// frames only, no padding) gets its own forward and backward pass (the per-example
/// loop, [`crate::dp::clipped_sum_by_loop`]: a GRU has no vectorized rule here), its
/// gradient of the per-label loss is clipped (or normalised) to `bounds`, and the clipped
/// gradients are summed.
pub fn ctc_clipped_sum(
    model: &CtcGru,
    batch: &CtcBatch,
    bounds: &crate::dp::ClipBounds,
    bounding: crate::dp::Bounding,
    device: &Device,
) -> Result<crate::dp::ClippedSum, ModelError> {
    let layout = read_values(model)?;
    let per = batch.frames * batch.bins;
    crate::dp::clipped_sum_by_loop(&layout, bounds, bounding, batch.lengths.len(), |i| {
        let n = batch.lengths[i];
        let one = CtcBatch {
            features: batch.features[i * per..i * per + n * batch.bins].to_vec(),
            lengths: vec![n],
            labels: vec![batch.labels[i].clone()],
            frames: n,
            bins: batch.bins,
            leading_blanks: batch
                .leading_blanks
                .get(i)
                .map(|&n| vec![n])
                .unwrap_or_default(),
        };
        let loss = ctc_loss(model, &one, device)?;
        let value = crate::step::scalar(loss.clone())?;
        let grads = GradientsParams::from_grads(loss.backward(), model);
        Ok((value, read_grads(model, &grads)?))
    })
}

/// Per-step log-probabilities of one utterance (`frames × bins` features) on a model in
/// inference mode: `output_steps(frames) × vocab`, row-major.
pub fn log_probs(
    model: &CtcGru,
    features: &[f32],
    bins: usize,
    device: &Device,
) -> Result<Vec<f32>, ModelError> {
    if bins == 0 || features.is_empty() || !features.len().is_multiple_of(bins) {
        return Err(ModelError::BadBatch {
            reason: format!(
                "{} feature values are not whole frames of {bins}",
                features.len()
            ),
        });
    }
    let frames = features.len() / bins;
    let x = Tensor::<3>::from_data(
        TensorData::new(features.to_vec(), [1, frames, bins]),
        device,
    );
    crate::arch::layers::named("log_probs", model.forward(x)).map(|t| t.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_subsampling_is_a_stride_not_a_tensor() {
        let s4 = AsrArchConfig::default_for("ctc-gru", 80, 29).unwrap();
        let s2 = AsrArchConfig::default_for("ctc-gru-s2", 80, 29).unwrap();
        let small = AsrArchConfig::default_for("ctc-gru-small", 80, 29).unwrap();
        assert_ne!(s4, s2);
        assert!(s4.same_tensors(&s2) && s2.same_tensors(&s4));
        assert!(!s4.same_tensors(&small));
        assert_eq!((s4.output_steps(37), s2.output_steps(37)), (10, 19));
        // The same names and shapes, so one's weights load into the other.
        let device = Device::flex();
        let shapes = |c: &AsrArchConfig| -> Vec<(String, Vec<usize>)> {
            let m = c.init(&device).unwrap();
            let tensors = m.named_tensors().unwrap();
            tensors.into_iter().map(|t| (t.name, t.shape)).collect()
        };
        assert_eq!(shapes(&s4), shapes(&s2));
        // A model.json written before the option existed reads as subsampling 4.
        let mut json = serde_json::to_value(&s4).unwrap();
        json.as_object_mut().unwrap().remove("subsampling").unwrap();
        assert_eq!(serde_json::from_value::<AsrArchConfig>(json).unwrap(), s4);
    }
}
