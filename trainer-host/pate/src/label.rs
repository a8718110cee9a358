//! Labelling public clips: the teachers vote on every clip of the public corpus's train and
//! validation splits (its test split is kept for judging the student), a noisy aggregator
//! turns each vote histogram into a label or a refusal, and the cost is recorded in the
//! privacy ledger **before** the labels file is written (the same order as every release
//! in hush).
//!
//! The ledger holds the data-independent cost as a Gaussian mechanism per query, exact
//! for GNMax (RDP `α/σ²`: noise multiplier `σ/√2`) and Confident-GNMax (threshold step
//! `α/(2σ₁²)` plus answer step, one Gaussian with `1/z² = 1/σ₁² + 2/σ₂²`). LNMax is pure
//! `2/λ`-DP per query; its RDP `min(ε²α/2, ε)` is bounded by a Gaussian of noise
//! multiplier `λ/2`, a bound that holds for RDP only, so LNMax needs a ledger accounted by
//! RDP. Thresholded aggregators (Confident- and Interactive-GNMax) pay the threshold step
//! on every query and GNMax only on the queries that passed it
//! ([`hush_privacy::accountant::pate::analyze_thresholded_run`]); as the count that passed is
//! known only after the noise is drawn, the budget is checked up front against every
//! query passing, and the run's actual cost is what is recorded.
//!
//! # What is published, and what stays private
//!
//! The data-dependent ε (and everything it is computed from: the per-order data-dependent
//! RDP, the smooth sensitivity `SS_β` and the noise std `SS_β·σ_ss`) is a function of the
//! votes, hence of the private data: it is never written to the labels file, the ledger or
//! stdout. Papernot et al. 2018 ("Scalable private learning with PATE", §4 and App. C)
//! publish it only through the GNSS mechanism: `R(λ) + SS_β·σ_ss·Z` plus the mechanism's own
//! RDP `ρ` (their Thm 23). Here that happens only with [`LabelConfig::smooth`], and the
//! labels file then carries [`ReleasedEpsilon`]: the noised value and the public parameters
//! of its release, nothing else. What stays private is in [`LabelReport::analysis`], in
//! memory, for tests and experiments that measure it.
//!
//! # What the ledger's total covers
//!
//! The ledger's record is the labels' **data-independent** cost, which holds for every
//! data set and therefore covers the labels whatever the votes. Releasing the noised
//! data-dependent ε is a second mechanism on the same data; its cost `ρ(α)` is RDP at
//! orders `1 < α < 1/(2β)` only (unbounded above: Thm 23 of the paper). The same record
//! carries it as an [`AdditionalCost`] (`ρ` at every analysed order in that range,
//! [`smooth_sensitivity_release_cost`]), so the ledger's composed total — and every later
//! budget check — includes it; a ledger accounted by PLD refuses such a release, as PLD
//! cannot compose it. The budget is checked with it up front when `β` is given; the default
//! `β = 0.4/λ` depends on the data-dependent optimal order `λ`, so it then joins the final
//! check, which still comes before anything is written. The published value
//! ([`ReleasedEpsilon::released_epsilon`]) adds `ρ(λ)` at the release's one order, as
//! Papernot et al. do. (The order `λ` is the data-dependent optimum, as in the paper's
//! code; publishing it reveals which of the analysed orders was best.)

use std::path::{Path, PathBuf};

use hush_device::dataset::KwsLabels;
use hush_device::infer::{card_features, clip_samples};
use hush_models::dp::{GaussianNoise, NoiseSource};
use hush_models::package::{ModelCard, MODEL_JSON};
use serde::{Deserialize, Serialize};

use super::aggregate::{Answer, SmoothRelease};
use super::{package_probabilities, teacher_votes, Aggregator, PateError, PARTITION_JSON};
use hush_privacy::accountant::pate::{
    smooth_sensitivity_release_cost, PateAnalysis, SmoothSensitivityParams,
    SmoothSensitivityRelease, ThresholdCheck,
};
use hush_privacy::accountant::rdp::default_orders;
use hush_privacy::accountant::{
    Accountant, AdditionalCost, Adjacency, PrivacyUnit, SubsampledGaussian,
};
use hush_privacy::ledger::sqlite::SqliteLedgerStore;
use hush_privacy::ledger::{Budget, Ledger, Mechanism, Release};
use hush_train::data::read_kws;

/// Everything `hush-host pate label` decides.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelConfig {
    /// The teachers' directory (`train-teachers --out`).
    pub teachers: PathBuf,
    /// The public corpus (Speech Commands layout; its labels are not read for labelling).
    pub public: PathBuf,
    /// The aggregator and its noise.
    pub aggregator: Aggregator,
    /// δ of the reported ε and of the ledger budget.
    pub delta: f64,
    /// The privacy ledger (SQLite; created if missing).
    pub ledger: PathBuf,
    /// The ledger's total ε budget.
    pub budget_epsilon: f64,
    /// The ledger's accountant.
    pub accountant: Accountant,
    /// Seeded noise (tests and reproducible experiments only); `None`: OS randomness.
    pub seed: Option<u64>,
    /// The current student (a package over the teachers' classes), asked by
    /// `interactive-gnmax`; refused with the other aggregators.
    pub student: Option<PathBuf>,
    /// Release the data-dependent ε with smooth sensitivity.
    pub smooth: Option<SmoothRelease>,
}

/// One public clip's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublicLabel {
    /// The clip, relative to the public corpus.
    pub file: PathBuf,
    /// The aggregated label, or `None` when the aggregator refused the query.
    pub label: Option<String>,
    /// Interactive only: the label is the student's own (the teachers did not disagree).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_student: bool,
}

/// The data-dependent ε released with smooth sensitivity: the noised value and the public
/// parameters of its release, nothing computed from the votes without noise (see the
/// module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReleasedEpsilon {
    /// Order λ of the release.
    pub order: f64,
    /// β and σ_ss of the GNSS mechanism.
    pub params: SmoothSensitivityParams,
    /// RDP `ρ` of the GNSS release itself at λ (a function of β, σ_ss and λ only).
    pub release_rdp: f64,
    /// `R(λ) + SS·σ_ss·Z + ρ + ln(1/δ)/(λ−1)`, one CSPRNG draw `Z`: the published ε of the
    /// labels and this release together.
    pub released_epsilon: f64,
}

impl ReleasedEpsilon {
    /// The publishable part of `release`, with its one standard-normal draw from `noise`.
    pub fn new(release: &SmoothSensitivityRelease, noise: &mut NoiseSource, delta: f64) -> Self {
        let z = GaussianNoise::standard().draw(noise);
        Self {
            order: release.order,
            params: release.params,
            release_rdp: release.release_rdp,
            released_epsilon: release.epsilon_with_noise(z, delta),
        }
    }
}

/// The labels file (`--out`, JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelFile {
    /// The teachers' directory.
    pub teachers: PathBuf,
    /// Number of teachers.
    pub num_teachers: usize,
    /// The public corpus.
    pub public: PathBuf,
    /// The aggregator.
    pub aggregator: Aggregator,
    /// Class names.
    pub classes: Vec<String>,
    /// δ of the ε values.
    pub delta: f64,
    /// Data-independent ε of the whole labelling run (publishable).
    pub epsilon_data_independent: f64,
    /// The data-dependent ε released with smooth sensitivity, when asked for (the raw
    /// data-dependent ε is private and never written).
    #[serde(default)]
    pub smooth_sensitivity: Option<ReleasedEpsilon>,
    /// Queries the teachers answered.
    #[serde(default)]
    pub answered: usize,
    /// Queries labelled by the student (interactive).
    #[serde(default)]
    pub kept_from_student: usize,
    /// Queries refused.
    #[serde(default)]
    pub refused: usize,
    /// The ledger file and its record of this run.
    pub ledger: String,
    /// The ledger record's id.
    pub ledger_record: i64,
    /// Per clip.
    pub labels: Vec<PublicLabel>,
}

impl LabelFile {
    /// Reads a labels file, naming it in errors.
    pub fn read(path: &Path) -> Result<Self, PateError> {
        super::read_json_file(path, "a PATE labels file")
    }
}

/// The finished teachers under `dir` (`teacher-NNN/` with a `model.json`), in order.
pub fn finished_teachers(dir: &Path) -> Result<Vec<PathBuf>, PateError> {
    if !dir.join(PARTITION_JSON).is_file() {
        return Err(PateError::File {
            path: dir.to_path_buf(),
            reason: format!("no {PARTITION_JSON}: not a teachers directory (train-teachers --out)"),
        });
    }
    let entries = std::fs::read_dir(dir).map_err(|source| PateError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("teacher-"))
                && p.join(MODEL_JSON).is_file()
        })
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        return Err(PateError::File {
            path: dir.to_path_buf(),
            reason: "no finished teacher in it".into(),
        });
    }
    Ok(dirs)
}

/// The ledger's Gaussian stand-in for `queries` queries of `aggregator`, `answered` of
/// which passed a threshold step (see the module docs), or an error when the ledger's
/// accountant cannot use it. Gaussian RDP and PLD are both linear in `1/z²`, so `queries`
/// steps of one `z` with `1/z² = 1/σ₁² + 2·answered/(queries·σ₂²)` compose exactly as
/// `queries` threshold steps and `answered` GNMax steps.
fn ledger_event(
    aggregator: &Aggregator,
    queries: usize,
    answered: usize,
    accountant: Accountant,
) -> Result<SubsampledGaussian, PateError> {
    let z = match *aggregator {
        Aggregator::GnMax { sigma } => sigma / 2f64.sqrt(),
        Aggregator::ConfidentGnMax { sigma1, sigma2, .. }
        | Aggregator::InteractiveGnMax { sigma1, sigma2, .. } => {
            let share = answered as f64 / queries.max(1) as f64;
            (1.0 / (sigma1 * sigma1) + 2.0 * share / (sigma2 * sigma2))
                .sqrt()
                .recip()
        }
        Aggregator::LnMax { lambda } => {
            if accountant != Accountant::Rdp {
                return Err(PateError::Option {
                    option: "--accountant",
                    reason: "LNMax's ledger entry is an RDP bound; use --accountant rdp".into(),
                });
            }
            lambda / 2.0
        }
    };
    SubsampledGaussian::poisson(1.0, z, queries as u64).map_err(|e| PateError::Option {
        option: "--sigma",
        reason: e.to_string(),
    })
}

/// What a labelling run produced.
#[derive(Debug, Clone)]
pub struct LabelReport {
    /// The labels file's content.
    pub file: LabelFile,
    /// The accountant's analysis of the votes (its data-dependent parts are private: in
    /// memory only, never written).
    pub analysis: PateAnalysis,
    /// The votes, per query (for experiments and tests; private).
    pub votes: Vec<Vec<f64>>,
    /// The threshold step's outcome per query (thresholded aggregators; private).
    pub checks: Option<Vec<ThresholdCheck>>,
}

/// Labels the public corpus with the teachers' noisy votes and writes the labels file to
/// `out` after recording the cost in the ledger. `progress` gets `(teacher, teachers)`.
pub fn label_public(
    cfg: &LabelConfig,
    out: &Path,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<LabelReport, PateError> {
    cfg.aggregator.validate()?;
    let teachers = finished_teachers(&cfg.teachers)?;
    let first = &teachers[0];
    let card = ModelCard::read(first)?;
    let features = card_features(&card, first)?;
    let io = card.arch.io();
    let keywords: Vec<String> = card
        .labels
        .iter()
        .filter(|l| !l.starts_with('_'))
        .cloned()
        .collect();
    let labels = KwsLabels::new(&keywords);
    let clip_len = clip_samples(&features, io.frames);
    let data = read_kws(&cfg.public, &labels, features.frame.sample_rate, clip_len)?;
    let queries: Vec<_> = data.train.into_iter().chain(data.validation).collect();
    if queries.is_empty() {
        return Err(PateError::File {
            path: cfg.public.clone(),
            reason: "no clip in its train or validation split to label".into(),
        });
    }
    let (votes, classes) = teacher_votes(&teachers, &queries, progress)?;
    let student = match (&cfg.student, cfg.aggregator) {
        (None, _) => None,
        (Some(dir), Aggregator::InteractiveGnMax { .. }) => {
            let (probs, student_classes) = package_probabilities(dir, &queries)?;
            if student_classes != classes {
                return Err(PateError::File {
                    path: dir.join(MODEL_JSON),
                    reason: format!(
                        "the student's classes {student_classes:?} differ from the teachers' \
                         {classes:?}"
                    ),
                });
            }
            Some(probs)
        }
        (Some(_), other) => {
            return Err(PateError::Option {
                option: "--student",
                reason: format!(
                    "only interactive-gnmax asks a student; {} does not",
                    other.name()
                ),
            })
        }
    };

    let (mut ledger, speakers) = open_ledger(
        &cfg.teachers,
        &cfg.ledger,
        cfg.budget_epsilon,
        cfg.delta,
        cfg.accountant,
    )?;
    let privacy = ledger_error;
    let release_cost = |params: SmoothSensitivityParams| {
        smooth_sensitivity_release_cost(params, &default_orders()).map_err(|e| PateError::Option {
            option: "--ss-beta",
            reason: e.to_string(),
        })
    };
    let release =
        |answered: usize, note: &str, additional: AdditionalCost| -> Result<Release, PateError> {
            Ok(Release {
                mechanism: Mechanism::Pate,
                event: ledger_event(&cfg.aggregator, votes.len(), answered, cfg.accountant)?,
                unit: PrivacyUnit::User,
                adjacency: Adjacency::AddRemove,
                population: Some(speakers as u64),
                delta: cfg.delta,
                released: format!(
                    "PATE {} labels of {} public clips ({}){note}",
                    cfg.aggregator.name(),
                    votes.len(),
                    out.display()
                ),
                additional,
            })
        };
    // Up front: refused unless the budget holds even if every query passes (and, with a
    // given β, with the smooth-sensitivity release's cost).
    let planned_release_cost = match cfg.smooth {
        Some(SmoothRelease {
            sigma_ss,
            beta: Some(beta),
        }) => release_cost(SmoothSensitivityParams { beta, sigma_ss })?,
        _ => AdditionalCost::none(),
    };
    ledger
        .authorize(&release(votes.len(), "", planned_release_cost)?)
        .map_err(privacy)?;

    let mut noise = match cfg.seed {
        Some(s) => NoiseSource::from_seed(s),
        None => NoiseSource::from_os(),
    };
    let (answers, checks) = cfg
        .aggregator
        .answer_all(&votes, student.as_deref(), &mut noise)?;
    let answers: Vec<_> = queries.iter().zip(answers).collect();
    let count = |f: fn(&Answer) -> bool| answers.iter().filter(|(_, a)| f(a)).count();
    let answered = count(|a| matches!(a, Answer::Teachers(_)));
    let kept_from_student = count(|a| matches!(a, Answer::Student(_)));
    let analysis = cfg
        .aggregator
        .analyze(
            &votes,
            checks.as_deref(),
            cfg.delta,
            &default_orders(),
            cfg.smooth,
        )
        .map_err(|e| PateError::Option {
            option: if cfg.smooth.is_some() {
                "--ss-sigma"
            } else {
                "--delta"
            },
            reason: e.to_string(),
        })?;
    let smooth_sensitivity = analysis
        .smooth_sensitivity
        .map(|release| ReleasedEpsilon::new(&release, &mut noise, cfg.delta));
    let mut note = format!(
        ": {answered} answered by the teachers, {kept_from_student} kept from the student, \
         {} refused; this entry is the data-independent bound",
        answers.len() - answered - kept_from_student
    );
    if let Some(s) = &smooth_sensitivity {
        note.push_str(&format!(
            "; data-dependent ε released with smooth sensitivity (GNSS at order {}, β = {}, \
             σ_ss = {}) = {:.4} at δ = {:e}, which includes that release's own RDP ρ = {:.4} \
             at order {}; ρ at every order below 1/(2β) is this entry's additional cost",
            s.order,
            s.params.beta,
            s.params.sigma_ss,
            s.released_epsilon,
            cfg.delta,
            s.release_rdp,
            s.order
        ));
    }
    let spent_on_release = match &smooth_sensitivity {
        Some(s) => release_cost(s.params)?,
        None => AdditionalCost::none(),
    };
    let actual = release(answered, &note, spent_on_release)?;
    // Recorded before the labels file exists (`Ledger::complete`).
    ledger.complete(
        &actual,
        |store, sealed| Ok(sealed.append_to(store)?),
        |record| {
            let labels: Vec<PublicLabel> = answers
                .iter()
                .map(|(clip, a)| PublicLabel {
                    file: clip
                        .path
                        .strip_prefix(&cfg.public)
                        .unwrap_or(&clip.path)
                        .to_path_buf(),
                    label: a.class().and_then(|c| classes.get(c).cloned()),
                    by_student: matches!(a, Answer::Student(_)),
                })
                .collect();
            let file = LabelFile {
                teachers: cfg.teachers.clone(),
                num_teachers: teachers.len(),
                public: cfg.public.clone(),
                aggregator: cfg.aggregator,
                classes,
                delta: cfg.delta,
                epsilon_data_independent: analysis.epsilon_data_independent.0,
                smooth_sensitivity,
                answered,
                kept_from_student,
                refused: answers.len() - answered - kept_from_student,
                ledger: cfg.ledger.display().to_string(),
                ledger_record: record.id,
                labels,
            };
            write_atomically(out, &file)?;
            Ok(LabelReport {
                file,
                analysis,
                votes,
                checks,
            })
        },
    )
}

/// Writes `file` as JSON to a scratch file beside `out`, then renames it into place.
pub(crate) fn write_atomically<T: Serialize>(out: &Path, file: &T) -> Result<(), PateError> {
    let bad = |reason: String| PateError::File {
        path: out.to_path_buf(),
        reason,
    };
    let json = serde_json::to_string_pretty(file).map_err(|e| bad(e.to_string()))?;
    let scratch = out.with_extension("json.partial");
    std::fs::write(&scratch, json).map_err(|e| bad(e.to_string()))?;
    std::fs::rename(&scratch, out).map_err(|e| bad(e.to_string()))
}

/// A ledger error as the `--ledger` option's error.
pub(crate) fn ledger_error(e: hush_privacy::ledger::LedgerError) -> PateError {
    PateError::from(e)
}

/// The ledger of a labelling run (user level: a teacher's unit is its speakers, add/remove
/// adjacency) under its budget, and the number of private speakers in the teachers'
/// partition (the ledger's population).
pub(crate) fn open_ledger(
    teachers: &Path,
    ledger: &Path,
    budget_epsilon: f64,
    delta: f64,
    accountant: Accountant,
) -> Result<(Ledger<SqliteLedgerStore>, usize), PateError> {
    let partition = super::Partition::read(&teachers.join(PARTITION_JSON))?;
    let speakers = partition.teachers.iter().map(Vec::len).sum();
    let budget = Budget::new(
        budget_epsilon,
        delta,
        accountant,
        Adjacency::AddRemove,
        PrivacyUnit::User,
    )
    .map_err(|e| PateError::Option {
        option: "--budget-epsilon",
        reason: e.to_string(),
    })?;
    let store = SqliteLedgerStore::open(ledger).map_err(ledger_error)?;
    Ok((Ledger::new(store, budget), speakers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hush_privacy::accountant::pate::rdp_data_independent_gaussian;

    #[test]
    fn the_ledger_gaussian_has_the_gnmax_rdp() {
        let orders = default_orders();
        let ev = ledger_event(&Aggregator::GnMax { sigma: 40.0 }, 5, 5, Accountant::Rdp).unwrap();
        let want: Vec<f64> = rdp_data_independent_gaussian(40.0, &orders)
            .iter()
            .map(|r| 5.0 * r)
            .collect();
        let got = ev.rdp(Adjacency::AddRemove, &orders).unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!((a / b - 1.0).abs() < 1e-9, "{a} {b}");
        }
        let e = ledger_event(&Aggregator::LnMax { lambda: 10.0 }, 5, 5, Accountant::Pld);
        assert!(e.unwrap_err().to_string().contains("--accountant"));
    }

    #[test]
    fn the_ledger_gaussian_of_a_thresholded_run_is_the_accountants_data_independent_cost() {
        let orders = default_orders();
        let agg = Aggregator::InteractiveGnMax {
            threshold: 6.0,
            sigma1: 3.0,
            sigma2: 2.0,
            student_confidence: 0.5,
        };
        let votes = vec![
            vec![9.0, 1.0],
            vec![5.0, 5.0],
            vec![2.0, 8.0],
            vec![7.0, 3.0],
        ];
        let checks = [true, false, true, false].map(|passed| ThresholdCheck {
            statistic: 4.0,
            passed,
        });
        let a = agg
            .analyze(&votes, Some(&checks), 1e-5, &orders, None)
            .unwrap();
        let ev = ledger_event(&agg, 4, 2, Accountant::Rdp).unwrap();
        let got = ev.rdp(Adjacency::AddRemove, &orders).unwrap();
        for (g, w) in got.iter().zip(&a.rdp_data_independent) {
            assert!((g / w - 1.0).abs() < 1e-9, "{g} {w}");
        }
    }
}
