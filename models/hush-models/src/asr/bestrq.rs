//! BEST-RQ (Chiu et al. 2022, "Self-supervised learning with random-projection quantizer
//! for speech recognition"): self-supervised pretraining of the `ctc-gru` encoder on
//! unlabeled speech.
//!
//! - [`RandomProjectionQuantizer`]: a **frozen** random projection and random codebook,
//!   both drawn from a seed (ChaCha8) and never trained. Each utterance's features are
//!   normalised per bin over the utterance, then stacked [`SUBSAMPLING`] frames at a time,
//!   so there is one vector per encoder output step; the vector is projected, l2-normalised,
//!   and its target is the nearest l2-normalised codeword.
//! - [`span_mask`] and [`mask_features`]: spans of encoder steps are masked; their input
//!   frames are replaced by small noise (around the input normalisation's mean).
//! - [`BestRq`]: the encoder ([`CtcGru::encode`]) with a linear + softmax head over the
//!   codebook; [`bestrq_loss`] is the cross-entropy of the targets on masked steps only.
//! - [`bestrq_clipped_sum`]: per-example clipped gradients for DP pretraining, by the
//!   generic per-example loop ([`clipped_sum_by_loop`]).
//!
//! What this module does not own: the DP mechanism, sampling and accounting (the host's
//! pretraining loop assembles them from [`crate::dp`]), and fine-tuning (the host's CTC
//! trainer loads the encoder's tensors, [`is_encoder_tensor`]).
//!
//! ```
//! use hush_models::asr::bestrq::{BestRqConfig, RandomProjectionQuantizer};
//! let q = RandomProjectionQuantizer::new(20, &BestRqConfig::default()).unwrap();
//! let features = vec![0.5f32; 20 * 17]; // 17 frames of 20 bins
//! assert_eq!(q.targets(&features).unwrap().len(), 5); // ⌈17 / 4⌉ encoder steps
//! ```

use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use super::ctc_gru::{is_encoder_tensor, output_steps, CtcGru, SUBSAMPLING};
use crate::arch::layers::{read_grads, read_values, visit_linear, NamedModule, TensorVisitor};
use crate::checkpoint::NamedTensor;
use crate::dp::{clipped_sum_by_loop, Bounding, ClipBounds, ClippedSum};
use crate::step::scalar;
use crate::ModelError;

/// BEST-RQ options: the quantizer (its seed, codebook size and code width) and the masking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BestRqConfig {
    /// Codewords (classes of the prediction head).
    pub codebook_size: usize,
    /// Width of the projected vectors and codewords.
    pub code_dim: usize,
    /// Expected fraction of encoder steps masked, in `(0, 1)`.
    pub mask_fraction: f64,
    /// Encoder steps per masked span (each step is [`SUBSAMPLING`] input frames).
    pub mask_span: usize,
    /// Standard deviation of the noise masked frames hold, in units of the input
    /// normalisation (the frames are `mean + noise_std · N(0, 1) / scale` per bin).
    pub mask_noise_std: f32,
    /// Seed of the projection and the codebook.
    pub quantizer_seed: u64,
}

impl Default for BestRqConfig {
    /// 256 codewords of width 16, 40 % of the steps masked in spans of 2 steps (8 frames),
    /// mask noise 0.1, quantizer seed 0.
    fn default() -> Self {
        Self {
            codebook_size: 256,
            code_dim: 16,
            mask_fraction: 0.4,
            mask_span: 2,
            mask_noise_std: 0.1,
            quantizer_seed: 0,
        }
    }
}

impl BestRqConfig {
    /// Checks every option; errors name it.
    pub fn check(&self) -> Result<(), ModelError> {
        let bad = |option: &str, reason: &str| Err(ModelError::config("best-rq", option, reason));
        if self.codebook_size < 2 {
            return bad("codebook_size", "at least 2 codewords");
        }
        if self.code_dim == 0 {
            return bad("code_dim", "at least 1");
        }
        if !(self.mask_fraction > 0.0 && self.mask_fraction < 1.0) {
            return bad("mask_fraction", "in (0, 1)");
        }
        if self.mask_span == 0 {
            return bad("mask_span", "at least 1 step");
        }
        if !(self.mask_noise_std.is_finite() && self.mask_noise_std >= 0.0) {
            return bad("mask_noise_std", "finite and ≥ 0");
        }
        Ok(())
    }
}

/// The frozen random-projection quantizer: a `(SUBSAMPLING·bins) × code_dim` projection
/// (Xavier-uniform) and `codebook_size` unit-norm codewords (normalised standard normals),
/// drawn from the seed and never changed.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomProjectionQuantizer {
    bins: usize,
    code_dim: usize,
    projection: Vec<f32>,
    codebook: Vec<f32>,
}

fn unit(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

impl RandomProjectionQuantizer {
    /// The quantizer of `cfg` over features of `bins` values per frame.
    pub fn new(bins: usize, cfg: &BestRqConfig) -> Result<Self, ModelError> {
        cfg.check()?;
        if bins == 0 {
            return Err(ModelError::config("best-rq", "bins", "at least 1"));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.quantizer_seed);
        let fan_in = SUBSAMPLING * bins;
        let a = (6.0 / (fan_in + cfg.code_dim) as f64).sqrt();
        let projection = (0..fan_in * cfg.code_dim)
            .map(|_| rng.random_range(-a..a) as f32)
            .collect();
        let mut codebook: Vec<f32> = (0..cfg.codebook_size * cfg.code_dim)
            .map(|_| StandardNormal.sample(&mut rng))
            .collect();
        codebook.chunks_mut(cfg.code_dim).for_each(unit);
        Ok(Self {
            bins,
            code_dim: cfg.code_dim,
            projection,
            codebook,
        })
    }

    /// The projection, `(SUBSAMPLING·bins) × code_dim` row-major.
    pub fn projection(&self) -> &[f32] {
        &self.projection
    }

    /// The codebook, `codebook_size × code_dim` row-major, unit rows.
    pub fn codebook(&self) -> &[f32] {
        &self.codebook
    }

    /// The utterance `features` (`frames × bins`) normalised per bin over the utterance
    /// (mean 0, standard deviation 1) and stacked: one `SUBSAMPLING·bins` vector per
    /// encoder step, the last one zero-padded.
    pub fn stacked(&self, features: &[f32]) -> Result<Vec<Vec<f32>>, ModelError> {
        let bins = self.bins;
        if features.is_empty() || !features.len().is_multiple_of(bins) {
            return Err(ModelError::BadBatch {
                reason: format!(
                    "{} feature values are not whole frames of {bins}",
                    features.len()
                ),
            });
        }
        let frames = features.len() / bins;
        let mut mean = vec![0f64; bins];
        let mut sq = vec![0f64; bins];
        for row in features.chunks_exact(bins) {
            for (i, &v) in row.iter().enumerate() {
                mean[i] += f64::from(v);
                sq[i] += f64::from(v) * f64::from(v);
            }
        }
        let inv_std: Vec<f64> = mean
            .iter_mut()
            .zip(&sq)
            .map(|(m, s)| {
                *m /= frames as f64;
                1.0 / (s / frames as f64 - *m * *m).max(0.0).sqrt().max(1e-5)
            })
            .collect();
        Ok((0..output_steps(frames))
            .map(|step| {
                let mut v = vec![0f32; SUBSAMPLING * bins];
                for k in 0..SUBSAMPLING {
                    let f = step * SUBSAMPLING + k;
                    if f >= frames {
                        break;
                    }
                    for b in 0..bins {
                        let x = f64::from(features[f * bins + b]);
                        v[k * bins + b] = ((x - mean[b]) * inv_std[b]) as f32;
                    }
                }
                v
            })
            .collect())
    }

    /// The target code of every encoder step of the utterance `features` (`frames ×
    /// bins`): the nearest codeword (l2, both sides unit-normalised) to the projected
    /// stacked vector.
    pub fn targets(&self, features: &[f32]) -> Result<Vec<usize>, ModelError> {
        let d = self.code_dim;
        Ok(self
            .stacked(features)?
            .iter()
            .map(|x| {
                let mut y = vec![0f32; d];
                for (xi, row) in x.iter().zip(self.projection.chunks_exact(d)) {
                    if *xi != 0.0 {
                        y.iter_mut().zip(row).for_each(|(y, w)| *y += xi * w);
                    }
                }
                unit(&mut y);
                // For unit vectors the nearest in l2 is the largest dot product.
                let mut best = (0, f32::NEG_INFINITY);
                for (k, c) in self.codebook.chunks_exact(d).enumerate() {
                    let dot: f32 = c.iter().zip(&y).map(|(a, b)| a * b).sum();
                    if dot > best.1 {
                        best = (k, dot);
                    }
                }
                best.0
            })
            .collect())
    }
}

/// Which of `steps` encoder steps are masked: the steps are cut into spans of `span`
/// (after a random offset), and each span is masked with probability `fraction`, so the
/// expected masked fraction is `fraction`. At least one step is always masked.
pub fn span_mask(steps: usize, fraction: f64, span: usize, rng: &mut impl Rng) -> Vec<bool> {
    let mut mask = vec![false; steps];
    if steps == 0 {
        return mask;
    }
    let span = span.max(1);
    let offset = rng.random_range(0..span);
    let mut start = 0;
    let mut end = offset.max(1).min(steps);
    loop {
        if rng.random_bool(fraction.clamp(0.0, 1.0)) {
            mask[start..end].iter_mut().for_each(|m| *m = true);
        }
        if end >= steps {
            break;
        }
        start = end;
        end = (end + span).min(steps);
    }
    if !mask.contains(&true) {
        let s = rng.random_range(0..steps);
        mask[s..(s + span).min(steps)]
            .iter_mut()
            .for_each(|m| *m = true);
    }
    mask
}

/// Replaces the input frames of every masked step (`mask`, one entry per encoder step) of
/// the utterance `features` (`frames × bins`) by noise around the input normalisation:
/// `mean[b] + noise_std · N(0, 1) / scale[b]`, which the model's input normalisation maps
/// to `noise_std · N(0, 1)`.
pub fn mask_features(
    features: &mut [f32],
    bins: usize,
    mask: &[bool],
    (mean, scale): (&[f32], &[f32]),
    noise_std: f32,
    rng: &mut impl Rng,
) {
    let frames = features.len() / bins.max(1);
    for (step, _) in mask.iter().enumerate().filter(|(_, m)| **m) {
        for f in step * SUBSAMPLING..((step + 1) * SUBSAMPLING).min(frames) {
            for b in 0..bins {
                let z: f32 = StandardNormal.sample(rng);
                features[f * bins + b] = mean[b] + noise_std * z / scale[b].max(1e-12);
            }
        }
    }
}

/// One utterance made ready for BEST-RQ: masked features, the clean features' targets and
/// the mask.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskedUtterance {
    /// Masked features, `frames × bins`.
    pub features: Vec<f32>,
    /// Target code of every encoder step (from the clean features).
    pub targets: Vec<usize>,
    /// Which encoder steps are masked (the loss covers only these).
    pub mask: Vec<bool>,
}

impl MaskedUtterance {
    /// Quantizes the clean `features` (`frames × bins`), draws a span mask and masks them.
    /// `norm` is the model's input normalisation (per-bin mean and inverse std).
    pub fn new(
        quantizer: &RandomProjectionQuantizer,
        cfg: &BestRqConfig,
        features: &[f32],
        norm: (&[f32], &[f32]),
        rng: &mut impl Rng,
    ) -> Result<Self, ModelError> {
        let targets = quantizer.targets(features)?;
        let mask = span_mask(targets.len(), cfg.mask_fraction, cfg.mask_span, rng);
        let mut masked = features.to_vec();
        mask_features(
            &mut masked,
            quantizer.bins,
            &mask,
            norm,
            cfg.mask_noise_std,
            rng,
        );
        Ok(Self {
            features: masked,
            targets,
            mask,
        })
    }
}

/// The encoder with BEST-RQ's prediction head.
#[derive(Module, Debug)]
pub struct BestRq {
    /// The `ctc-gru` model whose encoder is pretrained (its output layer is not used).
    pub encoder: CtcGru,
    /// Linear head over the codebook.
    pub head: Linear,
}

impl BestRq {
    /// The encoder of `encoder` with a fresh head over `codebook_size` codes.
    pub fn new(encoder: CtcGru, codebook_size: usize, device: &Device) -> Self {
        let hidden = encoder.out.weight.dims()[0];
        Self {
            encoder,
            head: LinearConfig::new(hidden, codebook_size).init(device),
        }
    }

    /// `[B, T, bins]` (masked) features → `[B, ⌈T/4⌉, codebook_size]` code logits.
    pub fn logits(&self, x: Tensor<3>) -> Tensor<3> {
        let h = self.encoder.encode(x);
        let [b, t, d] = h.dims();
        let k = self.head.weight.dims()[1];
        self.head.forward(h.reshape([b * t, d])).reshape([b, t, k])
    }

    /// The encoder's tensors (every `ctc-gru` tensor but the output layer's), named as in
    /// the `ctc-gru` model's `weights.safetensors`.
    pub fn encoder_tensors(&self) -> Result<Vec<NamedTensor>, ModelError> {
        Ok(self
            .encoder
            .named_tensors()?
            .into_iter()
            .filter(|t| is_encoder_tensor(&t.name))
            .collect())
    }
}

/// Passes on only the encoder's tensors.
struct EncoderOnly<'a, V>(&'a mut V);

impl<V: TensorVisitor> TensorVisitor for EncoderOnly<'_, V> {
    fn param<const D: usize>(
        &mut self,
        name: &str,
        p: &burn::module::Param<Tensor<D>>,
    ) -> Result<(), ModelError> {
        if is_encoder_tensor(name) {
            self.0.param(name, p)?;
        }
        Ok(())
    }
    fn state<const D: usize>(
        &mut self,
        name: &str,
        s: &burn::module::RunningState<Tensor<D>>,
    ) -> Result<(), ModelError> {
        if is_encoder_tensor(name) {
            self.0.state(name, s)?;
        }
        Ok(())
    }
}

impl NamedModule for BestRq {
    /// The encoder's tensors under their `ctc-gru` names, then `head.weight`, `head.bias`.
    fn visit_tensors<V: TensorVisitor>(&self, v: &mut V) -> Result<(), ModelError> {
        self.encoder.visit(&mut EncoderOnly(v))?;
        visit_linear("head", &self.head, v)
    }
}

/// Utterances padded into one batch for [`bestrq_loss`].
#[derive(Debug, Clone, PartialEq)]
pub struct MaskedBatch {
    /// Features, `batch × frames × bins` (padding after each utterance's end).
    pub features: Vec<f32>,
    /// Per utterance, per encoder step of the padded batch: the target, where the step
    /// is masked and inside the utterance.
    pub targets: Vec<Vec<Option<usize>>>,
    /// Padded frame count.
    pub frames: usize,
    /// Values per frame.
    pub bins: usize,
}

impl MaskedBatch {
    /// Pads `utts` (each `frames × bins`) with `fill` frames (the per-bin mean, which the
    /// input normalisation maps to 0). The encoder is causal, so padding never reaches an
    /// utterance's own steps.
    pub fn new(utts: &[&MaskedUtterance], bins: usize, fill: &[f32]) -> Self {
        let frames = utts
            .iter()
            .map(|u| u.features.len() / bins)
            .max()
            .unwrap_or(0);
        let steps = output_steps(frames);
        let mut features = Vec::with_capacity(utts.len() * frames * bins);
        let mut targets = Vec::with_capacity(utts.len());
        for u in utts {
            features.extend_from_slice(&u.features);
            for _ in u.features.len() / bins..frames {
                features.extend_from_slice(fill);
            }
            let mut t = vec![None; steps];
            for (s, (&code, &m)) in u.targets.iter().zip(&u.mask).enumerate() {
                if m {
                    t[s] = Some(code);
                }
            }
            targets.push(t);
        }
        Self {
            features,
            targets,
            frames,
            bins,
        }
    }

    /// Masked steps over the batch.
    pub fn masked_steps(&self) -> usize {
        self.targets
            .iter()
            .flatten()
            .filter(|t| t.is_some())
            .count()
    }
}

/// BEST-RQ's loss: the mean over every masked step of the batch of `−log p(target)`
/// (unmasked and padding steps do not count). An empty batch or one with no masked step
/// is an error.
pub fn bestrq_loss(
    model: &BestRq,
    batch: &MaskedBatch,
    device: &Device,
) -> Result<Tensor<1>, ModelError> {
    let b = batch.targets.len();
    let total = batch.masked_steps();
    if b == 0 || total == 0 || batch.features.len() != b * batch.frames * batch.bins {
        return Err(ModelError::BadBatch {
            reason: format!(
                "{b} utterances, {total} masked steps, {} feature values for {b}×{}×{}",
                batch.features.len(),
                batch.frames,
                batch.bins
            ),
        });
    }
    let x = Tensor::<3>::from_data(
        TensorData::new(batch.features.clone(), [b, batch.frames, batch.bins]),
        device,
    );
    let logits = model.logits(x);
    let [_, steps, k] = logits.dims();
    // Weights 1/total on each masked step's target, 0 elsewhere.
    let mut w = vec![0f32; b * steps * k];
    for (i, t) in batch.targets.iter().enumerate() {
        for (s, code) in t.iter().enumerate().take(steps) {
            if let Some(c) = code {
                if *c >= k {
                    return Err(ModelError::BadBatch {
                        reason: format!("target {c} outside a codebook of {k}"),
                    });
                }
                w[(i * steps + s) * k + c] = 1.0 / total as f32;
            }
        }
    }
    let w = Tensor::<3>::from_data(TensorData::new(w, [b, steps, k]), device);
    Ok((log_softmax(logits, 2) * w).sum().neg().reshape([1]))
}

/// The sum over `utts` of each utterance's BEST-RQ gradient, clipped (or normalised) to
/// `bounds` (one forward and backward per utterance, on an autodiff `device`). The layers
/// `bounds` names are the ones trained; frozen layers are left out of the bounds and of
/// the sum.
pub fn bestrq_clipped_sum(
    model: &BestRq,
    utts: &[&MaskedUtterance],
    bounds: &ClipBounds,
    bounding: Bounding,
    device: &Device,
) -> Result<ClippedSum, ModelError> {
    let bins = model.encoder.input_norm.mean.value().dims()[0];
    let layout = read_values(model)?;
    clipped_sum_by_loop(&layout, bounds, bounding, utts.len(), |i| {
        let batch = MaskedBatch::new(&utts[i..=i], bins, &[]);
        let loss = bestrq_loss(model, &batch, device)?;
        let value = scalar(loss.clone())?;
        let grads = GradientsParams::from_grads(loss.backward(), model);
        Ok((value, read_grads(model, &grads)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asr::ctc_gru::CtcGruConfig;

    fn features(frames: usize, bins: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..frames * bins)
            .map(|i| ((i % bins) as f32 * 0.3).sin() + rng.random_range(-1.0..1.0))
            .collect()
    }

    #[test]
    fn targets_are_deterministic_for_a_seed() {
        let cfg = BestRqConfig::default();
        let x = features(37, 20, 1);
        let a = RandomProjectionQuantizer::new(20, &cfg).unwrap();
        let b = RandomProjectionQuantizer::new(20, &cfg).unwrap();
        assert_eq!(a, b);
        let t = a.targets(&x).unwrap();
        assert_eq!(t.len(), output_steps(37));
        assert_eq!(t, b.targets(&x).unwrap());
        assert!(t.iter().all(|&c| c < cfg.codebook_size));
        // Another seed, another quantizer (and, almost surely, other targets).
        let other = BestRqConfig {
            quantizer_seed: 1,
            ..cfg.clone()
        };
        let c = RandomProjectionQuantizer::new(20, &other).unwrap();
        assert_ne!(a.projection(), c.projection());
        assert_ne!(t, c.targets(&x).unwrap());
        // Targets use many codes, not one.
        let long = features(400, 20, 2);
        let distinct: std::collections::BTreeSet<usize> =
            a.targets(&long).unwrap().into_iter().collect();
        assert!(distinct.len() > 5, "{} distinct codes", distinct.len());
    }

    #[test]
    fn targets_ignore_per_utterance_gain_and_offset() {
        // Per-utterance normalisation: an affine change of every bin changes nothing.
        let q = RandomProjectionQuantizer::new(20, &BestRqConfig::default()).unwrap();
        let x = features(40, 20, 3);
        let y: Vec<f32> = x.iter().map(|v| 2.5 * v + 4.0).collect();
        assert_eq!(q.targets(&x).unwrap(), q.targets(&y).unwrap());
    }

    #[test]
    fn codebook_rows_are_unit_and_bad_input_is_an_error() {
        let q = RandomProjectionQuantizer::new(8, &BestRqConfig::default()).unwrap();
        for row in q.codebook().chunks(16) {
            let n: f32 = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((n - 1.0).abs() < 1e-5);
        }
        assert!(q.targets(&[1.0; 7]).is_err());
        assert!(q.targets(&[]).is_err());
        let bad = BestRqConfig {
            mask_fraction: 1.0,
            ..BestRqConfig::default()
        };
        assert!(RandomProjectionQuantizer::new(8, &bad).is_err());
    }

    #[test]
    fn masking_covers_the_configured_fraction() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for (fraction, span) in [(0.2, 1), (0.4, 2), (0.6, 5)] {
            let (mut masked, mut total) = (0usize, 0usize);
            for _ in 0..200 {
                let m = span_mask(250, fraction, span, &mut rng);
                masked += m.iter().filter(|&&x| x).count();
                total += m.len();
            }
            let got = masked as f64 / total as f64;
            assert!(
                (got - fraction).abs() < 0.03,
                "fraction {fraction}, span {span}: masked {got}"
            );
        }
        // Spans: with span 5, masked runs are (mostly) 5 long.
        let m = span_mask(1000, 0.3, 5, &mut rng);
        let starts = (1..m.len()).filter(|&i| m[i] && !m[i - 1]).count();
        let masked = m.iter().filter(|&&x| x).count();
        assert!(masked as f64 / starts.max(1) as f64 >= 5.0);
        // Never nothing masked.
        for _ in 0..50 {
            assert!(span_mask(3, 0.01, 2, &mut rng).contains(&true));
        }
    }

    #[test]
    fn masked_frames_hold_noise_around_the_mean() {
        let bins = 4;
        let mut x = vec![10.0f32; 12 * bins];
        let mask = [false, true, false];
        let mean = [1.0f32; 4];
        let scale = [2.0f32; 4];
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        mask_features(&mut x, bins, &mask, (&mean, &scale), 0.1, &mut rng);
        assert!(x[..4 * bins].iter().all(|&v| v == 10.0));
        assert!(x[8 * bins..].iter().all(|&v| v == 10.0));
        assert!(x[4 * bins..8 * bins]
            .iter()
            .all(|&v| (v - 1.0).abs() < 0.5 && v != 1.0));
    }

    #[test]
    fn loss_falls_and_the_quantizer_stays_frozen() {
        let device = Device::flex().autodiff();
        device.seed(5);
        let bins = 16;
        let cfg = BestRqConfig {
            codebook_size: 16,
            ..BestRqConfig::default()
        };
        let q = RandomProjectionQuantizer::new(bins, &cfg).unwrap();
        let before = q.clone();
        let encoder = CtcGruConfig::small(bins, 29).init(&device).unwrap();
        let mut model = BestRq::new(encoder, cfg.codebook_size, &device);
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let utts: Vec<MaskedUtterance> = (0..4)
            .map(|i| {
                let x = features(48, bins, 10 + i);
                MaskedUtterance::new(&q, &cfg, &x, (&[0.0; 16], &[1.0; 16]), &mut rng).unwrap()
            })
            .collect();
        let refs: Vec<&MaskedUtterance> = utts.iter().collect();
        let batch = MaskedBatch::new(&refs, bins, &[0.0; 16]);
        let mut opt = burn::optim::AdamConfig::new().init();
        let mut losses = Vec::new();
        for _ in 0..30 {
            let loss = bestrq_loss(&model, &batch, &device).unwrap();
            losses.push(scalar(loss.clone()).unwrap());
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = crate::step::apply_grads(&mut opt, 1e-2, model, grads);
        }
        let first = losses[0];
        let last = *losses.last().unwrap();
        assert!(first > 1.5, "initial loss {first} (ln 16 ≈ 2.77)");
        assert!(last < 0.5 * first, "loss {first} → {last}");
        assert_eq!(q, before, "the quantizer is not trained");
        // The targets of the clean features are those it gave before training.
        let x = features(48, bins, 10);
        assert_eq!(q.targets(&x).unwrap(), utts[0].targets);
    }

    #[test]
    fn per_example_sum_stays_within_the_bounds() {
        let device = Device::flex().autodiff();
        device.seed(1);
        let bins = 12;
        let cfg = BestRqConfig {
            codebook_size: 8,
            ..BestRqConfig::default()
        };
        let q = RandomProjectionQuantizer::new(bins, &cfg).unwrap();
        let model = BestRq::new(
            CtcGruConfig::small(bins, 29).init(&device).unwrap(),
            8,
            &device,
        );
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let utts: Vec<MaskedUtterance> = [20usize, 33]
            .iter()
            .map(|&f| {
                let x = features(f, bins, f as u64);
                MaskedUtterance::new(&q, &cfg, &x, (&[0.0; 12], &[1.0; 12]), &mut rng).unwrap()
            })
            .collect();
        let refs: Vec<&MaskedUtterance> = utts.iter().collect();
        let layers: Vec<(String, usize)> = read_values(&model)
            .unwrap()
            .into_iter()
            .filter(|t| crate::arch::is_trainable(&t.name))
            .map(|t| (t.name, t.data.len()))
            .collect();
        assert!(layers.iter().any(|(n, _)| n == "head.weight"));
        assert!(!layers.iter().any(|(n, _)| n.starts_with("out.")));
        let bounds = ClipBounds::new(crate::dp::ClipStrategy::PerLayerDim, 1e-3, &layers).unwrap();
        let sum = bestrq_clipped_sum(&model, &refs, &bounds, Bounding::Clip, &device).unwrap();
        assert_eq!(sum.examples, 2);
        assert_eq!(sum.clipped, 2, "a tiny bound clips every example");
        // Each example's contribution is within its bounds, so the sum is within 2·C.
        let norm: f32 = sum
            .sum
            .iter()
            .flat_map(|t| t.data.iter())
            .map(|v| v * v)
            .sum::<f32>()
            .sqrt();
        assert!(norm <= 2.0 * 1e-3 * 1.0001, "norm {norm}");
        assert!(norm > 0.0);
    }
}
