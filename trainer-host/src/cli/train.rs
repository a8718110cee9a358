//! `hush-host train --task kws|asr …`: central training into a model package; keyword
//! spotters non-private or with DP-SGD (`--dp`, see [`hush_host::train::dp`]), CTC speech
//! recognisers non-private ([`hush_host::train::asr`]).

use std::path::PathBuf;

use anyhow::Context;
use hush_device::features::CmvnOptions;
use hush_host::train::asr::{train_asr, AsrEpochReport, AsrTrainConfig};
use hush_host::train::{train_kws, train_kws_dp, Augment, DpConfig, KwsTrainConfig, NoiseTarget};
use hush_models::compute::ComputeKind;

/// What to train.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TaskArg {
    /// Keyword spotting (Speech Commands layout).
    Kws,
    /// Speech recognition, CTC over characters (LibriSpeech layout or JSONL manifest).
    Asr,
}

/// The model and its (non-private) training, shared by `train` and `pate`.
#[derive(clap::Args, Clone)]
pub struct ModelArgs {
    /// Architecture: ds-cnn-s (default), bc-resnet or leak-cnn for kws; ctc-gru (default),
    /// ctc-gru-s2 (one step per 20 ms instead of 40) or ctc-gru-small for asr.
    #[arg(long)]
    pub arch: Option<String>,
    /// KWS: train the architecture's streaming form (ds-cnn-s or bc-resnet with no padding
    /// in time; leak-cnn as it is), so that the package also carries frames.onnx and
    /// head.onnx and `hush-device listen` runs it incrementally, each hop computing only
    /// its new frames.
    #[arg(long)]
    pub streaming: bool,
    /// Keywords, comma-separated (default: yes,no,up,down,left,right,on,off,stop,go);
    /// `_silence_` and `_unknown_` are added.
    #[arg(long, value_delimiter = ',')]
    pub keywords: Vec<String>,
    /// Most epochs (early stopping may end sooner) [default: 30 for kws, 60 for asr].
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Examples per step [default: 32 for kws, 8 for asr].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Peak learning rate (AdamW, warm-up then cosine decay) [default: 3e-3 for kws, 2e-3
    /// for asr].
    #[arg(long)]
    pub lr: Option<f64>,
    /// Epochs without a better validation score (accuracy; WER for asr) before stopping
    /// [default: 8 for kws, 12 for asr].
    #[arg(long)]
    pub patience: Option<usize>,
    /// Mixup Beta(α, α) parameter (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub mixup: f32,
    /// Vocal-tract-length perturbation: warp factor uniform in [1 − V, 1 + V] (0 = off).
    #[arg(long, default_value_t = 0.1)]
    pub vtlp: f32,
    /// Probability of synthetic room reverberation per example (0 = off).
    #[arg(long, default_value_t = 0.3)]
    pub reverb: f32,
    /// Speed perturbation: factor uniform in [1 − S, 1 + S] (0 = off).
    #[arg(long, default_value_t = 0.1)]
    pub speed: f32,
    /// LPC resynthesis: probability that an example is resynthesised, its spectral
    /// envelope over a pulse-train excitation at a new pitch, so that pitch varies apart
    /// from the formants (0 = off).
    #[arg(long, default_value_t = 0.0, value_parser = parse_probability)]
    pub resynth: f32,
    /// The resynthesised examples' median pitch range, LO,HI in Hz (drawn
    /// log-uniformly) [default: 80,320].
    #[arg(long, value_parser = parse_f0_range)]
    pub resynth_f0_hz: Option<[f32; 2]>,
    /// Release bursts: probability that an example gets a short burst of high-passed
    /// noise where its speech ends, as a released word-final stop sounds, so that a
    /// bright ending alone does not decide the word (0 = off).
    #[arg(long, default_value_t = 0.0, value_parser = parse_probability)]
    pub release_bursts: f32,
    /// Time shift: each example moved by up to this many seconds either way (0 = off;
    /// default 0.1 s). Wider shifts teach a keyword spotter the off-centre windows a
    /// stream shows it.
    #[arg(long)]
    pub shift_s: Option<f32>,
    /// KWS SpecAugment time masks: COUNT,WIDTH — how many, and the widest in frames of
    /// the default 98-frame features (scaled to others) [default: 2,10].
    #[arg(long, value_parser = parse_masks)]
    pub time_masks: Option<(usize, usize)>,
    /// KWS SpecAugment time warp: how far in frames of the default 98-frame features
    /// (scaled to others) a random point of each example may move, the frames either side
    /// stretched or squeezed to follow, so sounds' relative durations vary (0 = off).
    #[arg(long, default_value_t = 0)]
    pub time_warp: usize,
    /// KWS SpecAugment frequency masks: COUNT,WIDTH — how many, and the widest in bins of
    /// the default 40-bin features (scaled to others) [default: 2,5].
    #[arg(long, value_parser = parse_masks)]
    pub freq_masks: Option<(usize, usize)>,
    /// KWS: weight each class's loss by the inverse of its share of the training clips,
    /// so the catch-all `_unknown_` does not outweigh the keywords.
    #[arg(long)]
    pub balance_classes: bool,
    /// KWS: stochastic weight averaging — hold the learning rate at --swa-lr-ratio × the
    /// peak for the last N epochs and keep the mean of their weights (after every step),
    /// batch norms re-estimated, in place of the best validation epoch (0 = off).
    #[arg(long, default_value_t = 0)]
    pub swa_epochs: usize,
    /// KWS: the averaged epochs' learning rate as a fraction of the peak.
    #[arg(long, default_value_t = 0.1)]
    pub swa_lr_ratio: f64,
    /// KWS features: per-window mean (`mean`) or mean-and-variance (`mean-var`)
    /// normalisation of every log-mel bin, which removes any fixed spectral tilt or
    /// channel colour; travels with the model, so the device does the same.
    #[arg(long, value_enum, default_value = "none")]
    pub cmvn: CmvnArg,
    /// ASR: probability that a training example is two utterances joined by a silence,
    /// so utterance-initial words are learnt from their sound (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub concat: f32,
    /// ASR: count only CTC paths that stay blank until each training utterance's speech
    /// begins, so the model cannot spell a first word before hearing it.
    #[arg(long)]
    pub blank_before_speech: bool,
    /// Turn all augmentation off.
    #[arg(long)]
    pub no_augment: bool,
    /// KWS features: frame length in ms (fbank; default 25).
    #[arg(long, default_value_t = 25.0)]
    pub frame_length_ms: f32,
    /// KWS features: frame shift in ms (default 10: 98 frames per second; 20 gives
    /// Hello Edge's 49).
    #[arg(long, default_value_t = 10.0)]
    pub frame_shift_ms: f32,
    /// KWS features: log-mel bins (default 40).
    #[arg(long, default_value_t = 40)]
    pub num_mel_bins: usize,
    /// KWS features: the mel filterbank's upper edge in Hz (default: Nyquist, 8000 Hz at
    /// 16 kHz; Hello Edge's DS-CNN front end stops at 4000).
    #[arg(long)]
    pub high_freq_hz: Option<f32>,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Where to train: cpu, or gpu (burn's wgpu backend on Vulkan; needs a build with
    /// `--features gpu`, and falls back to the CPU with a message when no GPU starts).
    #[arg(long, default_value = "cpu")]
    pub device: ComputeKind,
    /// KWS: start from this model package's weights (same architecture, labels and
    /// features) — more epochs of an earlier run, or fine-tuning; with `--streaming`, a
    /// same-padded DS-CNN-S's weights start its streaming form.
    #[arg(long)]
    pub init_from: Option<PathBuf>,
}

impl ModelArgs {
    /// The KWS training config for the corpus `data`.
    pub fn kws_config(&self, data: &std::path::Path) -> anyhow::Result<KwsTrainConfig> {
        if self.concat > 0.0 || self.blank_before_speech {
            anyhow::bail!("--concat and --blank-before-speech apply to --task asr only");
        }
        let mut cfg = KwsTrainConfig::new(data, self.arch.as_deref().unwrap_or("ds-cnn-s"));
        if !self.keywords.is_empty() {
            cfg.keywords = self.keywords.clone();
        }
        cfg.epochs = self.epochs.unwrap_or(cfg.epochs);
        cfg.batch_size = self.batch_size.unwrap_or(cfg.batch_size);
        cfg.lr = self.lr.unwrap_or(cfg.lr);
        cfg.patience = self.patience.unwrap_or(cfg.patience);
        cfg.seed = self.seed;
        cfg.compute = self.device;
        cfg.set_fbank(self.frame_length_ms, self.frame_shift_ms, self.num_mel_bins);
        if let Some(hz) = self.high_freq_hz {
            cfg.features.mel.high_freq = hz;
        }
        cfg.features.cmvn = self.cmvn.options();
        cfg.balance_classes = self.balance_classes;
        cfg.swa_epochs = self.swa_epochs;
        cfg.swa_lr_ratio = self.swa_lr_ratio;
        let shift_s = self.shift_s()?;
        cfg.augment = if self.no_augment {
            Augment::none()
        } else {
            let defaults = Augment::default();
            Augment {
                mixup_alpha: self.mixup,
                resynth_prob: self.resynth,
                resynth_f0_hz: self.resynth_f0_hz.unwrap_or(defaults.resynth_f0_hz),
                release_burst_prob: self.release_bursts,
                speed: self.speed,
                vtlp: self.vtlp,
                reverb_prob: self.reverb,
                shift_s: shift_s.unwrap_or(defaults.shift_s),
                time_masks: self.time_masks.unwrap_or(defaults.time_masks),
                time_warp: self.time_warp,
                freq_masks: self.freq_masks.unwrap_or(defaults.freq_masks),
                ..defaults
            }
        };
        cfg.augment.fit_masks(cfg.frames, cfg.features.dim());
        cfg.init_from = self.init_from.clone();
        cfg.streaming = self.streaming;
        Ok(cfg)
    }

    /// The ASR training config for the corpus `data` (`--keywords` does not apply).
    pub fn asr_config(
        &self,
        data: &std::path::Path,
        beam: usize,
    ) -> anyhow::Result<AsrTrainConfig> {
        if self.streaming {
            anyhow::bail!("--streaming applies to --task kws only");
        }
        if !self.keywords.is_empty() {
            anyhow::bail!("--keywords applies to --task kws only");
        }
        if self.init_from.is_some() {
            anyhow::bail!("--init-from applies to --task kws only");
        }
        if self.cmvn != CmvnArg::None || self.balance_classes {
            anyhow::bail!("--cmvn and --balance-classes apply to --task kws only");
        }
        if self.swa_epochs > 0 {
            anyhow::bail!("--swa-epochs applies to --task kws only");
        }
        if self.time_masks.is_some() || self.freq_masks.is_some() || self.time_warp > 0 {
            anyhow::bail!("--time-masks, --time-warp and --freq-masks apply to --task kws only");
        }
        if self.high_freq_hz.is_some() {
            anyhow::bail!("--high-freq-hz applies to --task kws only");
        }
        let mut cfg = AsrTrainConfig::new(data, self.arch.as_deref().unwrap_or("ctc-gru"));
        cfg.epochs = self.epochs.unwrap_or(cfg.epochs);
        cfg.batch_size = self.batch_size.unwrap_or(cfg.batch_size);
        cfg.lr = self.lr.unwrap_or(cfg.lr);
        cfg.patience = self.patience.unwrap_or(cfg.patience);
        cfg.seed = self.seed;
        cfg.compute = self.device;
        cfg.beam = beam;
        cfg.concat = self.concat;
        cfg.blank_before_speech = self.blank_before_speech;
        cfg.augment.speed = self.speed;
        cfg.augment.resynth_prob = self.resynth;
        cfg.augment.release_burst_prob = self.release_bursts;
        if let Some(range) = self.resynth_f0_hz {
            cfg.augment.resynth_f0_hz = range;
        }
        if let Some(shift) = self.shift_s()? {
            cfg.augment.shift_s = shift;
        }
        if self.no_augment {
            cfg.augment = Augment::none();
        }
        if self.mixup > 0.0 {
            anyhow::bail!("--mixup applies to --task kws only (CTC targets do not mix)");
        }
        Ok(cfg)
    }

    /// `--shift-s`, checked: a finite shift of less than half a second, or none given.
    fn shift_s(&self) -> anyhow::Result<Option<f32>> {
        match self.shift_s {
            Some(s) if !(s.is_finite() && (0.0..0.5).contains(&s)) => {
                anyhow::bail!("--shift-s {s}: expected seconds in [0, 0.5)")
            }
            other => Ok(other),
        }
    }
}

/// `--time-masks` / `--freq-masks`: `COUNT,WIDTH`, at most 8 masks.
fn parse_masks(s: &str) -> Result<(usize, usize), String> {
    match parse_pair(s) {
        Some((n, w)) if n <= 8 => Ok((n, w)),
        _ => Err(format!(
            "`{s}`: expected COUNT,WIDTH (two whole numbers, COUNT at most 8), e.g. 2,10"
        )),
    }
}

/// `A,B`: two values of one type, spaces around each allowed.
fn parse_pair<T: std::str::FromStr>(s: &str) -> Option<(T, T)> {
    let (a, b) = s.split_once(',')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

/// `--resynth`, `--release-bursts`: a probability.
fn parse_probability(s: &str) -> Result<f32, String> {
    match s.trim().parse::<f32>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("`{s}`: expected a probability in [0, 1]")),
    }
}

/// `--resynth-f0-hz`: `LO,HI` in Hz, within 40–1000 Hz, LO ≤ HI.
fn parse_f0_range(s: &str) -> Result<[f32; 2], String> {
    match parse_pair::<f32>(s) {
        Some((lo, hi)) if (40.0..=1000.0).contains(&lo) && (lo..=1000.0).contains(&hi) => {
            Ok([lo, hi])
        }
        _ => Err(format!(
            "`{s}`: expected LO,HI in Hz with 40 <= LO <= HI <= 1000, e.g. 80,320"
        )),
    }
}

/// `--cmvn`: the KWS features' per-window normalisation.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmvnArg {
    /// No normalisation.
    None,
    /// Subtract each bin's mean over the window.
    Mean,
    /// Subtract each bin's mean and divide by its standard deviation.
    MeanVar,
}

impl CmvnArg {
    /// The feature option it stands for (utterance mode: the whole one-second window).
    pub fn options(self) -> CmvnOptions {
        match self {
            Self::None => CmvnOptions::None,
            Self::Mean => CmvnOptions::Utterance { norm_vars: false },
            Self::MeanVar => CmvnOptions::Utterance { norm_vars: true },
        }
    }
}

/// Starts the device `--device` asks for and says which one training runs on (and why
/// not the GPU, when a GPU was asked for and did not start).
pub fn announce_device(kind: ComputeKind) {
    let compute = hush_models::compute::select(kind);
    match (&compute.fallback, kind) {
        (Some(why), _) => eprintln!("warning: {why}"),
        (None, ComputeKind::Gpu) => eprintln!("training on {}", compute.description),
        (None, ComputeKind::Cpu) => {}
    }
}

/// Prints one line per ASR epoch, with its seconds (the first includes reading the corpus).
pub fn asr_epoch_line(epochs: usize) -> impl FnMut(&AsrEpochReport) {
    let mut since = std::time::Instant::now();
    move |e| {
        eprintln!(
            "epoch {:>3}/{epochs}  ctc loss {:.4}  val WER {:.3}  lr {:.2e}  {:.1} s{}",
            e.epoch,
            e.train_loss,
            e.val_wer,
            e.lr,
            since.elapsed().as_secs_f64(),
            if e.best { "  *" } else { "" }
        );
        since = std::time::Instant::now();
    }
}

/// Prints one line per epoch, with its seconds (the first includes reading the corpus).
pub fn epoch_line(epochs: usize) -> impl FnMut(&hush_host::train::EpochReport) {
    let mut since = std::time::Instant::now();
    move |e| {
        eprintln!(
            "epoch {:>3}/{epochs}  loss {:.4}  val acc {:.3}  lr {:.2e}  {:.1} s{}",
            e.epoch,
            e.train_loss,
            e.val_accuracy,
            e.lr,
            since.elapsed().as_secs_f64(),
            if e.best { "  *" } else { "" }
        );
        since = std::time::Instant::now();
    }
}

/// The DP-SGD flags every central DP trainer takes (`train --dp`, `pretrain --dp`).
#[derive(clap::Args, Clone)]
pub struct DpArgs {
    /// Train with DP-SGD (example-level differential privacy).
    #[arg(long)]
    pub dp: bool,
    /// DP: target ε (the noise multiplier is calibrated for it).
    #[arg(long, requires = "dp", conflicts_with = "noise_multiplier")]
    pub target_epsilon: Option<f64>,
    /// DP: a fixed noise multiplier instead of a target ε.
    #[arg(long, requires = "dp")]
    pub noise_multiplier: Option<f64>,
    /// DP: δ (below 1/number of training examples).
    #[arg(long, requires = "dp", default_value_t = 1e-5)]
    pub delta: f64,
    /// DP: total L2 clip bound C per example.
    #[arg(long, requires = "dp", default_value_t = 1.0)]
    pub clip: f32,
    /// DP: flat, per-layer-uniform or per-layer-dim.
    #[arg(long, requires = "dp", default_value = "flat")]
    pub clipping: String,
    /// DP: scale every layer to exactly its bound (layer-wise normalisation).
    #[arg(long, requires = "dp")]
    pub normalize_layers: bool,
    /// DP: Poisson sampling rate q (default: batch size / private examples).
    #[arg(long, requires = "dp")]
    pub sampling_rate: Option<f64>,
    /// DP: fraction of layers to freeze after the public warm start, in [0, 1).
    #[arg(long, requires = "dp", default_value_t = 0.0)]
    pub freeze_fraction: f64,
    /// DP: fraction of training speakers that are public (noise-free warm start), in [0, 1).
    #[arg(long, requires = "dp", default_value_t = 0.0)]
    pub warm_start_public: f64,
    /// DP: epochs of the public warm start.
    #[arg(long, requires = "dp", default_value_t = 3)]
    pub warm_start_epochs: usize,
    /// DP: discrete-Gaussian noise on an integer grid.
    #[arg(long, requires = "dp")]
    pub discrete_noise: bool,
    /// DP: the privacy ledger (SQLite; created if missing).
    #[arg(long, requires = "dp", default_value = "hush-ledger.sqlite")]
    pub ledger: PathBuf,
    /// DP: the ledger's total ε budget (default: the target ε).
    #[arg(long, requires = "dp")]
    pub budget_epsilon: Option<f64>,
    /// DP: seed noise and sampling from --seed (reproducible; never for real releases).
    #[arg(long, requires = "dp")]
    pub reproducible_noise: bool,
}

impl DpArgs {
    /// The DP configuration of these flags (`None` without `--dp`).
    pub fn config(&self) -> anyhow::Result<Option<DpConfig>> {
        if !self.dp {
            return Ok(None);
        }
        let noise = match (self.target_epsilon, self.noise_multiplier) {
            (Some(e), None) => NoiseTarget::Epsilon(e),
            (None, Some(z)) => NoiseTarget::NoiseMultiplier(z),
            _ => anyhow::bail!("--dp needs --target-epsilon E (or --noise-multiplier Z)"),
        };
        let mut dp = DpConfig::new(1.0, self.delta, self.clip);
        dp.noise = noise;
        dp.clipping = self.clipping.parse()?;
        dp.normalize_layers = self.normalize_layers;
        dp.sampling_rate = self.sampling_rate;
        dp.freeze_fraction = self.freeze_fraction;
        dp.warm_start_public = self.warm_start_public;
        dp.warm_start_epochs = self.warm_start_epochs;
        dp.discrete_noise = self.discrete_noise;
        dp.ledger = self.ledger.clone();
        dp.budget_epsilon = self.budget_epsilon;
        dp.reproducible = self.reproducible_noise;
        Ok(Some(dp))
    }
}

/// Arguments of `hush-host train`.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// Task.
    #[arg(long, value_enum, default_value = "kws")]
    pub task: TaskArg,
    /// Corpus directory.
    #[arg(long)]
    pub data: PathBuf,
    /// The model and how to train it.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Output model directory.
    #[arg(long)]
    pub out: PathBuf,
    /// ASR: beam width of the final report's beam-search WER.
    #[arg(long, default_value_t = 8)]
    pub beam: usize,
    /// Train with DP-SGD (example-level differential privacy), and its options.
    #[command(flatten)]
    pub dp: DpArgs,
    /// ASR: start from a pretrained encoder (the output folder of `hush-host pretrain`, same
    /// --arch; its output layer starts fresh) or fine-tune a whole ASR model package (e.g.
    /// models/asr, same --arch and features).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// ASR: keep the pretrained encoder fixed and train only the output layer (needs
    /// --init).
    #[arg(long, requires = "init")]
    pub freeze_encoder: bool,
    /// DP: most MiB of per-example weight copies and gradients at once (larger steps run
    /// as several physical batches with gradient accumulation).
    #[arg(long, requires = "dp", default_value_t = 256)]
    pub max_grad_memory_mb: usize,
    /// DP: per-example gradients from weight copies (vectorized), from activations and
    /// output gradients (activations; fastest for models dominated by linear layers), or
    /// one example at a time (loop). All give the same gradients.
    #[arg(long, requires = "dp", default_value = "vectorized")]
    pub per_example_method: String,
    /// DP: threads per-example gradients are computed on (the same gradients at any
    /// count; with dropout, a seeded run repeats bit for bit only at 1).
    #[arg(long, requires = "dp", default_value_t = 1)]
    pub per_example_threads: usize,
    /// DP: adaptive clipping (Andrew et al. 2021): move the clip bound, starting at --clip,
    /// toward this quantile of the per-example gradient norms, in (0, 1).
    #[arg(long, requires = "dp")]
    pub adaptive_clip_quantile: Option<f64>,
    /// DP: geometric learning rate of adaptive clipping.
    #[arg(long, requires = "adaptive_clip_quantile", default_value_t = 0.2)]
    pub adaptive_clip_lr: f64,
    /// DP: noise std of adaptive clipping's unclipped count (default: expected batch / 20).
    #[arg(long, requires = "adaptive_clip_quantile")]
    pub adaptive_clip_count_noise: Option<f64>,
}

fn dp_config(args: &TrainArgs) -> anyhow::Result<DpConfig> {
    let Some(mut dp) = args.dp.config()? else {
        anyhow::bail!("DP options without --dp");
    };
    dp.max_grad_memory_mb = args.max_grad_memory_mb;
    dp.per_example_method = args.per_example_method.parse()?;
    dp.per_example_threads = args.per_example_threads;
    dp.adaptive_clip_quantile = args.adaptive_clip_quantile;
    dp.adaptive_clip_lr = args.adaptive_clip_lr;
    dp.adaptive_clip_count_noise = args.adaptive_clip_count_noise;
    Ok(dp)
}

/// Trains, prints a progress line per epoch and the test report, writes the package.
pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    announce_device(args.model.device);
    if args.task == TaskArg::Asr {
        let mut cfg = args.model.asr_config(&args.data, args.beam)?;
        cfg.init = args.init.clone();
        cfg.freeze_encoder = args.freeze_encoder;
        if args.dp.dp {
            let dp = dp_config(&args)?;
            let data = hush_host::train::asr::load_asr(&args.data, cfg.features.frame.sample_rate)
                .with_context(|| format!("reading {}", args.data.display()))?;
            let r = hush_host::train::asr::train_asr_dp_on(
                &cfg,
                &dp,
                &data,
                &args.out,
                &command,
                &mut asr_epoch_line(cfg.epochs),
            )
            .with_context(|| format!("ASR DP training on {}", args.data.display()))?;
            let p = &r.privacy;
            println!(
                "DP-SGD: noise multiplier {:.4}, q {:.4}, {} steps, clip {}, {} private \
                 utterances; ε = {:.3} (per utterance, δ = {:e})",
                p.noise_multiplier,
                p.sampling_rate,
                p.steps,
                p.clip,
                p.population,
                p.epsilon_rdp.epsilon,
                p.delta
            );
            print_asr_card(&r.report.card, &args.out);
            return Ok(());
        }
        let report = train_asr(&cfg, &args.out, &command, &mut asr_epoch_line(cfg.epochs))
            .with_context(|| format!("ASR training on {}", args.data.display()))?;
        print_asr_card(&report.card, &args.out);
        return Ok(());
    }
    let cfg = args.model.kws_config(&args.data)?;
    let mut progress = epoch_line(cfg.epochs);
    if args.init.is_some() {
        anyhow::bail!("--init applies to --task asr only");
    }
    let card = if args.dp.dp {
        let dp = dp_config(&args)?;
        let report = train_kws_dp(&cfg, &dp, &args.out, &command, &mut progress)
            .with_context(|| format!("DP training on {}", args.data.display()))?;
        let p = &report.privacy;
        println!(
            "DP-SGD: noise multiplier {:.4}, q {:.4}, {} steps, clip {} ({}), {} private examples",
            p.noise_multiplier, p.sampling_rate, p.steps, p.clip, p.clipping, p.population
        );
        if let Some(a) = &p.adaptive_clip {
            println!(
                "adaptive clipping: quantile {}, clip {} → {:.4}, gradient noise multiplier \
                 {:.4} (count noise σ_b {:.3})",
                a.target_quantile,
                p.clip,
                a.final_clip,
                a.gradient_noise_multiplier,
                a.count_noise_std
            );
        }
        print_privacy(p, &args.out);
        report.card
    } else {
        train_kws(&cfg, &args.out, &command, &mut progress)
            .with_context(|| format!("training on {}", args.data.display()))?
            .card
    };
    print_card(&card, &args.out);
    Ok(())
}

/// Prints a DP release's ε (RDP, and PLD when known) and where its ledger record and
/// `privacy.json` (in `out`) are.
pub fn print_privacy(p: &hush_host::train::PrivacyReport, out: &std::path::Path) {
    println!("{}", p.epsilon_rdp);
    if let Some(pld) = &p.epsilon_pld {
        println!("{pld}");
    }
    println!(
        "ledger {} record {}; privacy report {}",
        p.ledger,
        p.ledger_record,
        out.join("privacy.json").display()
    );
}

/// Prints a trained model's size, per-split metrics and test confusion matrix.
pub fn print_card(card: &hush_models::package::ModelCard, out: &std::path::Path) {
    println!(
        "{} ({} trainable parameters) → {}",
        card.arch.name(),
        card.num_trainable,
        out.display()
    );
    if let Some(m) = card.metrics.as_ref() {
        for (split, s) in &m.splits {
            println!(
                "{split:>10}: {} examples, accuracy {:.3}, balanced keyword accuracy {:.3}",
                s.examples, s.accuracy, s.balanced_keyword_accuracy
            );
        }
        if let Some(t) = m.splits.get("test") {
            println!(
                "test confusion (rows: truth, columns: predicted; {}):",
                card.labels.join(" ")
            );
            for (label, row) in card.labels.iter().zip(&t.confusion) {
                let cells: Vec<String> = row.iter().map(|c| format!("{c:>3}")).collect();
                println!("{label:>10} {}", cells.join(""));
            }
        }
    }
}

/// Prints a trained recogniser's size and per-split error rates.
pub fn print_asr_card(card: &hush_models::package::AsrCard, out: &std::path::Path) {
    println!(
        "{} ({} trainable parameters) → {}",
        card.arch.name(),
        card.num_trainable,
        out.display()
    );
    if let Some(m) = card.metrics.as_ref() {
        for (split, s) in &m.splits {
            let beam = match (s.beam_width, s.beam_wer, s.beam_cer) {
                (Some(w), Some(wer), Some(cer)) => {
                    format!(", beam {w}: WER {wer:.3} CER {cer:.3}")
                }
                _ => String::new(),
            };
            println!(
                "{split:>10}: {} utterances ({} words), greedy WER {:.3} CER {:.3}{beam}",
                s.utterances, s.words, s.greedy_wer, s.greedy_cer
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        model: ModelArgs,
    }

    #[test]
    fn spec_augment_masks_reach_the_config_scaled_to_the_features() {
        let cli = Cli::parse_from([
            "train",
            "--time-masks",
            "2,20",
            "--freq-masks",
            "3, 10",
            "--time-warp",
            "8",
            "--frame-shift-ms",
            "20",
            "--num-mel-bins",
            "20",
        ]);
        let cfg = cli
            .model
            .kws_config(std::path::Path::new("corpus"))
            .unwrap();
        // Widths are given for 98 frames × 40 bins: halved for 49 × 20.
        assert_eq!(cfg.augment.time_masks, (2, 10));
        assert_eq!(cfg.augment.freq_masks, (3, 5));
        assert_eq!(cfg.augment.time_warp, 4);
        let defaults = Cli::parse_from(["train"])
            .model
            .kws_config(std::path::Path::new("c"));
        let defaults = defaults.unwrap().augment;
        assert_eq!(
            (defaults.time_masks, defaults.freq_masks),
            ((2, 10), (2, 5))
        );
        assert_eq!(defaults.time_warp, 0);
        let asr = Cli::parse_from(["train", "--time-warp", "8"]).model;
        let err = asr.asr_config(std::path::Path::new("c"), 4).unwrap_err();
        assert!(err.to_string().contains("--time-warp"), "{err}");
        assert!(parse_masks("2,x").is_err() && parse_masks("9,1").is_err());
    }

    #[test]
    fn resynthesis_and_burst_options_reach_both_configs_and_bad_values_are_refused() {
        let cli = Cli::parse_from([
            "train",
            "--resynth",
            "0.5",
            "--resynth-f0-hz",
            "100, 250",
            "--release-bursts",
            "0.25",
        ]);
        let kws = cli
            .model
            .kws_config(std::path::Path::new("c"))
            .unwrap()
            .augment;
        let asr = cli
            .model
            .asr_config(std::path::Path::new("c"), 4)
            .unwrap()
            .augment;
        for a in [kws, asr] {
            assert_eq!(
                (a.resynth_prob, a.resynth_f0_hz, a.release_burst_prob),
                (0.5, [100.0, 250.0], 0.25)
            );
        }
        let off = Cli::parse_from(["train"])
            .model
            .kws_config(std::path::Path::new("c"))
            .unwrap()
            .augment;
        assert_eq!((off.resynth_prob, off.release_burst_prob), (0.0, 0.0));
        for bad in [
            ["--resynth", "1.5"],
            ["--resynth", "x"],
            ["--resynth-f0-hz", "300,100"],
            ["--release-bursts", "-0.1"],
        ] {
            assert!(
                Cli::try_parse_from(["train", bad[0], bad[1]]).is_err(),
                "{bad:?}"
            );
        }
        assert!(parse_f0_range("20,100").is_err() && parse_f0_range("100").is_err());
    }

    #[test]
    fn the_mel_upper_edge_reaches_the_features_and_is_kws_only() {
        let cli = Cli::parse_from(["train", "--high-freq-hz", "4000"]);
        let cfg = cli.model.kws_config(std::path::Path::new("c")).unwrap();
        assert_eq!(cfg.features.mel.high_freq, 4000.0);
        assert_eq!(cfg.features.mel.high_freq_hz(16_000), 4000.0);
        let default = Cli::parse_from(["train"])
            .model
            .kws_config(std::path::Path::new("c"));
        assert_eq!(default.unwrap().features.mel.high_freq_hz(16_000), 8000.0);
        let asr = cli.model.asr_config(std::path::Path::new("c"), 4);
        assert!(asr.unwrap_err().to_string().contains("--high-freq-hz"));
    }
}
