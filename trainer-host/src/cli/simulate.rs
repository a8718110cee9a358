//! `hush-host simulate`: one device per training speaker, federated training with
//! user-level DP through the round engine in process (or a real host on loopback with
//! `--transport http`), per-round accuracy, ε, results.json and a plot.

use std::path::PathBuf;

use anyhow::Context;
use hush_host::fl::config::OptimizerKind;
use hush_host::fl::FlConfig;
use hush_host::population::PopulationSpec;
use hush_host::simulate::{simulate, SimulateConfig, SimulateReport, Transport};
use hush_models::cohort::CohortSplit;
use hush_models::dp::ClipStrategy;
use indicatif::{ProgressBar, ProgressStyle};

/// Arguments of `hush-host simulate`.
#[derive(clap::Args)]
pub struct SimulateArgs {
    /// Keyword corpus (Speech Commands layout); one device per training speaker.
    #[arg(long, default_value = "data/corpus/kws")]
    pub data: PathBuf,
    /// Output folder (results.json, accuracy.png, model/, host/, devices/).
    #[arg(long, default_value = "out/simulate")]
    pub out: PathBuf,
    /// Start from this hush.toml instead of the simulation defaults (flags still override).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Use at most this many devices (training speakers).
    #[arg(long)]
    pub devices: Option<usize>,
    /// Rounds to release.
    #[arg(long)]
    pub rounds: Option<u64>,
    /// Probability q that a device joins a round's cohort.
    #[arg(long)]
    pub sampling_rate: Option<f64>,
    /// Noise multiplier z (noise std on the sum = z × sensitivity).
    #[arg(long)]
    pub noise_multiplier: Option<f64>,
    /// Simulate the noise of cohorts of this size (ε is then also extrapolated to
    /// --population devices with cohorts of this size).
    #[arg(long)]
    pub noise_cohort_size: Option<f64>,
    /// Population the guarantee is extrapolated to.
    #[arg(long)]
    pub population: Option<u64>,
    /// δ of the guarantee as simulated (the ledger's budget δ) [default: 1e-5].
    #[arg(long)]
    pub delta: Option<f64>,
    /// User-level clip bound on each update.
    #[arg(long)]
    pub clip: Option<f32>,
    /// flat, per-layer-uniform or per-layer-dim.
    #[arg(long)]
    pub clipping: Option<ClipStrategy>,
    /// Scale every layer of every update to exactly its bound.
    #[arg(long)]
    pub normalize_layers: bool,
    /// Non-private federated averaging (no noise, no ledger): a baseline.
    #[arg(long)]
    pub no_dp: bool,
    /// Server optimizer: fedavg, fedadam or lamb.
    #[arg(long, value_parser = parse_optimizer)]
    pub optimizer: Option<OptimizerKind>,
    /// Server learning rate.
    #[arg(long)]
    pub server_lr: Option<f64>,
    /// Local epochs per round.
    #[arg(long)]
    pub local_epochs: Option<u32>,
    /// Local learning rate.
    #[arg(long)]
    pub local_lr: Option<f32>,
    /// Seed of sampling and noise (reproducible runs); omitted with a --config: OS entropy.
    #[arg(long)]
    pub seed: Option<u64>,
    /// in-process (the round engine driven directly, no HTTP, no thread per device) or
    /// http (a round server on loopback and one device client per device).
    #[arg(long, default_value = "in-process")]
    pub transport: Transport,
    /// In process: examples per batched local-training step, summed over the devices
    /// trained together (at least one device; results do not change). On the CPU, small
    /// groups on every core are fastest (BENCHMARKS.md, "Population scale").
    #[arg(long, default_value_t = CohortSplit::DEFAULT.max_rows)]
    pub local_rows: usize,
    /// In process: threads training groups of devices at once, each on its own copy of the
    /// model (results do not change); default: the machine's cores.
    #[arg(long)]
    pub local_threads: Option<usize>,
    /// Mean fraction of devices reachable in a round (in process; also the host's published
    /// availability estimate, the divisor's factor).
    #[arg(long)]
    pub availability: Option<f64>,
    /// Relative swing of availability over a simulated day (0: flat).
    #[arg(long)]
    pub daily_swing: Option<f64>,
    /// Rounds per simulated day.
    #[arg(long)]
    pub rounds_per_day: Option<u32>,
    /// Probability that a drawn, reachable device trains but never uploads.
    #[arg(long)]
    pub dropout: Option<f64>,
    /// Probability that a drawn, reachable device uploads after the deadline.
    #[arg(long)]
    pub straggle: Option<f64>,
    /// A fixed-size cohort among the available devices: refused with the reason (the
    /// accountant cannot account for it); use --sampling-rate.
    #[arg(long)]
    pub cohort_size: Option<u64>,
    /// Virtual users: this many devices made from the corpus's training speakers, each with
    /// a voice and words of their own (in process only; built once and cached, see
    /// --user-cache). Validation and test users come from the other speakers.
    #[arg(long)]
    pub users: Option<usize>,
    /// Virtual validation users (the curve, the input statistics).
    #[arg(long, default_value_t = PopulationSpec::default().validation_users, requires = "users")]
    pub validation_users: usize,
    /// Virtual test users (scored once, at the end).
    #[arg(long, default_value_t = PopulationSpec::default().test_users, requires = "users")]
    pub test_users: usize,
    /// Fewest and most clips of a virtual user, e.g. 4,40.
    #[arg(long, value_delimiter = ',', requires = "users")]
    pub user_clips: Option<Vec<usize>>,
    /// Concentration of each virtual user's Dirichlet draw over the classes (small: a
    /// user says few of the words).
    #[arg(long, default_value_t = PopulationSpec::default().alpha, requires = "users")]
    pub user_alpha: f64,
    /// Seed of the virtual users (their voices, words and clips).
    #[arg(long, default_value_t = 0, requires = "users")]
    pub user_seed: u64,
    /// Cache folder of the virtual users' features (reused when it holds the same
    /// population) [default: <out>/virtual-users].
    #[arg(long, requires = "users")]
    pub user_cache: Option<PathBuf>,
    /// A tuning run: the test users are not scored (choose hyper-parameters on the
    /// validation users' curve, then score the test users once with the chosen ones).
    #[arg(long, requires = "users")]
    pub tuning: bool,
}

fn parse_optimizer(s: &str) -> Result<OptimizerKind, String> {
    match s {
        "fedavg" => Ok(OptimizerKind::Fedavg),
        "fedadam" => Ok(OptimizerKind::Fedadam),
        "lamb" => Ok(OptimizerKind::Lamb),
        _ => Err(format!("{s:?}: expected fedavg, fedadam or lamb")),
    }
}

impl SimulateArgs {
    /// The simulation these flags describe.
    pub fn to_config(&self) -> anyhow::Result<SimulateConfig> {
        let mut cfg = SimulateConfig::small_kws(&self.data, &self.out);
        if let Some(path) = &self.config {
            cfg.host =
                FlConfig::load(path).with_context(|| format!("reading {}", path.display()))?;
        }
        let h = &mut cfg.host;
        cfg.devices = self.devices.or(cfg.devices);
        if let Some(v) = self.rounds {
            h.rounds.rounds = v;
        }
        if let Some(v) = self.sampling_rate {
            h.rounds.sampling_rate = v;
        }
        if let Some(v) = self.noise_multiplier {
            h.dp.noise_multiplier = v;
        }
        if let Some(v) = self.noise_cohort_size {
            h.dp.noise_cohort_size = Some(v);
        }
        if let Some(v) = self.clip {
            h.dp.clip = v;
        }
        if let Some(v) = self.clipping {
            h.dp.clipping = v;
        }
        if self.normalize_layers {
            h.dp.normalize_layers = true;
        }
        if self.no_dp {
            h.dp.enabled = false;
        }
        if let Some(v) = self.optimizer {
            if v != h.optimizer.kind {
                h.optimizer = Default::default();
                h.optimizer.kind = v;
            }
        }
        if let Some(v) = self.server_lr {
            h.optimizer.lr = Some(v);
        }
        if let Some(v) = self.local_epochs {
            h.local.epochs = v;
        }
        if let Some(v) = self.local_lr {
            h.local.lr = v;
        }
        if self.seed.is_some() {
            h.seed = self.seed;
        }
        if let Some(v) = self.population {
            cfg.deployment_population = v;
        }
        if let Some(v) = self.delta {
            if !(v > 0.0 && v < 1.0) {
                anyhow::bail!("--delta {v}: expected a number in (0, 1)");
            }
            h.budget.delta = v;
        }
        cfg.transport = self.transport;
        let threads = self.local_threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        if self.local_rows == 0 || threads == 0 {
            anyhow::bail!(
                "--local-rows and --local-threads must be ≥ 1 (got {} and {threads})",
                self.local_rows
            );
        }
        cfg.local_batching = CohortSplit {
            max_rows: self.local_rows,
            threads,
        };
        let p = &mut cfg.participation;
        if let Some(v) = self.availability {
            p.availability = v;
        }
        if let Some(v) = self.daily_swing {
            p.daily_swing = v;
        }
        if let Some(v) = self.rounds_per_day {
            p.rounds_per_day = v;
        }
        if let Some(v) = self.dropout {
            p.dropout = v;
        }
        if let Some(v) = self.straggle {
            p.straggle = v;
        }
        if self.cohort_size.is_some() {
            cfg.host.rounds.cohort_size = self.cohort_size;
        }
        if let Some(users) = self.users {
            let clips = match self.user_clips.as_deref() {
                None => PopulationSpec::default().clips,
                Some(&[lo, hi]) => [lo, hi],
                Some(other) => anyhow::bail!("--user-clips {other:?}: expected FEWEST,MOST"),
            };
            let spec = PopulationSpec {
                users,
                validation_users: self.validation_users,
                test_users: self.test_users,
                clips,
                alpha: self.user_alpha,
                seed: self.user_seed,
            };
            spec.validate()?;
            cfg.virtual_users = Some(spec);
            cfg.user_cache = self.user_cache.clone();
            cfg.tuning = self.tuning;
        }
        Ok(cfg)
    }
}

/// Runs a simulation with a progress bar; returns its report.
pub fn run_with(cfg: &SimulateConfig, prefix: &str) -> anyhow::Result<SimulateReport> {
    let bar = ProgressBar::new(cfg.host.rounds.rounds);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {bar:30} round {pos}/{len} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(prefix.to_string());
    let held_out = if cfg.virtual_users.is_some() {
        "validation"
    } else {
        "test"
    };
    let report = simulate(
        cfg,
        &mut |line| say(&bar, format!("{prefix}: {line}")),
        &mut |point, _| {
            bar.set_position(point.version);
            bar.set_message(format!("{held_out} accuracy {:.3}", point.accuracy));
        },
    )
    .context("simulation")?;
    bar.finish_and_clear();
    Ok(report)
}

/// Prints a line above the progress bar, or plainly when the bar is hidden (output not
/// a terminal), so logs keep every line.
pub fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        println!("{line}");
    } else {
        bar.println(line);
    }
}

/// Runs `hush-host simulate` and prints the outcome.
pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let cfg = args.to_config()?;
    let report = run_with(&cfg, "simulate")?;
    print_summary("simulate", &report);
    Ok(())
}

/// Prints the lines a user needs: accuracy, ε with δ/unit/accountant, where things are.
pub fn print_summary(prefix: &str, r: &SimulateReport) {
    println!(
        "{prefix}: {} devices, {} rounds released, {} updates accepted, {} refused, {:.0} s",
        r.devices,
        r.rounds
            .iter()
            .filter(|x| x.released_version.is_some())
            .count(),
        r.uploads_accepted,
        r.uploads_refused,
        r.seconds
    );
    let p = &r.participation;
    if p.unavailable + p.dropped + p.late > 0 {
        println!(
            "{prefix}: drawn devices away {}, dropped out {}, too late {}",
            p.unavailable, p.dropped, p.late
        );
    }
    if let Some(p) = &r.population {
        println!(
            "{prefix}: virtual users: {} training, {} validation, {} test, from {} + {} + {} base speakers (users of one base speaker are not independent people); {:.1} clips per training user ({}–{})",
            p.users[0], p.users[1], p.users[2], p.base_speakers[0], p.base_speakers[1], p.base_speakers[2],
            p.clips_per_user.1, p.clips_per_user.0, p.clips_per_user.2
        );
        if let (Some(first), Some(last)) = (r.curve.first(), r.curve.last()) {
            println!(
                "{prefix}: validation-user accuracy {:.3} → {:.3}",
                first.accuracy, last.accuracy
            );
        }
        match &r.test {
            Some(t) => println!(
                "{prefix}: test users, scored once: accuracy {:.3}, balanced keyword accuracy {:.3}",
                t.accuracy, t.balanced_keyword_accuracy
            ),
            None => println!("{prefix}: a tuning run: the test users were not scored"),
        }
    } else if let (Some(first), Some(last), Some(t)) = (r.curve.first(), r.curve.last(), &r.test) {
        println!(
            "{prefix}: test-speaker accuracy {:.3} → {:.3} (balanced keyword accuracy {:.3}; chance 1/12)",
            first.accuracy, last.accuracy, t.balanced_keyword_accuracy
        );
    }
    for e in &r.ledger_epsilon {
        println!("{prefix}: privacy spent, as simulated (ledger): {e}");
    }
    for e in &r.deployment_epsilon {
        println!(
            "{prefix}: privacy extrapolated to {} devices with cohorts of {}: {e}",
            r.config.deployment_population,
            r.config.host.dp.noise_cohort_size.unwrap_or_default()
        );
    }
    println!("{prefix}: model: {}", r.model.display());
    println!(
        "{prefix}: results: {}, plot: {}",
        r.config.out.join("results.json").display(),
        r.config.out.join("accuracy.png").display()
    );
}
