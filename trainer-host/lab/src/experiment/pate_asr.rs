//! `hush-host experiment pate --task asr`: greedy WER (and CER) of CTC recognisers against
//! ε for PATE beside DP-SGD, a non-private model and the public warm-start model, on one
//! seeded speaker-disjoint split of one LibriSpeech-layout corpus.
//!
//! As in the Amazon study, every model starts from a recogniser trained on **public**
//! data (`init`, e.g. `models/asr`, trained on another, generated corpus) and is then
//! fine-tuned ([`hush_train::asr::AsrTrainConfig::init`]). The corpus's speakers are
//! shuffled by `seed` and split into:
//!
//! - **private** speakers: the non-private and DP-SGD runs fine-tune on them
//!   ([`hush_train::asr::train_asr_on`], [`hush_train::asr::train_asr_dp_on`],
//!   example = utterance level); the PATE teachers fine-tune on speaker-disjoint parts of
//!   them ([`hush_pate::asr::train_asr_teachers`]);
//! - **public** speakers: their utterances are labelled by each aggregator setting
//!   ([`hush_pate::asr::label_asr`], seeded noise, a ledger per setting; their true
//!   transcripts only score the labels) and the student fine-tunes on the answered ones
//!   ([`hush_pate::asr::train_asr_student`], validating on its own labels). The first
//!   public speaker's true transcripts are the validation split (best epoch) of the
//!   non-private and DP-SGD runs: a small labelled public dev set;
//! - **test** speakers: every model, the warm start included, is judged on them and on
//!   nothing else; none of the models trained or validated on them.
//!
//! PATE's ε is the labelling's data-independent cost with one **speaker** as the unit
//! (one speaker trains one teacher); DP-SGD's is per **utterance** (a speaker with k
//! utterances has about k times that ε by group privacy), so equal ε favours DP-SGD in
//! what it protects. Both are add/remove, RDP, at `delta`.
//!
//! Output, rewritten after every run: `results.json` ([`PateAsrResults`]), `results.md`,
//! `wer_vs_epsilon.png`; the manifests under `split/` and every model under `runs/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hush_device::dataset::{read_corpus, Target};
use hush_models::asr::normalize_transcript;
use hush_models::asr::wer::ErrorCounts;
use hush_models::package::{AsrCard, AsrSplitMetrics};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{fmt_opt, fresh_runs_dir, io_err, series_by_method, write_file};
use super::{write_results_and_plot, ExperimentError};
use hush_pate::asr::{
    label_asr, train_asr_student, train_asr_teachers, AsrAggregator, AsrLabelConfig,
};
use hush_pate::{Partition, PARTITION_JSON};
use hush_privacy::accountant::Accountant;
use hush_train::asr::{
    evaluate_package, load_asr, load_asr_any_split, train_asr_dp_on, train_asr_on, AsrTrainConfig,
};
use hush_train::{DpConfig, TrainError};

/// Everything the ASR experiment decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PateAsrExperimentConfig {
    /// ASR corpus (LibriSpeech layout or JSONL manifest), e.g. `data/corpus/asr`.
    pub data: PathBuf,
    /// The public ASR model package every model starts from (e.g. `models/asr`).
    pub init: PathBuf,
    /// Output folder.
    pub out: PathBuf,
    /// Private speakers (teachers, non-private, DP-SGD).
    pub private_speakers: usize,
    /// Public speakers (labelled by the teachers for the students).
    pub public_speakers: usize,
    /// Held-out test speakers.
    pub test_speakers: usize,
    /// At most this many utterances per speaker (`None`: all).
    pub utterances_per_speaker: Option<usize>,
    /// Number of teachers (speaker-disjoint parts of the private speakers).
    pub teachers: usize,
    /// Posterior-average settings: noise σ on every averaged posterior entry.
    pub posterior_sigmas: Vec<f64>,
    /// Transcript-vote settings: (σ, threshold T).
    pub votes: Vec<(f64, f64)>,
    /// DP-SGD target ε values.
    pub dp_epsilons: Vec<f64>,
    /// δ of every private run.
    pub delta: f64,
    /// Fine-tuning epochs of the non-private model, the teachers and the students.
    pub epochs: usize,
    /// Fine-tuning epochs of the DP-SGD runs.
    pub dp_epochs: usize,
    /// Utterances per step (non-private, teachers, students).
    pub batch_size: usize,
    /// Expected utterances per DP-SGD step.
    pub dp_batch_size: usize,
    /// Peak learning rate of non-private fine-tuning.
    pub lr: f64,
    /// Peak learning rate of DP-SGD fine-tuning.
    pub dp_lr: f64,
    /// DP-SGD clip bound (flat).
    pub dp_clip: f32,
    /// Beam width of the packages' beam-search numbers (the table shows greedy).
    pub beam: usize,
    /// Seed of the speaker split, fine-tuning, sampling and noise.
    pub seed: u64,
}

impl PateAsrExperimentConfig {
    /// The full experiment on a 20-speaker corpus: 12 private speakers (4 teachers × 3),
    /// 4 public, 4 test; posterior averaging σ ∈ {0.5, 2, 8}, transcript vote
    /// (σ, T) = (0.7, 4); DP-SGD ε ∈ {2, 8} (expected batch 16, clip 1, lr 1e-3,
    /// 4 epochs); δ = 1e-3; 5 fine-tuning epochs at lr 5e-4, batch 8.
    pub fn new(data: &Path, init: &Path, out: &Path) -> Self {
        Self {
            data: data.to_path_buf(),
            init: init.to_path_buf(),
            out: out.to_path_buf(),
            private_speakers: 12,
            public_speakers: 4,
            test_speakers: 4,
            utterances_per_speaker: None,
            teachers: 4,
            posterior_sigmas: vec![0.5, 2.0, 8.0],
            votes: vec![(0.7, 4.0)],
            dp_epsilons: vec![2.0, 8.0],
            delta: 1e-3,
            epochs: 5,
            dp_epochs: 4,
            batch_size: 8,
            dp_batch_size: 16,
            lr: 5e-4,
            dp_lr: 1e-3,
            dp_clip: 1.0,
            beam: 4,
            seed: 0,
        }
    }

    /// A pipeline check: 4 private speakers (2 teachers), 2 public, 2 test, 3 utterances
    /// each, one setting per method, 1 epoch (its numbers mean nothing).
    pub fn quick(data: &Path, init: &Path, out: &Path) -> Self {
        Self {
            private_speakers: 4,
            public_speakers: 2,
            test_speakers: 2,
            utterances_per_speaker: Some(3),
            teachers: 2,
            posterior_sigmas: vec![1.0],
            votes: vec![(0.2, 2.0)],
            dp_epsilons: vec![8.0],
            delta: 1e-2,
            epochs: 1,
            dp_epochs: 1,
            batch_size: 4,
            dp_batch_size: 4,
            beam: 1,
            ..Self::new(data, init, out)
        }
    }

    fn check(&self) -> Result<(), ExperimentError> {
        let bad = |what: String| Err(ExperimentError::Config(what));
        if self.teachers == 0 || self.private_speakers < self.teachers {
            return bad(format!(
                "--teachers: {} teachers need at least as many private speakers (there are {})",
                self.teachers, self.private_speakers
            ));
        }
        if self.public_speakers < 2 || self.test_speakers == 0 {
            return bad(
                "at least two public speakers (one also validates) and one test speaker".into(),
            );
        }
        if self.epochs == 0 || self.dp_epochs == 0 {
            return bad("--epochs: at least 1".into());
        }
        if self.utterances_per_speaker == Some(0) {
            return bad("utterances per speaker: at least 1".into());
        }
        Ok(())
    }
}

/// The speakers of every role (sorted), and each teacher's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeakerSplit {
    /// Private speakers (non-private, DP-SGD, teachers).
    pub private: Vec<String>,
    /// Each teacher's speakers (from the teachers' `partition.json`).
    pub teachers: Vec<Vec<String>>,
    /// Public speakers (labelled by the teachers, students' training data).
    pub public: Vec<String>,
    /// The validation speakers of the non-private and DP-SGD runs (public ones).
    pub validation: Vec<String>,
    /// Held-out test speakers.
    pub test: Vec<String>,
}

/// One run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PateAsrRunResult {
    /// `warm start`, `non-private`, `DP-SGD`, `PATE-posterior-average`,
    /// `PATE-transcript-vote`.
    pub method: String,
    /// The method's parameters, in words.
    pub setting: String,
    /// ε (`None`: not private); add/remove, RDP, at the config's δ.
    pub epsilon: Option<f64>,
    /// The unit ε protects: `utterance` (DP-SGD) or `speaker` (PATE); `—` otherwise.
    pub unit: String,
    /// The ledger holding the release (DP-SGD, PATE).
    pub ledger: Option<PathBuf>,
    /// The release's record id in `ledger`.
    pub ledger_record: Option<i64>,
    /// PATE: public utterances given a transcript out of `queries`.
    pub answered: Option<usize>,
    /// PATE: public utterances queried.
    pub queries: Option<usize>,
    /// PATE: WER of the answered labels against the true public transcripts.
    pub label_wer: Option<f64>,
    /// Greedy WER on the test speakers.
    pub test_wer: Option<f64>,
    /// Greedy CER on the test speakers.
    pub test_cer: Option<f64>,
    /// Why the run was refused, if it was.
    pub refused: Option<String>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PateAsrResults {
    /// The command line.
    pub command: String,
    /// The configuration.
    pub config: PateAsrExperimentConfig,
    /// The warm-start model's architecture and how it was trained (its card's provenance
    /// command and data).
    pub init_model: String,
    /// Who is where.
    pub speakers: SpeakerSplit,
    /// Test utterances.
    pub test_utterances: usize,
    /// Words in the test transcripts.
    pub test_words: usize,
    /// Seconds the teachers took (not in the PATE rows' seconds).
    pub teacher_seconds: f64,
    /// Every run so far.
    pub runs: Vec<PateAsrRunResult>,
}

/// One utterance of the corpus: audio path, speaker, raw transcript.
struct Entry {
    path: PathBuf,
    speaker: String,
    text: String,
}

/// Writes a JSONL manifest of `entries` (absolute audio paths, explicit splits).
fn write_manifest(path: &Path, entries: &[(&Entry, &str)]) -> Result<(), ExperimentError> {
    let mut text = String::new();
    for (e, split) in entries {
        let path = std::path::absolute(&e.path).map_err(io_err(&e.path))?;
        let line = serde_json::json!({
            "path": path,
            "speaker": e.speaker,
            "text": e.text,
            "split": split,
        });
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("manifest.jsonl");
    write_file(dir, name, text)
}

fn blank(method: &str, setting: String, unit: &str) -> PateAsrRunResult {
    PateAsrRunResult {
        method: method.into(),
        setting,
        epsilon: None,
        unit: unit.into(),
        ledger: None,
        ledger_record: None,
        answered: None,
        queries: None,
        label_wer: None,
        test_wer: None,
        test_cer: None,
        refused: None,
        seconds: 0.0,
    }
}

fn test_metrics(run: &mut PateAsrRunResult, m: Option<&AsrSplitMetrics>) {
    run.test_wer = m.map(|m| m.greedy_wer);
    run.test_cer = m.map(|m| m.greedy_cer);
}

/// Runs the experiment; `log` gets progress lines. Writes the results after every run.
pub fn run_pate_asr_experiment(
    cfg: &PateAsrExperimentConfig,
    command: &str,
    log: &mut dyn FnMut(&str),
) -> Result<PateAsrResults, ExperimentError> {
    cfg.check()?;
    // The starting model first: a missing or incompatible one fails before any work.
    let init_card = AsrCard::read(&cfg.init).map_err(|e| {
        ExperimentError::Config(format!(
            "--init {}: not an ASR model package: {e}",
            cfg.init.display()
        ))
    })?;
    let base = {
        let mut t = AsrTrainConfig::new(&cfg.data, init_card.arch.name());
        t.arch = Some(init_card.arch.clone());
        t.init = Some(cfg.init.clone());
        t.epochs = cfg.epochs;
        t.batch_size = cfg.batch_size;
        t.lr = cfg.lr;
        t.patience = cfg.epochs;
        t.beam = cfg.beam;
        t.seed = cfg.seed;
        t
    };
    base.resolve_arch(&hush_models::asr::Vocabulary::characters())
        .and_then(|arch| base.pretrained(&arch))
        .map_err(|source| ExperimentError::Train {
            run: format!("--init {}", cfg.init.display()),
            source,
        })?;
    let runs = fresh_runs_dir(&cfg.out)?;

    // The speaker split.
    let (_, examples) = read_corpus(&cfg.data)?;
    let mut by_speaker: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    for ex in examples {
        if let Target::Transcript(text) = ex.target {
            by_speaker
                .entry(ex.speaker.clone())
                .or_default()
                .push(Entry {
                    path: ex.path,
                    speaker: ex.speaker,
                    text,
                });
        }
    }
    for list in by_speaker.values_mut() {
        list.sort_by(|a, b| a.path.cmp(&b.path));
        if let Some(k) = cfg.utterances_per_speaker {
            list.truncate(k);
        }
    }
    let mut speakers: Vec<String> = by_speaker.keys().cloned().collect();
    let needed = cfg.private_speakers + cfg.public_speakers + cfg.test_speakers;
    if speakers.len() < needed {
        return Err(ExperimentError::Config(format!(
            "{}: {} speakers with transcripts; the split needs {needed} ({} private, {} \
             public, {} test)",
            cfg.data.display(),
            speakers.len(),
            cfg.private_speakers,
            cfg.public_speakers,
            cfg.test_speakers
        )));
    }
    speakers.shuffle(&mut ChaCha8Rng::seed_from_u64(cfg.seed));
    let (private, rest) = speakers.split_at(cfg.private_speakers);
    let (public, rest) = rest.split_at(cfg.public_speakers);
    let test = &rest[..cfg.test_speakers];
    let validation = &public[..1];
    let entries_of = |group: &[String], split: &str| -> Vec<(&Entry, String)> {
        group
            .iter()
            .flat_map(|s| by_speaker[s].iter().map(|e| (e, split.to_string())))
            .collect()
    };
    let manifest = |name: &str, parts: Vec<Vec<(&Entry, String)>>| {
        let path = cfg.out.join("split").join(name);
        let all: Vec<(&Entry, String)> = parts.into_iter().flatten().collect();
        let refs: Vec<(&Entry, &str)> = all.iter().map(|(e, s)| (*e, s.as_str())).collect();
        write_manifest(&path, &refs).map(|()| path)
    };
    // Non-private and DP-SGD: private speakers train, one public speaker validates.
    let private_manifest = manifest(
        "private.jsonl",
        vec![
            entries_of(private, "train"),
            entries_of(validation, "validation"),
            entries_of(test, "test"),
        ],
    )?;
    let teachers_manifest = manifest("teachers.jsonl", vec![entries_of(private, "train")])?;
    // Every public speaker is queried (train and validation splits are both labelled);
    // the students are judged on the test speakers.
    let public_manifest = manifest(
        "public.jsonl",
        vec![
            entries_of(&public[1..], "train"),
            entries_of(validation, "validation"),
            entries_of(test, "test"),
        ],
    )?;
    let sr = base.features.frame.sample_rate;
    let private_data = load_asr(&private_manifest, sr).map_err(train_err("private corpus"))?;
    let test_words = private_data
        .test
        .iter()
        .map(|u| u.text.split_whitespace().count())
        .sum();
    let sorted = |s: &[String]| {
        let mut v = s.to_vec();
        v.sort();
        v
    };
    let mut results = PateAsrResults {
        command: command.to_string(),
        config: cfg.clone(),
        init_model: format!(
            "{} ({} trainable parameters){}",
            init_card.arch.name(),
            init_card.num_trainable,
            init_card
                .provenance
                .as_ref()
                .map_or(String::new(), |p| format!(": `{}`", p.command))
        ),
        speakers: SpeakerSplit {
            private: sorted(private),
            teachers: Vec::new(),
            public: sorted(public),
            validation: sorted(validation),
            test: sorted(test),
        },
        test_utterances: private_data.test.len(),
        test_words,
        teacher_seconds: 0.0,
        runs: Vec::new(),
    };
    log(&format!(
        "speakers: {} private, {} public (validation: {}), {} test",
        private.len(),
        public.len(),
        validation.join(", "),
        test.len()
    ));

    // The public model alone.
    log("warm start (no fine-tuning)");
    let start = Instant::now();
    let m = evaluate_package(&cfg.init, &private_data.test, cfg.beam)
        .map_err(train_err("warm start"))?;
    let mut run = blank(
        "warm start",
        format!("{}, not fine-tuned", cfg.init.display()),
        "—",
    );
    test_metrics(&mut run, Some(&m));
    run.seconds = start.elapsed().as_secs_f64();
    push(&mut results, run, log, &cfg.out)?;

    // Non-private fine-tuning on the private speakers.
    log("non-private");
    let start = Instant::now();
    let mut train = base.clone();
    train.data = private_manifest.clone();
    let report = train_asr_on(
        &train,
        &private_data,
        &runs.join("non-private"),
        command,
        &mut |e| {
            log(&format!(
                "  epoch {}: loss {:.3}, val WER {:.3}",
                e.epoch, e.train_loss, e.val_wer
            ))
        },
    )
    .map_err(train_err("non-private"))?;
    let mut run = blank(
        "non-private",
        format!("{} epochs, lr {}", cfg.epochs, cfg.lr),
        "—",
    );
    test_metrics(&mut run, split(&report.card, "test"));
    run.seconds = start.elapsed().as_secs_f64();
    push(&mut results, run, log, &cfg.out)?;

    // DP-SGD fine-tuning on the same speakers.
    for &eps in &cfg.dp_epsilons {
        let setting = format!(
            "target ε = {eps}, C = {}, expected batch {}, {} epochs, lr {}",
            cfg.dp_clip, cfg.dp_batch_size, cfg.dp_epochs, cfg.dp_lr
        );
        log(&format!("DP-SGD, {setting}"));
        let dir = runs.join(format!("dp-sgd-eps{eps}"));
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut train = base.clone();
        train.data = private_manifest.clone();
        train.epochs = cfg.dp_epochs;
        train.patience = cfg.dp_epochs;
        train.batch_size = cfg.dp_batch_size;
        train.lr = cfg.dp_lr;
        let mut dp = DpConfig::new(eps, cfg.delta, cfg.dp_clip);
        dp.ledger = dir.join("ledger.sqlite");
        dp.reproducible = true;
        let start = Instant::now();
        let mut run = blank("DP-SGD", setting.clone(), "utterance");
        match train_asr_dp_on(
            &train,
            &dp,
            &private_data,
            &dir.join("model"),
            command,
            &mut |e| {
                log(&format!(
                    "  epoch {}: loss {:.3}, val WER {:.3}",
                    e.epoch, e.train_loss, e.val_wer
                ))
            },
        ) {
            Ok(r) => {
                run.epsilon = Some(r.privacy.epsilon_rdp.epsilon);
                run.ledger = Some(dp.ledger.clone());
                run.ledger_record = Some(r.privacy.ledger_record);
                test_metrics(&mut run, split(&r.report.card, "test"));
            }
            Err(e @ TrainError::Option { .. }) => run.refused = Some(e.to_string()),
            Err(source) => {
                return Err(ExperimentError::Train {
                    run: setting,
                    source,
                })
            }
        }
        run.seconds = start.elapsed().as_secs_f64();
        push(&mut results, run, log, &cfg.out)?;
    }

    // PATE: one ensemble, every aggregator setting.
    log(&format!("training {} teachers", cfg.teachers));
    let teachers = runs.join("teachers");
    let start = Instant::now();
    let mut teacher_cfg = base.clone();
    teacher_cfg.data = teachers_manifest.clone();
    train_asr_teachers(
        &teacher_cfg,
        cfg.teachers,
        cfg.seed,
        &teachers,
        &mut |t, n, _| log(&format!("  teacher {}/{n}", t + 1)),
    )?;
    results.teacher_seconds = start.elapsed().as_secs_f64();
    results.speakers.teachers = Partition::read(&teachers.join(PARTITION_JSON))?.teachers;
    // The true public transcripts score the labels (never the labelling itself).
    let public_truth: BTreeMap<PathBuf, String> = {
        let d = load_asr_any_split(&public_manifest, sr).map_err(train_err("public corpus"))?;
        d.train
            .into_iter()
            .chain(d.validation)
            .map(|u| {
                let rel = u
                    .path
                    .strip_prefix(&public_manifest)
                    .unwrap_or(&u.path)
                    .to_path_buf();
                (rel, u.text)
            })
            .collect()
    };
    let mut settings: Vec<AsrAggregator> = cfg
        .posterior_sigmas
        .iter()
        .map(|&sigma| AsrAggregator::PosteriorAverage { sigma })
        .collect();
    settings.extend(
        cfg.votes
            .iter()
            .map(|&(sigma, threshold)| AsrAggregator::TranscriptVote { sigma, threshold }),
    );
    for (k, aggregator) in settings.into_iter().enumerate() {
        let method = format!("PATE-{}", aggregator.name());
        let setting = match aggregator {
            AsrAggregator::PosteriorAverage { sigma } => format!("σ = {sigma}"),
            AsrAggregator::TranscriptVote { sigma, threshold } => {
                format!("σ = {sigma}, T = {threshold}")
            }
        };
        log(&format!("{method}, {setting}"));
        let dir = runs.join(format!("pate-{k}-{}", aggregator.name()));
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let start = Instant::now();
        let label_cfg = AsrLabelConfig {
            teachers: teachers.clone(),
            public: public_manifest.clone(),
            aggregator,
            delta: cfg.delta,
            ledger: dir.join("ledger.sqlite"),
            budget_epsilon: 1e12,
            accountant: Accountant::Rdp,
            seed: Some(cfg.seed.wrapping_add(k as u64)),
        };
        let mut run = blank(&method, setting.clone(), "speaker");
        let labels = match label_asr(&label_cfg, &dir.join("labels.json"), &mut |_, _| {}) {
            Ok(l) => l,
            Err(e @ hush_pate::PateError::Option { .. }) => {
                run.refused = Some(e.to_string());
                run.seconds = start.elapsed().as_secs_f64();
                push(&mut results, run, log, &cfg.out)?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        run.epsilon = Some(labels.epsilon);
        run.ledger = Some(label_cfg.ledger.clone());
        run.ledger_record = Some(labels.ledger_record);
        run.answered = Some(labels.answered);
        run.queries = Some(labels.labels.len());
        let mut wer = ErrorCounts::default();
        for l in &labels.labels {
            if let (Some(text), Some(truth)) = (&l.text, public_truth.get(&l.file)) {
                wer.add_words(&normalize_transcript(truth), text);
            }
        }
        run.label_wer = (labels.answered > 0).then(|| wer.rate());
        let mut student_cfg = base.clone();
        student_cfg.data = public_manifest.clone();
        match train_asr_student(
            &student_cfg,
            &labels,
            &dir.join("student"),
            command,
            &mut |_| {},
        ) {
            Ok(r) => test_metrics(&mut run, split(&r.card, "test")),
            Err(e) => run.refused = Some(format!("student: {e}")),
        }
        run.seconds = start.elapsed().as_secs_f64();
        push(&mut results, run, log, &cfg.out)?;
    }
    log(&format!("teachers took {:.0} s", results.teacher_seconds));
    Ok(results)
}

fn train_err(run: &str) -> impl FnOnce(TrainError) -> ExperimentError + '_ {
    move |source| ExperimentError::Train {
        run: run.to_string(),
        source,
    }
}

fn split<'a>(card: &'a AsrCard, name: &str) -> Option<&'a AsrSplitMetrics> {
    card.metrics.as_ref().and_then(|m| m.splits.get(name))
}

fn push(
    results: &mut PateAsrResults,
    run: PateAsrRunResult,
    log: &mut dyn FnMut(&str),
    out: &Path,
) -> Result<(), ExperimentError> {
    log(&format!(
        "  {} {}: ε = {}, test WER {}, CER {}{}",
        run.method,
        run.setting,
        fmt_opt(run.epsilon, 2),
        fmt_opt(run.test_wer, 3),
        fmt_opt(run.test_cer, 3),
        run.refused
            .as_ref()
            .map_or(String::new(), |w| format!(" (refused: {w})"))
    ));
    results.runs.push(run);
    write_results(out, results)
}

/// The results table as Markdown.
pub fn results_markdown(r: &PateAsrResults) -> String {
    let c = &r.config;
    let mut s = String::from("# PATE against DP-SGD on CTC speech recognition (WER)\n\n");
    s.push_str(&format!("Command: `{}`\n\n", r.command));
    s.push_str(&format!(
        "Corpus `{}`{}; speakers split by seed {}: {} private ({} teachers: {}), {} public \
         (labelled by the teachers; {} also validates the non-private and DP-SGD runs with \
         its true transcripts), {} test ({} utterances, {} words; no model saw them). Every \
         model starts from the public model `{}` — {} — and is fine-tuned {} epochs (DP-SGD: \
         {}); δ = {:e}.\n\n",
        c.data.display(),
        c.utterances_per_speaker.map_or(String::new(), |k| format!(
            " (at most {k} utterances per speaker)"
        )),
        c.seed,
        r.speakers.private.len(),
        c.teachers,
        r.speakers
            .teachers
            .iter()
            .map(|t| format!("{} speakers", t.len()))
            .collect::<Vec<_>>()
            .join(", "),
        r.speakers.public.len(),
        r.speakers.validation.join(", "),
        r.speakers.test.len(),
        r.test_utterances,
        r.test_words,
        c.init.display(),
        r.init_model,
        c.epochs,
        c.dp_epochs,
        c.delta
    ));
    s.push_str(
        "| method | setting | ε | unit | answered / queries | label WER | test WER | test CER \
         | seconds |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for run in &r.runs {
        let wer = match &run.refused {
            Some(why) => format!("refused: {why}"),
            None => fmt_opt(run.test_wer, 3),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} |\n",
            run.method,
            run.setting,
            match (run.epsilon, &run.refused) {
                (Some(e), _) => format!("{e:.2}"),
                (None, Some(_)) => "—".into(),
                (None, None) => "∞".into(),
            },
            run.unit,
            match (run.answered, run.queries) {
                (Some(a), Some(q)) => format!("{a} / {q}"),
                _ => "—".into(),
            },
            fmt_opt(run.label_wer, 3),
            wer,
            fmt_opt(run.test_cer, 3),
            run.seconds
        ));
    }
    s.push_str(&format!(
        "\nε: add/remove adjacency, RDP, at δ = {:e}. PATE's is the labelling's \
         data-independent cost with one speaker as the unit; DP-SGD's is per utterance (a \
         speaker with k utterances has about k times that ε). Greedy WER and CER on the \
         held-out test speakers. The teachers' training ({:.0} s) is not in the PATE rows' \
         seconds.\n",
        c.delta, r.teacher_seconds
    ));
    s
}

fn write_results(out: &Path, r: &PateAsrResults) -> Result<(), ExperimentError> {
    let points = r
        .runs
        .iter()
        .filter_map(|run| Some((run.method.clone(), run.epsilon?, run.test_wer?)));
    let baselines: Vec<(&str, f64)> = r
        .runs
        .iter()
        .filter(|run| run.epsilon.is_none())
        .filter_map(|run| Some((run.method.as_str(), run.test_wer?)))
        .collect();
    write_results_and_plot(
        out,
        r,
        results_markdown(r),
        "wer_vs_epsilon.png",
        [
            "PATE and DP-SGD fine-tuning, CTC ASR: test WER vs ε",
            "ε (PATE: speaker level; DP-SGD: utterance level)",
            "test WER (greedy)",
        ],
        &series_by_method(points, &baselines),
    )
}
