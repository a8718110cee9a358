//! `hush-host experiment …`: experiments that write `results.json`, `results.md` and a plot.

use std::path::{Path, PathBuf};

use anyhow::Context;
use hush_host::experiment::asr_generalization::{
    self as asrg, run_asr_generalization, AsrGeneralizationConfig,
};
use hush_host::experiment::dp_sgd::{results_markdown, run_dp_sgd, DpSgdExperimentConfig, Variant};
use hush_host::experiment::kws_generalization::{
    self as kwsg, run_kws_generalization, Holdout, KwsGeneralizationConfig,
};
use hush_host::experiment::pate::{
    results_markdown as pate_markdown, run_pate_experiment, PateExperimentConfig,
};
use hush_host::experiment::pate_asr::{
    results_markdown as pate_asr_markdown, run_pate_asr_experiment, PateAsrExperimentConfig,
};
use hush_host::experiment::pretrain::{
    results_markdown as pretrain_markdown, run_pretrain_experiment, PretrainExperimentConfig,
};
use hush_models::compute::ComputeKind;

use super::train::{announce_device, asr_epoch_line, epoch_line, print_card, ModelArgs, TaskArg};

/// Subcommands of `hush-host experiment`.
#[derive(clap::Subcommand)]
pub enum ExperimentCommand {
    /// KWS test accuracy against ε for DP-SGD: non-private, then flat and per-layer-dim
    /// clipping, each without and with a public warm start and layer freezing, at every
    /// target ε. Generates a large enough corpus first when --data is missing or empty.
    DpSgd(DpSgdArgs),
    /// ASR WER and CER of CTC from scratch against BEST-RQ pretraining on a larger
    /// unlabeled corpus (non-private, and DP at every target ε with flat and per-layer-dim
    /// clipping, with and without layer freezing), each then fine-tuned. Generates both
    /// corpora when missing or empty.
    Pretrain(PretrainExperimentArgs),
    /// KWS quality on voices never heard: train once per held-out engine (or donor
    /// family, `donor:NAME`) on the other engines' speakers and test on the held-out
    /// ones; plus one run on every engine tested on speaker-disjoint speakers. Accuracy,
    /// balanced keyword accuracy, confusion matrices. The corpus needs `speakers.tsv`.
    KwsGeneralization(KwsGeneralizationArgs),
    /// ASR quality on voices never heard: train a CTC recogniser from scratch once per
    /// held-out engine (or donor family) on the other engines' speakers and test on the
    /// held-out ones; plus one run on every engine tested on speaker-disjoint speakers.
    /// Greedy and beam-search WER and CER. The corpus needs `speakers.tsv`.
    AsrGeneralization(AsrGeneralizationArgs),
    /// KWS test accuracy against ε for PATE (LNMax, GNMax, Confident-GNMax students)
    /// beside DP-SGD and a non-private model, on one speaker-disjoint split of one corpus
    /// (generated first when --data is missing or empty).
    Pate(PateExperimentArgs),
}

/// Arguments of `hush-host experiment pate`.
#[derive(clap::Args)]
pub struct PateExperimentArgs {
    /// kws: accuracy of keyword spotters trained from scratch; asr: WER of CTC recognisers
    /// fine-tuned from the public model --init (PATE teachers and student, DP-SGD,
    /// non-private, and the warm start alone).
    #[arg(long, value_enum, default_value = "kws")]
    pub task: TaskArg,
    /// Output folder (results.json, results.md, accuracy_vs_epsilon.png or, for asr,
    /// wer_vs_epsilon.png, split/, runs/).
    #[arg(long)]
    pub out: PathBuf,
    /// kws: keyword corpus, generated here when missing or empty (default: OUT/corpus);
    /// asr: the ASR corpus (default: data/corpus/asr).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// asr: the public ASR model package every model starts from.
    #[arg(long, default_value = "models/asr")]
    pub init: PathBuf,
    /// A pipeline check in minutes (kws: 24 speakers, 3 teachers, 2 epochs; asr: 8
    /// speakers, 3 utterances each, 2 teachers, 1 epoch); its numbers mean nothing.
    #[arg(long)]
    pub quick: bool,
    /// Speakers of the generated corpus (default 120; --quick 24).
    #[arg(long)]
    pub speakers: Option<usize>,
    /// Number of teachers (default 12; --quick 3).
    #[arg(long)]
    pub teachers: Option<usize>,
    /// Epochs of every model (default 15; --quick 2).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// DP-SGD target ε values, comma-separated (default 2,8; --quick 8).
    #[arg(long, value_delimiter = ',')]
    pub dp_epsilons: Vec<f64>,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Arguments of `hush-host experiment pretrain`.
#[derive(clap::Args)]
pub struct PretrainExperimentArgs {
    /// Output folder (results.json, results.md, wer.png, runs/; the corpora by default).
    #[arg(long)]
    pub out: PathBuf,
    /// A pipeline check in a few minutes (tiny corpora, 1 pretraining and 2 fine-tuning
    /// epochs, ε = 10 only); its numbers mean nothing.
    #[arg(long)]
    pub quick: bool,
    /// Labeled ASR corpus; generated when missing or empty (default OUT/corpus-labeled).
    #[arg(long)]
    pub labeled: Option<PathBuf>,
    /// Unlabeled ASR corpus; generated when missing or empty (default
    /// OUT/corpus-unlabeled).
    #[arg(long)]
    pub unlabeled: Option<PathBuf>,
    /// Target ε values, comma-separated (default 4,10; --quick 10).
    #[arg(long, value_delimiter = ',')]
    pub epsilons: Vec<f64>,
    /// Pretraining epochs (default 4; --quick 1).
    #[arg(long)]
    pub pretrain_epochs: Option<usize>,
    /// Fine-tuning epochs (default 8; --quick 2).
    #[arg(long)]
    pub finetune_epochs: Option<usize>,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// The runs of `experiment kws-generalization` and `asr-generalization`.
#[derive(clap::Args)]
pub struct HoldoutArgs {
    /// Groups to hold out, one run each: engines (espeak-ng, flite, festival, pico, piper,
    /// kokoro) or donor:NAME (kal, slt, ked, awb, rms; Pico's lh0, kh0; Piper's joe;
    /// Kokoro's jf_alpha, …).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "espeak-ng,flite,festival"
    )]
    pub holdouts: Vec<String>,
    /// Skip the run on every engine (speaker-disjoint test).
    #[arg(long)]
    pub no_all_engines: bool,
}

impl HoldoutArgs {
    /// Fills `holdouts` and `all_engines` of an experiment's config.
    fn apply(&self, holdouts: &mut Vec<Holdout>, all_engines: &mut bool) -> anyhow::Result<()> {
        *holdouts = self
            .holdouts
            .iter()
            .map(|h| Holdout::parse(h))
            .collect::<Result<_, _>>()?;
        *all_engines = !self.no_all_engines;
        Ok(())
    }
}

/// Arguments of `hush-host experiment kws-generalization`.
#[derive(clap::Args)]
pub struct KwsGeneralizationArgs {
    /// Output folder (results.json, results.md, confusion.png, runs/).
    #[arg(long)]
    pub out: PathBuf,
    /// Keyword corpus (Speech Commands layout with speakers.tsv, from `corpus synth`).
    #[arg(long)]
    pub data: PathBuf,
    /// Which voices to hold out.
    #[command(flatten)]
    pub runs: HoldoutArgs,
    /// The model and how every run trains it.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Arguments of `hush-host experiment asr-generalization`.
#[derive(clap::Args)]
pub struct AsrGeneralizationArgs {
    /// Output folder (results.json, results.md, validation_wer.png, runs/).
    #[arg(long)]
    pub out: PathBuf,
    /// ASR corpus (LibriSpeech layout with speakers.tsv, from `corpus synth --kind asr`).
    #[arg(long)]
    pub data: PathBuf,
    /// Which voices to hold out.
    #[command(flatten)]
    pub runs: HoldoutArgs,
    /// Beam width of the beam-search numbers.
    #[arg(long, default_value_t = 8)]
    pub beam: usize,
    /// The model and how every run trains it (from scratch).
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Arguments of `hush-host experiment dp-sgd`.
#[derive(clap::Args)]
pub struct DpSgdArgs {
    /// Output folder (results.json, results.md, accuracy_vs_epsilon.png, runs/).
    #[arg(long)]
    pub out: PathBuf,
    /// Keyword corpus; generated here when missing or empty (default: OUT/corpus).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// A small run that checks the pipeline in minutes (40 speakers, ε ∈ {1, 8}, 3
    /// epochs); its accuracies are not meaningful.
    #[arg(long)]
    pub quick: bool,
    /// Speakers of the generated corpus (default 300; --quick 40).
    #[arg(long)]
    pub speakers: Option<usize>,
    /// Takes of every keyword per speaker in the generated corpus (default 2; --quick 1).
    #[arg(long)]
    pub takes: Option<usize>,
    /// Target ε values, comma-separated (default 1,2,4,8; --quick 1,8).
    #[arg(long, value_delimiter = ',')]
    pub epsilons: Vec<f64>,
    /// δ of every DP run (default 1e-5; --quick 1e-4).
    #[arg(long)]
    pub delta: Option<f64>,
    /// Epochs of every run (default 15; --quick 3).
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Batch size of the non-private run (default 32).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Peak learning rate of the non-private run (default 3e-3).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Expected batch of the DP runs (default 256; --quick 64).
    #[arg(long)]
    pub dp_batch_size: Option<usize>,
    /// Peak learning rate of the DP runs (default 3e-3).
    #[arg(long)]
    pub dp_lr: Option<f64>,
    /// Total clip bound C (default 1).
    #[arg(long)]
    pub clip: Option<f32>,
    /// DP variants to run at every ε, comma-separated (default all four: flat,
    /// per-layer-dim, flat-ws-freeze, per-layer-dim-ws-freeze).
    #[arg(long, value_delimiter = ',', value_parser = Variant::parse)]
    pub variants: Vec<Variant>,
    /// Take the non-private run from an earlier run's results.json (same corpus, seed,
    /// epochs, batch size and learning rate) instead of training it again.
    #[arg(long)]
    pub reuse_non_private: Option<PathBuf>,
    /// Where every run trains: cpu, or gpu (the `gpu` feature; falls back to the CPU
    /// with the reason when no GPU starts).
    #[arg(long, default_value = "cpu")]
    pub device: ComputeKind,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Runs `experiment kws-generalization`.
fn run_generalization(a: KwsGeneralizationArgs) -> anyhow::Result<()> {
    let train = a.model.kws_config(&a.data)?;
    let mut cfg = KwsGeneralizationConfig::new(train, &a.out);
    a.runs.apply(&mut cfg.holdouts, &mut cfg.all_engines)?;
    let mut progress = epoch_line(cfg.train.epochs);
    let results = run_logged(
        "hush-host experiment kws-generalization",
        &a.out,
        |command, log| run_kws_generalization(&cfg, command, log, &mut progress),
        kwsg::results_markdown,
    )?;
    for run in &results.runs {
        let card = hush_models::package::ModelCard::read(&run.model)
            .with_context(|| format!("reading {}", run.model.display()))?;
        println!("## {}", run.setting);
        print_card(&card, &run.model);
    }
    Ok(())
}

/// Runs `experiment asr-generalization`.
fn run_asr_generalization_cmd(a: AsrGeneralizationArgs) -> anyhow::Result<()> {
    announce_device(a.model.device);
    let train = a.model.asr_config(&a.data, a.beam)?;
    let mut cfg = AsrGeneralizationConfig::new(train, &a.out);
    a.runs.apply(&mut cfg.holdouts, &mut cfg.all_engines)?;
    let mut progress = asr_epoch_line(cfg.train.epochs);
    run_logged(
        "hush-host experiment asr-generalization",
        &a.out,
        |command, log| run_asr_generalization(&cfg, command, log, &mut progress),
        asrg::results_markdown,
    )
    .map(drop)
}

/// Runs an experiment with its progress lines on stderr, each stamped with the seconds
/// since the start; then prints its results table and where the results are.
fn run_logged<R, E>(
    what: &'static str,
    out: &Path,
    run: impl FnOnce(&str, &mut dyn FnMut(&str)) -> Result<R, E>,
    markdown: impl FnOnce(&R) -> String,
) -> anyhow::Result<R>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let start = std::time::Instant::now();
    let results = run(&command, &mut |line| {
        eprintln!("[{:>6.0} s] {line}", start.elapsed().as_secs_f64())
    })
    .context(what)?;
    print!("{}", markdown(&results));
    println!(
        "results: {} ({:.0} s)",
        out.join("results.md").display(),
        start.elapsed().as_secs_f64()
    );
    Ok(results)
}

/// Runs one `experiment` subcommand.
pub fn run(cmd: ExperimentCommand) -> anyhow::Result<()> {
    match cmd {
        ExperimentCommand::Pretrain(a) => {
            let mut cfg = if a.quick {
                PretrainExperimentConfig::quick(&a.out)
            } else {
                PretrainExperimentConfig::new(&a.out)
            };
            if let Some(d) = &a.labeled {
                cfg.labeled = d.clone();
            }
            if let Some(d) = &a.unlabeled {
                cfg.unlabeled = d.clone();
            }
            if !a.epsilons.is_empty() {
                cfg.epsilons = a.epsilons.clone();
            }
            if let Some(e) = a.pretrain_epochs {
                cfg.pretrain_epochs = e;
            }
            if let Some(e) = a.finetune_epochs {
                cfg.finetune_epochs = e;
            }
            cfg.seed = a.seed;
            run_logged(
                "hush-host experiment pretrain",
                &a.out,
                |command, log| run_pretrain_experiment(&cfg, command, log),
                pretrain_markdown,
            )
            .map(drop)
        }
        ExperimentCommand::KwsGeneralization(a) => run_generalization(a),
        ExperimentCommand::AsrGeneralization(a) => run_asr_generalization_cmd(a),
        ExperimentCommand::Pate(a) if a.task == TaskArg::Asr => run_pate_asr(a),
        ExperimentCommand::Pate(a) => {
            let data = a.data.clone().unwrap_or_else(|| a.out.join("corpus"));
            let mut cfg = if a.quick {
                PateExperimentConfig::quick(&data, &a.out)
            } else {
                PateExperimentConfig::new(&data, &a.out)
            };
            if let Some(s) = a.speakers {
                cfg.corpus.speakers = s;
            }
            if let Some(t) = a.teachers {
                cfg.teachers = t;
            }
            if let Some(e) = a.epochs {
                cfg.epochs = e;
            }
            if !a.dp_epsilons.is_empty() {
                cfg.dp_epsilons = a.dp_epsilons.clone();
            }
            cfg.seed = a.seed;
            run_logged(
                "hush-host experiment pate",
                &a.out,
                |command, log| run_pate_experiment(&cfg, command, log),
                pate_markdown,
            )
            .map(drop)
        }
        ExperimentCommand::DpSgd(a) => {
            let data = a.data.clone().unwrap_or_else(|| a.out.join("corpus"));
            let mut cfg = if a.quick {
                DpSgdExperimentConfig::quick(&data, &a.out)
            } else {
                DpSgdExperimentConfig::new(&data, &a.out)
            };
            if let Some(s) = a.speakers {
                cfg.corpus.speakers = s;
            }
            if let Some(t) = a.takes {
                cfg.corpus.takes = t;
            }
            if !a.epsilons.is_empty() {
                cfg.epsilons = a.epsilons.clone();
            }
            if let Some(d) = a.delta {
                cfg.delta = d;
            }
            if let Some(e) = a.epochs {
                cfg.epochs = e;
            }
            if let Some(b) = a.batch_size {
                cfg.batch_size = b;
            }
            if let Some(lr) = a.lr {
                cfg.lr = lr;
            }
            if let Some(b) = a.dp_batch_size {
                cfg.dp_batch_size = b;
            }
            if let Some(lr) = a.dp_lr {
                cfg.dp_lr = lr;
            }
            if let Some(c) = a.clip {
                cfg.clip = c;
            }
            if !a.variants.is_empty() {
                cfg.variants = a.variants.clone();
            }
            cfg.reuse_non_private = a.reuse_non_private.clone();
            announce_device(a.device);
            cfg.compute = a.device;
            cfg.seed = a.seed;
            run_logged(
                "hush-host experiment dp-sgd",
                &a.out,
                |command, log| run_dp_sgd(&cfg, command, log),
                results_markdown,
            )
            .map(drop)
        }
    }
}

/// `hush-host experiment pate --task asr`.
fn run_pate_asr(a: PateExperimentArgs) -> anyhow::Result<()> {
    if a.speakers.is_some() {
        anyhow::bail!("--speakers applies to --task kws only (the ASR corpus is given)");
    }
    let data = a
        .data
        .clone()
        .unwrap_or_else(|| PathBuf::from("data/corpus/asr"));
    let mut cfg = if a.quick {
        PateAsrExperimentConfig::quick(&data, &a.init, &a.out)
    } else {
        PateAsrExperimentConfig::new(&data, &a.init, &a.out)
    };
    if let Some(t) = a.teachers {
        cfg.teachers = t;
    }
    if let Some(e) = a.epochs {
        cfg.epochs = e;
    }
    if !a.dp_epsilons.is_empty() {
        cfg.dp_epsilons = a.dp_epsilons.clone();
    }
    cfg.seed = a.seed;
    run_logged(
        "hush-host experiment pate --task asr",
        &a.out,
        |command, log| run_pate_asr_experiment(&cfg, command, log),
        pate_asr_markdown,
    )
    .map(drop)
}
