//! `hush-host privacy …`: ε of a training run, noise calibration, PATE analysis, and the
//! privacy ledger. Each subcommand parses flags into typed values, calls one library function
//! in `hush_host::accountant` / `hush_host::ledger`, and prints text or `--json`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use hush_host::accountant::{
    calibrate, pate, rdp, Accountant, Adjacency, EpsilonReport, PrivacyUnit, Sampling,
    SubsampledGaussian,
};
use hush_host::ledger::sqlite::SqliteLedgerStore;
use hush_host::ledger::{totals, LedgerStore, LedgerTotals, ReleaseRecord};
use hush_host::pate::ReleasedEpsilon;
use hush_models::dp::NoiseSource;
use serde::Serialize;

/// Subcommands of `hush-host privacy`.
#[derive(clap::Subcommand)]
pub enum PrivacyCommand {
    /// ε of `steps` noisy steps of a subsampled Gaussian (DP-SGD steps or federated rounds).
    Epsilon(EpsilonArgs),
    /// Smallest noise multiplier reaching a target (ε, δ).
    Calibrate(CalibrateArgs),
    /// Privacy cost of PATE teacher votes answered with GNMax / Confident-GNMax.
    Pate(PateArgs),
    /// List recorded releases and their composed totals.
    Ledger(LedgerArgs),
}

/// Flags of `privacy epsilon`.
#[derive(clap::Args)]
pub struct EpsilonArgs {
    /// Poisson sampling rate q in (0, 1] (expected batch / dataset, or cohort / population).
    #[arg(long)]
    sampling_rate: Option<f64>,
    /// Noise multiplier σ (noise std on the sum / L2 sensitivity).
    #[arg(long)]
    noise_multiplier: f64,
    /// Number of steps (or rounds).
    #[arg(long)]
    steps: u64,
    /// δ in (0, 1).
    #[arg(long)]
    delta: f64,
    /// Accountant.
    #[arg(long, value_enum, default_value_t = Accountant::Rdp)]
    accountant: Accountant,
    /// Neighbouring relation.
    #[arg(long, value_enum, default_value_t = Adjacency::AddRemove)]
    adjacency: Adjacency,
    /// Unit of privacy the guarantee is about.
    #[arg(long, value_enum, default_value_t = PrivacyUnit::Example)]
    unit: PrivacyUnit,
    /// How batches are drawn; fixed-size needs --population and --batch-size.
    #[arg(long, value_enum, default_value_t = Sampling::Poisson)]
    sampling: Sampling,
    /// Dataset or population size (fixed-size sampling).
    #[arg(long)]
    population: Option<u64>,
    /// Batch size (fixed-size sampling).
    #[arg(long)]
    batch_size: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Flags of `privacy calibrate`.
#[derive(clap::Args)]
pub struct CalibrateArgs {
    /// Target ε.
    #[arg(long)]
    target_epsilon: f64,
    /// δ in (0, 1).
    #[arg(long)]
    delta: f64,
    /// Poisson sampling rate q in (0, 1].
    #[arg(long)]
    sampling_rate: f64,
    /// Number of steps (or rounds).
    #[arg(long)]
    steps: u64,
    /// Accountant.
    #[arg(long, value_enum, default_value_t = Accountant::Rdp)]
    accountant: Accountant,
    /// Neighbouring relation.
    #[arg(long, value_enum, default_value_t = Adjacency::AddRemove)]
    adjacency: Adjacency,
    /// Absolute tolerance on σ (the answer is rounded up to it).
    #[arg(long, default_value_t = calibrate::DEFAULT_TOLERANCE)]
    tolerance: f64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Flags of `privacy pate`.
#[derive(clap::Args)]
pub struct PateArgs {
    /// CSV of teacher votes: one query per row, one vote count per class (an optional header
    /// row, blank lines and `#` comments are skipped).
    #[arg(long)]
    votes: PathBuf,
    /// GNMax noise σ on each vote count.
    #[arg(long)]
    sigma: f64,
    /// Confident-GNMax threshold T (needs --sigma1).
    #[arg(long, requires = "sigma1")]
    threshold: Option<f64>,
    /// Noise σ₁ of the threshold step (needs --threshold).
    #[arg(long, requires = "threshold")]
    sigma1: Option<f64>,
    /// δ in (0, 1).
    #[arg(long)]
    delta: f64,
    /// Release the data-dependent ε with smooth sensitivity: smoothness β (default 0.4/λ at the
    /// optimal order λ).
    #[arg(long)]
    ss_beta: Option<f64>,
    /// Release the data-dependent ε with smooth sensitivity: noise multiplier σ_ss.
    #[arg(long)]
    ss_sigma: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Flags of `privacy ledger`.
#[derive(clap::Args)]
pub struct LedgerArgs {
    /// The ledger database.
    #[arg(long, default_value = "privacy-ledger.sqlite")]
    db: PathBuf,
    /// δ for the totals (default: the largest δ recorded in each group).
    #[arg(long)]
    delta: Option<f64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs one `privacy` subcommand.
pub fn run(cmd: PrivacyCommand) -> anyhow::Result<()> {
    match cmd {
        PrivacyCommand::Epsilon(a) => epsilon(a),
        PrivacyCommand::Calibrate(a) => calibrate_cmd(a),
        PrivacyCommand::Pate(a) => pate_cmd(a),
        PrivacyCommand::Ledger(a) => ledger(a),
    }
}

fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

#[derive(Serialize)]
struct EpsilonOutput {
    event: SubsampledGaussian,
    report: EpsilonReport,
}

fn epsilon(a: EpsilonArgs) -> anyhow::Result<()> {
    let event = match a.sampling {
        Sampling::Poisson => {
            let Some(q) = a.sampling_rate else {
                bail!("--sampling-rate is required with --sampling poisson");
            };
            SubsampledGaussian::poisson(q, a.noise_multiplier, a.steps)?
        }
        Sampling::FixedSize => {
            let (Some(n), Some(b)) = (a.population, a.batch_size) else {
                bail!("--sampling fixed-size needs --population and --batch-size");
            };
            SubsampledGaussian::fixed_size(n, b, a.noise_multiplier, a.steps)?
        }
    };
    let report = event
        .epsilon(a.accountant, a.adjacency, a.delta)?
        .with_unit(a.unit);
    if a.json {
        return print_json(&EpsilonOutput { event, report });
    }
    println!("{report}");
    Ok(())
}

#[derive(Serialize)]
struct CalibrateOutput {
    noise_multiplier: f64,
    sampling_rate: f64,
    steps: u64,
    target_epsilon: f64,
    report: EpsilonReport,
}

fn calibrate_cmd(a: CalibrateArgs) -> anyhow::Result<()> {
    let sigma = calibrate::calibrate_noise_multiplier(
        a.accountant,
        a.adjacency,
        a.target_epsilon,
        a.delta,
        a.sampling_rate,
        a.steps,
        a.tolerance,
    )?;
    let report = SubsampledGaussian::poisson(a.sampling_rate, sigma, a.steps)?.epsilon(
        a.accountant,
        a.adjacency,
        a.delta,
    )?;
    if a.json {
        return print_json(&CalibrateOutput {
            noise_multiplier: sigma,
            sampling_rate: a.sampling_rate,
            steps: a.steps,
            target_epsilon: a.target_epsilon,
            report,
        });
    }
    println!("noise multiplier = {sigma}");
    println!("{report}");
    Ok(())
}

/// Reads a votes CSV: one query per row, counts per class.
fn read_votes(path: &Path) -> anyhow::Result<Vec<Vec<f64>>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading votes file {}", path.display()))?;
    let mut rows: Vec<Vec<f64>> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if rows.is_empty() && fields.iter().all(|f| f.parse::<f64>().is_err()) {
            continue; // header
        }
        let mut row = Vec::with_capacity(fields.len());
        for f in &fields {
            let v: f64 = f
                .parse()
                .map_err(|_| pate_row_err(i + 1, format!("{f:?} is not a number")))?;
            row.push(v);
        }
        if let Some(first) = rows.first() {
            if first.len() != row.len() {
                return Err(pate_row_err(
                    i + 1,
                    format!("{} columns, expected {}", row.len(), first.len()),
                )
                .into());
            }
        }
        rows.push(row);
    }
    if rows.is_empty() {
        bail!("votes file {} has no queries", path.display());
    }
    Ok(rows)
}

fn pate_row_err(row: usize, message: String) -> hush_host::accountant::AccountantError {
    hush_host::accountant::AccountantError::MalformedVotes { row, message }
}

#[derive(Serialize)]
struct PateOutput {
    queries: usize,
    sigma: f64,
    threshold: Option<pate::Threshold>,
    delta: f64,
    /// Publishable: does not depend on the votes.
    data_independent: EpsilonReport,
    /// Private: depends on the votes; publish only through the smooth-sensitivity release.
    data_dependent_private: EpsilonReport,
    smooth_sensitivity: Option<SmoothSensitivityOutput>,
}

#[derive(Serialize)]
struct SmoothSensitivityOutput {
    release: pate::SmoothSensitivityRelease,
    /// ε published with GNSS noise drawn from a CSPRNG.
    released_epsilon: f64,
}

fn pate_cmd(a: PateArgs) -> anyhow::Result<()> {
    let votes = read_votes(&a.votes)?;
    let threshold = match (a.threshold, a.sigma1) {
        (Some(t), Some(s1)) => Some(pate::Threshold {
            threshold: t,
            sigma1: s1,
        }),
        _ => None,
    };
    let orders = rdp::default_orders();
    let analysis = match a.ss_sigma {
        None => pate::analyze_gnmax(&votes, a.sigma, threshold, a.delta, &orders, None)?,
        Some(sigma_ss) => pate::analyze_for_release(
            &votes, a.sigma, threshold, None, a.delta, &orders, sigma_ss, a.ss_beta,
        )?,
    };
    let report = |(epsilon, order): (f64, f64)| EpsilonReport {
        epsilon,
        delta: a.delta,
        adjacency: Adjacency::ReplaceOne,
        unit: PrivacyUnit::Example,
        accountant: Accountant::Rdp,
        optimal_order: Some(order),
    };
    let smooth = analysis
        .smooth_sensitivity
        .map(|release| SmoothSensitivityOutput {
            release,
            released_epsilon: ReleasedEpsilon::new(&release, &mut NoiseSource::from_os(), a.delta)
                .released_epsilon,
        });
    let out = PateOutput {
        queries: analysis.queries,
        sigma: a.sigma,
        threshold,
        delta: a.delta,
        data_independent: report(analysis.epsilon_data_independent),
        data_dependent_private: report(analysis.epsilon_data_dependent),
        smooth_sensitivity: smooth,
    };
    if a.json {
        return print_json(&out);
    }
    println!("{} queries, GNMax sigma = {}", out.queries, out.sigma);
    if let Some(t) = threshold {
        println!(
            "Confident-GNMax threshold T = {}, sigma1 = {}",
            t.threshold, t.sigma1
        );
    }
    println!("data-independent (publishable): {}", out.data_independent);
    println!(
        "data-dependent (PRIVATE, publish only via smooth sensitivity): {}",
        out.data_dependent_private
    );
    if let Some(s) = &out.smooth_sensitivity {
        println!(
            "smooth-sensitivity release at order {}: SS = {:e}, noise std = {:e}, release RDP = {:e}, released epsilon = {} at delta = {:e}",
            s.release.order,
            s.release.smooth_sensitivity,
            s.release.noise_std,
            s.release.release_rdp,
            s.released_epsilon,
            a.delta
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct LedgerGroup {
    adjacency: Adjacency,
    unit: PrivacyUnit,
    delta: f64,
    totals: LedgerTotals,
}

#[derive(Serialize)]
struct LedgerOutput {
    db: String,
    releases: Vec<ReleaseRecord>,
    totals: Vec<LedgerGroup>,
}

fn ledger(a: LedgerArgs) -> anyhow::Result<()> {
    if !a.db.exists() {
        bail!("no privacy ledger at {}", a.db.display());
    }
    if let Some(d) = a.delta {
        hush_host::accountant::validate::delta(d)?;
    }
    let store = SqliteLedgerStore::open(&a.db)?;
    let records = store.records()?;
    let mut groups: Vec<LedgerGroup> = Vec::new();
    for adjacency in [Adjacency::AddRemove, Adjacency::ReplaceOne] {
        for unit in [PrivacyUnit::Example, PrivacyUnit::User] {
            let group: Vec<ReleaseRecord> = records
                .iter()
                .filter(|r| r.release.adjacency == adjacency && r.release.unit == unit)
                .cloned()
                .collect();
            if group.is_empty() {
                continue;
            }
            let delta = a.delta.unwrap_or_else(|| {
                group
                    .iter()
                    .map(|r| r.release.delta)
                    .fold(f64::MIN_POSITIVE, f64::max)
            });
            groups.push(LedgerGroup {
                adjacency,
                unit,
                delta,
                totals: totals(&group, adjacency, unit, delta),
            });
        }
    }
    if a.json {
        return print_json(&LedgerOutput {
            db: a.db.display().to_string(),
            releases: records,
            totals: groups,
        });
    }
    println!("{} releases in {}", records.len(), a.db.display());
    for r in &records {
        let e = r.release.event;
        let fmt_eps = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
        let additional = if r.release.additional.is_none() {
            String::new()
        } else {
            format!(
                " additional={}",
                serde_json::to_string(&r.release.additional)?
            )
        };
        println!(
            "#{} t={}ms {} {} q={} sigma={} steps={} unit={} adjacency={} population={} delta={:e}{additional} eps_rdp={} eps_pld={} released={:?}",
            r.id,
            r.recorded_at_ms,
            r.release.mechanism,
            e.sampling,
            e.sampling_rate,
            e.noise_multiplier,
            e.steps,
            r.release.unit,
            r.release.adjacency,
            r.release.population.map_or("-".to_string(), |p| p.to_string()),
            r.release.delta,
            fmt_eps(r.epsilon_rdp),
            fmt_eps(r.epsilon_pld),
            r.release.released
        );
    }
    for g in &groups {
        println!(
            "total over {} releases ({} adjacency, unit = {}):",
            g.totals.releases, g.adjacency, g.unit
        );
        match &g.totals.rdp {
            Some(r) => println!("  {r}"),
            None => println!("  rdp: not applicable to every release"),
        }
        match &g.totals.pld {
            Some(r) => println!("  {r}"),
            None => println!("  pld: not applicable to every release"),
        }
    }
    Ok(())
}
