//! `hush-host experiment dp-sgd`: keyword-spotting accuracy against ε for DP-SGD.
//!
//! One non-private run, then for every target ε one DP-SGD run per variant: flat and
//! per-layer-dim clipping, each without and with a public warm start followed by
//! gradient-based layer freezing ([`hush_train::dp`]). All runs share the corpus, the
//! architecture ([`crate::recipes::small_kws_config`]: 49 × 20 fbank into the small 2-conv +
//! 2-FC CNN, 12 classes), the seed and δ. Every DP run has its own ledger (each release
//! is authorised against a budget of its own target ε) and seeded noise and sampling
//! (reproducible, which a real release must not be: this is a measurement).
//!
//! DP-SGD needs many thousands of examples: when the corpus folder is missing or empty
//! the experiment first makes one with [`hush_corpus::synthesize`] and says so.
//!
//! Output, rewritten after every run so that a long experiment can be watched:
//! `results.json` ([`DpSgdResults`]), `results.md` (the table), `accuracy_vs_epsilon.png`,
//! and each run's model package (with `privacy.json`) under `runs/<setting>/`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hush_device::dataset::{read_corpus, Split};
use hush_models::compute::ComputeKind;
use hush_models::dp::ClipStrategy;
use serde::{Deserialize, Serialize};

use super::{
    fmt_opt, fresh_runs_dir, io_err, is_missing_or_empty, write_results_and_plot, ExperimentError,
};
use crate::recipes::small_kws_config;
use hush_corpus::{synthesize, OutputFormat, SynthConfig};
use hush_plot::Series;
use hush_privacy::accountant::EpsilonReport;
use hush_train::{train_kws, train_kws_dp, DpConfig, EpochReport, KwsTrainConfig, TrainError};

/// The corpus to generate when the data folder is missing or empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorpusSpec {
    /// Synthetic speakers.
    pub speakers: usize,
    /// Takes of every keyword per speaker.
    pub takes: usize,
    /// Unknown-class words per speaker.
    pub unknown_words: usize,
    /// Seed of the generator.
    pub seed: u64,
}

/// Everything the experiment decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DpSgdExperimentConfig {
    /// Keyword corpus (Speech Commands layout); generated from `corpus` if missing or empty.
    pub data: PathBuf,
    /// How to generate the corpus.
    pub corpus: CorpusSpec,
    /// Output folder.
    pub out: PathBuf,
    /// Target ε of the DP runs.
    pub epsilons: Vec<f64>,
    /// δ of every DP run (must be below 1/private examples).
    pub delta: f64,
    /// Total clip bound C.
    pub clip: f32,
    /// Epochs of every run (non-private, and the DP phase of DP runs).
    pub epochs: usize,
    /// Batch size of the non-private run.
    pub batch_size: usize,
    /// Learning rate of the non-private run.
    pub lr: f64,
    /// Expected batch of the DP runs (`q = dp_batch_size / private examples`).
    pub dp_batch_size: usize,
    /// Peak learning rate of the DP runs (AdamW, warm-up then cosine).
    pub dp_lr: f64,
    /// Fraction of training speakers that are public in the warm-start variants.
    pub warm_start_public: f64,
    /// Epochs of the public warm start.
    pub warm_start_epochs: usize,
    /// Fraction of layers frozen after the warm start.
    pub freeze_fraction: f64,
    /// Seed of initialisation, shuffling, sampling and noise.
    pub seed: u64,
    /// The DP variants to run at every ε (default: all four).
    #[serde(default = "all_variants")]
    pub variants: Vec<Variant>,
    /// Where every run trains (`--device`).
    #[serde(default)]
    pub compute: ComputeKind,
    /// Take the non-private run from this earlier `results.json` instead of training it
    /// again: it must have the same corpus, seed, epochs, batch size and learning rate.
    #[serde(default)]
    pub reuse_non_private: Option<PathBuf>,
}

fn all_variants() -> Vec<Variant> {
    Variant::ALL.to_vec()
}

/// The ten Speech Commands keywords of the 12-class task.
const KEYWORDS: [&str; 10] = [
    "yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
];

/// Training examples below which the experiment warns that DP-SGD has too little data.
pub const FEW_EXAMPLES: usize = 5_000;

impl DpSgdExperimentConfig {
    /// The full experiment: a 300-speaker corpus (2 takes per keyword, about 7 500
    /// clips), ε ∈ {1, 2, 4, 8}, δ = 1e-5, C = 1, 15 epochs, DP expected batch 256.
    pub fn new(data: &Path, out: &Path) -> Self {
        Self {
            data: data.to_path_buf(),
            corpus: CorpusSpec {
                speakers: 300,
                takes: 2,
                unknown_words: 4,
                seed: 2026,
            },
            out: out.to_path_buf(),
            epsilons: vec![1.0, 2.0, 4.0, 8.0],
            delta: 1e-5,
            clip: 1.0,
            epochs: 15,
            batch_size: 32,
            lr: 3e-3,
            dp_batch_size: 256,
            dp_lr: 3e-3,
            warm_start_public: 0.1,
            warm_start_epochs: 10,
            freeze_fraction: 0.25,
            seed: 0,
            variants: all_variants(),
            compute: ComputeKind::Cpu,
            reuse_non_private: None,
        }
    }

    /// A small run that checks the whole pipeline in minutes: 40 speakers, ε ∈ {1, 8},
    /// 3 epochs, DP expected batch 64 (accuracy is not meaningful at this size).
    pub fn quick(data: &Path, out: &Path) -> Self {
        Self {
            corpus: CorpusSpec {
                speakers: 40,
                takes: 1,
                unknown_words: 4,
                seed: 2026,
            },
            epsilons: vec![1.0, 8.0],
            delta: 1e-4,
            epochs: 3,
            dp_batch_size: 64,
            warm_start_public: 0.25,
            warm_start_epochs: 3,
            ..Self::new(data, out)
        }
    }

    fn check(&self) -> Result<(), ExperimentError> {
        let bad = |what: &str| Err(ExperimentError::Config(what.to_string()));
        if self.epsilons.is_empty() {
            return bad("--epsilons: at least one target ε");
        }
        if let Some(e) = self.epsilons.iter().find(|e| !(e.is_finite() && **e > 0.0)) {
            return bad(&format!("--epsilons: {e} is not a finite ε > 0"));
        }
        if self.variants.is_empty() {
            return bad("--variants: at least one DP variant");
        }
        if self.dp_batch_size == 0 {
            return bad("--dp-batch-size: at least 1");
        }
        // Everything else is checked by the trainers before they train.
        Ok(())
    }
}

/// One DP variant: how C is shared, and whether a public warm start and layer freezing
/// come first.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// Clipping strategy.
    pub clipping: ClipStrategy,
    /// Public warm start, then gradient-based freezing.
    pub warm_start_freeze: bool,
}

impl Variant {
    /// The four variants of the experiment.
    pub const ALL: [Variant; 4] = [
        Variant {
            clipping: ClipStrategy::Flat,
            warm_start_freeze: false,
        },
        Variant {
            clipping: ClipStrategy::PerLayerDim,
            warm_start_freeze: false,
        },
        Variant {
            clipping: ClipStrategy::Flat,
            warm_start_freeze: true,
        },
        Variant {
            clipping: ClipStrategy::PerLayerDim,
            warm_start_freeze: true,
        },
    ];

    /// `flat`, `per-layer-dim + warm start + freezing`, …
    pub fn name(&self) -> String {
        if self.warm_start_freeze {
            format!("{} + warm start + freezing", self.clipping)
        } else {
            self.clipping.to_string()
        }
    }

    /// `flat`, `per-layer-dim-ws-freeze`, …: the run folder's name and `--variants`' word.
    pub fn slug(&self) -> String {
        if self.warm_start_freeze {
            format!("{}-ws-freeze", self.clipping)
        } else {
            self.clipping.to_string()
        }
    }

    /// The variant whose [`Variant::slug`] is `s`.
    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|v| v.slug() == s)
            .ok_or_else(|| {
                let known: Vec<String> = Self::ALL.iter().map(Variant::slug).collect();
                format!("--variants {s:?}: expected one of {}", known.join(", "))
            })
    }
}

/// One run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// `non-private`, or the variant's name.
    pub setting: String,
    /// The DP variant (`None`: non-private).
    pub variant: Option<Variant>,
    /// Target ε (`None`: non-private, ε = ∞).
    pub target_epsilon: Option<f64>,
    /// ε by RDP of the steps actually run (δ, adjacency, unit and accountant inside).
    pub epsilon_rdp: Option<EpsilonReport>,
    /// ε by PLD of the same steps.
    pub epsilon_pld: Option<EpsilonReport>,
    /// Noise multiplier σ.
    pub noise_multiplier: Option<f64>,
    /// Poisson sampling rate.
    pub sampling_rate: Option<f64>,
    /// Noisy steps (DP) run.
    pub steps: Option<u64>,
    /// Layers frozen after the warm start.
    pub frozen_layers: Vec<String>,
    /// Examples trained on privately (DP) or at all (non-private).
    pub train_examples: usize,
    /// Public (warm-start) examples.
    pub public_examples: usize,
    /// Test accuracy (12 classes).
    pub test_accuracy: Option<f64>,
    /// Test balanced accuracy over the keyword classes.
    pub test_balanced_keyword_accuracy: Option<f64>,
    /// Validation accuracy of the kept epoch.
    pub validation_accuracy: Option<f64>,
    /// Epochs run and the kept one.
    pub epochs_run: usize,
    /// The kept (best validation) epoch.
    pub best_epoch: usize,
    /// Why the trainer refused the run, if it did (the run then has no metrics).
    pub refused: Option<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// The model package.
    pub model: PathBuf,
}

impl RunResult {
    /// A run of `setting` with no numbers yet.
    fn blank(
        setting: String,
        variant: Option<Variant>,
        target_epsilon: Option<f64>,
        model: PathBuf,
    ) -> Self {
        Self {
            setting,
            variant,
            target_epsilon,
            epsilon_rdp: None,
            epsilon_pld: None,
            noise_multiplier: None,
            sampling_rate: None,
            steps: None,
            frozen_layers: Vec::new(),
            train_examples: 0,
            public_examples: 0,
            test_accuracy: None,
            test_balanced_keyword_accuracy: None,
            validation_accuracy: None,
            epochs_run: 0,
            best_epoch: 0,
            refused: None,
            seconds: 0.0,
            model,
        }
    }
}

/// The corpus the experiment ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorpusInfo {
    /// Its folder.
    pub path: PathBuf,
    /// Made by this experiment (with `spec`), or given.
    pub generated: bool,
    /// How it was (or would be) generated.
    pub spec: CorpusSpec,
    /// Training clips (all speakers; the DP runs with a warm start make some public).
    pub train: usize,
    /// Validation clips.
    pub validation: usize,
    /// Test clips.
    pub test: usize,
    /// Speakers over all splits.
    pub speakers: usize,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DpSgdResults {
    /// The command line.
    pub command: String,
    /// The configuration.
    pub config: DpSgdExperimentConfig,
    /// The corpus.
    pub corpus: CorpusInfo,
    /// Architecture name.
    pub arch: String,
    /// Every run so far.
    pub runs: Vec<RunResult>,
}

/// Makes the corpus `data` from `spec` if it is missing or empty, and counts its splits
/// (shared with [`super::pate`]).
pub(crate) fn prepare_corpus(
    data: &Path,
    spec: &CorpusSpec,
    log: &mut dyn FnMut(&str),
) -> Result<CorpusInfo, ExperimentError> {
    let generated = is_missing_or_empty(data)?;
    if generated {
        let s = spec;
        log(&format!(
            "generating a KWS corpus in {}: {} speakers × {} keywords × {} takes, {} unknown \
             words and 1 silence clip each (seed {}); the bundled corpus (480 training clips) \
             is too small for DP-SGD",
            data.display(),
            s.speakers,
            KEYWORDS.len(),
            s.takes,
            s.unknown_words,
            s.seed
        ));
        let mut synth = SynthConfig::new(data.to_path_buf());
        synth.speakers = s.speakers;
        synth.words = KEYWORDS.iter().map(|w| w.to_string()).collect();
        synth.takes = s.takes;
        synth.unknown_words = s.unknown_words;
        synth.seed = s.seed;
        synth.format = OutputFormat::Flac;
        let start = Instant::now();
        let summary = synthesize(&synth, &|_, _| {})?;
        log(&format!(
            "corpus: {} clips from {} speakers in {:.0} s",
            summary.clips,
            summary.speakers,
            start.elapsed().as_secs_f64()
        ));
    }
    let (_, examples) = read_corpus(data)?;
    let count = |split| examples.iter().filter(|e| e.split == split).count();
    let speakers: std::collections::BTreeSet<&str> =
        examples.iter().map(|e| e.speaker.as_str()).collect();
    let info = CorpusInfo {
        path: data.to_path_buf(),
        generated,
        spec: spec.clone(),
        train: count(Split::Train),
        validation: count(Split::Validation),
        test: count(Split::Test),
        speakers: speakers.len(),
    };
    log(&format!(
        "corpus {}: {} speakers, {} train / {} validation / {} test clips",
        info.path.display(),
        info.speakers,
        info.train,
        info.validation,
        info.test
    ));
    if info.train < FEW_EXAMPLES {
        log(&format!(
            "warning: {} training clips; DP-SGD needs many thousands (at least {FEW_EXAMPLES} \
             here) for useful accuracy at small ε",
            info.train
        ));
    }
    Ok(info)
}

fn base_config(cfg: &DpSgdExperimentConfig) -> KwsTrainConfig {
    let mut train = small_kws_config(&cfg.data, cfg.epochs, cfg.seed);
    train.keywords = KEYWORDS.iter().map(|w| w.to_string()).collect();
    train.patience = cfg.epochs;
    train.compute = cfg.compute;
    train
}

/// Runs the experiment; `log` gets progress lines. Writes the results after every run.
pub fn run_dp_sgd(
    cfg: &DpSgdExperimentConfig,
    command: &str,
    log: &mut dyn FnMut(&str),
) -> Result<DpSgdResults, ExperimentError> {
    cfg.check()?;
    let runs_dir = fresh_runs_dir(&cfg.out)?;
    let corpus = prepare_corpus(&cfg.data, &cfg.corpus, log)?;
    let mut results = DpSgdResults {
        command: command.to_string(),
        config: cfg.clone(),
        corpus,
        arch: base_config(cfg).arch_name,
        runs: Vec::new(),
    };
    let total = 1 + cfg.epsilons.len() * cfg.variants.len();

    // Non-private.
    log(&format!("[1/{total}] non-private"));
    let run = match &cfg.reuse_non_private {
        Some(path) => earlier_non_private(cfg, path)?,
        None => train_non_private(cfg, &runs_dir, results.corpus.train, command, log)?,
    };
    results.runs.push(run);
    log_result(log, results.runs.last());
    write_results(&cfg.out, &results)?;

    let mut index = 1;
    for &eps in &cfg.epsilons {
        for &variant in &cfg.variants {
            index += 1;
            let setting = variant.name();
            let label = format!("{setting}, ε = {eps}");
            log(&format!("[{index}/{total}] {label}"));
            let dir = runs_dir.join(format!("eps{eps}-{}", variant.slug()));
            let mut train = base_config(cfg);
            train.batch_size = cfg.dp_batch_size;
            train.lr = cfg.dp_lr;
            let mut dp = DpConfig::new(eps, cfg.delta, cfg.clip);
            dp.clipping = variant.clipping;
            if variant.warm_start_freeze {
                dp.warm_start_public = cfg.warm_start_public;
                dp.warm_start_epochs = cfg.warm_start_epochs;
                dp.freeze_fraction = cfg.freeze_fraction;
            }
            dp.ledger = dir.join("ledger.sqlite");
            dp.reproducible = true;
            std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
            let start = Instant::now();
            let outcome = {
                let mut progress = epoch_logger(&label, cfg.epochs, log);
                train_kws_dp(&train, &dp, &dir, command, &mut progress)
            };
            let seconds = start.elapsed().as_secs_f64();
            let run = match outcome {
                Ok(report) => {
                    let p = &report.privacy;
                    let card = &report.card;
                    let split = |name: &str| card.metrics.as_ref().and_then(|m| m.splits.get(name));
                    RunResult {
                        epsilon_rdp: Some(p.epsilon_rdp),
                        epsilon_pld: p.epsilon_pld,
                        noise_multiplier: Some(p.noise_multiplier),
                        sampling_rate: Some(p.sampling_rate),
                        steps: Some(p.steps),
                        frozen_layers: p.frozen_layers.clone(),
                        train_examples: p.population,
                        public_examples: p.public_examples,
                        test_accuracy: split("test").map(|s| s.accuracy),
                        test_balanced_keyword_accuracy: split("test")
                            .map(|s| s.balanced_keyword_accuracy),
                        validation_accuracy: split("validation").map(|s| s.accuracy),
                        epochs_run: report.epochs.len(),
                        best_epoch: card.provenance.as_ref().map_or(0, |p| p.best_epoch),
                        seconds,
                        ..RunResult::blank(setting, Some(variant), Some(eps), dir)
                    }
                }
                // A refused setting (say, an ε out of reach for these steps) is a result.
                Err(e @ TrainError::Option { .. }) => RunResult {
                    refused: Some(e.to_string()),
                    seconds,
                    ..RunResult::blank(setting, Some(variant), Some(eps), dir)
                },
                Err(source) => return Err(ExperimentError::Train { run: label, source }),
            };
            results.runs.push(run);
            log_result(log, results.runs.last());
            write_results(&cfg.out, &results)?;
        }
    }
    Ok(results)
}

/// Trains the non-private reference.
fn train_non_private(
    cfg: &DpSgdExperimentConfig,
    runs_dir: &Path,
    train_examples: usize,
    command: &str,
    log: &mut dyn FnMut(&str),
) -> Result<RunResult, ExperimentError> {
    let train = {
        let mut t = base_config(cfg);
        t.batch_size = cfg.batch_size;
        t.lr = cfg.lr;
        t
    };
    let dir = runs_dir.join("non-private");
    let start = Instant::now();
    let report = {
        let mut progress = epoch_logger("non-private", cfg.epochs, log);
        train_kws(&train, &dir, command, &mut progress)
    }
    .map_err(|source| ExperimentError::Train {
        run: "non-private".into(),
        source,
    })?;
    let card = &report.card;
    let split = |name: &str| card.metrics.as_ref().and_then(|m| m.splits.get(name));
    Ok(RunResult {
        train_examples,
        test_accuracy: split("test").map(|s| s.accuracy),
        test_balanced_keyword_accuracy: split("test").map(|s| s.balanced_keyword_accuracy),
        validation_accuracy: split("validation").map(|s| s.accuracy),
        epochs_run: report.epochs.len(),
        best_epoch: card.provenance.as_ref().map_or(0, |p| p.best_epoch),
        seconds: start.elapsed().as_secs_f64(),
        ..RunResult::blank("non-private".into(), None, None, dir)
    })
}

/// The non-private run of an earlier `results.json`, refused unless it trained the same
/// way on the same corpus (so that a long reference run need not be repeated).
fn earlier_non_private(
    cfg: &DpSgdExperimentConfig,
    path: &Path,
) -> Result<RunResult, ExperimentError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let earlier: DpSgdResults = serde_json::from_str(&text).map_err(|e| {
        ExperimentError::Config(format!(
            "--reuse-non-private {}: not an experiment dp-sgd results.json ({e})",
            path.display()
        ))
    })?;
    let e = &earlier.config;
    let same = e.corpus == cfg.corpus
        && e.seed == cfg.seed
        && e.epochs == cfg.epochs
        && e.batch_size == cfg.batch_size
        && e.lr == cfg.lr;
    if !same {
        return Err(ExperimentError::Config(format!(
            "--reuse-non-private {}: its corpus, seed, epochs, batch size or learning rate \
             differ from this run's",
            path.display()
        )));
    }
    let mut run = earlier
        .runs
        .into_iter()
        .find(|r| r.variant.is_none() && r.refused.is_none())
        .ok_or_else(|| {
            ExperimentError::Config(format!(
                "--reuse-non-private {}: it has no non-private run",
                path.display()
            ))
        })?;
    run.setting = format!("non-private (from {})", path.display());
    Ok(run)
}

fn epoch_logger<'a>(
    label: &'a str,
    epochs: usize,
    log: &'a mut dyn FnMut(&str),
) -> impl FnMut(&EpochReport) + 'a {
    move |e: &EpochReport| {
        log(&format!(
            "  {label}: epoch {}/{epochs}  loss {:.4}  val acc {:.3}{}",
            e.epoch,
            e.train_loss,
            e.val_accuracy,
            if e.best { "  *" } else { "" }
        ))
    }
}

fn log_result(log: &mut dyn FnMut(&str), run: Option<&RunResult>) {
    let Some(r) = run else { return };
    match (&r.refused, r.test_accuracy) {
        (Some(why), _) => log(&format!("  refused: {why}")),
        (None, Some(acc)) => log(&format!(
            "  test accuracy {acc:.3}, balanced keyword accuracy {:.3}{} ({:.0} s)",
            r.test_balanced_keyword_accuracy.unwrap_or(f64::NAN),
            r.epsilon_rdp
                .as_ref()
                .map_or(String::new(), |e| format!(", ε = {:.3} (RDP)", e.epsilon)),
            r.seconds
        )),
        (None, None) => {}
    }
}

/// The results table as Markdown.
pub fn results_markdown(r: &DpSgdResults) -> String {
    let c = &r.config;
    let mut s = String::new();
    s.push_str("# DP-SGD on 12-class keyword spotting: accuracy against ε\n\n");
    s.push_str(&format!("Command: `{}`\n\n", r.command));
    s.push_str(&format!(
        "Corpus `{}` ({}): {} speakers, {} train / {} validation / {} test clips \
         (synthetic: {} speakers × 10 keywords × {} takes, {} unknown words and one silence \
         clip each, generator seed {}). Architecture `{}` (49 × 20 fbank, 2 conv + 2 FC). \
         Example-level DP, add/remove adjacency, Poisson sampling, expected batch {}, C = {}, \
         {} epochs, AdamW lr {} (non-private: batch {}, lr {}); warm-start variants: {} of \
         the training speakers public, {} warm-start epochs, {} of the layers frozen. \
         Device: {}.\n\n",
        r.corpus.path.display(),
        if r.corpus.generated {
            "generated by this run"
        } else {
            "given"
        },
        r.corpus.speakers,
        r.corpus.train,
        r.corpus.validation,
        r.corpus.test,
        r.corpus.spec.speakers,
        r.corpus.spec.takes,
        r.corpus.spec.unknown_words,
        r.corpus.spec.seed,
        r.arch,
        c.dp_batch_size,
        c.clip,
        c.epochs,
        c.dp_lr,
        c.batch_size,
        c.lr,
        c.warm_start_public,
        c.warm_start_epochs,
        c.freeze_fraction,
        c.compute,
    ));
    s.push_str(
        "| setting | target ε | ε (RDP) | ε (PLD) | δ | σ | steps | private examples | \
         test accuracy | test balanced keyword accuracy | seconds |\n",
    );
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for run in &r.runs {
        let eps = |e: &Option<EpsilonReport>| fmt_opt(e.as_ref().map(|e| e.epsilon), 3);
        let (acc, bal) = match &run.refused {
            Some(why) => (format!("refused: {why}"), "—".into()),
            None => (
                fmt_opt(run.test_accuracy, 3),
                fmt_opt(run.test_balanced_keyword_accuracy, 3),
            ),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |\n",
            run.setting,
            run.target_epsilon.map_or("∞".into(), |e| e.to_string()),
            eps(&run.epsilon_rdp),
            eps(&run.epsilon_pld),
            if run.target_epsilon.is_some() {
                format!("{:e}", c.delta)
            } else {
                "—".into()
            },
            fmt_opt(run.noise_multiplier, 3),
            run.steps.map_or("—".into(), |s| s.to_string()),
            run.train_examples,
            acc,
            bal,
            run.seconds
        ));
    }
    s.push_str(
        "\nε: of the steps actually run, example level, add/remove adjacency. Accuracy over \
         all 12 classes; balanced keyword accuracy is the mean recall over the 10 keywords. \
         Plot: `accuracy_vs_epsilon.png`; everything per run: `results.json` and \
         `runs/<setting>/privacy.json`.\n",
    );
    s
}

/// Test accuracy against target ε: one line per variant, the non-private accuracy as a
/// horizontal line.
fn plot_series(r: &DpSgdResults) -> Vec<Series> {
    let mut series = Vec::new();
    for variant in Variant::ALL {
        let points: Vec<(f64, f64)> = r
            .runs
            .iter()
            .filter(|run| run.variant == Some(variant))
            .filter_map(|run| Some((run.target_epsilon?, run.test_accuracy?)))
            .collect();
        if !points.is_empty() {
            series.push(Series {
                name: variant.name(),
                points,
            });
        }
    }
    let xs = r.config.epsilons.iter().copied();
    let (lo, hi) = xs.fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(x), h.max(x)));
    if let Some(acc) = r
        .runs
        .iter()
        .find(|run| run.variant.is_none())
        .and_then(|run| run.test_accuracy)
    {
        series.push(Series {
            name: "non-private".into(),
            points: vec![(lo, acc), (hi, acc)],
        });
    }
    series
}

fn write_results(out: &Path, r: &DpSgdResults) -> Result<(), ExperimentError> {
    write_results_and_plot(
        out,
        r,
        results_markdown(r),
        "accuracy_vs_epsilon.png",
        [
            "DP-SGD, 12-class KWS: test accuracy vs ε",
            "target ε",
            "test accuracy",
        ],
        &plot_series(r),
    )
}
