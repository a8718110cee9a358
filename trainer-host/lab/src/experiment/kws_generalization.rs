//! `hush-host experiment kws-generalization`: how well a keyword spotter holds up on
//! voices it never heard.
//!
//! Held-out synthetic speakers of the engines a model trained on overstate its quality:
//! the voices of one engine share their synthesis, whoever the "speaker" is. So besides
//! the usual speaker-disjoint test (train, validation and test speakers by Speech
//! Commands' hash rule, every engine in every split), this experiment trains once per
//! held-out group — an engine, or a donor family (every voice built from one recorded
//! person, whichever engine renders it) — on the training and validation speakers of the
//! other groups, and tests on every clip of the held-out group's speakers (all splits).
//!
//! Each run reports accuracy over all classes, balanced accuracy over the keyword classes
//! (mean recall of the keywords, without `_unknown_` and `_silence_`, which overall
//! accuracy over-rewards) and the confusion matrix ([`hush_train::metrics`]). Engines and
//! voices come from the corpus's `speakers.tsv` ([`hush_corpus::synth::read_speakers`]).
//!
//! Output, rewritten after every run: `results.json` ([`KwsGeneralizationResults`]),
//! `results.md` (the table and every confusion matrix), `confusion.png` (row-normalised
//! confusion matrices, one panel per run) and each run's model package under
//! `runs/<slug>/`. The experiment assembles only: data from [`hush_train::data`],
//! training from [`hush_train::train_kws_on`], plots from [`hush_plot`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hush_device::infer::clip_samples;
use hush_models::package::SplitMetrics;
use serde::{Deserialize, Serialize};

pub use super::holdout::Holdout;
use super::holdout::{engine_counts, plan, speaker_count, split_out, PlannedRun};
use super::ExperimentError;
use hush_corpus::synth::{read_speakers, SpeakerVoice};
use hush_plot::{heatmaps, Heatmap};
use hush_train::data::{read_kws, Clip, KwsData};
use hush_train::{train_kws_on, EpochReport, KwsTrainConfig};

/// Everything the experiment decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KwsGeneralizationConfig {
    /// Output folder.
    pub out: PathBuf,
    /// Training of every run (its `data` is the corpus, with `speakers.tsv`).
    pub train: KwsTrainConfig,
    /// The groups to hold out, one run each.
    pub holdouts: Vec<Holdout>,
    /// Also train on every engine and test on the speaker-disjoint test speakers.
    pub all_engines: bool,
}

impl KwsGeneralizationConfig {
    /// Every engine held out in turn, plus the all-engines run, with `train`'s settings.
    pub fn new(train: KwsTrainConfig, out: &Path) -> Self {
        Self {
            out: out.to_path_buf(),
            train,
            holdouts: Holdout::engines(),
            all_engines: true,
        }
    }
}

/// One run's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneralizationRun {
    /// `all engines (speaker-disjoint test)` or the held-out group's name.
    pub setting: String,
    /// The held-out group (None: the all-engines run).
    pub holdout: Option<Holdout>,
    /// Training clips and speakers.
    pub train_clips: usize,
    /// Training speakers.
    pub train_speakers: usize,
    /// Test speakers.
    pub test_speakers: usize,
    /// Test metrics: accuracy, balanced keyword accuracy, confusion (rows truth).
    pub test: SplitMetrics,
    /// Validation accuracy of the kept epoch.
    pub validation_accuracy: f64,
    /// Epochs run.
    pub epochs_run: usize,
    /// The kept (best validation) epoch.
    pub best_epoch: usize,
    /// Wall-clock seconds of the run.
    pub seconds: f64,
    /// The run's model package.
    pub model: PathBuf,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KwsGeneralizationResults {
    /// The command line.
    pub command: String,
    /// The configuration.
    pub config: KwsGeneralizationConfig,
    /// Class labels (confusion rows and columns).
    pub labels: Vec<String>,
    /// Speakers per engine in the corpus.
    pub engines: BTreeMap<String, usize>,
    /// Every run so far.
    pub runs: Vec<GeneralizationRun>,
}

/// The data of a run holding `holdout` out: training and validation speakers of the other
/// groups, and every clip of the group's speakers as the test set ([`split_out`]).
pub fn holdout_split(
    data: &KwsData,
    speakers: &BTreeMap<String, SpeakerVoice>,
    holdout: &Holdout,
) -> KwsData {
    let [train, validation, test] = split_out(
        [&data.train, &data.validation, &data.test],
        speakers,
        holdout,
        |c: &Clip| &c.speaker,
    );
    KwsData {
        train,
        validation,
        test,
        noises: data.noises.clone(),
    }
}

fn speakers_of(clips: &[Clip]) -> usize {
    speaker_count(clips, |c| &c.speaker)
}

/// Runs the experiment; `log` sees one line per step and `progress` every epoch.
pub fn run_kws_generalization(
    cfg: &KwsGeneralizationConfig,
    command: &str,
    log: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(&EpochReport),
) -> Result<KwsGeneralizationResults, ExperimentError> {
    let runs = plan(&cfg.holdouts, cfg.all_engines)?;
    let train_err = |run: &str| {
        let run = run.to_string();
        move |source| ExperimentError::Train { run, source }
    };
    let corpus = &cfg.train.data;
    let speakers = read_speakers(corpus).map_err(|e| ExperimentError::Config(e.to_string()))?;
    let (labels, _, _) = cfg.train.resolve_arch().map_err(train_err("setup"))?;
    let clip_len = clip_samples(&cfg.train.features, cfg.train.frames);
    let sr = cfg.train.features.frame.sample_rate;
    let data = read_kws(corpus, &labels, sr, clip_len).map_err(train_err("reading"))?;
    let engines = engine_counts(&speakers);
    log(&format!(
        "corpus {}: {} train / {} validation / {} test clips; speakers per engine {engines:?}",
        corpus.display(),
        data.train.len(),
        data.validation.len(),
        data.test.len()
    ));
    let mut results = KwsGeneralizationResults {
        command: command.to_string(),
        config: cfg.clone(),
        labels: labels.classes.clone(),
        engines,
        runs: Vec::new(),
    };
    for PlannedRun {
        setting,
        slug,
        holdout,
    } in runs
    {
        let split = holdout.map(|h| holdout_split(&data, &speakers, h));
        let run_data = split.as_ref().unwrap_or(&data);
        if run_data.test.is_empty() || run_data.train.is_empty() {
            return Err(ExperimentError::Config(format!(
                "{setting}: no test or no training clips (is the group in speakers.tsv?)"
            )));
        }
        log(&format!(
            "{setting}: training on {} clips of {} speakers, testing on {} clips of {} speakers",
            run_data.train.len(),
            speakers_of(&run_data.train),
            run_data.test.len(),
            speakers_of(&run_data.test)
        ));
        let model = cfg.out.join("runs").join(&slug);
        let start = Instant::now();
        let report = train_kws_on(&cfg.train, run_data, &model, command, progress)
            .map_err(train_err(&setting))?;
        let metrics = report.card.metrics.clone().unwrap_or_default();
        let split_of = |name: &str| metrics.splits.get(name).cloned().unwrap_or_default();
        let provenance = report.card.provenance.as_ref();
        let run = GeneralizationRun {
            setting: setting.clone(),
            holdout: holdout.cloned(),
            train_clips: run_data.train.len(),
            train_speakers: speakers_of(&run_data.train),
            test_speakers: speakers_of(&run_data.test),
            test: split_of("test"),
            validation_accuracy: split_of("validation").accuracy,
            epochs_run: provenance.map_or(0, |p| p.epochs_run),
            best_epoch: provenance.map_or(0, |p| p.best_epoch),
            seconds: start.elapsed().as_secs_f64(),
            model,
        };
        log(&format!(
            "{setting}: test accuracy {:.3}, balanced keyword accuracy {:.3} ({:.0} s)",
            run.test.accuracy, run.test.balanced_keyword_accuracy, run.seconds
        ));
        results.runs.push(run);
        write_results(&cfg.out, &results)?;
    }
    Ok(results)
}

fn write_results(out: &Path, results: &KwsGeneralizationResults) -> Result<(), ExperimentError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExperimentError::Io { path, source }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    let json = out.join("results.json");
    let text = serde_json::to_string_pretty(results)
        .map_err(|e| ExperimentError::Config(format!("results.json: {e}")))?;
    std::fs::write(&json, text).map_err(io(&json))?;
    let md = out.join("results.md");
    std::fs::write(&md, results_markdown(results)).map_err(io(&md))?;
    let normalised: Vec<Vec<f32>> = results
        .runs
        .iter()
        .map(|r| row_normalised(&r.test.confusion))
        .collect();
    let k = results.labels.len();
    let panels: Vec<Heatmap> = results
        .runs
        .iter()
        .zip(&normalised)
        .filter(|(_, v)| v.len() == k * k && k > 0)
        .map(|(r, v)| Heatmap {
            title: &r.setting,
            values: v,
            rows: k,
            cols: k,
        })
        .collect();
    if !panels.is_empty() {
        heatmaps(
            &out.join("confusion.png"),
            &format!(
                "test confusion, row-normalised (x: true class, y: predicted; {})",
                results.labels.join(" ")
            ),
            &panels,
        )?;
    }
    Ok(())
}

/// Each row of `confusion` divided by its sum (rows of zeros stay zero), flattened.
pub fn row_normalised(confusion: &[Vec<usize>]) -> Vec<f32> {
    confusion
        .iter()
        .flat_map(|row| {
            let total: usize = row.iter().sum();
            row.iter().map(move |&c| {
                if total == 0 {
                    0.0
                } else {
                    c as f32 / total as f32
                }
            })
        })
        .collect()
}

/// The results as Markdown: the command, one table row per run, then every run's test
/// confusion matrix.
pub fn results_markdown(r: &KwsGeneralizationResults) -> String {
    let t = &r.config.train;
    let mut s = format!(
        "# Keyword spotting on voices never heard: leave-one-engine-out\n\n\
         Command: `{}`\n\n\
         Corpus `{}` (speakers per engine: {}). Architecture `{}`, {} × {} log-mel features \
         ({} ms frames every {} ms; normalisation {}), {} classes; at most {} epochs \
         (patience {}), batch {}, AdamW lr {}, seed {}, class-balanced loss {}{}. \
         Augmentation: {}.\n\n\
         | run | train clips (speakers) | test clips (speakers) | test accuracy | \
         balanced keyword accuracy | epochs (best) | seconds |\n|---|---|---|---|---|---|---|\n",
        r.command,
        t.data.display(),
        r.engines
            .iter()
            .map(|(e, n)| format!("{e} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        t.arch_name,
        t.frames,
        t.features.dim(),
        t.features.frame.frame_length_ms,
        t.features.frame.frame_shift_ms,
        serde_json::to_string(&t.features.cmvn).unwrap_or_default(),
        r.labels.len(),
        t.epochs,
        t.patience,
        t.batch_size,
        t.lr,
        t.seed,
        if t.balance_classes { "on" } else { "off" },
        if t.swa_epochs > 0 {
            format!(
                "; weights averaged over the last {} epochs at {} × lr (SWA)",
                t.swa_epochs, t.swa_lr_ratio
            )
        } else {
            String::new()
        },
        serde_json::to_string(&t.augment).unwrap_or_default(),
    );
    for run in &r.runs {
        s.push_str(&format!(
            "| {} | {} ({}) | {} ({}) | {:.3} | {:.3} | {} ({}) | {:.0} |\n",
            run.setting,
            run.train_clips,
            run.train_speakers,
            run.test.examples,
            run.test_speakers,
            run.test.accuracy,
            run.test.balanced_keyword_accuracy,
            run.epochs_run,
            run.best_epoch,
            run.seconds
        ));
    }
    s.push_str(
        "\nAccuracy is over all classes; balanced keyword accuracy is the mean recall over \
         the keywords (without `_unknown_` and `_silence_`). Held-out runs test on every \
         clip of the held-out speakers; the all-engines run on its speaker-disjoint test \
         speakers.\n",
    );
    for run in &r.runs {
        s.push_str(&format!(
            "\n## {}: test confusion (rows: truth, columns: predicted)\n\n```\n{}```\n",
            run.setting,
            confusion_text(&r.labels, &run.test.confusion)
        ));
    }
    s
}

/// A confusion matrix as aligned text, one row per true class.
pub fn confusion_text(labels: &[String], confusion: &[Vec<usize>]) -> String {
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    let cell = confusion
        .iter()
        .flatten()
        .map(|c| c.to_string().len())
        .max()
        .unwrap_or(1)
        .max(3);
    let mut s = format!("{:>width$} ", "");
    for l in labels {
        let short: String = l.chars().take(cell).collect();
        s.push_str(&format!(" {short:>cell$}"));
    }
    s.push('\n');
    for (label, row) in labels.iter().zip(confusion) {
        s.push_str(&format!("{label:>width$} "));
        for c in row {
            s.push_str(&format!(" {c:>cell$}"));
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clip(speaker: &str, class: usize) -> Clip {
        Clip {
            path: PathBuf::from(format!("{speaker}.wav")),
            speaker: speaker.to_string(),
            class,
            samples: vec![0.0; 4],
        }
    }

    #[test]
    fn holdout_moves_every_clip_of_the_group_to_test() {
        let speakers = crate::experiment::holdout::tests::speakers();
        let data = KwsData {
            train: vec![clip("a", 0), clip("b", 1), clip("c", 2)],
            validation: vec![clip("d", 0), clip("a", 1)],
            test: vec![clip("b", 2), clip("c", 1)],
            noises: vec![],
        };
        let split = holdout_split(&data, &speakers, &Holdout::Engine("festival".into()));
        let names = |c: &[Clip]| c.iter().map(|c| c.speaker.clone()).collect::<Vec<_>>();
        assert_eq!(names(&split.train), ["a", "b"]);
        assert_eq!(names(&split.validation), ["a"]);
        assert_eq!(names(&split.test), ["c", "d", "c"]);
        assert!(split.noises.is_empty());
    }

    #[test]
    fn confusion_rows_normalise_and_print() {
        let c = vec![vec![3, 1], vec![0, 0]];
        assert_eq!(row_normalised(&c), [0.75, 0.25, 0.0, 0.0]);
        let labels = vec!["yes".to_string(), "_unknown_".to_string()];
        let text = confusion_text(&labels, &c);
        assert_eq!(text.lines().count(), 3);
        assert!(text.lines().nth(1).unwrap().trim_start().starts_with("yes"));
        assert!(text.lines().nth(1).unwrap().ends_with("  3   1"));
    }
}
