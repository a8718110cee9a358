//! Central (non-private) training of CTC speech recognisers: a LibriSpeech-layout corpus
//! (or JSONL manifest) → whole-utterance features → burn training with waveform
//! augmentation and SpecAugment, AdamW, the warm-up + cosine schedule, per-epoch
//! validation (greedy WER) and early stopping → an ASR model package with greedy and
//! beam-search WER/CER and provenance.
//!
//! Features come from hush-device's [`utterance_features`], the function the device runs
//! before inference; decoding and error rates are hush-models' ([`hush_models::asr`]).
//! Splits follow the corpus reader (speaker-disjoint, as for KWS).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use burn::grad_clipping::GradientClippingConfig;
use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use hush_device::audio::read_audio;
use hush_device::dataset::{read_corpus, Layout, Split, Target};
use hush_device::features::frame::Framing;
use hush_device::features::{FeatureConfig, FeatureKind};
use hush_device::infer::utterance_features;
use hush_models::asr::ctc_gru::is_encoder_tensor;
use hush_models::asr::decode::{beam_search, greedy};
use hush_models::asr::wer::ErrorCounts;
use hush_models::asr::{
    ctc_loss, ctc_min_steps, normalize_transcript, AsrArchConfig, CtcBatch, CtcGru, Vocabulary,
};
use hush_models::checkpoint::{NamedTensor, TensorSource};
use hush_models::compute::ComputeKind;
use hush_models::package::{
    write_asr_package, AsrCard, AsrMetrics, AsrSplitMetrics, Provenance, WEIGHTS,
};
use hush_models::pretrained::{load_encoder_into, read_encoder};
use hush_models::step::{apply_grads, scalar};
use rand::seq::SliceRandom;
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::schedule::WarmupCosine;
use super::speech_bounds::speech_onset;
use super::{check_common, input_stats, Augment, BestEpoch, TrainError};

/// Everything `hush-host train --task asr` decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsrTrainConfig {
    /// Corpus (LibriSpeech layout or a JSONL manifest).
    pub data: PathBuf,
    /// Architecture name (`ctc-gru`, `ctc-gru-small`), used when `arch` is None.
    pub arch_name: String,
    /// A full architecture config (overrides `arch_name`; its bins and vocabulary must
    /// match the features and the character set).
    pub arch: Option<AsrArchConfig>,
    /// Feature front-end.
    pub features: FeatureConfig,
    /// Most epochs.
    pub epochs: usize,
    /// Utterances per step.
    pub batch_size: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW weight decay.
    pub weight_decay: f32,
    /// Gradient norm clip (per parameter tensor, burn's `GradientClipping::Norm`).
    pub grad_clip: f32,
    /// Stop after this many epochs without a lower validation WER (ties: lower CER).
    pub patience: usize,
    /// Seed of initialisation, shuffling and augmentation.
    pub seed: u64,
    /// Augmentation (mixup is not used: CTC targets do not mix).
    pub augment: Augment,
    /// Beam width of the final report's beam-search numbers.
    pub beam: usize,
    /// Where to train (`--device`; a GPU that cannot start falls back to the CPU).
    #[serde(default)]
    pub compute: ComputeKind,
    /// Where to start: a pretrained encoder (`hush-host pretrain` output; its tensors,
    /// input normalisation included, replace the fresh encoder's and the output layer
    /// starts fresh) or a whole ASR model package such as `models/asr` (fine-tuning: every
    /// tensor is its). Its architecture (up to the time subsampling, which has no tensor
    /// of its own), features and vocabulary must be this run's.
    #[serde(default)]
    pub init: Option<PathBuf>,
    /// Keep the pretrained encoder fixed and train only the output layer (needs `init`).
    #[serde(default)]
    pub freeze_encoder: bool,
    /// Probability that a training example is two utterances joined by a silence
    /// ([`CONCAT_GAP_S`]), transcripts joined by a space: the second one's first word
    /// follows a silence mid-sequence, so the model must hear it rather than guess an
    /// utterance's first word from how sentences usually begin. 0 = off.
    #[serde(default)]
    pub concat: f32,
    /// Let the CTC loss count only paths that are blank until each training utterance's
    /// speech begins ([`speech_onset`], tracked through the augmentation): a causal model
    /// then cannot spell a first word before hearing it.
    #[serde(default)]
    pub blank_before_speech: bool,
}

/// Silence between two joined training utterances ([`AsrTrainConfig::concat`]), seconds.
pub const CONCAT_GAP_S: [f32; 2] = [0.1, 0.6];

/// The ASR front-end's default, shared by CTC training and BEST-RQ pretraining so a
/// pretrained encoder fits the recogniser: 80-bin Kaldi fbank (25/10 ms).
pub fn default_features() -> FeatureConfig {
    let mut features = FeatureConfig::kaldi(FeatureKind::Fbank);
    features.mel.num_bins = 80;
    features
}

impl AsrTrainConfig {
    /// Defaults: 80-bin Kaldi fbank (25/10 ms), 60 epochs, batch 8, lr 2e-3, weight decay
    /// 1e-2, gradient clip 5, patience 12, speed/shift/gain augmentation and SpecAugment
    /// (2 time masks ≤ 8 frames, 2 frequency masks ≤ 10 bins), beam 8.
    pub fn new(data: &Path, arch_name: &str) -> Self {
        Self {
            data: data.to_path_buf(),
            arch_name: arch_name.to_string(),
            arch: None,
            features: default_features(),
            epochs: 60,
            batch_size: 8,
            lr: 2e-3,
            weight_decay: 1e-2,
            grad_clip: 5.0,
            patience: 12,
            seed: 0,
            augment: Augment {
                speed: 0.1,
                shift_s: 0.1,
                gain_db: 6.0,
                noise_prob: 0.5,
                snr_db: [10.0, 30.0],
                time_masks: (2, 8),
                freq_masks: (2, 10),
                mixup_alpha: 0.0,
                vtlp: 0.0,
                reverb_prob: 0.0,
                rt60_s: [0.0, 0.0],
                ..Augment::none()
            },
            beam: 8,
            compute: ComputeKind::Cpu,
            init: None,
            freeze_encoder: false,
            concat: 0.0,
            blank_before_speech: false,
        }
    }

    /// The architecture: the configured one, checked against the features and the
    /// vocabulary, or the named default.
    pub fn resolve_arch(&self, vocab: &Vocabulary) -> Result<AsrArchConfig, TrainError> {
        let bins = self.features.dim();
        match &self.arch {
            Some(a) if a.bins() != bins || a.vocab() != vocab.len() => Err(TrainError::Option {
                option: "arch",
                reason: format!(
                    "it takes {} bins and has {} outputs; the features give {bins} and the \
                     vocabulary has {}",
                    a.bins(),
                    a.vocab(),
                    vocab.len()
                ),
            }),
            Some(a) => Ok(a.clone()),
            None => Ok(AsrArchConfig::default_for(
                &self.arch_name,
                bins,
                vocab.len(),
            )?),
        }
    }

    /// The starting point `init` names, checked against the architecture `arch`, the
    /// features and the character vocabulary: a pretrained encoder (`encoder.json`, from
    /// `hush-host pretrain`; the output layer starts fresh) or a whole ASR model package
    /// (`model.json`, e.g. `models/asr`; every tensor, input normalisation and output
    /// layer included, is its).
    pub fn pretrained(&self, arch: &AsrArchConfig) -> Result<Option<Init>, TrainError> {
        let Some(dir) = &self.init else {
            return Ok(None);
        };
        let bad = |reason: String| TrainError::Option {
            option: "--init",
            reason: format!("{}: {reason}", dir.display()),
        };
        if !dir.is_dir() {
            return Err(bad(
                "not a directory; --init takes a pretrained encoder (encoder.json, from \
                 `hush-host pretrain`) or an ASR model package (model.json)"
                    .into(),
            ));
        }
        let is_package = !dir.join(hush_models::pretrained::ENCODER_JSON).exists()
            && dir.join(hush_models::package::MODEL_JSON).exists();
        let (what, card_arch, card_features, init) = if is_package {
            let card = AsrCard::read(dir)?;
            let vocab = card.vocabulary().map_err(|e| bad(e.to_string()))?;
            if vocab != Vocabulary::characters() {
                return Err(bad(format!(
                    "the model's vocabulary ({} tokens) is not the character set this run \
                     trains ({} tokens)",
                    vocab.len(),
                    Vocabulary::characters().len()
                )));
            }
            let tensors = hush_models::checkpoint::load_safetensors(&dir.join(WEIGHTS))?;
            (
                "model",
                card.arch.clone(),
                card.features.clone(),
                Init::Model(dir.join(WEIGHTS), tensors),
            )
        } else if dir.join(hush_models::pretrained::ENCODER_JSON).exists() {
            let (card, tensors) = read_encoder(dir)?;
            (
                "encoder",
                card.arch.clone(),
                card.features.clone(),
                Init::Encoder(dir.join(WEIGHTS), tensors),
            )
        } else {
            return Err(bad(format!(
                "holds neither {} (a pretrained encoder from `hush-host pretrain`) nor {} \
                 (an ASR model package)",
                hush_models::pretrained::ENCODER_JSON,
                hush_models::package::MODEL_JSON
            )));
        };
        // Time subsampling is a stride, not a tensor: a 4× model may start a 2× run.
        if !card_arch.same_tensors(arch) {
            return Err(bad(format!(
                "the {what} is a {} of {} bins ({:?}); this run trains {} of {} bins ({:?}); \
                 pass the same --arch",
                card_arch.name(),
                card_arch.bins(),
                card_arch,
                arch.name(),
                arch.bins(),
                arch
            )));
        }
        let features: FeatureConfig =
            serde_json::from_value(card_features).map_err(|e| bad(e.to_string()))?;
        if features != self.features {
            return Err(bad(format!(
                "the {what} was trained on other features than this run's"
            )));
        }
        Ok(Some(init))
    }

    fn check(&self) -> Result<(), TrainError> {
        check_common(self.epochs, self.batch_size, self.lr, &self.features)?;
        if self.beam == 0 {
            return Err(TrainError::option("--beam", "at least 1"));
        }
        if self.freeze_encoder && self.init.is_none() {
            return Err(TrainError::option(
                "--freeze-encoder",
                "freezes a pretrained encoder: needs --init ENCODER_DIR",
            ));
        }
        if self.augment.mixup_alpha > 0.0 {
            return Err(TrainError::option(
                "--mixup",
                "mixup does not apply to CTC training",
            ));
        }
        if !(0.0..=1.0).contains(&self.concat) {
            return Err(TrainError::option("--concat", "a probability in [0, 1]"));
        }
        Ok(())
    }
}

/// Where an ASR run starts ([`AsrTrainConfig::init`]): `(weights file, tensors)`.
pub enum Init {
    /// A pretrained encoder: every tensor but the output layer.
    Encoder(PathBuf, Vec<NamedTensor>),
    /// A whole recogniser: every tensor.
    Model(PathBuf, Vec<NamedTensor>),
}

impl Init {
    /// `model` (freshly initialised, `arch`) with the starting point's tensors.
    pub(crate) fn load_into(self, model: CtcGru, arch: &str) -> Result<CtcGru, TrainError> {
        Ok(match self {
            Init::Encoder(origin, tensors) => load_encoder_into(model, tensors, arch, &origin)?,
            Init::Model(origin, tensors) => {
                model.load_tensors(TensorSource::new(&origin, tensors), arch)?
            }
        })
    }
}

/// One decoded utterance.
#[derive(Debug, Clone)]
pub struct Utterance {
    /// The audio file.
    pub path: PathBuf,
    /// Speaker id.
    pub speaker: String,
    /// Normalised transcript.
    pub text: String,
    /// Its label sequence.
    pub labels: Vec<usize>,
    /// Samples at the feature config's rate.
    pub samples: Vec<f32>,
}

/// An ASR corpus in memory, split three ways (speaker-disjoint).
#[derive(Debug, Default)]
pub struct AsrData {
    /// Training utterances.
    pub train: Vec<Utterance>,
    /// Validation utterances (early stopping, best epoch).
    pub validation: Vec<Utterance>,
    /// Test utterances (the final report only).
    pub test: Vec<Utterance>,
    /// Background noises for augmentation (the corpus's `_background_noise_/`, if any;
    /// at least as long as the longest training utterance).
    pub noises: Vec<Vec<f32>>,
}

/// Reads a LibriSpeech-layout corpus or JSONL manifest: every utterance at
/// `sample_rate`, transcripts normalised ([`normalize_transcript`]); utterances with an
/// empty transcript are an error naming the file.
pub fn load_asr(dir: &Path, sample_rate: u32) -> Result<AsrData, TrainError> {
    let data = load_asr_any_split(dir, sample_rate)?;
    for (name, split) in [
        ("train", &data.train),
        ("validation", &data.validation),
        ("test", &data.test),
    ] {
        if split.is_empty() {
            return Err(TrainError::Data {
                path: dir.to_path_buf(),
                reason: format!("the {name} split is empty (splits follow speaker ids)"),
            });
        }
    }
    Ok(data)
}

/// [`load_asr`] without its check that every split has utterances (for corpora used
/// whole, such as PATE's private data).
pub fn load_asr_any_split(dir: &Path, sample_rate: u32) -> Result<AsrData, TrainError> {
    let (layout, examples) = read_corpus(dir)?;
    if layout == Layout::SpeechCommands {
        return Err(TrainError::Data {
            path: dir.to_path_buf(),
            reason: "ASR training needs a LibriSpeech-layout corpus or a JSONL manifest, \
                     found a Speech Commands (keyword) corpus"
                .into(),
        });
    }
    let vocab = Vocabulary::characters();
    let mut data = AsrData::default();
    for ex in examples {
        let Target::Transcript(raw) = &ex.target else {
            continue;
        };
        let text = normalize_transcript(raw);
        if text.is_empty() {
            return Err(TrainError::Data {
                path: ex.path.clone(),
                reason: format!("transcript {raw:?} has no letters"),
            });
        }
        let labels = vocab.encode(&text)?;
        let audio = read_audio(&ex.path)?;
        if audio.sample_rate != sample_rate {
            return Err(TrainError::Data {
                path: ex.path.clone(),
                reason: format!(
                    "{} Hz; the feature config expects {sample_rate} Hz",
                    audio.sample_rate
                ),
            });
        }
        let u = Utterance {
            path: ex.path.clone(),
            speaker: ex.speaker.clone(),
            text,
            labels,
            samples: audio.samples,
        };
        match ex.split {
            Split::Train => data.train.push(u),
            Split::Validation => data.validation.push(u),
            Split::Test => data.test.push(u),
        }
    }
    let longest = data
        .train
        .iter()
        .map(|u| u.samples.len())
        .max()
        .unwrap_or(0);
    // Room for the augmentation's padding (speed and shifts).
    data.noises = super::data::read_noises(
        dir,
        sample_rate,
        longest + longest / 4 + sample_rate as usize / 2,
    )?;
    Ok(data)
}

/// One epoch's numbers, for progress lines.
#[derive(Debug, Clone, PartialEq)]
pub struct AsrEpochReport {
    /// 1-based epoch.
    pub epoch: usize,
    /// Mean training CTC loss per label.
    pub train_loss: f64,
    /// Validation word error rate (greedy decoding).
    pub val_wer: f64,
    /// Learning rate at the end of the epoch.
    pub lr: f64,
    /// Whether this epoch is the best so far.
    pub best: bool,
}

/// What training produced.
#[derive(Debug, Clone)]
pub struct AsrTrainReport {
    /// The card written to `model.json`.
    pub card: AsrCard,
    /// Per-epoch numbers.
    pub epochs: Vec<AsrEpochReport>,
}

fn features(cfg: &FeatureConfig, u: &Utterance, samples: &[f32]) -> Result<Vec<f32>, TrainError> {
    utterance_features(cfg, samples).map_err(|source| TrainError::Features {
        path: u.path.clone(),
        source,
    })
}

/// Utterances `a` and `b` joined by a silence drawn from [`CONCAT_GAP_S`]: the samples,
/// and the labels of `a`'s transcript, a space, and `b`'s.
fn joined(
    a: &Utterance,
    b: &Utterance,
    sample_rate: u32,
    rng: &mut ChaCha8Rng,
) -> (Vec<f32>, Vec<usize>) {
    let gap = (rng.random_range(CONCAT_GAP_S[0]..=CONCAT_GAP_S[1]) * sample_rate as f32) as usize;
    let mut samples = Vec::with_capacity(a.samples.len() + gap + b.samples.len());
    samples.extend_from_slice(&a.samples);
    samples.resize(a.samples.len() + gap, 0.0);
    samples.extend_from_slice(&b.samples);
    let space = Vocabulary::characters().encode(" ").unwrap_or_default();
    let labels = [a.labels.as_slice(), &space, &b.labels].concat();
    (samples, labels)
}

/// Pads utterances' features (each `frames × bins`) into one batch; padding frames hold
/// `fill` (the per-bin mean, normalised to 0). The model is causal, so padding never
/// reaches an utterance's own output steps.
fn pad_batch(feats: Vec<Vec<f32>>, labels: Vec<Vec<usize>>, bins: usize, fill: &[f32]) -> CtcBatch {
    let lengths: Vec<usize> = feats.iter().map(|f| f.len() / bins).collect();
    let frames = lengths.iter().copied().max().unwrap_or(0);
    let mut features = Vec::with_capacity(feats.len() * frames * bins);
    for (f, &n) in feats.iter().zip(&lengths) {
        features.extend_from_slice(f);
        for _ in n..frames {
            features.extend_from_slice(fill);
        }
    }
    CtcBatch {
        features,
        lengths,
        labels,
        frames,
        bins,
        leading_blanks: Vec::new(),
    }
}

/// Greedy (and, with `beam`, beam-search) error rates of `model` over `utts` with clean
/// features `feats`.
fn evaluate(
    model: &CtcGru,
    utts: &[Utterance],
    feats: &[Vec<f32>],
    bins: usize,
    fill: &[f32],
    beam: Option<usize>,
    device: &Device,
) -> Result<AsrSplitMetrics, TrainError> {
    let vocab = Vocabulary::characters();
    let v = vocab.len();
    let mut gw = ErrorCounts::default();
    let mut gc = ErrorCounts::default();
    let mut bw = ErrorCounts::default();
    let mut bc = ErrorCounts::default();
    // Batches of similar lengths; the model is causal, so padding changes nothing.
    let mut order: Vec<usize> = (0..utts.len()).collect();
    order.sort_by_key(|&i| feats[i].len());
    for chunk in order.chunks(16) {
        let b = pad_batch(
            chunk.iter().map(|&i| feats[i].clone()).collect(),
            vec![Vec::new(); chunk.len()],
            bins,
            fill,
        );
        let x = Tensor::<3>::from_data(
            TensorData::new(b.features, [chunk.len(), b.frames, bins]),
            device,
        );
        let out = model.forward(x);
        let [_, steps, _] = out.dims();
        let lp: Vec<f32> = out.into_data().try_to_vec::<f32>().map_err(|e| {
            hush_models::ModelError::TensorData {
                name: "log_probs".into(),
                reason: format!("{e:?}"),
            }
        })?;
        for (k, &i) in chunk.iter().enumerate() {
            let n = model.output_steps(b.lengths[k]);
            let rows = &lp[k * steps * v..(k * steps + n) * v];
            let reference = &utts[i].text;
            let hyp = vocab.decode(&greedy(rows, v));
            gw.add_words(reference, &hyp);
            gc.add_chars(reference, &hyp);
            if let Some(width) = beam {
                let hyp = vocab.decode(&beam_search(rows, v, width));
                bw.add_words(reference, &hyp);
                bc.add_chars(reference, &hyp);
            }
        }
    }
    Ok(AsrSplitMetrics {
        utterances: utts.len(),
        words: gw.reference,
        greedy_wer: gw.rate(),
        greedy_cer: gc.rate(),
        beam_width: beam,
        beam_wer: beam.map(|_| bw.rate()),
        beam_cer: beam.map(|_| bc.rate()),
    })
}

/// Trains a CTC recogniser on the corpus `cfg.data` and writes its package to `out`.
/// `command` is recorded as provenance; `progress` sees every epoch.
pub fn train_asr(
    cfg: &AsrTrainConfig,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&AsrEpochReport),
) -> Result<AsrTrainReport, TrainError> {
    cfg.check()?;
    // A bad architecture or pretrained encoder fails before the corpus is decoded.
    let arch = cfg.resolve_arch(&Vocabulary::characters())?;
    cfg.pretrained(&arch)?;
    let data = load_asr(&cfg.data, cfg.features.frame.sample_rate)?;
    train_asr_on(cfg, &data, out, command, progress)
}

/// [`train_asr`] on data already in memory (`cfg.data` is then only provenance).
pub fn train_asr_on(
    cfg: &AsrTrainConfig,
    data: &AsrData,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&AsrEpochReport),
) -> Result<AsrTrainReport, TrainError> {
    cfg.check()?;
    let run = Prepared::new(cfg, data)?;
    let (mean, scale) = input_stats(&run.train_feats.concat(), run.bins);

    let plain = super::device(cfg.compute);
    let device = plain.clone().autodiff();
    device.seed(cfg.seed);
    let mut model = run.arch.init(&device)?;
    model.set_input_norm(&mean, &scale)?;
    if let Some(init) = cfg.pretrained(&run.arch)? {
        model = init.load_into(model, run.arch.name())?;
    }
    let mut optimizer = AdamWConfig::new()
        .with_weight_decay(cfg.weight_decay)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(cfg.grad_clip)))
        .init();
    let steps_per_epoch = run.usable.len().div_ceil(cfg.batch_size);
    let schedule = WarmupCosine {
        peak: cfg.lr,
        warmup: (2 * steps_per_epoch).min(100),
        total: steps_per_epoch * cfg.epochs,
        min_ratio: 0.02,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut order = run.usable.clone();
    let mut step = 0usize;
    let mut tracker: BestEpoch<AsrEpochReport> = BestEpoch::new(cfg.patience);
    for epoch in 1..=cfg.epochs {
        order.shuffle(&mut rng);
        let mut loss_sum = 0.0f64;
        let mut label_sum = 0usize;
        let mut lr = schedule.lr(step);
        for chunk in order.chunks(cfg.batch_size) {
            let (batch, n_labels) = run.augmented_batch(cfg, data, chunk, &mean, &mut rng)?;
            lr = schedule.lr(step);
            let loss = ctc_loss(&model, &batch, &device)?;
            let value = scalar(loss.clone())?;
            let mut grads = GradientsParams::from_grads(loss.backward(), &model);
            if cfg.freeze_encoder {
                let output: Vec<NamedTensor> = model
                    .named_grads(&grads)?
                    .into_iter()
                    .filter(|t| !is_encoder_tensor(&t.name))
                    .collect();
                grads = model.grads_params(&output)?;
            }
            model = apply_grads(&mut optimizer, lr, model, grads);
            loss_sum += f64::from(value) * n_labels as f64;
            label_sum += n_labels;
            step += 1;
        }
        let train_loss = loss_sum / label_sum.max(1) as f64;
        if run.end_epoch(
            &mut tracker,
            &model,
            data,
            &mean,
            &plain,
            (epoch, train_loss, lr),
            progress,
        )? {
            break;
        }
    }
    run.finish(
        cfg,
        data,
        tracker,
        &mean,
        &plain,
        serde_json::json!({}),
        out,
        command,
    )
}

/// What [`train_asr_dp_on`] produced: the model's report and its privacy claim (also in
/// `privacy.json` beside the model).
#[derive(Debug, Clone)]
pub struct AsrDpTrainReport {
    /// The model's card and epochs.
    pub report: AsrTrainReport,
    /// The privacy claim.
    pub privacy: super::dp::PrivacyReport,
}

/// DP-SGD training (example level: one utterance) of a CTC recogniser on `data.train`,
/// usually fine-tuning a public model (`cfg.init`), assembled from `super::dp_run` as
/// the keyword spotters' and BEST-RQ's DP runs are: σ calibrated for the target ε
/// (`DpPlan`), the planned release authorised by the ledger before any work
/// (`DpRelease`); each step Poisson-samples utterances, sums their clipped per-utterance
/// CTC gradients ([`hush_models::asr::ctc_clipped_sum`], one backward per utterance),
/// adds Gaussian noise to the sum and divides by the expected count, then takes an AdamW
/// step; the steps run are recorded in the ledger before the package is written. The
/// input normalisation (and SpecAugment's fill) comes from `cfg.init`, or from the
/// validation split without one — never from the private utterances. The best epoch is
/// chosen on the validation split, whose speakers are not the private ones. Not offered
/// here: the public warm start, layer freezing, `--freeze-encoder` and adaptive clipping.
pub fn train_asr_dp_on(
    cfg: &AsrTrainConfig,
    dp: &super::dp::DpConfig,
    data: &AsrData,
    out: &Path,
    command: &str,
    progress: &mut dyn FnMut(&AsrEpochReport),
) -> Result<AsrDpTrainReport, TrainError> {
    use super::dp_run::{dp_sgd, mechanism, privacy_err, DpPlan, DpRelease};
    cfg.check()?;
    dp.check()?;
    let not_here = |option: &'static str| {
        Err(TrainError::option(
            option,
            "not offered for ASR DP-SGD (fine-tune a public model with --init instead)",
        ))
    };
    if dp.warm_start_public > 0.0 {
        return not_here("--warm-start-public");
    }
    if cfg.concat > 0.0 {
        // A joined example could hold two speakers' audio: one example would then carry
        // two users' data, and per-example clipping would no longer bound one user.
        return not_here("--concat");
    }
    if dp.adaptive_clip_quantile.is_some() {
        return not_here("--adaptive-clip-quantile");
    }
    if cfg.freeze_encoder {
        return not_here("--freeze-encoder");
    }
    let run = Prepared::new(cfg, data)?;
    let plain = super::device(cfg.compute);
    let device = plain.clone().autodiff();
    device.seed(cfg.seed);
    let mut model = run.arch.init(&device)?;
    let norm_source = match cfg.pretrained(&run.arch)? {
        Some(init) => {
            model = init.load_into(model, run.arch.name())?;
            "the --init model or encoder"
        }
        None => {
            let (mean, scale) = input_stats(&run.val_feats.concat(), run.bins);
            model.set_input_norm(&mean, &scale)?;
            "validation split"
        }
    };
    let tensors = model.named_tensors()?;
    let mean = tensors
        .iter()
        .find(|t| t.name == "input_norm.mean")
        .map(|t| t.data.clone())
        .ok_or_else(|| privacy_err("the model has no input_norm.mean"))?;
    let layers: Vec<(String, usize)> = tensors
        .iter()
        .filter(|t| hush_models::arch::is_trainable(&t.name))
        .map(|t| (t.name.clone(), t.data.len()))
        .collect();
    let plan = DpPlan::new(dp, run.usable.len(), cfg.batch_size, cfg.epochs)?;
    // Refused here, before any training, when over budget.
    let release = DpRelease::open(dp, plan, format!("asr model {}", out.display()))?;
    let (bounds, mech) = mechanism(dp, dp.clip, &layers, plan.sigma, plan.expected)?;
    let mut sgd = dp_sgd(dp, plan.q, plan.n, cfg.seed)?;
    let bounding = if dp.normalize_layers {
        hush_models::dp::Bounding::Normalize
    } else {
        hush_models::dp::Bounding::Clip
    };
    let mut optimizer = AdamWConfig::new()
        .with_weight_decay(cfg.weight_decay)
        .init();
    let schedule = WarmupCosine {
        peak: cfg.lr,
        warmup: plan.steps_per_epoch.min(50),
        total: plan.planned_steps as usize,
        min_ratio: 0.02,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut step = 0usize;
    let mut tracker: BestEpoch<AsrEpochReport> = BestEpoch::new(cfg.patience);
    for epoch in 1..=cfg.epochs {
        let (mut loss_sum, mut seen) = (0f64, 0usize);
        let mut lr = schedule.lr(step);
        for _ in 0..plan.steps_per_epoch {
            lr = schedule.lr(step);
            let stats;
            (model, stats) = sgd.step(
                model,
                &mech,
                |m, idx| {
                    let picked: Vec<usize> = idx.iter().map(|&i| run.usable[i]).collect();
                    let (batch, _) = run.augmented_batch(cfg, data, &picked, &mean, &mut rng)?;
                    Ok::<_, TrainError>(hush_models::asr::ctc_clipped_sum(
                        m, &batch, &bounds, bounding, &device,
                    )?)
                },
                |m, g| {
                    let grads = m.grads_params(g)?;
                    Ok(apply_grads(&mut optimizer, lr, m, grads))
                },
            )?;
            loss_sum += f64::from(stats.loss_sum);
            seen += stats.examples;
            step += 1;
        }
        let train_loss = loss_sum / seen.max(1) as f64;
        if run.end_epoch(
            &mut tracker,
            &model,
            data,
            &mean,
            &plain,
            (epoch, train_loss, lr),
            progress,
        )? {
            break;
        }
    }
    // Record the release (the steps actually run) before anything is published.
    release.complete(dp, step as u64, &bounds, &mech, |_, base| {
        let speakers: BTreeSet<&str> = run
            .usable
            .iter()
            .map(|&i| data.train[i].speaker.as_str())
            .collect();
        let privacy = super::dp::PrivacyReport {
            private_speakers: speakers.len(),
            input_norm_source: norm_source.into(),
            batch_norm_statistics: "none (ctc-gru has no batch norm)".into(),
            ..base
        };
        let privacy_json = serde_json::to_value(&privacy).map_err(privacy_err)?;
        let report = run.finish(
            cfg,
            data,
            tracker,
            &mean,
            &plain,
            serde_json::json!({ "dp": dp, "privacy": privacy_json }),
            out,
            command,
        )?;
        let path = out.join("privacy.json");
        let text = serde_json::to_string_pretty(&privacy).map_err(privacy_err)?;
        std::fs::write(&path, text).map_err(|source| TrainError::Io { path, source })?;
        Ok(AsrDpTrainReport { report, privacy })
    })
}

/// One ASR run's data, prepared once: the architecture, clean features of every split
/// and the training utterances long enough for their transcripts.
struct Prepared {
    arch: AsrArchConfig,
    bins: usize,
    train_feats: Vec<Vec<f32>>,
    val_feats: Vec<Vec<f32>>,
    test_feats: Vec<Vec<f32>>,
    /// Indices of the training utterances CTC can align (one output step per character).
    usable: Vec<usize>,
}

impl Prepared {
    fn new(cfg: &AsrTrainConfig, data: &AsrData) -> Result<Self, TrainError> {
        let arch = cfg.resolve_arch(&Vocabulary::characters())?;
        let bins = arch.bins();
        let clean = |utts: &[Utterance]| -> Result<Vec<Vec<f32>>, TrainError> {
            utts.iter()
                .map(|u| features(&cfg.features, u, &u.samples))
                .collect()
        };
        let train_feats = clean(&data.train)?;
        let val_feats = clean(&data.validation)?;
        let test_feats = clean(&data.test)?;
        // Training utterances too short for their transcript cannot be aligned: left out,
        // and counted in the data summary.
        let usable: Vec<usize> = (0..data.train.len())
            .filter(|&i| {
                ctc_min_steps(&data.train[i].labels)
                    <= arch.output_steps(train_feats[i].len() / bins)
            })
            .collect();
        if usable.is_empty() {
            return Err(TrainError::Data {
                path: cfg.data.clone(),
                reason: "no training utterance is long enough for its transcript (4 frames \
                         per character)"
                    .into(),
            });
        }
        Ok(Self {
            arch,
            bins,
            train_feats,
            val_feats,
            test_feats,
            usable,
        })
    }

    /// The training utterances `picked` (indices into `data.train`), each padded with
    /// silence, waveform-augmented and SpecAugmented (masks filled with `mean`), as one
    /// padded batch; and its label count.
    fn augmented_batch(
        &self,
        cfg: &AsrTrainConfig,
        data: &AsrData,
        picked: &[usize],
        mean: &[f32],
        rng: &mut ChaCha8Rng,
    ) -> Result<(CtcBatch, usize), TrainError> {
        let sr = cfg.features.frame.sample_rate;
        // Room for speed perturbation and shifts: the waveform augmentation keeps a clip's
        // length, so each utterance is padded with silence first and nothing is cut.
        let margin = |n: usize| {
            let shift = (cfg.augment.shift_s.max(0.0) * sr as f32) as usize;
            (
                shift,
                shift + (n as f32 * cfg.augment.speed.max(0.0) * 1.2) as usize,
            )
        };
        let framing = Framing::new(&cfg.features.frame);
        let mut feats = Vec::with_capacity(picked.len());
        let mut labels = Vec::with_capacity(picked.len());
        let mut leading = Vec::with_capacity(picked.len());
        for &j in picked {
            let u = &data.train[j];
            let (samples, example_labels) = if cfg.concat > 0.0 && rng.random::<f32>() < cfg.concat
            {
                let k = self.usable[rng.random_range(0..self.usable.len())];
                joined(u, &data.train[k], sr, rng)
            } else {
                (u.samples.clone(), u.labels.clone())
            };
            let (front, back) = margin(samples.len());
            let mut padded = vec![0.0f32; front];
            padded.extend_from_slice(&samples);
            padded.resize(front + samples.len() + back, 0.0);
            // Only a run that constrains the start needs to know where the speech begins.
            let mark = if cfg.blank_before_speech {
                front + speech_onset(&samples, sr)
            } else {
                0
            };
            let (wave, onset) = cfg
                .augment
                .waveform_tracking(&padded, &data.noises, sr, mark, rng);
            let mut f = features(&cfg.features, u, &wave)?;
            cfg.augment.spec(&mut f, self.bins, mean, rng);
            if cfg.blank_before_speech {
                leading.push(self.silent_steps(
                    onset,
                    f.len() / self.bins,
                    &example_labels,
                    &framing,
                ));
            }
            feats.push(f);
            labels.push(example_labels);
        }
        let n_labels: usize = labels.iter().map(Vec::len).sum();
        let mut batch = pad_batch(feats, labels, self.bins, mean);
        batch.leading_blanks = leading;
        Ok((batch, n_labels))
    }

    /// Output steps that must be blank in an example of `frames` frames whose speech
    /// begins at sample `onset`: those built only from frames that end before it (one
    /// fewer, for the convolutions' reach), as long as `labels` still fit after them.
    fn silent_steps(
        &self,
        onset: usize,
        frames: usize,
        labels: &[usize],
        framing: &Framing,
    ) -> usize {
        let silent_frames = (onset + framing.shift).saturating_sub(framing.win) / framing.shift;
        let room = self
            .arch
            .output_steps(frames)
            .saturating_sub(ctc_min_steps(labels));
        (silent_frames / self.arch.subsampling())
            .saturating_sub(1)
            .min(room)
    }

    /// Scores `model` on the validation split, keeps its weights if best so far, reports
    /// the epoch; returns whether patience has run out.
    #[allow(clippy::too_many_arguments)]
    fn end_epoch(
        &self,
        tracker: &mut BestEpoch<AsrEpochReport>,
        model: &CtcGru,
        data: &AsrData,
        mean: &[f32],
        plain: &Device,
        (epoch, train_loss, lr): (usize, f64, f64),
        progress: &mut dyn FnMut(&AsrEpochReport),
    ) -> Result<bool, TrainError> {
        let snapshot = model.valid();
        let v = evaluate(
            &snapshot,
            &data.validation,
            &self.val_feats,
            self.bins,
            mean,
            None,
            plain,
        )?;
        // Lower WER is better; among equal WERs (early on, every hypothesis empty), lower
        // CER.
        let score = -(v.greedy_wer + v.greedy_cer * 1e-3);
        let improved = tracker.record(epoch, score, || Ok(snapshot.named_tensors()?))?;
        let report = AsrEpochReport {
            epoch,
            train_loss,
            val_wer: v.greedy_wer,
            lr,
            best: improved,
        };
        progress(&report);
        Ok(tracker.push(epoch, report))
    }

    /// The best epoch's model, judged on every split (beam search on validation and
    /// test), written as a package to `out` with its provenance (`extra` joins the
    /// options).
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        cfg: &AsrTrainConfig,
        data: &AsrData,
        tracker: BestEpoch<AsrEpochReport>,
        mean: &[f32],
        plain: &Device,
        extra: serde_json::Value,
        out: &Path,
        command: &str,
    ) -> Result<AsrTrainReport, TrainError> {
        let (arch, bins, sr) = (&self.arch, self.bins, cfg.features.frame.sample_rate);
        let vocab = Vocabulary::characters();
        let (best_epoch, tensors, reports) = tracker.finish()?;
        let model = arch.init(plain)?.load_tensors(
            TensorSource::new(Path::new("<best epoch>"), tensors),
            arch.name(),
        )?;
        let mut metrics = AsrMetrics::default();
        let train_usable: Vec<Utterance> =
            self.usable.iter().map(|&i| data.train[i].clone()).collect();
        let train_usable_feats: Vec<Vec<f32>> = self
            .usable
            .iter()
            .map(|&i| self.train_feats[i].clone())
            .collect();
        for (name, utts, feats, beam) in [
            ("train", &train_usable[..], &train_usable_feats[..], None),
            (
                "validation",
                &data.validation[..],
                &self.val_feats[..],
                Some(cfg.beam),
            ),
            ("test", &data.test[..], &self.test_feats[..], Some(cfg.beam)),
        ] {
            let m = evaluate(&model, utts, feats, bins, mean, beam, plain)?;
            metrics.splits.insert(name.to_string(), m);
        }
        let features_json =
            serde_json::to_value(&cfg.features).map_err(|e| TrainError::Option {
                option: "features",
                reason: e.to_string(),
            })?;
        let mut card = AsrCard::new(arch.clone(), features_json, &vocab, &model)?;
        let mut summary = BTreeMap::new();
        summary.insert("train".to_string(), data.train.len());
        summary.insert(
            "train_too_short".to_string(),
            data.train.len() - self.usable.len(),
        );
        summary.insert("validation".to_string(), data.validation.len());
        summary.insert("test".to_string(), data.test.len());
        summary.insert("noises".to_string(), data.noises.len());
        for (name, utts) in [
            ("train", &data.train),
            ("validation", &data.validation),
            ("test", &data.test),
        ] {
            let speakers: BTreeSet<&str> = utts.iter().map(|u| u.speaker.as_str()).collect();
            summary.insert(format!("{name}_speakers"), speakers.len());
            let seconds: usize = utts.iter().map(|u| u.samples.len()).sum::<usize>() / sr as usize;
            summary.insert(format!("{name}_seconds"), seconds);
        }
        let mut options = serde_json::json!({
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "lr": cfg.lr,
            "weight_decay": cfg.weight_decay,
            "grad_clip": cfg.grad_clip,
            "patience": cfg.patience,
            "optimizer": "adamw",
            "schedule": "warmup-cosine",
            "loss": "ctc (sum over utterances / labels)",
            "selection": "best validation greedy WER",
            "augment": cfg.augment,
            "beam": cfg.beam,
            "init": cfg.init,
            "freeze_encoder": cfg.freeze_encoder,
            "concat": cfg.concat,
            "blank_before_speech": cfg.blank_before_speech,
        });
        if let (Some(o), serde_json::Value::Object(e)) = (options.as_object_mut(), extra) {
            o.extend(e);
        }
        card.provenance = Some(Provenance {
            command: command.to_string(),
            data: cfg.data.display().to_string(),
            data_summary: summary,
            seed: cfg.seed,
            options,
            epochs_run: reports.len(),
            best_epoch,
            hush_version: env!("CARGO_PKG_VERSION").to_string(),
        });
        card.metrics = Some(metrics);
        write_asr_package(out, &card, &model)?;
        Ok(AsrTrainReport {
            card,
            epochs: reports,
        })
    }
}

/// Greedy and beam-search error rates of the ASR model package `dir` on `utts` (no
/// training: e.g. a warm-start model on held-out speakers). Errors name the package.
pub fn evaluate_package(
    dir: &Path,
    utts: &[Utterance],
    beam: usize,
) -> Result<AsrSplitMetrics, TrainError> {
    let plain = super::device(ComputeKind::Cpu);
    let (card, model) = hush_models::package::load_asr_package(dir, &plain)?;
    let features_cfg: FeatureConfig =
        serde_json::from_value(card.features.clone()).map_err(|e| TrainError::Option {
            option: "--init",
            reason: format!("{}: its feature config: {e}", dir.display()),
        })?;
    let bins = card.arch.bins();
    let feats = utts
        .iter()
        .map(|u| features(&features_cfg, u, &u.samples))
        .collect::<Result<Vec<_>, _>>()?;
    let mean = model
        .named_tensors()?
        .into_iter()
        .find(|t| t.name == "input_norm.mean")
        .map_or(vec![0.0; bins], |t| t.data);
    evaluate(&model, utts, &feats, bins, &mean, Some(beam), &plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundled_model_starts_a_run_at_the_other_time_subsampling() {
        let models_asr = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/asr");
        let vocab = Vocabulary::characters();
        for (arch, loads) in [
            ("ctc-gru", true),
            ("ctc-gru-s2", true),
            ("ctc-gru-small", false),
        ] {
            let mut cfg = AsrTrainConfig::new(Path::new("corpus"), arch);
            cfg.init = Some(models_asr.clone());
            let resolved = cfg.resolve_arch(&vocab).unwrap();
            let init = cfg.pretrained(&resolved);
            assert_eq!(init.is_ok(), loads, "{arch}");
            if let Ok(init) = init {
                // Every tensor loads: the 4× package fills the 2× model.
                let model = resolved
                    .init(&super::super::device(ComputeKind::Cpu))
                    .unwrap();
                let model = init.unwrap().load_into(model, arch).unwrap();
                assert_eq!(model.subsampling, resolved.subsampling());
            }
        }
    }

    #[test]
    fn joined_utterances_keep_both_transcripts_and_a_silence_between() {
        let vocab = Vocabulary::characters();
        let utt = |text: &str, n: usize, v: f32| Utterance {
            path: PathBuf::from(format!("{text}.wav")),
            speaker: "s".into(),
            text: text.into(),
            labels: vocab.encode(text).unwrap(),
            samples: vec![v; n],
        };
        let (a, b) = (utt("call dad", 300, 0.5), utt("stop", 200, -0.5));
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..20 {
            let (samples, labels) = joined(&a, &b, 1000, &mut rng);
            assert_eq!(vocab.decode(&labels), "call dad stop");
            let gap = samples.len() - 500;
            assert!((100..=600).contains(&gap), "gap {gap} samples at 1 kHz");
            assert!(samples[..300].iter().all(|&v| v == 0.5));
            assert!(samples[300..300 + gap].iter().all(|&v| v == 0.0));
            assert!(samples[300 + gap..].iter().all(|&v| v == -0.5));
        }
        // A probability outside [0, 1] is refused.
        let mut cfg = AsrTrainConfig::new(Path::new("corpus"), "ctc-gru-small");
        cfg.concat = 1.5;
        assert!(cfg.check().unwrap_err().to_string().contains("--concat"));
        // Under DP a joined example could hold two users' audio, so one example would no
        // longer bound one user: refused before any data is read.
        cfg.concat = 0.5;
        let dp = super::super::dp::DpConfig::new(8.0, 1e-5, 1.0);
        let err = train_asr_dp_on(
            &cfg,
            &dp,
            &AsrData::default(),
            Path::new("unused"),
            "test",
            &mut |_| {},
        )
        .unwrap_err();
        assert!(err.to_string().contains("--concat"), "{err}");
    }

    #[test]
    fn speech_onset_finds_the_first_loud_window_and_survives_augmentation() {
        let sr = 16_000u32;
        let mut x = vec![0.0005f32; 4_800]; // 0.3 s of faint noise floor
        x.extend((0..8_000).map(|i| 0.3 * (i as f32 * 0.05).sin()));
        x.extend(vec![0.0005f32; 1_600]);
        assert_eq!(speech_onset(&x, sr), 4_800);
        assert_eq!(speech_onset(&vec![0.0; 1_000], sr), 0);
        // The augmentation moves the onset with the speech: the tracked sample is where
        // the loud part now begins (within a window's rounding).
        let aug = Augment {
            noise_prob: 0.0,
            ..AsrTrainConfig::new(Path::new("corpus"), "ctc-gru").augment
        };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for _ in 0..10 {
            let (y, at) = aug.waveform_tracking(&x, &[], sr, 4_800, &mut rng);
            let found = speech_onset(&y, sr) as i64;
            assert!(
                (found - at as i64).abs() <= 160,
                "tracked {at}, found {found}"
            );
        }
    }
}
