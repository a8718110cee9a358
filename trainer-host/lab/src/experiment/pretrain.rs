//! `hush-host experiment pretrain`: does BEST-RQ pretraining of the ASR encoder on
//! unlabeled speech help CTC fine-tuning on a smaller labeled corpus, and what does DP
//! pretraining cost?
//!
//! Runs, all on the same labeled corpus, architecture and seed:
//!
//! 1. CTC from scratch;
//! 2. BEST-RQ pretraining without DP on the unlabeled corpus, then CTC fine-tuning (whole
//!    model; and with the encoder frozen);
//! 3. for every target ε: DP BEST-RQ pretraining (public warm start on a share of the
//!    unlabeled speakers) with flat clipping, with per-layer-dim clipping, and with
//!    per-layer-dim clipping plus gradient-based layer freezing; each then fine-tuned.
//!
//! The unlabeled corpus is larger than the labeled one and has other speakers (another
//! generator seed); both are made with [`hush_corpus::synthesize`] when their folders
//! are missing or empty. DP runs have their own ledgers and seeded noise (a measurement,
//! not a release). Output, rewritten after every run: `results.json`, `results.md`,
//! `wer.png`, and each run's encoder and model under `runs/`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hush_device::dataset::{read_corpus, Split};
use hush_models::dp::ClipStrategy;
use serde::{Deserialize, Serialize};

use super::{fmt_opt, io_err, is_missing_or_empty, write_file, write_json, ExperimentError};
use hush_corpus::{synthesize, CorpusKind, OutputFormat, SynthConfig};
use hush_plot::{line_plot, Series};
use hush_privacy::accountant::EpsilonReport;
use hush_train::asr::{load_asr, train_asr_on, AsrTrainConfig};
use hush_train::pretrain::{pretrain_on, PretrainConfig, PretrainData};
use hush_train::{Augment, DpConfig, TrainError};

/// An ASR corpus to generate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsrCorpusSpec {
    /// Synthetic speakers.
    pub speakers: usize,
    /// Utterances per speaker.
    pub utterances: usize,
    /// Generator seed (different seeds give different voices).
    pub seed: u64,
}

/// Everything the experiment decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PretrainExperimentConfig {
    /// Output folder.
    pub out: PathBuf,
    /// Labeled corpus (generated from `labeled_spec` if missing or empty).
    pub labeled: PathBuf,
    /// How to generate it.
    pub labeled_spec: AsrCorpusSpec,
    /// Unlabeled corpus (its transcripts are never read for pretraining).
    pub unlabeled: PathBuf,
    /// How to generate it.
    pub unlabeled_spec: AsrCorpusSpec,
    /// Architecture (`ctc-gru-small`).
    pub arch: String,
    /// Pretraining epochs (the DP phase of DP runs).
    pub pretrain_epochs: usize,
    /// Utterances per non-private pretraining step.
    pub pretrain_batch: usize,
    /// Expected batch of DP pretraining.
    pub dp_batch: usize,
    /// Peak learning rate of pretraining.
    pub pretrain_lr: f64,
    /// Fine-tuning (and from-scratch) epochs.
    pub finetune_epochs: usize,
    /// Target ε of the DP runs.
    pub epsilons: Vec<f64>,
    /// δ of every DP run (below 1 / private unlabeled utterances).
    pub delta: f64,
    /// Total clip bound C.
    pub clip: f32,
    /// Share of the unlabeled speakers that are public (DP warm start).
    pub warm_start_public: f64,
    /// Epochs of the public warm start.
    pub warm_start_epochs: usize,
    /// Fraction of layers frozen after the warm start in the freezing variant.
    pub freeze_fraction: f64,
    /// Seed of everything but the corpora.
    pub seed: u64,
}

impl PretrainExperimentConfig {
    /// The full experiment (about 30–40 minutes on 2 CPU cores): labeled 40 speakers × 10
    /// utterances, unlabeled 120 speakers × 10 utterances, `ctc-gru-small`, 4 pretraining
    /// epochs, 8 fine-tuning epochs, ε ∈ {4, 10}, δ = 1e-4.
    pub fn new(out: &Path) -> Self {
        Self {
            out: out.to_path_buf(),
            labeled: out.join("corpus-labeled"),
            labeled_spec: AsrCorpusSpec {
                speakers: 40,
                utterances: 10,
                seed: 2026,
            },
            unlabeled: out.join("corpus-unlabeled"),
            unlabeled_spec: AsrCorpusSpec {
                speakers: 120,
                utterances: 10,
                seed: 2028,
            },
            arch: "ctc-gru-small".into(),
            pretrain_epochs: 4,
            pretrain_batch: 16,
            dp_batch: 64,
            pretrain_lr: 2e-3,
            finetune_epochs: 8,
            epsilons: vec![4.0, 10.0],
            delta: 1e-4,
            clip: 1.0,
            warm_start_public: 0.1,
            warm_start_epochs: 2,
            freeze_fraction: 0.25,
            seed: 0,
        }
    }

    /// A pipeline check in a few minutes: 20 labeled and 48 unlabeled speakers × 4
    /// utterances, 1 pretraining and 2 fine-tuning epochs, ε = 10 only, δ = 1e-3. Its
    /// numbers mean nothing.
    pub fn quick(out: &Path) -> Self {
        let full = Self::new(out);
        Self {
            labeled_spec: AsrCorpusSpec {
                speakers: 20,
                utterances: 4,
                ..full.labeled_spec.clone()
            },
            unlabeled_spec: AsrCorpusSpec {
                speakers: 48,
                utterances: 4,
                ..full.unlabeled_spec.clone()
            },
            pretrain_epochs: 1,
            dp_batch: 16,
            finetune_epochs: 2,
            epsilons: vec![10.0],
            delta: 1e-3,
            warm_start_public: 0.2,
            warm_start_epochs: 1,
            ..full
        }
    }

    fn check(&self) -> Result<(), ExperimentError> {
        let bad = |what: String| Err(ExperimentError::Config(what));
        if let Some(e) = self.epsilons.iter().find(|e| !(e.is_finite() && **e > 0.0)) {
            return bad(format!("--epsilons: {e} is not a finite ε > 0"));
        }
        if self.labeled_spec.speakers >= self.unlabeled_spec.speakers {
            return bad(format!(
                "the unlabeled corpus to generate ({} speakers) must be larger than the \
                 labeled one ({})",
                self.unlabeled_spec.speakers, self.labeled_spec.speakers
            ));
        }
        Ok(())
    }
}

/// How the encoder is pretrained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pretraining {
    /// Not at all (CTC from scratch).
    None,
    /// BEST-RQ without DP.
    Plain,
    /// BEST-RQ with DP-SGD.
    Dp {
        /// Target ε.
        epsilon: f64,
        /// Clipping strategy.
        clipping: ClipStrategy,
        /// Gradient-based layer freezing after the public warm start.
        freeze_layers: bool,
    },
}

/// One run: how the encoder is pretrained and whether fine-tuning freezes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    /// Pretraining.
    pub pretraining: Pretraining,
    /// Fine-tune only the output layer.
    pub freeze_encoder: bool,
}

impl Setting {
    /// The table's name of the setting.
    pub fn name(&self) -> String {
        let frozen = if self.freeze_encoder {
            ", encoder frozen"
        } else {
            ""
        };
        match self.pretraining {
            Pretraining::None => "CTC from scratch".into(),
            Pretraining::Plain => format!("BEST-RQ (no DP) + fine-tune{frozen}"),
            Pretraining::Dp {
                clipping,
                freeze_layers,
                ..
            } => format!(
                "DP BEST-RQ, {clipping}{} + fine-tune{frozen}",
                if freeze_layers {
                    ", layer freezing"
                } else {
                    ""
                }
            ),
        }
    }

    /// The plot's series name (the setting without ε).
    fn series(&self) -> String {
        self.name()
    }

    fn slug(&self) -> String {
        let mut s = match self.pretraining {
            Pretraining::None => "scratch".to_string(),
            Pretraining::Plain => "bestrq".to_string(),
            Pretraining::Dp {
                epsilon,
                clipping,
                freeze_layers,
            } => format!(
                "dp-eps{epsilon}-{clipping}{}",
                if freeze_layers { "-freeze" } else { "" }
            ),
        };
        if self.freeze_encoder {
            s.push_str("-frozen-encoder");
        }
        s
    }

    /// Every run of the experiment for the target `epsilons`.
    pub fn all(epsilons: &[f64]) -> Vec<Setting> {
        let mut v = vec![
            Setting {
                pretraining: Pretraining::None,
                freeze_encoder: false,
            },
            Setting {
                pretraining: Pretraining::Plain,
                freeze_encoder: false,
            },
            Setting {
                pretraining: Pretraining::Plain,
                freeze_encoder: true,
            },
        ];
        for &epsilon in epsilons {
            for (clipping, freeze_layers) in [
                (ClipStrategy::Flat, false),
                (ClipStrategy::PerLayerDim, false),
                (ClipStrategy::PerLayerDim, true),
            ] {
                v.push(Setting {
                    pretraining: Pretraining::Dp {
                        epsilon,
                        clipping,
                        freeze_layers,
                    },
                    freeze_encoder: false,
                });
            }
        }
        v
    }
}

/// One run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The setting's name.
    pub name: String,
    /// The setting.
    pub setting: Setting,
    /// ε by RDP of the pretraining steps run (DP runs).
    pub epsilon_rdp: Option<EpsilonReport>,
    /// ε by PLD of the same steps.
    pub epsilon_pld: Option<EpsilonReport>,
    /// Noise multiplier σ.
    pub noise_multiplier: Option<f64>,
    /// Noisy pretraining steps.
    pub steps: Option<u64>,
    /// Layers frozen during DP pretraining.
    pub frozen_layers: usize,
    /// BEST-RQ validation loss of the pretrained encoder (last epoch).
    pub pretrain_val_loss: Option<f64>,
    /// Test greedy WER after fine-tuning.
    pub test_wer: Option<f64>,
    /// Test greedy CER after fine-tuning.
    pub test_cer: Option<f64>,
    /// Validation greedy WER of the kept epoch.
    pub validation_wer: Option<f64>,
    /// Why a trainer refused the run, if it did.
    pub refused: Option<String>,
    /// Wall-clock seconds (pretraining and fine-tuning).
    pub seconds: f64,
    /// The run's folder (encoder/ and model/).
    pub dir: PathBuf,
}

/// Sizes of a corpus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorpusInfo {
    /// Its folder.
    pub path: PathBuf,
    /// Made by this experiment (with `spec`), or given.
    pub generated: bool,
    /// How it was (or would be) generated.
    pub spec: AsrCorpusSpec,
    /// Training utterances.
    pub train: usize,
    /// Validation utterances.
    pub validation: usize,
    /// Test utterances.
    pub test: usize,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PretrainResults {
    /// The command line.
    pub command: String,
    /// The configuration.
    pub config: PretrainExperimentConfig,
    /// The labeled corpus.
    pub labeled: CorpusInfo,
    /// The unlabeled corpus.
    pub unlabeled: CorpusInfo,
    /// Every run so far.
    pub runs: Vec<RunResult>,
}

fn prepare(
    dir: &Path,
    spec: &AsrCorpusSpec,
    what: &str,
    log: &mut dyn FnMut(&str),
) -> Result<CorpusInfo, ExperimentError> {
    let generated = is_missing_or_empty(dir)?;
    if generated {
        log(&format!(
            "generating the {what} ASR corpus in {}: {} speakers × {} utterances (seed {})",
            dir.display(),
            spec.speakers,
            spec.utterances,
            spec.seed
        ));
        let mut synth = SynthConfig::new(dir.to_path_buf());
        synth.kind = CorpusKind::Asr;
        synth.speakers = spec.speakers;
        synth.utterances = spec.utterances;
        synth.seed = spec.seed;
        synth.format = OutputFormat::Flac;
        let start = Instant::now();
        let s = synthesize(&synth, &|_, _| {})?;
        log(&format!(
            "{what} corpus: {} utterances ({:.0} s of audio) in {:.0} s",
            s.clips,
            s.seconds,
            start.elapsed().as_secs_f64()
        ));
    }
    let (_, examples) = read_corpus(dir)?;
    let count = |split| examples.iter().filter(|e| e.split == split).count();
    Ok(CorpusInfo {
        path: dir.to_path_buf(),
        generated,
        spec: spec.clone(),
        train: count(Split::Train),
        validation: count(Split::Validation),
        test: count(Split::Test),
    })
}

/// Runs the experiment; `log` gets progress lines. Writes the results after every run.
pub fn run_pretrain_experiment(
    cfg: &PretrainExperimentConfig,
    command: &str,
    log: &mut dyn FnMut(&str),
) -> Result<PretrainResults, ExperimentError> {
    cfg.check()?;
    let runs_dir = cfg.out.join("runs");
    if !is_missing_or_empty(&runs_dir)? {
        return Err(ExperimentError::Config(format!(
            "{} exists and is not empty (its ledgers hold earlier releases); choose a new --out",
            runs_dir.display()
        )));
    }
    std::fs::create_dir_all(&runs_dir).map_err(io_err(&runs_dir))?;
    let labeled = prepare(&cfg.labeled, &cfg.labeled_spec, "labeled", log)?;
    let unlabeled = prepare(&cfg.unlabeled, &cfg.unlabeled_spec, "unlabeled", log)?;
    log(&format!(
        "labeled: {} train / {} validation / {} test utterances; unlabeled: {} train / {} \
         validation (transcripts unused)",
        labeled.train, labeled.validation, labeled.test, unlabeled.train, unlabeled.validation
    ));
    if unlabeled.train <= labeled.train {
        return Err(ExperimentError::Config(format!(
            "the unlabeled corpus ({} training utterances) must be larger than the labeled \
             one ({})",
            unlabeled.train, labeled.train
        )));
    }
    let mut results = PretrainResults {
        command: command.to_string(),
        config: cfg.clone(),
        labeled,
        unlabeled,
        runs: Vec::new(),
    };

    let train_err = |run: &str| {
        let run = run.to_string();
        move |source| ExperimentError::Train { run, source }
    };
    let mut finetune = AsrTrainConfig::new(&cfg.labeled, &cfg.arch);
    finetune.epochs = cfg.finetune_epochs;
    finetune.patience = cfg.finetune_epochs;
    finetune.seed = cfg.seed;
    finetune.beam = 1;
    finetune.augment = Augment::none();
    let labeled_data = load_asr(&cfg.labeled, finetune.features.frame.sample_rate)
        .map_err(train_err("loading the labeled corpus"))?;
    let mut pre = PretrainConfig::new(&cfg.unlabeled, &cfg.arch);
    pre.epochs = cfg.pretrain_epochs;
    pre.batch_size = cfg.pretrain_batch;
    pre.lr = cfg.pretrain_lr;
    pre.seed = cfg.seed;
    pre.features = finetune.features.clone();
    let unlabeled_data =
        PretrainData::load(&pre).map_err(train_err("loading the unlabeled corpus"))?;

    let settings = Setting::all(&cfg.epsilons);
    let total = settings.len();
    // The non-private encoder is pretrained once and fine-tuned twice.
    let mut plain_encoder: Option<(PathBuf, Option<f64>)> = None;
    for (i, setting) in settings.into_iter().enumerate() {
        let name = setting.name();
        let label = match setting.pretraining {
            Pretraining::Dp { epsilon, .. } => format!("{name}, ε = {epsilon}"),
            _ => name.clone(),
        };
        log(&format!("[{}/{total}] {label}", i + 1));
        let dir = runs_dir.join(setting.slug());
        let start = Instant::now();
        let mut run = RunResult {
            name: name.clone(),
            setting,
            epsilon_rdp: None,
            epsilon_pld: None,
            noise_multiplier: None,
            steps: None,
            frozen_layers: 0,
            pretrain_val_loss: None,
            test_wer: None,
            test_cer: None,
            validation_wer: None,
            refused: None,
            seconds: 0.0,
            dir: dir.clone(),
        };
        let mut epoch_log = |what: &str, line: String| log(&format!("  {what}: {line}"));
        // Pretraining.
        let encoder = match setting.pretraining {
            Pretraining::None => None,
            Pretraining::Plain if plain_encoder.is_some() => {
                plain_encoder.as_ref().map(|(d, _)| d.clone())
            }
            Pretraining::Plain | Pretraining::Dp { .. } => {
                let enc_dir = dir.join("encoder");
                let dp = match setting.pretraining {
                    Pretraining::Dp {
                        epsilon,
                        clipping,
                        freeze_layers,
                    } => {
                        let mut dp = DpConfig::new(epsilon, cfg.delta, cfg.clip);
                        dp.clipping = clipping;
                        dp.warm_start_public = cfg.warm_start_public;
                        dp.warm_start_epochs = cfg.warm_start_epochs;
                        if freeze_layers {
                            dp.freeze_fraction = cfg.freeze_fraction;
                        }
                        dp.ledger = dir.join("ledger.sqlite");
                        dp.reproducible = true;
                        Some(dp)
                    }
                    _ => None,
                };
                let mut p = pre.clone();
                if dp.is_some() {
                    p.batch_size = cfg.dp_batch;
                }
                std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
                let outcome = pretrain_on(
                    &p,
                    dp.as_ref(),
                    &unlabeled_data,
                    &enc_dir,
                    command,
                    &mut |e| {
                        epoch_log(
                            "pretrain",
                            format!(
                                "epoch {} loss {:.4} val loss {:.4}",
                                e.epoch, e.train_loss, e.val_loss
                            ),
                        )
                    },
                );
                match outcome {
                    Ok(report) => {
                        run.pretrain_val_loss = report.card.loss_curve.last().map(|e| e.val_loss);
                        if let Some(p) = &report.privacy {
                            run.epsilon_rdp = Some(p.epsilon_rdp);
                            run.epsilon_pld = p.epsilon_pld;
                            run.noise_multiplier = Some(p.noise_multiplier);
                            run.steps = Some(p.steps);
                            run.frozen_layers = p.frozen_layers.len();
                        } else {
                            plain_encoder = Some((enc_dir.clone(), run.pretrain_val_loss));
                        }
                        Some(enc_dir)
                    }
                    Err(e @ TrainError::Option { .. }) => {
                        run.refused = Some(e.to_string());
                        None
                    }
                    Err(source) => return Err(ExperimentError::Train { run: label, source }),
                }
            }
        };
        if setting.pretraining == Pretraining::Plain && run.pretrain_val_loss.is_none() {
            run.pretrain_val_loss = plain_encoder.as_ref().and_then(|(_, l)| *l);
        }
        // Fine-tuning (or training from scratch).
        if run.refused.is_none() {
            let mut ft = finetune.clone();
            ft.init = encoder;
            ft.freeze_encoder = setting.freeze_encoder;
            let report = train_asr_on(&ft, &labeled_data, &dir.join("model"), command, &mut |e| {
                epoch_log(
                    "ctc",
                    format!(
                        "epoch {} loss {:.4} val WER {:.3}",
                        e.epoch, e.train_loss, e.val_wer
                    ),
                )
            })
            .map_err(|source| ExperimentError::Train {
                run: label.clone(),
                source,
            })?;
            let split = |s: &str| {
                report
                    .card
                    .metrics
                    .as_ref()
                    .and_then(|m| m.splits.get(s))
                    .cloned()
            };
            run.test_wer = split("test").map(|m| m.greedy_wer);
            run.test_cer = split("test").map(|m| m.greedy_cer);
            run.validation_wer = split("validation").map(|m| m.greedy_wer);
        }
        run.seconds = start.elapsed().as_secs_f64();
        match (&run.refused, run.test_wer, run.test_cer) {
            (Some(why), _, _) => log(&format!("  refused: {why}")),
            (None, Some(w), Some(c)) => log(&format!(
                "  test WER {w:.3}, CER {c:.3}{} ({:.0} s)",
                run.epsilon_rdp
                    .as_ref()
                    .map_or(String::new(), |e| format!(", ε = {:.2} (RDP)", e.epsilon)),
                run.seconds
            )),
            _ => {}
        }
        results.runs.push(run);
        write_results(&cfg.out, &results)?;
    }
    Ok(results)
}

/// The results table as Markdown.
pub fn results_markdown(r: &PretrainResults) -> String {
    let c = &r.config;
    let mut s = String::new();
    s.push_str("# BEST-RQ pretraining of the ASR encoder (with and without DP), then CTC\n\n");
    s.push_str(&format!("Command: `{}`\n\n", r.command));
    for (what, info) in [("Labeled", &r.labeled), ("Unlabeled", &r.unlabeled)] {
        s.push_str(&format!(
            "{what} corpus `{}` ({}; {} speakers × {} utterances, generator seed {}): {} train \
             / {} validation / {} test utterances.\n",
            info.path.display(),
            if info.generated { "generated" } else { "given" },
            info.spec.speakers,
            info.spec.utterances,
            info.spec.seed,
            info.train,
            info.validation,
            info.test
        ));
    }
    s.push_str(&format!(
        "\nArchitecture `{}` (80-bin fbank). Pretraining: {} epochs (batch {}, DP expected \
         batch {}), lr {}; fine-tuning and training from scratch: {} epochs, no augmentation. \
         DP: example-level, add/remove adjacency, Poisson sampling, δ = {:e}, C = {}, public \
         warm start on {} of the unlabeled speakers ({} epochs); layer freezing freezes {} of \
         the layers.\n\n",
        c.arch,
        c.pretrain_epochs,
        c.pretrain_batch,
        c.dp_batch,
        c.pretrain_lr,
        c.finetune_epochs,
        c.delta,
        c.clip,
        c.warm_start_public,
        c.warm_start_epochs,
        c.freeze_fraction
    ));
    s.push_str(
        "| setting | target ε | ε (RDP) | ε (PLD) | σ | DP steps | frozen layers | \
         pretrain val loss | test WER | test CER | seconds |\n",
    );
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for run in &r.runs {
        let eps = |e: &Option<EpsilonReport>| fmt_opt(e.as_ref().map(|e| e.epsilon), 2);
        let target = match run.setting.pretraining {
            Pretraining::Dp { epsilon, .. } => epsilon.to_string(),
            Pretraining::Plain => "∞".into(),
            Pretraining::None => "—".into(),
        };
        let (wer, cer) = match &run.refused {
            Some(why) => (format!("refused: {why}"), "—".into()),
            None => (fmt_opt(run.test_wer, 3), fmt_opt(run.test_cer, 3)),
        };
        s.push_str(&format!(
            "| {} | {target} | {} | {} | {} | {} | {} | {} | {wer} | {cer} | {:.0} |\n",
            run.name,
            eps(&run.epsilon_rdp),
            eps(&run.epsilon_pld),
            fmt_opt(run.noise_multiplier, 3),
            run.steps.map_or("—".into(), |s| s.to_string()),
            run.frozen_layers,
            fmt_opt(run.pretrain_val_loss, 3),
            run.seconds
        ));
    }
    s.push_str(
        "\nWER and CER: greedy CTC decoding on the labeled corpus's test speakers. ε: of the \
         pretraining steps actually run, example level (one unlabeled utterance), add/remove; \
         fine-tuning is not private. Pretrain val loss: BEST-RQ cross-entropy on masked steps \
         of the unlabeled validation speakers (ln of the codebook size at chance). Plot: \
         `wer.png`.\n",
    );
    s
}

/// Test CER (and WER, once some run gets words right) against target ε: one line per DP
/// variant, the non-DP settings as horizontal lines.
fn plot_series(r: &PretrainResults) -> Vec<Series> {
    let any_word = r
        .runs
        .iter()
        .any(|run| run.test_wer.is_some_and(|w| w < 0.999));
    let (lo, hi) = r
        .config
        .epsilons
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
    let (lo, hi) = if lo > hi { (0.0, 1.0) } else { (lo, hi) };
    let mut series: Vec<Series> = Vec::new();
    for run in &r.runs {
        for (metric, value) in [("CER", run.test_cer), ("WER", run.test_wer)] {
            let Some(v) = value else { continue };
            if metric == "WER" && !any_word {
                continue;
            }
            let (name, point) = match run.setting.pretraining {
                Pretraining::Dp { epsilon, .. } => (
                    format!("{metric}: {}", run.setting.series()),
                    vec![(epsilon, v)],
                ),
                _ => (
                    format!("{metric}: {}", run.setting.series()),
                    vec![(lo, v), (hi, v)],
                ),
            };
            match series.iter_mut().find(|s| s.name == name) {
                Some(s) => s.points.extend(point),
                None => series.push(Series {
                    name,
                    points: point,
                }),
            }
        }
    }
    series
}

fn plot_series_has_wer(series: &[Series]) -> bool {
    series.iter().any(|s| s.name.starts_with("WER"))
}

/// Writes `results.json`, `results.md` and `wer.png` of `r` to `out` (after every run, and
/// to redraw committed results).
pub fn write_results(out: &Path, r: &PretrainResults) -> Result<(), ExperimentError> {
    write_json(out, "results.json", r)?;
    write_file(out, "results.md", results_markdown(r))?;
    let series = plot_series(r);
    if !series.is_empty() {
        line_plot(
            &out.join("wer.png"),
            "ASR: CTC from scratch vs BEST-RQ pretraining (DP at target ε)",
            "target ε of DP pretraining",
            if plot_series_has_wer(&series) {
                "test error rate"
            } else {
                "test CER (WER is 1 in every run)"
            },
            &series,
        )?;
    }
    Ok(())
}
