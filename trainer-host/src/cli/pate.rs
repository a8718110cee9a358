//! `hush-host pate …`: teachers on speaker-disjoint private data, noisy labels for public
//! clips (recorded in the ledger), and the student ([`hush_host::pate`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use hush_host::accountant::Accountant;
use hush_host::pate::asr::{
    label_asr, train_asr_student, train_asr_teachers_in_parallel, AsrAggregator, AsrLabelConfig,
    AsrLabelFile,
};
use hush_host::pate::{
    label_public, train_student, train_student_self_training, train_teachers_in_parallel,
    Aggregator, LabelConfig, LabelFile, SelfTraining, SmoothRelease,
};
use hush_host::train::asr::AsrTrainConfig;

use super::train::{asr_epoch_line, epoch_line, print_asr_card, print_card, ModelArgs, TaskArg};

/// `hush-host pate` subcommands.
#[derive(clap::Subcommand)]
pub enum PateCommand {
    /// Train N teachers, each on its own speakers of the private corpus (resumable).
    TrainTeachers(TeachersArgs),
    /// Label the public corpus with the teachers' noisy votes; records the cost in the ledger.
    Label(LabelArgs),
    /// Train the student on the answered public clips with their aggregated labels.
    Student(StudentArgs),
    /// All three: teachers, labels, student.
    Run(Box<RunArgs>),
}

/// Arguments of `pate train-teachers`.
#[derive(clap::Args)]
pub struct TeachersArgs {
    /// kws (Speech Commands corpora) or asr (LibriSpeech layout or JSONL manifest; CTC
    /// teachers, `--arch` default ctc-gru-small).
    #[arg(long, value_enum, default_value = "kws")]
    pub task: TaskArg,
    /// The private corpus (all its splits train teachers).
    #[arg(long)]
    pub private: PathBuf,
    /// Output directory (teacher-NNN/ packages and partition.json).
    #[arg(long)]
    pub out: PathBuf,
    /// How many teachers, over which speakers.
    #[command(flatten)]
    pub ensemble: EnsembleArgs,
    /// The teachers' model and training.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// The teacher count and the partition seed.
#[derive(clap::Args, Clone, Copy)]
pub struct EnsembleArgs {
    /// Number of teachers (each gets whole speakers; at most the number of speakers).
    #[arg(long)]
    pub teachers: usize,
    /// Seed of the speaker partition.
    #[arg(long, default_value_t = 0)]
    pub partition_seed: u64,
    /// Teachers trained at once, each on its own thread. Above 1, a seeded run is no
    /// longer bit-for-bit repeatable (burn's random generator is shared by the threads).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
}

/// The aggregator flags.
#[derive(clap::Args, Clone)]
pub struct AggregatorArgs {
    /// kws: lnmax, gnmax, confident-gnmax or interactive-gnmax; asr: posterior-average
    /// (--sigma) or transcript-vote (--sigma, --threshold).
    #[arg(long, default_value = "gnmax")]
    pub aggregator: String,
    /// GNMax noise σ (the answer step of confident-gnmax too).
    #[arg(long)]
    pub sigma: Option<f64>,
    /// LNMax Laplace scale λ.
    #[arg(long)]
    pub lambda: Option<f64>,
    /// Confident-GNMax: threshold T on the noisy top vote; transcript-vote: on the winning
    /// transcript's noisy count.
    #[arg(long)]
    pub threshold: Option<f64>,
    /// Confident- and interactive-GNMax: noise σ₁ of the threshold step.
    #[arg(long)]
    pub sigma1: Option<f64>,
    /// Interactive-GNMax: the student's top probability from which its own label is kept
    /// where the teachers do not disagree.
    #[arg(long, default_value_t = 0.9)]
    pub student_confidence: f64,
    /// Release the data-dependent ε with smooth sensitivity, noise multiplier σ_ss
    /// (GNMax family; written to the labels file and the ledger record).
    #[arg(long)]
    pub ss_sigma: Option<f64>,
    /// Smoothness β of that release (default 0.4/λ at the data-dependent optimal order λ).
    #[arg(long, requires = "ss_sigma")]
    pub ss_beta: Option<f64>,
    /// δ of the reported ε and of the ledger budget.
    #[arg(long, default_value_t = 1e-5)]
    pub delta: f64,
    /// The privacy ledger (SQLite; created if missing).
    #[arg(long, default_value = "hush-ledger.sqlite")]
    pub ledger: PathBuf,
    /// The ledger's total ε budget.
    #[arg(long, default_value_t = 10.0)]
    pub budget_epsilon: f64,
    /// The ledger's accountant (LNMax needs rdp).
    #[arg(long, value_enum, default_value = "rdp")]
    pub accountant: Accountant,
    /// Seed the noise (reproducible; never for real releases).
    #[arg(long)]
    pub noise_seed: Option<u64>,
}

impl AggregatorArgs {
    fn aggregator(&self) -> anyhow::Result<Aggregator> {
        let need = |v: Option<f64>, flag: &str| {
            v.with_context(|| format!("--aggregator {} needs {flag}", self.aggregator))
        };
        Ok(match self.aggregator.as_str() {
            "lnmax" => Aggregator::LnMax {
                lambda: need(self.lambda, "--lambda")?,
            },
            "gnmax" => Aggregator::GnMax {
                sigma: need(self.sigma, "--sigma")?,
            },
            "confident-gnmax" => Aggregator::ConfidentGnMax {
                threshold: need(self.threshold, "--threshold")?,
                sigma1: need(self.sigma1, "--sigma1")?,
                sigma2: need(self.sigma, "--sigma")?,
            },
            "interactive-gnmax" => Aggregator::InteractiveGnMax {
                threshold: need(self.threshold, "--threshold")?,
                sigma1: need(self.sigma1, "--sigma1")?,
                sigma2: need(self.sigma, "--sigma")?,
                student_confidence: self.student_confidence,
            },
            other => anyhow::bail!(
                "--aggregator: `{other}` is not one of lnmax, gnmax, confident-gnmax, \
                 interactive-gnmax"
            ),
        })
    }

    fn asr_config(&self, teachers: &Path, public: &Path) -> anyhow::Result<AsrLabelConfig> {
        let need = |v: Option<f64>, flag: &str| {
            v.with_context(|| format!("--aggregator {} needs {flag}", self.aggregator))
        };
        if self.ss_sigma.is_some() {
            anyhow::bail!(
                "--ss-sigma applies to --task kws only (the ASR costs are data-independent)"
            );
        }
        let aggregator = match self.aggregator.as_str() {
            "posterior-average" => AsrAggregator::PosteriorAverage {
                sigma: need(self.sigma, "--sigma")?,
            },
            "transcript-vote" => AsrAggregator::TranscriptVote {
                sigma: need(self.sigma, "--sigma")?,
                threshold: need(self.threshold, "--threshold")?,
            },
            other => anyhow::bail!(
                "--aggregator: `{other}` is not an ASR aggregator (--task asr): use \
                 posterior-average or transcript-vote"
            ),
        };
        Ok(AsrLabelConfig {
            teachers: teachers.to_path_buf(),
            public: public.to_path_buf(),
            aggregator,
            delta: self.delta,
            ledger: self.ledger.clone(),
            budget_epsilon: self.budget_epsilon,
            accountant: self.accountant,
            seed: self.noise_seed,
        })
    }

    fn config(
        &self,
        teachers: &Path,
        public: &Path,
        student: Option<&Path>,
    ) -> anyhow::Result<LabelConfig> {
        Ok(LabelConfig {
            teachers: teachers.to_path_buf(),
            public: public.to_path_buf(),
            aggregator: self.aggregator()?,
            delta: self.delta,
            ledger: self.ledger.clone(),
            budget_epsilon: self.budget_epsilon,
            accountant: self.accountant,
            seed: self.noise_seed,
            student: student.map(Path::to_path_buf),
            smooth: self.ss_sigma.map(|sigma_ss| SmoothRelease {
                sigma_ss,
                beta: self.ss_beta,
            }),
        })
    }
}

/// Arguments of `pate label`.
#[derive(clap::Args)]
pub struct LabelArgs {
    /// kws or asr (the teachers' task; asr takes --aggregator posterior-average or
    /// transcript-vote).
    #[arg(long, value_enum, default_value = "kws")]
    pub task: TaskArg,
    /// The teachers' directory (train-teachers --out).
    #[arg(long)]
    pub teachers: PathBuf,
    /// The public corpus (its train and validation clips are labelled).
    #[arg(long)]
    pub public: PathBuf,
    /// The labels file to write (JSON).
    #[arg(long)]
    pub out: PathBuf,
    /// interactive-gnmax: the current student (a package over the teachers' classes).
    #[arg(long)]
    pub student: Option<PathBuf>,
    /// The aggregator, its noise and the ledger.
    #[command(flatten)]
    pub agg: AggregatorArgs,
}

/// Arguments of `pate student`.
#[derive(clap::Args)]
pub struct StudentArgs {
    /// kws or asr (the labels file's task).
    #[arg(long, value_enum, default_value = "kws")]
    pub task: TaskArg,
    /// The public corpus the labels were made on.
    #[arg(long)]
    pub public: PathBuf,
    /// The labels file (pate label --out).
    #[arg(long)]
    pub labels: PathBuf,
    /// Output model directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Self-training on the refused clips (KWS): after a first student learns from the
    /// answered clips (kept in OUT-answered-only), it labels every refused clip whose top
    /// class probability reaches C, and the student in OUT learns from both. No privacy
    /// cost: the teachers are not asked again.
    #[arg(long, value_name = "C")]
    pub self_train_confidence: Option<f32>,
    /// The student's model and training.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Arguments of `pate run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The private corpus.
    #[arg(long)]
    pub private: PathBuf,
    /// The public corpus.
    #[arg(long)]
    pub public: PathBuf,
    /// Output directory: teachers/, labels.json, student/.
    #[arg(long)]
    pub out: PathBuf,
    /// How many teachers, over which speakers.
    #[command(flatten)]
    pub ensemble: EnsembleArgs,
    /// The aggregator, its noise and the ledger.
    #[command(flatten)]
    pub agg: AggregatorArgs,
    /// Self-training on the refused clips (KWS): after a first student learns from the
    /// answered clips (kept in OUT-answered-only), it labels every refused clip whose top
    /// class probability reaches C, and the student in OUT learns from both. No privacy
    /// cost: the teachers are not asked again.
    #[arg(long, value_name = "C")]
    pub self_train_confidence: Option<f32>,
    /// The model and training of teachers and student.
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Runs a `pate` subcommand.
pub fn run(cmd: PateCommand) -> anyhow::Result<()> {
    match cmd {
        PateCommand::TrainTeachers(a) => match a.task {
            TaskArg::Kws => teachers(&a.private, a.ensemble, &a.model, &a.out),
            TaskArg::Asr => asr_teachers(&a.private, a.ensemble, &a.model, &a.out),
        },
        PateCommand::Label(a) => match a.task {
            TaskArg::Kws => label(&a.agg, &a.teachers, &a.public, a.student.as_deref(), &a.out),
            TaskArg::Asr => {
                if a.student.is_some() {
                    anyhow::bail!("--student applies to --task kws (interactive-gnmax) only");
                }
                asr_label(&a.agg, &a.teachers, &a.public, &a.out)
            }
        },
        PateCommand::Student(a) => match a.task {
            TaskArg::Kws => student(
                &a.public,
                &a.labels,
                &a.model,
                a.self_train_confidence,
                &a.out,
            ),
            TaskArg::Asr => {
                if a.self_train_confidence.is_some() {
                    anyhow::bail!("--self-train-confidence applies to --task kws only");
                }
                asr_student(&a.public, &a.labels, &a.model, &a.out)
            }
        },
        PateCommand::Run(a) => {
            let teachers_dir = a.out.join("teachers");
            let labels = a.out.join("labels.json");
            teachers(&a.private, a.ensemble, &a.model, &teachers_dir)?;
            // Interactive: a first round without a student (Confident-GNMax), a first
            // student, then the interactive round that asks it; two ledger records.
            let first = if a.agg.aggregator == "interactive-gnmax" {
                let labels0 = a.out.join("labels-round0.json");
                let student0 = a.out.join("student-round0");
                label(&a.agg, &teachers_dir, &a.public, None, &labels0)?;
                student(&a.public, &labels0, &a.model, None, &student0)?;
                Some(student0)
            } else {
                None
            };
            label(&a.agg, &teachers_dir, &a.public, first.as_deref(), &labels)?;
            student(
                &a.public,
                &labels,
                &a.model,
                a.self_train_confidence,
                &a.out.join("student"),
            )
        }
    }
}

/// One line per teacher as it starts (or is found finished).
fn teacher_line(t: usize, n: usize, done: bool) {
    let what = if done {
        "already trained, kept"
    } else {
        "training"
    };
    eprintln!("teacher {}/{n}: {what}", t + 1);
}

fn teachers(
    private: &Path,
    ensemble: EnsembleArgs,
    model: &ModelArgs,
    out: &Path,
) -> anyhow::Result<()> {
    let cfg = model.kws_config(private)?;
    let (n, seed) = (ensemble.teachers, ensemble.partition_seed);
    let dirs = train_teachers_in_parallel(&cfg, n, seed, ensemble.jobs, out, &mut teacher_line)
        .with_context(|| format!("training teachers on {}", private.display()))?;
    println!("{} teachers in {}", dirs.len(), out.display());
    Ok(())
}

fn label(
    agg: &AggregatorArgs,
    teachers: &Path,
    public: &Path,
    student: Option<&Path>,
    out: &Path,
) -> anyhow::Result<()> {
    let cfg = agg.config(teachers, public, student)?;
    let report = label_public(&cfg, out, &mut |t, n| {
        eprintln!("votes of teacher {}/{n}", t + 1)
    })
    .with_context(|| format!("labelling {}", public.display()))?;
    let f = &report.file;
    println!(
        "{}: of {} public clips, {} answered by {} teachers, {} kept from the student, {} \
         refused",
        f.aggregator.name(),
        f.labels.len(),
        f.answered,
        f.num_teachers,
        f.kept_from_student,
        f.refused
    );
    println!(
        "ε = {:.4} (data-independent, publishable), δ = {}; ledger {} record {}",
        f.epsilon_data_independent, f.delta, f.ledger, f.ledger_record
    );
    match &f.smooth_sensitivity {
        Some(s) => println!(
            "data-dependent ε released with smooth sensitivity (noised) = {:.4} at δ = {} \
             (order {}, β = {}, σ_ss = {}; includes the release's own ρ = {:.4}, which the \
             ledger's record also carries, at every order below 1/(2β))",
            s.released_epsilon, f.delta, s.order, s.params.beta, s.params.sigma_ss, s.release_rdp
        ),
        None => println!(
            "data-dependent ε: private (a function of the votes); release it with --ss-sigma"
        ),
    }
    println!("labels → {}", out.display());
    Ok(())
}

fn student(
    public: &Path,
    labels: &Path,
    model: &ModelArgs,
    self_train: Option<f32>,
    out: &Path,
) -> anyhow::Result<()> {
    let file = LabelFile::read(labels)?;
    let cfg = model.kws_config(public)?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let context = || format!("training the student on {}", public.display());
    let Some(confidence) = self_train else {
        let report = train_student(&cfg, &file, out, &command, &mut epoch_line(cfg.epochs))
            .with_context(context)?;
        print_card(&report.card, out);
        return Ok(());
    };
    let r = train_student_self_training(
        &cfg,
        &file,
        SelfTraining { confidence },
        out,
        &command,
        &mut epoch_line(cfg.epochs),
    )
    .with_context(context)?;
    println!("student on the answered clips only:");
    print_card(&r.first.card, &r.first_dir);
    println!(
        "self-training: {} of {} refused clips pseudo-labelled at confidence >= {confidence}",
        r.pseudo_labelled.len(),
        r.refused
    );
    print_card(&r.student.card, out);
    Ok(())
}

/// The ASR teachers' and student's training config: `--arch` defaults to ctc-gru-small.
fn asr_model_config(model: &ModelArgs, data: &Path) -> anyhow::Result<AsrTrainConfig> {
    let mut cfg = model.asr_config(data, 4)?;
    if model.arch.is_none() {
        cfg.arch_name = "ctc-gru-small".into();
    }
    Ok(cfg)
}

fn asr_teachers(
    private: &Path,
    ensemble: EnsembleArgs,
    model: &ModelArgs,
    out: &Path,
) -> anyhow::Result<()> {
    let cfg = asr_model_config(model, private)?;
    let (n, seed) = (ensemble.teachers, ensemble.partition_seed);
    let dirs = train_asr_teachers_in_parallel(&cfg, n, seed, ensemble.jobs, out, &mut teacher_line)
        .with_context(|| format!("training ASR teachers on {}", private.display()))?;
    println!("{} ASR teachers in {}", dirs.len(), out.display());
    Ok(())
}

fn asr_label(
    agg: &AggregatorArgs,
    teachers: &Path,
    public: &Path,
    out: &Path,
) -> anyhow::Result<()> {
    let cfg = agg.asr_config(teachers, public)?;
    let f = label_asr(&cfg, out, &mut |t, n| {
        eprintln!("posteriors of teacher {}/{n}", t + 1)
    })
    .with_context(|| format!("labelling {}", public.display()))?;
    println!(
        "{}: {} of {} public utterances labelled by {} teachers",
        f.aggregator.name(),
        f.answered,
        f.labels.len(),
        f.num_teachers
    );
    println!(
        "ε = {:.4} (data-independent, speaker level, add/remove, {}), δ = {}; ledger {} \
         record {}",
        f.epsilon, cfg.accountant, f.delta, f.ledger, f.ledger_record
    );
    println!("labels → {}", out.display());
    Ok(())
}

fn asr_student(public: &Path, labels: &Path, model: &ModelArgs, out: &Path) -> anyhow::Result<()> {
    let file = AsrLabelFile::read(labels)?;
    let cfg = asr_model_config(model, public)?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = train_asr_student(&cfg, &file, out, &command, &mut asr_epoch_line(cfg.epochs))
        .with_context(|| format!("training the ASR student on {}", public.display()))?;
    print_asr_card(&report.card, out);
    Ok(())
}
