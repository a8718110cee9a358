//! `hush-host experiment pate`: keyword-spotting accuracy against ε for PATE beside
//! DP-SGD and a non-private model, on one speaker-disjoint split of one corpus.
//!
//! The corpus's speakers are split once (Speech Commands' hash decides validation and
//! test speakers; a seeded `public_fraction` of the training speakers is public):
//!
//! - `private/`: the private training speakers plus the validation and test speakers —
//!   the non-private and DP-SGD runs train on its training split (flat clipping, example
//!   level, [`hush_train::train_kws_dp`]);
//! - `teachers-data/`: the private training speakers only — the PATE teachers
//!   ([`hush_pate::train_teachers`], speaker-disjoint parts);
//! - `public/`: the public training speakers plus the validation and test speakers — their
//!   train and validation clips are labelled by each aggregator setting
//!   ([`hush_pate::label_public`], seeded noise, a ledger per setting) and a student
//!   learns from the answered ones ([`hush_pate::train_student`]).
//!
//! Every model is judged on the same test speakers, never seen by any of them. PATE's ε is
//! the labelling's data-independent bound at the **speaker** level (one speaker trains one
//! teacher); DP-SGD's is at the **example** level (a speaker with k clips has about k
//! times that ε by group privacy), so equal ε favours DP-SGD in what it protects.
//!
//! Output, rewritten after every run: `results.json` ([`PateResults`]), `results.md`,
//! `accuracy_vs_epsilon.png`, and every model under `runs/`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hush_device::dataset::KwsLabels;
use hush_device::dataset::{read_corpus, Split, Target};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::dp_sgd::{prepare_corpus, CorpusInfo, CorpusSpec};
use super::{
    fmt_opt, fresh_runs_dir, io_err, series_by_method, write_results_and_plot, ExperimentError,
};
use crate::recipes::small_kws_config;
use hush_pate::{label_public, train_student, train_teachers, Aggregator, LabelConfig};
use hush_plot::Series;
use hush_privacy::accountant::Accountant;
use hush_train::{train_kws, train_kws_dp, DpConfig, KwsTrainConfig, TrainError};

/// Everything the experiment decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PateExperimentConfig {
    /// Keyword corpus (Speech Commands layout); generated from `corpus` if missing or empty.
    pub data: PathBuf,
    /// How to generate the corpus.
    pub corpus: CorpusSpec,
    /// Output folder.
    pub out: PathBuf,
    /// Fraction of the training speakers that are public (unlabelled, for the student).
    pub public_fraction: f64,
    /// Number of teachers.
    pub teachers: usize,
    /// LNMax settings: Laplace scales λ.
    pub lnmax: Vec<f64>,
    /// GNMax settings: noise σ.
    pub gnmax: Vec<f64>,
    /// Confident-GNMax settings: (threshold T, σ₁, σ₂).
    pub confident: Vec<(f64, f64, f64)>,
    /// DP-SGD target ε values.
    pub dp_epsilons: Vec<f64>,
    /// δ of every private run.
    pub delta: f64,
    /// Epochs of every model (teachers, students, non-private, DP-SGD).
    pub epochs: usize,
    /// Expected batch of the DP-SGD runs.
    pub dp_batch_size: usize,
    /// Seed of the speaker split, initialisation, shuffling and noise.
    pub seed: u64,
}

impl PateExperimentConfig {
    /// The full experiment: a 120-speaker corpus (1 take per keyword, 2 unknown words),
    /// a quarter of the training speakers public, 12 teachers; per aggregator one setting
    /// of little noise and one whose ε is near DP-SGD's (LNMax λ ∈ {2, 40}, GNMax
    /// σ ∈ {2, 24}, Confident-GNMax (T, σ₁, σ₂) ∈ {(9, 4, 2), (9, 30, 24)}); DP-SGD
    /// ε ∈ {2, 8}; δ = 1e-5, 15 epochs.
    pub fn new(data: &Path, out: &Path) -> Self {
        Self {
            data: data.to_path_buf(),
            corpus: CorpusSpec {
                speakers: 120,
                takes: 1,
                unknown_words: 2,
                seed: 2028,
            },
            out: out.to_path_buf(),
            public_fraction: 0.25,
            teachers: 12,
            lnmax: vec![2.0, 40.0],
            gnmax: vec![2.0, 24.0],
            confident: vec![(9.0, 4.0, 2.0), (9.0, 30.0, 24.0)],
            dp_epsilons: vec![2.0, 8.0],
            delta: 1e-5,
            epochs: 15,
            dp_batch_size: 64,
            seed: 0,
        }
    }

    /// A pipeline check in minutes: 24 speakers, 3 teachers, one setting per method,
    /// 2 epochs (its numbers mean nothing).
    pub fn quick(data: &Path, out: &Path) -> Self {
        Self {
            corpus: CorpusSpec {
                speakers: 24,
                takes: 1,
                unknown_words: 1,
                seed: 2028,
            },
            teachers: 3,
            public_fraction: 0.3,
            lnmax: vec![2.0],
            gnmax: vec![1.0],
            confident: vec![(2.0, 1.0, 1.0)],
            dp_epsilons: vec![8.0],
            delta: 1e-4,
            epochs: 2,
            dp_batch_size: 32,
            ..Self::new(data, out)
        }
    }

    fn check(&self) -> Result<(), ExperimentError> {
        let bad = |what: String| Err(ExperimentError::Config(what));
        if !(self.public_fraction > 0.0 && self.public_fraction < 1.0) {
            return bad(format!(
                "--public-fraction: {} is not in (0, 1)",
                self.public_fraction
            ));
        }
        if self.teachers == 0 {
            return bad("--teachers: at least 1".into());
        }
        if self.epochs == 0 {
            return bad("--epochs: at least 1".into());
        }
        Ok(())
    }
}

/// One run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PateRunResult {
    /// `non-private`, `DP-SGD`, `PATE-LNMax`, `PATE-GNMax`, `PATE-Confident-GNMax`.
    pub method: String,
    /// The method's parameters, in words.
    pub setting: String,
    /// ε (`None`: non-private); DP-SGD: by RDP, example level; PATE: data-independent,
    /// speaker level; both add/remove adjacency at `delta`.
    pub epsilon: Option<f64>,
    /// PATE: public clips answered (by the teachers) out of `queries`.
    pub answered: Option<usize>,
    /// PATE: public clips queried.
    pub queries: Option<usize>,
    /// PATE: fraction of the answered labels that are right.
    pub label_accuracy: Option<f64>,
    /// Test accuracy on the held-out speakers (12 classes).
    pub test_accuracy: Option<f64>,
    /// Why the run was refused, if it was.
    pub refused: Option<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PateResults {
    /// The command line.
    pub command: String,
    /// The configuration.
    pub config: PateExperimentConfig,
    /// The corpus.
    pub corpus: CorpusInfo,
    /// Speakers: private training, public training, validation, test.
    pub speakers: [usize; 4],
    /// Test clips (the held-out speakers').
    pub test_clips: usize,
    /// Every run so far.
    pub runs: Vec<PateRunResult>,
}

/// Links (or, across file systems, copies) every clip whose speaker `keep` accepts, and
/// the background noises, from the corpus `src` into `dst`.
fn sub_corpus(
    src: &Path,
    dst: &Path,
    keep: &dyn Fn(&str, Split) -> bool,
) -> Result<(), ExperimentError> {
    let (_, examples) = read_corpus(src)?;
    let place = |from: &Path, to: &Path| -> Result<(), ExperimentError> {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        if std::fs::hard_link(from, to).is_err() {
            std::fs::copy(from, to).map_err(io_err(to))?;
        }
        Ok(())
    };
    for ex in examples.iter().filter(|e| keep(&e.speaker, e.split)) {
        let rel = ex.path.strip_prefix(src).unwrap_or(&ex.path);
        place(&ex.path, &dst.join(rel))?;
    }
    let noise = src.join("_background_noise_");
    if noise.is_dir() {
        for f in std::fs::read_dir(&noise).map_err(io_err(&noise))? {
            let f = f.map_err(io_err(&noise))?.path();
            if let Some(name) = f.file_name() {
                place(&f, &dst.join("_background_noise_").join(name))?;
            }
        }
    }
    Ok(())
}

fn base_config(cfg: &PateExperimentConfig, data: &Path) -> KwsTrainConfig {
    let mut train = small_kws_config(data, cfg.epochs, cfg.seed);
    train.patience = cfg.epochs;
    train
}

/// Runs the experiment; `log` gets progress lines. Writes the results after every run.
pub fn run_pate_experiment(
    cfg: &PateExperimentConfig,
    command: &str,
    log: &mut dyn FnMut(&str),
) -> Result<PateResults, ExperimentError> {
    cfg.check()?;
    let runs = fresh_runs_dir(&cfg.out)?;
    let corpus = prepare_corpus(&cfg.data, &cfg.corpus, log)?;

    // The speaker split.
    let (_, examples) = read_corpus(&cfg.data)?;
    let speakers_of = |split: Split| -> BTreeSet<String> {
        examples
            .iter()
            .filter(|e| e.split == split)
            .map(|e| e.speaker.clone())
            .collect()
    };
    let mut train_speakers: Vec<String> = speakers_of(Split::Train).into_iter().collect();
    train_speakers.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed));
    let n_public = ((train_speakers.len() as f64 * cfg.public_fraction).round() as usize)
        .clamp(1, train_speakers.len().saturating_sub(cfg.teachers).max(1));
    let public_train: BTreeSet<String> = train_speakers[..n_public].iter().cloned().collect();
    let split_dir = cfg.out.join("split");
    let (private, teachers_data, public) = (
        split_dir.join("private"),
        split_dir.join("teachers-data"),
        split_dir.join("public"),
    );
    for dir in [&private, &teachers_data, &public] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io_err(dir))?;
        }
    }
    let is_public_train = |s: &str, split: Split| split == Split::Train && public_train.contains(s);
    sub_corpus(&cfg.data, &private, &|s, split| !is_public_train(s, split))?;
    sub_corpus(&cfg.data, &teachers_data, &|s, split| {
        split == Split::Train && !public_train.contains(s)
    })?;
    sub_corpus(&cfg.data, &public, &|s, split| {
        split != Split::Train || public_train.contains(s)
    })?;
    let test_clips = examples.iter().filter(|e| e.split == Split::Test).count();
    let mut results = PateResults {
        command: command.to_string(),
        config: cfg.clone(),
        corpus,
        speakers: [
            train_speakers.len() - n_public,
            n_public,
            speakers_of(Split::Validation).len(),
            speakers_of(Split::Test).len(),
        ],
        test_clips,
        runs: Vec::new(),
    };
    log(&format!(
        "speakers: {} private, {} public, {} validation, {} test",
        results.speakers[0], results.speakers[1], results.speakers[2], results.speakers[3]
    ));
    let blank = |method: &str, setting: String| PateRunResult {
        method: method.into(),
        setting,
        epsilon: None,
        answered: None,
        queries: None,
        label_accuracy: None,
        test_accuracy: None,
        refused: None,
        seconds: 0.0,
    };
    let test_accuracy = |card: &hush_models::package::ModelCard| {
        card.metrics
            .as_ref()
            .and_then(|m| m.splits.get("test"))
            .map(|s| s.accuracy)
    };
    let train_err = |run: &str| {
        let run = run.to_string();
        move |source| ExperimentError::Train { run, source }
    };

    // Non-private, on the private speakers.
    log("non-private");
    let start = Instant::now();
    let report = train_kws(
        &base_config(cfg, &private),
        &runs.join("non-private"),
        command,
        &mut |_| {},
    )
    .map_err(train_err("non-private"))?;
    results.runs.push(PateRunResult {
        test_accuracy: test_accuracy(&report.card),
        seconds: start.elapsed().as_secs_f64(),
        ..blank("non-private", "all private labels".into())
    });
    log_run(log, &results);
    write_results(&cfg.out, &results)?;

    // DP-SGD, flat clipping, on the same speakers.
    for &eps in &cfg.dp_epsilons {
        let setting = format!(
            "target ε = {eps}, C = 1, expected batch {}",
            cfg.dp_batch_size
        );
        log(&format!("DP-SGD, {setting}"));
        let dir = runs.join(format!("dp-sgd-eps{eps}"));
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut train = base_config(cfg, &private);
        train.batch_size = cfg.dp_batch_size;
        let mut dp = DpConfig::new(eps, cfg.delta, 1.0);
        dp.ledger = dir.join("ledger.sqlite");
        dp.reproducible = true;
        let start = Instant::now();
        let run = match train_kws_dp(&train, &dp, &dir, command, &mut |_| {}) {
            Ok(r) => PateRunResult {
                epsilon: Some(r.privacy.epsilon_rdp.epsilon),
                test_accuracy: test_accuracy(&r.card),
                ..blank("DP-SGD", setting)
            },
            Err(e @ TrainError::Option { .. }) => PateRunResult {
                refused: Some(e.to_string()),
                ..blank("DP-SGD", setting)
            },
            Err(source) => {
                return Err(ExperimentError::Train {
                    run: setting,
                    source,
                })
            }
        };
        results.runs.push(PateRunResult {
            seconds: start.elapsed().as_secs_f64(),
            ..run
        });
        log_run(log, &results);
        write_results(&cfg.out, &results)?;
    }

    // PATE: one ensemble, every aggregator setting.
    log(&format!("training {} teachers", cfg.teachers));
    let teachers = runs.join("teachers");
    let start = Instant::now();
    train_teachers(
        &base_config(cfg, &teachers_data),
        cfg.teachers,
        cfg.seed,
        &teachers,
        &mut |t, n, _| log(&format!("  teacher {}/{n}", t + 1)),
    )?;
    let teacher_seconds = start.elapsed().as_secs_f64();
    let truth = public_truth(&public, &base_config(cfg, &public).keywords)?;
    let mut settings: Vec<(&str, Aggregator)> = Vec::new();
    settings.extend(
        cfg.lnmax
            .iter()
            .map(|&lambda| ("PATE-LNMax", Aggregator::LnMax { lambda })),
    );
    settings.extend(
        cfg.gnmax
            .iter()
            .map(|&sigma| ("PATE-GNMax", Aggregator::GnMax { sigma })),
    );
    settings.extend(cfg.confident.iter().map(|&(threshold, sigma1, sigma2)| {
        (
            "PATE-Confident-GNMax",
            Aggregator::ConfidentGnMax {
                threshold,
                sigma1,
                sigma2,
            },
        )
    }));
    for (k, (method, aggregator)) in settings.into_iter().enumerate() {
        let setting = describe(&aggregator);
        log(&format!("{method}, {setting}"));
        let dir = runs.join(format!("pate-{k}-{}", aggregator.name()));
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let start = Instant::now();
        let label_cfg = LabelConfig {
            teachers: teachers.clone(),
            public: public.clone(),
            aggregator,
            delta: cfg.delta,
            ledger: dir.join("ledger.sqlite"),
            budget_epsilon: 1e12,
            accountant: Accountant::Rdp,
            seed: Some(cfg.seed.wrapping_add(k as u64)),
            student: None,
            smooth: None,
        };
        let labels = label_public(&label_cfg, &dir.join("labels.json"), &mut |_, _| {})?;
        let f = &labels.file;
        let answered: Vec<_> = f.labels.iter().filter(|l| l.label.is_some()).collect();
        let right = answered
            .iter()
            .filter(|l| truth.get(&l.file).map(String::as_str) == l.label.as_deref())
            .count();
        let mut run = PateRunResult {
            epsilon: Some(f.epsilon_data_independent),
            answered: Some(f.answered),
            queries: Some(f.labels.len()),
            label_accuracy: (!answered.is_empty()).then(|| right as f64 / answered.len() as f64),
            ..blank(method, setting)
        };
        match train_student(
            &base_config(cfg, &public),
            f,
            &dir.join("student"),
            command,
            &mut |_| {},
        ) {
            Ok(r) => run.test_accuracy = test_accuracy(&r.card),
            Err(e) => run.refused = Some(format!("student: {e}")),
        }
        run.seconds = start.elapsed().as_secs_f64();
        results.runs.push(run);
        log_run(log, &results);
        write_results(&cfg.out, &results)?;
    }
    log(&format!("teachers took {teacher_seconds:.0} s"));
    Ok(results)
}

/// The class name of every labelled public clip, relative to `public`.
fn public_truth(
    public: &Path,
    keywords: &[String],
) -> Result<std::collections::HashMap<PathBuf, String>, ExperimentError> {
    let classes = KwsLabels::new(keywords);
    let (_, examples) = read_corpus(public)?;
    Ok(examples
        .into_iter()
        .filter_map(|e| match e.target {
            Target::Label(w) => Some((
                e.path.strip_prefix(public).unwrap_or(&e.path).to_path_buf(),
                classes.classes[classes.class_of(&w)].clone(),
            )),
            _ => None,
        })
        .collect())
}

/// The aggregator's parameters in words.
fn describe(a: &Aggregator) -> String {
    match *a {
        Aggregator::LnMax { lambda } => format!("λ = {lambda}"),
        Aggregator::GnMax { sigma } => format!("σ = {sigma}"),
        Aggregator::ConfidentGnMax {
            threshold,
            sigma1,
            sigma2,
        }
        | Aggregator::InteractiveGnMax {
            threshold,
            sigma1,
            sigma2,
            ..
        } => format!("T = {threshold}, σ₁ = {sigma1}, σ₂ = {sigma2}"),
    }
}

fn log_run(log: &mut dyn FnMut(&str), r: &PateResults) {
    let Some(run) = r.runs.last() else { return };
    log(&format!(
        "  {} {}: ε = {}, test accuracy {}{}",
        run.method,
        run.setting,
        fmt_opt(run.epsilon, 2),
        fmt_opt(run.test_accuracy, 3),
        run.refused
            .as_ref()
            .map_or(String::new(), |w| format!(" (refused: {w})"))
    ));
}

/// The results table as Markdown.
pub fn results_markdown(r: &PateResults) -> String {
    let c = &r.config;
    let mut s = String::from("# PATE against DP-SGD on 12-class keyword spotting\n\n");
    s.push_str(&format!("Command: `{}`\n\n", r.command));
    s.push_str(&format!(
        "Corpus `{}` ({}): {} speakers ({} takes per keyword, {} unknown words and one \
         silence clip each, generator seed {}). Speakers: {} private training, {} public \
         (unlabelled, for the students), {} validation, {} test ({} test clips, the same \
         held-out speakers for every model). {} teachers on the private speakers; every model \
         is the small CNN (`leak-cnn`, 49 × 20 fbank), {} epochs; δ = {:e}.\n\n",
        r.corpus.path.display(),
        if r.corpus.generated {
            "generated by this run"
        } else {
            "given"
        },
        r.corpus.speakers,
        r.corpus.spec.takes,
        r.corpus.spec.unknown_words,
        r.corpus.spec.seed,
        r.speakers[0],
        r.speakers[1],
        r.speakers[2],
        r.speakers[3],
        r.test_clips,
        c.teachers,
        c.epochs,
        c.delta
    ));
    s.push_str(
        "| method | setting | ε | unit | answered / queries | labels right | test accuracy | \
         seconds |\n|---|---|---|---|---|---|---|---|\n",
    );
    for run in &r.runs {
        let unit = match run.method.as_str() {
            "non-private" => "—",
            "DP-SGD" => "example",
            _ => "speaker",
        };
        let acc = match &run.refused {
            Some(why) => format!("refused: {why}"),
            None => fmt_opt(run.test_accuracy, 3),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} |\n",
            run.method,
            run.setting,
            run.epsilon.map_or("∞".into(), |e| format!("{e:.2}")),
            unit,
            match (run.answered, run.queries) {
                (Some(a), Some(q)) => format!("{a} / {q}"),
                _ => "—".into(),
            },
            fmt_opt(run.label_accuracy, 3),
            acc,
            run.seconds
        ));
    }
    s.push_str(
        "\nε: add/remove adjacency, RDP. PATE's is the labelling's data-independent bound \
         with one speaker as the unit (the data-dependent value is private and not shown: \
         `pate label --ss-sigma` releases it with smooth sensitivity); DP-SGD's is per example. \
         Accuracy over all 12 classes on the held-out test speakers. The teachers' training \
         time is not in the PATE rows' seconds.\n",
    );
    s
}

/// Test accuracy against ε, one series per method; non-private as a horizontal line.
fn plot_series(r: &PateResults) -> Vec<Series> {
    let points = r
        .runs
        .iter()
        .filter_map(|run| Some((run.method.clone(), run.epsilon?, run.test_accuracy?)));
    let baseline: Vec<(&str, f64)> = r
        .runs
        .iter()
        .find(|run| run.method == "non-private")
        .and_then(|run| run.test_accuracy)
        .map(|acc| ("non-private", acc))
        .into_iter()
        .collect();
    series_by_method(points, &baseline)
}

fn write_results(out: &Path, r: &PateResults) -> Result<(), ExperimentError> {
    write_results_and_plot(
        out,
        r,
        results_markdown(r),
        "accuracy_vs_epsilon.png",
        [
            "PATE and DP-SGD, 12-class KWS: test accuracy vs ε",
            "ε (PATE: speaker level; DP-SGD: example level)",
            "test accuracy",
        ],
        &plot_series(r),
    )
}
