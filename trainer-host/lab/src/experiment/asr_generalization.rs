//! `hush-host experiment asr-generalization`: how well a CTC recogniser holds up on voices
//! it never heard — [`super::kws_generalization`]'s question for speech recognition.
//!
//! One run trains on every engine and tests on the corpus's speaker-disjoint test
//! speakers; then one run per held-out group (an engine or a donor family,
//! [`Holdout`]) trains from scratch on the other groups' training and validation speakers
//! and tests on every utterance of the group's speakers ([`split_out`]). Every run trains
//! alike (the same [`AsrTrainConfig`]), so the gap between the all-engines row and a
//! held-out row is what the unheard voices cost.
//!
//! Each run reports greedy and beam-search WER and CER on its test set. Output, rewritten
//! after every run: `results.json` ([`AsrGeneralizationResults`]), `results.md`,
//! `validation_wer.png` (each run's validation WER per epoch, one line per run) and each
//! run's model package under `runs/<slug>/`.
//! Data from [`hush_train::asr::load_asr`], training from
//! [`hush_train::asr::train_asr_on`], the plot from [`hush_plot`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use hush_models::asr::vocab::Vocabulary;
use hush_models::package::AsrSplitMetrics;
use serde::{Deserialize, Serialize};

use super::holdout::{engine_counts, plan, speaker_count, split_out, Holdout, PlannedRun};
use super::{fmt_opt, write_results_and_plot, ExperimentError};
use hush_corpus::synth::read_speakers;
use hush_plot::Series;
use hush_train::asr::{load_asr, train_asr_on, AsrData, AsrEpochReport, AsrTrainConfig, Utterance};

/// Everything the experiment decides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsrGeneralizationConfig {
    /// Output folder.
    pub out: PathBuf,
    /// Training of every run (its `data` is the corpus, with `speakers.tsv`).
    pub train: AsrTrainConfig,
    /// The groups to hold out, one run each.
    pub holdouts: Vec<Holdout>,
    /// Also train on every engine and test on the speaker-disjoint test speakers.
    pub all_engines: bool,
}

impl AsrGeneralizationConfig {
    /// Every engine held out in turn, plus the all-engines run, with `train`'s settings.
    pub fn new(train: AsrTrainConfig, out: &Path) -> Self {
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
pub struct AsrGeneralizationRun {
    /// `all engines (speaker-disjoint test)` or the held-out group's name.
    pub setting: String,
    /// The held-out group (None: the all-engines run).
    pub holdout: Option<Holdout>,
    /// Training utterances.
    pub train_utterances: usize,
    /// Training speakers.
    pub train_speakers: usize,
    /// Test speakers.
    pub test_speakers: usize,
    /// Test error rates (greedy and beam search).
    pub test: AsrSplitMetrics,
    /// Validation greedy WER of the kept epoch.
    pub validation_wer: f64,
    /// Epochs run.
    pub epochs_run: usize,
    /// The kept (best validation) epoch.
    pub best_epoch: usize,
    /// Validation greedy WER after every epoch.
    pub validation_curve: Vec<f64>,
    /// Wall-clock seconds of the run.
    pub seconds: f64,
    /// The run's model package.
    pub model: PathBuf,
}

/// `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AsrGeneralizationResults {
    /// The command line.
    pub command: String,
    /// The configuration.
    pub config: AsrGeneralizationConfig,
    /// Speakers per engine in the corpus.
    pub engines: BTreeMap<String, usize>,
    /// Every run so far.
    pub runs: Vec<AsrGeneralizationRun>,
}

fn speakers_of(utts: &[Utterance]) -> usize {
    speaker_count(utts, |u| &u.speaker)
}

/// Runs the experiment; `log` sees one line per step and `progress` every epoch.
pub fn run_asr_generalization(
    cfg: &AsrGeneralizationConfig,
    command: &str,
    log: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(&AsrEpochReport),
) -> Result<AsrGeneralizationResults, ExperimentError> {
    let runs = plan(&cfg.holdouts, cfg.all_engines)?;
    if cfg.train.init.is_some() {
        // A package or encoder trained on every engine would leak the held-out voices.
        return Err(ExperimentError::Config(
            "every run trains from scratch: --init would bring in the held-out voices".into(),
        ));
    }
    let train_err = |run: &str| {
        let run = run.to_string();
        move |source| ExperimentError::Train { run, source }
    };
    let corpus = &cfg.train.data;
    let speakers = read_speakers(corpus).map_err(|e| ExperimentError::Config(e.to_string()))?;
    // A bad architecture fails before the corpus is decoded.
    cfg.train
        .resolve_arch(&Vocabulary::characters())
        .map_err(train_err("setup"))?;
    let data =
        load_asr(corpus, cfg.train.features.frame.sample_rate).map_err(train_err("reading"))?;
    let engines = engine_counts(&speakers);
    log(&format!(
        "corpus {}: {} train / {} validation / {} test utterances; speakers per engine \
         {engines:?}",
        corpus.display(),
        data.train.len(),
        data.validation.len(),
        data.test.len()
    ));
    let mut results = AsrGeneralizationResults {
        command: command.to_string(),
        config: cfg.clone(),
        engines,
        runs: Vec::new(),
    };
    for PlannedRun {
        setting,
        slug,
        holdout,
    } in runs
    {
        let split = holdout.map(|h| {
            let [train, validation, test] = split_out(
                [&data.train, &data.validation, &data.test],
                &speakers,
                h,
                |u: &Utterance| &u.speaker,
            );
            AsrData {
                train,
                validation,
                test,
                noises: data.noises.clone(),
            }
        });
        let run_data = split.as_ref().unwrap_or(&data);
        if run_data.test.is_empty() || run_data.train.is_empty() || run_data.validation.is_empty() {
            return Err(ExperimentError::Config(format!(
                "{setting}: no training, validation or test utterances (is the group in \
                 speakers.tsv?)"
            )));
        }
        log(&format!(
            "{setting}: training on {} utterances of {} speakers, testing on {} utterances of \
             {} speakers",
            run_data.train.len(),
            speakers_of(&run_data.train),
            run_data.test.len(),
            speakers_of(&run_data.test)
        ));
        let model = cfg.out.join("runs").join(&slug);
        let start = Instant::now();
        let report = train_asr_on(&cfg.train, run_data, &model, command, progress)
            .map_err(train_err(&setting))?;
        let metrics = report.card.metrics.clone().unwrap_or_default();
        let split_of = |name: &str| metrics.splits.get(name).cloned().unwrap_or_default();
        let provenance = report.card.provenance.as_ref();
        let run = AsrGeneralizationRun {
            setting: setting.clone(),
            holdout: holdout.cloned(),
            train_utterances: run_data.train.len(),
            train_speakers: speakers_of(&run_data.train),
            test_speakers: speakers_of(&run_data.test),
            test: split_of("test"),
            validation_wer: split_of("validation").greedy_wer,
            epochs_run: provenance.map_or(0, |p| p.epochs_run),
            best_epoch: provenance.map_or(0, |p| p.best_epoch),
            validation_curve: report.epochs.iter().map(|e| e.val_wer).collect(),
            seconds: start.elapsed().as_secs_f64(),
            model,
        };
        log(&format!(
            "{setting}: test greedy WER {:.3} (CER {:.3}), beam WER {} ({:.0} s)",
            run.test.greedy_wer,
            run.test.greedy_cer,
            fmt_opt(run.test.beam_wer, 3),
            run.seconds
        ));
        results.runs.push(run);
        write_results(&cfg.out, &results)?;
    }
    Ok(results)
}

fn write_results(out: &Path, results: &AsrGeneralizationResults) -> Result<(), ExperimentError> {
    std::fs::create_dir_all(out).map_err(super::io_err(out))?;
    let series: Vec<Series> = results
        .runs
        .iter()
        .map(|r| Series {
            name: r.setting.clone(),
            points: (1..)
                .zip(&r.validation_curve)
                .map(|(epoch, &wer)| (epoch as f64, wer))
                .collect(),
        })
        .collect();
    write_results_and_plot(
        out,
        results,
        results_markdown(results),
        "validation_wer.png",
        [
            "ASR leave-one-engine-out: validation WER per epoch",
            "epoch",
            "greedy WER (validation speakers of the training groups)",
        ],
        &series,
    )
}

/// The results as Markdown: the command, the setup and one table row per run.
pub fn results_markdown(r: &AsrGeneralizationResults) -> String {
    let t = &r.config.train;
    let mut s = format!(
        "# Speech recognition on voices never heard: leave-one-engine-out\n\n\
         Command: `{}`\n\n\
         Corpus `{}` (speakers per engine: {}). Architecture `{}`, {}-value {:?} features; \
         every run from scratch, at most {} epochs (patience {}), batch {}, AdamW lr {}, \
         seed {}; beam width {}. Augmentation: {}.\n\n\
         | row | run | train utterances (speakers) | test utterances (speakers) | greedy WER \
         | greedy CER | beam WER | beam CER | validation WER | epochs (best) | seconds |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
        r.command,
        t.data.display(),
        r.engines
            .iter()
            .map(|(e, n)| format!("{e} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        t.arch_name,
        t.features.dim(),
        t.features.kind,
        t.epochs,
        t.patience,
        t.batch_size,
        t.lr,
        t.seed,
        t.beam,
        serde_json::to_string(&t.augment).unwrap_or_default(),
    );
    for (i, run) in r.runs.iter().enumerate() {
        s.push_str(&format!(
            "| {} | {} | {} ({}) | {} ({}) | {:.3} | {:.3} | {} | {} | {:.3} | {} ({}) | {:.0} |\n",
            i + 1,
            run.setting,
            run.train_utterances,
            run.train_speakers,
            run.test.utterances,
            run.test_speakers,
            run.test.greedy_wer,
            run.test.greedy_cer,
            fmt_opt(run.test.beam_wer, 3),
            fmt_opt(run.test.beam_cer, 3),
            run.validation_wer,
            run.epochs_run,
            run.best_epoch,
            run.seconds
        ));
    }
    s.push_str(
        "\nHeld-out runs test on every utterance of the held-out speakers; the all-engines \
         run on its speaker-disjoint test speakers. WER and CER are edit distances over \
         words and characters divided by the reference's length.\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_is_refused_and_an_empty_plan_too() {
        let out = Path::new("/nonexistent/out");
        let mut train = AsrTrainConfig::new(Path::new("/nonexistent/corpus"), "ctc-gru-small");
        train.init = Some(PathBuf::from("models/asr"));
        let cfg = AsrGeneralizationConfig::new(train.clone(), out);
        let err = run_asr_generalization(&cfg, "test", &mut |_| {}, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("--init"), "{err}");
        train.init = None;
        let mut cfg = AsrGeneralizationConfig::new(train, out);
        cfg.holdouts.clear();
        cfg.all_engines = false;
        let err = run_asr_generalization(&cfg, "test", &mut |_| {}, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("nothing to run"), "{err}");
    }

    #[test]
    fn markdown_has_one_row_per_run() {
        let train = AsrTrainConfig::new(Path::new("corpus"), "ctc-gru");
        let run = |setting: &str, wer: f64| AsrGeneralizationRun {
            setting: setting.to_string(),
            holdout: None,
            train_utterances: 10,
            train_speakers: 2,
            test_speakers: 1,
            test: AsrSplitMetrics {
                utterances: 5,
                words: 20,
                greedy_wer: wer,
                greedy_cer: wer / 2.0,
                beam_width: Some(8),
                beam_wer: Some(wer),
                beam_cer: None,
            },
            validation_wer: 0.5,
            epochs_run: 3,
            best_epoch: 2,
            validation_curve: vec![0.9, 0.5, 0.6],
            seconds: 1.0,
            model: PathBuf::from("runs/all"),
        };
        let mut engines = BTreeMap::new();
        engines.insert("flite".to_string(), 2);
        let r = AsrGeneralizationResults {
            command: "hush-host experiment asr-generalization".into(),
            config: AsrGeneralizationConfig::new(train, Path::new("out")),
            engines,
            runs: vec![run("all engines", 0.25), run("engine flite", 0.75)],
        };
        let md = results_markdown(&r);
        assert!(md.contains("flite 2"), "{md}");
        assert!(
            md.contains("| 1 | all engines | 10 (2) | 5 (1) | 0.250 | 0.125 | 0.250 | — |"),
            "{md}"
        );
        assert!(md.contains("| 2 | engine flite |"), "{md}");
    }
}
