//! `hush-host audit …`: privacy audits. `audit metrics`, the speech-quality metrics the
//! gradient-leakage paper reports (STOI, PESQ, W-MSE), for any pair of recordings;
//! `audit invert`, the gradient-inversion attack on one clip's update; `audit report`,
//! the attack over many clips, Mel vs MFCC, with and without DP; `audit speaker-model`
//! and `audit target-model`, the models they use; `audit privacy`, the empirical ε lower
//! bound from canaries planted in a private run.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use hush_device::audio::read_audio;
use hush_host::audit::artifacts::{write_attack_files, InvertReport};
use hush_host::audit::attack::{
    attack_clip, AttackFeatures, AttackOptions, AttackTarget, MeanLeak,
};
use hush_host::audit::baseline::{other_speakers, score_baselines, OTHER_SPEAKERS};
use hush_host::audit::invert::InvertConfig;
use hush_host::audit::report::{pick_clips, preamble, run_report, write_report, ReportConfig};
use hush_host::audit::speaker::{train_speaker_model, SpeakerModel, SpeakerTrainConfig};
use hush_host::audit::update::{DpNoise, UpdateRule};
use hush_host::audit::{PesqMode, RecordingMetrics};
use hush_host::population::PopulationSpec;
use hush_host::privacy_audit::dp_sgd::{run as dp_sgd_audit, DpSgdAudit};
use hush_host::privacy_audit::federated::{run as federated_audit, FederatedAudit};
use hush_host::privacy_audit::pate::{run as pate_audit, PateAudit};
use hush_host::privacy_audit::{AuditOutcome, AuditSettings};
use hush_host::recipes::{target_config, twin_config};
use hush_host::train::train_kws;
use indicatif::{ProgressBar, ProgressStyle};

/// Subcommands of `hush-host audit`.
#[derive(clap::Subcommand)]
pub enum AuditCommand {
    /// STOI, PESQ and W-MSE of a degraded (e.g. reconstructed) recording against its reference.
    Metrics(MetricsArgs),
    /// Invert one clip's shared update (the single-example gradient of a leak-cnn model,
    /// or the delta of K local steps): recover its label and features, rebuild the audio,
    /// score what leaked against what an attacker gets without the update.
    Invert(InvertArgs),
    /// The attack over N test clips for a Mel and an MFCC model, without DP and at several
    /// noise levels: report.md, report.json, report.png.
    Report(ReportArgs),
    /// Train the speaker-embedding model the audit scores speaker similarity with.
    SpeakerModel(SpeakerModelArgs),
    /// Train the audit's small leak-cnn (98 × 40 input, 8/16 channels) on Mel or MFCC.
    TargetModel(TargetModelArgs),
    /// Empirical privacy audit: plant canaries in a private run, each with probability ½,
    /// and turn how well the released artifacts tell which were planted into a lower bound
    /// on ε (95 %) beside the ε the run claims: results.json, report.md, scores.png.
    #[command(subcommand)]
    Privacy(PrivacyAuditCommand),
}

/// Kinds of private run `audit privacy` audits.
#[derive(clap::Subcommand)]
pub enum PrivacyAuditCommand {
    /// Central DP-SGD of a small keyword spotter with Dirac canaries (one gradient
    /// coordinate each); defaults: 1 000 canaries of norm 100 C, q = 0.2, 40 epochs.
    DpSgd(DpSgdAuditArgs),
    /// User-level DP in the in-process fleet simulator with canary clients (a fixed random
    /// direction each, uploaded whenever sampled); defaults: 10 000 canaries of norm
    /// 10 C, q = 1, 10 rounds.
    Federated(FederatedAuditArgs),
    /// PATE's noisy-label release (GNMax): each canary a speaker whose teacher's votes
    /// differ between the worlds on every query of its own release; default 1 000
    /// canaries, releases of 1 000 queries, 251 teachers.
    Pate(PateAuditArgs),
}

/// `audit privacy pate`.
#[derive(clap::Args)]
pub struct PateAuditArgs {
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Canaries (each planted with probability ½; one release each).
    #[arg(long, default_value_t = 1000)]
    canaries: usize,
    /// Queries of each release.
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// The data-independent ε of a release σ is calibrated to.
    #[arg(long, default_value_t = 1.0, conflicts_with = "dp_off")]
    epsilon: f64,
    /// Audit a release without noise instead.
    #[arg(long)]
    dp_off: bool,
    /// δ.
    #[arg(long, default_value_t = 1e-5)]
    delta: f64,
    /// Teachers (odd).
    #[arg(long, default_value_t = 251)]
    teachers: usize,
    /// Seed of the canaries and of the noise.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// What every `audit privacy` run takes (unset: the audit's default).
#[derive(clap::Args)]
pub struct PrivacyAuditArgs {
    /// KWS corpus directory.
    #[arg(long, default_value = "data/corpus/kws")]
    data: PathBuf,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Canaries (each planted with probability ½).
    #[arg(long)]
    canaries: Option<usize>,
    /// The ε the run is calibrated to (RDP) [default: 1].
    #[arg(long, conflicts_with = "dp_off")]
    epsilon: Option<f64>,
    /// Audit a run with DP off instead.
    #[arg(long)]
    dp_off: bool,
    /// δ [default: 1e-5].
    #[arg(long)]
    delta: Option<f64>,
    /// Poisson sampling rate.
    #[arg(long)]
    sampling_rate: Option<f64>,
    /// A canary's norm in units of the clip bound.
    #[arg(long)]
    canary_norm: Option<f32>,
    /// Seed of the run and of the canaries [default: 1].
    #[arg(long)]
    seed: Option<u64>,
}

impl PrivacyAuditArgs {
    /// The flags given, over the audit's `defaults`.
    fn settings(&self, defaults: AuditSettings) -> AuditSettings {
        AuditSettings {
            data: self.data.clone(),
            canaries: self.canaries.unwrap_or(defaults.canaries),
            epsilon: if self.dp_off {
                None
            } else {
                self.epsilon.or(defaults.epsilon)
            },
            delta: self.delta.unwrap_or(defaults.delta),
            sampling_rate: self.sampling_rate.unwrap_or(defaults.sampling_rate),
            canary_norm: self.canary_norm.unwrap_or(defaults.canary_norm),
            seed: self.seed.unwrap_or(defaults.seed),
            ..defaults
        }
    }
}

/// `audit privacy dp-sgd`.
#[derive(clap::Args)]
pub struct DpSgdAuditArgs {
    #[command(flatten)]
    common: PrivacyAuditArgs,
    /// Epochs of DP-SGD [default: 40].
    #[arg(long)]
    epochs: Option<usize>,
}

/// `audit privacy federated`.
#[derive(clap::Args)]
pub struct FederatedAuditArgs {
    #[command(flatten)]
    common: PrivacyAuditArgs,
    /// Rounds [default: 10].
    #[arg(long)]
    rounds: Option<u64>,
    /// Local epochs of a real device [default: 1].
    #[arg(long)]
    local_epochs: Option<u32>,
    /// Real devices: this many virtual users made from --data's base speakers (the
    /// population simulator's; other population settings at their defaults) instead of
    /// the corpus's training speakers.
    #[arg(long)]
    users: Option<usize>,
    /// Where the virtual users are cached.
    #[arg(long, requires = "users")]
    user_cache: Option<PathBuf>,
}

/// Mel or MFCC, on the command line.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FeaturesArg {
    /// Log Mel filterbank.
    Mel,
    /// MFCC.
    Mfcc,
}

impl From<FeaturesArg> for AttackFeatures {
    fn from(f: FeaturesArg) -> Self {
        match f {
            FeaturesArg::Mel => Self::Mel,
            FeaturesArg::Mfcc => Self::Mfcc,
        }
    }
}

/// Options of the optimisation shared by `invert` and `report`.
#[derive(clap::Args)]
pub struct AttackArgs {
    /// Adam steps per restart (the bundled corpus's clips need 1000–3000 on the audit's
    /// leak-CNN; fewer leave the gradient loss above 0.01 on some).
    #[arg(long, default_value_t = 3000)]
    iterations: usize,
    /// Random restarts (the best by gradient loss is kept).
    #[arg(long, default_value_t = 2)]
    restarts: usize,
    /// Initial learning rate (decays ×0.1 at 3/8, 5/8, 7/8).
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    /// Total-variation prior weight.
    #[arg(long, default_value_t = 5e-2)]
    tv_weight: f64,
    /// Griffin-Lim iterations.
    #[arg(long, default_value_t = 64)]
    griffin_lim_iterations: usize,
    /// Seed of the restarts, the DP noise and Griffin-Lim.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The device shares the weight delta of K local SGD steps on the clip (batch 1) instead
    /// of a single gradient; the attacker differentiates through all K steps (exact, K
    /// times the cost).
    #[arg(long)]
    local_steps: Option<usize>,
    /// Learning rate of the local steps (as `hush-host simulate`'s default).
    #[arg(long, default_value_t = 0.05, requires = "local_steps")]
    local_lr: f64,
    /// A speaker model (`audit speaker-model`) for the speaker-similarity score
    /// (`audit report` trains one into OUT/speaker-model when absent).
    #[arg(long)]
    speaker_model: Option<PathBuf>,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
}

impl AttackArgs {
    /// The update rule, checked (`--local-steps 0`, a bad `--local-lr`: errors naming them).
    fn update(&self) -> anyhow::Result<UpdateRule> {
        let rule = match self.local_steps {
            None => UpdateRule::Gradient,
            Some(steps) => UpdateRule::LocalSteps {
                steps,
                lr: self.local_lr,
            },
        };
        rule.check()?;
        Ok(rule)
    }

    fn config(&self) -> InvertConfig {
        InvertConfig {
            iterations: self.iterations,
            restarts: self.restarts,
            lr: self.lr,
            tv_weight: self.tv_weight,
            seed: self.seed,
        }
    }
}

/// Flags of `audit invert`.
#[derive(clap::Args)]
pub struct InvertArgs {
    /// The attacked model package (a leak-cnn).
    #[arg(long)]
    model: PathBuf,
    /// The clip whose update is attacked (at the model's sample rate).
    #[arg(long)]
    input: PathBuf,
    /// The model's feature kind, checked against the package.
    #[arg(long, value_enum)]
    features: Option<FeaturesArg>,
    /// The clip's class (default: its folder name, as in Speech Commands).
    #[arg(long)]
    label: Option<String>,
    /// DP on the device's update: flat clip bound C.
    #[arg(long, requires = "dp_noise")]
    dp_clip: Option<f32>,
    /// DP on the device's update: noise multiplier σ (noise std σ·C).
    #[arg(long, requires = "dp_clip")]
    dp_noise: Option<f64>,
    #[command(flatten)]
    attack: AttackArgs,
}

/// Flags of `audit report`.
#[derive(clap::Args)]
pub struct ReportArgs {
    /// The attacked model package (leak-cnn, Mel or MFCC).
    #[arg(long)]
    model: PathBuf,
    /// Its twin on the other front-end; when absent it is trained (`OUT/twin-model`) with
    /// the same widths, frames and Mel bank.
    #[arg(long)]
    twin: Option<PathBuf>,
    /// Corpus (Speech Commands layout): clips come from its test split.
    #[arg(long)]
    data: PathBuf,
    /// Clips to attack per model and setting.
    #[arg(long, default_value_t = 4)]
    clips: usize,
    /// Noise multipliers of the DP settings.
    #[arg(long, value_delimiter = ',', default_value = "0.001,0.01,0.1,1")]
    sigmas: Vec<f64>,
    /// Flat clip bound of the DP settings.
    #[arg(long, default_value_t = 1.0)]
    clip: f32,
    /// Epochs of the twin model, when it is trained.
    #[arg(long, default_value_t = 10)]
    twin_epochs: usize,
    #[command(flatten)]
    attack: AttackArgs,
}

/// Flags of `audit speaker-model`.
#[derive(clap::Args)]
pub struct SpeakerModelArgs {
    /// Corpus (Speech Commands layout with speaker ids).
    #[arg(long)]
    data: PathBuf,
    /// Full-batch Adam steps.
    #[arg(long, default_value_t = 400)]
    steps: usize,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output directory (`speaker.json`).
    #[arg(long)]
    out: PathBuf,
}

/// Flags of `audit target-model`.
#[derive(clap::Args)]
pub struct TargetModelArgs {
    /// Corpus (Speech Commands layout).
    #[arg(long)]
    data: PathBuf,
    /// Front-end.
    #[arg(long, value_enum, default_value = "mel")]
    features: FeaturesArg,
    /// Epochs.
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output package directory.
    #[arg(long)]
    out: PathBuf,
}

/// Flags of `audit metrics`.
#[derive(clap::Args)]
pub struct MetricsArgs {
    /// The clean reference recording (WAV or FLAC).
    #[arg(long)]
    reference: PathBuf,
    /// The recording to score, same rate and length as the reference.
    #[arg(long)]
    degraded: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs an `audit` subcommand.
pub fn run(cmd: AuditCommand) -> anyhow::Result<()> {
    match cmd {
        AuditCommand::Metrics(args) => metrics(args),
        AuditCommand::Invert(args) => invert(args),
        AuditCommand::Report(args) => report(args),
        AuditCommand::SpeakerModel(args) => speaker_model(args),
        AuditCommand::TargetModel(args) => target_model(args),
        AuditCommand::Privacy(PrivacyAuditCommand::DpSgd(args)) => privacy_dp_sgd(args),
        AuditCommand::Privacy(PrivacyAuditCommand::Federated(args)) => privacy_federated(args),
        AuditCommand::Privacy(PrivacyAuditCommand::Pate(args)) => privacy_pate(args),
    }
}

fn privacy_dp_sgd(args: DpSgdAuditArgs) -> anyhow::Result<()> {
    let c = &args.common;
    let mut audit = DpSgdAudit::new(&c.data);
    audit.settings = c.settings(audit.settings);
    audit.epochs = args.epochs.unwrap_or(audit.epochs);
    let outcome = dp_sgd_audit(&audit, &c.out, &mut |line| eprintln!("{line}"))?;
    print_outcome(&outcome, &c.out);
    Ok(())
}

fn privacy_federated(args: FederatedAuditArgs) -> anyhow::Result<()> {
    let c = &args.common;
    let mut audit = FederatedAudit::new(&c.data);
    audit.settings = c.settings(audit.settings);
    audit.rounds = args.rounds.unwrap_or(audit.rounds);
    audit.local_epochs = args.local_epochs.unwrap_or(audit.local_epochs);
    if let Some(users) = args.users {
        let spec = PopulationSpec {
            users,
            ..PopulationSpec::default()
        };
        spec.validate()?;
        audit.population = Some(spec);
        audit.user_cache = args.user_cache.clone();
    }
    let outcome = federated_audit(&audit, &c.out, &mut |line| eprintln!("{line}"))?;
    print_outcome(&outcome, &c.out);
    Ok(())
}

fn privacy_pate(args: PateAuditArgs) -> anyhow::Result<()> {
    let audit = PateAudit {
        canaries: args.canaries,
        queries: args.queries,
        epsilon: (!args.dp_off).then_some(args.epsilon),
        delta: args.delta,
        teachers: args.teachers,
        seed: args.seed,
        ..PateAudit::new()
    };
    let outcome = pate_audit(&audit, &args.out, &mut |line| eprintln!("{line}"))?;
    print_outcome(&outcome, &args.out);
    Ok(())
}

/// The audit's last lines: the bound beside the claim, and where the files are.
fn print_outcome(outcome: &AuditOutcome, out: &Path) {
    let b = &outcome.bound;
    let claim = outcome
        .claim
        .epsilon_rdp
        .map_or("none (DP off)".to_string(), |e| format!("{e:.3}"));
    println!(
        "{} {}{}: ε lower bound {:.3} ({:.0} %, {} of {} guesses correct), claimed ε {claim}{}",
        outcome.kind,
        outcome.mode,
        outcome
            .fault
            .as_deref()
            .map(|f| format!(" with fault {f}"))
            .unwrap_or_default(),
        b.epsilon,
        b.confidence * 100.0,
        b.correct,
        b.guesses,
        if outcome.claim_refuted() {
            ": THE CLAIM IS REFUTED"
        } else {
            ""
        }
    );
    if let Some(e) = &outcome.one_shot {
        println!(
            "one-shot ε estimate (Andrew et al. 2024; an estimate, not a bound): {:.3}",
            e.epsilon
        );
    }
    println!(
        "wrote {}/results.json, report.md, scores.png",
        out.display()
    );
}

fn metrics(args: MetricsArgs) -> anyhow::Result<()> {
    let x = read_audio(&args.reference)
        .with_context(|| format!("reading the reference {}", args.reference.display()))?;
    let y = read_audio(&args.degraded)
        .with_context(|| format!("reading the degraded {}", args.degraded.display()))?;
    if x.sample_rate != y.sample_rate {
        bail!(
            "{} is {} Hz but {} is {} Hz: resample one so both have the same rate",
            args.reference.display(),
            x.sample_rate,
            args.degraded.display(),
            y.sample_rate
        );
    }
    if x.samples.len() != y.samples.len() {
        bail!(
            "{} has {} samples but {} has {}: the metrics compare aligned recordings of equal length",
            args.reference.display(),
            x.samples.len(),
            args.degraded.display(),
            y.samples.len()
        );
    }
    let report = RecordingMetrics::of(&x.samples, &y.samples, x.sample_rate)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("{:.2} s at {} Hz", report.seconds, report.sample_rate);
        println!("STOI   {:.4}", report.stoi);
        match report.pesq_mode.zip(report.pesq) {
            Some((PesqMode::Wideband, v)) => println!("PESQ   {v:.3} (wideband MOS-LQO)"),
            Some((PesqMode::Narrowband, v)) => println!("PESQ   {v:.3} (narrowband MOS-LQO)"),
            None => println!("PESQ   - (defined at 8 and 16 kHz only)"),
        }
        println!("W-MSE  {:.6e}", report.wmse);
    }
    Ok(())
}

fn bar(total: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} steps (eta {eta})",
    ) {
        pb.set_style(style);
    }
    pb.set_message(what.to_string());
    pb
}

fn invert(args: InvertArgs) -> anyhow::Result<()> {
    let target = AttackTarget::load(&args.model, args.features.map(Into::into))
        .with_context(|| format!("loading the model {}", args.model.display()))?;
    let samples = target.read_clip(&args.input)?;
    let word = match &args.label {
        Some(w) => w.clone(),
        None => args
            .input
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string(),
    };
    let Some(true_label) = target.class_of(&word) else {
        bail!(
            "the clip's class `{word}` is not one of the model's ({}); give it with --label",
            target.labels.join(", ")
        );
    };
    let speaker = match &args.attack.speaker_model {
        Some(dir) => Some(
            SpeakerModel::load(dir)
                .with_context(|| format!("loading the speaker model {}", dir.display()))?,
        ),
        None => None,
    };
    let dp = match (args.dp_clip, args.dp_noise) {
        (Some(clip), Some(noise_multiplier)) => Some(DpNoise {
            clip,
            noise_multiplier,
        }),
        _ => None,
    };
    let opts = AttackOptions {
        invert: args.attack.config(),
        update: args.attack.update()?,
        dp,
        griffin_lim_iterations: args.attack.griffin_lim_iterations,
    };
    opts.invert.check()?;
    let others = other_speakers(&args.input, OTHER_SPEAKERS)?;
    std::fs::create_dir_all(&args.attack.out)
        .with_context(|| format!("creating {}", args.attack.out.display()))?;
    // The attack, then the same attack on a pure-noise update (the prior-only baseline).
    let pb = bar(
        (2 * opts.invert.iterations * opts.invert.restarts) as u64,
        "inverting",
    );
    let a = attack_clip(
        &target,
        &samples,
        true_label,
        &opts,
        speaker.as_ref(),
        &mut || pb.inc(1),
    )?;
    pb.set_message("prior-only baseline");
    let baselines = score_baselines(
        &target,
        &samples,
        &a.original_features,
        &opts,
        &others,
        speaker.as_ref(),
        opts.invert.seed,
        &mut || pb.inc(1),
    )?;
    pb.finish_and_clear();
    write_attack_files(&args.attack.out, &target, &a)?;
    let report = InvertReport::new(
        &args.model,
        &args.input,
        &target,
        opts,
        &a,
        baselines,
        speaker.as_ref(),
    );
    report.write(&args.attack.out.join("report.json"))?;
    let m = &a.metrics;
    let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    println!(
        "label: true {}, recovered {} ({})",
        report.true_label,
        report.recovered_label,
        if report.label_recovered {
            "recovered"
        } else {
            "wrong"
        }
    );
    println!("gradient loss (1 - cos): {:.4}", a.grad_loss);
    let b = &report.baselines;
    let others = report.other_speakers_mean.clone();
    let columns: Vec<(String, MeanLeak)> = [
        ("attack".to_string(), Some(MeanLeak::of([m]))),
        ("prior only".into(), Some(MeanLeak::of([&b.prior_only]))),
        (format!("{} others", b.other_speaker_clips.len()), others),
        ("mean".into(), Some(MeanLeak::of([&b.mean]))),
        ("random".into(), Some(MeanLeak::of([&b.random]))),
    ]
    .into_iter()
    .filter_map(|(n, v)| v.map(|v| (n, v)))
    .collect();
    let line = |name: &str, cell: &dyn Fn(&MeanLeak) -> String| {
        let cells: String = columns
            .iter()
            .map(|(_, v)| format!(" {:>11}", cell(v)))
            .collect();
        println!("{name:<12}{cells}");
    };
    let heads: String = columns.iter().map(|(n, _)| format!(" {n:>11}")).collect();
    println!("{:<12}{heads}", "");
    line("F-MSE", &|v| format!("{:.3}", v.f_mse));
    line("W-MSE", &|v| format!("{:.2e}", v.w_mse));
    line("STOI", &|v| format!("{:.3}", v.stoi));
    line("PESQ", &|v| fmt(v.pesq));
    line("speaker cos", &|v| fmt(v.speaker_similarity));
    println!(
        "without the update an attacker gets STOI {:.3}, F-MSE {:.3} (best of prior only, \
         other speakers, training mean); the attack: STOI {:+.3}, F-MSE ×{:.2} of that",
        report.best_baseline_stoi,
        report.best_baseline_f_mse,
        m.stoi - report.best_baseline_stoi,
        m.f_mse / report.best_baseline_f_mse.max(1e-12),
    );
    println!("wrote {}", args.attack.out.display());
    Ok(())
}

fn load_or_train_speaker(
    given: Option<&PathBuf>,
    data: &Path,
    out: &Path,
) -> anyhow::Result<SpeakerModel> {
    if let Some(dir) = given {
        return SpeakerModel::load(dir)
            .with_context(|| format!("loading the speaker model {}", dir.display()));
    }
    let dir = out.join("speaker-model");
    if dir.join(hush_host::audit::speaker::SPEAKER_JSON).is_file() {
        eprintln!("reusing the speaker model in {}", dir.display());
        return SpeakerModel::load(&dir).with_context(|| format!("loading {}", dir.display()));
    }
    let cfg = SpeakerTrainConfig::new(data);
    let m = train_speaker_model(&cfg, &mut |e, l| {
        eprintln!("speaker model step {e:>3}: loss {l:.3}")
    })?;
    m.save(&dir)?;
    eprintln!(
        "speaker model: EER {:.3} at cosine {:.3} on {} held-out speakers → {}",
        m.calibration.eer,
        m.calibration.threshold,
        m.calibration.heldout_speakers,
        dir.display()
    );
    Ok(m)
}

fn report(args: ReportArgs) -> anyhow::Result<()> {
    let first = AttackTarget::load(&args.model, None)
        .with_context(|| format!("loading the model {}", args.model.display()))?;
    let twin = match &args.twin {
        Some(dir) => AttackTarget::load(dir, None)
            .with_context(|| format!("loading the twin {}", dir.display()))?,
        None => {
            let dir = args.attack.out.join("twin-model");
            if !dir.join("model.json").is_file() {
                let cfg = twin_config(&first, &args.data, args.twin_epochs, args.attack.seed);
                eprintln!(
                    "training the {} twin of the {} model into {}",
                    match first.kind {
                        AttackFeatures::Mel => "mfcc",
                        AttackFeatures::Mfcc => "mel",
                    },
                    first.kind.name(),
                    dir.display()
                );
                train_kws(&cfg, &dir, "hush-host audit report (twin)", &mut |e| {
                    eprintln!(
                        "twin epoch {:>2}: loss {:.3}, val acc {:.3}",
                        e.epoch, e.train_loss, e.val_accuracy
                    )
                })?;
            }
            AttackTarget::load(&dir, None)?
        }
    };
    if twin.kind == first.kind {
        bail!(
            "--model and --twin both read {} features; give one Mel and one MFCC model",
            first.kind.name()
        );
    }
    let mut targets = vec![first, twin];
    targets.sort_by_key(|t| t.kind.name());
    let speaker = load_or_train_speaker(
        args.attack.speaker_model.as_ref(),
        &args.data,
        &args.attack.out,
    )?;
    let clips = pick_clips(&args.data, &targets[0].labels, args.clips)?;
    let cfg = ReportConfig {
        sigmas: args.sigmas.clone(),
        clip: args.clip,
        update: args.attack.update()?,
        invert: args.attack.config(),
        griffin_lim_iterations: args.attack.griffin_lim_iterations,
    };
    cfg.invert.check()?;
    // Each setting's attack, and the prior-only baseline's, per clip and model.
    let attacks = targets.len() * clips.len() * (2 + cfg.sigmas.len());
    let steps = attacks * cfg.invert.iterations * cfg.invert.restarts;
    let pb = bar(steps as u64, "attacking");
    let pb2 = pb.clone();
    let rows = run_report(
        &targets,
        &clips,
        Some(&speaker),
        &cfg,
        &mut |m| pb2.set_message(m.to_string()),
        &mut || pb.inc(1),
    )?;
    pb.finish_and_clear();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let head = preamble(&targets, &clips, &args.data, &cfg, &speaker, &command);
    write_report(&args.attack.out, &rows, &head)?;
    print!("{}", hush_host::audit::report::markdown(&rows, ""));
    println!("wrote {}", args.attack.out.join("report.md").display());
    Ok(())
}

fn speaker_model(args: SpeakerModelArgs) -> anyhow::Result<()> {
    let mut cfg = SpeakerTrainConfig::new(&args.data);
    cfg.steps = args.steps;
    cfg.seed = args.seed;
    let m = train_speaker_model(&cfg, &mut |e, l| eprintln!("step {e:>3}: loss {l:.3}"))?;
    m.save(&args.out)?;
    println!(
        "speaker model ({} training speakers): EER {:.3} at cosine threshold {:.3} on {} held-out speakers ({} same / {} different trials) → {}",
        m.speakers.len(),
        m.calibration.eer,
        m.calibration.threshold,
        m.calibration.heldout_speakers,
        m.calibration.trials[0],
        m.calibration.trials[1],
        args.out.display()
    );
    Ok(())
}

fn target_model(args: TargetModelArgs) -> anyhow::Result<()> {
    let cfg = target_config(&args.data, args.features.into(), args.epochs, args.seed);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let r = train_kws(&cfg, &args.out, &command, &mut |e| {
        eprintln!(
            "epoch {:>2}: loss {:.3}, val acc {:.3}",
            e.epoch, e.train_loss, e.val_accuracy
        )
    })?;
    let test = r
        .card
        .metrics
        .as_ref()
        .and_then(|m| m.splits.get("test"))
        .map_or(0.0, |s| s.accuracy);
    println!(
        "{} leak-cnn ({} parameters), test accuracy {test:.3} → {}",
        AttackFeatures::from(args.features).name(),
        r.card.num_trainable,
        args.out.display()
    );
    Ok(())
}
